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

/// Runs services together and shuts them down in reverse order on SIGTERM or SIGINT, waiting
/// for each to return before asking the next (as swift-service-lifecycle's `ServiceGroup` does):
/// the consume loop drains before the relay stops, the relay before readiness and health.
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

    /// Told once when a shutdown begins: one stream for the watchdog, one for the sequencer (a
    /// stream has one reader).
    private let shutdownStarted: AsyncStream<Void>
    private let shutdownStartedContinuation: AsyncStream<Void>.Continuation
    private let sequencerStart: AsyncStream<Void>
    private let sequencerStartContinuation: AsyncStream<Void>.Continuation

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
        (sequencerStart, sequencerStartContinuation) = AsyncStream.makeStream(of: Void.self)
    }

    /// Starts every service and returns when all have returned.
    /// - Throws: the first error a service threw, or `Failure.deadlineExceeded`.
    public func run() async throws {
        guard !services.isEmpty else { return }
        let sources = installSignalHandlers()
        defer { sources.forEach { $0.cancel() } }

        // One stream per service, told when its `run()` has returned.
        let finished = services.map { _ in AsyncStream.makeStream(of: Void.self) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (service, done) in zip(services, finished) {
                group.addTask {
                    defer {
                        done.continuation.yield()
                        done.continuation.finish()
                    }
                    try await service.run()
                }
            }
            // Once a shutdown begins, the newest service is asked first, and each next one only
            // when the one before has returned.
            group.addTask { [services, sequencerStart, logger] in
                for await _ in sequencerStart { break }
                for (service, done) in zip(services, finished).reversed() {
                    service.triggerGracefulShutdown()
                    for await _ in done.stream { break }
                    logger.debug("Service stopped", metadata: ["service": String(describing: type(of: service))])
                }
            }
            // The watchdog waits for a shutdown to begin, then enforces its deadline.
            group.addTask { [shutdownStarted, gracefulShutdownTimeout] in
                for await _ in shutdownStarted { break }
                try await Task.sleep(for: gracefulShutdownTimeout)
                throw Failure.deadlineExceeded
            }
            var firstError: (any Error)?
            // The services and the shutdown sequencer.
            var remaining = services.count + 1
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
                // Without any shutdown the sequencer waits for ever: end it with the services.
                if remaining == 1, state.withLock({ !$0.shuttingDown }) { break }
            }
            group.cancelAll()
            if let firstError { throw firstError }
        }
    }

    /// Asks the services to stop, newest first, each once the one after it has returned. Safe to
    /// call more than once, from any thread.
    public func startGracefulShutdown(reason: String) {
        let first = state.withLock { state -> Bool in
            defer { state.shuttingDown = true }
            return !state.shuttingDown
        }
        guard first else { return }
        logger.info("Shutting down", metadata: ["shutdown.reason": reason])
        shutdownStartedContinuation.yield()
        shutdownStartedContinuation.finish()
        sequencerStartContinuation.yield()
        sequencerStartContinuation.finish()
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
