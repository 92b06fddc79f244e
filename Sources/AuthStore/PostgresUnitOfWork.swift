import AuthDomain
import Foundation
import PGStore

/// `UnitOfWork` over one PostgreSQL connection, inside one transaction.
///
/// Reads are served from rows fetched (and locked) for the whole batch in one round trip, or
/// else queried when asked. Writes are collected per request: a request that ends well adds its
/// writes to the batch's, a refused one drops them. The batch's writes go to the server as a few
/// multi-row statements in one pipelined round trip: when a read needs the server to see them,
/// and with the `COMMIT`.
///
/// A row a request writes leaves the cache, so a later request of the batch reads it from the
/// server, after the writes before it.
final class PostgresUnitOfWork: UnitOfWork {
    private let connection: PGConnection
    /// Off in the careful retry of a batch: every read then goes to the server.
    var usesCache: Bool
    private var cache = Cache()
    /// Writes of the requests that ended well, not yet sent.
    private var batch = Writes()
    /// Writes of the request in progress.
    private var current = Writes()
    /// Handles given to users inserted by this batch.
    private var handlesInUse: Set<String> = []
    /// Rate-limit uses counted by the batch's finished requests, by bucket.
    private var rateLimitUses: [String: Int] = [:]
    /// The events the request in progress wrote to the outbox.
    var currentEvents: [OutboxEvent] { current.events }

    init(connection: PGConnection, usesCache: Bool = true) {
        self.connection = connection
        self.usesCache = usesCache
    }

    // MARK: - Requests

    /// Starts collecting one request's writes.
    func beginRequest() {
        current = Writes()
        lastEndedHandles = []
    }

    /// Keeps the request's writes for the batch.
    func endRequest() {
        for (bucket, count) in current.rateLimitCounts { rateLimitUses[bucket, default: 0] += count }
        lastEndedHandles = current.users.map(\.handle)
        batch.append(current)
        current = Writes()
    }

    /// Drops the request's writes: a refused request leaves nothing behind, not even a handle
    /// kept from the others.
    func discardRequest() {
        for row in current.users { handlesInUse.remove(row.handle) }
        current = Writes()
    }

    /// After the server refused the request in progress (rolled back to its savepoint), whether
    /// it failed in its body or in the flush after `endRequest`: its handles are free again for
    /// the retry.
    func rollBackLastRequest() {
        for handle in lastEndedHandles + current.users.map(\.handle) { handlesInUse.remove(handle) }
        lastEndedHandles = []
        current = Writes()
    }

    /// The handles of the last request kept for the batch.
    private var lastEndedHandles: [String] = []

    // MARK: - Round trips

    /// Sends `BEGIN`, `first`, the prefetch queries and `head` (bookkeeping before the bodies) in
    /// one round trip (`FirstRoundTrip`), and fills the cache.
    ///
    /// `first` comes first; then the reads, each finding its rows by key, and `head`, from cached
    /// plans (`KeyedPlans`); the rest of the transaction is planned per run again. The reads lock
    /// in one order (identities, tokens, sessions, users: `PrefetchQueries`); `head` touches only
    /// the outbox and reads kept requests, which no read locks; `first` (a lookup's guest
    /// ceiling) locks one row no batch's body touches.
    /// - Returns: the answers to `first` and to `head`, in order.
    @discardableResult
    func begin(first: [PGQuery] = [], head: [PGQuery], prefetch: Prefetch) throws -> [PGRows] {
        let reads = PrefetchQueries(prefetch)
        let trip = FirstRoundTrip(first: first, head: head, reads: reads)
        let results = try connection.pipeline(trip.statements)
        guard results.count == trip.statements.count else {
            throw PGError(.decoding, detail: "the transaction's first answers are missing")
        }
        let answers = trip.answers.flatMap { results[$0] }
        guard usesCache else { return answers }
        try reads.fill(&cache, from: Array(results[trip.reads]))
        return answers
    }

    /// The statements of a transaction's first round trip, and where the answers are among them.
    struct FirstRoundTrip {
        private(set) var statements: [PGQuery] = ["BEGIN"]
        /// Where the answers to `first` and to `head` are.
        private(set) var answers: [Range<Int>] = []
        /// Where the prefetch's answers are, in the order of its queries.
        private(set) var reads: Range<Int> = 0..<0

        init(first: [PGQuery], head: [PGQuery], reads prefetch: PrefetchQueries) {
            let firstAt = append(first)
            let cached = !prefetch.queries.isEmpty || !head.isEmpty
            if cached { statements.append(KeyedPlans.cachedKeyedPlans) }
            reads = append(prefetch.queries)
            let headAt = append(head)
            if cached { statements += KeyedPlans.plannedPerRun }
            answers = [firstAt, headAt]
        }

        private mutating func append(_ more: [PGQuery]) -> Range<Int> {
            let start = statements.count
            statements += more
            return start..<statements.count
        }
    }

    /// Sends the batch's writes so far, in one round trip.
    func flush() throws {
        let statements = batch.queries()
        let windows = batch.rateLimitWindows
        batch = Writes()
        // The counted uses are on the server now: the cached buckets hold them, as the upsert did.
        for (bucket, uses) in rateLimitUses {
            guard let (at, window) = windows[bucket] else { continue }
            if case .some(.some(let row)) = cache.rateLimits[bucket], row.windowStart > at - window {
                cache.rateLimits[bucket] = RateLimitRow(windowStart: row.windowStart, count: row.count + uses)
            } else if cache.rateLimits[bucket] != nil {
                cache.rateLimits[bucket] = RateLimitRow(windowStart: at, count: uses)
            }
        }
        rateLimitUses = [:]
        guard !statements.isEmpty else { return }
        try connection.pipeline(statements)
    }

    /// Sends the remaining writes and `COMMIT` in one round trip.
    ///
    /// The multi-row inserts may use PostgreSQL's plan cache (`plan_cache_mode = auto`, in this
    /// last round trip only: `SET LOCAL` ends with the transaction): an insert's plan does not
    /// turn on its values, and planning each of them on every run cost PostgreSQL a fifth of its
    /// CPU at 300 logins/s. Everything that finds rows (the reads, and the updates and deletes
    /// among the writes) keeps a plan per run (see `PGConnection`): a generic plan chosen while a
    /// table was small could stay a sequential scan as it grows.
    func commit() throws {
        let statements = batch.queries(cachingInsertPlans: true) + ["COMMIT"]
        batch = Writes()
        try connection.pipeline(statements)
    }

    /// Flushes before a read the cache cannot answer, so the server sees the batch's writes.
    private func query(_ query: PGQuery) throws -> PGRows {
        try flush()
        return try connection.query(query)
    }

    // MARK: - Reads

    func identity(provider: String, subject: String) throws -> IdentityRecord? {
        let key = IdentityKey(provider: provider, subject: subject)
        if usesCache, let cached = cache.identities[key] { return cached }
        let found = try query(
            """
            SELECT provider, subject, user_id, email, email_verified, is_private_email, password_hash
            FROM identities WHERE provider = \(provider) AND subject = \(subject) FOR UPDATE
            """
        ).first.map(Decode.identity)
        cache.identities[key] = .some(found)
        return found
    }

    func identities(userID: UUID) throws -> [IdentityRecord] {
        let found = try query(
            """
            SELECT provider, subject, user_id, email, email_verified, is_private_email, password_hash
            FROM identities WHERE user_id = \(userID) ORDER BY provider, subject FOR UPDATE
            """
        ).map(Decode.identity)
        for identity in found {
            cache.identities[IdentityKey(provider: identity.provider, subject: identity.subject)] = .some(identity)
        }
        return found
    }

    func user(id: UUID) throws -> StoredUser? {
        if usesCache, let cached = cache.users[id] { return cached }
        let found = try query(
            "\(unsafeRaw: PrefetchQueries.userColumns) WHERE u.id = \(id) FOR UPDATE OF u"
        ).first.map(Decode.user)
        cache.users[id] = .some(found)
        return found
    }

