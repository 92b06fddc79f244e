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

    /// The ticker parks while no one waits, a wait wakes it, its tick ends that wait as timed
    /// out, and `close` ends it.
    @Test func theTickerBoundsWaitsAndParksWithoutThem() async throws {
        let bell = Doorbell()
        let ticker = Task { await bell.runTicker(every: .milliseconds(20)) }
        try await Task.sleep(for: .milliseconds(100))  // parked by now: nothing waited
        #expect(bell.take() == Doorbell.Rings())
        await bell.wait()  // nothing rings: only the ticker, woken by this wait, can end it
        #expect(bell.take() == Doorbell.Rings(work: false, arrival: false, timeout: true))
        await bell.wait()
        #expect(bell.take().timeout)
        bell.close()
        await ticker.value
    }

    /// One ring per wait, from another thread, racing the wait's check and suspension: every
    /// wait is ended by its ring. A watchdog looks every 250 ms for a round whose ring has been
    /// rung while its wait goes on, and when it finds the same one so for a second, counts it lost
    /// and ends the wait (so a lost ring fails the test instead of hanging it).
    @Test func noRingIsLostBetweenTheCheckAndTheWait() async {
        let bell = Doorbell()
        let rounds = 2_000
        let round = Counter()
        let rung = Counter()
        let ended = Counter()
        let lost = Counter()
        let ringer = Thread {
            while rung.value.load(ordering: .acquiring) < rounds {
                let asked = round.value.load(ordering: .acquiring)
                if asked > rung.value.load(ordering: .acquiring) {
                    bell.ring()
                    rung.value.store(asked, ordering: .releasing)
                } else {
                    sched_yield()
                }
            }
        }
        ringer.start()
        let watchdog = Task {
            var suspect = 0
            var looks = 0
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(250))
                let current = round.value.load(ordering: .acquiring)
                let stuck =
                    rung.value.load(ordering: .acquiring) == current && ended.value.load(ordering: .acquiring) < current
                looks = stuck && suspect == current ? looks + 1 : 0
                suspect = stuck ? current : 0
                if looks >= 4 {
                    lost.value.add(1, ordering: .relaxed)
                    bell.tick()
                    looks = 0
                }
            }
        }
        for index in 1...rounds {
            round.value.store(index, ordering: .releasing)
            await bell.wait()
            _ = bell.take()
            ended.value.store(index, ordering: .releasing)
        }
        watchdog.cancel()
        #expect(lost.value.load(ordering: .relaxed) == 0)
    }
}

private final class Flag: Sendable {
    let value = Atomic<Bool>(false)
}

private final class Counter: Sendable {
    let value = Atomic<Int>(0)
}
