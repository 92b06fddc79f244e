import AuthCrypto
import Foundation
import PGStore

/// `AuthStore` on PostgreSQL: every write is one transaction, so a crash leaves all or nothing.
public struct PostgresAuthStore: AuthStore {
    private let pool: PGPool

    public init(pool: PGPool) {
        self.pool = pool
    }

    public func createAccount(_ plan: NewAccount) async throws -> AccountWrite {
        try await pool.withTransaction { connection in
            guard
                try Self.recordRequest(
                    connection, id: plan.requestID, method: plan.method, userID: plan.user.id,
                    sessionID: plan.session.id, at: plan.user.createdAt, expiresAt: plan.idempotencyExpiresAt)
            else { return .duplicate }
            var stored = try Self.insertUser(connection, plan.user, handles: plan.handleCandidates)
            if let identity = plan.identity {
                try Self.insertIdentity(connection, identity, userID: stored.id, at: stored.createdAt)
                stored.providers = [identity.provider]
            }
            try Self.insertSession(connection, plan.session, userID: stored.id)
            let events = try plan.events(stored)
            try Self.insertOutbox(connection, events)
            try Self.keepResult(connection, plan.keep, requestID: plan.requestID, user: stored, details: .account)
            return .created(stored, events: events)
        }
    }

    public func signIn(_ plan: SignInPlan) async throws -> SignInWrite {
        do {
            return try await signInOnce(plan)
        } catch let error as PGError where error.isUniqueViolation {
            // Two first logins of one identity raced; the loser finds the winner's user now.
            return try await signInOnce(plan)
        }
    }

    private func signInOnce(_ plan: SignInPlan) async throws -> SignInWrite {
        try await pool.withTransaction { connection in
            let identity = plan.identity
            let existing = try connection.query(
                """
                SELECT user_id FROM identities WHERE provider = \(identity.provider) AND subject = \(identity.subject)
                FOR UPDATE
                """
            ).first.map { try $0.decode("user_id", as: UUID.self) }

            // Refusals change nothing, not even the idempotency record: a replay decides the same way.
            switch (plan.mode, existing) {
            case (.createOnly, .some): return .identityTaken
            case (.findOnly, nil): return .identityMissing
            default: break
            }
            if let existing, let target = plan.linkTo, existing != target { return .linkConflict }

            var target: (id: UUID, isGuest: Bool)?
            if existing == nil, let linkTo = plan.linkTo {
                guard
                    let row = try connection.query("SELECT is_guest FROM users WHERE id = \(linkTo) FOR UPDATE").first
                else { return .linkConflict }
                target = (linkTo, try row.decode("is_guest"))
            } else if existing == nil, plan.linkByVerifiedEmail, let email = identity.email, identity.emailVerified,
                !identity.isPrivateEmail
            {
                let matches = try connection.query(
                    """
                    SELECT id FROM users
                    WHERE lower(email) = lower(\(email)) AND email_verified AND NOT is_private_email AND NOT is_guest
                    LIMIT 2 FOR UPDATE
                    """)
                if matches.count == 1, let row = matches.first { target = (try row.decode("id"), false) }
            }

            let userID = existing ?? target?.id ?? plan.newUser.id
            guard
                try Self.recordRequest(
                    connection, id: plan.requestID, method: plan.method, userID: userID, sessionID: plan.session.id,
                    at: plan.now, expiresAt: plan.idempotencyExpiresAt)
            else { return .duplicate }

            let kind: SignInKind
            if let existing {
                try Self.refreshIdentity(connection, identity, plan: plan)
                if identity.email != nil || plan.name != nil {
                    try Self.refreshUser(connection, existing, identity: identity, name: plan.name, at: plan.now)
                }
                kind = .existing
            } else if let target {
                try Self.insertIdentity(connection, identity, userID: target.id, at: plan.now)
                if target.isGuest {
                    try connection.query(
                        """
                        UPDATE users SET is_guest = false, upgraded_at = \(plan.now),
                            name = COALESCE(users.name, \(plan.name)),
                            email_verified = CASE WHEN users.email IS NULL THEN \(identity.email != nil && identity.emailVerified)
                                                  ELSE users.email_verified END,
                            is_private_email = CASE WHEN users.email IS NULL THEN \(identity.isPrivateEmail)
                                                    ELSE users.is_private_email END,
                            email = COALESCE(users.email, \(identity.email)),
                            updated_at = \(plan.now)
                        WHERE id = \(target.id)
                        """)
                    kind = .upgraded
                } else {
                    try Self.refreshUser(connection, target.id, identity: identity, name: plan.name, at: plan.now)
                    kind = .linked
                }
            } else {
                _ = try Self.insertUser(connection, plan.newUser, handles: plan.handleCandidates)
                try Self.insertIdentity(connection, identity, userID: userID, at: plan.now)
                kind = .created
            }
            if let key = plan.resetThrottleKey {
                try connection.query("DELETE FROM login_throttle WHERE account_key = \(key)")
            }
            let user = try Self.loadUser(connection, id: userID)
            let (session, token) = try Self.finalSession(plan, userID: userID)
            try Self.insertSession(connection, session, userID: userID)
            let events = try plan.events(user, kind)
            try Self.insertOutbox(connection, events)
            try Self.keepResult(
                connection, plan.keep, requestID: plan.requestID, user: user, details: .signIn(kind, accessToken: token)
            )
            return .signedIn(user, kind: kind, events: events, accessToken: token)
        }
    }

