import AuthDomain
import Foundation
import PGStore

/// What the admin console reads and keeps: its sign-in sessions (by the SHA-256 of the cookie's
/// random id, never the id), the user search and the page of one user.
extension PostgresStore {
    /// A console session that is still good: its holder, their role and the login session it rides on.
    public struct ConsoleSession: Sendable, Equatable {
        public var userID: UUID
        public var email: String
        public var role: AccountAdministration.Role
        /// The tenant whose users the role serves; nil for an operator, who serves every tenant's.
        public var tenant: String?
        /// The login session the console's sign-in opened (ended at sign-out).
        public var sessionID: UUID
        public var createdAt: Date
    }

    /// Opens a console session for a user who just signed in with both factors, if they hold a
    /// role; expired console sessions are purged on the way.
    /// - Returns: the role; nil (nothing stored) when the account holds none, is disabled, or
    ///   its password address was never proven.
    public func openConsoleSession(
        idHash: [UInt8], userID: UUID, sessionID: UUID, client: String, at now: Date, absoluteLifetime: TimeInterval,
        idleLifetime: TimeInterval
    ) async throws -> AccountAdministration.Role? {
        try await pool.withConnection { connection in
            _ = try connection.query(
                """
                DELETE FROM console_sessions
                WHERE created_at < \(now - absoluteLifetime) OR last_seen_at < \(now - idleLifetime)
                """)
            let role: String? = try connection.query(
                """
                INSERT INTO console_sessions (id_hash, user_id, session_id, client, created_at, last_seen_at)
                SELECT \(PGBytes(idHash)), r.user_id, \(sessionID), \(client), \(now), \(now)
                FROM admin_roles r JOIN users u ON u.id = r.user_id
                WHERE r.user_id = \(userID) AND u.disabled_at IS NULL AND u.tenant = \(TenantScope.defaultName)
                  AND \(unsafeRaw: Self.holdsProvenPasswordAddress)
                RETURNING (SELECT role FROM admin_roles WHERE user_id = \(userID)) AS role
                """
            ).first?.decode("role")
            return role.flatMap(AccountAdministration.Role.init(rawValue:))
        }
    }

    /// The console session a cookie names, if it is within both timeouts, its holder still holds a
    /// role, is not disabled and its login session was not ended; its idle clock restarts.
    public func consoleSession(
        idHash: [UInt8], at now: Date, absoluteLifetime: TimeInterval, idleLifetime: TimeInterval
    ) async throws -> ConsoleSession? {
        try await pool.withConnection { connection in
            guard
                let row = try connection.query(
                    """
                    UPDATE console_sessions c SET last_seen_at = \(now)
                    FROM admin_roles r, users u, sessions s
                    WHERE c.id_hash = \(PGBytes(idHash)) AND r.user_id = c.user_id AND u.id = c.user_id
                      AND \(unsafeRaw: Self.holdsProvenPasswordAddress)
                      AND u.disabled_at IS NULL AND s.id = c.session_id AND s.revoked_at IS NULL
                      AND s.expires_at > \(now) AND c.created_at > \(now - absoluteLifetime)
                      AND c.last_seen_at > \(now - idleLifetime)
                    RETURNING c.user_id, r.role, r.tenant, c.session_id, c.created_at,
                              coalesce((SELECT subject FROM identities
                                        WHERE user_id = c.user_id AND provider = 'password' LIMIT 1), u.email, '')
                                  AS email
                    """
                ).first,
                let role = AccountAdministration.Role(rawValue: try row.decode("role"))
            else { return nil }
            let tenant: String? = try row.decode("tenant", as: String?.self)
            // A role for one tenant names it; an operator's names none (the table's check).
            guard role.isAcrossTenants == (tenant == nil) else { return nil }
            return ConsoleSession(
                userID: try row.decode("user_id"), email: try row.decode("email"), role: role, tenant: tenant,
                sessionID: try row.decode("session_id"), createdAt: try row.decode("created_at"))
        }
    }

    /// Forgets a console session (sign-out). - Returns: its holder and login session, if it existed.
    public func endConsoleSession(idHash: [UInt8]) async throws -> (userID: UUID, sessionID: UUID)? {
        try await pool.withConnection { connection in
            guard
                let row = try connection.query(
                    "DELETE FROM console_sessions WHERE id_hash = \(PGBytes(idHash)) RETURNING user_id, session_id"
                ).first
            else { return nil }
            return (try row.decode("user_id"), try row.decode("session_id"))
        }
    }

    /// Whether an account holds a console role (checked before asking for its second factor
    /// would tell; used after both factors).
    public func consoleRole(userID: UUID) async throws -> AccountAdministration.Role? {
        try await pool.withConnection { connection in
            let role: String? = try connection.query("SELECT role FROM admin_roles WHERE user_id = \(userID)").first?
                .decode("role")
            return role.flatMap(AccountAdministration.Role.init(rawValue:))
        }
    }

