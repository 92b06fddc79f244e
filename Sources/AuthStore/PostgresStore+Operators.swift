import AuthDomain
import Foundation
import PGStore

/// Chores for operators: stale guests, a user's report.
extension PostgresStore {
    // MARK: - Operators

    /// `tenant`'s guests created before `cutoff` that never gained an identity, oldest first.
    public func staleGuests(
        createdBefore cutoff: Date, limit: Int, tenant: String
    ) async throws -> [UUID] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT id FROM users
                WHERE is_guest AND created_at < \(cutoff) AND tenant = \(tenant)
                  AND NOT EXISTS (SELECT 1 FROM identities WHERE identities.user_id = users.id)
                ORDER BY created_at LIMIT \(limit)
                """
            ).map { try $0.decode("id", as: UUID.self) }
        }
    }

    /// What `auth-worker users show` prints: the user, identities and sessions, never a secret.
    /// `tenant`'s users only.
    public func userReport(_ idOrEmail: String, tenant: String) async throws -> UserReport? {
        try await pool.withConnection { try UserReport.load(idOrEmail, tenant: tenant, connection: $0) }
    }

}
