import AuthDomain
import Foundation
import PGStore

/// Everything the service keeps in PostgreSQL, behind one type: the batch transaction the flows
/// write through, the reads that come before a batch, and the chores of the relay and operators.
///
/// All of the service's SQL lives in this folder.
public final class PostgresStore: Sendable {
    let pool: PGPool
    /// The connections batches are written on: never queued behind lookups and password attempts.
    private let writers: [PGDedicatedConnection]
    /// Password attempts have connections of their own: a burst of password logins never
    /// delays the lookups every other request waits for.
    private let attempts: PGPool

    /// - Parameters:
    ///   - pool: connections for lookups, the relay and chores; batches get one of their own
    ///     (preparing statements, or not, as the pool's do).
    ///   - writers: connections that write batches, each one at a time. Default: 1.
    ///   - attemptConnections: connections that count password attempts. Default: 1.
    public init(pool: PGPool, writers: Int = 1, attemptConnections: Int = 1) {
        self.pool = pool
        self.writers = (0..<max(writers, 1)).map {
            PGDedicatedConnection(
                conninfo: pool.conninfo, name: "pg-writer-\($0)", preparesStatements: pool.preparesStatements)
        }
        attempts = PGPool(
            conninfo: pool.conninfo, size: attemptConnections, preparesStatements: pool.preparesStatements)
    }

    /// Closes every connection.
    public func close() async {
        await pool.close()
        await attempts.close()
        for writer in writers { await writer.close() }
    }

    /// Brings the schema up to date (under an advisory lock, so replicas may race).
    /// - Returns: the versions applied now.
    @discardableResult
    public func migrate() async throws -> [Int] {
        try await pool.withConnection { try PGMigrator.migrate($0, migrations: Migrations.all) }
    }

    /// The highest applied migration, or nil for an empty database.
    public func schemaVersion() async throws -> Int? {
        try await pool.withConnection { try PGMigrator.currentVersion($0) }
    }

    // MARK: - Batches

    /// How one item of a batch ended.
    public enum ItemOutcome<Output: Sendable>: Sendable {
        /// Written; the output is what the body returned, with the events it wrote to the outbox.
        case written(Output, events: [OutboxEvent])
        /// The body refused it (its writes were dropped), with the error it threw.
        case refused(any Error)
        /// Its writes collided with a row another transaction committed meanwhile (a unique key),
        /// twice: its writes were dropped. Most often the same request, written by an attempt
        /// whose commit was not acknowledged; looking its id up again tells.
        case conflict
    }

    /// Runs `body` for each item, in order, in one transaction, and commits.
    ///
    /// `head` runs in the transaction's first round trip, before the bodies (bookkeeping such as
    /// marking events published; statements that find their rows by a unique key, as they run
    /// from cached plans: `KeyedPlans`); `prefetch` names the rows the bodies will read, fetched
    /// and locked in the same round trip.
    /// A body that throws leaves none of its writes behind and does not disturb the others.
    ///
    /// When the batch's writes fail on the server (a row another replica wrote meanwhile), the
    /// batch runs again carefully: each item in a savepoint of its own, reading every row afresh,
    /// and an item that still fails is refused with the database's error; the others commit.
    /// - Throws: a retriable `PGError` (the server is unreachable, a deadlock): nothing was
    ///   committed, and the whole batch can be tried again.
    /// - Parameter writer: which writing connection (batches on one are written one at a time).
    public func runBatch<Item: Sendable, Output: Sendable>(
        _ items: [Item], head: [PGQuery] = [], prefetch: Prefetch, writer: Int = 0,
        onRefusal: @escaping @Sendable (Item, any Error, any UnitOfWork) throws -> Void = { _, _, _ in },
        _ body: @escaping @Sendable (Item, any UnitOfWork) throws -> Output
    ) async throws -> [ItemOutcome<Output>] {
        try await writers[writer % writers.count].withConnection { connection in
            do {
                return try Self.runTogether(
                    items, head: head, prefetch: prefetch, connection: connection, onRefusal: onRefusal, body)
            } catch let error as PGError where !error.isRetriable {
                _ = try? connection.execute(unsafeSQL: "ROLLBACK")
                return try Self.runCarefully(items, head: head, connection: connection, onRefusal: onRefusal, body)
            } catch {
                _ = try? connection.execute(unsafeSQL: "ROLLBACK")
                throw error
            }
        }
    }