    // MARK: - Reading users

    /// One line of the user search.
    public struct UserSummary: Codable, Sendable, Equatable {
        @LowercaseUUID public var id: UUID
        public var handle: String
        public var name: String?
        public var email: String?
        public var emailVerified: Bool
        public var isGuest: Bool
        public var disabled: Bool
        public var createdAt: Date
        /// The account's phone number (E.164), when it has one.
        public var phone: String?
        /// The tenant the account belongs to.
        public var tenant: String

        /// From a row of `users` with `disabled` computed (`disabled_at IS NOT NULL`).
        init(row: PGRow) throws {
            id = try row.decode("id")
            handle = try row.decode("handle")
            name = try row.decode("name", as: String?.self)
            email = try row.decode("email", as: String?.self)
            emailVerified = try row.decode("email_verified")
            isGuest = try row.decode("is_guest")
            disabled = try row.decode("disabled")
            createdAt = try row.decode("created_at")
            phone = try row.decode("phone", as: String?.self)
            tenant = try row.decode("tenant")
        }

        enum CodingKeys: String, CodingKey {
            case id, handle, name, email, disabled, phone, tenant
            case emailVerified = "email_verified"
            case isGuest = "is_guest"
            case createdAt = "created_at"
        }
    }

    /// `tenant`'s users whose id, provider subject or address is `query`, or whose handle, address
    /// or phone number begins with it (case-insensitive); all its users, newest first, when it is
    /// empty.
    /// - Returns: up to `limit` users from `offset`, and whether more follow.
    public func searchUsers(_ query: String, tenant: String, offset: Int, limit: Int) async throws -> (
        users: [UserSummary], more: Bool
    ) {
        let statement = Self.userSearch(query, tenant: tenant, offset: offset, limit: limit + 1)
        return try await pool.withConnection { connection in
            let rows = try connection.query(statement)
            let users = try rows.prefix(limit).map(UserSummary.init(row:))
            return (users, rows.count > limit)
        }
    }

    /// `searchUsers`' statement, for up to `limit` users from `offset`.
    ///
    /// Every way it matches is served by an index, so a search reads the accounts it finds, not
    /// the tables (it read `users` and `identities` whole: 0.7 s of PostgreSQL a search at a
    /// million accounts, beside the logins). Handles and addresses by prefix through
    /// `text_pattern_ops` indexes (migration 21; handles are lower-case ASCII, written so); the id
    /// by the primary key; a provider's subject through the `(provider, subject)` key, once for
    /// each provider there is, the providers found by skipping along that key (a recursive query:
    /// one index descent a provider). The matching ids are gathered, ordered and paged first, then
    /// their rows read by the primary key (`id = ANY(ARRAY(…))`: a join there was planned as a
    /// hash join over every user whenever the matches were estimated many). Newest first is the
    /// ids' order: they are UUIDv7 (`Identifiers.uuid`), which begin with their creation's
    /// milliseconds, so the primary key holds users by age. A prefix most accounts share
    /// (`guest_`) still reads every account it matches.
    static func userSearch(_ query: String, tenant: String, offset: Int, limit: Int) -> PGQuery {
        let text = query.trimmingCharacters(in: .whitespaces)
        let columns = """
            u.id, u.handle, u.name, u.email, u.email_verified, u.is_guest, u.disabled_at IS NOT NULL AS disabled,
            u.created_at, u.phone, u.tenant
            """
        guard !text.isEmpty else {
            return """
                SELECT \(unsafeRaw: columns) FROM users u
                WHERE u.id = ANY(ARRAY(
                    SELECT id FROM users WHERE tenant = \(tenant) ORDER BY id DESC LIMIT \(limit) OFFSET \(offset)))
                ORDER BY u.id DESC
                """
        }
        // LIKE's own characters in the query are matched as themselves.
        var escaped = ""
        for character in text.lowercased() {
            if character == "\\" || character == "%" || character == "_" { escaped.append("\\") }
            escaped.append(character)
        }
        let prefix = escaped + "%"
        let id = UUID(uuidString: text)
        return """
            SELECT \(unsafeRaw: columns) FROM users u
            WHERE u.id = ANY(ARRAY(
                SELECT id FROM users WHERE id = \(id) AND tenant = \(tenant)
                UNION SELECT id FROM users WHERE handle LIKE \(prefix) AND tenant = \(tenant)
                UNION SELECT id FROM users WHERE lower(email) LIKE \(prefix) AND email IS NOT NULL AND tenant = \(tenant)
                UNION SELECT id FROM users WHERE phone LIKE \(prefix) AND phone IS NOT NULL AND tenant = \(tenant)
                UNION SELECT user_id FROM identities
                      WHERE lower(email) LIKE \(prefix) AND email IS NOT NULL AND tenant = \(tenant)
                UNION SELECT user_id FROM identities
                      WHERE subject = \(text) AND tenant = \(tenant) AND provider = ANY(ARRAY(
                          WITH RECURSIVE providers (name) AS (
                              SELECT min(provider) FROM identities
                              UNION ALL
                              SELECT (SELECT min(provider) FROM identities WHERE provider > providers.name)
                              FROM providers WHERE providers.name IS NOT NULL)
                          SELECT name FROM providers WHERE name IS NOT NULL))
                ORDER BY 1 DESC LIMIT \(limit) OFFSET \(offset)))
            ORDER BY u.id DESC
            """
    }