    func usersWithVerifiedEmail(_ email: String) throws -> [UUID] {
        try query(
            """
            SELECT id FROM users
            WHERE lower(email) = lower(\(email)) AND email_verified AND NOT is_private_email AND NOT is_guest
            ORDER BY id LIMIT 2 FOR UPDATE
            """
        ).map { try $0.decode("id", as: UUID.self) }
    }

    func refreshToken(hash: [UInt8]) throws -> RefreshTokenRecord? {
        if usesCache, let cached = cache.refreshTokens[hash] { return cached }
        let found = try query(
            "\(unsafeRaw: PrefetchQueries.refreshColumns) WHERE r.token_hash = \(PGBytes(hash)) FOR UPDATE OF r, s"
        ).first.map(Decode.refreshToken)
        cache.remember(refreshToken: found, hash: hash)
        return found
    }

    func session(id: UUID) throws -> SessionRecord? {
        if usesCache, let cached = cache.sessions[id] { return cached }
        let found = try query(
            "\(unsafeRaw: PrefetchQueries.sessionColumns) WHERE s.id = \(id) FOR UPDATE OF s"
        ).first.map { try Decode.session($0, idColumn: "id") }
        cache.sessions[id] = .some(found)
        return found
    }

    func accessToken(hash: [UInt8]) throws -> AccessTokenRecord? {
        if usesCache, let cached = cache.accessTokens[hash] { return cached }
        let found = try query(
            "\(unsafeRaw: PrefetchQueries.accessTokenColumns) WHERE a.token_hash = \(PGBytes(hash)) FOR UPDATE OF s"
        ).first.map(Decode.accessToken)
        cache.remember(accessToken: found, hash: hash)
        return found
    }

    func liveSessions(userID: UUID, at date: Date) throws -> [UUID] {
        try query(
            """
            SELECT id FROM sessions WHERE user_id = \(userID) AND revoked_at IS NULL AND expires_at > \(date)
            ORDER BY id FOR UPDATE
            """
        ).map { try $0.decode("id", as: UUID.self) }
    }

    func rateLimitWindow(bucket: String, at date: Date, window: TimeInterval) throws -> RateLimitWindow {
        let stored: RateLimitRow?
        if usesCache, let cached = cache.rateLimits[bucket] {
            stored = cached
        } else {
            stored = try query(
                "SELECT bucket, window_start, count FROM rate_limits WHERE bucket = \(bucket) FOR UPDATE"
            ).first.map(Decode.rateLimit)
            cache.rateLimits[bucket] = .some(stored)
        }
        // A window that has passed (or none yet) starts again with this request.
        guard let stored, stored.windowStart > date - window else {
            return RateLimitWindow(count: rateLimitUses[bucket, default: 0], endsAt: date + window)
        }
        return RateLimitWindow(
            count: stored.count + rateLimitUses[bucket, default: 0], endsAt: stored.windowStart + window)
    }

    func isRecorded(requestID: String) throws -> Bool {
        try !query("SELECT 1 AS found FROM processed_requests WHERE request_id = \(requestID)").isEmpty
    }

    func liveCode(email: String, purpose: String) throws -> OneTimeCodeRecord? {
        try query(
            """
            \(unsafeRaw: Self.codeColumns)
            WHERE email = \(email) AND purpose = \(purpose) AND used_at IS NULL
            ORDER BY created_at DESC, id DESC LIMIT 1 FOR UPDATE
            """
        ).first.map(Decode.code)
    }

    func code(linkHash: [UInt8]) throws -> OneTimeCodeRecord? {
        try query("\(unsafeRaw: Self.codeColumns) WHERE link_hash = \(PGBytes(linkHash)) FOR UPDATE").first.map(
            Decode.code)
    }

    func mfaFactor(userID: UUID) throws -> MFAFactorRecord? {
        if usesCache, cache.activeFactors[userID] == false { return nil }
        return try query(
            """
            SELECT user_id, secret_sealed, created_at, enabled_at, last_used_step FROM mfa_factors
            WHERE user_id = \(userID) FOR UPDATE
            """
        ).first.map { row in
            MFAFactorRecord(
                userID: try row.decode("user_id"),
                secretSealed: try row.decode("secret_sealed", as: PGBytes.self).bytes,
                createdAt: try row.decode("created_at"),
                enabledAt: try row.decode("enabled_at", as: Date?.self),
                lastUsedStep: try row.decode("last_used_step", as: Int64?.self))
        }
    }

    func hasUnusedRecoveryCode(userID: UUID, hash: [UInt8]) throws -> Bool {
        try !query(
            """
            SELECT 1 AS found FROM mfa_recovery_codes
            WHERE user_id = \(userID) AND code_hash = \(PGBytes(hash)) AND used_at IS NULL FOR UPDATE
            """
        ).isEmpty
    }

    func sessionDetails(userID: UUID, live: Bool, at date: Date) throws -> [SessionDetails] {
        try query(
            """
            SELECT s.id, s.provider, s.device_name, s.device_platform, s.created_at, s.expires_at, s.revoked_at,
                   s.revoked_reason,
                   COALESCE((SELECT max(r.created_at) FROM refresh_tokens r WHERE r.session_id = s.id),
                            s.last_used_at, s.created_at) AS last_used_at
            FROM sessions s
            WHERE s.user_id = \(userID) AND (NOT \(live) OR (s.revoked_at IS NULL AND s.expires_at > \(date)))
            ORDER BY s.created_at DESC, s.id
            """
        ).map { row in
            SessionDetails(
                id: try row.decode("id"), provider: try row.decode("provider"),
                deviceName: try row.decode("device_name", as: String?.self),
                devicePlatform: try row.decode("device_platform", as: String?.self),
                createdAt: try row.decode("created_at"), lastUsedAt: try row.decode("last_used_at"),
                expiresAt: try row.decode("expires_at"), revokedAt: try row.decode("revoked_at", as: Date?.self),
                revokedReason: try row.decode("revoked_reason", as: String?.self))
        }
    }

    func accountRecords(userID: UUID) throws -> AccountRecords {
        let identities = try query(
            """
            SELECT provider, subject, user_id, email, email_verified, is_private_email, password_hash, created_at,
                   last_login_at
            FROM identities WHERE user_id = \(userID) ORDER BY created_at, provider, subject
            """
        ).map { row in
            AccountRecords.Identity(
                record: try Decode.identity(row), createdAt: try row.decode("created_at"),
                lastLoginAt: try row.decode("last_login_at", as: Date?.self))
        }
        let unused =
            try query(
                "SELECT count(*) AS n FROM mfa_recovery_codes WHERE user_id = \(userID) AND used_at IS NULL"
            ).first?.decode("n", as: Int.self) ?? 0
        let codes = try query(
            """
            SELECT purpose, email, created_at, expires_at, used_at FROM one_time_codes
            WHERE user_id = \(userID) ORDER BY created_at, id
            """
        ).map { row in
            AccountRecords.Code(
                purpose: try row.decode("purpose"), email: try row.decode("email"),
                createdAt: try row.decode("created_at"), expiresAt: try row.decode("expires_at"),
                usedAt: try row.decode("used_at", as: Date?.self))
        }
        let requests = try query(
            """
            SELECT method, status, processed_at FROM processed_requests
            WHERE user_id = \(userID) ORDER BY processed_at, request_id
            """
        ).map { row in
            AccountRecords.Request(
                method: try row.decode("method"), status: try row.decode("status"),
                processedAt: try row.decode("processed_at"))
        }
        let audit = try query("\(unsafeRaw: Self.auditColumns) WHERE user_id = \(userID) ORDER BY at, id").map(
            Decode.audit)
        var records = AccountRecords(
            identities: identities, factor: try mfaFactor(userID: userID), unusedRecoveryCodes: unused, codes: codes,
            requests: requests, audit: audit)
        records.passkeyChallenges = try query(
            """
            SELECT purpose, created_at, expires_at FROM webauthn_challenges
            WHERE user_id = \(userID) ORDER BY created_at, challenge_hash
            """
        ).map { row in
            (try row.decode("purpose"), try row.decode("created_at"), try row.decode("expires_at"))
        }
        records.consoleRole = try query("SELECT role FROM admin_roles WHERE user_id = \(userID)").first?.decode("role")
        records.consoleSessions = try query(
            """
            SELECT client, created_at, last_seen_at FROM console_sessions
            WHERE user_id = \(userID) ORDER BY created_at, id_hash
            """
        ).map { row in
            (try row.decode("client"), try row.decode("created_at"), try row.decode("last_seen_at"))
        }
        records.disabledAt = try query("SELECT disabled_at FROM users WHERE id = \(userID)").first?.decode(
            "disabled_at", as: Date?.self)
        return records
    }

