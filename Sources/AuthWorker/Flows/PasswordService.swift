import Foundation
import Passwords
import ServiceKit

/// Password hashing for the flows: the hasher, the policy, and a bounded pool of threads so a burst
/// of password logins runs beside token logins instead of starving them.
public final class PasswordService: Sendable {
    public let hasher: PasswordHasher
    public let policy: PasswordPolicy
    private let pool: ExecutorPool
    /// A hash of a random password with the current parameters: what unknown e-mails are checked
    /// against, so they cost the same as known ones.
    private let dummyHash: String

    /// Makes the pool and the dummy hash (one hash's time).
    public init(parameters: Argon2Parameters, threads: Int, policy: PasswordPolicy = PasswordPolicy()) throws {
        hasher = PasswordHasher(parameters: parameters)
        self.policy = policy
        pool = ExecutorPool(name: "password-hash", size: threads)
        dummyHash = try hasher.hash(UUID().uuidString)
    }

    /// The number of hashing threads.
    public var threads: Int { pool.size }

    /// A new Argon2id hash, on the pool.
    public func hash(_ password: String) async throws -> String {
        try await pool.run { [hasher] in try hasher.hash(password) }
    }

    /// Verifies on the pool; without a stored hash, verifies against the dummy and never matches.
    public func verify(_ password: String, against stored: String?) async throws -> PasswordHasher.Verification {
        let target = stored ?? dummyHash
        let result = try await pool.run { [hasher] in hasher.verify(password, against: target) }
        return stored == nil ? .init(matches: false, needsRehash: false) : result
    }
}
