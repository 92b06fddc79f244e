import AuthDomain
import AuthStore
import Foundation
import Messages
import ServiceKit

/// What the loop is to start next, decided by `LoopState.next` from the loop's state alone and
/// carried out by `RequestPipeline.perform`, which starts the work and nothing else: every change
/// of a job's phase that a decision implies is made by the decision.
enum LoopAction {
    /// Parked preparations whose lane emptied before them (each moved to `.preparing`).
    case prepare([PendingPreparation])
    /// Publish these written jobs' records.
    case publish([JobRecords])
    /// Write this batch (its jobs already batched on its writer).
    case write(BatchPlan)
    /// Look these jobs' request ids up (they are `.lookingUp`); under light load, write them in
    /// the same transaction (`LookupPlan.writeToo`).
    case lookUp(LookupPlan)
    /// Ring the doorbell at this instant: requests are held for more to join them.
    case armLinger(until: ContinuousClock.Instant)
}

/// A batch for one writer: its jobs' steps in order, the items of its transaction, and the
/// acknowledged events its transaction marks published.
struct BatchPlan {
    let writer: Int
    let steps: [(Int, Step?)]
    let items: [WriteItem]
    let prefetch: Prefetch
    let marks: [UUID]
    let requestIDs: [String]
}

/// A lookup of request ids, and, under light load, the requests its own task prepares and writes
/// in the transaction that looks them up.
struct LookupPlan {
    let jobs: [Int]
    let requestIDs: [RequestKey]
    /// The new guests among them, for the global guest ceiling.
    let guestIDs: [RequestKey]
    /// The batch writer it reads on; nil for the pool's connections.
    let writer: Int?
    /// The requests the lookup's task may prepare and write (`RequestPipeline.writeWithLookup`);
    /// nil when the loop starts them after the lookup.
    let writeToo: [RequestPipeline.WritableWithLookup]?
    /// Whether that write may publish its records at once: not while records of written jobs wait
    /// for the loop to publish them (a later job of their lane would pass them).
    let publishesWritten: Bool
    /// Acknowledged events taken for that write: marked by it, or handed back.
    let marks: PendingMarks
}

/// The settings the loop's decisions read, fixed for its run.
struct LoopPolicy {
    /// From the configuration (`AUTH_BATCH_MAX`, `AUTH_BATCH_LINGER_MS`).
    var batchMax = 500
    var batchLinger: Duration = .zero
    /// Whether a request of a tenant must carry a reply key (`TenantFlows.requiresReplyKey`).
    var requiresReplyKey: (String?) -> Bool = { _ in false }
    // The loop's own tuning, explained where each is defined.
    var spillBacklog = RequestPipeline.spillBacklog
    var spillAfter = RequestPipeline.spillAfter
    var lingerFill = RequestPipeline.lingerFill
    var writtenWithLookup = RequestPipeline.preparedInLoop
    var marksGathered = RequestPipeline.marksGathered
    var marksGather = RequestPipeline.marksGather
}

extension LoopState {
    /// What to start now, in order: parked preparations whose lane emptied, a publish of what
    /// was written, a batch on each writer that may take one, then a lookup of what arrived (or
    /// a linger for more to join it). Each decision makes its jobs' changes of phase, so the next
    /// one sees them: a writer never takes a job another was given in the same call, and a lookup
    /// reads on a writer only when it was given nothing to write.
    mutating func next(at now: ContinuousClock.Instant, stopping: Bool) -> [LoopAction] {
        var actions: [LoopAction] = []
        let parked = takeParkedFirstInLane()
        if !parked.isEmpty { actions.append(.prepare(parked)) }
        if let jobs = stages.takeToPublish() { actions.append(.publish(jobs)) }
        var writersGiven: Set<Int> = []
        let limit = max(policy.batchMax, 1)
        let slots = stages.writeSlots(
            now: now, batchMax: limit, spillBacklog: policy.spillBacklog, spillAfter: policy.spillAfter)
        for slot in slots {
            let ready = readyJobs(for: slot.writer, limit: limit, minimum: slot.minimum)
            guard !ready.isEmpty else { continue }
            actions.append(.write(batch(ready, on: slot.writer)))
            writersGiven.insert(slot.writer)
        }
        if stages.looking == nil {
            if let until = lingersUntil(stopping: stopping) {
                if stages.lingerAlarm.map({ $0 > until || $0 < now }) ?? true {
                    stages.lingerAlarm = until
                    actions.append(.armLinger(until: until))
                }
            } else {
                let writer = stages.lookupWriter(excluding: writersGiven)
                if let plan = lookUp(writer: writer, publishesWritten: stages.toPublish.isEmpty) {
                    actions.append(.lookUp(plan))
                }
            }
        }
        return actions
    }

    /// The parked jobs first in their lane now, moved to `.preparing`, in read order.
    private mutating func takeParkedFirstInLane() -> [PendingPreparation] {
        guard !parked.isEmpty else { return [] }
        var starting: [PendingPreparation] = []
        for seq in parked.sorted() {
            guard let job = jobs[seq], case .waitingForLane(let preparation) = job.phase, isFirstInLane(job) else {
                continue
            }
            move(job, to: .preparing)
            starting.append(preparation)
        }
        return starting
    }

