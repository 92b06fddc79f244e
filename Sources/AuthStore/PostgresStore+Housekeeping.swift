import AuthDomain
import Foundation
import PGStore

/// Rate limits shared by every replica, and the purge of what has expired.
extension PostgresStore {
    // MARK: - Housekeeping

    /// What `purgeExpired` removed.
    public struct Purge: Sendable, Equatable {
        public var requests = 0
        public var events = 0
        public var throttles = 0
        public var rateLimits = 0
        /// One-time codes past their lifetime.
        public var codes = 0
        /// Audit rows past their retention.
        public var auditRows = 0
        /// Passkey ceremonies' challenges past their lifetime, never answered.
        public var challenges = 0
        /// Sign in with Apple jobs finished before the audit trail's retention.
        public var appleJobs = 0
        /// Sessions ended over `endedSessionRetention` ago whose tokens were forgotten now.
        public var endedSessions = 0
        /// A table gave as many rows as one purge takes: there may be more; call again for them.
        public var isPartial = false

        public var total: Int {
            requests + events + throttles + rateLimits + codes + auditRows + challenges + appleJobs + endedSessions
        }
    }

    /// One stored password hash of the most common kind (algorithm and parameters), for making
    /// unknown e-mails cost what known ones do; nil without password accounts. Asked at the
    /// relay's start and every ten minutes on each replica, so it reads a sample, not every
    /// password identity (about a second a million accounts, and the table's pages through the
    /// cache): the first `sample` by e-mail address (the primary key's order), which has nothing
    /// to do with when an account was made or imported, and so with its hash's kind.
    public func typicalPasswordHash(sample: Int = 10_000) async throws -> String? {
        try await pool.withConnection { connection in
            try connection.query(Self.typicalPasswordHashQuery(sample: sample)).first?.decode("password_hash")
        }
    }

    static func typicalPasswordHashQuery(sample: Int) -> PGQuery {
        """
        WITH kinds AS (
            SELECT substring(password_hash from '^(\\$[^$]*\\$[^$]*\\$[^$]*\\$)') AS kind, password_hash
            FROM (SELECT password_hash FROM identities WHERE provider = 'password'
                  ORDER BY provider, subject LIMIT \(max(sample, 1))) AS sample
            WHERE password_hash IS NOT NULL)
        SELECT password_hash FROM kinds
        WHERE kind = (SELECT kind FROM kinds GROUP BY kind ORDER BY count(*) DESC, kind LIMIT 1)
        LIMIT 1
        """
    }

    /// Forgets what has expired, in one transaction: at most `limit` rows of each table that
    /// grows with logins (request ids and their kept answers past their expiry, one-time codes and
    /// passkey challenges past theirs, audit rows and finished Sign in with Apple jobs past the
    /// audit trail's retention), oldest first, and, with
    /// `windows`, every throttle row whose failures and lock are over and every rate-limit bucket
    /// whose window has passed.
    ///
    /// A purge of everything at once was one statement a table: ten minutes of kept answers at
    /// 1,000 logins/s is 600,000 rows, seconds of a PostgreSQL core and, as each page's first
    /// change after a checkpoint is logged whole, about their size in WAL, in one burst. A bounded
    /// purge is a short transaction; `Purge.isPartial` says when a table gave all it takes (there
    /// may be more), for the caller to come back (`OutboxRelay`, a round later). Rows another
    /// purge has locked are skipped, so replicas purging at once take different rows. The rows are
    /// found by their time's index and deleted by their address (`ctid`): deleted by key,
    /// PostgreSQL joined the slice to the whole table by hash, a scan of every row for each slice.
    /// Throttles and rate-limit buckets have no index on their time and are bounded by their
    /// windows: scanned once a purge cycle (`windows`), not once a slice.
    public func purgeExpired(
        at date: Date, throttleWindow: TimeInterval, rateLimitWindow: TimeInterval,
        auditRetention: TimeInterval = 400 * 86_400,
        endedSessionRetention: TimeInterval = PostgresStore.endedSessionRetention,
        limit: Int = 50_000, windows: Bool = true
    ) async throws -> Purge {
        let limit = max(limit, 1)
        let statements = Self.purgeStatements(
            at: date, throttleWindow: throttleWindow, rateLimitWindow: rateLimitWindow,
            auditRetention: auditRetention, endedSessionRetention: endedSessionRetention, limit: limit,
            windows: windows)
        let results = try await pool.withConnection { connection in try connection.pipeline(statements) }
        var purge = Purge()
        guard results.count == statements.count else { return purge }
        purge.requests = results[0].affectedRows
        purge.codes = results[1].affectedRows
        purge.auditRows = results[2].affectedRows
        purge.challenges = results[3].affectedRows
        purge.appleJobs = results[4].affectedRows
        purge.endedSessions = try results[5].first?.decode("sessions", as: Int.self) ?? 0
        let candidates = try results[5].first?.decode("candidates", as: Int.self) ?? 0
        purge.isPartial =
            [purge.requests, purge.codes, purge.auditRows, purge.challenges, purge.appleJobs].contains { $0 >= limit }
            || candidates >= Self.sessionSlice(limit) || purge.endedSessions < candidates
        if windows {
            purge.throttles = results[6].affectedRows
            purge.rateLimits = results[7].affectedRows
        }
        return purge
    }

