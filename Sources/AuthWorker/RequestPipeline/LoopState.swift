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

// MARK: - State of the loop

/// A consumed message on its way through the pipeline. Owned by the loop.
final class Job {
    let seq: Int
    let message: KafkaMessage
    /// The assignment of its partition when it was read.
    let epoch: Int
    let admittedAt = ContinuousClock.now
    var request: LoginRequest?
    /// The keyed digest of the request's content (or of the raw value).
    var digest: [UInt8] = []
    /// Set only by `LoopState` (`add`, `move`): every change of phase goes through one place.
    fileprivate(set) var phase: Phase = .lookup {
        didSet { kind = phase.kind }
    }
    /// The case of `phase` without its payload: what the loop's scans test, several times a
    /// pass, without copying the payload (a prepared write, its strings and arrays) each time.
    private(set) var kind: Phase.Kind = .lookup
    /// Set when a write conflict sent the job back to look its id up (once at most).
    var lookedUpAgain = false
    /// The writer whose batch is writing the job now (`LoopState.batch`); nil before, and once
    /// the batch is written (`LoopState.written`).
    fileprivate(set) var writer: Int?

    /// Messages with the same partition and key are written in order; messages without a key
    /// are ordered against nothing.
    let lane: LaneKey

    init(seq: Int, message: KafkaMessage, epoch: Int) {
        self.seq = seq
        self.message = message
        self.epoch = epoch
        lane = LaneKey(
            topic: message.topic, partition: message.partition, key: message.key ?? [],
            offset: message.key == nil ? message.offset : -1)
    }
}

/// Where a job is ordered: its partition and key (or, without a key, its own offset).
///
/// The loop hashes a lane several times a pass (the lane table, the changed set), so its hash
/// is computed once, with the key's bytes hashed as one buffer (an array of bytes hashes them
/// one by one).
struct LaneKey: Hashable {
    let topic: String
    let partition: Int32
    let key: [UInt8]
    let offset: Int64
    /// The hash of the four fields, with this process's seed.
    let digest: Int

    init(topic: String, partition: Int32, key: [UInt8], offset: Int64) {
        self.topic = topic
        self.partition = partition
        self.key = key
        self.offset = offset
        var hasher = Hasher()
        hasher.combine(topic)
        hasher.combine(partition)
        key.withUnsafeBytes { hasher.combine(bytes: $0) }
        hasher.combine(offset)
        digest = hasher.finalize()
    }

    static func == (lhs: LaneKey, rhs: LaneKey) -> Bool {
        lhs.digest == rhs.digest && lhs.partition == rhs.partition && lhs.offset == rhs.offset && lhs.key == rhs.key
            && lhs.topic == rhs.topic
    }

    func hash(into hasher: inout Hasher) { hasher.combine(digest) }
}

/// A request to prepare in the background, with what the pipeline decided about it.
struct Preparation: Sendable {
    let seq: Int
    let request: LoginRequest
    let digest: [UInt8]
    let replyKey: [UInt8]?
}

enum Phase {
    /// Another job with the same request id is in flight: this one waits for its outcome.
    case waitingForID
    /// Its preparation reads the account: it waits until it is first in its lane.
    case waitingForLane(Preparation)
    /// To be looked up (and started) in the next pass.
    case lookup
    /// Its request id is being looked up.
    case lookingUp
    /// Its preparation runs in the background.
    case preparing
    /// Its preparation gave up (shutdown): it and the jobs behind it in its lane are replayed later.
    case abandoned
    case ready(Step)
    /// In a batch being written or published.
    case batched

    /// The cases without their payloads.
    enum Kind {
        case waitingForID, waitingForLane, lookup, lookingUp, preparing, abandoned, ready, batched
    }

    var kind: Kind {
        switch self {
        case .waitingForID: .waitingForID
        case .waitingForLane: .waitingForLane
        case .lookup: .lookup
        case .lookingUp: .lookingUp
        case .preparing: .preparing
        case .abandoned: .abandoned
        case .ready: .ready
        case .batched: .batched
        }
    }
}

