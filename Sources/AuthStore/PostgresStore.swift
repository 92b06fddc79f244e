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
    let writers: [PGDedicatedConnection]
    /// Password attempts have connections of their own: a burst of password logins never
    /// delays the lookups every other request waits for.
    let attempts: PGPool

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
    /// - Parameters:
    ///   - writer: which writing connection (batches on one are written one at a time).
    ///   - tenant: whose rows an item reads and writes: every statement of its body is that
    ///     tenant's (default: a `WriteItem`'s own, the default tenant for anything else).
    public func runBatch<Item: Sendable, Output: Sendable>(
        _ items: [Item], head: [PGQuery] = [], prefetch: Prefetch, writer: Int = 0,
        tenant: @escaping @Sendable (Item) -> String = { ($0 as? WriteItem)?.tenant ?? TenantScope.defaultName },
        onRefusal: @escaping @Sendable (Item, any Error, any UnitOfWork) throws -> Void = { _, _, _ in },
        _ body: @escaping @Sendable (Item, any UnitOfWork) throws -> Output
    ) async throws -> [ItemOutcome<Output>] {
        try await writers[writer % writers.count].withConnection { connection in
            do {
                return try connection.withPipelinedTransaction { transaction in
                    try Self.runTogether(
                        items, head: head, prefetch: prefetch, transaction: transaction, tenant: tenant,
                        onRefusal: onRefusal, body)
                }
            } catch let error as PGError where !error.isRetriable {
                // A statement of the batch failed (and was rolled back): item by item instead.
                return try connection.withPipelinedTransaction { transaction in
                    try Self.runCarefully(
                        items, head: head, transaction: transaction, tenant: tenant, onRefusal: onRefusal, body)
                }
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
            items, head: head, prefetch: prefetch, writer: writer, tenant: \.tenant, onRefusal: writing.onRefusal,
            writing.body)
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
        _ items: [WriteItem], ids: [RequestKey], guests: [RequestKey], bucket: String,
        limit: WorkerConfiguration.RateLimit,
        head: [PGQuery] = [], prefetch: Prefetch, writer: Int, resultsKey: [UInt8]?, rememberedUntil: Date,
        at now: Date, accept: @escaping @Sendable (_ kept: [RequestKey: KeptRequest], _ guests: RateLimitGrant?) -> Bool
    ) async throws -> LookedUpWrite {
        let ceiling =
            guests.isEmpty || limit.count <= 0 ? [] : [Self.ceilingQuery(guests, bucket: bucket, limit: limit, at: now)]
        return try await writers[writer % writers.count].withConnection { connection in
            do {
                return try connection.withPipelinedTransaction { transaction in
                    let unit = PostgresUnitOfWork(transaction: transaction)
                    let answers = try unit.begin(
                        first: ceiling, head: [Self.keptRequestsQuery(ids)] + head, prefetch: prefetch)
                    guard answers.count == ceiling.count + 1 + head.count else {
                        throw PGError(.decoding, detail: "the lookup's answers are missing")
                    }
                    let grant = try ceiling.isEmpty ? nil : Self.grant(answers[0])
                    guard accept(try Self.keptRequests(answers[ceiling.count]), grant) else {
                        try transaction.rollBack()
                        return .declined
                    }
                    let writing = Self.writing(resultsKey: resultsKey, rememberedUntil: rememberedUntil, at: now)
                    return .written(
                        try Self.runBodies(
                            items, unit: unit, tenant: \.tenant, onRefusal: writing.onRefusal, writing.body))
                }
            } catch let error as PGError where !error.isRetriable {
                // Rolled back: the ordinary way answers each request.
                return .declined
            }
        }
    }

    /// Runs `body` in a transaction of its own (a notification, an operator command), as
    /// `tenant`'s: it reads and writes that tenant's rows only.
    public func transaction<Output: Sendable>(
        tenant: String, _ body: @escaping @Sendable (any UnitOfWork) throws -> Output
    ) async throws -> Output {
        let outcomes = try await runBatch([0], prefetch: Prefetch(), tenant: { _ in tenant }) { _, unit in
            try body(unit)
        }
        switch outcomes.first {
        case .written(let output, _): return output
        case .refused(let error): throw error
        case .conflict: throw StoreError.conflict
        case nil: throw StoreError.handlesExhausted
        }
    }

    /// The fast way: cached reads, every item's writes sent together with the `COMMIT`.
    private static func runTogether<Item, Output>(
        _ items: [Item], head: [PGQuery], prefetch: Prefetch, transaction: PGTransaction, tenant: (Item) -> String,
        onRefusal: (Item, any Error, any UnitOfWork) throws -> Void, _ body: (Item, any UnitOfWork) throws -> Output
    ) throws -> [ItemOutcome<Output>] {
        let unit = PostgresUnitOfWork(transaction: transaction)
        try unit.begin(head: head, prefetch: prefetch)
        return try runBodies(items, unit: unit, tenant: tenant, onRefusal: onRefusal, body)
    }

    /// Each item's body in the transaction `unit` began, then the writes and the `COMMIT`.
    private static func runBodies<Item, Output>(
        _ items: [Item], unit: PostgresUnitOfWork, tenant: (Item) -> String,
        onRefusal: (Item, any Error, any UnitOfWork) throws -> Void,
        _ body: (Item, any UnitOfWork) throws -> Output
    ) throws -> [ItemOutcome<Output>] {
        var outcomes: [ItemOutcome<Output>] = []
        outcomes.reserveCapacity(items.count)
        for item in items {
            unit.beginRequest(tenant: tenant(item))
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
                unit.beginRequest(tenant: tenant(item))
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
        _ items: [Item], head: [PGQuery], transaction: PGTransaction, tenant: (Item) -> String,
        onRefusal: (Item, any Error, any UnitOfWork) throws -> Void, _ body: (Item, any UnitOfWork) throws -> Output
    ) throws -> [ItemOutcome<Output>] {
        let unit = PostgresUnitOfWork(transaction: transaction, usesCache: false)
        try unit.begin(head: head, prefetch: Prefetch())
        var outcomes: [ItemOutcome<Output>] = []
        for item in items {
            var attempt = 1
            while true {
                try transaction.savepoint()
                unit.beginRequest(tenant: tenant(item))
                do {
                    let output = try body(item, unit)
                    let events = unit.currentEvents
                    unit.endRequest()
                    try unit.flush()
                    try transaction.releaseSavepoint()
                    outcomes.append(.written(output, events: events))
                    break
                } catch let error as PGError where error.isRetriable {
                    throw error
                } catch let error as PGError {
                    unit.rollBackLastRequest()
                    try transaction.rollBackToSavepoint()
                    // Once more with what the server holds now (another replica's row, say).
                    guard attempt == 2 else {
                        attempt += 1
                        continue
                    }
                    outcomes.append(error.isUniqueViolation ? .conflict : .refused(error))
                    break
                } catch {
                    unit.discardRequest()
                    try transaction.rollBackToSavepoint()
                    unit.beginRequest(tenant: tenant(item))
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
    public static func deletePublished(_ eventIDs: [UUID]) -> PGQuery {
        "DELETE FROM outbox WHERE event_id = ANY(\(PGArray(eventIDs)))"
    }
}
