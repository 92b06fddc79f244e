import AuthDomain
import Foundation
import PGStore

/// Who may use the admin console, and as what (`auth-worker admins grant|revoke|list`). A role
/// goes to an account that signs in with a password (the console's sign-in is the password flow
/// plus a second factor): it is found by that password identity's address.
extension PostgresStore {
    /// One console user.
    public struct AdminGrant: Sendable, Equatable {
        public var userID: UUID
        public var email: String
        public var role: String
        public var grantedAt: Date
        public var grantedBy: String
    }

    public enum AdminGrantOutcome: Sendable, Equatable {
        case granted(UUID)
        /// No account signs in with a password at that address.
        case noPasswordAccount
    }

    /// Grants (or changes) an account's console role; recorded in its audit trail.
    public func grantAdminRole(
        email: String, role: AccountAdministration.Role, by actor: String, at date: Date
    ) async throws -> AdminGrantOutcome {
        try await pool.withConnection { connection in
            _ = try connection.execute(unsafeSQL: "BEGIN")
            do {
                guard
                    let userID = try connection.query(
                        "SELECT user_id FROM identities WHERE provider = 'password' AND subject = lower(\(email))"
                    ).first?.decode("user_id", as: UUID.self)
                else {
                    _ = try connection.execute(unsafeSQL: "ROLLBACK")
                    return .noPasswordAccount
                }
                _ = try connection.query(
                    """
                    INSERT INTO admin_roles (user_id, role, granted_at, granted_by)
                    VALUES (\(userID), \(role.rawValue), \(date), \(actor))
                    ON CONFLICT (user_id) DO UPDATE SET role = EXCLUDED.role, granted_at = EXCLUDED.granted_at,
                                                        granted_by = EXCLUDED.granted_by
                    """)
                _ = try connection.query(
                    """
                    INSERT INTO audit_log (at, user_id, action, outcome, actor)
                    VALUES (\(date), \(userID), 'operator.admin_grant', \(role.rawValue), \(actor))
                    """)
                _ = try connection.execute(unsafeSQL: "COMMIT")
                return .granted(userID)
            } catch {
                _ = try? connection.execute(unsafeSQL: "ROLLBACK")
                throw error
            }
        }
    }

    /// Takes an account's console role away. - Returns: whether it had one.
    public func revokeAdminRole(email: String, by actor: String, at date: Date) async throws -> Bool {
        try await pool.withConnection { connection in
            let removed = try connection.query(
                """
                WITH removed AS (
                    DELETE FROM admin_roles
                    WHERE user_id IN (SELECT user_id FROM identities WHERE provider = 'password' AND subject = lower(\(email)))
                    RETURNING user_id, role
                ), recorded AS (
                    INSERT INTO audit_log (at, user_id, action, outcome, actor)
                    SELECT \(date), user_id, 'operator.admin_revoke', role, \(actor) FROM removed
                )
                SELECT user_id FROM removed
                """)
            return removed.first != nil
        }
    }

    /// Every console user, by address.
    public func adminGrants() async throws -> [AdminGrant] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT r.user_id, i.subject AS email, r.role, r.granted_at, r.granted_by
                FROM admin_roles r JOIN identities i ON i.user_id = r.user_id AND i.provider = 'password'
                ORDER BY i.subject
                """
            ).map { row in
                AdminGrant(
                    userID: try row.decode("user_id"), email: try row.decode("email"), role: try row.decode("role"),
                    grantedAt: try row.decode("granted_at"), grantedBy: try row.decode("granted_by"))
            }
        }
    }
}
