import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A minimal HTTP/1.1 server for orchestrator probes and metrics: `GET /livez`, `/readyz`, `/metrics`.
///
/// Each path maps to a check that answers at once from state the application keeps current (it
/// must never wait on PostgreSQL or the broker); anything else is 404. One thread of its own runs
/// an event loop over the listening socket and every open connection, so connections are served
/// side by side: a client that connects and sends nothing holds nothing up, and is closed after
/// `requestTimeout`. Each request is answered and its connection closed. At
/// `maximumConnections`, a new connection closes the oldest open one: a flood of idle sockets
/// pushes only itself out, and an orchestrator's probe (which sends its request as it connects)
/// is answered as it is accepted.
public final class HealthServer: Service, @unchecked Sendable {
    // @unchecked: the listening socket is owned by the server thread; the rest is immutable or atomic.
    public typealias Check = @Sendable () -> (status: Int, body: String)
    /// A route that chooses its content type and headers (documents with caching headers).
    public typealias Respond = @Sendable () -> HTTPResponse

    private let host: String
    private let requestedPort: UInt16
    private let routes: [String: Check]
    private let responses: [String: Respond]
    /// Documents whose paths change while it runs (each tenant's keys), asked after the fixed ones.
    private let documents: (@Sendable (String) -> HTTPResponse?)?
    private let logger: Logger
    private let stopped = Atomic<Bool>(false)
    private let boundPort = Atomic<Int>(0)
    /// Written once at shutdown: wakes the event loop, which otherwise sleeps until a connection
    /// arrives or one's deadline passes (an idle worker's probe port costs no wake-ups).
    private let stopPipe: (read: Int32, write: Int32) = {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return (-1, -1) }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)
        return (fds[0], fds[1])
    }()
    private var stopSignal: Int32 { stopPipe.read }
    /// How long a connection may take to send its request line. Default: 200 ms.
    public let requestTimeout: Duration
    /// Connections open at once at most; beyond it, each new one closes the oldest. Default: 256
    /// (a few kilobytes each: room for a flood of idle sockets before eviction is needed at all).
    public let maximumConnections: Int

    /// - Parameters:
    ///   - host: IPv4 address to listen on (`0.0.0.0`: every interface, as an orchestrator probes).
    ///   - port: 0 picks a free port (tests).
    public init(
        host: String = "0.0.0.0", port: UInt16, routes: [String: Check], responses: [String: Respond] = [:],
        documents: (@Sendable (String) -> HTTPResponse?)? = nil, logger: Logger,
        requestTimeout: Duration = .milliseconds(200), maximumConnections: Int = 256
    ) {
        self.responses = responses
        self.documents = documents
        self.host = host
        self.requestedPort = port
        self.routes = routes
        self.logger = logger
        self.requestTimeout = requestTimeout
        self.maximumConnections = maximumConnections
    }

    deinit {
        for fd in [stopPipe.read, stopPipe.write] where fd >= 0 { close(fd) }
    }

    /// The port actually listened on, once `run()` has bound it.
    public var port: UInt16 { UInt16(boundPort.load(ordering: .acquiring)) }

    public func run() async throws {
        let fd = try listen()
        logger.info("Health endpoint listening", metadata: ["http.port": String(port), "http.host": host])
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let thread = Thread { [self] in
                ThreadExecutor.nameCurrentThread("health-server")
                serve(fd)
                close(fd)
                continuation.resume()
            }
            thread.name = "health-server"
            thread.start()
        }
    }

    public func triggerGracefulShutdown() {
        stopped.store(true, ordering: .releasing)
        if stopPipe.write >= 0 {
            var byte: UInt8 = 1
            _ = write(stopPipe.write, &byte, 1)
        }
    }

    private func listen() throws -> Int32 {
        // Close-on-exec, as every descriptor of the server: a program the host process starts
        // must not keep the port (or a client's connection) open after the server closed it.
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HealthServerError(reason: "socket() failed") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
            close(fd)
            throw HealthServerError(reason: "\(host) is not an IPv4 address")
        }
        address.sin_port = requestedPort.bigEndian
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, Glibc.listen(fd, 1024) == 0 else {
            close(fd)
            throw HealthServerError(reason: "cannot listen on \(host):\(requestedPort)")
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        boundPort.store(Int(UInt16(bigEndian: address.sin_port)), ordering: .releasing)
        return fd
    }

    /// An open connection: what it has sent so far, and when it must have sent its request line.
    private struct Connection {
        let fd: Int32
        let deadline: ContinuousClock.Instant
        var received: [UInt8] = []
    }

    /// `accept4(listener, nil, nil, SOCK_CLOEXEC | SOCK_NONBLOCK)`: the connection is close-on-exec
    /// and non-blocking from its first instant, so a program another thread of the process starts
    /// meanwhile cannot inherit it (`accept` and then `fcntl` left a window, which a test saw).
    /// Glibc's Swift module leaves `accept4` out (it is declared only with `_GNU_SOURCE`), so it
    /// is looked up once in the C library; where it is missing, `accept` and `fcntl` as before.
    static func acceptCloseOnExec(_ listener: Int32) -> Int32 {
        typealias Accept4 =
            @convention(c) (Int32, UnsafeMutablePointer<sockaddr>?, UnsafeMutablePointer<socklen_t>?, Int32) -> Int32
        if let address = accept4Address, let pointer = UnsafeRawPointer(bitPattern: address) {
            let accept4 = unsafeBitCast(pointer, to: Accept4.self)
            return accept4(listener, nil, nil, Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue))
        }
        let client = accept(listener, nil, nil)
        guard client >= 0 else { return client }
        _ = fcntl(client, F_SETFD, FD_CLOEXEC)
        _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK)
        return client
    }

    /// Where the C library's `accept4` is (`dlsym` with the default search, `RTLD_DEFAULT`); nil
    /// when it has none.
    private static let accept4Address: Int? = dlsym(nil, "accept4").map { Int(bitPattern: $0) }

    /// Whether connections are accepted close-on-exec in one call (`accept4` found).
    public static var acceptsCloseOnExecAtOnce: Bool { accept4Address != nil }

    /// The event loop: accept, read request lines as they arrive, answer, close; until stopped.
    private func serve(_ listener: Int32) {
        var connections: [Connection] = []
        while !stopped.load(ordering: .acquiring) {
            var descriptors = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0)]
            descriptors += connections.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
            descriptors.append(pollfd(fd: stopSignal, events: Int16(POLLIN), revents: 0))
            // Sleep until something arrives, the stop signal, or the first connection's deadline
            // (without the signal, a second at most, to notice a stop all the same).
            var timeout: Int32 = stopSignal >= 0 ? -1 : 1000
            if let first = connections.map(\.deadline).min() {
                let left = ContinuousClock.now.duration(to: first)
                timeout = max(
                    1,
                    Int32(
                        clamping: left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000
                            + 1))
            }
            _ = poll(&descriptors, nfds_t(descriptors.count), timeout)
            let now = ContinuousClock.now
            var open: [Connection] = []
            for (index, var connection) in connections.enumerated() {
                let events = descriptors[index + 1].revents
                if events & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                    guard receive(&connection) == .waiting else { continue }
                }
                if now >= connection.deadline {
                    close(connection.fd)
                    continue
                }
                open.append(connection)
            }
            connections = open
            if descriptors[0].revents & Int16(POLLIN) != 0 {
                while true {
                    let client = Self.acceptCloseOnExec(listener)
                    guard client >= 0 else { break }
                    var connection = Connection(fd: client, deadline: now + requestTimeout)
                    // A probe sends its request with the connection: answered here, it never
                    // waits for a slot.
                    guard receive(&connection) == .waiting else { continue }
                    // Full: the oldest connection, which has sent nothing usable for the
                    // longest, makes room. Idle sockets cannot starve a probe that way; they
                    // only push each other out.
                    if connections.count >= maximumConnections, !connections.isEmpty {
                        close(connections.removeFirst().fd)
                    }
                    connections.append(connection)
                }
            }
        }
        for connection in connections { close(connection.fd) }
    }

    /// What reading a connection came to.
    private enum Reception {
        /// Its request line is not complete yet: it stays open.
        case waiting
        /// Answered (or gone, or over the size limit): closed.
        case closed
    }

    /// Reads what a connection has sent; answers and closes it once its request line is in.
    private func receive(_ connection: inout Connection) -> Reception {
        var buffer = [UInt8](repeating: 0, count: 2048)
        let count = read(connection.fd, &buffer, buffer.count)
        if count < 0, errno == EAGAIN || errno == EWOULDBLOCK { return .waiting }
        if count <= 0 {
            close(connection.fd)
            return .closed
        }
        connection.received += buffer[0..<count]
        if let end = connection.received.firstIndex(where: { $0 == 0x0D || $0 == 0x0A }) {
            answer(connection.fd, requestLine: Array(connection.received[..<end]))
            close(connection.fd)
            return .closed
        }
        if connection.received.count > 8192 {
            close(connection.fd)
            return .closed
        }
        return .waiting
    }

    private func answer(_ client: Int32, requestLine: [UInt8]) {
        let line = String(decoding: requestLine, as: UTF8.self)
        let parts = line.split(separator: " ")
        let path = parts.count >= 2 ? String(parts[1].split(separator: "?").first ?? "") : ""
        var reply: HTTPResponse
        if parts.first == "GET", let respond = responses[path] {
            reply = respond()
        } else if parts.first == "GET", let check = routes[path] {
            let (status, body) = check()
            reply = HTTPResponse(
                status: status, body: body, contentType: path == "/metrics" ? "text/plain; version=0.0.4" : "text/plain"
            )
        } else if parts.first == "GET", let document = documents?(path) {
            reply = document
        } else {
            reply = HTTPResponse(status: 404, body: "not found\n")
        }
        let reason = reply.status == 200 ? "OK" : (reply.status == 404 ? "Not Found" : "Service Unavailable")
        var head = "HTTP/1.1 \(reply.status) \(reason)\r\nContent-Type: \(reply.contentType)\r\n"
        for (name, value) in reply.headers { head += "\(name): \(value)\r\n" }
        head += "Content-Length: \(reply.body.utf8.count)\r\nConnection: close\r\n\r\n"
        let response = Array((head + reply.body).utf8)
        // The socket is non-blocking: wait for room a little at a time, never more than a second.
        var offset = 0
        let deadline = ContinuousClock.now + .seconds(1)
        while offset < response.count, ContinuousClock.now < deadline {
            let written = response[offset...].withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
            if written > 0 {
                offset += written
            } else if written < 0, errno == EAGAIN || errno == EWOULDBLOCK {
                var descriptor = pollfd(fd: client, events: Int16(POLLOUT), revents: 0)
                _ = poll(&descriptor, 1, 50)
            } else {
                return
            }
        }
    }
}

/// What a `HealthServer` route answers.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var body: String
    public var contentType: String
    /// Further headers (`Cache-Control`), in order.
    public var headers: [(String, String)]

    public init(status: Int, body: String, contentType: String = "text/plain", headers: [(String, String)] = []) {
        self.status = status
        self.body = body
        self.contentType = contentType
        self.headers = headers
    }
}

public struct HealthServerError: Error, CustomStringConvertible {
    public var reason: String
    public var description: String { reason }
}
