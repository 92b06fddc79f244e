import AuthCrypto
import Foundation
import Kafka
import Messages
import Synchronization
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// The consume loop's bookkeeping: which jobs may be written together, and which offsets may be
/// stored.
@Suite struct PipelineStateTests {
    private func message(partition: Int32 = 0, offset: Int64, key: String?, assignment: Int = 1) -> KafkaMessage {
        KafkaMessage(
            topic: "requests", partition: partition, offset: offset, key: key.map { Array($0.utf8) }, value: [],
            headers: [], timestamp: nil, assignment: assignment)
    }

    private func ready(_ job: Job, _ state: inout LoopState) {
        state.move(job, to: .ready(.publish([], outcome: "ok", audit: nil)))
    }

    /// `count` jobs at offsets 0..<count, each keyed by `key(offset)`.
    private func makeJobs(_ count: Int, _ state: inout LoopState, key: (Int) -> String) -> [Job] {
        (0..<count).map { offset in
            Job(seq: state.nextSeq(), message: message(offset: Int64(offset), key: key(offset)), epoch: 0)
        }
    }

    /// Takes `jobs` in and makes each ready.
    private func admitReady(_ jobs: some Sequence<Job>, _ state: inout LoopState) {
        for job in jobs {
            state.add(job, in: .lookup)
            ready(job, &state)
        }
    }

    @Test func acknowledgedEventsWaitForTheNextTransactionFromTheFirstAcknowledgement() throws {
        var state = LoopState()
        state.acknowledged([])
        #expect(state.marksWaitingSince == nil, "nothing acknowledged, nothing waits")
        let first = [UUID(), UUID()]
        state.acknowledged(first)
        let since = try #require(state.marksWaitingSince)
        let second = [UUID()]
        state.acknowledged(second)
        #expect(state.marksWaitingSince == since, "the wait is timed from the oldest acknowledgement")
        #expect(state.takeMarks() == first + second)
        #expect(state.eventsToMark.isEmpty)
        #expect(state.marksWaitingSince == nil)
        #expect(RequestPipeline.idleMarkDelay < .seconds(30), "marked long before the relay's grace lets it take them")
    }

