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

/// A stage of the loop running in the background: a batch being written, or published.
///
/// Its outcome is kept here before the loop is rung, so the loop takes it at once on the thread
/// the ring resumed it on: waiting for the task's own completion instead (`Task.value`) could
/// catch the task between the ring and its end, and suspend the loop for another wake-up.
final class Stage<Output: Sendable>: Sendable {
    private final class Outcome: Sendable {
        let result = Mutex<Result<Output, any Error>?>(nil)
    }

    private let outcome = Outcome()

    /// Runs `body` in a task of its own; `wake` is called when it has finished.
    /// - Parameter executor: where the task runs; by default the cooperative pool (said so, not
    ///   inherited: the loop that starts stages runs on the consumer's thread). A stage whose work
    ///   is a PostgreSQL connection's runs on that connection's thread: no hop from the pool there
    ///   and back.
    /// - Parameter rings: whether the end of a body that returned must wake the loop (a thrown
    ///   error always does). A stage whose output carries work that wakes the loop when it ends
    ///   need not wake it first: the loop takes both at that one wake.
    init(
        on executor: any TaskExecutor = globalConcurrentExecutor, wake: @escaping @Sendable () -> Void,
        rings: @escaping @Sendable (Output) -> Bool = { _ in true },
        _ body: @escaping @Sendable () async throws -> Output
    ) {
        Task(executorPreference: executor) { [outcome] in
            let result: Result<Output, any Error>
            do {
                result = .success(try await body())
            } catch {
                result = .failure(error)
            }
            outcome.result.withLock { $0 = result }
            // Asked after the outcome is set: work that ended before it did rang too early for
            // the loop to see this stage done, so this stage rings for it.
            if case .success(let output) = result, !rings(output) { return }
            wake()
        }
    }

    /// Starts work that reports its own end: `start` is given the function to call, once, with
    /// the outcome (on whatever thread the work ends on); `wake` is called then. No task carries
    /// it, so its end wakes the loop and nothing else.
    init(
        wake: @escaping @Sendable () -> Void,
        reporting start: (@escaping @Sendable (Result<Output, any Error>) -> Void) -> Void
    ) {
        start { [outcome] result in
            outcome.result.withLock { $0 = result }
            wake()
        }
    }

    /// True once the stage has finished (its value is then available at once).
    var isDone: Bool { outcome.result.withLock { $0 != nil } }

    /// What the stage produced, or threw; only once `isDone`.
    func value() throws -> Output {
        guard let result = outcome.result.withLock({ $0 }) else { throw StageUnfinished() }
        return try result.get()
    }
}

/// `Stage.value` was asked before the stage finished: a defect of the loop, never of a request.
struct StageUnfinished: Error, CustomStringConvertible {
    var description: String { "a stage's value was taken before it finished" }
}

/// A batch as written: each job's step (in the order of the batch) and the outcome of each write.
struct WrittenBatch: Sendable {
    let steps: [(Int, Step?)]
    let outcomes: [PostgresStore.ItemOutcome<WriteOutput>]
    /// The events this batch's transaction marked published.
    let marked: [UUID]
    /// When its task began on the writer's thread, and when its transaction committed
    /// (`MonotonicNanos`).
    let began: UInt64
    let committed: UInt64
}

/// Acknowledged events taken to be marked published, and when the oldest was acknowledged.
struct PendingMarks: Sendable {
    var ids: [UUID] = []
    var since: ContinuousClock.Instant?
}

/// What a job written in the lookup's task publishes, made there (`writtenAnswers`): the job
/// by its sequence number, which only the loop resolves.
struct WrittenAnswer: Sendable {
    let seq: Int
    let records: [ProducerRecord]
    let events: [OutboxEvent]
    let outcome: String
}

/// What one job publishes: its answer or dead letter, and the events its write caused.
struct JobRecords {
    let job: Job
    let records: [ProducerRecord]
    let events: [OutboxEvent]
    let outcome: String
}