    /// Writes a batch of requests, notifications and audit rows in one transaction (`runBatch`):
    /// each item's body is its own domain code (`WriteItem.write`, through the `UnitOfWork`), and
    /// a refused item leaves only what `WriteItem.recordRefusal` records.
    public func write(
        _ items: [WriteItem], head: [PGQuery] = [], prefetch: Prefetch, writer: Int = 0, resultsKey: [UInt8]?,
        rememberedUntil: Date, at now: Date
    ) async throws -> [ItemOutcome<WriteOutput>] {
        let writing = Self.writing(resultsKey: resultsKey, rememberedUntil: rememberedUntil, at: now)
        return try await runBatch(
            items, head: head, prefetch: prefetch, writer: writer, onRefusal: writing.onRefusal, writing.body)
    }

    /// How a batch of `WriteItem`s is written (`write`, `lookUpAndWrite`): each item's own domain
    /// code, and what a refused item leaves.
    private static func writing(resultsKey: [UInt8]?, rememberedUntil: Date, at now: Date) -> (
        onRefusal: @Sendable (WriteItem, any Error, any UnitOfWork) throws -> Void,
        body: @Sendable (WriteItem, any UnitOfWork) throws -> WriteOutput
    ) {
        (
            { item, error, unit in try item.recordRefusal(error, in: unit, at: now) },
            { item, unit in try item.write(unit, resultsKey: resultsKey, rememberedUntil: rememberedUntil, at: now) }
        )
    }

    /// What a write that carries its own lookup did (`lookUpAndWrite`).
    public enum LookedUpWrite: Sendable {
        case written([ItemOutcome<WriteOutput>])
        /// Rolled back, nothing kept and no guest sign-up reserved: `accept` declined what the
        /// lookup found, or a statement failed. The caller takes the ordinary way (a lookup, then
        /// a batch), which answers each case.
        case declined
    }

    /// Looks request ids up (and reserves the guest ceiling, as `lookUp`) in the first round trip
    /// of the transaction that writes `items`, and writes them when `accept` takes what was found:
    /// a batch of one under light load costs two round trips instead of three.
    ///
    /// The guest ceiling's row stays locked until the commit, a millisecond or two: no batch's
    /// body touches it, and only one lookup runs at a time, so nothing in this worker waits on it
    /// (a lookup of another replica may, that long).
    public func lookUpAndWrite(
        _ items: [WriteItem], ids: [String], guests: [String], bucket: String, limit: WorkerConfiguration.RateLimit,
        head: [PGQuery] = [], prefetch: Prefetch, writer: Int, resultsKey: [UInt8]?, rememberedUntil: Date,
        at now: Date, accept: @escaping @Sendable (_ kept: [String: KeptRequest], _ guests: RateLimitGrant?) -> Bool
    ) async throws -> LookedUpWrite {
        let ceiling =
            guests.isEmpty || limit.count <= 0 ? [] : [Self.ceilingQuery(guests, bucket: bucket, limit: limit, at: now)]
        return try await writers[writer % writers.count].withConnection { connection in
            let unit = PostgresUnitOfWork(connection: connection)
            do {
                let answers = try unit.begin(
                    first: ceiling, head: [Self.keptRequestsQuery(ids)] + head, prefetch: prefetch)
                guard answers.count == ceiling.count + 1 + head.count else {
                    throw PGError(.decoding, detail: "the lookup's answers are missing")
                }
                let grant = try ceiling.isEmpty ? nil : Self.grant(answers[0])
                guard accept(try Self.keptRequests(answers[ceiling.count]), grant) else {
                    try connection.execute(unsafeSQL: "ROLLBACK")
                    return .declined
                }
                let writing = Self.writing(resultsKey: resultsKey, rememberedUntil: rememberedUntil, at: now)
                return .written(try Self.runBodies(items, unit: unit, onRefusal: writing.onRefusal, writing.body))
            } catch let error as PGError where !error.isRetriable {
                _ = try? connection.execute(unsafeSQL: "ROLLBACK")
                return .declined
            } catch {
                _ = try? connection.execute(unsafeSQL: "ROLLBACK")
                throw error
            }
        }
    }

    /// Runs `body` in a transaction of its own (a notification, an operator command).
    public func transaction<Output: Sendable>(_ body: @escaping @Sendable (any UnitOfWork) throws -> Output)
        async throws -> Output
    {
        let outcomes = try await runBatch([0], prefetch: Prefetch()) { _, unit in try body(unit) }
        switch outcomes.first {
        case .written(let output, _): return output
        case .refused(let error): throw error
        case .conflict: throw StoreError.conflict
        case nil: throw StoreError.handlesExhausted
        }
    }