    /// A transaction marks acknowledged events published once they are worth its statement: as
    /// many as `marksGathered`, or the oldest acknowledged `marksGather` ago. Before that they stay,
    /// timed from the oldest; nothing is taken when nothing waits.
    @Test func acknowledgedEventsAreMarkedOnceGatheredOrOldEnough() throws {
        var state = LoopState()
        let gather = RequestPipeline.marksGather
        let count = RequestPipeline.marksGathered
        #expect(state.takeMarks(gathered: 0, orAfter: .zero).isEmpty, "nothing waits")
        #expect(state.takePendingMarks(gathered: 0, orAfter: .zero).since == nil)
        let first = (0..<3).map { _ in UUID() }
        state.acknowledged(first)
        let since = try #require(state.marksWaitingSince)
        let early = since + gather / 2
        #expect(state.takeMarks(gathered: count, orAfter: gather, at: early).isEmpty)
        let pending = state.takePendingMarks(gathered: count, orAfter: gather, at: early)
        #expect(pending.ids.isEmpty && pending.since == nil, "a lookup's write carries none yet")
        #expect(state.eventsToMark == first && state.marksWaitingSince == since, "still waiting, still timed")
        #expect(state.takeMarks(gathered: count, orAfter: gather, at: since + gather) == first, "old enough")
        #expect(state.eventsToMark.isEmpty && state.marksWaitingSince == nil)

        let many = (0..<count).map { _ in UUID() }
        state.acknowledged(many)
        let manySince = try #require(state.marksWaitingSince)
        let taken = state.takePendingMarks(gathered: count, orAfter: gather, at: manySince)
        #expect(taken.ids == many && taken.since == manySince, "enough to be worth a statement at once")
        #expect(state.eventsToMark.isEmpty)
        #expect(
            gather < RequestPipeline.idleMarkDelay, "a light load's next transaction marks them before the idle path")
        #expect(count < WorkerConfiguration.Processing().batchMax, "a full batch's own events are more than enough")
    }

    /// Marks taken for a write in a lookup's task come back, still timed from their oldest, when
    /// that write does not happen; nothing is lost or marked twice.
    @Test func marksTakenForAWriteThatDidNotHappenAreHandedBackInFull() throws {
        var state = LoopState()
        let first = [UUID(), UUID()]
        state.acknowledged(first)
        let since = try #require(state.marksWaitingSince)
        let taken = state.takePendingMarks(gathered: 2, orAfter: .seconds(1))
        #expect(taken.ids == first)
        #expect(taken.since == since)
        #expect(state.eventsToMark.isEmpty && state.marksWaitingSince == nil)
        let later = [UUID()]
        state.acknowledged(later)
        state.handBack(taken)
        #expect(state.eventsToMark == first + later)
        #expect(state.marksWaitingSince == since, "timed from the oldest, not from the hand-back")
        state.handBack(PendingMarks())
        #expect(state.takeMarks() == first + later)
    }

    /// A job may be written in its lookup's task only when every job before it in its lane is
    /// written (or written in the same transaction, before it): its key's order is kept.
    @Test func aJobIsClearToWriteOnlyBehindWrittenJobsOfItsLane() {
        var state = LoopState()
        let jobs = [("a", 0), ("a", 1), ("a", 2), ("b", 3)].map { key, offset in
            Job(seq: state.nextSeq(), message: message(offset: Int64(offset), key: key), epoch: 0)
        }
        for job in jobs { state.add(job, in: .lookingUp) }
        #expect(state.isClearToWrite(jobs[0], after: []), "first in its lane")
        #expect(state.isClearToWrite(jobs[3], after: []), "first in another lane")
        #expect(!state.isClearToWrite(jobs[1], after: []), "behind a job still looking up")
        #expect(state.isClearToWrite(jobs[1], after: [jobs[0].seq]), "behind one written just before it")
        #expect(!state.isClearToWrite(jobs[2], after: [jobs[0].seq]), "behind one not in the transaction")
        state.batch(jobs[0], on: 1)
        #expect(!state.isClearToWrite(jobs[1], after: []), "behind a batch being written")
        state.written(jobs[0])
        #expect(state.isClearToWrite(jobs[1], after: []), "behind a written batch, only published now")
        let outside = Job(seq: state.nextSeq(), message: message(offset: 9, key: "c"), epoch: 0)
        #expect(!state.isClearToWrite(outside, after: []), "a job the loop has not taken in")
    }

    @Test func readyJobsKeepEachKeysOrderAndStopAtTheFirstThatIsNotReady() {
        var state = LoopState()
        let jobs = [("a", 0), ("b", 1), ("a", 2), ("a", 3), ("b", 4)].map { key, offset in
            Job(seq: state.nextSeq(), message: message(offset: Int64(offset), key: key), epoch: 0)
        }
        for job in jobs { state.add(job, in: .lookup) }
        // a: ready, ready(2), not ready(3); b: ready, ready.
        for index in [0, 1, 2, 4] { ready(jobs[index], &state) }
        state.move(jobs[3], to: .preparing)
        let first = state.readyJobs(for: 0)
        #expect(first.map(\.seq) == [jobs[0], jobs[1], jobs[2], jobs[4]].map(\.seq))
        for job in first { state.move(job, to: .batched) }
        // Nothing changed since: nothing new is ready.
        #expect(state.readyJobs(for: 0).isEmpty)
        ready(jobs[3], &state)
        #expect(state.readyJobs(for: 0).map(\.seq) == [jobs[3].seq])
    }

    /// A drain stops waiting when nothing can move: a ready job behind an abandoned one in its lane
    /// can never be written (seen in the fault injection: a SIGTERM drain waited out its whole
    /// deadline with two such jobs and nothing else in flight).
    @Test func readyJobsBehindAnAbandonedOneCannotProgress() {
        var state = LoopState()
        let jobs = [("a", 0), ("a", 1), ("b", 2)].map { key, offset in
            Job(seq: state.nextSeq(), message: message(offset: Int64(offset), key: key), epoch: 0)
        }
        for job in jobs { state.add(job, in: .lookup) }
        state.move(jobs[0], to: .abandoned)
        ready(jobs[1], &state)
        state.move(jobs[2], to: .abandoned)
        #expect(!state.canProgress, "a's ready job is stuck behind its abandoned head")
        state.move(jobs[0], to: .preparing)
        #expect(state.canProgress, "a job being prepared will finish")
        state.move(jobs[0], to: .batched)
        #expect(state.canProgress, "with its head written, the ready one can be batched")
        state.move(jobs[0], to: .waitingForID)
        #expect(!state.canProgress)
    }

    /// Publishes complete on background tasks while the loop looks at them. The loop used to
    /// finish the stages it saw done and then remove "whatever is done now": a stage completing in
    /// between was removed unfinished, its jobs left batched for ever (a SIGTERM drain then waited
    /// out its deadline with 157 batched jobs and nothing running, in the fault injection). Every
    /// entry must land on exactly one side, however often its state changes while it is looked at.
    @Test func aStageCompletingWhileLookedAtIsNeverDropped() {
        final class Flaky {
            var asked = 0
            /// Not done the first time it is asked, done from then on.
            var isDone: Bool {
                asked += 1
                return asked > 1
            }
        }
        let entries = (0..<5).map { _ in Flaky() }
        let (done, pending) = RequestPipeline.split(entries) { $0.isDone }
        #expect(done.count + pending.count == entries.count)
        #expect(pending.count == 5, "asked once each: none was done yet")
        let (later, rest) = RequestPipeline.split(pending) { $0.isDone }
        #expect(later.count == 5 && rest.isEmpty)
    }

    /// A lookup's task that published its write's records ends without waking the loop: the
    /// delivery wakes it, and it takes both then. The stage still wakes it when that delivery
    /// ended first (its ring came before the loop could see the stage done), and on any error.
    @Test func aStageWhoseWorkWakesTheLoopLaterEndsQuietlyUnlessThatWorkEndedFirst() async throws {
        final class Rings: Sendable {
            let count = Mutex(0)
            let asked = Mutex(false)
        }
        // Generous: the stage's task waits for the cooperative pool, which the parallel run can
        // keep busy for over a minute.
        func waitUntil(_ condition: () -> Bool) async throws {
            let deadline = ContinuousClock.now + .seconds(150)
            while !condition() {
                #expect(ContinuousClock.now < deadline)
                if ContinuousClock.now >= deadline { return }
                try await Task.sleep(for: .milliseconds(2))
            }
        }
        // The work it carries has not ended: no ring.
        let quiet = Rings()
        let later = Stage<Int>(
            wake: { quiet.count.withLock { $0 += 1 } },
            rings: { _ in
                quiet.asked.withLock { $0 = true }
                return false
            }
        ) { 1 }
        try await waitUntil { quiet.asked.withLock { $0 } }
        try await Task.sleep(for: .milliseconds(50))
        #expect(later.isDone)
        #expect(try later.value() == 1)
        #expect(quiet.count.withLock { $0 } == 0)
        // That work ended first: the stage rings for it.
        let first = Rings()
        _ = Stage<Int>(wake: { first.count.withLock { $0 += 1 } }, rings: { _ in true }) { 2 }
        try await waitUntil { first.count.withLock { $0 } == 1 }
        // An error always rings: the loop must see it.
        let failing = Rings()
        let failed = Stage<Int>(wake: { failing.count.withLock { $0 += 1 } }, rings: { _ in false }) {
            throw CancellationError()
        }
        try await waitUntil { failing.count.withLock { $0 } == 1 }
        #expect(throws: CancellationError.self) { try failed.value() }
    }

    @Test func aBatchIsCutAtTheLimitInReadOrderAndTheRestComesNext() {
        var state = LoopState()
        let jobs = makeJobs(10, &state) { "k\($0 % 3)" }
        admitReady(jobs, &state)
        let first = state.readyJobs(for: 0, limit: 4)
        #expect(first.map(\.seq) == jobs.prefix(4).map(\.seq))
        for job in first { state.move(job, to: .batched) }
        let second = state.readyJobs(for: 0, limit: 4)
        #expect(second.map(\.seq) == jobs[4..<8].map(\.seq))
        for job in second { state.move(job, to: .batched) }
        #expect(state.readyJobs(for: 0, limit: 4).map(\.seq) == jobs[8...].map(\.seq))
    }

    /// A backlog far larger than a batch (a preload with a small `AUTH_BATCH_MAX`): each ask takes
    /// the earliest jobs in read order, across lanes of one job and lanes of many, until none is left.
    @Test func smallBatchesFromALargeBacklogTakeItsEarliestJobsInReadOrder() {
        var state = LoopState()
        // Lanes of one (no key) interleaved with seven keyed lanes, read in that order.
        let jobs = makeJobs(2_000, &state) { $0 % 3 == 0 ? "k\($0 % 7)" : "solo\($0)" }
        // Made ready from the last read to the first, so no lane is counted in read order.
        for job in jobs { state.add(job, in: .lookup) }
        for job in jobs.reversed() { ready(job, &state) }
        var taken: [Int] = []
        while true {
            let batch = state.readyJobs(for: 0, limit: 20)
            if batch.isEmpty { break }
            #expect(batch.count == min(20, jobs.count - taken.count))
            #expect(batch.map(\.seq) == batch.map(\.seq).sorted(), "each batch in read order")
            for job in batch { state.batch(job, on: 0) }
            taken += batch.map(\.seq)
        }
        #expect(taken == jobs.map(\.seq), "every job once, the earliest first")
    }

    @Test func aLaneBeingWrittenWaitsForItsWriterWhileTheOtherWriterTakesTheRest() {
        var state = LoopState()
        let jobs = [("a", 0), ("b", 1), ("a", 2), ("c", 3)].map { key, offset in
            Job(seq: state.nextSeq(), message: message(offset: Int64(offset), key: key), epoch: 0)
        }
        for job in jobs { state.add(job, in: .lookup) }
        ready(jobs[0], &state)
        ready(jobs[1], &state)
        // The first free writer takes everything ready.
        let first = state.readyJobs(for: 0)
        #expect(first.map(\.seq) == [jobs[0], jobs[1]].map(\.seq))
        for job in first { state.batch(job, on: 0) }
        // While writer 0 writes a's first job, a's next waits for it; c goes to writer 1.
        ready(jobs[2], &state)
        ready(jobs[3], &state)
        #expect(state.readyJobs(for: 1).map(\.seq) == [jobs[3].seq], "a is writer 0's until its write ends")
        state.batch(jobs[3], on: 1)
        #expect(state.readyJobs(for: 1).isEmpty, "still: a waits for writer 0")
        #expect(state.readyJobs(for: 0).map(\.seq) == [jobs[2].seq], "the writer holding the lane may go on with it")
        // Written (published next, still in its batch): the lane may go to any writer.
        var again = LoopState()
        let lane = [0, 1].map { Job(seq: again.nextSeq(), message: message(offset: Int64($0), key: "k"), epoch: 0) }
        for job in lane { again.add(job, in: .lookup) }
        ready(lane[0], &again)
        for job in again.readyJobs(for: 0) { again.batch(job, on: 0) }
        ready(lane[1], &again)
        #expect(again.readyJobs(for: 1).isEmpty)
        again.written(lane[0])
        #expect(again.readyJobs(for: 1).map(\.seq) == [lane[1].seq], "its earlier job is written: order holds")
        // Sent back to look up (a conflict), a job leaves its writer.
        again.batch(lane[1], on: 1)
        again.move(lane[1], to: .lookup)
        #expect(lane[1].writer == nil)
    }

    /// A writer asked for a backlog takes nothing below it, and leaves what it saw for the next ask.
    @Test func belowTheMinimumNothingIsTakenAndNothingIsLost() {
        var state = LoopState()
        let jobs = makeJobs(3, &state) { "k\($0)" }
        admitReady(jobs.prefix(2), &state)
        #expect(state.readyJobs(for: 1, minimum: 3).isEmpty)
        admitReady([jobs[2]], &state)
        let taken = state.readyJobs(for: 1, minimum: 3)
        #expect(taken.map(\.seq) == jobs.map(\.seq))
        // The loop batches what it takes (`beginWrite`): nothing is offered twice.
        for job in taken { state.batch(job, on: 1) }
        #expect(state.readyJobs(for: 0).isEmpty)
        #expect(state.readyJobs(for: 1).isEmpty)
    }

    /// Under light load every batch goes to the first writer; the second takes only what arrives
    /// while the first is busy, and together they cover every job once.
    @Test func writersTogetherCoverEveryJobOnceAndTheFirstTakesAllWhenFree() {
        var state = LoopState()
        let jobs = makeJobs(40, &state) { "key-\($0 % 7)" }
        admitReady(jobs.prefix(20), &state)
        let zero = state.readyJobs(for: 0, limit: 10)
        for job in zero { state.batch(job, on: 0) }
        admitReady(jobs.suffix(20), &state)
        let one = state.readyJobs(for: 1)
        // Every lane has jobs in writer 0's batch: writer 1 may take none of them yet.
        #expect(one.isEmpty)
        for job in zero { state.written(job) }
        let next = state.readyJobs(for: 1)
        #expect(Set(zero.map(\.seq)).isDisjoint(with: next.map(\.seq)))
        #expect(Set(zero.map(\.seq) + next.map(\.seq)) == Set(jobs.map(\.seq)))
        #expect(next.map(\.seq) == next.map(\.seq).sorted(), "in read order")
    }

    /// The ready jobs a writer may take, found the slow way: every lane scanned from its start.
    private func readyByScanning(
        _ state: LoopState, jobs: [Job], for writer: Int, limit: Int, minimum: Int
    ) -> [Int] {
        var ready: [Int] = []
        let inFlight = jobs.filter { state.jobs[$0.seq] != nil }
        let byLane = Dictionary(grouping: inFlight) { $0.laneKey }
        lanes: for lane in byLane.values {
            var taken: [Int] = []
            for job in lane.sorted(by: { $0.seq < $1.seq }) {
                if job.kind == .batched {
                    if let other = job.writer, other != writer { continue lanes }
                    continue
                }
                guard job.kind == .ready else { break }
                taken.append(job.seq)
            }
            ready += taken
        }
        guard ready.count >= max(minimum, 1) else { return [] }
        return Array(ready.sorted().prefix(limit))
    }

    /// The loop keeps each lane's count of jobs to take as jobs change phase, instead of scanning
    /// the lanes at each ask: over thousands of random steps (jobs read on a few keys and none,
    /// made ready, sent back, batched on either writer, written, finished), each ask takes exactly
    /// what scanning every lane from its start finds.
    @Test(arguments: 1...4)
    func readyJobsTakeWhatScanningEveryLaneFinds(seed: UInt64) {
        var random = SplitMix(seed: seed)
        var state = LoopState()
        var all: [Job] = []
        var offset: Int64 = 0
        var batchedBy: [Int: [Job]] = [0: [], 1: []]
        for _ in 0..<3_000 {
            let live = all.filter { state.jobs[$0.seq] != nil }
            switch random.next(below: 10) {
            case 0, 1:
                // Sixteen keys and none: lanes of several jobs, and lanes left alone between asks.
                let key = random.next(below: 17)
                let job = Job(
                    seq: state.nextSeq(), message: message(offset: offset, key: key == 16 ? nil : "k\(key)"), epoch: 0)
                offset += 1
                all.append(job)
                state.add(job, in: random.next(below: 2) == 0 ? .lookup : .preparing)
            case 2, 3, 4:
                // Now and then a ready job too (sent back, or parked): a lane's count falls as
                // well as rises.
                let backToo = random.next(below: 3) == 0
                let waiting = live.filter { $0.kind != .batched && (backToo || $0.kind != .ready) }
                guard let job = waiting.randomElement(using: &random) else { continue }
                if random.next(below: 4) == 0 {
                    state.move(job, to: .preparing)
                } else {
                    ready(job, &state)
                }
            case 5, 6:
                let writer = random.next(below: 2)
                let limit = [1, 2, 3, 5, 8, .max][random.next(below: 6)]
                let minimum = [1, 2, 4][random.next(below: 3)]
                let expected = readyByScanning(state, jobs: all, for: writer, limit: limit, minimum: minimum)
                let taken = state.readyJobs(for: writer, limit: limit, minimum: minimum)
                #expect(taken.map(\.seq) == expected, "writer \(writer), limit \(limit), minimum \(minimum)")
                for job in taken { state.batch(job, on: writer) }
                batchedBy[writer, default: []] += taken
            case 7, 8:
                // A writer's batch is written: its jobs are published next, then finished.
                let writer = random.next(below: 2)
                let batch = batchedBy[writer, default: []]
                batchedBy[writer] = []
                for job in batch where job.writer == writer { state.written(job) }
                for job in batch where state.jobs[job.seq] != nil && job.kind == .batched && random.next(below: 2) == 0
                {
                    state.remove(job)
                }
            default:
                // A conflict sends a batched job back to be looked up; or a published one finishes.
                guard let job = live.filter({ $0.kind == .batched }).randomElement(using: &random) else { continue }
                if job.writer != nil {
                    state.move(job, to: .lookup)
                } else {
                    state.remove(job)
                }
            }
        }
        #expect(all.count > 500)
    }

    @Test func theStoredOffsetNeverPassesAnUnfinishedMessage() {
        var watermark = OffsetWatermark()
        let partition = TopicPartition(topic: "requests", partition: 0)
        let epochs = (0..<5).map { watermark.read(message(offset: Int64(10 + $0), key: nil)) }
        watermark.finish(partition, offset: 11, epoch: epochs[1])
        watermark.finish(partition, offset: 12, epoch: epochs[2])
        #expect(watermark.advance().isEmpty, "10 is not finished: nothing may be stored")
        watermark.finish(partition, offset: 10, epoch: epochs[0])
        #expect(watermark.advance() == [partition: 13])
        #expect(watermark.unfinished == 2)
        #expect(watermark.advance().isEmpty, "nothing new")
    }

    /// Thousands in flight, finished out of order, across the point where the finished prefix is
    /// dropped: every stored offset is the first unfinished one, and the last is after them all.
    @Test func manyOffsetsFinishedOutOfOrderStoreOnlyTheFinishedPrefix() {
        var watermark = OffsetWatermark()
        let partition = TopicPartition(topic: "requests", partition: 0)
        let offsets = (0..<3000).map { Int64(500 + $0) }
        let epochs = offsets.map { watermark.read(message(offset: $0, key: nil)) }
        var generator = SystemRandomNumberGenerator()
        var finished = Set<Int64>()
        for index in offsets.indices.shuffled(using: &generator) {
            watermark.finish(partition, offset: offsets[index], epoch: epochs[index])
            finished.insert(offsets[index])
            if let stored = watermark.advance()[partition] {
                let firstUnfinished = offsets.first { !finished.contains($0) } ?? 3500
                #expect(stored == firstUnfinished)
            }
        }
        #expect(watermark.unfinished == 0)
        #expect(watermark.advance().isEmpty, "3500 is stored already")
        let next = watermark.read(message(offset: 3500, key: nil))
        watermark.finish(partition, offset: 3500, epoch: next)
        #expect(watermark.advance() == [partition: 3501])
    }

    @Test func aRevokedPartitionsLateFinishesStoreNothing() {
        var watermark = OffsetWatermark()
        let partition = TopicPartition(topic: "requests", partition: 0)
        // Assigned (1), revoked (2), assigned again (3).
        let old = watermark.read(message(offset: 5, key: nil, assignment: 1))
        watermark.revoke(partition, assignment: 2)
        watermark.finish(partition, offset: 5, epoch: old)
        #expect(watermark.advance().isEmpty)
        let fresh = watermark.read(message(offset: 6, key: nil, assignment: 3))
        watermark.finish(partition, offset: 6, epoch: fresh)
        #expect(watermark.advance() == [partition: 7])
    }

    /// A rebalance runs inside the poll: a partition is revoked, assigned again, and its messages
    /// from the committed offset come back in the same poll, before the loop takes the revocation.
    /// They belong to the new assignment: a later message finishing first must not store past them
    /// (a replica killed then would lose them: its committed offset already passed them).
    @Test func messagesOfANewAssignmentReadBeforeTheRevocationIsTakenHoldTheOffset() {
        var watermark = OffsetWatermark()
        let partition = TopicPartition(topic: "requests", partition: 0)
        // Assigned (1) and read, then within one poll revoked (2), assigned again (3) and read
        // from the committed offset 100.
        let before = watermark.read(message(offset: 150, key: nil, assignment: 1))
        let first = watermark.read(message(offset: 100, key: nil, assignment: 3))
        watermark.revoke(partition, assignment: 2)
        let second = watermark.read(message(offset: 101, key: nil, assignment: 3))
        watermark.finish(partition, offset: 101, epoch: second)
        #expect(watermark.advance().isEmpty, "100 is not finished: nothing may be stored")
        watermark.finish(partition, offset: 150, epoch: before)
        #expect(watermark.advance().isEmpty, "150 was read under an assignment that is over")
        watermark.finish(partition, offset: 100, epoch: first)
        #expect(watermark.advance() == [partition: 102])
    }

    /// A message of an assignment already over (read before the revocation, seen after a later
    /// assignment's messages) is tracked nowhere: its finish stores nothing, and it holds nothing.
    @Test func aMessageOfAnEndedAssignmentNeitherStoresNorHolds() {
        var watermark = OffsetWatermark()
        let partition = TopicPartition(topic: "requests", partition: 0)
        let current = watermark.read(message(offset: 40, key: nil, assignment: 3))
        let stale = watermark.read(message(offset: 90, key: nil, assignment: 1))
        watermark.finish(partition, offset: 90, epoch: stale)
        #expect(watermark.advance().isEmpty)
        watermark.finish(partition, offset: 40, epoch: current)
        #expect(watermark.advance() == [partition: 41])
        #expect(watermark.unfinished == 0)
    }

    /// A result's event id is derived from the request id and the answer, the same in every
    /// version of the worker: a redelivery answered by an upgraded replica carries the id the
    /// gateway saw before (this value is SHA-256's first 16 bytes made a UUIDv8, computed apart).
    @Test func aResultsEventIDIsStableAcrossVersions() {
        let id = RequestPipeline.resultEventID(requestID: "req-1", tag: "answer:00ff")
        #expect(id == "93141f62-3692-8b8d-bb48-d376158acf4a")
        #expect(RequestPipeline.resultEventID(requestID: "req-1", tag: "answer:00fe") != id)
    }

    /// A reply key of small order or in a non-canonical encoding is the request's fault: answered
    /// `malformed_request` on `data.reply_key`, never a retriable internal error.
    @Test(arguments: [
        [UInt8](repeating: 0, count: 32), [1] + [UInt8](repeating: 0, count: 31),
        [0xec] + [UInt8](repeating: 0xff, count: 30) + [0x7f], [UInt8](repeating: 0xff, count: 32),
    ])
    func unusableReplyKeysAreMalformed(key: [UInt8]) {
        var data = LoginRequestData(method: "guest")
        data.replyKey = Base64URL.encode(key)
        let request = LoginRequest(id: "r", source: "/t", time: nil, traceparent: nil, method: .guest, data: data)
        do {
            _ = try request.replyKey(required: false)
            Issue.record("accepted an unusable reply key")
        } catch let error as LoginError {
            #expect(error.code == .malformedRequest)
            #expect(error.field == "data.reply_key")
        } catch {
            Issue.record("unexpected \(error)")
        }
    }
}

/// A small seeded generator: the same steps on every run of a seed.
private struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func next(below bound: Int) -> Int { Int(next() % UInt64(bound)) }
}