    /// Batches `ready` on `writer`: its transaction's items, and the acknowledged events it marks
    /// once they are worth its statement (none for a batch with nothing to write).
    private mutating func batch(_ ready: [Job], on writer: Int) -> BatchPlan {
        var items: [WriteItem] = []
        var prefetch = Prefetch()
        var steps: [(Int, Step?)] = []
        steps.reserveCapacity(ready.count)
        for job in ready {
            guard case .ready(let step) = job.phase else {
                steps.append((job.seq, nil))
                continue
            }
            steps.append((job.seq, step))
            switch step {
            case .writeLogin(let work):
                items.append(.login(work))
                prefetch.merge(work.prefetch)
            case .writeNotification(let notification):
                items.append(.notification(notification))
                prefetch.merge(notification.prefetch)
            case .publish(_, _, .some(let audit)):
                items.append(.audit(audit))
            case .publish(_, _, nil):
                break
            }
        }
        for job in ready { batch(job, on: writer) }
        let marks = items.isEmpty ? [] : takeMarks(gathered: policy.marksGathered, orAfter: policy.marksGather)
        return BatchPlan(
            writer: writer, steps: steps, items: items, prefetch: prefetch, marks: marks,
            requestIDs: items.isEmpty ? [] : ready.compactMap { $0.request?.id })
    }

    /// The jobs admitted since the last lookup, moved to `.lookingUp`; nil when there are none.
    private mutating func lookUp(writer: Int?, publishesWritten: Bool) -> LookupPlan? {
        let starting = toStart.compactMap { seq -> Job? in
            guard let job = jobs[seq], job.kind == .lookup else { return nil }
            return job
        }
        toStart = []
        guard !starting.isEmpty else { return nil }
        for job in starting { move(job, to: .lookingUp) }
        let writeToo =
            writer != nil && starting.count <= policy.writtenWithLookup ? writableWithLookup(starting) : nil
        // The acknowledged events ride on that write, as on any batch's, once gathered; handed
        // back if it does not happen.
        let marks =
            writeToo == nil
            ? PendingMarks() : takePendingMarks(gathered: policy.marksGathered, orAfter: policy.marksGather)
        return LookupPlan(
            jobs: starting.map(\.seq), requestIDs: starting.compactMap { $0.request?.key },
            guestIDs: starting.compactMap { $0.request?.method.handler.isGuestSignUp == true ? $0.request?.key : nil },
            writer: writer, writeToo: writeToo, publishesWritten: publishesWritten, marks: marks)
    }

    /// The jobs about to be looked up, as requests the lookup's task may prepare and write; nil
    /// when any of them needs the loop between the lookup and the write: a notification, a
    /// password to hash or a provider to call (each prepared in a task of its own), an account to
    /// read first, a reply key refused, a job sent back to look
    /// up again, or one whose lane holds a job before it that is not written yet (its order is
    /// the loop's to keep).
    func writableWithLookup(_ jobs: [Job]) -> [RequestPipeline.WritableWithLookup]? {
        var writable: [RequestPipeline.WritableWithLookup] = []
        var before: Set<Int> = []
        for job in jobs {
            guard let request = job.request, !job.lookedUpAgain, !request.method.handler.preparesAlone,
                !request.readsAccountWhilePreparing,
                isClearToWrite(job, after: before)
            else { return nil }
            let replyKey: [UInt8]?
            do {
                replyKey = try request.replyKey(required: policy.requiresReplyKey(request.tenant))
            } catch {
                return nil
            }
            before.insert(job.seq)
            writable.append(
                RequestPipeline.WritableWithLookup(
                    preparation: PendingPreparation(
                        seq: job.seq, request: request, digest: job.digest, replyKey: replyKey),
                    sent: RequestPipeline.sent(job)))
        }
        return writable
    }

    /// With a linger (`AUTH_BATCH_LINGER_MS`), until when the requests waiting to be looked up
    /// wait for more to join them; nil when they go now: no linger, the oldest (in read order)
    /// waited long enough, the worker stopping, or `lingerFill` requests in flight. That bound
    /// is what keeps a linger to light loads: under load, batches fill while others are
    /// written, and a request held there only adds to a queue the machine has no time to drain
    /// (at 6,000 guest logins/s on the development machine, a first version that held whenever
    /// the writers were free left 5,000 requests standing in flight, 0.9 s each).
    func lingersUntil(stopping: Bool) -> ContinuousClock.Instant? {
        guard policy.batchLinger > .zero, !stopping, jobs.count < min(policy.lingerFill, policy.batchMax),
            let oldest = toStart.lazy.compactMap({ jobs[$0] }).first
        else { return nil }
        let now = MonotonicNanos.now()
        let waited = Duration.nanoseconds(Int64(clamping: now > oldest.admittedNanos ? now - oldest.admittedNanos : 0))
        let left = policy.batchLinger - waited
        return left > .zero ? ContinuousClock.now + left : nil
    }
}
