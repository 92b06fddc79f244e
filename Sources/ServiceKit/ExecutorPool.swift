/// A fixed set of dedicated threads for CPU-heavy or blocking work (password hashing), handed out
/// one job at a time, in FIFO order.
///
/// Work sent here never runs on Swift's cooperative pool, so a burst of it cannot starve the async
/// work of the rest of the service; at most `size` jobs run at once.
public final class ExecutorPool: Sendable {
    private let executors: [ThreadExecutor]
    private let slots: SlotQueue

    /// - Parameters:
    ///   - name: thread name prefix.
    ///   - size: number of threads (at least one).
    ///   - niceness: added to the threads' nice value (see `ThreadExecutor`). Default: 0.
    ///   - ownArenas: each thread allocates from a jemalloc arena of its own (see `ThreadExecutor`).
    ///     Default: false.
    public init(name: String, size: Int, niceness: Int32 = 0, ownArenas: Bool = false) {
        let count = max(size, 1)
        executors = (0..<count).map {
            ThreadExecutor(name: "\(name)-\($0)", niceness: niceness, ownArena: ownArenas)
        }
        slots = SlotQueue(count: count)
    }

    deinit {
        executors.forEach { $0.shutdown() }
    }

    /// The number of threads.
    public var size: Int { executors.count }

    /// Runs `body` on one of the pool's threads, waiting for a free one.
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        let index = await slots.acquire()
        defer { slots.release(index) }
        // Submitted to the thread directly: an executor preference would only hop at the next
        // suspension point, and `body` has none.
        return try await withCheckedThrowingContinuation { continuation in
            executors[index].submit { continuation.resume(with: Result { try body() }) }
        }
    }
}