    func appleToken(subject: String) throws -> AppleTokenRecord? {
        try query(
            "SELECT subject, client_id, refresh_token_sealed FROM apple_tokens WHERE subject = \(subject) FOR UPDATE"
        )
        .first.map { row in
            AppleTokenRecord(
                subject: try row.decode("subject"), clientID: try row.decode("client_id"),
                refreshTokenSealed: try row.decode("refresh_token_sealed", as: PGBytes.self).bytes)
        }
    }

    static let auditColumns = """
        SELECT at, user_id, action, outcome, request_id, client_id, device_name, device_platform, ip, user_agent, actor
        FROM audit_log
        """

    static let codeColumns =
        "SELECT id, user_id, purpose, email, code_hmac, attempts, expires_at, used_at FROM one_time_codes"

    // MARK: - Writes

    func insertUser(_ user: NewUser, handles: [String]) throws -> StoredUser {
        // The first candidate was fetched with the batch and is nearly always free; the longer
        // ones are asked about only when it is not.
        var chosen: String?
        for (index, candidate) in handles.enumerated() where !handlesInUse.contains(candidate) {
            if cache.takenHandles[candidate] == nil {
                // No flush needed: the batch's own new handles are known without the server.
                let unknown = handles[index...].filter { cache.takenHandles[$0] == nil }
                let taken = Set(
                    try connection.query(
                        "SELECT handle FROM users WHERE handle = ANY(\(PGArray(Array(unknown))))"
                    ).map { try $0.decode("handle", as: String.self) })
                for handle in unknown { cache.takenHandles[handle] = taken.contains(handle) }
            }
            if cache.takenHandles[candidate] == false {
                chosen = candidate
                break
            }
        }
        guard let handle = chosen else { throw StoreError.handlesExhausted }
        handlesInUse.insert(handle)
        current.users.append(NewUserRow(user: user, handle: handle))
        cache.users[user.id] = nil
        return StoredUser(
            id: user.id, handle: handle, name: user.name, email: user.email, emailVerified: user.emailVerified,
            isPrivateEmail: user.isPrivateEmail, isGuest: user.isGuest, providers: [], createdAt: user.createdAt)
    }

    func insertIdentity(_ identity: NewIdentity, userID: UUID, at date: Date) throws {
        current.identities.append(NewIdentityRow(identity: identity, userID: userID, at: date))
        cache.identities[IdentityKey(provider: identity.provider, subject: identity.subject)] = nil
        cache.users[userID] = nil
    }

    func deleteIdentity(provider: String, subject: String) throws {
        current.statements.append("DELETE FROM identities WHERE provider = \(provider) AND subject = \(subject)")
        cache.identities[IdentityKey(provider: provider, subject: subject)] = .some(nil)
    }

    func updateIdentity(_ identity: IdentityRecord, lastLoginAt: Date) throws {
        current.statements.append(
            """
            UPDATE identities SET email = \(identity.email), email_verified = \(identity.emailVerified),
                is_private_email = \(identity.isPrivateEmail), password_hash = \(identity.passwordHash),
                last_login_at = \(lastLoginAt)
            WHERE provider = \(identity.provider) AND subject = \(identity.subject)
            """)
        cache.identities[IdentityKey(provider: identity.provider, subject: identity.subject)] = nil
    }

    func updateUser(_ user: StoredUser, upgradedAt: Date?, at date: Date) throws {
        current.statements.append(
            """
            UPDATE users SET name = \(user.name), email = \(user.email), email_verified = \(user.emailVerified),
                is_private_email = \(user.isPrivateEmail), is_guest = \(user.isGuest),
                upgraded_at = COALESCE(\(upgradedAt), upgraded_at), updated_at = \(date)
            WHERE id = \(user.id)
            """)
        cache.users[user.id] = nil
    }

    func insertSession(_ session: NewSession, userID: UUID) throws {
        current.sessions.append(NewSessionRow(session: session, userID: userID))
        if let hash = session.accessTokenHash {
            current.accessTokens.append(
                NewAccessTokenRow(
                    id: session.accessTokenID, sessionID: session.id, hash: hash, name: session.deviceName,
                    abilities: session.abilities, createdAt: session.createdAt,
                    expiresAt: session.accessTokenExpiresAt))
        }
        current.refreshTokens.append(
            NewRefreshTokenRow(
                id: session.refreshTokenID, sessionID: session.id, hash: session.refreshTokenHash, parentID: nil,
                createdAt: session.createdAt, expiresAt: session.refreshTokenExpiresAt))
        cache.sessions[session.id] = nil
    }

    func rotate(_ rotation: TokenRotation) throws {
        current.rotations.append(
            RotationRow(
                usedTokenID: rotation.usedTokenID, at: rotation.at, successorID: rotation.successorID,
                successorSealed: rotation.successorSealed))
        current.refreshTokens.append(
            NewRefreshTokenRow(
                id: rotation.successorID, sessionID: rotation.sessionID, hash: rotation.successorHash,
                parentID: rotation.usedTokenID, createdAt: rotation.at, expiresAt: rotation.successorExpiresAt))
        if let hash = rotation.accessTokenHash {
            current.accessTokens.append(
                NewAccessTokenRow(
                    id: rotation.accessTokenID, sessionID: rotation.sessionID, hash: hash,
                    name: rotation.deviceName, abilities: rotation.abilities, createdAt: rotation.at,
                    expiresAt: rotation.accessTokenExpiresAt))
        }
        cache.forgetSession(rotation.sessionID)
    }

    func recordAccessTokenUse(tokenID: UUID, at date: Date) throws {
        current.statements.append("UPDATE access_tokens SET last_used_at = \(date) WHERE id = \(tokenID)")
    }

    func revokeSessions(_ ids: [UUID], reason: String, at date: Date) throws {
        guard !ids.isEmpty else { return }
        current.statements.append(
            """
            UPDATE sessions SET revoked_at = \(date), revoked_reason = \(reason)
            WHERE id = ANY(\(PGArray(ids))) AND revoked_at IS NULL
            """)
        for id in ids { cache.forgetSession(id) }
    }

    func recordRateLimitedUse(bucket: String, at date: Date, window: TimeInterval) throws {
        current.rateLimitCounts[bucket, default: 0] += 1
        current.rateLimitWindows[bucket] = (date, window)
    }

    func resetThrottle(key: String) throws {
        current.statements.append("DELETE FROM login_throttle WHERE account_key = \(key)")
    }

    func deleteUsers(_ ids: [UUID]) throws {
        guard !ids.isEmpty else { return }
        current.statements.append("DELETE FROM users WHERE id = ANY(\(PGArray(ids)))")
        // Deleting cascades through identities, sessions and tokens: trust no cached row after it.
        cache = Cache(takenHandles: cache.takenHandles)
    }

    func setEmailStatus(provider: String, subject: String, status: String) throws {
        current.statements.append(
            "UPDATE identities SET email_status = \(status) WHERE provider = \(provider) AND subject = \(subject)")
    }