/// What a ready job still needs.
enum Step: Sendable {
    /// Nothing to write but its audit row, if any (in the next batch's transaction): publish
    /// these records.
    case publish([ProducerRecord], outcome: String, audit: AuditEntry?)
    case writeLogin(PreparedRequest)
    case writeNotification(AppleNotification)
}

/// What a background preparation posts.
enum Prepared: Sendable {
    case login(PreparedRequest)
    case refused(any Error)
    case notification(AppleNotification)
    case notificationRefused(String)
    case abandoned
}

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
    init(
        on executor: any TaskExecutor = globalConcurrentExecutor, wake: @escaping @Sendable () -> Void,
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
}

/// What one job publishes: its answer or dead letter, and the events its write caused.
struct JobRecords {
    let job: Job
    let records: [ProducerRecord]
    let events: [OutboxEvent]
    let outcome: String
}

struct LoopState {
    var jobs: [Int: Job] = [:]
    /// Job seqs per lane, in the order they were read.
    var lanes: [LaneKey: [Int]] = [:]
    /// Lanes whose jobs changed since they were last looked at for ready jobs.
    private var changedLanes: Set<LaneKey> = []
    /// Jobs to look up and start in the next pass, in read order.
    var toStart: [Int] = []
    var watermark = OffsetWatermark()
    /// Per partition, the assignment its last message was read under.
    var reading: [TopicPartition: Int] = [:]
    /// Request ids held by a job in flight, and the jobs with the same id waiting for it.
    private var heldIDs: [String: Int] = [:]
    private var waitingForID: [String: [Int]] = [:]
    /// Events acknowledged by the broker, to mark published in the next transaction.
    var eventsToMark: [UUID] = []
    /// When the oldest of `eventsToMark` was acknowledged; nil when there are none.
    var marksWaitingSince: ContinuousClock.Instant?

    /// Notes events the broker acknowledged, to be marked published.
    mutating func acknowledged(_ events: [UUID]) {
        guard !events.isEmpty else { return }
        if eventsToMark.isEmpty { marksWaitingSince = .now }
        eventsToMark += events
    }

    /// The events to mark published in the transaction about to begin.
    mutating func takeMarks() -> [UUID] {
        defer {
            eventsToMark = []
            marksWaitingSince = nil
        }
        return eventsToMark
    }
    private var seq = 0

    mutating func nextSeq() -> Int {
        seq += 1
        return seq
    }

    /// Jobs parked until they are first in their lane (`Phase.waitingForLane`).
    var parked: Set<Int> = []

    func isFirstInLane(_ job: Job) -> Bool { lanes[job.lane]?.first == job.seq }

    /// Takes a job in, in its first phase.
    mutating func add(_ job: Job, in phase: Phase) {
        job.phase = phase
        jobs[job.seq] = job
        lanes[job.lane, default: []].append(job.seq)
        changed(job)
    }

    /// The one transition of the loop: `job` moves to `phase`. Its lane is looked at again for
    /// ready jobs, and a job sent (back) to look up is queued for the next lookup.
    mutating func move(_ job: Job, to phase: Phase) {
        job.phase = phase
        if job.kind != .batched { job.writer = nil }
        changed(job)
    }

    /// `job` joins the batch `writer` writes now: its lane's later jobs wait for that write.
    mutating func batch(_ job: Job, on writer: Int) {
        move(job, to: .batched)
        job.writer = writer
    }

    /// `job`'s batch is written (it is published next): its lane's later jobs may go to any writer.
    mutating func written(_ job: Job) {
        guard job.writer != nil else { return }
        job.writer = nil
        changedLanes.insert(job.lane)
    }

    /// Notes that a job's phase changed: its lane is looked at again, and a job to look up is queued.
    private mutating func changed(_ job: Job) {
        changedLanes.insert(job.lane)
        if job.kind == .lookup { toStart.append(job.seq) }
    }

    /// True when `job` may go ahead with `id`: no other job in flight holds it. Otherwise the job
    /// waits for the holder to finish.
    mutating func hold(_ id: String, for job: Job) -> Bool {
        guard heldIDs[id] == nil else {
            waitingForID[id, default: []].append(job.seq)
            return false
        }
        heldIDs[id] = job.seq
        return true
    }

