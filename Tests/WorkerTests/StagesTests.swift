import Foundation
import Kafka
import Testing

@testable import AuthWorker

/// The loop's decisions about its background work (`Stages`), from its state alone: no broker,
/// no database, no task that runs.
@Suite struct StagesTests {
    /// A stage that never finishes: its work never reports.
    private func running<Output: Sendable>(_: Output.Type = WrittenBatch.self) -> Stage<Output> {
        Stage(wake: {}, reporting: { _ in })
    }

    /// A stage that has finished with `value`.
    private func finished<Output: Sendable>(_ value: Output) -> Stage<Output> {
        Stage(wake: {}, reporting: { report in report(.success(value)) })
    }

    private let now = ContinuousClock.now

    private func slots(_ stages: Stages, batchMax: Int = 500) -> [(writer: Int, minimum: Int)] {
        stages.writeSlots(now: now, batchMax: batchMax, spillBacklog: 64, spillAfter: .milliseconds(20))
    }

    @Test func freeWritersTakeAnythingWhileNoneBeforeThemIsBusy() {
        let stages = Stages(writers: 3)
        let slots = slots(stages)
        #expect(slots.map(\.writer) == [0, 1, 2])
        #expect(slots.allSatisfy { $0.minimum == 1 })
        #expect(!stages.isBusy)
        #expect(stages.lookupWriter() == 0)
    }

    @Test func aWriterAfterABusyOneStartsOnlyBehindABacklog() {
        var stages = Stages(writers: 2)
        stages.writing[0] = running()
        stages.writingSince[0] = now - .milliseconds(5)
        let slots = slots(stages)
        #expect(slots.map(\.writer) == [1])
        #expect(slots.first?.minimum == 64)
        // A batch limit under the backlog is the backlog.
        #expect(self.slots(stages, batchMax: 20).first?.minimum == 20)
        #expect(stages.isBusy)
        #expect(stages.lookupWriter() == 1)
    }

    @Test func aWriterBusyForLongNoLongerHoldsTheNextBack() {
        var stages = Stages(writers: 2)
        stages.writing[0] = running()
        stages.writingSince[0] = now - .milliseconds(25)
        let slots = slots(stages)
        #expect(slots.map(\.writer) == [1])
        #expect(slots.first?.minimum == 1)
    }

    @Test func aWriterReadingALookupIsBusyAndTakesNoBatch() {
        var stages = Stages(writers: 2)
        stages.looking = RequestPipeline.Lookup(
            stage: running(RequestPipeline.LookupResult.self), jobs: [1], writer: 0, marks: PendingMarks())
        let slots = slots(stages)
        #expect(slots.map(\.writer) == [1])
        #expect(slots.first?.minimum == 64)
        #expect(stages.isBusy)
    }

    @Test func everyWriterBusyLeavesNoSlotAndLookupsToThePool() {
        var stages = Stages(writers: 2)
        stages.writing = [running(), running()]
        stages.writingSince = [now, now]
        #expect(slots(stages).isEmpty)
        #expect(stages.lookupWriter() == nil)
    }

    @Test func doneWritesFreeTheirWritersAndOthersKeepWriting() throws {
        var stages = Stages(writers: 2)
        let batch = WrittenBatch(steps: [], outcomes: [], marked: [], began: 1, committed: 2)
        stages.writing = [running(), finished(batch)]
        let done = try stages.takeDoneWrites()
        #expect(done.count == 1 && done.first?.committed == 2)
        #expect(stages.writing[0] != nil && stages.writing[1] == nil)
        let again = try stages.takeDoneWrites()
        #expect(again.isEmpty)
    }

    @Test func publishesStartOnlyBelowTheirCeilingAndTakeEverythingWaiting() {
        var stages = Stages(writers: 1)
        let none = stages.takeToPublish()
        #expect(none == nil, "nothing waits")
        for _ in 0..<Stages.publishesInFlight { stages.publishing.append((running([UUID].self), [])) }
        stages.toPublish = [JobRecords(job: job(), records: [], events: [], outcome: "ok")]
        let held = stages.takeToPublish()
        #expect(held == nil, "at the ceiling: the records wait")
        #expect(stages.toPublish.count == 1)
        stages.publishing.removeLast()
        let taken = stages.takeToPublish()
        #expect(taken?.count == 1)
        #expect(stages.toPublish.isEmpty)
    }

    @Test func donePublishesAreTakenOnceAndTheRestStay() {
        var stages = Stages(writers: 1)
        stages.publishing = [(finished([UUID()]), []), (running([UUID].self), []), (finished([]), [])]
        let done = stages.takeDonePublishes()
        #expect(done.count == 2)
        #expect(stages.publishing.count == 1)
        let again = stages.takeDonePublishes()
        #expect(again.isEmpty)
    }

    @Test func anIdlePollSleepsLessWhileMarksWait() {
        let wait = Duration.milliseconds(500)
        #expect(Stages.pollTimeout(batchWait: wait, marksWaiting: false, markDelay: .seconds(1)) == wait)
        #expect(Stages.pollTimeout(batchWait: wait, marksWaiting: true, markDelay: .seconds(1)) == .milliseconds(250))
        #expect(
            Stages.pollTimeout(batchWait: .milliseconds(100), marksWaiting: true, markDelay: .seconds(1))
                == .milliseconds(100))
    }

    @Test func aDrainReportsEveryIntervalNotAtItsStart() {
        var stages = Stages(writers: 1)
        let due = [0, 4, 5, 6, 10].map { stages.drainReportDue(at: now + .seconds($0)) }
        #expect(due == [false, false, true, false, true])
    }

    private func job() -> Job {
        let message = KafkaMessage(
            topic: "requests", partition: 0, offset: 0, key: nil, value: [], headers: [], timestamp: nil,
            assignment: 1)
        return Job(seq: 1, message: message, epoch: 0)
    }
}
