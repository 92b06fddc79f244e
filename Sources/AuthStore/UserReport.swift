import AuthDomain
import Foundation
import PGStore

/// What `auth-worker users show` prints: the user, identities and sessions, never a secret.
public struct UserReport: Codable, Sendable {
    public struct Identity: Codable, Sendable {
        var provider: String
        var subject: String
        var email: String?
        var emailVerified: Bool
        var hasPassword: Bool
        var lastLoginAt: String

        enum CodingKeys: String, CodingKey {
            case provider, subject, email
            case emailVerified = "email_verified"
            case hasPassword = "has_password"
            case lastLoginAt = "last_login_at"
        }
    }

    public struct Session: Codable, Sendable {
        var id: String
        var provider: String
        var device: String?
        var createdAt: String
        var expiresAt: String
        var revokedAt: String?

        enum CodingKeys: String, CodingKey {
            case id, provider, device
            case createdAt = "created_at"
            case expiresAt = "expires_at"
            case revokedAt = "revoked_at"
        }
    }

    var user: [String: String]
    /// The user's id.
    public var userID: UUID? { user["id"].flatMap(UUID.init(uuidString:)) }
    var identities: [Identity]
    var sessions: [Session]

    /// The user `load` reports: by id, by phone number (`+…`, `users_phone`), or the first to
    /// sign up of those whose address, or one of whose identities' address, is `idOrEmail` in any
    /// case. Both addresses by their lower-case indexes (`users_email_prefix`, `identities_email`),
    /// the users then by their key.
    ///
    /// `tenant`'s users only.
    static func lookup(_ idOrEmail: String, tenant: String) -> PGQuery {
        if let id = UUID(uuidString: idOrEmail) {
            return "SELECT * FROM users WHERE id = \(id) AND tenant = \(tenant)"
        }
        if idOrEmail.hasPrefix("+") {
            return """
                SELECT * FROM users WHERE phone = \(idOrEmail) AND phone IS NOT NULL AND tenant = \(tenant)
                ORDER BY created_at LIMIT 1
                """
        }
        return """
            SELECT * FROM users WHERE id = ANY(ARRAY(
                SELECT id FROM users WHERE lower(email) = lower(\(idOrEmail)) AND email IS NOT NULL
                UNION SELECT user_id FROM identities WHERE lower(email) = lower(\(idOrEmail)) AND email IS NOT NULL))
              AND tenant = \(tenant)
            ORDER BY created_at LIMIT 1
            """
    }

    static func load(_ idOrEmail: String, tenant: String, connection: PGConnection) throws -> UserReport? {
        let rows = try connection.query(lookup(idOrEmail, tenant: tenant))
        guard let row = rows.first else { return nil }
        var user: [String: String] = [:]
        for (column, value) in zip(row.columns, row.values) { user[column] = value }
        let id: UUID = try row.decode("id")
        let identities = try connection.query(
            """
            SELECT provider, subject, email, email_verified, password_hash IS NOT NULL AS has_password, last_login_at
            FROM identities WHERE user_id = \(id) ORDER BY created_at
            """
        ).map { row in
            Identity(
                provider: try row.decode("provider"), subject: try row.decode("subject"),
                email: try row.decode("email", as: String?.self), emailVerified: try row.decode("email_verified"),
                hasPassword: try row.decode("has_password"), lastLoginAt: try row.decode("last_login_at"))
        }
        let sessions = try connection.query(
            """
            SELECT id, provider, device_name, created_at, expires_at, revoked_at
            FROM sessions WHERE user_id = \(id) ORDER BY created_at DESC LIMIT 50
            """
        ).map { row in
            Session(
                id: try row.decode("id"), provider: try row.decode("provider"),
                device: try row.decode("device_name", as: String?.self), createdAt: try row.decode("created_at"),
                expiresAt: try row.decode("expires_at"), revokedAt: try row.decode("revoked_at", as: String?.self))
        }
        return UserReport(user: user, identities: identities, sessions: sessions)
    }
}