    mutating func remove(_ job: Job) {
        jobs[job.seq] = nil
        if var lane = lanes[job.lane] {
            if lane.first == job.seq { lane.removeFirst() } else { lane.removeAll { $0 == job.seq } }
            lanes[job.lane] = lane.isEmpty ? nil : lane
        }
        changedLanes.insert(job.lane)
        guard let id = job.request?.id, heldIDs[id] == job.seq else { return }
        heldIDs[id] = nil
        // The next job with this id goes ahead now, and will find this one's answer.
        guard var waiting = waitingForID[id], !waiting.isEmpty else { return }
        let next = waiting.removeFirst()
        waitingForID[id] = waiting.isEmpty ? nil : waiting
        if let job = jobs[next] {
            heldIDs[id] = next
            move(job, to: .lookup)
        }
    }

    /// The ready jobs `writer` may write next: each changed lane's, after those already in a
    /// batch and up to the first that is not ready, in read order, `limit` at most. A lane with
    /// jobs in a batch another writer is writing is left for later (its order is that writer's
    /// until the write ends), so per-key order holds whichever writer takes a lane.
    ///
    /// Any free writer may take any other lane: the loop offers the ready jobs to its writers in
    /// order, so under light load one connection writes every batch (the second is woken only
    /// while the first is busy), and under heavy load both write.
    /// - Parameter minimum: fewer ready jobs than this are left for later (none taken).
    mutating func readyJobs(for writer: Int, limit: Int = .max, minimum: Int = 1) -> [Job] {
        var ready: [Job] = []
        var looked: [LaneKey] = []
        lanes: for lane in changedLanes {
            var taken: [Job] = []
            for seq in lanes[lane] ?? [] {
                guard let job = jobs[seq] else { break }
                if job.kind == .batched {
                    // Being written elsewhere: the lane is looked at again when that write ends.
                    if let other = job.writer, other != writer { continue lanes }
                    continue
                }
                guard job.kind == .ready else { break }
                taken.append(job)
            }
            looked.append(lane)
            ready += taken
        }
        guard ready.count >= max(minimum, 1) else { return [] }
        for lane in looked { changedLanes.remove(lane) }
        ready.sort { $0.seq < $1.seq }
        guard ready.count > limit else { return ready }
        // Cut in read order, which keeps each lane's prefix; the lanes cut short are looked at again.
        for job in ready[limit...] { changedLanes.insert(job.lane) }
        return Array(ready.prefix(limit))
    }

    /// How many jobs are in each phase, for a drain's log line: `ready=3 abandoned=1`.
    var phaseSummary: String {
        var counts: [String: Int] = [:]
        for job in jobs.values {
            let name =
                switch job.phase {
                case .lookup: "lookup"
                case .lookingUp: "looking_up"
                case .preparing: "preparing"
                case .ready: "ready"
                case .batched: "batched"
                case .waitingForID: "waiting_for_id"
                case .waitingForLane: "waiting_for_lane"
                case .abandoned: "abandoned"
                }
            counts[name, default: 0] += 1
        }
        return counts.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
    }

    /// False when nothing in flight can finish any more: only abandoned jobs, jobs waiting for
    /// an id another job holds, and ready jobs behind either in their lane (a lane is written in
    /// order, so those can never be batched). A drain ends there instead of waiting for ever.
    var canProgress: Bool {
        for job in jobs.values {
            switch job.kind {
            case .lookup, .lookingUp, .preparing, .batched: return true
            case .ready, .waitingForID, .waitingForLane, .abandoned: continue
            }
        }
        for seqs in lanes.values {
            lane: for seq in seqs {
                guard let job = jobs[seq] else { break lane }
                switch job.kind {
                case .batched: continue lane
                // A parked job at the head of its lane is started on the next turn.
                case .ready, .waitingForLane: return true
                default: break lane
                }
            }
        }
        return false
    }
}

extension OutboxEvent {
    /// The Kafka record that publishes this event.
    var record: ProducerRecord {
        ProducerRecord(
            topic: topic, key: Array(key.utf8), value: payload,
            headers: [KafkaHeader(key: "content-type", string: CloudEvent<UserCreatedData>.contentType)])
    }
}
