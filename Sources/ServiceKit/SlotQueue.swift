import Synchronization

/// Slots `0..<count` handed out one caller at a time; callers wait, served first come first served,
/// while every slot is taken. The bound behind the connection and hashing pools.
public final class SlotQueue: Sendable {
    private struct State {
        var free: [Int]
        var waiters: [CheckedContinuation<Int, Never>] = []
    }

    private let state: Mutex<State>

    public init(count: Int) {
        state = Mutex(State(free: Array((0..<max(count, 1)).reversed())))
    }

    /// A free slot, waiting for one if none is. A free slot is taken without suspending: the
    /// caller goes on without a trip through its executor's queue.
    public func acquire() async -> Int {
        if let slot = state.withLock({ $0.free.popLast() }) { return slot }
        return await withCheckedContinuation { continuation in
            let slot = state.withLock { state -> Int? in
                if let slot = state.free.popLast() { return slot }
                state.waiters.append(continuation)
                return nil
            }
            if let slot { continuation.resume(returning: slot) }
        }
    }

    /// Gives a slot back: to the longest waiter, or to the free list.
    public func release(_ slot: Int) {
        let waiter = state.withLock { state -> CheckedContinuation<Int, Never>? in
            if state.waiters.isEmpty {
                state.free.append(slot)
                return nil
            }
            return state.waiters.removeFirst()
        }
        waiter?.resume(returning: slot)
    }
}
