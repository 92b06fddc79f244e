import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A minimal HTTP/1.1 server for orchestrator probes and metrics: `GET /livez`, `/readyz`, `/metrics`.
///
/// Each path maps to a check that returns a status and a body; anything else is 404. One thread
/// accepts; each request is answered and the connection closed.
public final class HealthServer: Service, @unchecked Sendable {
    // @unchecked: `socket` is written once before the accept thread starts; the rest is immutable or atomic.
    public typealias Check = @Sendable () async -> (status: Int, body: String)

    private let host: String
    private let requestedPort: UInt16
    private let routes: [String: Check]
    private let logger: Logger
    private var socket: Int32 = -1
    private let stopped = Atomic<Bool>(false)
    private let boundPort = Atomic<Int>(0)

    /// - Parameters:
    ///   - host: address to listen on. Default: all interfaces (probes come from the orchestrator).
    ///   - port: 0 picks a free port (tests).
    public init(host: String = "0.0.0.0", port: UInt16, routes: [String: Check], logger: Logger) {
        self.host = host
        self.requestedPort = port
        self.routes = routes
        self.logger = logger
    }

    /// The port actually listened on, once `run()` has bound it.
    public var port: UInt16 { UInt16(boundPort.load(ordering: .acquiring)) }

    public func run() async throws {
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HealthServerError(reason: "socket() failed") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr(host)
        address.sin_port = requestedPort.bigEndian
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            close(fd)
            throw HealthServerError(reason: "cannot listen on \(host):\(requestedPort)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        socket = fd
        boundPort.store(Int(UInt16(bigEndian: address.sin_port)), ordering: .releasing)
        logger.info("Health endpoint listening", metadata: ["http.port": String(port)])
        while !stopped.load(ordering: .acquiring) {
            let client = await acceptOne(fd)
            guard client >= 0 else { continue }
            await answer(client)
        }
    }

    public func triggerGracefulShutdown() {
        stopped.store(true, ordering: .releasing)
        if socket >= 0 { shutdown(socket, Int32(SHUT_RDWR)) }
    }

    /// Waits for a connection without blocking a cooperative thread: poll with a short timeout.
    private func acceptOne(_ fd: Int32) async -> Int32 {
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while !stopped.load(ordering: .acquiring) {
            if poll(&descriptor, 1, 0) > 0 { return accept(fd, nil, nil) }
            try? await Task.sleep(for: .milliseconds(50))
        }
        close(fd)
        return -1
    }

    private func answer(_ client: Int32) async {
        defer { close(client) }
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8](repeating: 0, count: 2048)
        let count = read(client, &buffer, buffer.count)
        guard count > 0 else { return }
        let line = String(decoding: buffer[0..<count].prefix { $0 != 0x0D && $0 != 0x0A }, as: UTF8.self)
        let parts = line.split(separator: " ")
        let path = parts.count >= 2 ? String(parts[1].split(separator: "?").first ?? "") : ""
        let (status, body): (Int, String)
        if parts.first == "GET", let check = routes[path] {
            (status, body) = await check()
        } else {
            (status, body) = (404, "not found\n")
        }
        let reason = status == 200 ? "OK" : (status == 404 ? "Not Found" : "Service Unavailable")
        let contentType = path == "/metrics" ? "text/plain; version=0.0.4" : "text/plain"
        let response = Array(
            "HTTP/1.1 \(status) \(reason)\r\nContent-Type: \(contentType)\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
                .utf8)
        var offset = 0
        while offset < response.count {
            let written = response[offset...].withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
            if written <= 0 { return }
            offset += written
        }
    }
}

public struct HealthServerError: Error, CustomStringConvertible {
    public var reason: String
    public var description: String { reason }
}
