import Foundation
import JOSE
import ServiceKit

#if canImport(Glibc)
    import Glibc
#endif

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A fetched document and how long the server says it may be cached.
public struct FetchedDocument: Sendable {
    public var body: Data
    /// `Cache-Control: max-age`, when the response had one.
    public var maxAge: TimeInterval?

    public init(body: Data, maxAge: TimeInterval?) {
        self.body = body
        self.maxAge = maxAge
    }
}

/// Fetches provider documents (key sets, discovery). Replaced in unit tests.
public protocol DocumentFetcher: Sendable {
    /// - Throws: `FetchError` when the document cannot be had.
    func fetch(_ url: URL) async throws -> FetchedDocument
}

/// Why a fetch failed. The URL is not secret; bodies are never included.
public struct FetchError: Error, CustomStringConvertible, Equatable {
    public var reason: String

    public init(_ reason: String) { self.reason = reason }

    public var description: String { reason }
}

/// Fetches over HTTPS with FoundationNetworking. Plain HTTP is refused except to loopback
/// addresses (tests and the local setup).
public struct HTTPDocumentFetcher: DocumentFetcher {
    private let session: URLSession
    private let timeout: Duration
    /// Larger responses are refused. Default: 1 MiB.
    public var maximumBytes = 1 << 20

    /// - Parameter timeout: per-request timeout, enforced by the fetcher itself (URLSession's own
    ///   timers are coarse: on a loaded machine a 1 s timeout took over 15 s).
    public init(timeout: TimeInterval) {
        self.timeout = .milliseconds(Int64(timeout * 1000))
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        session = URLSession(configuration: configuration)
    }

    /// True for `https`, and for `http` only to a loopback address: an IPv4 literal in
    /// 127.0.0.0/8, the IPv6 literal `[::1]`, or `localhost` when everything it resolves to is
    /// loopback. Decided by address, never by the text: `http://127.attacker.example` is a DNS
    /// name like any other, and refused.
    public static func isAllowed(_ url: URL) -> Bool {
        switch url.scheme?.lowercased() {
        case "https": return url.host != nil
        case "http":
            guard var host = url.host?.lowercased() else { return false }
            if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            if let literal = LoopbackCheck.literal(host) { return literal }
            return host == "localhost" && LoopbackCheck.resolvesOnlyToLoopback(host)
        default: return false
        }
    }

    public func fetch(_ url: URL) async throws -> FetchedDocument {
        guard Self.isAllowed(url) else {
            throw FetchError("refusing to fetch keys over \(url.scheme ?? "?"): use https")
        }
        var request = URLRequest(url: url)
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await HTTPExchange.data(for: request, session: session, timeout: timeout)
        } catch is HTTPExchange.TimedOut {
            throw FetchError("\(url.absoluteString) did not answer within \(timeout)")
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw FetchError("fetching \(url.absoluteString) failed: \(error.localizedDescription)")
        }
        guard let http = response as? HTTPURLResponse else { throw FetchError("not an HTTP response") }
        guard http.statusCode == 200 else { throw FetchError("\(url.absoluteString) answered HTTP \(http.statusCode)") }
        guard data.count <= maximumBytes else {
            throw FetchError("\(url.absoluteString) sent more than \(maximumBytes) bytes")
        }
        return FetchedDocument(body: data, maxAge: Self.maxAge(http.value(forHTTPHeaderField: "Cache-Control")))
    }

    /// `max-age` of a `Cache-Control` header; nil when absent, `no-cache` or `no-store` give 0.
    public static func maxAge(_ header: String?) -> TimeInterval? {
        guard let header else { return nil }
        var result: TimeInterval?
        for directive in header.lowercased().split(separator: ",") {
            let parts = directive.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            switch parts.first {
            case "max-age":
                if parts.count == 2, let seconds = TimeInterval(parts[1].trimmingCharacters(in: .whitespaces)),
                    seconds >= 0
                {
                    result = result ?? seconds
                }
            case "no-cache", "no-store":
                return 0
            default:
                continue
            }
        }
        return result
    }
}

/// Whether a host is a loopback address, by address.
enum LoopbackCheck {
    /// For an IP literal, whether it is loopback; nil when `host` is not an IP literal.
    static func literal(_ host: String) -> Bool? {
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            return UInt32(bigEndian: v4.s_addr) >> 24 == 127
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, host, &v6) == 1 {
            return isLoopback(v6)
        }
        return nil
    }

    /// True when `host` resolves, and every address it resolves to is loopback.
    static func resolvesOnlyToLoopback(_ host: String) -> Bool {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        // Any socket type: each address may come back more than once, which changes nothing here.
        hints.ai_socktype = 0
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &list) == 0, let first = list else { return false }
        defer { freeaddrinfo(first) }
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        var any = false
        while let entry = cursor {
            defer { cursor = entry.pointee.ai_next }
            guard let address = entry.pointee.ai_addr else { return false }
            switch Int32(address.pointee.sa_family) {
            case AF_INET:
                let ip = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
                guard UInt32(bigEndian: ip.s_addr) >> 24 == 127 else { return false }
            case AF_INET6:
                let ip = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
                guard isLoopback(ip) else { return false }
            default:
                return false
            }
            any = true
        }
        return any
    }

    /// `::1`, or an IPv4-mapped address in 127.0.0.0/8.
    private static func isLoopback(_ address: in6_addr) -> Bool {
        let bytes = withUnsafeBytes(of: address) { Array($0) }
        if bytes[0..<15].allSatisfy({ $0 == 0 }), bytes[15] == 1 { return true }
        return bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff && bytes[12] == 127
    }
}
