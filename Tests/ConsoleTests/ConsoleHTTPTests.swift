import Foundation
import ServiceKit
import Testing

@testable import AdminConsole
@testable import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The console's HTTP server (libmicrohttpd) through real sockets: keep-alive, the body and
/// header limits, a slow client cut off, and one client's slow request blocking nobody else.
@Suite struct ConsoleHTTPTests {
    /// A server whose handler echoes the body's size, and sleeps when asked (`/slow`).
    func server(idleTimeout: UInt32 = 10, configure: (inout HTTPServer.Limits) -> Void = { _ in }) throws -> HTTPServer
    {
        var limits = HTTPServer.Limits()
        limits.idleTimeout = idleTimeout
        configure(&limits)
        return try HTTPServer(
            host: "127.0.0.1", port: 0, limits: limits, logger: Logger(label: "test", handler: InMemoryLogHandler())
        ) { request in
            if request.path == "/slow" { try? await Task.sleep(for: .seconds(2)) }
            return HTTPAnswer(
                status: 200, headers: [("Content-Type", "text/plain")],
                body: Array(
                    "\(request.method) \(request.path) \(request.body.count) q=\(request.query["q"] ?? "")".utf8))
        }
    }

    @Test func twoRequestsShareOneConnection() async throws {
        try await offThePool {
            let server = try server()
            defer { server.stop() }
            let socket = try RawSocket(port: server.port)
            try socket.send("GET /a?q=x+y%21 HTTP/1.1\r\nHost: t\r\n\r\n")
            let first = try socket.receiveResponse()
            #expect(first.hasPrefix("HTTP/1.1 200") && first.hasSuffix("GET /a 0 q=x y!"), "\(first)")
            try socket.send("POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello")
            let second = try socket.receiveResponse()
            #expect(second.hasPrefix("HTTP/1.1 200") && second.hasSuffix("POST /b 5 q="), "\(second)")
            // A NUL in a value arrives whole (to be refused), not cut short.
            try socket.send("GET /n?q=a%00b HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(try socket.receiveResponse().hasSuffix("GET /n 0 q=a\u{0}b"))
        }
    }

    @Test func anOversizedBodyIsRefusedUnread() async throws {
        try await offThePool {
            let server = try server()
            defer { server.stop() }
            let declared = try RawSocket(port: server.port)
            try declared.send("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n")
            #expect(try declared.receiveResponse().hasPrefix("HTTP/1.1 413"))
            // Chunked, so no length is declared: refused once past the limit.
            let chunked = try RawSocket(port: server.port)
            var request = "POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
            let chunk = String(repeating: "a", count: 16 * 1024)
            for _ in 0..<5 { request += "4000\r\n\(chunk)\r\n" }
            request += "0\r\n\r\n"
            try chunked.send(request)
            #expect(try chunked.receiveResponse().hasPrefix("HTTP/1.1 413"))
        }
    }

    @Test func oversizedHeadersAreRefused() async throws {
        try await offThePool {
            let server = try server()
            defer { server.stop() }
            let socket = try RawSocket(port: server.port)
            try socket.send("GET / HTTP/1.1\r\nHost: t\r\nX-Big: \(String(repeating: "b", count: 40 * 1024))\r\n\r\n")
            let answer = try socket.receiveResponse()
            #expect(answer.hasPrefix("HTTP/1.1 431") || answer.hasPrefix("HTTP/1.1 413"), "\(answer.prefix(40))")
        }
    }

    /// The handlers run on the server's own thread, not Swift's cooperative pool: a request is
    /// answered while every thread of that pool is held by blocking code (elsewhere in the process,
    /// or the tests' own database calls), which before left the console silent until one came free.
    @Test func aRequestIsAnsweredWhileTheCooperativePoolIsHeld() async throws {
        let width = ProcessInfo.processInfo.activeProcessorCount
        let holding = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        for _ in 0..<width {
            Task.detached {
                holding.signal()
                release.wait()
            }
        }
        try await offThePool {
            // The pool is let go before the server stops: stopping waits for the handlers.
            var started: HTTPServer?
            defer {
                for _ in 0..<width { release.signal() }
                started?.stop()
            }
            for _ in 0..<width { _ = holding.wait(timeout: .now() + 5) }
            let server = try server()
            started = server
            let socket = try RawSocket(port: server.port)
            try socket.send("GET /held HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(try socket.receiveResponse().hasSuffix("GET /held 0 q="))
        }
    }

    @Test func aSlowClientIsCutOffAndBlocksNobody() async throws {
        try await offThePool {
            let server = try server(idleTimeout: 1)
            defer { server.stop() }
            let slow = try RawSocket(port: server.port)
            try slow.send("GET / HTTP/1.1\r\nHost: t\r\n")  // and never the blank line
            let busy = try RawSocket(port: server.port)
            try busy.send("GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
            let started = Date()
            let other = try RawSocket(port: server.port)
            try other.send("GET /quick HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(try other.receiveResponse().hasSuffix("GET /quick 0 q="))
            #expect(Date().timeIntervalSince(started) < 1.5, "answered while another request sleeps")
            #expect(try busy.receiveResponse().hasSuffix("GET /slow 0 q="))
            // The silent one was closed: reading ends without an answer.
            #expect(try slow.receiveAll(timeout: 5).isEmpty)
        }
    }
}

extension ConsoleHTTPTests {
    /// A slowloris that sends a header line every half second never meets the inactivity
    /// timeout; the whole request's deadline closes it all the same.
    @Test func aRequestTricklingInPastItsDeadlineIsClosed() async throws {
        try await offThePool {
            let server = try server { $0.requestTimeout = 2 }
            defer { server.stop() }
            let slow = try RawSocket(port: server.port)
            try slow.send("GET / HTTP/1.1\r\nHost: t\r\n")
            let started = Date()
            var closed = false
            for line in 0..<20 {
                Thread.sleep(forTimeInterval: 0.5)
                if !slow.sendOnce("X-Drip-\(line): x\r\n") {
                    closed = true
                    break
                }
            }
            // Either the send failed, or the server's end shows as the socket's end.
            closed = try closed || slow.receiveAll(timeout: 3).isEmpty
            #expect(closed, "the trickle was cut off")
            #expect(Date().timeIntervalSince(started) < 6, "by the 2 s deadline, not after 10 s of drips")
            let fresh = try RawSocket(port: server.port)
            try fresh.send("GET /after HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(try fresh.receiveResponse().hasSuffix("GET /after 0 q="))
        }
    }

    /// Every connection taken by slow clients, in all or from one address (everyone behind a
    /// proxy): a new client is still answered, in place of the oldest waiting connection.
    @Test(arguments: [(16, 64), (4, 64)])
    func aFullServerMakesRoomForANewClient(perAddress: Int, total: Int) async throws {
        try await offThePool {
            let server = try server {
                $0.connections = UInt32(total)
                $0.connectionsPerAddress = UInt32(perAddress)
            }
            defer { server.stop() }
            var slow: [RawSocket] = []
            for _ in 0..<max(perAddress, 16) {
                let socket = try RawSocket(port: server.port)
                try socket.send("GET / HTTP/1.1\r\nHost: t\r\n")
                slow.append(socket)
            }
            Thread.sleep(forTimeInterval: 0.2)
            let fresh = try RawSocket(port: server.port)
            try fresh.send("GET /fresh HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(try fresh.receiveResponse().hasSuffix("GET /fresh 0 q="), "answered, though every slot was taken")
            // The oldest slow one made the room: its end is there to read.
            #expect(try slow[0].receiveAll(timeout: 3).isEmpty)
        }
    }

    /// A body's length said two ways is refused, so no proxy in front reads another request out
    /// of it (libmicrohttpd itself takes either).
    @Test(arguments: [
        "Content-Length: 5\r\nContent-Length: 6\r\n",
        "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    ])
    func aBodyFramedTwoWaysIsRefused(headers: String) async throws {
        try await offThePool {
            let server = try server()
            defer { server.stop() }
            let socket = try RawSocket(port: server.port)
            try socket.send("POST /x HTTP/1.1\r\nHost: t\r\n\(headers)\r\nhello")
            let answer = try socket.receiveResponse()
            #expect(answer.hasPrefix("HTTP/1.1 400"), "\(answer.prefix(60))")
            // The same length twice says one thing.
            let twice = try RawSocket(port: server.port)
            try twice.send("POST /y HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello")
            #expect(try twice.receiveResponse().hasSuffix("POST /y 5 q="))
        }
    }
}

/// Runs blocking socket work on a thread of its own: on the concurrency pool it would hold a
/// thread the server's handler needs (two such tests at once on two cores: a deadlock).
func offThePool(_ body: @escaping @Sendable () throws -> Void) async throws {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
        Thread {
            do {
                try body()
                continuation.resume()
            } catch {
                continuation.resume(throwing: error)
            }
        }.start()
    }
}

/// A blocking TCP client for the tests: sends bytes, reads one response (by Content-Length).
final class RawSocket {
    let descriptor: Int32

    struct Failure: Error { var what: String }

    init(port: UInt16) throws {
        descriptor = try connectLoopback(port)
        setTimeout(5)
    }

    deinit { close(descriptor) }

    func setTimeout(_ seconds: Int) {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Sends `text` once; false when the connection is gone.
    func sendOnce(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        let count = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        return count == bytes.count
    }

    func send(_ text: String) throws {
        let bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes {
                Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            // The server may close after refusing: what it answered is still there to read.
            guard count > 0 else { return }
            sent += count
        }
    }

    /// Reads until the headers and a body of the declared length have arrived.
    func receiveResponse() throws -> String {
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let text = String(decoding: buffer, as: UTF8.self)
            if let end = text.range(of: "\r\n\r\n") {
                let head = text[..<end.lowerBound].lowercased()
                var length = 0
                if let line = head.split(separator: "\r\n").first(where: { $0.hasPrefix("content-length:") }) {
                    length = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) ?? 0
                }
                let bodyStart = text.utf8.distance(from: text.startIndex, to: end.upperBound)
                if buffer.count - bodyStart >= length {
                    return String(decoding: buffer.prefix(bodyStart + length), as: UTF8.self)
                }
            }
            let count = recv(descriptor, &chunk, chunk.count, 0)
            guard count > 0 else {
                if buffer.isEmpty { throw Failure(what: "closed without an answer") }
                return String(decoding: buffer, as: UTF8.self)
            }
            buffer += chunk[0..<count]
        }
    }

    /// Everything until the server closes (or `timeout` passes).
    func receiveAll(timeout: Int) throws -> [UInt8] {
        setTimeout(timeout)
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = recv(descriptor, &chunk, chunk.count, 0)
            if count <= 0 { return buffer }
            buffer += chunk[0..<count]
        }
    }
}