    /// Everything the console shows of one user: never a secret or a hash.
    public struct UserDetails: Codable, Sendable, Equatable {
        public struct Identity: Codable, Sendable, Equatable {
            public var provider: String
            public var subject: String
            public var email: String?
            public var emailVerified: Bool
            public var hasPassword: Bool
            public var createdAt: Date
            public var lastLoginAt: Date

            enum CodingKeys: String, CodingKey {
                case provider, subject, email
                case emailVerified = "email_verified"
                case hasPassword = "has_password"
                case createdAt = "created_at"
                case lastLoginAt = "last_login_at"
            }
        }

        public struct Session: Codable, Sendable, Equatable {
            @LowercaseUUID public var id: UUID
            public var provider: String
            public var deviceName: String?
            public var devicePlatform: String?
            public var createdAt: Date
            public var expiresAt: Date
            public var revokedAt: Date?
            public var revokedReason: String?
            /// Neither ended nor expired.
            public var live: Bool

            enum CodingKeys: String, CodingKey {
                case id, provider, live
                case deviceName = "device_name"
                case devicePlatform = "device_platform"
                case createdAt = "created_at"
                case expiresAt = "expires_at"
                case revokedAt = "revoked_at"
                case revokedReason = "revoked_reason"
            }
        }

        public struct Passkey: Codable, Sendable, Equatable {
            @LowercaseUUID public var id: UUID
            public var name: String
            public var backedUp: Bool
            public var createdAt: Date
            public var lastUsedAt: Date?

            enum CodingKeys: String, CodingKey {
                case id, name
                case backedUp = "backed_up"
                case createdAt = "created_at"
                case lastUsedAt = "last_used_at"
            }
        }

        public struct Factor: Codable, Sendable, Equatable {
            public var kind: String
            public var enabled: Bool
            public var createdAt: Date
            public var recoveryCodesLeft: Int

            enum CodingKeys: String, CodingKey {
                case kind, enabled
                case createdAt = "created_at"
                case recoveryCodesLeft = "recovery_codes_left"
            }
        }

        public struct AuditLine: Codable, Sendable, Equatable {
            public var at: Date
            public var action: String
            public var outcome: String
            public var actor: String
            public var deviceName: String?
            public var ip: String?

            enum CodingKeys: String, CodingKey {
                case at, action, outcome, actor, ip
                case deviceName = "device_name"
            }
        }

        public var user: UserSummary
        public var consoleRole: String?
        public var identities: [Identity]
        public var sessions: [Session]
        public var passkeys: [Passkey]
        public var factor: Factor?
        public var audit: [AuditLine]

        enum CodingKeys: String, CodingKey {
            case user, identities, sessions, passkeys, factor, audit
            case consoleRole = "console_role"
        }
    }

    /// The tenant user `id` belongs to, if it is `within` (nil: any tenant, an operator's view).
    public func tenant(ofUser id: UUID, within: String?) async throws -> String? {
        try await pool.withConnection { connection in
            try connection.query(
                "SELECT tenant FROM users WHERE id = \(id) AND (\(within)::text IS NULL OR tenant = \(within))"
            ).first?.decode("tenant")
        }
    }

    /// The account's console role, if it holds one.
    public func consoleRole(of id: UUID) async throws -> String? {
        try await pool.withConnection { connection in
            try connection.query("SELECT role FROM admin_roles WHERE user_id = \(id)").first?.decode("role")
        }
    }

