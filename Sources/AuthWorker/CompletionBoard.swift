import Synchronization

/// Where background work posts its results for the consume loop. The loop owns the rest of the
/// state; only this is shared. Each post calls `onPost`, which wakes the loop.
final class CompletionBoard<Result: Sendable>: Sendable {
    private let results = Mutex<[Int: Result]>([:])
    private let onPost: @Sendable () -> Void

    init(onPost: @escaping @Sendable () -> Void = {}) {
        self.onPost = onPost
    }

    /// Posts the result of work `id`.
    func post(_ id: Int, _ result: Result) {
        results.withLock { $0[id] = result }
        onPost()
    }

    /// Takes every result posted so far.
    func take() -> [Int: Result] {
        results.withLock { results in
            defer { results = [:] }
            return results
        }
    }
}
