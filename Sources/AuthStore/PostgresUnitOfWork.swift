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
    /// The transaction it writes in: begun with the batch's reads, committed with its last writes.
    let transaction: PGTransaction
    var connection: PGConnection { transaction.connection }
    /// Off in the careful retry of a batch: every read then goes to the server.
    var usesCache: Bool
    /// The tenant of the request in progress: every statement reads and writes its rows only.
    private(set) var tenant = TenantScope.defaultName
    /// The rows read for the batch, the tenant's in progress.
    var cache = Cache()
    /// The other tenants' caches and handles in use, while a request of one tenant is in progress.
    private var otherTenants: [String: (cache: Cache, handles: Set<String>)] = [:]
    /// Writes of the requests that ended well, not yet sent.
    var batch = Writes()
    /// Writes of the request in progress.
    var current = Writes()
    /// Handles given to users inserted by this batch.
    var handlesInUse: Set<String> = []
    /// Rate-limit uses counted by the batch's finished requests, by bucket.
    var rateLimitUses: [String: Int] = [:]
    /// The events the request in progress wrote to the outbox.
    var currentEvents: [OutboxEvent] { current.events }

    init(transaction: PGTransaction, usesCache: Bool = true) {
        self.transaction = transaction
        self.usesCache = usesCache
    }

    // MARK: - Requests

    /// Starts collecting one request's writes, as `tenant`'s.
    func beginRequest(tenant: String) {
        if tenant != self.tenant { switchTenant(to: tenant) }
        current = Writes()
        lastEndedHandles = []
    }

    /// Puts the tenant's cache and handles in place, keeping those of the tenant before.
    private func switchTenant(to tenant: String) {
        otherTenants[self.tenant] = (cache, handlesInUse)
        let next = otherTenants.removeValue(forKey: tenant)
        cache = next?.cache ?? Cache()
        handlesInUse = next?.handles ?? []
        self.tenant = tenant
    }

    /// A key of a row without a tenant column (a rate-limit window, a throttle), as the tenant's.
    func scoped(_ key: String) -> String { TenantScope.scoped(key, in: tenant) }

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
        let results = Array(try transaction.begin(with: trip.statements))
        let answers = trip.answers.flatMap { results[$0] }
        guard usesCache else { return answers }
        var caches: [String: Cache] = [:]
        try reads.fill(&caches, from: Array(results[trip.reads]))
        for (tenant, filled) in caches {
            if tenant == self.tenant {
                cache = filled
            } else {
                otherTenants[tenant] = (filled, otherTenants[tenant]?.handles ?? [])
            }
        }
        return answers
    }

    /// The statements of a transaction's first round trip, and where the answers are among them.
    struct FirstRoundTrip {
        /// After the `BEGIN` the transaction sends first.
        private(set) var statements: [PGQuery] = []
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
        // The counted uses are on the server now: the cached buckets hold them, as the upsert did
        // (a bucket's key is its tenant's: `scoped`).
        if !rateLimitUses.isEmpty {
            Self.count(rateLimitUses, windows: windows, in: &cache)
            for (tenant, var other) in otherTenants {
                Self.count(rateLimitUses, windows: windows, in: &other.cache)
                otherTenants[tenant] = other
            }
        }
        rateLimitUses = [:]
        guard !statements.isEmpty else { return }
        try connection.pipeline(statements)
    }

    private static func count(
        _ uses: [String: Int], windows: [String: (at: Date, window: TimeInterval)], in cache: inout Cache
    ) {
        for (bucket, uses) in uses {
            guard let (at, window) = windows[bucket] else { continue }
            if case .some(.some(let row)) = cache.rateLimits[bucket], row.windowStart > at - window {
                cache.rateLimits[bucket] = RateLimitRow(windowStart: row.windowStart, count: row.count + uses)
            } else if cache.rateLimits[bucket] != nil {
                cache.rateLimits[bucket] = RateLimitRow(windowStart: at, count: uses)
            }
        }
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
        let statements = batch.queries(cachingInsertPlans: true)
        batch = Writes()
        try transaction.commit(with: statements)
    }

    /// Flushes before a read the cache cannot answer, so the server sees the batch's writes.
    func query(_ query: PGQuery) throws -> PGRows {
        try flush()
        return try connection.query(query)
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
struct Cache {
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
