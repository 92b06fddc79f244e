import AuthDomain
import Foundation
import PGStore

// MARK: - Rows to records

enum Decode {
    static func identity(_ row: PGRow) throws -> IdentityRecord {
        IdentityRecord(
            provider: try row.decode("provider"), subject: try row.decode("subject"), userID: try row.decode("user_id"),
            email: try row.decode("email", as: String?.self), emailVerified: try row.decode("email_verified"),
            isPrivateEmail: try row.decode("is_private_email"),
            passwordHash: try row.decode("password_hash", as: String?.self))
    }

    static func user(_ row: PGRow) throws -> StoredUser {
        var user = StoredUser(
            id: try row.decode("id"), handle: try row.decode("handle"), name: try row.decode("name", as: String?.self),
            email: try row.decode("email", as: String?.self), emailVerified: try row.decode("email_verified"),
            isPrivateEmail: try row.decode("is_private_email"), isGuest: try row.decode("is_guest"),
            providers: try row.decode("providers", as: [String].self), createdAt: try row.decode("created_at"))
        user.isDisabled = try row.decode("disabled")
        user.phone = try row.decode("phone", as: String?.self)
        return user
    }

    /// True when the row's session is `tenant`'s (its user's: the column `user_tenant`).
    static func owned(_ row: PGRow, by tenant: String) throws -> Bool {
        try row.decode("user_tenant", as: String.self) == tenant
    }

    static func session(_ row: PGRow, idColumn: String) throws -> SessionRecord {
        var session = SessionRecord(
            id: try row.decode(idColumn), userID: try row.decode("user_id"), createdAt: try row.decode("created_at"),
            expiresAt: try row.decode("expires_at"),
            revokedAt: try row.decode("revoked_at", as: Date?.self), abilities: try row.decode("abilities"),
            deviceName: try row.decode("device_name", as: String?.self), userIsGuest: try row.decode("is_guest"))
        session.userIsDisabled = try row.decode("user_disabled")
        return session
    }

    static func refreshToken(_ row: PGRow) throws -> RefreshTokenRecord {
        RefreshTokenRecord(
            id: try row.decode("token_id"), expiresAt: try row.decode("token_expires_at"),
            usedAt: try row.decode("used_at", as: Date?.self),
            successorSealed: try row.decode("successor_sealed", as: PGBytes?.self)?.bytes,
            session: try session(row, idColumn: "session_id"))
    }

    static func accessToken(_ row: PGRow) throws -> AccessTokenRecord {
        AccessTokenRecord(
            id: try row.decode("token_id"), expiresAt: try row.decode("token_expires_at"),
            session: try session(row, idColumn: "session_id"))
    }

    static func code(_ row: PGRow) throws -> OneTimeCodeRecord {
        OneTimeCodeRecord(
            id: try row.decode("id"), userID: try row.decode("user_id", as: UUID?.self),
            purpose: try row.decode("purpose"),
            email: try row.decode("email"), codeHMAC: try row.decode("code_hmac", as: PGBytes.self).bytes,
            attempts: try row.decode("attempts"), expiresAt: try row.decode("expires_at"),
            usedAt: try row.decode("used_at", as: Date?.self))
    }

    static func audit(_ row: PGRow) throws -> AuditEntry {
        AuditEntry(
            at: try row.decode("at"), userID: try row.decode("user_id", as: UUID?.self),
            action: try row.decode("action"),
            outcome: try row.decode("outcome"), requestID: try row.decode("request_id", as: String?.self),
            clientID: try row.decode("client_id", as: String?.self),
            deviceName: try row.decode("device_name", as: String?.self),
            devicePlatform: try row.decode("device_platform", as: String?.self),
            ip: try row.decode("ip", as: String?.self),
            userAgent: try row.decode("user_agent", as: String?.self), actor: try row.decode("actor"))
    }

    static func rateLimit(_ row: PGRow) throws -> RateLimitRow {
        RateLimitRow(windowStart: try row.decode("window_start"), count: try row.decode("count"))
    }
}