    func insertCode(_ code: NewOneTimeCode) throws {
        current.statements.append(
            """
            UPDATE one_time_codes SET used_at = \(code.createdAt)
            WHERE email = \(code.email) AND purpose = \(code.purpose) AND used_at IS NULL
            """)
        current.statements.append(
            """
            INSERT INTO one_time_codes (id, user_id, purpose, email, code_hmac, link_hash, created_at, expires_at)
            VALUES (\(code.id), \(code.userID), \(code.purpose), \(code.email), \(PGBytes(code.codeHMAC)),
                    \(PGBytes(code.linkHash)), \(code.createdAt), \(code.expiresAt))
            """)
    }

    func recordCodeAttempt(id: UUID) throws {
        current.statements.append("UPDATE one_time_codes SET attempts = attempts + 1 WHERE id = \(id)")
    }

    func useCode(id: UUID, at date: Date) throws {
        current.statements.append("UPDATE one_time_codes SET used_at = \(date) WHERE id = \(id) AND used_at IS NULL")
    }

    func voidCodes(userID: UUID, purposes: [String], at date: Date) throws {
        current.statements.append(
            """
            UPDATE one_time_codes SET used_at = \(date)
            WHERE user_id = \(userID) AND purpose = ANY(\(PGArray(purposes))) AND used_at IS NULL
            """)
    }

    func savePendingFactor(userID: UUID, secretSealed: [UInt8], at date: Date) throws {
        cache.activeFactors[userID] = nil
        current.statements.append(
            """
            INSERT INTO mfa_factors (user_id, secret_sealed, created_at) VALUES (\(userID), \(PGBytes(secretSealed)), \(date))
            ON CONFLICT (user_id) DO UPDATE SET secret_sealed = EXCLUDED.secret_sealed, created_at = EXCLUDED.created_at
            WHERE mfa_factors.enabled_at IS NULL
            """)
    }

    func enableFactor(userID: UUID, step: Int64, recoveryHashes: [[UInt8]], at date: Date) throws {
        cache.activeFactors[userID] = nil
        current.statements.append(
            "UPDATE mfa_factors SET enabled_at = \(date), last_used_step = \(step) WHERE user_id = \(userID)")
        current.statements.append("DELETE FROM mfa_recovery_codes WHERE user_id = \(userID)")
        for hash in recoveryHashes {
            current.statements.append(
                "INSERT INTO mfa_recovery_codes (user_id, code_hash) VALUES (\(userID), \(PGBytes(hash)))")
        }
    }

    func recordFactorStep(userID: UUID, step: Int64) throws {
        current.statements.append("UPDATE mfa_factors SET last_used_step = \(step) WHERE user_id = \(userID)")
    }

    func useRecoveryCode(userID: UUID, hash: [UInt8], at date: Date) throws {
        current.statements.append(
            """
            UPDATE mfa_recovery_codes SET used_at = \(date)
            WHERE user_id = \(userID) AND code_hash = \(PGBytes(hash)) AND used_at IS NULL
            """)
    }

    func deleteFactor(userID: UUID) throws {
        cache.activeFactors[userID] = nil
        current.statements.append("DELETE FROM mfa_factors WHERE user_id = \(userID)")
        current.statements.append("DELETE FROM mfa_recovery_codes WHERE user_id = \(userID)")
    }

    func appendEvent(_ event: OutboxEvent) throws {
        current.events.append(event)
    }

    func recordAudit(_ entry: AuditEntry) throws {
        current.audits.append(entry)
    }

    func enqueueAppleJob(_ job: AppleJob) throws {
        current.statements.append(
            """
            INSERT INTO apple_jobs (id, kind, subject, client_id, secret_sealed, attempts, next_attempt_at, created_at)
            VALUES (\(job.id), \(job.kind.rawValue), \(job.subject), \(job.clientID), \(PGBytes(job.secretSealed)),
                    \(job.attempts), \(job.createdAt), \(job.createdAt))
            """)
    }

    func deleteAppleToken(subject: String) throws {
        current.statements.append("DELETE FROM apple_tokens WHERE subject = \(subject)")
    }

    func recordRequest(_ record: RequestRecord) throws {
        current.requests.append(record)
    }

    // MARK: - Passkeys

    func passkeyHandle(userID: UUID) throws -> [UInt8]? {
        try query("SELECT handle FROM passkey_users WHERE user_id = \(userID) FOR UPDATE").first.map {
            try $0.decode("handle", as: PGBytes.self).bytes
        }
    }

    func userID(passkeyHandle handle: [UInt8]) throws -> UUID? {
        try query("SELECT user_id FROM passkey_users WHERE handle = \(PGBytes(handle))").first.map {
            try $0.decode("user_id")
        }
    }

    func insertPasskeyHandle(userID: UUID, handle: [UInt8]) throws {
        current.statements.append(
            "INSERT INTO passkey_users (user_id, handle) VALUES (\(userID), \(PGBytes(handle)))")
    }

    func passkeyChallenge(hash: [UInt8]) throws -> PasskeyChallengeRecord? {
        try query(
            """
            SELECT purpose, user_id, expires_at FROM webauthn_challenges
            WHERE challenge_hash = \(PGBytes(hash)) FOR UPDATE
            """
        ).first.flatMap { row in
            guard let purpose = PasskeyChallengeRecord.Purpose(rawValue: try row.decode("purpose")) else { return nil }
            return PasskeyChallengeRecord(
                hash: hash, purpose: purpose, userID: try row.decode("user_id", as: UUID?.self),
                expiresAt: try row.decode("expires_at"))
        }
    }

    func insertPasskeyChallenge(_ challenge: PasskeyChallengeRecord, at date: Date) throws {
        current.statements.append(
            """
            INSERT INTO webauthn_challenges (challenge_hash, purpose, user_id, created_at, expires_at)
            VALUES (\(PGBytes(challenge.hash)), \(challenge.purpose.rawValue), \(challenge.userID), \(date),
                    \(challenge.expiresAt))
            """)
    }

    func consumePasskeyChallenge(hash: [UInt8]) throws {
        current.statements.append("DELETE FROM webauthn_challenges WHERE challenge_hash = \(PGBytes(hash))")
    }

    private static let passkeyColumns = """
        SELECT id, user_id, credential_id, public_key, algorithm, sign_count, transports, aaguid, attestation,
               backup_eligible, backed_up, name, created_at, last_used_at
        FROM passkeys
        """

    private static func passkey(_ row: PGRow) throws -> PasskeyRecord {
        PasskeyRecord(
            id: try row.decode("id"), userID: try row.decode("user_id"),
            credentialID: try row.decode("credential_id", as: PGBytes.self).bytes,
            publicKey: try row.decode("public_key", as: PGBytes.self).bytes,
            algorithm: try row.decode("algorithm", as: Int64.self),
            signCount: UInt32(clamping: try row.decode("sign_count", as: Int64.self)),
            transports: try row.decode("transports", as: [String].self),
            aaguid: try row.decode("aaguid", as: PGBytes.self).bytes, attestation: try row.decode("attestation"),
            backupEligible: try row.decode("backup_eligible"), backedUp: try row.decode("backed_up"),
            name: try row.decode("name"), createdAt: try row.decode("created_at"),
            lastUsedAt: try row.decode("last_used_at", as: Date?.self))
    }

    func passkeys(userID: UUID) throws -> [PasskeyRecord] {
        try query("\(unsafeRaw: Self.passkeyColumns) WHERE user_id = \(userID) ORDER BY created_at, id").map(
            Self.passkey)
    }

    func passkey(credentialID: [UInt8]) throws -> PasskeyRecord? {
        try query("\(unsafeRaw: Self.passkeyColumns) WHERE credential_id = \(PGBytes(credentialID)) FOR UPDATE").first
            .map(
                Self.passkey)
    }

