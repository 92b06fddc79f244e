import AuthDomain
import Foundation
import PGStore

/// Who may use the admin console, and as what (`auth-worker admins grant|revoke|list`). A role
/// goes to an account that signs in with a password (the console's sign-in is the password flow
/// plus a second factor) whose address is proven: it is found by that password identity's address.
extension PostgresStore {
    /// One console user.
    public struct AdminGrant: Sendable, Equatable {
        public var userID: UUID
        public var email: String
        public var role: String
        /// The tenant whose users the role serves; nil for an operator (every tenant's).
        public var tenant: String?
        public var grantedAt: Date
        public var grantedBy: String
        /// Whether the address is proven; a role on an unproven one opens no console session.
        public var emailVerified: Bool
    }

    public enum AdminGrantOutcome: Sendable, Equatable {
        case granted(UUID)
        /// No account signs in with a password at that address.
        case noPasswordAccount
        /// The account's address was never proven (a code, a link, or a provider that vouches for
        /// it): whoever registered it first may not be its owner.
        case addressNotVerified
    }

    /// Whether the password identity `i` of user `u` has a proven address: the identity's own
    /// proof, or the user's verified address being the same. The rule a mailbox claim uses
    /// (`MailboxProof.reach`).
    static let provenPasswordAddress = "(i.email_verified OR (u.email_verified AND lower(u.email) = i.subject))"

    /// Whether user `u` signs in with a password at a proven address (the console's sign-in).
    static let holdsProvenPasswordAddress = """
        EXISTS (SELECT 1 FROM identities i WHERE i.user_id = u.id AND i.provider = 'password'
                AND \(provenPasswordAddress))
        """

    /// Grants (or changes) an account's console role, only to a proven address; recorded in its
    /// audit trail. Console users are accounts of the default tenant; the role serves `tenant`'s
    /// users (`support`, `admin`) or every tenant's (`operator`, whose `tenant` is ignored).
    public func grantAdminRole(
        email: String, role: AccountAdministration.Role, tenant: String = TenantScope.defaultName, by actor: String,
        at date: Date
    ) async throws -> AdminGrantOutcome {
        let served: String? = role.isAcrossTenants ? nil : tenant
        return try await pool.withConnection { connection in
            try connection.withTransaction { connection in
                guard
                    let account = try connection.query(
                        """
                        SELECT i.user_id, \(unsafeRaw: Self.provenPasswordAddress) AS verified
                        FROM identities i JOIN users u ON u.id = i.user_id
                        WHERE i.provider = 'password' AND i.subject = lower(\(email))
                          AND i.tenant = \(TenantScope.defaultName)
                        FOR UPDATE OF u
                        """
                    ).first
                else { return .noPasswordAccount }
                let userID: UUID = try account.decode("user_id")
                guard try account.decode("verified", as: Bool.self) else { return .addressNotVerified }
                _ = try connection.query(
                    """
                    INSERT INTO admin_roles (user_id, role, tenant, granted_at, granted_by)
                    VALUES (\(userID), \(role.rawValue), \(served), \(date), \(actor))
                    ON CONFLICT (user_id) DO UPDATE SET role = EXCLUDED.role, tenant = EXCLUDED.tenant,
                                                        granted_at = EXCLUDED.granted_at,
                                                        granted_by = EXCLUDED.granted_by
                    """)
                try Self.audit(
                    [
                        AuditEntry(
                            at: date, userID: userID, action: "operator.admin_grant",
                            outcome: served.map { TenantScope.named(role.rawValue, in: $0) } ?? role.rawValue,
                            actor: actor)
                    ],
                    on: connection)
                return .granted(userID)
            }
        }
    }

    /// Takes an account's console role away. - Returns: whether it had one.
    public func revokeAdminRole(email: String, by actor: String, at date: Date) async throws -> Bool {
        try await pool.withConnection { connection in
            try connection.withTransaction { connection in
                let removed = try connection.query(
                    """
                    DELETE FROM admin_roles
                    WHERE user_id IN (SELECT user_id FROM identities
                                      WHERE provider = 'password' AND subject = lower(\(email))
                                        AND tenant = \(TenantScope.defaultName))
                    RETURNING user_id, role
                    """
                ).map { row in
                    AuditEntry(
                        at: date, userID: try row.decode("user_id"), action: "operator.admin_revoke",
                        outcome: try row.decode("role"), actor: actor)
                }
                try Self.audit(removed, on: connection)
                return !removed.isEmpty
            }
        }
    }

    /// Writes `entries` to the audit trail in the transaction under way on `connection`.
    private static func audit(_ entries: [AuditEntry], on connection: PGConnection) throws {
        guard let insert = Writes.auditInsert(entries) else { return }
        _ = try connection.query(insert)
    }

    /// Every console user, by address.
    public func adminGrants() async throws -> [AdminGrant] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT r.user_id, i.subject AS email, r.role, r.tenant, r.granted_at, r.granted_by,
                       \(unsafeRaw: Self.provenPasswordAddress) AS verified
                FROM admin_roles r JOIN identities i ON i.user_id = r.user_id AND i.provider = 'password'
                     JOIN users u ON u.id = r.user_id
                ORDER BY i.subject
                """
            ).map { row in
                AdminGrant(
                    userID: try row.decode("user_id"), email: try row.decode("email"), role: try row.decode("role"),
                    tenant: try row.decode("tenant", as: String?.self), grantedAt: try row.decode("granted_at"),
                    grantedBy: try row.decode("granted_by"),
                    emailVerified: try row.decode("verified"))
            }
        }
    }
}
