import Synchronization

/// Where a loop waits for work finished elsewhere, without a thread of its own: `ring` from any
/// thread ends the current `wait` (or the next one, at once, when none is waiting). The loop
/// resumes on whichever thread rang, or the next free one of the pool: no dedicated thread is
/// woken to pass the news on. One loop waits on a doorbell at a time.
///
/// Rings are not counted: many rings before a `wait` end one wait. What rang is kept in `take`.
/// `runTicker` bounds how long a wait can last, and parks while no one waits.
public final class Doorbell: Sendable {
    /// What rang since the last `take`.
    public struct Rings: Sendable, Equatable {
        /// Background work finished (or anything else `ring()` was called for).
        public var work = false
        /// Something arrived at the consumer.
        public var arrival = false
        /// Nothing rang for a whole tick.
        public var timeout = false

        public var any: Bool { work || arrival || timeout }
    }

    private struct State {
        var rings = Rings()
        var waiter: UnsafeContinuation<Void, Never>?
        /// Whether a wait began since the ticker last looked.
        var waited = false
        /// The ticker, parked while no one waits; resumed with false by `close`.
        var ticker: UnsafeContinuation<Bool, Never>?
        var closed = false
    }

    private let state = Mutex(State())

    public init() {}

    /// Work finished: ends the wait.
    public func ring() { ring { $0.work = true } }

    /// Something arrived at the consumer: ends the wait.
    public func ringForArrival() { ring { $0.arrival = true } }

    /// Ends a wait in progress as timed out; does nothing when no one waits (a tick that finds the
    /// loop busy leaves it alone).
    public func tick() {
        let waiter = state.withLock { state -> UnsafeContinuation<Void, Never>? in
            guard let waiter = state.waiter else { return nil }
            state.rings.timeout = true
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    private func ring(_ mark: (inout Rings) -> Void) {
        let waiter = state.withLock { state -> UnsafeContinuation<Void, Never>? in
            mark(&state.rings)
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Returns once something rang since the last `take` (at once if it already had).
    public func wait() async {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            let (ready, ticker) = state.withLock { state -> (Bool, UnsafeContinuation<Bool, Never>?) in
                state.waited = true
                let ticker = state.ticker
                state.ticker = nil
                if state.rings.any { return (true, ticker) }
                state.waiter = continuation
                return (false, ticker)
            }
            ticker?.resume(returning: true)
            if ready { continuation.resume() }
        }
    }

    /// What rang since the last call, cleared.
    public func take() -> Rings {
        state.withLock { state in
            defer { state.rings = Rings() }
            return state.rings
        }
    }

    /// Calls `tick` every `interval` while waits happen, and parks while none has since its last
    /// look: the bound on a wait, at no cost to a loop that waits elsewhere while idle (the next
    /// `wait` resumes it). Returns after `close`.
    public func runTicker(every interval: Duration) async {
        while await nextTick() {
            try? await Task.sleep(for: interval)
            tick()
        }
    }

    /// True at once when a wait began since the last look (or one is under way); otherwise parks
    /// until the next wait. False once closed.
    private func nextTick() async -> Bool {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Bool, Never>) in
            let answer = state.withLock { state -> Bool? in
                if state.closed { return false }
                if state.waited || state.waiter != nil {
                    state.waited = false
                    return true
                }
                state.ticker = continuation
                return nil
            }
            if let answer { continuation.resume(returning: answer) }
        }
    }

    /// Ends `runTicker` (a parked ticker at once, a sleeping one after its sleep).
    public func close() {
        let ticker = state.withLock { state -> UnsafeContinuation<Bool, Never>? in
            state.closed = true
            defer { state.ticker = nil }
            return state.ticker
        }
        ticker?.resume(returning: false)
    }
}
