import AuthCrypto
import AuthDomain
import AuthStore
import Foundation
import JOSE
import Kafka
import Messages
import PGStore
import ServiceKit
import Synchronization

/// Retrying what fails transiently, with backoff, while saying which requests wait on it.
extension RequestPipeline {
    // MARK: - Retries

    /// Up to 20 ids, comma-separated, and how many more.
    static func listed(_ ids: [String]) -> String {
        ids.count <= 20
            ? ids.joined(separator: ",") : ids.prefix(20).joined(separator: ",") + " and \(ids.count - 20) more"
    }

    /// Runs `body` until it succeeds or fails definitely; transient failures wait with capped
    /// exponential backoff and full jitter. Gives up only when the worker is stopping.
    ///
    /// Each retry's log line names the requests waiting on it (`auth.request_ids`, the first 20 and
    /// how many more), so an operator following one request id sees its retries.
    func retrying<T: Sendable>(
        _ what: String, requestIDs: [String] = [], _ body: @Sendable () async throws -> T
    ) async throws -> T {
        var delay = configuration.processing.initialRetryDelay
        var attempt = 1
        while true {
            do {
                return try await body()
            } catch let error where ErrorPolicy.classify(error) == .transient {
                if isStopping { throw ShutdownDuringRetry() }
                beat()
                if ErrorPolicy.isDatabaseUnreachable(error) { databaseLoss.report(ErrorPolicy.loggable(error)) }
                metrics.retries.increment()
                let jittered = Self.jitter(delay)
                var metadata: Logger.Metadata = [
                    "retry.operation": what, LogKey.attempt: String(attempt),
                    LogKey.delay: String(jittered.wholeMilliseconds), LogKey.error: ErrorPolicy.loggable(error),
                ]
                if !requestIDs.isEmpty { metadata[LogKey.requestIDs] = Self.listed(requestIDs) }
                logger.warning("Transient failure; retrying", metadata: metadata)
                try await Task.sleep(for: jittered)
                delay = min(delay * 2, configuration.processing.maxRetryDelay)
                attempt += 1
            }
        }
    }

    static func jitter(_ delay: Duration) -> Duration {
        .milliseconds(Int64.random(in: 0...max(delay.wholeMilliseconds, 1)))
    }
}