    public func refresh(_ plan: RefreshPlan) async throws -> RefreshWrite {
        try await pool.withTransaction { connection in
            guard
                let row = try connection.query(
                    """
                    SELECT r.id, r.expires_at, r.used_at, r.successor_sealed, s.id AS session_id, s.user_id,
                           s.expires_at AS session_expires_at, s.revoked_at, s.abilities, s.device_name, u.is_guest
                    FROM refresh_tokens r JOIN sessions s ON s.id = r.session_id JOIN users u ON u.id = s.user_id
                    WHERE r.token_hash = \(PGBytes(plan.tokenHash))
                    FOR UPDATE OF r, s
                    """
                ).first
            else { return .invalid }
            let context = RefreshContext(
                userID: try row.decode("user_id"), sessionID: try row.decode("session_id"),
                isGuest: try row.decode("is_guest"), abilities: try row.decode("abilities"),
                deviceName: try row.decode("device_name", as: String?.self),
                sessionExpiresAt: try row.decode("session_expires_at"))
            let tokenID: UUID = try row.decode("id")
            guard try row.decode("revoked_at", as: Date?.self) == nil else { return .invalid }
            if let usedAt = try row.decode("used_at", as: Date?.self) {
                if plan.now.timeIntervalSince(usedAt) <= plan.grace,
                    let sealed = try row.decode("successor_sealed", as: PGBytes?.self)
                {
                    guard
                        try Self.recordRequest(
                            connection, id: plan.requestID, method: "refresh", userID: context.userID,
                            sessionID: context.sessionID, at: plan.now, expiresAt: plan.idempotencyExpiresAt)
                    else { return .duplicate }
                    return .replayed(try Self.loadUser(connection, id: context.userID), sealed: sealed.bytes)
                }
                // Reuse after the grace interval: the token leaked, or a client misbehaves. End the family.
                try connection.query(
                    """
                    UPDATE sessions SET revoked_at = \(plan.now), revoked_reason = 'refresh_reuse'
                    WHERE id = \(context.sessionID)
                    """)
                let events = try plan.reuseEvents(context)
                try Self.insertOutbox(connection, events)
                return .reused(events: events)
            }
            let expiresAt: Date = try row.decode("expires_at")
            guard expiresAt > plan.now, context.sessionExpiresAt > plan.now else { return .invalid }
            guard
                try Self.recordRequest(
                    connection, id: plan.requestID, method: "refresh", userID: context.userID,
                    sessionID: context.sessionID, at: plan.now, expiresAt: plan.idempotencyExpiresAt)
            else { return .duplicate }
            let issued = try plan.issue(context)
            try connection.query(
                """
                UPDATE refresh_tokens SET used_at = \(plan.now), replaced_by = \(issued.refreshTokenID),
                    successor_sealed = \(PGBytes(issued.sealedForReplay))
                WHERE id = \(tokenID)
                """)
            try connection.query(
                """
                INSERT INTO refresh_tokens (id, session_id, token_hash, parent_id, created_at, expires_at)
                VALUES (\(issued.refreshTokenID), \(context.sessionID), \(PGBytes(issued.refreshTokenHash)), \(tokenID),
                        \(plan.now), \(issued.refreshTokenExpiresAt))
                """)
            try connection.query(
                """
                INSERT INTO access_tokens (id, session_id, token_hash, name, abilities, created_at, expires_at)
                VALUES (\(issued.accessTokenID), \(context.sessionID), \(PGBytes(issued.accessTokenHash)),
                        \(context.deviceName), \(context.abilities), \(plan.now), \(issued.accessTokenExpiresAt))
                """)
            let user = try Self.loadUser(connection, id: context.userID)
            try Self.keepResult(connection, plan.keep, requestID: plan.requestID, user: user, details: .refresh(issued))
            return .rotated(user, issued)
        }
    }

