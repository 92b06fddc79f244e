import Foundation
import Synchronization
import TestSupport
import Testing

@testable import ServiceKit

/// The tests link the worker's allocator and its settings (`Sources/CJemalloc`), as its binary does.
/// One test at a time: the pools' tests hand arenas back and take them again, and each count of
/// page faults is best alone (scripts/test runs the suite in a process of its own).
@Suite(.serialized, .enabled(if: SanitizerRun.linksJemalloc, "a sanitizer's build links no jemalloc"))
struct AllocatorTests {
    /// The minor page faults of the calling thread so far, from `/proc/thread-self/stat`.
    static func minorFaults() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/thread-self/stat", encoding: .utf8),
            let end = text.lastIndex(of: ")")
        else { return nil }
        // After the command's closing parenthesis: state, ppid, pgrp, session, tty, tpgid, flags, minflt.
        let fields = text[text.index(after: end)...].split(separator: " ")
        return fields.count > 7 ? Int(fields[7]) : nil
    }

    @Test func jemallocServesMallocWithTheWorkersSettings() {
        #expect(Allocator.isJemalloc)
        #expect(Allocator.description.hasPrefix("jemalloc 5."), "\(Allocator.description)")
        #expect(
            Allocator.description.hasSuffix("(tcache_max 262144, oversize_threshold 0)"), "\(Allocator.description)")
        let limit: Int? = Allocator.jemallocValue("opt.tcache_max")
        #expect(limit == 262_144)
        let oversize: Int? = Allocator.jemallocValue("opt.oversize_threshold")
        #expect(oversize == 0)
        let unknown: Int? = Allocator.jemallocValue("opt.no_such_setting")
        #expect(unknown == nil)
    }

    /// Moves the calling thread from jemalloc's arena 0 to arena 1, when it was given arena 0 and
    /// there is another. In a Swift test process a block of 19 MiB freed on arena 0 is handed back
    /// to the kernel at once (a `madvise` from `free`, seen with `perf`; with
    /// `MALLOC_CONF=narenas:1`, which puts every thread there, every attempt faults every round)
    /// while the other arenas keep it. Each arena purges a freed block over the oversize threshold
    /// in force when it was made (arenas made on request fault every round too under
    /// `MALLOC_CONF=oversize_threshold:8388608`), and arena 0 is made before the worker's setting
    /// turns that threshold off; a C program's arena 0 kept the block all the same, so that is
    /// likely, not shown. The counts measure the automatic arenas the worker's threads are given,
    /// so the thread moves to arena 1, not to an arena of its own.
    static func leaveArenaZero() {
        let automatic: UInt32? = Allocator.jemallocValue("opt.narenas")
        guard Allocator.threadArena == 0, let automatic, automatic > 1 else { return }
        _ = Allocator.moveThread(toArena: 1)
    }

    /// Allocates `size` bytes (zeroed with `calloc` when `zeroed`), fills them and frees them, once
    /// and then `rounds` times more, on the calling thread (faults are counted per thread).
    /// - Returns: the page faults of the later rounds; nil when an allocation failed.
    static func countLaterRounds(size: Int, zeroed: Bool, rounds: Int) -> Int? {
        func round() -> Bool {
            guard let block = zeroed ? calloc(1, size) : malloc(size) else { return false }
            memset(block, 1, size)
            free(block)
            return true
        }
        guard round(), let before = minorFaults() else { return nil }
        for _ in 0..<rounds {
            guard round() else { return nil }
        }
        return minorFaults().map { $0 - before }
    }

    /// `countLaterRounds` on a thread of its own, which leaves arena 0 (`leaveArenaZero`).
    static func faultsOfLaterRounds(size: Int, zeroed: Bool, rounds: Int) -> Int? {
        let outcome = Mutex<Int?>(nil)
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            defer { done.signal() }
            Self.leaveArenaZero()
            let faults = Self.countLaterRounds(size: size, zeroed: zeroed, rounds: rounds)
            outcome.withLock { $0 = faults }
        }
        thread.start()
        done.wait()
        return outcome.withLock { $0 }
    }

    /// The fewest faults of up to `attempts` runs of `faultsOfLaterRounds`, stopping at the first
    /// below `bound`: a margin for what other threads do in the arena the measured one shares (with
    /// every test in one process, before `leaveArenaZero`, three runs in ten failed; scripts/test
    /// runs this suite in a process of its own). Without the worker's settings every attempt
    /// faults every round, so the tests still fail.
    static func fewestFaults(size: Int, zeroed: Bool, rounds: Int, below bound: Int, attempts: Int = 5) -> Int? {
        var fewest: Int?
        for _ in 0..<attempts {
            guard let faults = faultsOfLaterRounds(size: size, zeroed: zeroed, rounds: rounds) else { return nil }
            fewest = min(fewest ?? faults, faults)
            if faults < bound { break }
        }
        return fewest
    }

    /// librdkafka callocs and frees a compression context of about 100 KiB for every message set.
    /// Zeroed, freed and asked for again, such a block is reused from the thread's cache, not handed
    /// back to the kernel and faulted in again (jemalloc's default thread cache stops at 32 KiB,
    /// and beyond it a zeroed block is zeroed by `madvise`: about 26 faults a round here, 1,656 in
    /// all, checked with MALLOC_CONF=tcache_max:32768).
    @Test func aZeroedBlockFreedAndAskedForAgainIsNotFaultedInAgain() throws {
        let faults = try #require(Self.fewestFaults(size: 100 << 10, zeroed: true, rounds: 63, below: 63))
        #expect(faults < 63, "63 rounds faulted \(faults) pages in")
    }

    /// An Argon2id hash allocates its memory (19 MiB at the default parameters) with malloc, fills
    /// it and frees it. Asked for again, the block is reused, not faulted in afresh: jemalloc's
    /// arena for blocks over 8 MiB hands them back at once (about 4,900 faults a round here,
    /// 34,068 in all, checked with `MALLOC_CONF=oversize_threshold:8388608`), which cost a third
    /// of the password hashing rate.
    @Test func aPasswordHashSizedBlockFreedAndAskedForAgainIsNotFaultedInAgain() throws {
        let faults = try #require(Self.fewestFaults(size: 19_456 << 10, zeroed: false, rounds: 7, below: 500))
        #expect(faults < 500, "7 rounds faulted \(faults) pages in")
    }

    /// The arenas jemalloc makes itself: 0 up to `opt.narenas`; arenas made on request (and the
    /// oversize arena, which the worker's settings turn off) take the indexes after them.
    static var automaticArenas: UInt32? { Allocator.jemallocValue("opt.narenas") }

    /// A pool asked for arenas of their own gives each of its threads one that no other thread
    /// was given (made on request, so past the automatic ones); a pool that was not asked leaves
    /// its threads on automatic arenas.
    @Test func aPoolsThreadsWithArenasOfTheirOwn() async throws {
        let automatic = try #require(Self.automaticArenas)
        for own in [true, false] {
            let pool = ExecutorPool(name: "arena-pool", size: 2, ownArenas: own)
            let seen = try await pool.arenasOfItsThreads()
            #expect(seen.count == 2, "both threads ran a job: \(seen)")
            if own {
                #expect(seen.values.allSatisfy { $0 >= automatic }, "\(seen), automatic 0..<\(automatic)")
                #expect(Set(seen.values).count == 2, "\(seen)")
            } else {
                #expect(seen.values.allSatisfy { $0 < automatic }, "\(seen), automatic 0..<\(automatic)")
            }
        }
    }

    /// On a thread with an arena of its own, a password hash's block is reused from hash to hash
    /// whatever arena jemalloc would have given the thread: also with `MALLOC_CONF=narenas:1`,
    /// where every other thread is on arena 0 and the count without an arena of its own is 34,000
    /// (checked). The worker's oversize setting still decides it: with
    /// `MALLOC_CONF=oversize_threshold:8388608` this count is 34,064 (checked).
    @Test func aPasswordHashSizedBlockIsReusedOnAThreadWithAnArenaOfItsOwn() async throws {
        let pool = ExecutorPool(name: "arena-hash", size: 1, ownArenas: true)
        let faults = try await pool.run { Self.countLaterRounds(size: 19_456 << 10, zeroed: false, rounds: 7) }
        let counted = try #require(faults)
        #expect(counted < 500, "7 rounds faulted \(counted) pages in")
    }

    /// A pool's threads give their arenas back when they end, and the next thread to ask takes
    /// one of those instead of making another: arenas made on request stay as many as such
    /// threads ran at once, however many pools come and go (the tests make hundreds).
    @Test func arenasOfThreadsThatEndedAreGivenToTheNext() async throws {
        var first: ExecutorPool? = ExecutorPool(name: "arena-first", size: 2, ownArenas: true)
        let used = Set(try await #require(first).arenasOfItsThreads().values)
        #expect(used.count == 2, "\(used)")
        first = nil
        let deadline = ContinuousClock.now + .seconds(10)
        while !used.isSubset(of: Allocator.spareArenas.withLock({ Set($0) })), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(used.isSubset(of: Allocator.spareArenas.withLock({ Set($0) })), "both threads gave theirs back")

        let made: UInt32? = Allocator.jemallocValue("arenas.narenas")
        let taken = try await ExecutorPool(name: "arena-next", size: 1, ownArenas: true).run { Allocator.threadArena }
        let after: UInt32? = Allocator.jemallocValue("arenas.narenas")
        #expect(taken.map(used.contains) == true, "\(String(describing: taken)) from \(used)")
        #expect(
            made != nil && made == after, "no arena made: \(String(describing: made)), \(String(describing: after))")
    }
}
