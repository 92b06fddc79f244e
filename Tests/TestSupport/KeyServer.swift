import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A real HTTP/1.1 server on 127.0.0.1 for tests: serves configured documents (provider key sets,
/// discovery), counts requests per path, and can be made slow or broken.
final class KeyServer: Sendable {
    struct Route: Sendable {
        var status: Int
        var body: Data
        var headers: [String: String]
        var delay: Duration

        init(status: Int = 200, body: Data, headers: [String: String] = [:], delay: Duration = .zero) {
            self.status = status
            self.body = body
            self.headers = headers
            self.delay = delay
        }
    }

    private struct State {
        var routes: [String: Route] = [:]
        var hits: [String: Int] = [:]
        var stopped = false
    }

    let port: UInt16
    private let socket: Int32
    private let state = Mutex(State())

    init() throws {
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ServerError() }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw ServerError()
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        socket = fd
        port = UInt16(bigEndian: address.sin_port)
        let thread = Thread { [self] in self.acceptLoop() }
        thread.start()
    }

    struct ServerError: Error {}

    func url(_ path: String) -> URL {
        URL(string: "http://127.0.0.1:\(port)\(path)") ?? URL(fileURLWithPath: "/invalid-test-path")
    }

    func serve(_ path: String, _ route: Route) { state.withLock { $0.routes[path] = route } }

    func hits(_ path: String) -> Int { state.withLock { $0.hits[path] ?? 0 } }

    /// Stops listening. The socket is closed by the accept loop once it has seen the stop: closed
    /// here, its number could be given to another test's socket before the loop's next `accept`,
    /// and this server would answer that one's requests (seen as another server's 404s).
    func stop() {
        state.withLock { $0.stopped = true }
        shutdown(socket, Int32(SHUT_RDWR))
    }

    private func acceptLoop() {
        while true {
            let client = accept(socket, nil, nil)
            if state.withLock({ $0.stopped }) {
                if client >= 0 { close(client) }
                close(socket)
                return
            }
            if client < 0 { continue }
            let thread = Thread { [self] in self.handle(client) }
            thread.start()
        }
    }

    private func handle(_ client: Int32) {
        defer { close(client) }
        var request = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !request.containsHeaderEnd {
            let count = read(client, &buffer, buffer.count)
            if count <= 0 { return }
            request += buffer[0..<count]
            if request.count > 65536 { return }
        }
        let line = String(decoding: request.prefix { $0 != 0x0D }, as: UTF8.self).split(separator: " ")
        let path = line.count >= 2 ? String(line[1]) : "/"
        let route = state.withLock { state -> Route? in
            state.hits[path, default: 0] += 1
            return state.routes[path]
        }
        let chosen = route ?? Route(status: 404, body: Data("not found".utf8))
        if chosen.delay > .zero {
            let (seconds, attoseconds) = chosen.delay.components
            usleep(UInt32(seconds * 1_000_000 + attoseconds / 1_000_000_000_000))
        }
        var head = "HTTP/1.1 \(chosen.status) X\r\nContent-Length: \(chosen.body.count)\r\nConnection: close\r\n"
        head += "Content-Type: application/json\r\n"
        for (name, value) in chosen.headers { head += "\(name): \(value)\r\n" }
        head += "\r\n"
        let response = Array(head.utf8) + Array(chosen.body)
        var offset = 0
        while offset < response.count {
            let written = response[offset...].withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
            if written <= 0 { return }
            offset += written
        }
    }
}

extension [UInt8] {
    fileprivate var containsHeaderEnd: Bool {
        guard count >= 4 else { return false }
        for index in 0...(count - 4)
        where self[index] == 0x0D && self[index + 1] == 0x0A && self[index + 2] == 0x0D && self[index + 3] == 0x0A {
            return true
        }
        return false
    }
}