    public func logout(_ plan: LogoutPlan) async throws -> LogoutWrite {
        try await pool.withTransaction { connection in
            guard
                let userID = try connection.query("SELECT user_id FROM sessions WHERE id = \(plan.sessionID)").first?
                    .decode("user_id", as: UUID.self)
            else { return .unknownSession }
            guard
                try Self.recordRequest(
                    connection, id: plan.requestID, method: "logout", userID: userID, sessionID: plan.sessionID,
                    at: plan.now, expiresAt: plan.idempotencyExpiresAt)
            else { return .duplicate }
            let reason = plan.allSessions ? "logout_all" : "logout"
            let query: PGQuery =
                plan.allSessions
                ? """
                UPDATE sessions SET revoked_at = \(plan.now), revoked_reason = \(reason)
                WHERE user_id = \(userID) AND revoked_at IS NULL AND expires_at > \(plan.now) RETURNING id
                """
                : """
                UPDATE sessions SET revoked_at = \(plan.now), revoked_reason = \(reason)
                WHERE id = \(plan.sessionID) AND revoked_at IS NULL AND expires_at > \(plan.now) RETURNING id
                """
            let revoked = try connection.query(query).map { try $0.decode("id", as: UUID.self) }
            let events = try plan.events(userID, revoked)
            try Self.insertOutbox(connection, events)
            let user = try Self.loadUser(connection, id: userID)
            try Self.keepResult(
                connection, plan.keep, requestID: plan.requestID, user: user, details: .logout(revoked: revoked))
            return .loggedOut(user, revoked: revoked, events: events)
        }
    }

    public func storedResult(requestID: String) async throws -> [UInt8]? {
        try await pool.withConnection { connection in
            try connection.query("SELECT result_sealed FROM processed_requests WHERE request_id = \(requestID)").first?
                .decode("result_sealed", as: PGBytes?.self)?.bytes
        }
    }

    public func purgeExpiredRequests(before date: Date) async throws -> Int {
        try await pool.withConnection { connection in
            try connection.query("DELETE FROM processed_requests WHERE expires_at < \(date)").affectedRows
        }
    }

