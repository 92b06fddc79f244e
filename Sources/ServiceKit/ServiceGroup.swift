import Dispatch
import Foundation
import Synchronization

/// A long-running part of the process, in swift-service-lifecycle's shape.
public protocol Service: Sendable {
    /// Runs until the work is done, the service is asked to stop, or the task is cancelled.
    func run() async throws
    /// Asks `run()` to finish its in-flight work and return. Called at most once, from any thread.
    func triggerGracefulShutdown()
}

/// Runs services together and shuts them down in reverse order on SIGTERM or SIGINT.
///
/// When any service returns or throws, the others are asked to stop as well. After the graceful
/// shutdown deadline the remaining tasks are cancelled and `run()` throws `deadlineExceeded`.
public final class ServiceGroup: Sendable {
    /// Why the group ended abnormally.
    public enum Failure: Error, Equatable {
        case deadlineExceeded
    }

    private let services: [any Service]
    private let signals: [Int32]
    private let gracefulShutdownTimeout: Duration
    private let logger: Logger
    private let state = Mutex(State())

    private struct State {
        var shuttingDown = false
    }

    private let shutdownStarted: AsyncStream<Void>
    private let shutdownStartedContinuation: AsyncStream<Void>.Continuation

    /// - Parameters:
    ///   - services: started in this order, asked to stop in reverse.
    ///   - signals: signals that start a graceful shutdown. Default: SIGTERM and SIGINT.
    ///   - gracefulShutdownTimeout: how long the services have to stop. Default: 30 s.
    ///   - logger: where the group reports what it does.
    public init(
        services: [any Service],
        signals: [Int32] = [SIGTERM, SIGINT],
        gracefulShutdownTimeout: Duration = .seconds(30),
        logger: Logger
    ) {
        self.services = services
        self.signals = signals
        self.gracefulShutdownTimeout = gracefulShutdownTimeout
        self.logger = logger
        (shutdownStarted, shutdownStartedContinuation) = AsyncStream.makeStream(of: Void.self)
    }

    /// Starts every service and returns when all have returned.
    /// - Throws: the first error a service threw, or `Failure.deadlineExceeded`.
    public func run() async throws {
        let sources = installSignalHandlers()
        defer { sources.forEach { $0.cancel() } }

        try await withThrowingTaskGroup(of: Void.self) { group in
            for service in services {
                group.addTask { try await service.run() }
            }
            // The watchdog waits for a shutdown to begin, then enforces its deadline.
            group.addTask { [shutdownStarted, gracefulShutdownTimeout] in
                for await _ in shutdownStarted { break }
                try await Task.sleep(for: gracefulShutdownTimeout)
                throw Failure.deadlineExceeded
            }
            var firstError: (any Error)?
            var remaining = services.count
            while remaining > 0 {
                do {
                    _ = try await group.next()
                } catch Failure.deadlineExceeded {
                    logger.error("Graceful shutdown deadline exceeded; cancelling what is left")
                    group.cancelAll()
                    throw Failure.deadlineExceeded
                } catch {
                    if firstError == nil { firstError = error }
                    logger.error("Service failed", metadata: ["error": String(describing: error)])
                }
                remaining -= 1
                if remaining > 0 { startGracefulShutdown(reason: "a service stopped") }
            }
            group.cancelAll()
            if let firstError { throw firstError }
        }
    }

    /// Asks every service to stop, newest first. Safe to call more than once.
    public func startGracefulShutdown(reason: String) {
        let first = state.withLock { state -> Bool in
            defer { state.shuttingDown = true }
            return !state.shuttingDown
        }
        guard first else { return }
        logger.info("Shutting down", metadata: ["shutdown.reason": reason])
        shutdownStartedContinuation.yield()
        for service in services.reversed() {
            service.triggerGracefulShutdown()
        }
    }

    private func installSignalHandlers() -> [any DispatchSourceSignal] {
        signals.map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [weak self] in
                self?.startGracefulShutdown(reason: "signal \(number)")
            }
            source.resume()
            return source
        }
    }
}
