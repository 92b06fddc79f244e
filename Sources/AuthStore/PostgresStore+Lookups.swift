import AuthDomain
import Foundation
import PGStore

/// What the pipeline reads before a batch: kept answers, the guest ceiling, password attempts.
extension PostgresStore {
    // MARK: - Before a batch

    /// Which connection a read before a batch runs on.
    public enum ReadConnection: Sendable, Equatable {
        /// One of the pool's (the default).
        case pool
        /// A batch writer's, while it writes nothing: under light load the read and the write
        /// that follows run on one thread and one server process, both warm, instead of waking
        /// two of each. The caller keeps that writer's batches off it meanwhile (a batch queued
        /// behind the read would wait for it).
        case writer(Int)
    }

    /// The thread a batch writer's work runs on, for a task that uses only that writer (its
    /// batches, or a lookup read on it): started there, it wakes one thread instead of three.
    public func executor(ofWriter writer: Int) -> any TaskExecutor {
        writers[writer % writers.count].taskExecutor
    }

    /// Runs `body` on the connection `on` names.
    func reading<T: Sendable>(on connection: ReadConnection, _ body: @Sendable (PGConnection) throws -> T)
        async throws -> T
    {
        switch connection {
        case .pool: try await pool.withConnection(body)
        case .writer(let writer): try await writers[writer % writers.count].withConnection(body)
        }
    }

    /// The request ids among `ids` that were processed before, with their digests and kept answers.
    public func keptRequests(_ ids: [String], on connection: ReadConnection = .pool) async throws -> [String:
        KeptRequest]
    {
        guard !ids.isEmpty else { return [:] }
        // Read by key, from a cached plan (`KeyedPlans`; `LOCAL` to the round trip's implicit
        // transaction).
        let results = try await reading(on: connection) { connection in
            try connection.pipeline([KeyedPlans.cachedKeyedPlans, Self.keptRequestsQuery(ids)])
        }
        guard let rows = results.last else { throw PGError(.decoding, detail: "the lookup's answer is missing") }
        return try Self.keptRequests(rows)
    }

    /// `keptRequests`, and for the ids among `guests` that were not processed before, as many
    /// sign-ups as `limit` allows, taken from `bucket`: one round trip on one connection, one
    /// implicit transaction (the bucket is not touched when every guest was processed before).
    /// - Returns: the kept requests, and the grant (nil when no guest was new).
    public func lookUp(
        _ ids: [String], guests: [String], bucket: String, limit: WorkerConfiguration.RateLimit, at date: Date,
        on connection: ReadConnection = .pool
    ) async throws -> (kept: [String: KeptRequest], guests: RateLimitGrant?) {
        // The ceiling's count joins, planned per run; then the kept requests are read by key,
        // from a cached plan (`KeyedPlans`; to the end of the round trip's implicit transaction).
        let ceiling = Self.ceilingQuery(guests, bucket: bucket, limit: limit, at: date)
        let results = try await reading(on: connection) { connection in
            try connection.pipeline([ceiling, KeyedPlans.cachedKeyedPlans, Self.keptRequestsQuery(ids)])
        }
        guard results.count == 3, let ceiling = results.first, let kept = results.last else {
            throw PGError(.decoding, detail: "the lookup's answers are missing")
        }
        return (try Self.keptRequests(kept), try Self.grant(ceiling))
    }

    /// Reserves, for the ids among `guests` not processed before, as many sign-ups as `limit`
    /// allows from `bucket`; answers no row when none is new.
    static func ceilingQuery(
        _ guests: [String], bucket: String, limit: WorkerConfiguration.RateLimit, at date: Date
    ) -> PGQuery {
        """
        SELECT r.granted, r.window_end
        FROM (SELECT count(*)::integer AS wanted FROM unnest(\(PGArray(guests))) AS g(id)
              WHERE NOT EXISTS (SELECT 1 FROM processed_requests p WHERE p.request_id = g.id)) AS w,
             LATERAL auth_reserve_rate_limit(
                \(bucket), \(date), make_interval(secs => \(limit.window)),
                \(Self.integer(limit.count)), w.wanted) AS r
        WHERE w.wanted > 0
        """
    }