    public func passwordCredential(email: String) async throws -> PasswordCredential? {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT user_id, password_hash FROM identities
                WHERE provider = 'password' AND subject = \(email) AND password_hash IS NOT NULL
                """
            ).first.map {
                PasswordCredential(userID: try $0.decode("user_id"), passwordHash: try $0.decode("password_hash"))
            }
        }
    }

    public func throttle(key: String) async throws -> ThrottleState? {
        try await pool.withConnection { connection in
            try connection.query("SELECT failures, locked_until FROM login_throttle WHERE account_key = \(key)").first
                .map {
                    ThrottleState(
                        failures: try $0.decode("failures"), lockedUntil: try $0.decode("locked_until", as: Date?.self))
                }
        }
    }

    public func recordFailedAttempt(key: String, at date: Date, policy: ThrottlePolicy) async throws -> ThrottleState {
        try await pool.withTransaction { connection in
            // One atomic upsert: concurrent failures on several replicas all count.
            let failures =
                try connection.query(
                    """
                    INSERT INTO login_throttle (account_key, failures, last_failure_at)
                    VALUES (\(key), 1, \(date))
                    ON CONFLICT (account_key) DO UPDATE SET
                        failures = CASE WHEN login_throttle.last_failure_at < \(date - policy.window) THEN 1
                                        ELSE login_throttle.failures + 1 END,
                        last_failure_at = \(date)
                    RETURNING failures
                    """
                ).first?.decode("failures", as: Int.self) ?? 1
            let lockedUntil = policy.lock(afterFailures: failures).map { date + $0 }
            try connection.query("UPDATE login_throttle SET locked_until = \(lockedUntil) WHERE account_key = \(key)")
            return ThrottleState(failures: failures, lockedUntil: lockedUntil)
        }
    }

    public func countRateLimited(bucket: String, at date: Date, window: TimeInterval) async throws -> Int {
        try await pool.withConnection { connection in
            try connection.query(
                """
                INSERT INTO rate_limits (bucket, window_start, count) VALUES (\(bucket), \(date), 1)
                ON CONFLICT (bucket) DO UPDATE SET
                    count = CASE WHEN rate_limits.window_start <= \(date - window) THEN 1 ELSE rate_limits.count + 1 END,
                    window_start = CASE WHEN rate_limits.window_start <= \(date - window) THEN \(date)
                                        ELSE rate_limits.window_start END
                RETURNING count
                """
            ).first?.decode("count", as: Int.self) ?? 1
        }
    }

    public func accessToken(hash: [UInt8]) async throws -> AccessTokenRecord? {
        // Presenting the token is a use: record it, as Sanctum's last_used_at does.
        try await pool.withConnection { connection in
            try connection.query(
                """
                WITH used AS (
                    UPDATE access_tokens SET last_used_at = now() WHERE token_hash = \(PGBytes(hash))
                    RETURNING session_id, expires_at
                )
                SELECT s.user_id, s.id AS session_id, LEAST(used.expires_at, s.expires_at) AS expires_at,
                       s.revoked_at IS NOT NULL AS revoked, u.is_guest
                FROM used JOIN sessions s ON s.id = used.session_id JOIN users u ON u.id = s.user_id
                """
            ).first.map(Self.accessTokenRecord)
        }
    }

    public func session(id: UUID) async throws -> AccessTokenRecord? {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT s.user_id, s.id AS session_id, s.expires_at, s.revoked_at IS NOT NULL AS revoked, u.is_guest
                FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.id = \(id)
                """
            ).first.map(Self.accessTokenRecord)
        }
    }

    static func accessTokenRecord(_ row: PGRow) throws -> AccessTokenRecord {
        AccessTokenRecord(
            userID: try row.decode("user_id"), sessionID: try row.decode("session_id"),
            expiresAt: try row.decode("expires_at"), sessionRevoked: try row.decode("revoked"),
            isGuest: try row.decode("is_guest"))
    }

    /// Updates what the identity proves now; a missing e-mail never erases the stored one.
    static func refreshIdentity(_ connection: PGConnection, _ identity: NewIdentity, plan: SignInPlan) throws {
        try connection.query(
            """
            UPDATE identities SET
                email = COALESCE(\(identity.email), email),
                email_verified = CASE WHEN \(identity.email)::text IS NULL THEN email_verified
                                      ELSE \(identity.emailVerified) END,
                is_private_email = CASE WHEN \(identity.email)::text IS NULL THEN is_private_email
                                        ELSE \(identity.isPrivateEmail) END,
                password_hash = COALESCE(\(plan.replacementPasswordHash), password_hash),
                last_login_at = \(plan.now)
            WHERE provider = \(identity.provider) AND subject = \(identity.subject)
            """)
    }

    /// Fills in what the user lacks: a name or an e-mail is never overwritten, nor erased.
    static func refreshUser(_ connection: PGConnection, _ id: UUID, identity: NewIdentity, name: String?, at date: Date)
        throws
    {
        try connection.query(
            """
            UPDATE users SET
                name = COALESCE(users.name, \(name)),
                email_verified = CASE
                    WHEN users.email IS NULL THEN \(identity.email != nil && identity.emailVerified)
                    WHEN lower(users.email) = lower(\(identity.email)) THEN users.email_verified OR \(identity.emailVerified)
                    ELSE users.email_verified END,
                is_private_email = CASE WHEN users.email IS NULL THEN \(identity.isPrivateEmail)
                                        ELSE users.is_private_email END,
                email = COALESCE(users.email, \(identity.email)),
                updated_at = \(date)
            WHERE id = \(id)
            """)
    }

    public func markPublished(_ eventIDs: [UUID], at date: Date) async throws {
        guard !eventIDs.isEmpty else { return }
        let ids = eventIDs.map(\.pgText)
        try await pool.withConnection { connection in
            try connection.query(
                "UPDATE outbox SET published_at = \(date) WHERE event_id = ANY(\(ids)::uuid[]) AND published_at IS NULL"
            )
        }
    }

    public func unpublishedEvents(olderThan date: Date, limit: Int) async throws -> [OutboxEvent] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT event_id, topic, message_key, payload, created_at FROM outbox
                WHERE published_at IS NULL AND created_at < \(date)
                ORDER BY seq LIMIT \(limit)
                """
            ).map { row in
                OutboxEvent(
                    id: try row.decode("event_id"), topic: try row.decode("topic"), key: try row.decode("message_key"),
                    payload: try row.decode("payload", as: PGBytes.self).bytes, createdAt: try row.decode("created_at"))
            }
        }
    }

    // MARK: - Statements shared by the writes

    /// Stores the sealed answer with the request id, in the caller's transaction.
    static func keepResult(
        _ connection: PGConnection, _ keep: ResultKeeper?, requestID: String, user: StoredUser, details: KeepDetails
    ) throws {
        guard let keep, let sealed = try keep(user, details) else { return }
        try connection.query(
            "UPDATE processed_requests SET result_sealed = \(PGBytes(sealed)) WHERE request_id = \(requestID)")
    }

    /// The plan's session with the hash of the access token made for `userID`.
    static func finalSession(_ plan: SignInPlan, userID: UUID) throws -> (NewSession, String) {
        let token = try plan.issueAccessToken(userID)
        var session = plan.session
        session.accessTokenHash = SHA256.hash(token)
        return (session, token)
    }

    /// Records the request id; false when it was already there.
    static func recordRequest(
        _ connection: PGConnection, id: String, method: String, userID: UUID?, sessionID: UUID?, at date: Date,
        expiresAt: Date
    ) throws -> Bool {
        try connection.query(
            """
            INSERT INTO processed_requests (request_id, method, status, user_id, session_id, processed_at, expires_at)
            VALUES (\(id), \(method), 'ok', \(userID), \(sessionID), \(date), \(expiresAt))
            ON CONFLICT (request_id) DO NOTHING
            """
        ).affectedRows == 1
    }

    /// Inserts the user with the first free handle.
    static func insertUser(_ connection: PGConnection, _ user: NewUser, handles: [String]) throws -> StoredUser {
        for candidate in handles {
            let inserted = try connection.query(
                """
                INSERT INTO users (id, handle, name, email, email_verified, is_private_email, is_guest,
                                   created_at, updated_at)
                VALUES (\(user.id), \(candidate), \(user.name), \(user.email), \(user.emailVerified),
                        \(user.isPrivateEmail), \(user.isGuest), \(user.createdAt), \(user.createdAt))
                ON CONFLICT (handle) DO NOTHING
                """)
            if inserted.affectedRows == 1 {
                return StoredUser(
                    id: user.id, handle: candidate, name: user.name, email: user.email,
                    emailVerified: user.emailVerified, isPrivateEmail: user.isPrivateEmail, isGuest: user.isGuest,
                    providers: [], createdAt: user.createdAt)
            }
        }
        throw PGError(.query, serverMessage: "every handle candidate is taken", step: "INSERT users")
    }

    static func insertIdentity(_ connection: PGConnection, _ identity: NewIdentity, userID: UUID, at date: Date) throws
    {
        try connection.query(
            """
            INSERT INTO identities (provider, subject, user_id, email, email_verified, is_private_email,
                                    password_hash, created_at, last_login_at)
            VALUES (\(identity.provider), \(identity.subject), \(userID), \(identity.email),
                    \(identity.emailVerified), \(identity.isPrivateEmail), \(identity.passwordHash), \(date), \(date))
            """)
    }

    /// Inserts a session with its first access and refresh tokens (hashes only).
    static func insertSession(_ connection: PGConnection, _ session: NewSession, userID: UUID) throws {
        try connection.query(
            """
            INSERT INTO sessions (id, user_id, provider, device_name, device_platform, abilities, created_at, expires_at)
            VALUES (\(session.id), \(userID), \(session.provider), \(session.deviceName), \(session.devicePlatform),
                    \(session.abilities), \(session.createdAt), \(session.expiresAt))
            """)
        try connection.query(
            """
            INSERT INTO access_tokens (id, session_id, token_hash, name, abilities, created_at, expires_at)
            VALUES (\(session.accessTokenID), \(session.id), \(PGBytes(session.accessTokenHash)), \(session.deviceName),
                    \(session.abilities), \(session.createdAt), \(session.accessTokenExpiresAt))
            """)
        try connection.query(
            """
            INSERT INTO refresh_tokens (id, session_id, token_hash, created_at, expires_at)
            VALUES (\(session.refreshTokenID), \(session.id), \(PGBytes(session.refreshTokenHash)),
                    \(session.createdAt), \(session.refreshTokenExpiresAt))
            """)
    }

    static func insertOutbox(_ connection: PGConnection, _ events: [OutboxEvent]) throws {
        for event in events {
            try connection.query(
                """
                INSERT INTO outbox (event_id, topic, message_key, payload, created_at)
                VALUES (\(event.id), \(event.topic), \(event.key), \(PGBytes(event.payload)), \(event.createdAt))
                """)
        }
    }

    static func loadUser(_ connection: PGConnection, id: UUID) throws -> StoredUser {
        let query: PGQuery = """
            SELECT users.*, ARRAY(SELECT provider FROM identities WHERE user_id = users.id
                                  ORDER BY created_at, provider) AS providers
            FROM users WHERE id = \(id)
            """
        guard let row = try connection.query(query).first else {
            throw PGError(.query, serverMessage: "user \(id) vanished", step: "SELECT users")
        }
        let providers = try row.decode("providers", as: [String].self)
        return StoredUser(
            id: id, handle: try row.decode("handle"), name: try row.decode("name", as: String?.self),
            email: try row.decode("email", as: String?.self), emailVerified: try row.decode("email_verified"),
            isPrivateEmail: try row.decode("is_private_email"), isGuest: try row.decode("is_guest"),
            providers: providers, createdAt: try row.decode("created_at"))
    }
}
