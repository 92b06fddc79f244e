import Foundation
import Synchronization
import Testing

@testable import ServiceKit

@Suite struct DoorbellTests {
    /// A ring before the wait ends it at once; rings are not counted, what rang is kept.
    @Test func aRingBeforeTheWaitEndsItAtOnce() async {
        let bell = Doorbell()
        bell.ring()
        bell.ringForArrival()
        await bell.wait()
        #expect(bell.take() == Doorbell.Rings(work: true, arrival: true, timeout: false))
        #expect(bell.take() == Doorbell.Rings())
    }

    /// A ring from another thread ends a wait in progress, and only then.
    @Test func aRingFromAnotherThreadEndsAWaitInProgress() async throws {
        let bell = Doorbell()
        let ended = Flag()
        let waiting = Task {
            await bell.wait()
            ended.value.store(true, ordering: .releasing)
        }
        try await Task.sleep(for: .milliseconds(50))
        let endedEarly = ended.value.load(ordering: .acquiring)
        #expect(!endedEarly)
        let thread = Thread { bell.ringForArrival() }
        thread.start()
        await waiting.value
        let endedNow = ended.value.load(ordering: .acquiring)
        #expect(endedNow)
        #expect(bell.take() == Doorbell.Rings(work: false, arrival: true, timeout: false))
    }

    /// A tick ends a wait in progress as timed out, and leaves a loop that is not waiting alone.
    @Test func aTickEndsOnlyAWaitInProgress() async throws {
        let bell = Doorbell()
        bell.tick()
        #expect(bell.take() == Doorbell.Rings())
        let waiting = Task { await bell.wait() }
        try await Task.sleep(for: .milliseconds(20))
        bell.tick()
        await waiting.value
        #expect(bell.take() == Doorbell.Rings(work: false, arrival: false, timeout: true))
    }

    /// One ring per wait, from another thread, racing the wait's check and suspension: every
    /// wait is ended by its ring. A lost ring would leave the wait to the watchdog's tick, which
    /// says so.
    @Test func noRingIsLostBetweenTheCheckAndTheWait() async {
        let bell = Doorbell()
        let rounds = 5_000
        let round = Counter()
        let ringer = Thread {
            var rung = 0
            while rung < rounds {
                let asked = round.value.load(ordering: .acquiring)
                if asked > rung {
                    bell.ring()
                    rung = asked
                }
            }
        }
        ringer.start()
        let watchdog = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                bell.tick()
            }
        }
        var lost = 0
        for index in 1...rounds {
            round.value.store(index, ordering: .releasing)
            await bell.wait()
            if bell.take().timeout { lost += 1 }
        }
        watchdog.cancel()
        #expect(lost == 0)
    }
}

private final class Flag: Sendable {
    let value = Atomic<Bool>(false)
}

private final class Counter: Sendable {
    let value = Atomic<Int>(0)
}
