import AuthDomain
import Foundation
import PGStore

// MARK: - Prefetch

/// The queries that fetch and lock a batch's rows in one round trip, and how their rows fill the
/// cache. Locks are taken in one order (identities, refresh tokens, sessions, users, rate
/// limits), so two replicas' batches do not deadlock on each other.
struct PrefetchQueries {
    /// A user's columns. Whether the user has a factor is a scalar subquery, looked up by key
    /// for each user: as `EXISTS`, the generic plan made while `mfa_factors` was small hashed
    /// the whole table on every run.
    static let userColumns = """
        SELECT u.id, u.handle, u.name, u.email, u.email_verified, u.is_private_email, u.is_guest, u.created_at, u.phone,
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
               u.disabled_at IS NOT NULL AS user_disabled, u.tenant AS user_tenant
        FROM sessions s JOIN users u ON u.id = s.user_id
        """
    static let refreshColumns = """
        SELECT r.id AS token_id, r.token_hash, r.expires_at AS token_expires_at, r.used_at, r.successor_sealed,
               s.id AS session_id, s.user_id, s.created_at, s.expires_at, s.revoked_at, s.abilities, s.device_name,
               u.is_guest, u.disabled_at IS NOT NULL AS user_disabled, u.tenant AS user_tenant
        FROM refresh_tokens r JOIN sessions s ON s.id = r.session_id JOIN users u ON u.id = s.user_id
        """
    static let accessTokenColumns = """
        SELECT a.id AS token_id, a.token_hash, a.expires_at AS token_expires_at,
               s.id AS session_id, s.user_id, s.created_at, s.expires_at, s.revoked_at, s.abilities, s.device_name,
               u.is_guest, u.disabled_at IS NOT NULL AS user_disabled, u.tenant AS user_tenant
        FROM access_tokens a JOIN sessions s ON s.id = a.session_id JOIN users u ON u.id = s.user_id
        """

    /// A session's columns but its id, `s` joined with its user's `u` (as `userOfSession` reads
    /// it), with the user's tenant: a session (and each of its tokens) is its user's tenant's, and
    /// is read as unknown for another (`Decode.owned`).
    static let sessionFields = """
        s.user_id, s.created_at, s.expires_at, s.revoked_at, s.abilities, s.device_name, u.is_guest,
        u.disabled_at IS NOT NULL AS user_disabled, u.tenant AS user_tenant
        """
    /// The user of session `s`, looked up by key: as a lateral subquery with a limit (not
    /// flattened into a join), its generic plan probes `users_pkey` at any table size.
    static let userOfSession = """
        CROSS JOIN LATERAL (SELECT is_guest, disabled_at, tenant FROM users WHERE id = s.user_id LIMIT 1) AS u
        """

    /// Each tenant's rows (`Prefetch.parts`), read by queries of their own, in that order.
    let parts: [Prefetch]
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
    /// order), users (in `u.id` order), rate limits (by bucket); a batch with requests of several
    /// tenants, so for each tenant in turn (the default first, then by name: a row is one
    /// tenant's).
    private(set) var queries: [PGQuery] = []
    private var slots: [(slot: Slot, part: Int)] = []
    private var part = 0

    private enum Slot {
        case identities, refreshTokens, sessions, accessTokens, users, handles, rateLimits
    }

    init(_ prefetch: Prefetch) {
        parts = prefetch.parts
        for (index, part) in parts.enumerated() {
            self.part = index
            addReads(part)
        }
    }

