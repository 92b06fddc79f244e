import Synchronization

/// Where background work posts its results for the consume loop, which can wait for a set of
/// them with a deadline. The loop owns the rest of the state; only this is shared.
final class CompletionBoard<Result: Sendable>: Sendable {
    private struct State {
        var results: [Int: Result] = [:]
        var waiter: (ids: Set<Int>, continuation: CheckedContinuation<Void, Never>)?
    }

    private let state = Mutex(State())

    /// Posts the result of work `id`; wakes the loop if it was the last it waited for.
    func post(_ id: Int, _ result: Result) {
        let wake = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.results[id] = result
            guard let waiter = state.waiter, waiter.ids.isSubset(of: state.results.keys) else { return nil }
            state.waiter = nil
            return waiter.continuation
        }
        wake?.resume()
    }

    /// Takes every result posted so far.
    func take() -> [Int: Result] {
        state.withLock { state in
            defer { state.results = [:] }
            return state.results
        }
    }

    /// Returns once every one of `ids` has posted, or after `timeout`, whichever is first.
    func wait(for ids: Set<Int>, timeout: Duration) async {
        guard !ids.isEmpty else { return }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let done = self.state.withLock { state -> Bool in
                        if ids.isSubset(of: state.results.keys) { return true }
                        state.waiter = (ids, continuation)
                        return false
                    }
                    if done { continuation.resume() }
                }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                self.release()
            }
            await group.next()
            group.cancelAll()
            self.release()
            await group.waitForAll()
        }
    }

    /// Resumes a waiter that is still waiting (the timeout won).
    private func release() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            defer { state.waiter = nil }
            return state.waiter?.continuation
        }
        waiter?.resume()
    }
}
