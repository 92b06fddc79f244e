import Dispatch
import Foundation
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// One HTTP request and its response through `URLSession`, with a deadline and cancellation
/// that never call into `URLSession`.
///
/// The Linux Foundation has two races here. `URLSession.data(for:)` cancels its data task from
/// inside the awaiting task's cancellation handler, which runs under that task's lock, and
/// `cancel()` waits for the session's work queue; when that queue is at that moment finishing the
/// same request (a failure, its own timeout), it resumes the task, which waits for the task's
/// lock. Each waits for the other for ever, and with them every thread that then touches the
/// session: on a two-core machine both threads of the cooperative pool, so the whole process
/// stopped (seen as a hung test run; swift-corelibs-foundation issue 5412). And `cancel()` on a
/// task whose failure is being reported at that moment ends the process (`TaskRegistry`: "a task
/// that is not in the registry"). So the request runs through the completion-handler API and is
/// never cancelled: whichever comes first of the answer, the deadline and the caller's
/// cancellation resumes the caller, once (from a queue of its own, never under a Swift task's
/// lock), and a request left behind ends by the session's own timeouts (set them to about the
/// deadline), its answer dropped.
public enum HTTPExchange {
    /// Where deadlines fire and cancellations are handed on: a queue of its own, which gets a
    /// thread even while the cooperative pool's (the global queue's) are all busy.
    private static let queue = DispatchQueue(label: "http-exchange")

    /// The deadline passed before the answer came.
    public struct TimedOut: Error, CustomStringConvertible {
        public var timeout: Duration
        public var description: String { "no answer within \(timeout)" }
    }

    /// Sends `request` through `session`.
    /// - Throws: `TimedOut` when no answer came within `timeout`; `CancellationError` when the
    ///   calling task was cancelled first; otherwise the session's error. The request itself
    ///   runs until the session's own timeouts end it.
    public static func data(for request: URLRequest, session: URLSession, timeout: Duration) async throws -> (
        Data, URLResponse
    ) {
        let exchange = Exchange()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let task = session.dataTask(with: request) { data, response, error in
                    if let data, let response {
                        exchange.end(.success((data, response)))
                    } else {
                        exchange.end(.failure(error ?? URLError(.badServerResponse)))
                    }
                }
                let deadline = DispatchWorkItem { exchange.end(.failure(TimedOut(timeout: timeout))) }
                guard exchange.begin(continuation, deadline: Deadline(item: deadline)) else { return }
                task.resume()
                let (seconds, attoseconds) = timeout.components
                let nanoseconds = max(0, seconds) * 1_000_000_000 + max(0, attoseconds) / 1_000_000_000
                queue.asyncAfter(deadline: .now() + .nanoseconds(Int(clamping: nanoseconds)), execute: deadline)
            }
        } onCancel: {
            // Under the task's lock: nothing here may wait.
            queue.async { exchange.end(.failure(CancellationError())) }
        }
    }

    /// The deadline's work item, safe to cancel from any thread (Darwin's Dispatch marks it
    /// `Sendable`; the Linux one does not say).
    private struct Deadline: @unchecked Sendable {
        var item: DispatchWorkItem
    }

    /// Who resumes the caller: the first of the answer, the deadline and the cancellation.
    private final class Exchange: Sendable {
        private struct State {
            var continuation: CheckedContinuation<(Data, URLResponse), any Error>?
            var deadline: Deadline?
            var ended: Result<(Data, URLResponse), any Error>?
        }

        private let state = Mutex(State())

        /// Keeps what `end` needs; false (and the caller resumed) when the exchange already
        /// ended: cancelled before it began.
        func begin(_ continuation: CheckedContinuation<(Data, URLResponse), any Error>, deadline: Deadline) -> Bool {
            let ended = state.withLock { state -> Result<(Data, URLResponse), any Error>? in
                if let ended = state.ended { return ended }
                state.continuation = continuation
                state.deadline = deadline
                return nil
            }
            guard let ended else { return true }
            continuation.resume(with: ended)
            return false
        }

        /// The first call resumes the caller with `result` and stops the deadline; later calls
        /// do nothing. Never called under a Swift task's lock.
        func end(_ result: Result<(Data, URLResponse), any Error>) {
            let taken = state.withLock { state -> State? in
                guard state.ended == nil else { return nil }
                state.ended = result
                let taken = state
                state.continuation = nil
                state.deadline = nil
                return taken
            }
            guard let taken else { return }
            taken.deadline?.item.cancel()
            taken.continuation?.resume(with: result)
        }
    }
}