    /// One user's page: the 50 newest sessions and audit lines.
    /// - Parameter tenant: the tenant the user must belong to; nil: any (an operator's).
    /// - Returns: nil when `tenant` has no such user.
    public func userDetails(_ id: UUID, tenant: String?, at now: Date) async throws -> UserDetails? {
        try await pool.withConnection { connection in
            guard
                let row = try connection.query(
                    """
                    SELECT u.id, u.handle, u.name, u.email, u.email_verified, u.is_guest,
                           u.disabled_at IS NOT NULL AS disabled, u.created_at, u.phone, u.tenant, r.role
                    FROM users u LEFT JOIN admin_roles r ON r.user_id = u.id
                    WHERE u.id = \(id) AND (\(tenant)::text IS NULL OR u.tenant = \(tenant))
                    """
                ).first
            else { return nil }
            let user = try UserSummary(row: row)
            let identities = try Self.identities(of: id, on: connection)
            let sessions = try Self.sessions(of: id, at: now, on: connection)
            let passkeys = try Self.passkeys(of: id, on: connection)
            let factor = try connection.query(
                """
                SELECT f.created_at, f.enabled_at IS NOT NULL AS enabled,
                       (SELECT count(*) FROM mfa_recovery_codes c WHERE c.user_id = f.user_id AND c.used_at IS NULL)
                           AS left
                FROM mfa_factors f WHERE f.user_id = \(id)
                """
            ).first.map { row in
                UserDetails.Factor(
                    kind: "totp", enabled: try row.decode("enabled"),
                    createdAt: try row.decode("created_at", as: Date.self),
                    recoveryCodesLeft: try row.decode("left"))
            }
            let audit = try connection.query(
                """
                SELECT at, action, outcome, coalesce(actor, 'user') AS actor, device_name, ip FROM audit_log
                WHERE user_id = \(id) ORDER BY at DESC, id DESC LIMIT 50
                """
            ).map { row in
                UserDetails.AuditLine(
                    at: try row.decode("at", as: Date.self), action: try row.decode("action"),
                    outcome: try row.decode("outcome"), actor: try row.decode("actor"),
                    deviceName: try row.decode("device_name", as: String?.self),
                    ip: try row.decode("ip", as: String?.self))
            }
            return UserDetails(
                user: user, consoleRole: try row.decode("role", as: String?.self), identities: identities,
                sessions: sessions, passkeys: passkeys, factor: factor, audit: audit)
        }
    }

    /// The user's identities, as the page shows them.
    static func identities(of id: UUID, on connection: PGConnection) throws -> [UserDetails.Identity] {
        try connection.query(
            """
            SELECT provider, subject, email, email_verified, password_hash IS NOT NULL AS has_password, created_at,
                   last_login_at
            FROM identities WHERE user_id = \(id) ORDER BY created_at, provider
            """
        ).map { row in
            UserDetails.Identity(
                provider: try row.decode("provider"), subject: try row.decode("subject"),
                email: try row.decode("email", as: String?.self), emailVerified: try row.decode("email_verified"),
                hasPassword: try row.decode("has_password"),
                createdAt: try row.decode("created_at", as: Date.self),
                lastLoginAt: try row.decode("last_login_at", as: Date.self))
        }
    }

    /// The user's last 50 sessions, as the page shows them.
    static func sessions(of id: UUID, at now: Date, on connection: PGConnection) throws -> [UserDetails.Session] {
        try connection.query(
            """
            SELECT id, provider, device_name, device_platform, created_at, expires_at, revoked_at, revoked_reason
            FROM sessions WHERE user_id = \(id) ORDER BY created_at DESC, id LIMIT 50
            """
        ).map { row in
            let expires: Date = try row.decode("expires_at")
            let revoked: Date? = try row.decode("revoked_at", as: Date?.self)
            return UserDetails.Session(
                id: try row.decode("id"), provider: try row.decode("provider"),
                deviceName: try row.decode("device_name", as: String?.self),
                devicePlatform: try row.decode("device_platform", as: String?.self),
                createdAt: try row.decode("created_at", as: Date.self),
                expiresAt: expires, revokedAt: revoked,
                revokedReason: try row.decode("revoked_reason", as: String?.self),
                live: revoked == nil && expires > now)
        }
    }

    /// The user's passkeys, as the page shows them.
    static func passkeys(of id: UUID, on connection: PGConnection) throws -> [UserDetails.Passkey] {
        try connection.query(
            """
            SELECT id, name, backed_up, created_at, last_used_at FROM passkeys
            WHERE user_id = \(id) ORDER BY created_at, id
            """
        ).map { row in
            UserDetails.Passkey(
                id: try row.decode("id"), name: try row.decode("name"), backedUp: try row.decode("backed_up"),
                createdAt: try row.decode("created_at", as: Date.self),
                lastUsedAt: try row.decode("last_used_at", as: Date?.self))
        }
    }
}

/// A UUID written in lower case (RFC 9562), as the Kafka contract writes user and session ids;
/// `Codable` alone writes `UUID` in upper case.
@propertyWrapper
public struct LowercaseUUID: Codable, Sendable, Equatable {
    public var wrappedValue: UUID

    public init(wrappedValue: UUID) { self.wrappedValue = wrappedValue }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let value = UUID(uuidString: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a UUID"))
        }
        wrappedValue = value
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(wrappedValue.uuidString.lowercased())
    }
}
