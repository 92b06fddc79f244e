import Foundation
import Synchronization
import Testing

@testable import ServiceKit
@testable import TestSupport

/// `ThreadExecutor` and `SlotQueue`, directly: the two primitives every pool (connections,
/// hashing, Kafka clients) stands on.
@Suite struct ThreadExecutorTests {
    /// An actor that runs on a `ThreadExecutor`, as `KafkaConsumer` and `PGDedicatedConnection` do.
    actor OnOwnThread {
        nonisolated let executor: ThreadExecutor
        nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
        private var running = 0
        private(set) var mostAtOnce = 0
        private(set) var order: [Int] = []

        init(name: String) { executor = ThreadExecutor(name: name) }

        /// Blocks its thread, as a C call would, and says which thread it ran on.
        func work(_ index: Int) -> ThreadSeen {
            running += 1
            mostAtOnce = max(mostAtOnce, running)
            usleep(2_000)
            order.append(index)
            running -= 1
            return ThreadSeen(id: UInt(pthread_self()), name: currentThreadName())
        }
    }

    struct ThreadSeen: Hashable, Sendable {
        var id: UInt
        var name: String
    }

    @Test func anActorOnItRunsOnItsNamedThreadOneJobAtATime() async throws {
        let actor = OnOwnThread(name: "executor-test")
        // The executor's own thread, as a plain closure on it sees it.
        let own = await withCheckedContinuation { (continuation: CheckedContinuation<ThreadSeen, Never>) in
            actor.executor.submit {
                continuation.resume(returning: ThreadSeen(id: UInt(pthread_self()), name: currentThreadName()))
            }
        }
        let seen = await withTaskGroup(of: ThreadSeen.self) { group in
            for index in 0..<20 { group.addTask { await actor.work(index) } }
            return await group.reduce(into: Set<ThreadSeen>()) { $0.insert($1) }
        }
        #expect(seen == [own], "the actor's methods ran on \(seen), its executor's thread is \(own)")
        #expect(own.name == "executor-test", "the kernel has the thread as \(own.name)")
        #expect(await actor.mostAtOnce == 1)
        #expect(await actor.order.count == 20)
        actor.executor.shutdown()
    }

    @Test func submittedClosuresRunInOrderAndShutdownLetsQueuedWorkFinish() async throws {
        let executor = ThreadExecutor(name: "executor-order")
        let seen = Mutex<[Int]>([])
        let done = Mutex<CheckedContinuation<Void, Never>?>(nil)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            done.withLock { $0 = continuation }
            for index in 0..<100 {
                executor.submit {
                    usleep(100)
                    seen.withLock { $0.append(index) }
                }
            }
            // Queued after the hundred and after the shutdown request: it still runs, last.
            executor.shutdown()
            executor.submit { done.withLock { $0 }?.resume() }
        }
        #expect(seen.withLock { $0 } == Array(0..<100))
    }
}

@Suite struct SlotQueueTests {
    /// What the callers saw, shared between their tasks.
    final class Seen: Sendable {
        let served = Mutex<[Int]>([])
        let holding = Atomic<Int>(0)
        let most = Atomic<Int>(0)
        let started = Atomic<Int>(0)
    }

    @Test func handsOutEachSlotOnceUntilReleased() async {
        let queue = SlotQueue(count: 3)
        var slots: [Int] = []
        for _ in 0..<3 { slots.append(await queue.acquire()) }
        #expect(Set(slots) == [0, 1, 2])
        queue.release(1)
        #expect(await queue.acquire() == 1)
    }

    @Test func aCountBelowOneStillHasOneSlot() async {
        let queue = SlotQueue(count: 0)
        #expect(await queue.acquire() == 0)
    }

    /// Callers that find every slot taken wait, and are served first come first served.
    @Test func waitersAreServedInArrivalOrder() async throws {
        let queue = SlotQueue(count: 1)
        let held = await queue.acquire()
        let seen = Seen()
        var waiters: [Task<Void, Never>] = []
        for index in 0..<5 {
            waiters.append(
                Task {
                    seen.started.add(1, ordering: .releasing)
                    let slot = await queue.acquire()
                    seen.served.withLock { $0.append(index) }
                    queue.release(slot)
                })
            // Each waiter is queued before the next starts: it has started, and the rest of its
            // way into the queue has no suspension point.
            while seen.started.load(ordering: .acquiring) <= index { try await Task.sleep(for: .milliseconds(5)) }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(seen.served.withLock { $0 }.isEmpty, "a waiter got a slot while it was held")
        queue.release(held)
        for waiter in waiters { await waiter.value }
        #expect(seen.served.withLock { $0 } == [0, 1, 2, 3, 4])
    }

    /// At most `count` holders at once, however many callers.
    @Test func neverMoreHoldersThanSlots() async {
        let queue = SlotQueue(count: 4)
        let seen = Seen()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<200 {
                group.addTask {
                    let slot = await queue.acquire()
                    let now = seen.holding.add(1, ordering: .relaxed).newValue
                    seen.most.max(now, ordering: .relaxed)
                    await Task.yield()
                    seen.holding.subtract(1, ordering: .relaxed)
                    queue.release(slot)
                }
            }
        }
        #expect(seen.most.load(ordering: .relaxed) <= 4)
        #expect(seen.most.load(ordering: .relaxed) >= 1)
    }
}