    /// The fast way: cached reads, every item's writes sent together with the `COMMIT`.
    private static func runTogether<Item, Output>(
        _ items: [Item], head: [PGQuery], prefetch: Prefetch, connection: PGConnection,
        onRefusal: (Item, any Error, any UnitOfWork) throws -> Void, _ body: (Item, any UnitOfWork) throws -> Output
    ) throws -> [ItemOutcome<Output>] {
        let unit = PostgresUnitOfWork(connection: connection)
        try unit.begin(head: head, prefetch: prefetch)
        return try runBodies(items, unit: unit, onRefusal: onRefusal, body)
    }

    /// Each item's body in the transaction `unit` began, then the writes and the `COMMIT`.
    private static func runBodies<Item, Output>(
        _ items: [Item], unit: PostgresUnitOfWork, onRefusal: (Item, any Error, any UnitOfWork) throws -> Void,
        _ body: (Item, any UnitOfWork) throws -> Output
    ) throws -> [ItemOutcome<Output>] {
        var outcomes: [ItemOutcome<Output>] = []
        outcomes.reserveCapacity(items.count)
        for item in items {
            unit.beginRequest()
            do {
                let output = try body(item, unit)
                outcomes.append(.written(output, events: unit.currentEvents))
                unit.endRequest()
            } catch let error as PGError {
                // A failed statement aborts the transaction: no item can go on in it.
                throw error
            } catch {
                unit.discardRequest()
                // What a refusal leaves (its audit row) rides in the same transaction.
                unit.beginRequest()
                try onRefusal(item, error, unit)
                unit.endRequest()
                outcomes.append(.refused(error))
            }
        }
        try unit.commit()
        return outcomes
    }

    /// The careful way: one savepoint per item, every read from the server.
    private static func runCarefully<Item, Output>(
        _ items: [Item], head: [PGQuery], connection: PGConnection,
        onRefusal: (Item, any Error, any UnitOfWork) throws -> Void, _ body: (Item, any UnitOfWork) throws -> Output
    ) throws -> [ItemOutcome<Output>] {
        let unit = PostgresUnitOfWork(connection: connection, usesCache: false)
        try unit.begin(head: head, prefetch: Prefetch())
        var outcomes: [ItemOutcome<Output>] = []
        for item in items {
            var attempt = 1
            while true {
                try connection.execute(unsafeSQL: "SAVEPOINT item")
                unit.beginRequest()
                do {
                    let output = try body(item, unit)
                    let events = unit.currentEvents
                    unit.endRequest()
                    try unit.flush()
                    try connection.execute(unsafeSQL: "RELEASE SAVEPOINT item")
                    outcomes.append(.written(output, events: events))
                    break
                } catch let error as PGError where error.isRetriable {
                    throw error
                } catch let error as PGError {
                    unit.rollBackLastRequest()
                    try connection.execute(unsafeSQL: "ROLLBACK TO SAVEPOINT item")
                    try connection.execute(unsafeSQL: "RELEASE SAVEPOINT item")
                    // Once more with what the server holds now (another replica's row, say).
                    guard attempt == 2 else {
                        attempt += 1
                        continue
                    }
                    outcomes.append(error.isUniqueViolation ? .conflict : .refused(error))
                    break
                } catch {
                    unit.discardRequest()
                    try connection.execute(unsafeSQL: "ROLLBACK TO SAVEPOINT item")
                    try connection.execute(unsafeSQL: "RELEASE SAVEPOINT item")
                    unit.beginRequest()
                    try onRefusal(item, error, unit)
                    unit.endRequest()
                    try unit.flush()
                    outcomes.append(.refused(error))
                    break
                }
            }
        }
        try unit.commit()
        return outcomes
    }

