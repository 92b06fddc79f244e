import Foundation

/// A serial and task executor that runs every job on one dedicated thread.
///
/// Blocking C calls (libpq, `rd_kafka_consumer_poll`, password hashing) must stay off Swift's
/// cooperative pool, which has one thread per core. An actor whose `unownedExecutor` is one of
/// these runs its methods, and so its blocking calls, on its own thread.
public final class ThreadExecutor: SerialExecutor, TaskExecutor, @unchecked Sendable {
    // @unchecked: `jobs` and `stopped` are only touched under `condition`.
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var stopped = false

    /// Starts the thread.
    /// - Parameter name: the thread's name, shown by debuggers and `top -H`.
    public init(name: String) {
        let thread = Thread { [self] in
            // Named from inside: on Linux the name given before start does not always stick.
            Thread.current.name = name
            self.runLoop()
        }
        thread.name = name
        thread.start()
    }

    /// Lets the thread exit once the jobs already queued have run.
    public func shutdown() {
        condition.lock()
        stopped = true
        condition.signal()
        condition.unlock()
    }

    private func runLoop() {
        while true {
            condition.lock()
            while jobs.isEmpty && !stopped { condition.wait() }
            if jobs.isEmpty {
                condition.unlock()
                return
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: asUnownedTaskExecutor())
        }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        condition.lock()
        jobs.append(unowned)
        condition.signal()
        condition.unlock()
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }
}
