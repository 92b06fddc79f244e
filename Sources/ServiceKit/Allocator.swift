import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The C allocator a process runs on.
///
/// The worker's binary links jemalloc with its settings built in (`Sources/CJemalloc`), and so do
/// the benchmarks (which run the worker's code in their own process) and the tests.
public enum Allocator {
    /// The allocator serving `malloc` here, for the version line and the start's log: "jemalloc"
    /// with its version and the two settings the worker sets, or "glibc malloc".
    public static var description: String {
        guard let version: UnsafePointer<CChar> = jemallocValue("version") else { return "glibc malloc" }
        let settings = ["tcache_max", "oversize_threshold"].compactMap { name -> String? in
            let value: Int? = jemallocValue("opt." + name)
            return value.map { "\(name) \($0)" }
        }
        return "jemalloc \(String(cString: version))"
            + (settings.isEmpty ? "" : " (" + settings.joined(separator: ", ") + ")")
    }

    /// Whether jemalloc serves `malloc` in this process (its `mallctl` is found).
    public static var isJemalloc: Bool { mallctl != nil }

    /// jemalloc's `mallctl`, looked up by name: a process that does not link jemalloc has none.
    private typealias Mallctl =
        @convention(c) (
            UnsafePointer<CChar>?, UnsafeMutableRawPointer?, UnsafeMutablePointer<Int>?, UnsafeMutableRawPointer?, Int
        ) -> Int32

    private static let mallctl: Mallctl? = {
        #if canImport(Glibc)
            guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallctl") else { return nil }
            return unsafeBitCast(symbol, to: Mallctl.self)
        #else
            return nil
        #endif
    }()

    /// Moves the calling thread's allocations to a jemalloc arena no other running thread uses
    /// (`thread.arena`; one given back by a thread that ended, or a new one from `arenas.create`):
    /// what the thread frees stays there for its next allocation, whatever the rest of the process
    /// does. For the password-hashing threads, whose 19 MiB a hash (Argon2id at the default
    /// parameters) is reused from hash to hash only in an arena that keeps it: on arena 0 of a
    /// Swift process a freed block that size is handed back to the kernel at once
    /// (docs/performance.md, "Arena 0"), and with `MALLOC_CONF=narenas:1` every thread is there.
    /// A thread that asked gives its arena back with `giveBackArena` when it ends; an arena is
    /// never destroyed (blocks the thread handed out may still live in it).
    /// - Returns: the arena's index; nil without jemalloc or when it refused.
    @discardableResult
    public static func useArenaOfItsOwn() -> UInt32? {
        guard let mallctl else { return nil }
        var index: UInt32
        if let spare = spareArenas.withLock({ $0.popLast() }) {
            index = spare
        } else {
            index = 0
            var length = MemoryLayout<UInt32>.size
            guard mallctl("arenas.create", &index, &length, nil, 0) == 0, length == MemoryLayout<UInt32>.size
            else { return nil }
        }
        guard moveThread(toArena: index) else {
            giveBackArena(index)
            return nil
        }
        return index
    }

    /// The jemalloc arena the calling thread allocates from; nil without jemalloc.
    public static var threadArena: UInt32? { jemallocValue("thread.arena") }

    /// Moves the calling thread's allocations to arena `index` (`thread.arena`).
    /// - Returns: whether jemalloc did.
    static func moveThread(toArena index: UInt32) -> Bool {
        guard let mallctl else { return false }
        var index = index
        return mallctl("thread.arena", nil, nil, &index, MemoryLayout<UInt32>.size) == 0
    }

    /// Hands an arena from `useArenaOfItsOwn` back for the next thread that asks, once the thread
    /// that used it no longer allocates: arenas made on request are kept to as many as such threads
    /// ran at once, however many pools come and go.
    public static func giveBackArena(_ index: UInt32) {
        spareArenas.withLock { $0.append(index) }
    }

    /// Arenas made by `useArenaOfItsOwn` whose threads have ended.
    static let spareArenas = Mutex<[UInt32]>([])

    /// One of jemalloc's read-only values, `T` of its C type's size: nil without jemalloc, or for
    /// a name it does not know.
    static func jemallocValue<T>(_ name: String) -> T? {
        guard let mallctl else { return nil }
        return withUnsafeTemporaryAllocation(of: T.self, capacity: 1) { buffer -> T? in
            guard let base = buffer.baseAddress else { return nil }
            var length = MemoryLayout<T>.size
            guard mallctl(name, base, &length, nil, 0) == 0, length == MemoryLayout<T>.size else { return nil }
            return base.move()
        }
    }
}