    /// Takes published events out of the outbox, as the first statement of a batch's transaction.
    public static func markPublished(_ eventIDs: [UUID]) -> PGQuery {
        "DELETE FROM outbox WHERE event_id = ANY(\(PGArray(eventIDs)))"
    }

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
    private func reading<T: Sendable>(on connection: ReadConnection, _ body: @Sendable (PGConnection) throws -> T)
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
    private static func ceilingQuery(
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
    private static func grant(_ rows: PGRows) throws -> RateLimitGrant? {
        try rows.first.map { row in
            RateLimitGrant(granted: try row.decode("granted"), windowEnd: try row.decode("window_end"))
        }
    }

    private static func keptRequestsQuery(_ ids: [String]) -> PGQuery {
        """
        SELECT request_id, request_digest, result_sealed FROM processed_requests
        WHERE request_id = ANY(\(PGArray(ids)))
        """
    }

    private static func keptRequests(_ rows: PGRows) throws -> [String: KeptRequest] {
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

    // MARK: - The outbox

    /// Takes published events out of the outbox.
    public func markPublished(_ eventIDs: [UUID]) async throws {
        guard !eventIDs.isEmpty else { return }
        try await pool.withConnection { try $0.query(Self.markPublished(eventIDs)) }
    }

    /// How many events wait in the outbox (written, not yet acknowledged by the broker).
    public static let outboxBacklog: PGQuery = "SELECT count(*) AS backlog FROM outbox WHERE published_at IS NULL"

    /// Events left unpublished (oldest first), for the relay that runs after a crash.
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

    // MARK: - Housekeeping

    public func reserveRateLimits(_ reservations: [RateLimitReservation], at date: Date) async throws
        -> [RateLimitGrant]
    {
        guard !reservations.isEmpty else { return [] }
        return try await attempts.withConnection { connection in
            var grants: [RateLimitGrant] = []
            for reservation in reservations {
                let row = try connection.query(
                    """
                    SELECT granted, window_end FROM auth_reserve_rate_limit(
                        \(reservation.bucket), \(date), make_interval(secs => \(reservation.limit.window)),
                        \(Self.integer(reservation.limit.count)), \(Self.integer(reservation.wanted)))
                    """
                ).first
                guard let row else { throw PGError(.decoding, detail: "a rate limit was not reserved") }
                let grant = RateLimitGrant(granted: try row.decode("granted"), windowEnd: try row.decode("window_end"))
                grants.append(grant)
                // A refusal takes nothing from the buckets after it.
                if grant.granted < reservation.wanted { break }
            }
            return grants
        }
    }

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

    // MARK: - Apple's REST API

    /// Takes up to `limit` due jobs, each leased for `lease` (another replica skips them, and
    /// takes them again if this one dies before it finishes).
    public func claimAppleJobs(limit: Int, at date: Date, lease: TimeInterval) async throws -> [AppleJob] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                UPDATE apple_jobs SET next_attempt_at = \(date + lease)
                WHERE id IN (SELECT id FROM apple_jobs WHERE finished_at IS NULL AND next_attempt_at <= \(date)
                             ORDER BY next_attempt_at, id LIMIT \(limit) FOR UPDATE SKIP LOCKED)
                RETURNING id, kind, subject, client_id, secret_sealed, attempts, created_at
                """
            ).map { row in
                AppleJob(
                    id: try row.decode("id"), kind: AppleJob.Kind(rawValue: try row.decode("kind")) ?? .revoke,
                    subject: try row.decode("subject"), clientID: try row.decode("client_id"),
                    secretSealed: try row.decode("secret_sealed", as: PGBytes.self).bytes,
                    attempts: try row.decode("attempts"), createdAt: try row.decode("created_at"))
            }
        }
    }

    /// Ends a job for good (done, or definitely refused), with its audit row.
    public func finishAppleJob(_ job: AppleJob, outcome: String, at date: Date) async throws {
        try await pool.withConnection { connection in
            try connection.pipeline([
                "BEGIN",
                """
                UPDATE apple_jobs SET finished_at = \(date), outcome = \(outcome), secret_sealed = ''::bytea
                WHERE id = \(job.id)
                """,
                """
                INSERT INTO audit_log (at, action, outcome, request_id, actor)
                VALUES (\(date), \("apple_" + job.kind.rawValue), \(outcome), \(job.id.lowercasedString), 'worker')
                """,
                "COMMIT",
            ])
        }
    }

    /// Tries a job again at `next`.
    public func retryAppleJob(_ job: AppleJob, at next: Date) async throws {
        try await pool.withConnection { connection in
            _ = try connection.query(
                "UPDATE apple_jobs SET attempts = attempts + 1, next_attempt_at = \(next) WHERE id = \(job.id)")
        }
    }

    /// Keeps the refresh token an exchange brought, and finishes the exchange, in one
    /// transaction. The token is kept only for the account whose sign-in brought the code: when
    /// the Apple identity is gone meanwhile, or is a newer one (the account was deleted and the
    /// same Apple user signed up again before the exchange ran), its revocation is queued instead.
    /// A token it replaces that a deleted account left behind for the same subject is revoked
    /// too, never dropped while Apple still honours it.
    /// - Parameters:
    ///   - revocationID: the id of the job that revokes the exchanged token, if it is not kept.
    ///   - replacedRevocationID: the id of the job that revokes the token it replaces, if any.
    /// - Returns: true when kept, false when its revocation was queued.
    public func keepAppleToken(
        from exchange: AppleJob, refreshTokenSealed: [UInt8], revocationID: UUID, replacedRevocationID: UUID,
        at date: Date
    ) async throws -> Bool {
        try await pool.withConnection { connection in
            try connection.withTransaction { connection in
                let kept = try !connection.query(
                    """
                    SELECT 1 AS found FROM identities
                    WHERE provider = 'apple' AND subject = \(exchange.subject)
                      AND created_at <= (SELECT created_at FROM apple_jobs WHERE id = \(exchange.id))
                    FOR UPDATE
                    """
                ).isEmpty
                var statements: [PGQuery] = [
                    """
                    UPDATE apple_jobs
                    SET finished_at = \(date), outcome = \(kept ? "exchanged" : "exchanged_after_deletion"),
                        secret_sealed = ''::bytea
                    WHERE id = \(exchange.id)
                    """
                ]
                if kept {
                    // A token kept before this account's identity was made is a deleted account's:
                    // revoked. The same account's earlier token is replaced without a revocation:
                    // Apple's revocation ends the user's authorization of the app, the new token's too.
                    let replaced = try connection.query(
                        """
                        SELECT t.client_id, t.refresh_token_sealed
                        FROM apple_tokens t JOIN identities i ON i.provider = 'apple' AND i.subject = t.subject
                        WHERE t.subject = \(exchange.subject) AND t.updated_at < i.created_at
                        FOR UPDATE OF t
                        """
                    ).first
                    if let replaced {
                        statements.append(
                            """
                            INSERT INTO apple_jobs (id, kind, subject, client_id, secret_sealed, next_attempt_at, created_at)
                            VALUES (\(replacedRevocationID), 'revoke', \(exchange.subject),
                                    \(try replaced.decode("client_id", as: String.self)),
                                    \(try replaced.decode("refresh_token_sealed", as: PGBytes.self)), \(date), \(date))
                            """)
                    }
                    statements.append(
                        """
                        INSERT INTO apple_tokens (subject, client_id, refresh_token_sealed, updated_at)
                        VALUES (\(exchange.subject), \(exchange.clientID), \(PGBytes(refreshTokenSealed)), \(date))
                        ON CONFLICT (subject) DO UPDATE SET client_id = EXCLUDED.client_id,
                            refresh_token_sealed = EXCLUDED.refresh_token_sealed, updated_at = EXCLUDED.updated_at
                        """)
                } else {
                    statements.append(
                        """
                        INSERT INTO apple_jobs (id, kind, subject, client_id, secret_sealed, next_attempt_at, created_at)
                        VALUES (\(revocationID), 'revoke', \(exchange.subject), \(exchange.clientID),
                                \(PGBytes(refreshTokenSealed)), \(date), \(date))
                        """)
                }
                try connection.pipeline(statements)
                return kept
            }
        }
    }

    /// Jobs not finished, and the age of the oldest: the backlog an alert watches.
    public func appleJobBacklog(at date: Date) async throws -> (count: Int, oldest: TimeInterval) {
        try await pool.withConnection { connection in
            let row = try connection.query(
                """
                SELECT count(*) AS n, COALESCE(EXTRACT(EPOCH FROM \(date) - min(created_at)), 0)::float8 AS oldest
                FROM apple_jobs WHERE finished_at IS NULL
                """
            ).first
            return (try row?.decode("n", as: Int.self) ?? 0, try row?.decode("oldest", as: Double.self) ?? 0)
        }
    }

    /// A user's audit trail, oldest first (`auth-worker users audit`).
    public func auditTrail(userID: UUID, since: Date?) async throws -> [AuditEntry] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                \(unsafeRaw: PostgresUnitOfWork.auditColumns)
                WHERE user_id = \(userID) AND at >= \(since ?? Date(timeIntervalSince1970: 0)) ORDER BY at, id
                """
            ).map(Decode.audit)
        }
    }

    // MARK: - Operators

    /// Guests created before `cutoff` that never gained an identity, oldest first.
    public func staleGuests(createdBefore cutoff: Date, limit: Int) async throws -> [UUID] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT id FROM users
                WHERE is_guest AND created_at < \(cutoff)
                  AND NOT EXISTS (SELECT 1 FROM identities WHERE identities.user_id = users.id)
                ORDER BY created_at LIMIT \(limit)
                """
            ).map { try $0.decode("id", as: UUID.self) }
        }
    }

    /// What `auth-worker users show` prints: the user, identities and sessions, never a secret.
    public func userReport(_ idOrEmail: String) async throws -> UserReport? {
        try await pool.withConnection { try UserReport.load(idOrEmail, connection: $0) }
    }

}

extension PostgresStore: PasswordAttempts {}