    func passkey(id: UUID) throws -> PasskeyRecord? {
        try query("\(unsafeRaw: Self.passkeyColumns) WHERE id = \(id) FOR UPDATE").first.map(Self.passkey)
    }

    func insertPasskey(_ passkey: PasskeyRecord) throws {
        current.statements.append(
            """
            INSERT INTO passkeys (id, user_id, credential_id, public_key, algorithm, sign_count, transports, aaguid,
                                  attestation, backup_eligible, backed_up, name, created_at)
            VALUES (\(passkey.id), \(passkey.userID), \(PGBytes(passkey.credentialID)), \(PGBytes(passkey.publicKey)),
                    \(passkey.algorithm), \(Int64(passkey.signCount)), \(passkey.transports), \(PGBytes(passkey.aaguid)),
                    \(passkey.attestation), \(passkey.backupEligible), \(passkey.backedUp), \(passkey.name),
                    \(passkey.createdAt))
            """)
    }

    func recordPasskeyUse(id: UUID, signCount: UInt32, backedUp: Bool, at date: Date) throws {
        current.statements.append(
            """
            UPDATE passkeys SET sign_count = \(Int64(signCount)), backed_up = \(backedUp), last_used_at = \(date)
            WHERE id = \(id)
            """)
    }

    func renamePasskey(id: UUID, name: String) throws {
        current.statements.append("UPDATE passkeys SET name = \(name) WHERE id = \(id)")
    }

    func deletePasskey(id: UUID) throws {
        current.statements.append("DELETE FROM passkeys WHERE id = \(id)")
    }

    func deletePasskeyHandle(userID: UUID) throws {
        current.statements.append("DELETE FROM passkey_users WHERE user_id = \(userID)")
    }

    func deletePasskeyChallenges(userID: UUID) throws {
        current.statements.append("DELETE FROM webauthn_challenges WHERE user_id = \(userID)")
    }

    func setUserDisabled(_ id: UUID, at date: Date?) throws {
        current.statements.append("UPDATE users SET disabled_at = \(date) WHERE id = \(id)")
        cache.users[id] = nil
    }

    func consoleRole(userID: UUID) throws -> String? {
        try query("SELECT role FROM admin_roles WHERE user_id = \(userID)").first?.decode("role")
    }

    func deleteConsoleRole(userID: UUID) throws {
        current.statements.append("DELETE FROM admin_roles WHERE user_id = \(userID)")
    }

    func deleteConsoleSessions(userID: UUID) throws {
        current.statements.append("DELETE FROM console_sessions WHERE user_id = \(userID)")
    }
}

/// Why the store could not do what was asked; never caused by a request's content.
enum StoreError: Error, CustomStringConvertible {
    /// Every handle candidate of a new user is taken.
    case handlesExhausted
    /// The write collided with a row another transaction committed (a unique key), twice.
    case conflict

    var description: String {
        switch self {
        case .handlesExhausted: "every handle candidate is taken"
        case .conflict: "the write collided with a row written meanwhile"
        }
    }
}

// MARK: - The cache

/// Rows read for the batch, by key; a nil value is a row known not to exist.
private struct Cache {
    var identities: [IdentityKey: IdentityRecord?] = [:]
    var users: [UUID: StoredUser?] = [:]
    /// Refresh and access tokens by hash, set through `remember`: a token found is also listed
    /// under its session, so `forgetSession` finds it without going through every token.
    private(set) var refreshTokens: [[UInt8]: RefreshTokenRecord?] = [:]
    var sessions: [UUID: SessionRecord?] = [:]
    private(set) var accessTokens: [[UInt8]: AccessTokenRecord?] = [:]
    private var refreshTokensOfSession: [UUID: [[UInt8]]] = [:]
    private var accessTokensOfSession: [UUID: [[UInt8]]] = [:]
    var rateLimits: [String: RateLimitRow?] = [:]
    /// Whether a user has a second factor (pending or active), read with the user: a sign-in asks
    /// for every existing account, and almost none has one.
    var activeFactors: [UUID: Bool] = [:]
    /// Handle → taken (true) or known free (false).
    var takenHandles: [String: Bool] = [:]

    init(takenHandles: [String: Bool] = [:]) { self.takenHandles = takenHandles }

    /// What a read of the refresh token `hash` found (nil: no such token).
    mutating func remember(refreshToken token: RefreshTokenRecord?, hash: [UInt8]) {
        refreshTokens[hash] = .some(token)
        if let token { refreshTokensOfSession[token.session.id, default: []].append(hash) }
    }

    /// What a read of the access token `hash` found (nil: no such token).
    mutating func remember(accessToken token: AccessTokenRecord?, hash: [UInt8]) {
        accessTokens[hash] = .some(token)
        if let token { accessTokensOfSession[token.session.id, default: []].append(hash) }
    }

    /// A session changed: its rows, and every token row that carries it, must be read again.
    /// (It went through every cached token: a batch of refreshes, each forgetting its session,
    /// spent a tenth of the worker's time here.)
    mutating func forgetSession(_ id: UUID) {
        sessions[id] = nil
        for hash in refreshTokensOfSession.removeValue(forKey: id) ?? [] { refreshTokens[hash] = nil }
        for hash in accessTokensOfSession.removeValue(forKey: id) ?? [] { accessTokens[hash] = nil }
    }
}

struct RateLimitRow {
    var windowStart: Date
    var count: Int
}

// MARK: - Collected writes

struct NewUserRow {
    var user: NewUser
    var handle: String
}

struct NewIdentityRow {
    var identity: NewIdentity
    var userID: UUID
    var at: Date
}

struct NewSessionRow {
    var session: NewSession
    var userID: UUID
}

struct NewAccessTokenRow {
    var id: UUID
    var sessionID: UUID
    var hash: [UInt8]
    var name: String?
    var abilities: [String]
    var createdAt: Date
    var expiresAt: Date
}

struct NewRefreshTokenRow {
    var id: UUID
    var sessionID: UUID
    var hash: [UInt8]
    var parentID: UUID?
    var createdAt: Date
    var expiresAt: Date
}

/// A used refresh token's row, set to point at its successor.
struct RotationRow {
    var usedTokenID: UUID
    var at: Date
    var successorID: UUID
    var successorSealed: [UInt8]
}

/// Writes waiting to be sent: rows to insert by table, rotated refresh tokens, and statements to
/// run in order.
struct Writes {
    var requests: [RequestRecord] = []
    var users: [NewUserRow] = []
    var identities: [NewIdentityRow] = []
    var sessions: [NewSessionRow] = []
    var accessTokens: [NewAccessTokenRow] = []
    var refreshTokens: [NewRefreshTokenRow] = []
    var rotations: [RotationRow] = []
    var statements: [PGQuery] = []
    var rateLimitCounts: [String: Int] = [:]
    var rateLimitWindows: [String: (at: Date, window: TimeInterval)] = [:]
    var events: [OutboxEvent] = []
    var audits: [AuditEntry] = []

    var count: Int {
        requests.count + users.count + identities.count + sessions.count + accessTokens.count + refreshTokens.count
            + rotations.count + statements.count + rateLimitCounts.count + events.count + audits.count
    }

    mutating func append(_ other: Writes) {
        requests += other.requests
        users += other.users
        identities += other.identities
        sessions += other.sessions
        accessTokens += other.accessTokens
        refreshTokens += other.refreshTokens
        rotations += other.rotations
        statements += other.statements
        for (bucket, count) in other.rateLimitCounts { rateLimitCounts[bucket, default: 0] += count }
        for (bucket, window) in other.rateLimitWindows { rateLimitWindows[bucket] = window }
        events += other.events
        audits += other.audits
    }