    /// How long an ended session keeps its tokens: a week after it expired or was revoked (its
    /// tokens are answered as unknown from its end on; the week keeps them for a look).
    public static let endedSessionRetention: TimeInterval = 7 * 86_400

    /// The ended sessions a purge round looks at: a twenty-fifth of the other slices, as each
    /// brings its tokens (a refresh token for each refresh of its life). Of those it takes the
    /// oldest ended whose tokens come to at most `limit` (at least one session), so a round
    /// deletes about as many rows as a slice of another table whatever the sessions hold.
    static func sessionSlice(_ limit: Int) -> Int { max(limit / 25, 1) }

    /// `purgeExpired`'s statements, in its order: the five slices by rows, the ended sessions'
    /// tokens, then (with `windows`) the throttles and the rate-limit buckets.
    ///
    /// An ended session is marked with its last use (its newest refresh token's time, one index
    /// entry) by its address, and its tokens deleted by `session_id = ANY(ARRAY(…))`, an index scan
    /// a session: no join, which PostgreSQL planned as a hash join over every session or a nested
    /// loop over the slice for each session. All of it reads one snapshot, so the last use is
    /// read before the deletions.
    static func purgeStatements(
        at date: Date, throttleWindow: TimeInterval, rateLimitWindow: TimeInterval, auditRetention: TimeInterval,
        endedSessionRetention: TimeInterval = endedSessionRetention, limit: Int, windows: Bool
    ) -> [PGQuery] {
        var statements: [PGQuery] = [
            """
            DELETE FROM processed_requests WHERE ctid = ANY(ARRAY(
                SELECT ctid FROM processed_requests WHERE expires_at < \(date)
                ORDER BY expires_at LIMIT \(limit) FOR UPDATE SKIP LOCKED))
            """,
            """
            DELETE FROM one_time_codes WHERE ctid = ANY(ARRAY(
                SELECT ctid FROM one_time_codes WHERE expires_at < \(date)
                ORDER BY expires_at LIMIT \(limit) FOR UPDATE SKIP LOCKED))
            """,
            """
            DELETE FROM audit_log WHERE ctid = ANY(ARRAY(
                SELECT ctid FROM audit_log WHERE at < \(date - auditRetention)
                ORDER BY at LIMIT \(limit) FOR UPDATE SKIP LOCKED))
            """,
            """
            DELETE FROM webauthn_challenges WHERE ctid = ANY(ARRAY(
                SELECT ctid FROM webauthn_challenges WHERE expires_at < \(date)
                ORDER BY expires_at LIMIT \(limit) FOR UPDATE SKIP LOCKED))
            """,
            """
            DELETE FROM apple_jobs WHERE ctid = ANY(ARRAY(
                SELECT ctid FROM apple_jobs WHERE finished_at < \(date - auditRetention)
                ORDER BY finished_at LIMIT \(limit) FOR UPDATE SKIP LOCKED))
            """,
            """
            WITH picked AS MATERIALIZED (
                SELECT ctid AS address, id, least(expires_at, revoked_at) AS ended_at FROM sessions
                WHERE least(expires_at, revoked_at) < \(date - endedSessionRetention) AND last_used_at IS NULL
                ORDER BY least(expires_at, revoked_at) LIMIT \(Self.sessionSlice(limit)) FOR UPDATE SKIP LOCKED),
            candidates AS MATERIALIZED (
                SELECT address, ended_at,
                       (SELECT count(*) FROM refresh_tokens r WHERE r.session_id = picked.id) AS tokens
                FROM picked),
            chosen AS (
                SELECT address FROM (
                    SELECT address, sum(tokens) OVER w AS running, row_number() OVER w AS place FROM candidates
                    WINDOW w AS (ORDER BY ended_at ROWS UNBOUNDED PRECEDING)) AS c
                WHERE running <= \(limit) OR place = 1),
            ended AS (
                UPDATE sessions
                SET last_used_at = COALESCE(
                    (SELECT max(r.created_at) FROM refresh_tokens r WHERE r.session_id = sessions.id), created_at)
                WHERE ctid = ANY(ARRAY(SELECT address FROM chosen))
                RETURNING id),
            refresh AS (DELETE FROM refresh_tokens WHERE session_id = ANY(ARRAY(SELECT id FROM ended))),
            access AS (DELETE FROM access_tokens WHERE session_id = ANY(ARRAY(SELECT id FROM ended)))
            SELECT (SELECT count(*) FROM ended)::integer AS sessions,
                   (SELECT count(*) FROM candidates)::integer AS candidates
            """,
        ]
        if windows {
            statements += [
                """
                DELETE FROM login_throttle
                WHERE last_failure_at < \(date - throttleWindow) AND (locked_until IS NULL OR locked_until < \(date))
                """,
                "DELETE FROM rate_limits WHERE window_start < \(date - rateLimitWindow)",
            ]
        }
        return statements
    }
}
