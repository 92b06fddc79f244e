import AuthDomain
import Foundation
import PGStore

// MARK: - Collected writes

struct NewUserRow {
    var user: NewUser
    var handle: String
    var tenant: String
}

struct NewIdentityRow {
    var identity: NewIdentity
    var userID: UUID
    var at: Date
    var tenant: String
}

/// A row of a tenant's (a kept answer), with its tenant.
struct Owned<Row> {
    var tenant: String
    var row: Row
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
    var requests: [Owned<RequestRecord>] = []
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
        out += [
            requestsInsert(), usersInsert(), identitiesInsert(), sessionsInsert(), accessTokensInsert(),
            refreshTokensInsert(),
        ].compactMap { $0 }
        // The rotated tokens in one update, planned once a batch instead of once a refresh. Each
        // row was locked when it was read (`FOR UPDATE`), so the order they are met in takes no
        // new lock.
        let keyed = (rotationsUpdate().map { [$0] } ?? []) + statements
        if cachingInsertPlans, !keyed.isEmpty {
            out.append("SET LOCAL plan_cache_mode = force_custom_plan")
            out += keyed
            out.append("SET LOCAL plan_cache_mode = auto")
        } else {
            out += keyed
        }
        out += rateLimitStatements()
        out += [Self.auditInsert(audits), outboxInsert()].compactMap { $0 }
        return out
    }

    // MARK: - One statement a table

    /// The kept answers, in request-id order.
    private func requestsInsert() -> PGQuery? {
        guard !requests.isEmpty else { return nil }
        let owned = requests.sorted { ($0.row.requestID, $0.tenant) < ($1.row.requestID, $1.tenant) }
        let requests = owned.map(\.row)
        return """
            INSERT INTO processed_requests (request_id, method, status, user_id, session_id, processed_at,
                                            expires_at, request_digest, result_sealed, tenant)
            SELECT * FROM unnest(\(PGArray(requests.map(\.requestID))),
                                 \(PGArray(requests.map(\.method))),
                                 \(PGArray(requests.map(\.status))),
                                 \(PGArray(requests.map(\.userID))),
                                 \(PGArray(requests.map(\.sessionID))),
                                 \(PGArray(requests.map(\.processedAt))),
                                 \(PGArray(requests.map(\.expiresAt))),
                                 \(PGArray(requests.map { $0.digest.map(PGBytes.init) })),
                                 \(PGArray(requests.map { $0.resultSealed.map(PGBytes.init) })),
                                 \(PGArray(owned.map(\.tenant))))
            """
    }

    /// New users, in handle order.
    private func usersInsert() -> PGQuery? {
        guard !users.isEmpty else { return nil }
        let users = users.sorted { ($0.handle, $0.tenant) < ($1.handle, $1.tenant) }
        return """
            INSERT INTO users (id, handle, name, email, email_verified, is_private_email, is_guest, created_at,
                               updated_at, phone, tenant)
            SELECT id, handle, name, email, verified, private, guest, created, created, phone, tenant
            FROM unnest(\(PGArray(users.map(\.user.id))), \(PGArray(users.map(\.handle))),
                        \(PGArray(users.map(\.user.name))), \(PGArray(users.map(\.user.email))),
                        \(PGArray(users.map(\.user.emailVerified))),
                        \(PGArray(users.map(\.user.isPrivateEmail))),
                        \(PGArray(users.map(\.user.isGuest))),
                        \(PGArray(users.map(\.user.createdAt))),
                        \(PGArray(users.map(\.user.phone))), \(PGArray(users.map(\.tenant))))
                AS t(id, handle, name, email, verified, private, guest, created, phone, tenant)
            """
    }

    /// New identities, in (provider, subject) order.
    private func identitiesInsert() -> PGQuery? {
        guard !identities.isEmpty else { return nil }
        let identities = identities.sorted {
            ($0.identity.provider, $0.identity.subject, $0.tenant) < (
                $1.identity.provider, $1.identity.subject, $1.tenant
            )
        }
        return """
            INSERT INTO identities (provider, subject, user_id, email, email_verified, is_private_email,
                                    password_hash, created_at, last_login_at, tenant)
            SELECT provider, subject, user_id, email, verified, private, hash, at, at, tenant
            FROM unnest(\(PGArray(identities.map(\.identity.provider))),
                        \(PGArray(identities.map(\.identity.subject))),
                        \(PGArray(identities.map(\.userID))),
                        \(PGArray(identities.map(\.identity.email))),
                        \(PGArray(identities.map(\.identity.emailVerified))),
                        \(PGArray(identities.map(\.identity.isPrivateEmail))),
                        \(PGArray(identities.map(\.identity.passwordHash))),
                        \(PGArray(identities.map(\.at))), \(PGArray(identities.map(\.tenant))))
                AS t(provider, subject, user_id, email, verified, private, hash, at, tenant)
            """
    }

    private func sessionsInsert() -> PGQuery? {
        guard !sessions.isEmpty else { return nil }
        return """
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
            """
    }

    private func accessTokensInsert() -> PGQuery? {
        guard !accessTokens.isEmpty else { return nil }
        return """
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
            """
    }

    private func refreshTokensInsert() -> PGQuery? {
        guard !refreshTokens.isEmpty else { return nil }
        return """
            INSERT INTO refresh_tokens (id, session_id, token_hash, parent_id, created_at, expires_at)
            SELECT * FROM unnest(\(PGArray(refreshTokens.map(\.id))),
                                 \(PGArray(refreshTokens.map(\.sessionID))),
                                 \(PGArray(refreshTokens.map { PGBytes($0.hash) })),
                                 \(PGArray(refreshTokens.map(\.parentID))),
                                 \(PGArray(refreshTokens.map(\.createdAt))),
                                 \(PGArray(refreshTokens.map(\.expiresAt))))
            """
    }

    /// The rotated refresh tokens in one update. A token rotated twice before a flush (reading
    /// it again sends the first rotation, so only a request that did not read it could) keeps its
    /// last rotation, as two updates in a row would leave it: an update that meets a row twice
    /// applies one of them, not predictably which.
    private func rotationsUpdate() -> PGQuery? {
        guard !rotations.isEmpty else { return nil }
        var last: [UUID: Int] = [:]
        for (index, row) in rotations.enumerated() { last[row.usedTokenID] = index }
        let all = rotations
        let rotations = all.indices.filter { last[all[$0].usedTokenID] == $0 }.map { all[$0] }
        return """
            UPDATE refresh_tokens r SET used_at = v.at, replaced_by = v.successor, successor_sealed = v.sealed
            FROM unnest(\(PGArray(rotations.map(\.usedTokenID))), \(PGArray(rotations.map(\.at))),
                        \(PGArray(rotations.map(\.successorID))),
                        \(PGArray(rotations.map { PGBytes($0.successorSealed) })))
                AS v(id, at, successor, sealed)
            WHERE r.id = v.id
            """
    }

    /// The audit trail's rows: the one statement that writes `audit_log`, for requests (the
    /// unit of work's) and for the store's own chores (an Apple job, a console role).
    static func auditInsert(_ audits: [AuditEntry]) -> PGQuery? {
        guard !audits.isEmpty else { return nil }
        return """
            INSERT INTO audit_log (at, user_id, action, outcome, request_id, client_id, device_name, device_platform,
                                   ip, user_agent, actor, tenant)
            SELECT * FROM unnest(\(PGArray(audits.map(\.at))), \(PGArray(audits.map(\.userID))),
                                 \(PGArray(audits.map(\.action))), \(PGArray(audits.map(\.outcome))),
                                 \(PGArray(audits.map(\.requestID))), \(PGArray(audits.map(\.clientID))),
                                 \(PGArray(audits.map(\.deviceName))),
                                 \(PGArray(audits.map(\.devicePlatform))), \(PGArray(audits.map(\.ip))),
                                 \(PGArray(audits.map(\.userAgent))), \(PGArray(audits.map(\.actor))),
                                 \(PGArray(audits.map(\.tenant))))
            """
    }

    private func outboxInsert() -> PGQuery? {
        guard !events.isEmpty else { return nil }
        return """
            INSERT INTO outbox (event_id, topic, message_key, payload, created_at)
            SELECT * FROM unnest(\(PGArray(events.map(\.id))), \(PGArray(events.map(\.topic))),
                                 \(PGArray(events.map(\.key))),
                                 \(PGArray(events.map { PGBytes($0.payload) })),
                                 \(PGArray(events.map(\.createdAt))))
            """
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