    /// The settings of a transaction's last round trip: inserts from the plan cache, and no
    /// sequential scans. An insert checks each foreign key it writes with a statement the
    /// connection plans once, and under `auto` that plan is cached from the sixth check on, made
    /// for the referenced table's size then, until the table is analyzed again. After autovacuum
    /// analyzed `users` at its first 50 rows, a light load's sixth sign-up cached a sequential
    /// scan of `users`, and every sign-up's check read the whole table until the next analysis (a
    /// minute or more): 2,000 sign-ups read 2.1 million rows of a table of 2,000
    /// (`MigrationTests.aWritersForeignKeyChecksFindUsersByKeyAfterASmallTableWasAnalyzed`). With
    /// sequential scans priced out the cached check uses the key at any size.
    static let cachingInsertPlans: PGQuery =
        "SELECT set_config('plan_cache_mode', 'auto', true), set_config('enable_seqscan', 'off', true)"

    /// The statements that write all of it: one multi-row insert per table, parents before
    /// children, then one update of the rotated refresh tokens, then the other updates in the
    /// order the requests made them.
    ///
    /// Updates can follow the inserts, and the rotations the other updates: a request only
    /// updates a row it read, and a read of a row an earlier request wrote sends that request's
    /// writes first (no other statement writes a refresh token's rotation columns).
    ///
    /// Rows with a unique key another writer may insert too (a request id, a handle, an
    /// identity) go in the order of that key: two batches inserting the same keys then wait for
    /// each other in one order, and never deadlock (`40P01`) the way opposite orders do. (Handles
    /// are ASCII, and their unique index holds them in byte order since migration 21, the order
    /// Swift sorts them in, whatever the database's collation.)
    ///
    /// With `cachingInsertPlans` (the transaction's last round trip), the inserts run under
    /// `plan_cache_mode = auto` and the statements that find rows by key under the session's
    /// `force_custom_plan`, each set `LOCAL` to the transaction; and sequential scans are priced
    /// out to its end (`Self.cachingInsertPlans`).
    func queries(cachingInsertPlans: Bool = false) -> [PGQuery] {
        var out: [PGQuery] = cachingInsertPlans ? [Self.cachingInsertPlans] : []
        let requests = requests.sorted { $0.requestID < $1.requestID }
        let users = users.sorted { $0.handle < $1.handle }
        let identities = identities.sorted {
            ($0.identity.provider, $0.identity.subject) < ($1.identity.provider, $1.identity.subject)
        }
        if !requests.isEmpty {
            out.append(
                """
                INSERT INTO processed_requests (request_id, method, status, user_id, session_id, processed_at,
                                                expires_at, request_digest, result_sealed)
                SELECT * FROM unnest(\(PGArray(requests.map(\.requestID))),
                                     \(PGArray(requests.map(\.method))),
                                     \(PGArray(requests.map(\.status))),
                                     \(PGArray(requests.map(\.userID))),
                                     \(PGArray(requests.map(\.sessionID))),
                                     \(PGArray(requests.map(\.processedAt))),
                                     \(PGArray(requests.map(\.expiresAt))),
                                     \(PGArray(requests.map { $0.digest.map(PGBytes.init) })),
                                     \(PGArray(requests.map { $0.resultSealed.map(PGBytes.init) })))
                """)
        }
        if !users.isEmpty {
            out.append(
                """
                INSERT INTO users (id, handle, name, email, email_verified, is_private_email, is_guest, created_at,
                                   updated_at)
                SELECT id, handle, name, email, verified, private, guest, created, created
                FROM unnest(\(PGArray(users.map(\.user.id))), \(PGArray(users.map(\.handle))),
                            \(PGArray(users.map(\.user.name))), \(PGArray(users.map(\.user.email))),
                            \(PGArray(users.map(\.user.emailVerified))),
                            \(PGArray(users.map(\.user.isPrivateEmail))),
                            \(PGArray(users.map(\.user.isGuest))),
                            \(PGArray(users.map(\.user.createdAt))))
                    AS t(id, handle, name, email, verified, private, guest, created)
                """)
        }
        if !identities.isEmpty {
            out.append(
                """
                INSERT INTO identities (provider, subject, user_id, email, email_verified, is_private_email,
                                        password_hash, created_at, last_login_at)
                SELECT provider, subject, user_id, email, verified, private, hash, at, at
                FROM unnest(\(PGArray(identities.map(\.identity.provider))),
                            \(PGArray(identities.map(\.identity.subject))),
                            \(PGArray(identities.map(\.userID))),
                            \(PGArray(identities.map(\.identity.email))),
                            \(PGArray(identities.map(\.identity.emailVerified))),
                            \(PGArray(identities.map(\.identity.isPrivateEmail))),
                            \(PGArray(identities.map(\.identity.passwordHash))),
                            \(PGArray(identities.map(\.at))))
                    AS t(provider, subject, user_id, email, verified, private, hash, at)
                """)
        }
        if !sessions.isEmpty {
            out.append(
                """
                INSERT INTO sessions (id, user_id, provider, device_name, device_platform, abilities, created_at,
                                      expires_at)
                SELECT id, user_id, provider, device, platform, abilities::text[], created, expires
                FROM unnest(\(PGArray(sessions.map(\.session.id))), \(PGArray(sessions.map(\.userID))),
                            \(PGArray(sessions.map(\.session.provider))),
                            \(PGArray(sessions.map(\.session.deviceName))),
                            \(PGArray(sessions.map(\.session.devicePlatform))),
                            \(PGArray(sessions.map(\.session.abilities))),
                            \(PGArray(sessions.map(\.session.createdAt))),
                            \(PGArray(sessions.map(\.session.expiresAt))))
                    AS t(id, user_id, provider, device, platform, abilities, created, expires)
                """)
        }
        if !accessTokens.isEmpty {
            out.append(
                """
                INSERT INTO access_tokens (id, session_id, token_hash, name, abilities, created_at, expires_at)
                SELECT id, session_id, hash, name, abilities::text[], created, expires
                FROM unnest(\(PGArray(accessTokens.map(\.id))),
                            \(PGArray(accessTokens.map(\.sessionID))),
                            \(PGArray(accessTokens.map { PGBytes($0.hash) })),
                            \(PGArray(accessTokens.map(\.name))),
                            \(PGArray(accessTokens.map(\.abilities))),
                            \(PGArray(accessTokens.map(\.createdAt))),
                            \(PGArray(accessTokens.map(\.expiresAt))))
                    AS t(id, session_id, hash, name, abilities, created, expires)
                """)
        }
        if !refreshTokens.isEmpty {
            out.append(
                """
                INSERT INTO refresh_tokens (id, session_id, token_hash, parent_id, created_at, expires_at)
                SELECT * FROM unnest(\(PGArray(refreshTokens.map(\.id))),
                                     \(PGArray(refreshTokens.map(\.sessionID))),
                                     \(PGArray(refreshTokens.map { PGBytes($0.hash) })),
                                     \(PGArray(refreshTokens.map(\.parentID))),
                                     \(PGArray(refreshTokens.map(\.createdAt))),
                                     \(PGArray(refreshTokens.map(\.expiresAt))))
                """)
        }
        // The rotated tokens in one update, planned once a batch instead of once a refresh. Each
        // row was locked when it was read (`FOR UPDATE`), so the order they are met in takes no
        // new lock.
        var keyed: [PGQuery] = []
        if !rotations.isEmpty {
            // A token rotated twice before a flush (reading it again sends the first rotation,
            // so only a request that did not read it could) keeps its last rotation, as two
            // updates in a row would leave it: an update that meets a row twice applies one of
            // them, not predictably which.
            var last: [UUID: Int] = [:]
            for (index, row) in rotations.enumerated() { last[row.usedTokenID] = index }
            let all = rotations
            let rotations = all.indices.filter { last[all[$0].usedTokenID] == $0 }.map { all[$0] }
            keyed.append(
                """
                UPDATE refresh_tokens r SET used_at = v.at, replaced_by = v.successor, successor_sealed = v.sealed
                FROM unnest(\(PGArray(rotations.map(\.usedTokenID))), \(PGArray(rotations.map(\.at))),
                            \(PGArray(rotations.map(\.successorID))),
                            \(PGArray(rotations.map { PGBytes($0.successorSealed) })))
                    AS v(id, at, successor, sealed)
                WHERE r.id = v.id
                """)
        }
        keyed += statements
        if cachingInsertPlans, !keyed.isEmpty {
            out.append("SET LOCAL plan_cache_mode = force_custom_plan")
            out += keyed
            out.append("SET LOCAL plan_cache_mode = auto")
        } else {
            out += keyed
        }
        out += rateLimitStatements()
        if !audits.isEmpty {
            out.append(
                """
                INSERT INTO audit_log (at, user_id, action, outcome, request_id, client_id, device_name, device_platform,
                                       ip, user_agent, actor)
                SELECT * FROM unnest(\(PGArray(audits.map(\.at))), \(PGArray(audits.map(\.userID))),
                                     \(PGArray(audits.map(\.action))), \(PGArray(audits.map(\.outcome))),
                                     \(PGArray(audits.map(\.requestID))), \(PGArray(audits.map(\.clientID))),
                                     \(PGArray(audits.map(\.deviceName))),
                                     \(PGArray(audits.map(\.devicePlatform))), \(PGArray(audits.map(\.ip))),
                                     \(PGArray(audits.map(\.userAgent))), \(PGArray(audits.map(\.actor))))
                """)
        }
        if !events.isEmpty {
            out.append(
                """
                INSERT INTO outbox (event_id, topic, message_key, payload, created_at)
                SELECT * FROM unnest(\(PGArray(events.map(\.id))), \(PGArray(events.map(\.topic))),
                                     \(PGArray(events.map(\.key))),
                                     \(PGArray(events.map { PGBytes($0.payload) })),
                                     \(PGArray(events.map(\.createdAt))))
                """)
        }
        return out
    }

