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

/// Stages 5 and 6 of the loop: publish a batch's records, mark acknowledged events published,
/// and finish the jobs (offsets, metrics, the log line).
extension RequestPipeline {
    // MARK: - 5. Publish

    /// Publishes records in one producer batch; transient failures are sent again. The first
    /// attempt's end wakes the loop from the producer's delivery thread; only a retry (rare) runs
    /// in a task of its own.
    /// - Returns: a stage whose value is the ids of the events acknowledged.
    func beginPublish(_ entries: [(record: ProducerRecord, event: UUID?)]) -> Stage<[UUID]> {
        Stage(wake: wake) { finish in
            producer.deliver(entries.map(\.record)) { outcomes in
                let first = self.sort(entries, outcomes)
                guard !first.again.isEmpty else { return finish(.success(first.acknowledged)) }
                Task(executorPreference: globalConcurrentExecutor) {
                    do {
                        finish(.success(first.acknowledged + (try await self.publishAgain(first.again))))
                    } catch {
                        finish(.failure(error))
                    }
                }
            }
        }
    }

    /// Sends again what failed transiently, after a growing pause, until every record has an
    /// outcome (or the worker stops).
    /// - Returns: the ids of the events acknowledged.
    func publishAgain(_ failed: [(record: ProducerRecord, event: UUID?)]) async throws -> [UUID] {
        var pending = failed
        var acknowledged: [UUID] = []
        var delay = configuration.processing.initialRetryDelay
        while !pending.isEmpty {
            if isStopping { throw ShutdownDuringRetry() }
            beat()
            metrics.retries.increment()
            logger.warning(
                "Transient failure; retrying",
                metadata: [
                    "retry.operation": "publish", LogKey.count: String(pending.count),
                    LogKey.requestIDs: Self.listed(requestIDs(pending)),
                ])
            try await Task.sleep(for: Self.jitter(delay))
            delay = min(delay * 2, configuration.processing.maxRetryDelay)
            let sorted = sort(pending, await producer.deliver(pending.map(\.record)))
            acknowledged += sorted.acknowledged
            pending = sorted.again
        }
        return acknowledged
    }

    /// The request ids among records (the keys of results).
    func requestIDs(_ entries: [(record: ProducerRecord, event: UUID?)]) -> [String] {
        entries.compactMap { entry in
            entry.record.topic == configuration.topics.results
                ? entry.record.key.map { String(decoding: $0, as: UTF8.self) } : nil
        }
    }

    /// Sorts a delivery's outcomes: the events acknowledged, and what to send again (a transient
    /// failure; a dead letter the broker found too large, as the record of it). A record the
    /// broker will never take is logged and let go.
    func sort(_ entries: [(record: ProducerRecord, event: UUID?)], _ outcomes: [Result<DeliveryReport, KafkaError>])
        -> (acknowledged: [UUID], again: [(record: ProducerRecord, event: UUID?)])
    {
        var acknowledged: [UUID] = []
        var again: [(record: ProducerRecord, event: UUID?)] = []
        for (entry, outcome) in zip(entries, outcomes) {
            switch outcome {
            case .success:
                if let event = entry.event { acknowledged.append(event) }
            case .failure(let error) where ErrorPolicy.classify(error) == .transient:
                again.append(entry)
            case .failure(let error)
            where entry.record.topic == configuration.topics.deadLetters && !entry.record.value.isEmpty:
                // The broker's own limit is lower than ours: publish the record of it instead.
                logger.warning(
                    "A dead letter was refused; publishing the record of it",
                    metadata: [LogKey.topic: entry.record.topic, LogKey.error: error.description])
                again.append((Self.recordOf(entry.record), entry.event))
            case .failure(let error):
                // A record the broker will never take: that record's problem, not the worker's.
                logger.error(
                    "A record could not be published",
                    metadata: [LogKey.topic: entry.record.topic, LogKey.error: error.description])
            }
        }
        return (acknowledged, again)
    }

    /// How long acknowledged events wait for a batch's transaction to mark them published before
    /// they are marked on their own. Under steady traffic the next batch comes well within it, so
    /// marking costs no statement and no commit of its own (at 100 logins/s it was a third of the
    /// commits); it is far below the relay's grace (30 s), so the relay never takes them meanwhile.
    static let idleMarkDelay: Duration = .seconds(1)
    /// How many acknowledged events a transaction marks published at once, or how long the oldest
    /// waits for more before the next transaction marks it with what else has come. Under load a
    /// batch's own events are more than this; under a light load one statement carries a tenth of
    /// a second's events instead of one login's, and published events stay in the outbox that much
    /// longer (`auth_outbox_backlog_events` counts them meanwhile; the relay's grace is 30 s).
    static let marksGathered = 64
    static let marksGather: Duration = .milliseconds(100)
    /// How many ready jobs make a writer start while one before it is busy (or the batch size,
    /// if smaller). A transaction's fixed cost (statements, round trips, commit) is worth paying
    /// twice at once only for a batch that spreads it thin: from 8, a second writer took small
    /// batches at half load, and PostgreSQL spent 1.7× its full-batch CPU a login there. Fewer
    /// waiting than this wait for the busy writer, or `spillAfter`, whichever comes first
    /// (docs/performance.md, "A second writer only for a batch worth its transaction").
    static let spillBacklog = 64
    /// How long a writer may write before the next one starts whatever the backlog (a write that
    /// waits on a row lock, a slow server).
    static let spillAfter: Duration = .milliseconds(20)
    /// The longest the busy loop waits on its doorbell without polling the consumer.
    static let waitTick: Duration = .milliseconds(100)

    /// Marks the acknowledged events published in a statement of their own, once the oldest has
    /// waited `delay` for a batch to carry it.
    func deletePublishedWhileIdle(_ state: inout LoopState, after delay: Duration) async throws {
        guard let since = state.marksWaitingSince, ContinuousClock.now - since >= delay else { return }
        let marks = state.eventsToMark
        try await retrying("mark events published") { try await self.store.deletePublished(marks) }
        _ = state.takeMarks()
    }

    // MARK: - 6. Finish

    func finish(_ done: [JobRecords], _ state: inout LoopState) {
        let now = MonotonicNanos.now()
        var lines: [(message: String, metadata: Logger.Metadata)] = []
        lines.reserveCapacity(done.count)
        for finished in done {
            let job = finished.job
            state.watermark.finish(job.message.topicPartition, offset: job.message.offset, epoch: job.epoch)
            state.remove(job)
            // On the clock its phases are timed by: together they are exactly this.
            let took = now > job.admittedNanos ? now - job.admittedNanos : 0
            let method =
                job.request?.method.rawValue
                ?? (job.message.topic == configuration.topics.notifications ? "notification" : "unknown")
            metrics.requestDuration.labels(method, finished.outcome).observe(Double(took) / 1e9)
            state.phaseTally.observe(job.phaseTimestamps, admitted: job.admittedNanos, finished: now)
            guard let request = job.request else { continue }
            // One line per request, so an operator can follow any of them by id or trace; the
            // pass's lines are written together.
            var metadata: Logger.Metadata = [
                LogKey.requestID: request.id, LogKey.method: request.method.rawValue, LogKey.outcome: finished.outcome,
                LogKey.duration: String(took / 1_000_000), LogKey.partition: String(job.message.partition),
                LogKey.offset: String(job.message.offset),
            ]
            if let trace = request.traceparent?.split(separator: "-").dropFirst().first {
                metadata[LogKey.traceID] = String(trace)
            }
            lines.append(("Request handled", metadata))
        }
        metrics.add(&state.phaseTally)
        logger.log(.info, lines: lines)
    }

}
