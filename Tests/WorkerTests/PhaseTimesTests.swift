import Kafka
import Testing

@testable import AuthWorker

/// `auth_request_phase_seconds`: where a message's time goes, from mark to mark.
@Suite struct PhaseTimesTests {
    private let start: UInt64 = 5_000_000_000

    /// `milliseconds` after the start, in nanoseconds.
    private func at(_ milliseconds: UInt64) -> UInt64 { start + milliseconds * 1_000_000 }

    /// Each phase with its time in milliseconds.
    private func phases(_ marks: PhaseTimestamps, finished: UInt64) -> [(TimedPhase, UInt64)] {
        var phases: [(TimedPhase, UInt64)] = []
        marks.forEach(admitted: start, finished: at(finished)) { phases.append(($0, $1 / 1_000_000)) }
        return phases
    }

    /// A phase's tally and histogram are found by its index: the index is its place among the cases.
    @Test func eachPhasesIndexIsItsPlace() {
        #expect(TimedPhase.allCases.enumerated().allSatisfy { $0.offset == $0.element.index })
        #expect(PhaseTally().tallies.count == TimedPhase.allCases.count)
    }

    @Test func aBatchedRequestsTimeRunsThroughEveryPhaseAndAddsUpToTheWhole() {
        var marks = PhaseTimestamps()
        marks.lookupBegan = at(2)
        marks.prepareBegan = at(3)
        marks.ready = at(7)
        marks.writeBegan = at(11)
        marks.committed = at(16)
        let found = phases(marks, finished: 22)
        #expect(found.map(\.0) == [.toLookUp, .lookingUp, .preparing, .ready, .writing, .publishing])
        #expect(found.map(\.1) == [2, 1, 4, 4, 5, 6])
    }

    @Test func aPhaseNotReachedGivesItsTimeToTheOneBefore() {
        // A replay: looked up, answered with what was kept, nothing prepared.
        var replay = PhaseTimestamps()
        replay.lookupBegan = at(1)
        replay.ready = at(4)
        replay.writeBegan = at(5)
        replay.committed = at(5)
        let found = phases(replay, finished: 9)
        #expect(found.map(\.0) == [.toLookUp, .lookingUp, .ready, .writing, .publishing])
        #expect(found.map(\.1) == [1, 3, 1, 0, 4])
        // An invalid request: answered as it was taken in, never looked up.
        var invalid = PhaseTimestamps()
        invalid.ready = at(1)
        #expect(phases(invalid, finished: 3).map(\.0) == [.toLookUp, .ready])
        // Nothing reached at all: the whole time is the first phase's.
        #expect(phases(PhaseTimestamps(), finished: 3).map(\.0) == [.toLookUp])
    }

    @Test func aLightLoadRequestIsLookedUpPreparedAndWrittenInOnePhase() {
        var marks = PhaseTimestamps()
        marks.lookupBegan = at(1)
        marks.prepareBegan = at(2)
        marks.ready = at(9)
        marks.writeBegan = at(9)
        marks.wroteWithLookup(committed: at(6))
        let found = phases(marks, finished: 10)
        #expect(found.map(\.0) == [.toLookUp, .writingWithLookup, .publishing])
        #expect(found.map(\.1) == [1, 5, 4])
    }

    @Test func aMarkOutOfOrderCostsNoNegativeTimeAndTheWholeStaysWhole() {
        var marks = PhaseTimestamps()
        marks.lookupBegan = at(4)
        marks.prepareBegan = at(2)  // read on another thread, behind
        marks.ready = at(6)
        let found = phases(marks, finished: 8)
        #expect(found.map(\.0) == [.toLookUp, .lookingUp, .preparing, .ready])
        #expect(found.map(\.1) == [4, 0, 2, 2], "no phase runs backwards: the wrapped difference would be huge")
        #expect(found.map(\.1).reduce(0, +) == 8)
    }

    /// The loop sets the marks as a job changes phase, each the first time; a job sent back to
    /// look its id up again (a write conflict) starts its marks again, its first attempt's time
    /// counted as waiting to be looked up.
    @Test func theLoopMarksEachPhaseOnceAndALookupAgainStartsOver() throws {
        var state = LoopState()
        let job = Job(
            seq: state.nextSeq(),
            message: KafkaMessage(
                topic: "requests", partition: 0, offset: 0, key: Array("k".utf8), value: [], headers: [],
                timestamp: nil, assignment: 1),
            epoch: 0)
        state.add(job, in: .lookup)
        #expect(job.phaseTimestamps.lookupBegan == nil)
        state.move(job, to: .lookingUp)
        let lookedUp = try #require(job.phaseTimestamps.lookupBegan)
        state.move(job, to: .preparing)
        state.move(job, to: .ready(.publish([], outcome: "ok", audit: nil)))
        state.move(job, to: .ready(.publish([], outcome: "ok", audit: nil)))
        let ready = try #require(job.phaseTimestamps.ready)
        #expect(job.phaseTimestamps.prepareBegan.map { $0 >= lookedUp && $0 <= ready } == true)
        state.batch(job, on: 0)
        #expect(job.phaseTimestamps.ready == ready, "a mark is set once")
        state.move(job, to: .lookup)
        #expect(
            job.phaseTimestamps.lookupBegan == nil && job.phaseTimestamps.prepareBegan == nil
                && job.phaseTimestamps.ready == nil)
        state.move(job, to: .lookingUp)
        #expect(try #require(job.phaseTimestamps.lookupBegan) >= ready)
    }
}
