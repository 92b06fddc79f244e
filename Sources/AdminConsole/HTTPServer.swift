import CMicroHTTPD
import Foundation
import ServiceKit

/// One HTTP request, read whole.
public struct HTTPRequest: Sendable {
    public var method: String
    /// The path, percent-decoded by the server, without the query.
    public var path: String
    /// The query's arguments (the first of each name), decoded.
    public var query: [String: String]
    /// Header names in lower case.
    public var headers: [String: String]
    public var body: [UInt8]
    /// The peer's address (the proxy's, behind one).
    public var client: String

    public init(
        method: String, path: String, query: [String: String] = [:], headers: [String: String] = [:],
        body: [UInt8] = [], client: String = "127.0.0.1"
    ) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.client = client
    }

    /// A cookie the request carries, by name (the first, when sent twice).
    public func cookie(_ name: String) -> String? {
        guard let header = headers["cookie"] else { return nil }
        for pair in header.split(separator: ";") {
            let trimmed = pair.trimmingCharacters(in: .whitespaces)
            guard let equals = trimmed.firstIndex(of: "=") else { continue }
            if trimmed[..<equals] == name { return String(trimmed[trimmed.index(after: equals)...]) }
        }
        return nil
    }

    /// The body as `application/x-www-form-urlencoded` fields (the first of each name).
    public var form: [String: String] { Self.decodeForm(body) }

    /// Decodes `a=1&b=x+y%21`: `+` is a space, `%HH` a byte; malformed escapes are kept as they are.
    public static func decodeForm(_ bytes: [UInt8]) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in bytes.split(separator: UInt8(ascii: "&")) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            let name = decodeComponent(parts[0])
            let value = parts.count > 1 ? decodeComponent(parts[1]) : ""
            if fields[name] == nil { fields[name] = value }
        }
        return fields
    }

    private static func decodeComponent(_ bytes: ArraySlice<UInt8>) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        func hex(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "+") {
                out.append(UInt8(ascii: " "))
            } else if byte == UInt8(ascii: "%"), index + 2 < bytes.endIndex, let high = hex(bytes[index + 1]),
                let low = hex(bytes[index + 2])
            {
                out.append(high << 4 | low)
                index += 2
            } else {
                out.append(byte)
            }
            index += 1
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// An HTTP response.
public struct HTTPAnswer: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The first value of a header, by name (case-insensitive).
    public func header(_ name: String) -> String? {
        headers.first { $0.0.caseInsensitiveCompare(name) == .orderedSame }?.1
    }
}

/// A small HTTP/1.1 server on GNU libmicrohttpd: one thread per connection (a slow client holds
/// only its own), keep-alive, and the limits a public-facing form needs: the request line and
/// headers within `connectionMemory`, the body within `maximumBody` (413 past it), a connection
/// silent for `idleTimeout` seconds closed, a request that has not arrived whole within
/// `requestTimeout` seconds closed however it trickles in (a slowloris gets nowhere), and
/// connections capped in all and per address, a new one closing the oldest that waits for its
/// request (`ConnectionGuard`). A request framed ambiguously (two `Content-Length`s that differ,
/// or `Content-Length` beside `Transfer-Encoding`) is refused with 400: a proxy in front could
/// read its body otherwise. Each request is read whole, then handed to `handler` on the server's
/// own thread while its connection's thread waits.
public final class HTTPServer: @unchecked Sendable {
    public typealias Handler = @Sendable (HTTPRequest) async -> HTTPAnswer

    public struct Limits: Sendable {
        public var connectionMemory = 32 * 1024
        public var maximumBody = 64 * 1024
        public var connections: UInt32 = 64
        public var connectionsPerAddress: UInt32 = 16
        public var idleTimeout: UInt32 = 10
        /// Seconds a request may take to arrive whole (headers and body).
        public var requestTimeout: UInt32 = 10

        public init() {}
    }

    public enum StartError: Error, CustomStringConvertible {
        case cannotListen(host: String, port: UInt16)

        public var description: String {
            switch self {
            case .cannotListen(let host, let port): "cannot listen on \(host):\(port) (an IPv4 address, a free port)"
            }
        }
    }

    let handler: Handler
    let limits: Limits
    let logger: Logger
    /// Where the handlers run: a thread of the server's own, not Swift's cooperative pool, so no
    /// other work in the process that holds the pool's threads (a blocking call; the tests'
    /// database calls did) keeps a request waiting. A handler awaits its statements on their
    /// connections' threads, so requests interleave here.
    private let handlers = ThreadExecutor(name: "console-http")
    private var daemon: OpaquePointer?
    let connections: ConnectionGuard
    /// The port listened on (the one the kernel chose when asked for 0).
    public private(set) var port: UInt16 = 0

