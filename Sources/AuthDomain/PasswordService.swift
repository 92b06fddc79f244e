import Foundation
import Passwords
import ServiceKit
import Synchronization

/// Password hashing for the flows: the hasher, the policy, and a bounded pool of threads so a burst
/// of password logins runs beside token logins instead of starving them.
public final class PasswordService: Sendable {
    public let hasher: PasswordHasher
    public let policy: PasswordPolicy
    let pool: ExecutorPool
    /// A hash no password matches: what unknown e-mails are checked against, so they cost what
    /// known ones do. Of the parameters most stored hashes have (see `calibrate`), which
    /// after a parameter change are the old ones until most users have signed in again.
    private let dummyHash: Mutex<String>
    /// Verifications made, the dummy ones for unknown e-mails included.
    public let verifications = Counter()

    /// Makes the pool and the dummy hash (random bytes: no hash is computed, so a start costs none).
    public init(parameters: Argon2Parameters, threads: Int, policy: PasswordPolicy = PasswordPolicy()) throws {
        hasher = PasswordHasher(parameters: parameters)
        self.policy = policy
        // Below the rest of the worker in the scheduler's eyes: a burst of password logins takes the
        // CPU that is free, not the time guest and provider logins need.
        // Each thread hashes in a jemalloc arena of its own, so the 19 MiB a hash takes (at the
        // default parameters) is reused by its next hash, not faulted in afresh: on arena 0 a
        // freed block that size goes back to the kernel at once (`Allocator.useArenaOfItsOwn`).
        pool = ExecutorPool(name: "password-hash", size: threads, niceness: 10, ownArenas: true)
        dummyHash = Mutex(try hasher.unmatchableHash())
    }

    /// Makes unknown e-mails cost what a typical stored hash costs: `typical` is one stored hash of
    /// the most common kind. An Argon2 hash within the verifier's bounds gives its parameters to
    /// the dummy; anything else leaves the dummy as it is.
    /// - Returns: the parameters now used, when they changed.
    @discardableResult
    public func calibrate(typical: String) async throws -> Argon2Parameters? {
        guard let parameters = hasher.argon2idParameters(of: typical),
            parameters != hasher.argon2idParameters(of: dummyHash.withLock { $0 })
        else { return nil }
        let dummy = try PasswordHasher(parameters: parameters).unmatchableHash()
        dummyHash.withLock { $0 = dummy }
        return parameters
    }

    /// The number of hashing threads.
    public var threads: Int { pool.size }

    /// A new Argon2id hash, on the pool.
    public func hash(_ password: String) async throws -> String {
        try await pool.run { [hasher] in try hasher.hash(password) }
    }

    /// Verifies on the pool; without a stored hash, verifies against the dummy and never matches.
    public func verify(_ password: String, against stored: String?) async throws -> PasswordHasher.Verification {
        let target = stored ?? dummyHash.withLock { $0 }
        verifications.increment()
        let result = try await pool.run { [hasher] in hasher.verify(password, against: target) }
        return stored == nil ? .init(matches: false, needsRehash: false) : result
    }
}
