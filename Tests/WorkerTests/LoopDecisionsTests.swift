import Foundation
import Kafka
import Messages
import Testing

@testable import AuthDomain
@testable import AuthWorker

/// What the loop starts next (`LoopState.next`), fed states and checked by the actions it
/// returns: no broker, no database, no task started.
@Suite struct LoopDecisionsTests {
    private let now = ContinuousClock.now

    private func job(_ state: inout LoopState, offset: Int64, key: String?) -> Job {
        let message = KafkaMessage(
            topic: "requests", partition: 0, offset: offset, key: key.map { Array($0.utf8) }, value: [], headers: [],
            timestamp: nil, assignment: 1)
        return Job(seq: state.nextSeq(), message: message, epoch: 0)
    }

    private func readyJobs(_ count: Int, _ state: inout LoopState, key: (Int) -> String?) -> [Job] {
        (0..<count).map { offset in
            let job = job(&state, offset: Int64(offset), key: key(offset))
            state.add(job, in: .ready(.publish([], outcome: "ok", audit: nil)))
            return job
        }
    }

    private func state(writers: Int, policy: LoopPolicy = LoopPolicy()) -> LoopState {
        var state = LoopState()
        state.stages = Stages(writers: writers)
        state.policy = policy
        return state
    }

    private func writes(_ actions: [LoopAction]) -> [BatchPlan] {
        actions.compactMap { if case .write(let plan) = $0 { plan } else { nil } }
    }

    private func lookups(_ actions: [LoopAction]) -> [LookupPlan] {
        actions.compactMap { if case .lookUp(let plan) = $0 { plan } else { nil } }
    }

    @Test func theFirstFreeWriterTakesEveryReadyJobAndTheyAreBatchedOnIt() {
        var state = state(writers: 2)
        let jobs = readyJobs(5, &state) { "k\($0 % 2)" }
        let actions = state.next(at: now, stopping: false)
        let plans = writes(actions)
        #expect(plans.count == 1)
        #expect(plans.first?.writer == 0)
        #expect(plans.first?.steps.map(\.0) == jobs.map(\.seq))
        #expect(jobs.allSatisfy { $0.kind == .batched })
        // Nothing to write but records: no transaction items, and no marks taken for them.
        #expect(plans.first?.items.isEmpty == true && plans.first?.marks.isEmpty == true)
        // Asked again, nothing is ready: nothing is written twice.
        #expect(writes(state.next(at: now, stopping: false)).isEmpty)
    }

    @Test func behindABusyWriterAFewReadyJobsWaitForIt() {
        var state = state(writers: 2)
        state.stages.writing[0] = Stage(wake: {}, reporting: { _ in })
        state.stages.writingSince[0] = now
        let jobs = readyJobs(3, &state) { "k\($0)" }
        #expect(writes(state.next(at: now, stopping: false)).isEmpty)
        #expect(jobs.allSatisfy { $0.kind == .ready })
        // Once the busy writer has written for long, the next takes them whatever their number.
        let plans = writes(state.next(at: now + .milliseconds(25), stopping: false))
        #expect(plans.map(\.writer) == [1])
    }

    @Test func aParkedJobStartsWhenFirstInItsLane() {
        var state = state(writers: 1)
        let first = job(&state, offset: 0, key: "k")
        state.add(first, in: .preparing)
        let parked = job(&state, offset: 1, key: "k")
        let body =
            #"{"specversion":"1.0","id":"r-1","source":"/t","type":"auth.login.request","data":{"method":"guest"}}"#
        guard case .valid(let request) = RequestDecoder().decode(Array(body.utf8)) else {
            Issue.record("the request does not decode")
            return
        }
        state.add(
            parked,
            in: .waitingForLane(PendingPreparation(seq: parked.seq, request: request, digest: [], replyKey: nil)))
        #expect(state.parked == [parked.seq])
        #expect(!state.next(at: now, stopping: false).contains { if case .prepare = $0 { true } else { false } })
        state.remove(first)
        let actions = state.next(at: now, stopping: false)
        let prepared = actions.compactMap { if case .prepare(let list) = $0 { list } else { nil } }.flatMap { $0 }
        #expect(prepared.map(\.seq) == [parked.seq])
        #expect(parked.kind == .preparing)
        #expect(state.parked.isEmpty, "the index follows the phase")
    }

    @Test func writtenRecordsArePublishedBelowTheCeiling() {
        var state = state(writers: 1)
        let job = job(&state, offset: 0, key: nil)
        state.add(job, in: .batched)
        state.stages.toPublish = [JobRecords(job: job, records: [], events: [], outcome: "ok")]
        let actions = state.next(at: now, stopping: false)
        #expect(actions.contains { if case .publish(let jobs) = $0 { jobs.count == 1 } else { false } })
        #expect(state.stages.toPublish.isEmpty)
    }

    @Test func aLookupReadsOnAWriterGivenNothingToWrite() {
        var state = state(writers: 2)
        _ = readyJobs(2, &state) { "r\($0)" }
        let waiting = job(&state, offset: 10, key: "n")
        state.add(waiting, in: .lookup)
        let actions = state.next(at: now, stopping: false)
        #expect(writes(actions).map(\.writer) == [0])
        let plan = lookups(actions).first
        #expect(plan?.writer == 1, "writer 0 was just given a batch")
        #expect(plan?.jobs == [waiting.seq])
        // A notification (no request) needs the loop between lookup and write.
        #expect(plan?.writeToo == nil)
        #expect(waiting.kind == .lookingUp)
    }

    @Test func withEveryWriterBusyTheLookupGoesToThePool() {
        var state = state(writers: 1)
        state.stages.writing[0] = Stage(wake: {}, reporting: { _ in })
        state.stages.writingSince[0] = now
        let waiting = job(&state, offset: 0, key: nil)
        state.add(waiting, in: .lookup)
        let plan = lookups(state.next(at: now, stopping: false)).first
        #expect(plan != nil && plan?.writer == nil)
    }

    @Test func aLingerHoldsTheLookupAndArmsAnAlarmForItsEnd() {
        var policy = LoopPolicy()
        policy.batchLinger = .seconds(5)
        var state = state(writers: 1, policy: policy)
        let waiting = job(&state, offset: 0, key: nil)
        state.add(waiting, in: .lookup)
        let first = state.next(at: now, stopping: false)
        #expect(lookups(first).isEmpty)
        #expect(first.contains { if case .armLinger = $0 { true } else { false } })
        let alarms = first.compactMap { if case .armLinger(let until) = $0 { until } else { nil } }
        #expect(alarms.allSatisfy { $0 <= ContinuousClock.now + .seconds(5) })
        // Still within the linger: still held.
        #expect(lookups(state.next(at: now, stopping: false)).isEmpty)
        // Stopping, nothing lingers.
        #expect(lookups(state.next(at: now, stopping: true)).count == 1)
    }
}
