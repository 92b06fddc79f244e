import Foundation
import JOSE

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
    /// Larger responses are refused. Default: 1 MiB.
    public var maximumBytes = 1 << 20

    /// - Parameter timeout: per-request timeout.
    public init(timeout: TimeInterval) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        session = URLSession(configuration: configuration)
    }

    /// True for `https`, and for `http` only to 127.0.0.0/8, `localhost` and `[::1]`.
    public static func isAllowed(_ url: URL) -> Bool {
        switch url.scheme?.lowercased() {
        case "https": return url.host != nil
        case "http":
            guard let host = url.host?.lowercased() else { return false }
            return host == "localhost" || host == "::1" || host == "[::1]" || host.hasPrefix("127.")
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
            (data, response) = try await session.data(for: request)
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