    public init(host: String, port: UInt16, limits: Limits = Limits(), logger: Logger, handler: @escaping Handler)
        throws
    {
        self.handler = handler
        self.limits = limits
        self.logger = logger
        connections = ConnectionGuard(
            limits: .init(
                connections: Int(limits.connections), connectionsPerAddress: Int(limits.connectionsPerAddress),
                requestTimeout: .seconds(Int(limits.requestTimeout))))
        let context = Unmanaged.passUnretained(self).toOpaque()
        // The library's own caps stand beyond the guard's: it admits the connection that makes one
        // too many, and the guard closes the oldest waiting one.
        let cLimits = auth_mhd_limits(
            connection_memory: limits.connectionMemory, connections: limits.connections * 2,
            connections_per_ip: 0, idle_timeout: limits.idleTimeout)
        guard
            let daemon = auth_mhd_start(
                host, port, cLimits, httpServerAccess, context, httpServerCompleted, context, httpServerNotify, context)
        else {
            handlers.shutdown()
            connections.stop()
            throw StartError.cannotListen(host: host, port: port)
        }
        self.daemon = daemon
        self.port = auth_mhd_port(daemon)
    }

    /// Stops listening and waits for the connections' threads to end.
    public func stop() {
        guard let daemon else { return }
        self.daemon = nil
        MHD_stop_daemon(daemon)
        handlers.shutdown()
        connections.stop()
    }

    deinit { stop() }

    /// The request's state between the server's calls: the body as it arrives.
    final class Exchange {
        var body: [UInt8] = []
        var tooLarge = false
    }

