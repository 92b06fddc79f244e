import Foundation
import Synchronization
import Testing

@testable import AuthDomain
@testable import ServiceKit
@testable import TestSupport

@Suite struct PasswordServiceTests {
    /// The arena each hashing thread reported, by the thread's name.
    final class ArenasSeen: Sendable {
        let names = Mutex<[String: UInt32]>([:])
    }

    /// The hashing threads allocate from arenas of their own (`ExecutorPool`'s `ownArenas`), so a
    /// hash's 19 MiB is reused by the thread's next hash whatever arena jemalloc would have given
    /// it (docs/performance.md, "Arena 0").
    @Test func hashingThreadsAllocateFromArenasOfTheirOwn() async throws {
        let automatic: UInt32 = try #require(Allocator.jemallocValue("opt.narenas"))
        let passwords = try PasswordService(parameters: fastArgon2, threads: 2)
        let arenas = ArenasSeen()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    try await passwords.pool.run {
                        let arena: UInt32? = Allocator.jemallocValue("thread.arena")
                        if let arena { arenas.names.withLock { $0[Thread.current.name ?? ""] = arena } }
                        usleep(5_000)
                    }
                }
            }
            try await group.waitForAll()
        }
        let seen = arenas.names.withLock { $0 }
        #expect(seen.count == 2, "both hashing threads ran a job: \(seen)")
        #expect(seen.values.allSatisfy { $0 >= automatic }, "\(seen), automatic 0..<\(automatic)")
        #expect(Set(seen.values).count == seen.count, "\(seen)")
    }
}