    /// One upsert per window length: a bucket whose window has passed starts again at the new count.
    private func rateLimitStatements() -> [PGQuery] {
        var byWindow: [TimeInterval: [(bucket: String, at: Date, count: Int)]] = [:]
        for (bucket, count) in rateLimitCounts.sorted(by: { $0.key < $1.key }) {
            guard let (at, window) = rateLimitWindows[bucket] else { continue }
            byWindow[window, default: []].append((bucket, at, count))
        }
        return byWindow.sorted(by: { $0.key < $1.key }).map { window, rows in
            let latest = rows.map(\.at).max() ?? Date()
            return """
                INSERT INTO rate_limits (bucket, window_start, count)
                SELECT * FROM unnest(\(PGArray(rows.map(\.bucket))), \(PGArray(rows.map(\.at))),
                                     \(PGArray(rows.map { Int32(clamping: $0.count) })))
                ON CONFLICT (bucket) DO UPDATE SET
                    count = CASE WHEN rate_limits.window_start <= \(latest - window) THEN EXCLUDED.count
                                 ELSE rate_limits.count + EXCLUDED.count END,
                    window_start = CASE WHEN rate_limits.window_start <= \(latest - window) THEN EXCLUDED.window_start
                                        ELSE rate_limits.window_start END
                """
        }
    }
}

// MARK: - Prefetch

/// The queries that fetch and lock a batch's rows in one round trip, and how their rows fill the
/// cache. Locks are taken in one order (identities, refresh tokens, sessions, users, rate
/// limits), so two replicas' batches do not deadlock on each other.
struct PrefetchQueries {
    /// A user's columns. Whether the user has a factor is a scalar subquery, looked up by key
    /// for each user: as `EXISTS`, the generic plan made while `mfa_factors` was small hashed
    /// the whole table on every run.
    static let userColumns = """
        SELECT u.id, u.handle, u.name, u.email, u.email_verified, u.is_private_email, u.is_guest, u.created_at,
               ARRAY(SELECT provider
                     FROM (SELECT provider, created_at FROM identities
                           WHERE user_id = u.id AND NOT (provider = 'password' AND password_hash IS NULL)
                           UNION ALL SELECT 'passkey', created_at FROM passkeys WHERE user_id = u.id) AS ways
                     GROUP BY provider ORDER BY min(created_at), provider) AS providers,
               (SELECT true FROM mfa_factors f WHERE f.user_id = u.id) IS NOT NULL AS has_factor,
               u.disabled_at IS NOT NULL AS disabled
        FROM users u
        """
    static let sessionColumns = """
        SELECT s.id, s.user_id, s.created_at, s.expires_at, s.revoked_at, s.abilities, s.device_name, u.is_guest,
               u.disabled_at IS NOT NULL AS user_disabled
        FROM sessions s JOIN users u ON u.id = s.user_id
        """
    static let refreshColumns = """
        SELECT r.id AS token_id, r.token_hash, r.expires_at AS token_expires_at, r.used_at, r.successor_sealed,
               s.id AS session_id, s.user_id, s.created_at, s.expires_at, s.revoked_at, s.abilities, s.device_name,
               u.is_guest, u.disabled_at IS NOT NULL AS user_disabled
        FROM refresh_tokens r JOIN sessions s ON s.id = r.session_id JOIN users u ON u.id = s.user_id
        """
    static let accessTokenColumns = """
        SELECT a.id AS token_id, a.token_hash, a.expires_at AS token_expires_at,
               s.id AS session_id, s.user_id, s.created_at, s.expires_at, s.revoked_at, s.abilities, s.device_name,
               u.is_guest, u.disabled_at IS NOT NULL AS user_disabled
        FROM access_tokens a JOIN sessions s ON s.id = a.session_id JOIN users u ON u.id = s.user_id
        """

    /// A session's columns but its id, `s` joined with its user's `u` (as `userOfSession` reads
    /// it).
    static let sessionFields = """
        s.user_id, s.created_at, s.expires_at, s.revoked_at, s.abilities, s.device_name, u.is_guest,
        u.disabled_at IS NOT NULL AS user_disabled
        """
    /// The user of session `s`, looked up by key: as a lateral subquery with a limit (not
    /// flattened into a join), its generic plan probes `users_pkey` at any table size.
    static let userOfSession = """
        CROSS JOIN LATERAL (SELECT is_guest, disabled_at FROM users WHERE id = s.user_id LIMIT 1) AS u
        """

    let prefetch: Prefetch
    /// Every query finds its rows by key and runs from a cached plan (`KeyedPlans`), written so
    /// that the generic plan probes a unique or foreign key index once a key whatever the tables'
    /// sizes: lateral subqueries with a limit (not flattened into joins), ids gathered first and
    /// then probed. Joined with the keys instead, a generic plan made on a small table was a merge
    /// join over a whole index, kept until the table was analyzed again; and planned for each run
    /// instead, a read cost PostgreSQL more planning than running (a refresh token's read: 225 µs
    /// of planning, 92 µs of running, at 300 refreshes/s).
    ///
    /// They lock in one order, as every batch does: identities (in the server's order of the
    /// key), refresh tokens (in the order of their hashes), sessions (each statement in `s.id`
    /// order), users (in `u.id` order), rate limits (by bucket).
    private(set) var queries: [PGQuery] = []
    private var slots: [Slot] = []

    private enum Slot {
        case identities, refreshTokens, sessions, accessTokens, users, handles, rateLimits
    }

