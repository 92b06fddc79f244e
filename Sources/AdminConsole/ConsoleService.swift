import Foundation
import ServiceKit

/// The console's HTTP server as a service of the process's group: listens from `run()` until a
/// graceful shutdown, then stops accepting and lets the requests in flight finish.
public final class ConsoleService: Service, @unchecked Sendable {
    public let server: HTTPServer
    private let stopped: AsyncStream<Void>
    private let stop: AsyncStream<Void>.Continuation

    /// Starts listening at once (so a port of 0 is known when this returns).
    public init(console: AdminConsole, host: String, port: UInt16, limits: HTTPServer.Limits = .init(), logger: Logger)
        throws
    {
        server = try HTTPServer(host: host, port: port, limits: limits, logger: logger) { request in
            await console.handle(request)
        }
        (stopped, stop) = AsyncStream.makeStream(of: Void.self)
    }

    public var port: UInt16 { server.port }

    public func run() async throws {
        for await _ in stopped { break }
        server.stop()
    }

    public func triggerGracefulShutdown() {
        stop.yield()
        stop.finish()
    }
}
