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
    /// Verifications made, the dummy ones for unknown e-mails included.
    public let verifications = WorkerMetrics.Counter(name: "auth_password_verifications_total")

    /// Makes the pool and the dummy hash (one hash's time).
    public init(parameters: Argon2Parameters, threads: Int, policy: PasswordPolicy = PasswordPolicy()) throws {
        hasher = PasswordHasher(parameters: parameters)
        self.policy = policy
        // Below the rest of the worker in the scheduler's eyes: a burst of password logins takes the
        // CPU that is free, not the time guest and provider logins need.
        pool = ExecutorPool(name: "password-hash", size: threads, niceness: 10)
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
        verifications.increment()
        let result = try await pool.run { [hasher] in hasher.verify(password, against: target) }
        return stored == nil ? .init(matches: false, needsRehash: false) : result
    }
}