    init(_ prefetch: Prefetch) {
        self.prefetch = prefetch
        let identities = Self.unique(prefetch.identities)
        let providers = PGArray(identities.map(\.provider))
        let subjects = PGArray(identities.map(\.subject))
        let refresh = PGArray(Self.unique(prefetch.refreshTokens).map(PGBytes.init))
        let sessions = PGArray(Self.unique(prefetch.sessions))
        let accessTokens = PGArray(Self.unique(prefetch.accessTokens).map(PGBytes.init))
        if !identities.isEmpty {
            // Each identity looked up by its key and locked as it is found, the keys in the
            // server's order of the key (every statement that locks identities locks them in that
            // order).
            add(
                .identities,
                """
                SELECT i.provider, i.subject, i.user_id, i.email, i.email_verified, i.is_private_email, i.password_hash
                FROM (SELECT * FROM unnest(\(providers), \(subjects)) AS keys(provider, subject)
                      ORDER BY provider, subject) AS k
                CROSS JOIN LATERAL (
                    SELECT provider, subject, user_id, email, email_verified, is_private_email, password_hash
                    FROM identities WHERE provider = k.provider AND subject = k.subject
                    LIMIT 1 FOR UPDATE) AS i
                """)
        }
        if refresh.count > 0 {
            // The tokens looked up by hash and locked (in the order of the hashes), then their
            // sessions probed by id and locked in `s.id` order (the sort comes before the lock).
            add(
                .refreshTokens,
                """
                WITH r AS MATERIALIZED (
                    SELECT t.* FROM (SELECT hash FROM unnest(\(refresh)) AS keys(hash) ORDER BY hash) AS k
                    CROSS JOIN LATERAL (
                        SELECT id, token_hash, session_id, expires_at, used_at, successor_sealed FROM refresh_tokens
                        WHERE token_hash = k.hash LIMIT 1 FOR UPDATE) AS t)
                SELECT r.id AS token_id, r.token_hash, r.expires_at AS token_expires_at, r.used_at, r.successor_sealed,
                       s.id AS session_id, \(unsafeRaw: Self.sessionFields)
                FROM sessions s JOIN r ON r.session_id = s.id \(unsafeRaw: Self.userOfSession)
                WHERE s.id = ANY(ARRAY(SELECT session_id FROM r))
                ORDER BY s.id, r.id FOR UPDATE OF s
                """)
        }
        if sessions.count > 0 {
            add(
                .sessions,
                """
                SELECT s.id, \(unsafeRaw: Self.sessionFields)
                FROM sessions s \(unsafeRaw: Self.userOfSession)
                WHERE s.id = ANY(ARRAY(SELECT unnest(\(sessions)))) ORDER BY s.id FOR UPDATE OF s
                """)
        }
        if accessTokens.count > 0 {
            // As the refresh tokens' read, the tokens themselves not locked (as before: their
            // session's lock covers them).
            add(
                .accessTokens,
                """
                WITH a AS MATERIALIZED (
                    SELECT t.* FROM unnest(\(accessTokens)) AS k(hash)
                    CROSS JOIN LATERAL (
                        SELECT id, token_hash, session_id, expires_at FROM access_tokens
                        WHERE token_hash = k.hash LIMIT 1) AS t)
                SELECT a.id AS token_id, a.token_hash, a.expires_at AS token_expires_at,
                       s.id AS session_id, \(unsafeRaw: Self.sessionFields)
                FROM sessions s JOIN a ON a.session_id = s.id \(unsafeRaw: Self.userOfSession)
                WHERE s.id = ANY(ARRAY(SELECT session_id FROM a))
                ORDER BY s.id FOR UPDATE OF s
                """)
        }
        let users = Self.unique(prefetch.users)
        if !users.isEmpty || !identities.isEmpty || refresh.count > 0 || sessions.count > 0 || accessTokens.count > 0 {
            // The users of every identity, token and session read above, and the users named: one
            // list of ids, gathered first (an init plan of key lookups, each a lateral probe),
            // then each user looked up by key. (An OR of IN-subqueries here read every user
            // through a filter: no index serves an OR across subqueries. And `u.id IN (…)`
            // planned generically became a merge join over every user.)
            add(
                .users,
                """
                \(unsafeRaw: Self.userColumns)
                WHERE u.id = ANY(ARRAY(
                    SELECT unnest(\(PGArray(users)))
                    UNION ALL
                    SELECT i.user_id FROM unnest(\(providers), \(subjects)) AS k(provider, subject)
                    CROSS JOIN LATERAL (
                        SELECT user_id FROM identities WHERE provider = k.provider AND subject = k.subject LIMIT 1) AS i
                    UNION ALL
                    SELECT s.user_id FROM unnest(\(refresh)) AS k(hash)
                    CROSS JOIN LATERAL (SELECT session_id FROM refresh_tokens WHERE token_hash = k.hash LIMIT 1) AS r
                    CROSS JOIN LATERAL (SELECT user_id FROM sessions WHERE id = r.session_id LIMIT 1) AS s
                    UNION ALL
                    SELECT s.user_id FROM unnest(\(sessions)) AS k(id)
                    CROSS JOIN LATERAL (SELECT user_id FROM sessions WHERE id = k.id LIMIT 1) AS s
                    UNION ALL
                    SELECT s.user_id FROM unnest(\(accessTokens)) AS k(hash)
                    CROSS JOIN LATERAL (SELECT session_id FROM access_tokens WHERE token_hash = k.hash LIMIT 1) AS a
                    CROSS JOIN LATERAL (SELECT user_id FROM sessions WHERE id = a.session_id LIMIT 1) AS s))
                ORDER BY u.id FOR UPDATE OF u
                """)
        }
        let handles = Self.unique(prefetch.handles)
        if !handles.isEmpty {
            add(.handles, "SELECT handle FROM users WHERE handle = ANY(\(PGArray(handles)))")
        }
        let buckets = Self.unique(prefetch.rateLimitBuckets).sorted()
        if !buckets.isEmpty {
            add(
                .rateLimits,
                """
                SELECT bucket, window_start, count FROM rate_limits WHERE bucket = ANY(\(PGArray(buckets)))
                ORDER BY bucket FOR UPDATE
                """)
        }
    }

    private mutating func add(_ slot: Slot, _ query: PGQuery) {
        slots.append(slot)
        queries.append(query)
    }

    private static func unique<T: Hashable>(_ values: [T]) -> [T] {
        var seen: Set<T> = []
        return values.filter { seen.insert($0).inserted }
    }

    /// Fills the cache from the results of `queries`, in order. What was asked for and not found
    /// is cached as absent.
    fileprivate func fill(_ cache: inout Cache, from results: [PGRows]) throws {
        for (slot, rows) in zip(slots, results) {
            switch slot {
            case .identities:
                for key in prefetch.identities { cache.identities[key] = .some(nil) }
                for row in rows {
                    let identity = try Decode.identity(row)
                    cache.identities[IdentityKey(provider: identity.provider, subject: identity.subject)] = identity
                }
            case .refreshTokens:
                for hash in prefetch.refreshTokens { cache.remember(refreshToken: nil, hash: hash) }
                for row in rows {
                    let hash = try row.decode("token_hash", as: PGBytes.self).bytes
                    cache.remember(refreshToken: try Decode.refreshToken(row), hash: hash)
                }
            case .sessions:
                for id in prefetch.sessions { cache.sessions[id] = .some(nil) }
                for row in rows {
                    let session = try Decode.session(row, idColumn: "id")
                    cache.sessions[session.id] = session
                }
            case .accessTokens:
                for hash in prefetch.accessTokens { cache.remember(accessToken: nil, hash: hash) }
                for row in rows {
                    let hash = try row.decode("token_hash", as: PGBytes.self).bytes
                    cache.remember(accessToken: try Decode.accessToken(row), hash: hash)
                }
            case .users:
                for id in prefetch.users { cache.users[id] = .some(nil) }
                for row in rows {
                    let user = try Decode.user(row)
                    cache.users[user.id] = user
                    cache.activeFactors[user.id] = try row.decode("has_factor", as: Bool.self)
                }
            case .handles:
                for handle in prefetch.handles { cache.takenHandles[handle] = false }
                for row in rows { cache.takenHandles[try row.decode("handle", as: String.self)] = true }
            case .rateLimits:
                for bucket in prefetch.rateLimitBuckets { cache.rateLimits[bucket] = .some(nil) }
                for row in rows {
                    cache.rateLimits[try row.decode("bucket", as: String.self)] = try Decode.rateLimit(row)
                }
            }
        }
    }
}

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
        return user
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
