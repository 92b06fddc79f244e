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
    public func keptRequests(_ ids: [RequestKey], on connection: ReadConnection = .pool) async throws
        -> [RequestKey: KeptRequest]
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
        _ ids: [RequestKey], guests: [RequestKey], bucket: String, limit: WorkerConfiguration.RateLimit, at date: Date,
        on connection: ReadConnection = .pool
    ) async throws -> (kept: [RequestKey: KeptRequest], guests: RateLimitGrant?) {
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
        _ guests: [RequestKey], bucket: String, limit: WorkerConfiguration.RateLimit, at date: Date
    ) -> PGQuery {
        """
        SELECT r.granted, r.window_end
        FROM (SELECT count(*)::integer AS wanted
              FROM unnest(\(PGArray(guests.map(\.id))), \(PGArray(guests.map(\.tenant)))) AS g(id, tenant)
              WHERE NOT EXISTS (SELECT 1 FROM processed_requests p
                                WHERE p.request_id = g.id AND p.tenant = g.tenant)) AS w,
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

    /// Each (request id, tenant) probed by the key.
    static func keptRequestsQuery(_ ids: [RequestKey]) -> PGQuery {
        """
        SELECT p.request_id, p.tenant, p.request_digest, p.result_sealed
        FROM unnest(\(PGArray(ids.map(\.id))), \(PGArray(ids.map(\.tenant)))) AS k(id, tenant)
        CROSS JOIN LATERAL (
            SELECT request_id, tenant, request_digest, result_sealed FROM processed_requests
            WHERE request_id = k.id AND tenant = k.tenant LIMIT 1) AS p
        """
    }

    static func keptRequests(_ rows: PGRows) throws -> [RequestKey: KeptRequest] {
        var found: [RequestKey: KeptRequest] = [:]
        for row in rows {
            let kept = KeptRequest(
                requestID: try row.decode("request_id"),
                digest: try row.decode("request_digest", as: PGBytes?.self)?.bytes,
                resultSealed: try row.decode("result_sealed", as: PGBytes?.self)?.bytes)
            found[RequestKey(tenant: try row.decode("tenant"), id: kept.requestID)] = kept
        }
        return found
    }

    /// `value` as a PostgreSQL `integer` parameter: a threshold past its range (a configured
    /// "never", `Int.max`) is the largest it holds, not an out-of-range error on every attempt.
    static func integer(_ value: Int) -> Int { min(max(value, Int(Int32.min)), Int(Int32.max)) }
}