    /// One tenant's reads.
    private mutating func addReads(_ prefetch: Prefetch) {
        let tenant = prefetch.tenant
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
                    FROM identities WHERE provider = k.provider AND subject = k.subject AND tenant = \(tenant)::text
                    LIMIT 1 FOR UPDATE) AS i
                """)
        }
        addTokenReads(refresh: refresh, sessions: sessions, accessTokens: accessTokens)
        addUserReads(
            prefetch, providers: providers, subjects: subjects, refresh: refresh, sessions: sessions,
            accessTokens: accessTokens, identitiesAsked: !identities.isEmpty)
    }

    /// The refresh tokens, sessions and access tokens named, each with its session locked.
    private mutating func addTokenReads(
        refresh: PGArray, sessions: PGArray, accessTokens: PGArray
    ) {
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
    }

    /// The users of everything read above and the users named, the handles and the rate limits.
    private mutating func addUserReads(
        _ prefetch: Prefetch, providers: PGArray, subjects: PGArray, refresh: PGArray, sessions: PGArray,
        accessTokens: PGArray, identitiesAsked: Bool
    ) {
        let users = Self.unique(prefetch.users)
        if !users.isEmpty || identitiesAsked || refresh.count > 0 || sessions.count > 0 || accessTokens.count > 0 {
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
                        SELECT user_id FROM identities
                        WHERE provider = k.provider AND subject = k.subject AND tenant = \(prefetch.tenant)::text LIMIT 1) AS i
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
                  AND u.tenant = \(prefetch.tenant)::text
                ORDER BY u.id FOR UPDATE OF u
                """)
        }
        let handles = Self.unique(prefetch.handles)
        if !handles.isEmpty {
            add(
                .handles,
                "SELECT handle FROM users WHERE handle = ANY(\(PGArray(handles))) AND tenant = \(prefetch.tenant)::text"
            )
        }
        let buckets = Self.unique(prefetch.rateLimitBuckets.map { TenantScope.scoped($0, in: prefetch.tenant) })
            .sorted()
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
        slots.append((slot, part))
        queries.append(query)
    }

    private static func unique<T: Hashable>(_ values: [T]) -> [T] {
        var seen: Set<T> = []
        return values.filter { seen.insert($0).inserted }
    }

    /// Fills each tenant's cache from the results of `queries`, in order. What was asked for and
    /// not found, or found as another tenant's, is cached as absent.
    func fill(_ caches: inout [String: Cache], from results: [PGRows]) throws {
        for ((slot, index), rows) in zip(slots, results) {
            let prefetch = parts[index]
            try Self.fill(slot, rows, asked: prefetch, into: &caches[prefetch.tenant, default: Cache()])
        }
    }

    /// One query's rows into its tenant's cache, in place.
    private static func fill(_ slot: Slot, _ rows: PGRows, asked prefetch: Prefetch, into cache: inout Cache) throws {
        let tenant = prefetch.tenant
        switch slot {
        case .identities:
            for key in prefetch.identities { cache.identities[key] = .some(nil) }
            for row in rows {
                let identity = try Decode.identity(row)
                cache.identities[IdentityKey(provider: identity.provider, subject: identity.subject)] = identity
            }
        case .refreshTokens:
            for hash in prefetch.refreshTokens { cache.remember(refreshToken: nil, hash: hash) }
            for row in rows where try Decode.owned(row, by: tenant) {
                let hash = try row.decode("token_hash", as: PGBytes.self).bytes
                cache.remember(refreshToken: try Decode.refreshToken(row), hash: hash)
            }
        case .sessions:
            for id in prefetch.sessions { cache.sessions[id] = .some(nil) }
            for row in rows where try Decode.owned(row, by: tenant) {
                let session = try Decode.session(row, idColumn: "id")
                cache.sessions[session.id] = session
            }
        case .accessTokens:
            for hash in prefetch.accessTokens { cache.remember(accessToken: nil, hash: hash) }
            for row in rows where try Decode.owned(row, by: tenant) {
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
            for bucket in prefetch.rateLimitBuckets {
                cache.rateLimits[TenantScope.scoped(bucket, in: tenant)] = .some(nil)
            }
            for row in rows {
                cache.rateLimits[try row.decode("bucket", as: String.self)] = try Decode.rateLimit(row)
            }
        }
    }
}