    /// The grant `ceilingQuery` answered; nil when no guest was new.
    static func grant(_ rows: PGRows) throws -> RateLimitGrant? {
        try rows.first.map { row in
            RateLimitGrant(granted: try row.decode("granted"), windowEnd: try row.decode("window_end"))
        }
    }

    static func keptRequestsQuery(_ ids: [String]) -> PGQuery {
        """
        SELECT request_id, request_digest, result_sealed FROM processed_requests
        WHERE request_id = ANY(\(PGArray(ids)))
        """
    }

    static func keptRequests(_ rows: PGRows) throws -> [String: KeptRequest] {
        var found: [String: KeptRequest] = [:]
        for row in rows {
            let kept = KeptRequest(
                requestID: try row.decode("request_id"),
                digest: try row.decode("request_digest", as: PGBytes?.self)?.bytes,
                resultSealed: try row.decode("result_sealed", as: PGBytes?.self)?.bytes)
            found[kept.requestID] = kept
        }
        return found
    }

    /// Counts a password attempt before it is verified, and reads the credential to verify it
    /// against, in one round trip. Counting first is what holds the limit when many attempts for
    /// one account arrive at once, on one replica or several.
    /// - Parameter email: the normalised address, nil when implausible (counted all the same).
    public func reservePasswordAttempt(key: String, email: String?, at date: Date, policy: ThrottlePolicy)
        async throws -> PasswordAttempt
    {
        let results = try await attempts.withConnection { connection in
            try connection.pipeline([
                """
                SELECT allowed, failures, locked_until FROM auth_reserve_password_attempt(
                    \(key), \(date), make_interval(secs => \(policy.window)), \(Self.integer(policy.threshold)),
                    make_interval(secs => \(policy.baseDelay)), make_interval(secs => \(policy.maximumDelay)))
                """,
                """
                SELECT user_id, password_hash FROM identities
                WHERE provider = 'password' AND subject = \(email) AND password_hash IS NOT NULL
                """,
            ])
        }
        guard results.count == 2, let reservation = results[0].first else {
            throw PGError(.decoding, detail: "the attempt was not counted")
        }
        let credential = try results[1].first.map {
            PasswordCredential(userID: try $0.decode("user_id"), passwordHash: try $0.decode("password_hash"))
        }
        return PasswordAttempt(
            allowed: try reservation.decode("allowed"), failures: try reservation.decode("failures"),
            lockedUntil: try reservation.decode("locked_until", as: Date?.self), credential: credential)
    }

    /// `value` as a PostgreSQL `integer` parameter: a threshold past its range (a configured
    /// "never", `Int.max`) is the largest it holds, not an out-of-range error on every attempt.
    static func integer(_ value: Int) -> Int { min(max(value, Int(Int32.min)), Int(Int32.max)) }

    /// The address of the password identity of the user an access token signs in as (by its
    /// session, or an opaque token's SHA-256): what `change_password` throttles and verifies.
    /// Nil when the token is unknown or its user has no password.
    public func passwordEmail(sessionID: UUID?, accessTokenHash: [UInt8]?) async throws -> String? {
        try await attempts.withConnection { connection in
            if let sessionID {
                return try connection.query(
                    """
                    SELECT i.subject FROM sessions s
                    JOIN identities i ON i.user_id = s.user_id AND i.provider = 'password'
                    WHERE s.id = \(sessionID)
                    """
                ).first?.decode("subject")
            }
            guard let accessTokenHash else { return nil }
            return try connection.query(
                """
                SELECT i.subject FROM access_tokens a
                JOIN sessions s ON s.id = a.session_id
                JOIN identities i ON i.user_id = s.user_id AND i.provider = 'password'
                WHERE a.token_hash = \(PGBytes(accessTokenHash))
                """
            ).first?.decode("subject")
        }
    }
}
