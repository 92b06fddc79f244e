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
    /// When it was taken in (`MonotonicNanos`): its duration, its phases and a linger count from it.
    let admittedNanos = MonotonicNanos.now()
    /// When it reached each timed phase (`auth_request_phase_seconds`); an attempt sent back to
    /// look its id up again drops its marks.
    var phaseTimestamps = PhaseTimestamps()
    var request: LoginRequest?
    /// The keyed digest of the request's content (or of the raw value).
    var digest: [UInt8] = []
    /// Set only by `LoopState` (`add`, `move`): every change of phase goes through one place.
    fileprivate(set) var phase: Phase = .lookup
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
    let laneKey: LaneKey
    /// Its lane in the loop's table, from when the loop takes it in (`LoopState.add`).
    fileprivate(set) var lane: Lane?

    init(seq: Int, message: KafkaMessage, epoch: Int) {
        self.seq = seq
        self.message = message
        self.epoch = epoch
        laneKey = LaneKey(
            topic: message.topic, partition: message.partition, key: message.key ?? [],
            offset: message.key == nil ? message.offset : -1)
    }

    /// The one place a phase is set; its kind is read off the new phase, not copied back out.
    fileprivate func enter(_ phase: Phase) {
        let from = kind
        kind = phase.kind
        self.phase = phase
        if kind != from { mark() }
    }

    /// Marks when it entered its phase, the first time (`PhaseTimestamps`); a job sent back to look
    /// its id up again starts over.
    private func mark() {
        switch kind {
        case .lookup: phaseTimestamps = PhaseTimestamps()
        case .lookingUp: phaseTimestamps.lookupBegan = phaseTimestamps.lookupBegan ?? MonotonicNanos.now()
        case .preparing: phaseTimestamps.prepareBegan = phaseTimestamps.prepareBegan ?? MonotonicNanos.now()
        case .ready: phaseTimestamps.ready = phaseTimestamps.ready ?? MonotonicNanos.now()
        default: break
        }
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

/// The jobs of one lane, in read order, and what a writer may take from it now.
///
/// The loop keeps each lane's count of jobs a writer may take up to date as jobs change phase
/// (`LoopState.recount`), so asking for ready jobs costs what it takes, not a scan of every lane
/// that changed: a full batch's bookkeeping was a sixth of the loop's CPU that way.
final class Lane {
    let key: LaneKey
    /// Its jobs' seqs, in read order.
    fileprivate(set) var seqs: [Int] = []
    /// The writer whose batch holds the lane's first jobs; nil when none does (also once that
    /// batch is written and only published).
    fileprivate(set) var holder: Int?
    /// The ready jobs after those in a batch, up to the first that is not ready: what `holder`
    /// (or, without one, any writer) may take next.
    fileprivate(set) var takeable = 0
    /// Changed since it was last counted (it is in `LoopState.staleLanes`).
    fileprivate var isStale = false
    /// Its index in `LoopState.takeableLanes` while `takeable > 0`.
    fileprivate var takeableIndex: Int?

    init(key: LaneKey) { self.key = key }
}

/// The consume loop's state, all of it: the jobs in flight and their lanes, the background work
/// (`stages`), the offsets (`watermark`) and the acknowledged events to mark. Its one transition
/// of a job is `move`; what to start next is `next` (`LoopDecisions.swift`), which returns actions
/// for `RequestPipeline` to carry out.
struct LoopState {
    var jobs: [Int: Job] = [:]
    /// The work running in the background, and the loop's own clocks.
    var stages = Stages(writers: 1)
    /// The settings the decisions read.
    var policy = LoopPolicy()
    /// The lanes with jobs in flight.
    private(set) var lanes: [LaneKey: Lane] = [:]
    /// Lanes whose jobs changed since they were last counted, each once.
    private var staleLanes: [Lane] = []
    /// The lanes with jobs a writer may take (`Lane.takeable > 0`), in no order.
    private var takeableLanes = TakeableLanes()
    /// Jobs writers may take, counted in the lanes no writer holds, and per writer in its lanes.
    private var freeTakeable = 0
    private var heldTakeable: [Int: Int] = [:]
    /// Jobs to look up and start in the next pass, in read order.
    var toStart: [Int] = []
    var watermark = OffsetWatermark()
    /// Phase times of the jobs finished in this pass, added to the metrics at its end.
    var phaseTally = PhaseTally()
    /// Per partition, the assignment its last message was read under.
    var reading: [TopicPartition: Int] = [:]
    /// Request ids held by a job in flight, and the jobs with the same id waiting for it.
    private var heldIDs: [RequestKey: Int] = [:]
    private var waitingForID: [RequestKey: [Int]] = [:]
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

    /// The events to mark published in the transaction about to begin, once they are worth its
    /// statement: at least `count` of them, or the oldest acknowledged `gather` ago; none before.
    /// Under load every batch takes hundreds; under a light load each transaction would otherwise
    /// delete the one event of the login before it.
    mutating func takeMarks(
        gathered count: Int, orAfter gather: Duration, at now: ContinuousClock.Instant = .now
    ) -> [UUID] {
        guard let since = marksWaitingSince, eventsToMark.count >= count || now - since >= gather else { return [] }
        return takeMarks()
    }

    /// The events to mark published, taken for a transaction that may not happen (a write in a
    /// lookup's task) once they are worth its statement (`takeMarks(gathered:orAfter:at:)`):
    /// handed back with `handBack` if it does not.
    mutating func takePendingMarks(
        gathered count: Int, orAfter gather: Duration, at now: ContinuousClock.Instant = .now
    ) -> PendingMarks {
        let since = marksWaitingSince
        let ids = takeMarks(gathered: count, orAfter: gather, at: now)
        return ids.isEmpty ? PendingMarks() : PendingMarks(ids: ids, since: since)
    }

    /// Takes back marks whose transaction did not happen, still timed from their oldest.
    mutating func handBack(_ marks: PendingMarks) {
        guard !marks.ids.isEmpty else { return }
        eventsToMark = marks.ids + eventsToMark
        marksWaitingSince = [marks.since, marksWaitingSince].compactMap { $0 }.min() ?? .now
    }

    private var seq = 0

    mutating func nextSeq() -> Int {
        seq += 1
        return seq
    }

    /// The jobs parked until they are first in their lane: those in `Phase.waitingForLane`, kept
    /// by `move` as it changes phases.
    private(set) var parked: Set<Int> = []

    func isFirstInLane(_ job: Job) -> Bool { job.lane?.seqs.first == job.seq }

    /// True when every job before `job` in its lane is written (only published now), or among
    /// `earlier` (written in the same transaction, before it): `job` may be written now without
    /// passing any of them.
    func isClearToWrite(_ job: Job, after earlier: Set<Int>) -> Bool {
        guard let lane = job.lane else { return false }
        for seq in lane.seqs {
            if seq == job.seq { return true }
            if earlier.contains(seq) { continue }
            guard let before = jobs[seq], before.kind == .batched, before.writer == nil else { return false }
        }
        return false
    }

    /// Takes a job in, in its first phase.
    mutating func add(_ job: Job, in phase: Phase) {
        job.enter(phase)
        jobs[job.seq] = job
        let lane: Lane
        if let known = lanes[job.laneKey] {
            lane = known
        } else {
            lane = Lane(key: job.laneKey)
            lanes[job.laneKey] = lane
        }
        lane.seqs.append(job.seq)
        job.lane = lane
        changed(job)
    }

    /// The one transition of the loop: `job` moves to `phase`. Its lane is looked at again for
    /// ready jobs, and a job sent (back) to look up is queued for the next lookup.
    mutating func move(_ job: Job, to phase: Phase) {
        job.enter(phase)
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
        if let lane = job.lane { markStale(lane) }
    }

    /// Notes that a job's phase changed: its lane is looked at again, a job to look up is queued,
    /// and a job parked for its lane is listed as such.
    private mutating func changed(_ job: Job) {
        if let lane = job.lane { markStale(lane) }
        if job.kind == .lookup { toStart.append(job.seq) }
        if job.kind == .waitingForLane { parked.insert(job.seq) } else if !parked.isEmpty { parked.remove(job.seq) }
    }

    private mutating func markStale(_ lane: Lane) {
        guard !lane.isStale else { return }
        lane.isStale = true
        staleLanes.append(lane)
    }

    /// True when `job` may go ahead with `id`: no other job in flight holds it. Otherwise the job
    /// waits for the holder to finish.
    mutating func hold(_ id: RequestKey, for job: Job) -> Bool {
        guard heldIDs[id] == nil else {
            waitingForID[id, default: []].append(job.seq)
            return false
        }
        heldIDs[id] = job.seq
        return true
    }

    mutating func remove(_ job: Job) {
        jobs[job.seq] = nil
        if !parked.isEmpty { parked.remove(job.seq) }
        if let lane = job.lane {
            if lane.seqs.first == job.seq { lane.seqs.removeFirst() } else { lane.seqs.removeAll { $0 == job.seq } }
            if lane.seqs.isEmpty, lanes[lane.key] === lane { lanes[lane.key] = nil }
            // Counted again (to nothing, when empty), so its jobs leave the totals.
            markStale(lane)
        }
        guard let id = job.request?.key, heldIDs[id] == job.seq else { return }
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

    /// The ready jobs `writer` may write next: each lane's, after those already in a batch and
    /// up to the first that is not ready, in read order, `limit` at most. A lane with jobs in a
    /// batch another writer is writing is left for later (its order is that writer's until the
    /// write ends), so per-key order holds whichever writer takes a lane.
    ///
    /// Any free writer may take any other lane: the loop offers the ready jobs to its writers in
    /// order, so under light load one connection writes every batch (the second is woken only
    /// while the first is busy), and under heavy load both write.
    ///
    /// The caller batches what it takes (`batch(_:on:)`): until then the jobs stay ready, and
    /// are offered again.
    /// - Parameter minimum: fewer ready jobs than this are left for later (none taken).
    mutating func readyJobs(for writer: Int, limit: Int = .max, minimum: Int = 1) -> [Job] {
        recount()
        let available = freeTakeable + heldTakeable[writer, default: 0]
        guard available >= max(minimum, 1), limit > 0 else { return [] }
        // Cut in read order, which keeps each lane's prefix; the rest stays counted for the next
        // ask. Each lane's jobs are in read order, so once `limit` are held a lane's next job
        // later than every one held ends that lane: under a backlog of thousands, a batch of 20
        // costs about what it takes, not a sort of every ready job.
        var first = EarliestJobs(limit: limit, expected: available)
        for index in takeableLanes.firsts.indices {
            // From the lanes' counts, kept side by side: a lane whose first job to take is later
            // than every one held is passed over without reading the lane (under a backlog of
            // thousands, reading each lane, its jobs and their table was a cache miss each).
            let holder = takeableLanes.holders[index]
            guard holder == nil || holder == writer, first.wants(takeableLanes.firsts[index]) else { continue }
            let lane = takeableLanes.lanes[index]
            var left = lane.takeable
            for seq in lane.seqs {
                guard left > 0, first.wants(seq), let job = jobs[seq] else { break }
                if job.kind == .batched { continue }
                guard job.kind == .ready else { break }
                first.offer(job)
                left -= 1
            }
        }
        return first.inReadOrder()
    }

    /// Counts again the lanes that changed since they were last counted: who holds each, and
    /// how many of its jobs a writer may take.
    private mutating func recount() {
        for lane in staleLanes {
            lane.isStale = false
            var holder: Int?
            var takeable = 0
            var firstTakeable = 0
            for seq in lane.seqs {
                guard let job = jobs[seq] else { break }
                if job.kind == .batched {
                    if let writer = job.writer { holder = writer }
                    continue
                }
                guard job.kind == .ready else { break }
                if takeable == 0 { firstTakeable = seq }
                takeable += 1
            }
            count(lane, holder: holder, takeable: takeable, first: firstTakeable)
        }
        staleLanes.removeAll(keepingCapacity: true)
    }

    /// Replaces `lane`'s counts, in the totals and in the list of lanes with jobs to take.
    /// - Parameter first: the seq of its first job to take, when `takeable > 0`.
    private mutating func count(_ lane: Lane, holder: Int?, takeable: Int, first: Int) {
        tally(-lane.takeable, to: lane.holder)
        tally(takeable, to: holder)
        lane.holder = holder
        lane.takeable = takeable
        if takeable > 0 {
            takeableLanes.set(lane, holder: holder, first: first)
        } else {
            takeableLanes.remove(lane)
        }
    }

    private mutating func tally(_ count: Int, to holder: Int?) {
        guard count != 0 else { return }
        if let holder { heldTakeable[holder, default: 0] += count } else { freeTakeable += count }
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
        for lane in lanes.values {
            lane: for seq in lane.seqs {
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
    /// The Kafka record that publishes this event in `mode` (`AUTH_EVENTS_CONTENT_MODE`).
    func record(_ mode: CloudEventMode) -> ProducerRecord {
        if mode == .binary, let binary = BinaryCloudEvent(structured: payload) {
            return ProducerRecord(
                topic: topic, key: Array(key.utf8), value: binary.data,
                headers: binary.headers.map { KafkaHeader(key: $0.key, string: $0.value) })
        }
        return ProducerRecord(
            topic: topic, key: Array(key.utf8), value: payload, headers: ProducerRecord.cloudEventHeaders)
    }
}

extension ProducerRecord {
    /// A CloudEvent's headers (its content type), made once and shared by every result and event
    /// record: building them per record took two allocations.
    static let cloudEventHeaders = [KafkaHeader(key: "content-type", string: CloudEvent<UserCreatedData>.contentType)]
}

/// The lanes with jobs a writer may take, in no order, with each one's holder and the seq of
/// its first job to take kept beside it: `readyJobs` reads those two for every lane and the lane
/// itself only for those it may take from.
private struct TakeableLanes {
    private(set) var lanes: [Lane] = []
    private(set) var holders: [Int?] = []
    private(set) var firsts: [Int] = []

    /// Adds `lane`, or updates its entry.
    mutating func set(_ lane: Lane, holder: Int?, first: Int) {
        if let index = lane.takeableIndex {
            holders[index] = holder
            firsts[index] = first
        } else {
            lane.takeableIndex = lanes.count
            lanes.append(lane)
            holders.append(holder)
            firsts.append(first)
        }
    }

    /// Removes `lane` if present; the last lane takes its place.
    mutating func remove(_ lane: Lane) {
        guard let index = lane.takeableIndex else { return }
        let last = lanes.removeLast()
        let lastHolder = holders.removeLast()
        let lastFirst = firsts.removeLast()
        if last !== lane {
            lanes[index] = last
            holders[index] = lastHolder
            firsts[index] = lastFirst
            last.takeableIndex = index
        }
        lane.takeableIndex = nil
    }
}

/// The `limit` earliest jobs (by `seq`) of those offered, in read order.
///
/// While fewer than `limit` are held every job is kept; after that a max-heap on `seq` keeps the
/// earliest, and `wants` says whether a job at a given `seq` could still be among them.
struct EarliestJobs {
    private let limit: Int
    /// A max-heap on `seq` once `limit` are held; before that, in the order offered.
    private var held: [Job] = []

    init(limit: Int, expected: Int) {
        self.limit = limit
        held.reserveCapacity(min(limit, expected))
    }

    /// False when `limit` jobs are held and every one is earlier than `seq`.
    func wants(_ seq: Int) -> Bool {
        held.count < limit || seq < held[0].seq
    }

    mutating func offer(_ job: Job) {
        if held.count < limit {
            held.append(job)
            if held.count == limit {
                // Full: from here on only an earlier job displaces the latest held.
                for index in stride(from: held.count / 2 - 1, through: 0, by: -1) { siftDown(index) }
            }
            return
        }
        guard job.seq < held[0].seq else { return }
        held[0] = job
        siftDown(0)
    }

    /// The jobs held, earliest first.
    func inReadOrder() -> [Job] {
        held.sorted { $0.seq < $1.seq }
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            guard left < held.count else { return }
            var latest = left
            if left + 1 < held.count, held[left + 1].seq > held[left].seq { latest = left + 1 }
            guard held[latest].seq > held[parent].seq else { return }
            held.swapAt(parent, latest)
            parent = latest
        }
    }
}
