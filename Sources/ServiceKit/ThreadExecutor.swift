import Foundation

/// A serial and task executor that runs every job on one dedicated thread.
///
/// Blocking C calls (libpq, `rd_kafka_consumer_poll`, password hashing) must stay off Swift's
/// cooperative pool, which has one thread per core. An actor whose `unownedExecutor` is one of
/// these runs its methods, and so its blocking calls, on its own thread.
public final class ThreadExecutor: SerialExecutor, TaskExecutor, @unchecked Sendable {
    // @unchecked: `jobs` and `stopped` are only touched under `condition`.
    private let condition = NSCondition()
    private enum Work {
        case job(UnownedJob)
        case closure(@Sendable () -> Void)
    }

    private var jobs: [Work] = []
    private var stopped = false

    /// Starts the thread.
    /// - Parameters:
    ///   - name: the thread's name, shown by debuggers and `top -H`.
    ///   - niceness: added to the thread's nice value, so its work yields the CPU to the rest of the
    ///     process when both want it (Linux schedules threads' nice values separately). Default: 0.
    ///   - ownArena: the thread allocates from a jemalloc arena of its own
    ///     (`Allocator.useArenaOfItsOwn`). Default: false.
    public init(name: String, niceness: Int32 = 0, ownArena: Bool = false) {
        let thread = Thread { [self] in
            // Named from inside: on Linux the name given before start does not always stick.
            Self.nameCurrentThread(name)
            let arena = ownArena ? Allocator.useArenaOfItsOwn() : nil
            if niceness != 0 {
                // `who` 0 is the calling thread on Linux; raising the value needs no privilege.
                let which = __priority_which_t(PRIO_PROCESS.rawValue)
                _ = setpriority(which, 0, getpriority(which, 0) + niceness)
            }
            self.runLoop()
            if let arena { Allocator.giveBackArena(arena) }
        }
        thread.name = name
        thread.start()
    }

    /// Names the calling thread for `top -H` and debuggers. Foundation's setter does not always
    /// reach the kernel on Linux (a thread started from a dispatch worker kept that worker's
    /// name, `oot.default-qos`), so the name is also written where the kernel keeps it (its
    /// first 15 bytes: the kernel's limit).
    public static func nameCurrentThread(_ name: String) {
        Thread.current.name = name
        #if os(Linux)
            let fd = open("/proc/thread-self/comm", O_WRONLY)
            guard fd >= 0 else { return }
            defer { close(fd) }
            let bytes = Array(name.utf8.prefix(15))
            _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        #endif
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
            let work = jobs.removeFirst()
            condition.unlock()
            switch work {
            case .job(let job):
                job.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: asUnownedTaskExecutor())
            case .closure(let body):
                body()
            }
        }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        append(.job(UnownedJob(job)))
    }

    /// Runs a plain closure on this executor's thread, after the work already queued.
    public func submit(_ body: @escaping @Sendable () -> Void) {
        append(.closure(body))
    }

    private func append(_ work: Work) {
        condition.lock()
        jobs.append(work)
        condition.signal()
        condition.unlock()
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }
}
