import Foundation
import Testing

@testable import AuthDomain
@testable import ServiceKit
@testable import TestSupport

@Suite struct PasswordServiceTests {
    /// The hashing threads allocate from arenas of their own (`ExecutorPool`'s `ownArenas`), so a
    /// hash's 19 MiB is reused by the thread's next hash whatever arena jemalloc would have given
    /// it (docs/performance.md, "Arena 0").
    @Test(.enabled(if: SanitizerRun.linksJemalloc, "a sanitizer's build links no jemalloc"))
    func hashingThreadsAllocateFromArenasOfTheirOwn() async throws {
        let automatic: UInt32 = try #require(Allocator.jemallocValue("opt.narenas"))
        let passwords = try PasswordService(parameters: fastArgon2, threads: 2)
        let seen = try await passwords.pool.arenasOfItsThreads()
        #expect(seen.count == 2, "both hashing threads ran a job: \(seen)")
        #expect(seen.values.allSatisfy { $0 >= automatic }, "\(seen), automatic 0..<\(automatic)")
        #expect(Set(seen.values).count == seen.count, "\(seen)")
    }
}
