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

/// Stage 4 of the loop: write the ready jobs in one transaction, and turn what was written into
/// the records each job publishes.
extension RequestPipeline {
    // MARK: - 4. Write

    /// Starts writing a batch (`LoopState.next` decided it and batched its jobs) in one
    /// transaction. The jobs are the batch's until their records are published.
    func beginWrite(_ plan: BatchPlan) -> Stage<WrittenBatch> {
        let steps = plan.steps
        guard !plan.items.isEmpty else {
            // No transaction to carry the acknowledged events' marks: they wait for the next one.
            return Stage(wake: wake) {
                let now = MonotonicNanos.now()
                return WrittenBatch(steps: steps, outcomes: [], marked: [], began: now, committed: now)
            }
        }
        let head = plan.marks.isEmpty ? [] : [PostgresStore.deletePublished(plan.marks)]
        let resultsKey = configuration.resultsKey
        let idempotencyLifetime = configuration.sessions.idempotencyLifetime
        let now = clock.now()
        metrics.writeBatches.labels("loop").increment()
        return Stage(on: store.executor(ofWriter: plan.writer), wake: wake) {
            let began = MonotonicNanos.now()
            let outcomes = try await self.retrying("write the batch", requestIDs: plan.requestIDs) {
                try await self.store.write(
                    plan.items, head: head, prefetch: plan.prefetch, writer: plan.writer, resultsKey: resultsKey,
                    rememberedUntil: now + idempotencyLifetime, at: now)
            }
            return WrittenBatch(
                steps: steps, outcomes: outcomes, marked: plan.marks, began: began, committed: MonotonicNanos.now())
        }
    }

    /// Turns a written batch into the records each of its jobs publishes.
    func records(for written: WrittenBatch, _ state: inout LoopState) -> [JobRecords] {
        var records: [JobRecords] = []
        var next = written.outcomes.makeIterator()
        for (seq, step) in written.steps {
            guard let job = state.jobs[seq] else { continue }
            state.written(job)
            if !job.phaseTimestamps.writtenWithLookup {
                job.phaseTimestamps.writeBegan = written.began
                job.phaseTimestamps.committed = written.committed
            }
            switch step {
            case .publish(let published, let outcome, let audit):
                // Its audit row was an item of the transaction: its outcome is passed over.
                if audit != nil { _ = next.next() }
                records.append(JobRecords(job: job, records: published, events: [], outcome: outcome))
            case .writeLogin(let work):
                guard let outcome = next.next() else { continue }
                if case .conflict = outcome, !job.lookedUpAgain {
                    // Most likely written already: a commit that reached the server while the
                    // connection died before its acknowledgement, then retried. Looked up again,
                    // it is answered with what was kept; a real conflict comes back here and is
                    // answered as before.
                    job.lookedUpAgain = true
                    state.move(job, to: .lookup)
                    continue
                }
                records.append(loginRecords(outcome, job: job, work: work))
            case .writeNotification(let notification):
                guard let outcome = next.next() else { continue }
                records.append(notificationRecords(outcome, job: job, notification: notification))
            case nil:
                continue
            }
        }
        return records
    }

    /// The records of jobs, with the ids of the events among them.
    func entries(_ jobs: [JobRecords]) -> [(record: ProducerRecord, event: UUID?)] {
        entries(jobs.lazy.map { ($0.records, $0.events) })
    }

    /// Each job's records then its events' records (in `AUTH_EVENTS_CONTENT_MODE`), with the ids
    /// of the events.
    func entries(_ jobs: some Sequence<([ProducerRecord], [OutboxEvent])>) -> [(
        record: ProducerRecord, event: UUID?
    )] {
        let mode = configuration.eventsContentMode
        var entries: [(record: ProducerRecord, event: UUID?)] = []
        for (records, events) in jobs {
            entries += records.map { ($0, nil) }
            entries += events.map { ($0.record(mode), $0.id) }
        }
        return entries
    }

    /// What a batch written in the lookup's task publishes, made in that task: nil unless every
    /// job's login was written (a refusal or a conflict is the loop's to answer, as any batch's).
    /// Every login is checked before any record is made: a record counts its result in the
    /// metrics, and the loop makes the records of a batch this declines.
    func writtenAnswers(_ written: WrittenBatch) -> [WrittenAnswer]? {
        guard written.steps.count == written.outcomes.count else { return nil }
        var logins: [(seq: Int, work: PreparedRequest, result: LoginResultData, json: [UInt8], events: [OutboxEvent])] =
            []
        for ((seq, step), outcome) in zip(written.steps, written.outcomes) {
            guard case .writeLogin(let work)? = step, case .written(.login(let result, let json), let events) = outcome
            else { return nil }
            logins.append((seq, work, result, json, events))
        }
        return logins.map { login in
            let answer = loginAnswer(login.result, json: login.json, work: login.work)
            return WrittenAnswer(
                seq: login.seq, records: [answer.record], events: login.events, outcome: answer.outcome)
        }
    }

    /// A written login's result record and the outcome its log line and metrics say.
    func loginAnswer(_ result: LoginResultData, json: [UInt8], work: PreparedRequest) -> (
        record: ProducerRecord, outcome: String
    ) {
        let request = work.request
        let record = resultRecord(
            result, json: json, requestID: request.id, request.traceparent, tenant: request.tenant, mode: request.mode,
            tag: Self.answerTag(digest: work.digest))
        return (record, result.error?.code.rawValue ?? "ok")
    }

    func loginRecords(_ outcome: PostgresStore.ItemOutcome<WriteOutput>, job: Job, work: PreparedRequest)
        -> JobRecords
    {
        let request = work.request
        switch outcome {
        case .written(.login(let result, let json), let events):
            let answer = loginAnswer(result, json: json, work: work)
            return JobRecords(job: job, records: [answer.record], events: events, outcome: answer.outcome)
        case .written(.notification, _), .written(.audited, _):
            return JobRecords(job: job, records: [], events: [], outcome: "internal_error")
        case .refused(let error):
            return JobRecords(
                job: job, records: refusal(error, job: job, request: request), events: [],
                outcome: Self.outcome(of: error))
        case .conflict:
            // Looked up again already, and still colliding: a real conflict, worth another try.
            let error = LoginError(
                .internalError, "the request collided with another write; send it again", retriable: true)
            return JobRecords(
                job: job, records: refusal(error, job: job, request: request), events: [], outcome: "conflict")
        }
    }

    func notificationRecords(
        _ outcome: PostgresStore.ItemOutcome<WriteOutput>, job: Job, notification: AppleNotification
    ) -> JobRecords {
        switch outcome {
        case .written(_, let events):
            logger.info(
                "Apple notification applied",
                metadata: ["apple.event": notification.type, LogKey.count: String(events.count)])
            return JobRecords(job: job, records: [], events: events, outcome: "applied")
        case .conflict:
            logger.error(
                "Provider notification could not be applied: it collided with another write",
                metadata: [LogKey.offset: String(job.message.offset)])
            return JobRecords(
                job: job, records: [deadLetter(job.message, reason: "notification_failed", text: "write conflict")],
                events: [], outcome: "dead_letter")
        case .refused(let error):
            logger.error(
                "Provider notification could not be applied",
                metadata: [LogKey.error: ErrorPolicy.loggable(error), LogKey.offset: String(job.message.offset)])
            return JobRecords(
                job: job,
                records: [deadLetter(job.message, reason: "notification_failed", text: ErrorPolicy.loggable(error))],
                events: [], outcome: "dead_letter")
        }
    }

}