    func access(
        _ connection: OpaquePointer, url: String, method: String, upload: UnsafePointer<CChar>?,
        uploadSize: UnsafeMutablePointer<Int>, state: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    ) -> MHD_Result {
        guard let raw = state.pointee else {
            // The first call: headers only. A declared body past the limit is refused before it is read.
            let exchange = Exchange()
            state.pointee = Unmanaged.passRetained(exchange).toOpaque()
            if !Self.framedOnce(all(connection, MHD_ValueKind.HEADER_KIND)) {
                exchange.tooLarge = true
                return queue(Self.ambiguous, on: connection)
            }
            if let length = value(connection, MHD_ValueKind.HEADER_KIND, "Content-Length").flatMap(Int.init),
                length > limits.maximumBody
            {
                exchange.tooLarge = true
                return queue(Self.tooLarge, on: connection)
            }
            return MHD_Result.YES
        }
        let exchange = Unmanaged<Exchange>.fromOpaque(raw).takeUnretainedValue()
        if uploadSize.pointee > 0 {
            if !exchange.tooLarge, let upload {
                if exchange.body.count + uploadSize.pointee > limits.maximumBody {
                    exchange.tooLarge = true
                    exchange.body = []
                } else {
                    upload.withMemoryRebound(to: UInt8.self, capacity: uploadSize.pointee) { bytes in
                        exchange.body.append(contentsOf: UnsafeBufferPointer(start: bytes, count: uploadSize.pointee))
                    }
                }
            }
            uploadSize.pointee = 0
            return MHD_Result.YES
        }
        let answer: HTTPAnswer
        if exchange.tooLarge {
            answer = Self.tooLarge
        } else {
            var client = [CChar](repeating: 0, count: 64)
            auth_mhd_client_address(connection, &client, client.count)
            let request = HTTPRequest(
                method: method, path: url,
                query: values(connection, MHD_ValueKind.GET_ARGUMENT_KIND, lowercased: false),
                headers: values(connection, MHD_ValueKind.HEADER_KIND, lowercased: true), body: exchange.body,
                client: String(decoding: client.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
            connections.answering(Self.key(connection))
            answer = run(request)
        }
        return queue(answer, on: connection)
    }

    /// A connection's key in the guard's account.
    static func key(_ connection: OpaquePointer) -> Int { Int(bitPattern: UnsafeRawPointer(connection)) }

    /// Whether the headers say once how long the body is: no two `Content-Length`s that differ,
    /// and not `Content-Length` beside `Transfer-Encoding` (RFC 9112 §6.3: a request smuggled
    /// past a proxy that reads the other one).
    static func framedOnce(_ headers: [(String, String)]) -> Bool {
        let lengths = Set(
            headers.filter { $0.0.lowercased() == "content-length" }.map {
                $0.1.trimmingCharacters(in: .whitespaces)
            })
        let encoded = headers.contains { $0.0.lowercased() == "transfer-encoding" }
        return lengths.count <= 1 && !(encoded && !lengths.isEmpty)
    }

    static let ambiguous = HTTPAnswer(
        status: 400, headers: [("Content-Type", "text/plain; charset=utf-8"), ("Connection", "close")],
        body: Array("the request's length is stated more than one way\n".utf8))

    static let tooLarge = HTTPAnswer(
        status: 413, headers: [("Content-Type", "text/plain; charset=utf-8"), ("Connection", "close")],
        body: Array("request body too large\n".utf8))

    /// Runs the handler on the server's own thread (`handlers`); this connection's thread waits
    /// for it.
    private func run(_ request: HTTPRequest) -> HTTPAnswer {
        let box = AnswerBox()
        let done = DispatchSemaphore(value: 0)
        let handler = handler
        Task(executorPreference: handlers) {
            box.answer = await handler(request)
            done.signal()
        }
        done.wait()
        return box.answer ?? HTTPAnswer(status: 500)
    }

    private final class AnswerBox: @unchecked Sendable {
        var answer: HTTPAnswer?
    }

    private func queue(_ answer: HTTPAnswer, on connection: OpaquePointer) -> MHD_Result {
        let response = answer.body.withUnsafeBytes { bytes in
            auth_mhd_response_copy(bytes.count, bytes.baseAddress)
        }
        guard let response else { return MHD_Result.NO }
        for (name, value) in answer.headers {
            // A header with a line break is dropped by the library; never sent.
            _ = MHD_add_response_header(response, name, value)
        }
        let result = MHD_queue_response(connection, UInt32(answer.status), response)
        MHD_destroy_response(response)
        return result
    }

    private func value(_ connection: OpaquePointer, _ kind: MHD_ValueKind, _ name: String) -> String? {
        MHD_lookup_connection_value(connection, kind, name).map { String(cString: $0) }
    }

    private final class Listed {
        var pairs: [(String, String)] = []
    }

    /// Every value of `kind`, in order, repeated names included. With their lengths: a value with a
    /// NUL in it (`%00`) arrives whole, to be refused, not cut short where C would stop reading.
    private func all(_ connection: OpaquePointer, _ kind: MHD_ValueKind) -> [(String, String)] {
        let listed = Listed()
        withExtendedLifetime(listed) {
            _ = MHD_get_connection_values_n(
                connection, kind,
                { context, _, key, keySize, value, valueSize in
                    guard let context, let key else { return MHD_Result.YES }
                    let listed = Unmanaged<Listed>.fromOpaque(context).takeUnretainedValue()
                    func text(_ pointer: UnsafePointer<CChar>, _ count: Int) -> String {
                        pointer.withMemoryRebound(to: UInt8.self, capacity: count) {
                            String(decoding: UnsafeBufferPointer(start: $0, count: count), as: UTF8.self)
                        }
                    }
                    listed.pairs.append((text(key, keySize), value.map { text($0, valueSize) } ?? ""))
                    return MHD_Result.YES
                }, Unmanaged.passUnretained(listed).toOpaque())
        }
        return listed.pairs
    }

    /// The values of `kind`, the first of each name (header names in lower case when asked).
    private func values(_ connection: OpaquePointer, _ kind: MHD_ValueKind, lowercased: Bool) -> [String: String] {
        var collected: [String: String] = [:]
        for (key, value) in all(connection, kind) {
            let name = lowercased ? key.lowercased() : key
            if collected[name] == nil { collected[name] = value }
        }
        return collected
    }
}

/// The library's access callback: the server is its context.
private let httpServerAccess: MHD_AccessHandlerCallback = {
    context, connection, url, method, _, upload, uploadSize, state in
    guard let context, let connection, let url, let method, let uploadSize, let state else { return MHD_Result.NO }
    let server = Unmanaged<HTTPServer>.fromOpaque(context).takeUnretainedValue()
    return server.access(
        connection, url: String(cString: url), method: String(cString: method), upload: upload,
        uploadSize: uploadSize, state: state)
}

/// The library's completion callback: frees the request's state, and starts the connection's
/// clock for its next request.
private let httpServerCompleted: MHD_RequestCompletedCallback = { context, connection, state, _ in
    if let context, let connection {
        Unmanaged<HTTPServer>.fromOpaque(context).takeUnretainedValue().connections.answered(HTTPServer.key(connection))
    }
    guard let state, let raw = state.pointee else { return }
    Unmanaged<HTTPServer.Exchange>.fromOpaque(raw).release()
    state.pointee = nil
}

/// The library's connection callback: the guard's account of open connections.
private let httpServerNotify: MHD_NotifyConnectionCallback = { context, connection, _, code in
    guard let context, let connection else { return }
    let connections = Unmanaged<HTTPServer>.fromOpaque(context).takeUnretainedValue().connections
    if auth_mhd_notify_is_start(code) != 0 {
        var client = [CChar](repeating: 0, count: 64)
        auth_mhd_client_address(connection, &client, client.count)
        connections.opened(
            HTTPServer.key(connection), fd: auth_mhd_connection_fd(connection),
            address: String(decoding: client.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    } else {
        connections.closed(HTTPServer.key(connection))
    }
}
