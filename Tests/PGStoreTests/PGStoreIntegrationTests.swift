import Foundation
import Testing

@testable import PGStore
@testable import TestSupport

@Suite(.requiresDatabase, .timeLimit(.minutes(4))) struct PGStoreIntegrationTests {
    @Test func boundParametersRoundTripEveryType() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        let id = UUID()
        let date = Date(timeIntervalSince1970: 1_795_953_600.25)
        let hostile = "Robert'); DROP TABLE students;-- \u{1F600}"
        let row = try #require(
            try connection.query(
                """
                SELECT \(id)::uuid AS id, \(date)::timestamptz AS at, \(hostile)::text AS name,
                       \(PGBytes([0, 1, 254, 255]))::bytea AS bytes, \(["a,b", "c\"d"])::text[] AS list,
                       \(true)::boolean AS flag, \(Int64(1) << 40)::bigint AS big, \(nil as String?)::text AS nothing
                """
            ).first)
        #expect(try row.decode("id") == id)
        #expect(try row.decode("at") == date)
        #expect(try row.decode("name") == hostile)
        #expect(try row.decode("bytes", as: PGBytes.self).bytes == [0, 1, 254, 255])
        #expect(try row.decode("list", as: [String].self) == ["a,b", "c\"d"])
        #expect(try row.decode("flag") == true)
        #expect(try row.decode("big", as: Int64.self) == 1 << 40)
        #expect(try row.decode("nothing", as: String?.self) == nil)
        #expect(throws: PGError.self) { try row.decode("nothing", as: String.self) }
        #expect(throws: PGError.self) { try row.decode("missing", as: String.self) }
    }

    /// A statement's values go to libpq from one buffer, each NUL-terminated after its length:
    /// empty values, NULLs between values, binary values holding zero bytes and text beside them
    /// each arrive whole, in a pipeline as in a single query.
    @Test func valuesSideBySideArriveWhole() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        let query: PGQuery = """
            SELECT \("")::text AS empty, \(nil as String?)::text AS nothing, \(PGBytes([0, 0, 7, 0]))::bytea AS bytes,
                   \("après")::text AS word, \(PGArray([UUID(), UUID()])) AS ids, \(nil as Int?)::int AS none,
                   \(PGArray(["", "x"])) AS texts, \(42) AS last
            """
        for row in [try connection.query(query).first, try connection.pipeline([query, query])[1].first] {
            let row = try #require(row)
            #expect(try row.decode("empty") == "")
            #expect(try row.decode("nothing", as: String?.self) == nil)
            #expect(try row.decode("bytes", as: PGBytes.self).bytes == [0, 0, 7, 0])
            #expect(try row.decode("word") == "après")
            #expect(try row.decode("ids", as: [String].self).count == 2)
            #expect(try row.decode("none", as: Int?.self) == nil)
            #expect(try row.decode("texts", as: [String].self) == ["", "x"])
            #expect(try row.decode("last", as: Int.self) == 42)
        }
    }

    /// Arrays go in binary: every element type the store sends comes back as it went, NULLs,
    /// empty arrays, dates before 2000 and text PostgreSQL's array literals would have quoted
    /// included; a NUL in a text element is refused before anything is sent.
    @Test func binaryArraysRoundTripEveryElementType() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        func column<T: PGDecodable>(_ array: PGArray, as type: T.Type) throws -> [T?] {
            try connection.query("SELECT v FROM unnest(\(array)) WITH ORDINALITY AS t(v, n) ORDER BY n")
                .map { try $0.decode("v", as: T?.self) }
        }
        let ids = [UUID(), nil, UUID()]
        #expect(try column(PGArray(ids), as: UUID.self) == ids)
        let texts: [String?] = ["plain", "a,b", "say \"hi\"", "back\\slash", "", nil, "NULL", "{}", "\u{1F600} é"]
        #expect(try column(PGArray(texts), as: String.self) == texts)
        let dates = [
            Date(timeIntervalSince1970: 1_795_953_600.123456), Date(timeIntervalSince1970: -86_400.5),
            Date(timeIntervalSince1970: 946_684_800),
        ]
        #expect(try column(PGArray(dates), as: Date.self) == dates)
        #expect(try column(PGArray([true, false]), as: Bool.self) == [true, false])
        #expect(try column(PGArray([Int32.max, Int32.min, 0]), as: Int32.self) == [Int32.max, Int32.min, 0])
        #expect(try column(PGArray([Int64(1) << 40, -1]), as: Int64.self) == [1 << 40, -1])
        let bytes = [PGBytes([0, 1, 254, 255]), PGBytes([]), nil]
        #expect(try column(PGArray(bytes), as: PGBytes.self) == bytes)
        #expect(try column(PGArray([String]()), as: String.self).isEmpty)
        // A column of text arrays, each one element holding its literal, cast back by the statement.
        let lists = try connection.query(
            "SELECT v::text[] AS v FROM unnest(\(PGArray([["a", "b,c"], []]))) WITH ORDINALITY AS t(v, n) ORDER BY n"
        ).map { try $0.decode("v", as: [String].self) }
        #expect(lists == [["a", "b,c"], []])
        #expect(throws: PGError.self) { try connection.query("SELECT \(PGArray(["ok", "P\u{0}A"])) AS v") }
        #expect(try connection.query("SELECT 1 AS one").count == 1, "the connection is still usable")
    }

    /// libpq takes text parameters as C strings: `P\0A` would reach the server as `P`. The
    /// connection refuses such a parameter before anything is sent, and says which one.
    @Test func textParametersWithANULAreRefusedNotCutShort() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        try connection.execute(unsafeSQL: "CREATE TABLE ids (id text PRIMARY KEY)")
        try connection.query("INSERT INTO ids VALUES (\("P"))")
        #expect(throws: PGError.self) { try connection.query("INSERT INTO ids VALUES (\("P\u{0}A"))") }
        #expect(throws: PGError.self) { try connection.query("SELECT \(1), \("x\u{0}")::text AS v") }
        #expect(try connection.query("SELECT count(*) AS n FROM ids").first?.decode("n", as: Int64.self) == 1)
        #expect(try connection.query("SELECT \("ok")::text AS v").first?.decode("v") == "ok")
    }

    /// A server that goes away mid-session is the connection's problem, retriable. (The fault
    /// injection once stopped a replica on "server closed the connection unexpectedly", an error
    /// without SQLSTATE on a connection libpq still called OK, when PostgreSQL was killed during a
    /// batch; errors without SQLSTATE now count as connection errors. This test covers the
    /// common path, where libpq has already marked the connection bad; the fault injection, the
    /// rare one.)
    @Test func aServerThatGoesAwayIsARetriableConnectionError() throws {
        let url = try IntegrationEnvironment.makeDatabaseNow()
        let victim = try PGConnection(conninfo: url)
        let pid: Int = try #require(try victim.query("SELECT pg_backend_pid() AS pid").first?.decode("pid"))
        let killer = try PGConnection(conninfo: url)
        try killer.query("SELECT pg_terminate_backend(\(pid))")
        for _ in 0..<2 {
            do {
                try victim.query("SELECT 1 AS one")
                Issue.record("a terminated connection answered")
            } catch let error as PGError {
                #expect(error.isRetriable, "\(error.debugDescription)")
            }
        }
        #expect(!victim.isHealthy, "a terminated connection still says it is healthy: the pool would keep it")
    }

    @Test func transactionsRollBackWhenTheBodyThrows() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        try connection.execute(unsafeSQL: "CREATE TABLE t (v integer PRIMARY KEY)")
        struct Abort: Error {}
        #expect(throws: Abort.self) {
            try connection.withTransaction { connection in
                try connection.query("INSERT INTO t VALUES (\(1))")
                throw Abort()
            }
        }
        #expect(try connection.query("SELECT count(*) AS n FROM t").first?.decode("n", as: Int.self) == 0)
        try connection.withTransaction { try $0.query("INSERT INTO t VALUES (\(2))") }
        #expect(try connection.query("SELECT count(*) AS n FROM t").first?.decode("n", as: Int.self) == 1)
    }

    @Test func serverErrorsCarryTheirSQLState() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        try connection.execute(unsafeSQL: "CREATE TABLE t (v integer PRIMARY KEY)")
        try connection.query("INSERT INTO t VALUES (\(1))")
        do {
            try connection.query("INSERT INTO t VALUES (\(1))")
            Issue.record("expected a unique violation")
        } catch let error as PGError {
            #expect(error.isUniqueViolation)
            #expect(!error.isRetriable)
        }
        // The connection stays usable after an error.
        #expect(try connection.query("SELECT 1 AS one").first?.decode("one", as: Int.self) == 1)
    }

    @Test func pipelinesSendManyStatementsInOneRoundTrip() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        try connection.execute(unsafeSQL: "CREATE TABLE t (v integer PRIMARY KEY)")
        let inserts = (1...200).map { value -> PGQuery in "INSERT INTO t VALUES (\(value))" }
        let results = try connection.pipeline(inserts + ["SELECT count(*) AS n FROM t"])
        #expect(results.count == 201)
        #expect(try results.last?.first?.decode("n", as: Int.self) == 200)

        // A failure aborts the rest of the pipeline and rolls back its implicit transaction.
        #expect(throws: PGError.self) {
            try connection.pipeline(["INSERT INTO t VALUES (\(1000))", "INSERT INTO t VALUES (\(1))"])
        }
        #expect(try connection.query("SELECT count(*) AS n FROM t").first?.decode("n", as: Int.self) == 200)
    }

    /// The statements this connection has prepared, as the server lists them.
    private func preparedTexts(_ connection: PGConnection) throws -> [String] {
        try connection.execute(unsafeSQL: "SELECT statement FROM pg_prepared_statements ORDER BY statement")
            .map { try $0.decode("statement") }
    }

    /// A statement is prepared once per connection, the first time it runs (in a pipeline, in the
    /// same round trip), and then only run: the same text twice in one pipeline, the same text in
    /// later pipelines and plain queries, all share the one prepared statement, with the right results.
    @Test func statementsArePreparedOnceAndReused() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        try connection.execute(unsafeSQL: "CREATE TABLE t (v integer PRIMARY KEY)")
        let insert = "INSERT INTO t VALUES ($1)"
        let count = "SELECT count(*) AS n FROM t WHERE v > $1"
        for round in 0..<3 {
            let results = try connection.pipeline([
                "INSERT INTO t VALUES (\(round * 2))", "INSERT INTO t VALUES (\(round * 2 + 1))",
                "SELECT count(*) AS n FROM t WHERE v > \(-1)",
            ])
            #expect(try results[2].first?.decode("n", as: Int.self) == round * 2 + 2)
            #expect(
                try connection.query("SELECT count(*) AS n FROM t WHERE v > \(0)").first?.decode("n") == round * 2 + 1)
        }
        #expect(try preparedTexts(connection) == [insert, count].sorted())
    }

    /// Prepared statements are not transactional: one prepared in a transaction that rolls back
    /// is still there, and the connection, which recorded it, runs it again without preparing.
    @Test func aStatementPreparedInARolledBackTransactionStaysUsable() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        try connection.execute(unsafeSQL: "CREATE TABLE t (v integer PRIMARY KEY)")
        struct Abort: Error {}
        #expect(throws: Abort.self) {
            try connection.withTransaction { connection in
                try connection.pipeline(["INSERT INTO t VALUES (\(1))"])
                throw Abort()
            }
        }
        // A statement of the same pipeline fails after the first was prepared and run.
        #expect(throws: PGError.self) {
            try connection.withTransaction { connection in
                try connection.pipeline(["INSERT INTO t VALUES (\(2))", "INSERT INTO missing VALUES (\(3))"])
            }
        }
        try connection.pipeline(["INSERT INTO t VALUES (\(4))"])
        let left = try #require(try connection.execute(unsafeSQL: "SELECT count(*) AS n, min(v) AS v FROM t").first)
        #expect(try left.decode("n", as: Int.self) == 1)
        #expect(try left.decode("v", as: Int.self) == 4)
        #expect(try preparedTexts(connection) == ["INSERT INTO t VALUES ($1)"])
    }

    /// A statement that does not prepare (an error in it) is not recorded as prepared, and the
    /// statements after it, in later calls, still run.
    @Test func aStatementThatFailsToPrepareIsNotRecorded() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        for _ in 0..<2 {
            #expect(throws: PGError.self) { try connection.pipeline(["SELECT nonsense FROM nowhere WHERE 1 = \(1)"]) }
            #expect(throws: PGError.self) { try connection.query("SELECT nonsense FROM nowhere WHERE 1 = \(1)") }
        }
        #expect(try connection.pipeline(["SELECT \(7)::int AS v"]).first?.first?.decode("v", as: Int.self) == 7)
        #expect(try preparedTexts(connection) == ["SELECT $1::int AS v"])
    }

    /// When the server no longer has a statement (a pooler moved the session, or a `DEALLOCATE`),
    /// the error is retriable and the connection forgets what it had prepared: the retry, and
    /// every other statement, prepare again and succeed.
    @Test func aStatementTheServerLostIsPreparedAgainOnTheRetry() throws {
        let url = try IntegrationEnvironment.makeDatabaseNow()
        for losesItIn in ["query", "pipeline"] {
            let connection = try PGConnection(conninfo: url)
            #expect(try connection.query("SELECT \(1)::int AS v").first?.decode("v", as: Int.self) == 1)
            #expect(try connection.pipeline(["SELECT \(2)::int AS w"]).first?.first?.decode("w", as: Int.self) == 2)
            try connection.execute(unsafeSQL: "DEALLOCATE ALL")
            do {
                if losesItIn == "query" {
                    try connection.query("SELECT \(1)::int AS v")
                } else {
                    try connection.pipeline(["SELECT \(2)::int AS w"])
                }
                Issue.record("a deallocated statement ran (\(losesItIn))")
            } catch let error as PGError {
                #expect(error.sqlState == "26000")
                #expect(error.isRetriable)
            }
            #expect(try connection.query("SELECT \(3)::int AS v").first?.decode("v", as: Int.self) == 3)
            #expect(try connection.pipeline(["SELECT \(4)::int AS w"]).first?.first?.decode("w", as: Int.self) == 4)
            #expect(try preparedTexts(connection) == ["SELECT $1::int AS v", "SELECT $1::int AS w"])
        }
    }

    /// A migration that changes what a prepared statement returns (a column added under
    /// `SELECT *`) makes the server refuse the old plan once: retriable, and the retry prepares
    /// the statement again and sees the new column.
    @Test func aStatementWhoseResultChangedIsPreparedAgainOnTheRetry() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        try connection.execute(unsafeSQL: "CREATE TABLE t (v integer); INSERT INTO t VALUES (1)")
        #expect(try connection.query("SELECT * FROM t WHERE v = \(1)").first?.decode("v", as: Int.self) == 1)
        try connection.execute(unsafeSQL: "ALTER TABLE t ADD COLUMN w integer DEFAULT 2")
        do {
            try connection.query("SELECT * FROM t WHERE v = \(1)")
            Issue.record("the old plan ran")
        } catch let error as PGError {
            #expect(error.sqlState == "0A000")
            #expect(error.serverFunction == "RevalidateCachedQuery", "\(error.debugDescription)")
            #expect(error.isRetriable, "\(error.debugDescription)")
        }
        #expect(try connection.query("SELECT * FROM t WHERE v = \(1)").first?.decode("w", as: Int.self) == 2)
    }

    /// A prepared statement is planned for each run's values, as an unnamed one is. Left to
    /// PostgreSQL's default, a statement run a few times while its table was small switches to a
    /// generic plan, a sequential scan, and keeps it as the table grows until the next ANALYZE:
    /// in a benchmark from a fresh database the worker's request-id lookup made 1,120 scans over
    /// 1.9 million rows in one run, where planning each run's values made it 10 over 171.
    @Test func aPreparedLookupStaysAnIndexScanAsItsTableGrows() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        try connection.execute(
            unsafeSQL: """
                CREATE TABLE kept (id text PRIMARY KEY, body text) WITH (autovacuum_enabled = false);
                INSERT INTO kept SELECT 'r' || n, 'x' FROM generate_series(1, 5) AS n;
                ANALYZE kept;
                """)
        for n in 1...12 {
            let ids = ["r\(n % 4 + 1)", "r\(n % 4 + 2)"]
            #expect(try connection.query("SELECT id FROM kept WHERE id = ANY(\(ids))").count == 2)
        }
        try connection.execute(
            unsafeSQL: "INSERT INTO kept SELECT 'r' || n, repeat('x', 200) FROM generate_series(6, 50000) AS n")
        #expect(try connection.query("SELECT id FROM kept WHERE id = ANY(\(["r40000", "r40001"]))").count == 2)
        let prepared = try #require(
            try connection.execute(
                unsafeSQL: """
                    SELECT name, generic_plans FROM pg_prepared_statements WHERE statement LIKE '%FROM kept%'
                    """
            ).first)
        #expect(try prepared.decode("generic_plans", as: Int.self) == 0)
        let name: String = try prepared.decode("name")
        let plan = try connection.execute(unsafeSQL: "EXPLAIN EXECUTE \(name)('{r40000,r40001}')")
            .map { (try? $0.decode("QUERY PLAN", as: String.self)) ?? "" }.joined(separator: "\n")
        #expect(plan.contains("Index"), "\(plan)")
        #expect(!plan.contains("Seq Scan"), "\(plan)")
    }

    /// What the batch writer's last round trip relies on: `SET LOCAL plan_cache_mode = auto` lets
    /// an insert run from PostgreSQL's plan cache for the rest of that transaction only; a
    /// statement set back to `force_custom_plan` in it, and everything after the commit, is
    /// planned for each run's values again.
    @Test func cachedPlansAreForTheInsertsOfOneTransaction() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        try connection.execute(unsafeSQL: "CREATE TABLE rows (id integer PRIMARY KEY, body text)")
        var next = 0
        func commitRound() throws {
            next += 1
            let round: [PGQuery] = [
                "BEGIN", "SET LOCAL plan_cache_mode = auto",
                "INSERT INTO rows SELECT * FROM unnest(\(PGArray([Int32(next)])), \(PGArray(["x"])))",
                "SET LOCAL plan_cache_mode = force_custom_plan",
                "UPDATE rows SET body = \("y") WHERE id = \(next)", "COMMIT",
            ]
            try connection.pipeline(round)
        }
        for _ in 1...8 { try commitRound() }
        // Outside those transactions, the session's setting holds.
        for id in 1...8 { #expect(try connection.query("SELECT body FROM rows WHERE id = \(id)").count == 1) }
        #expect(
            try connection.execute(unsafeSQL: "SHOW plan_cache_mode").first?.decode("plan_cache_mode", as: String.self)
                == "force_custom_plan")
        let plans = try connection.execute(
            unsafeSQL: "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements ORDER BY statement")
        func plansOf(_ prefix: String) throws -> (generic: Int, custom: Int) {
            let row = try #require(try plans.first { try ($0.decode("statement") as String).hasPrefix(prefix) })
            return (try row.decode("generic_plans"), try row.decode("custom_plans"))
        }
        let insert = try plansOf("INSERT INTO rows")
        #expect(insert.generic >= 3 && insert.custom <= 5, "the insert ran from the cache: \(insert)")
        #expect(try plansOf("UPDATE rows").generic == 0)
        #expect(try plansOf("SELECT body FROM rows").generic == 0)
    }

    /// Behind a pooler that cannot carry prepared statements, a connection prepares none; past
    /// its limit, a connection runs new texts unnamed.
    @Test func preparingCanBeTurnedOffAndIsBounded() throws {
        let url = try IntegrationEnvironment.makeDatabaseNow()
        let unprepared = try PGConnection(conninfo: url, preparesStatements: false)
        #expect(try unprepared.query("SELECT \(1)::int AS v").first?.decode("v", as: Int.self) == 1)
        #expect(try unprepared.pipeline(["SELECT \(2)::int AS v"]).first?.first?.decode("v", as: Int.self) == 2)
        #expect(try preparedTexts(unprepared).isEmpty)

        let bounded = try PGConnection(conninfo: url, preparedStatementLimit: 2)
        for column in ["a", "b", "c", "d"] {
            let rows = try bounded.pipeline(["SELECT \(5)::int AS \(unsafeRaw: column)"])
            #expect(try rows.first?.first?.decode(column, as: Int.self) == 5)
        }
        #expect(try preparedTexts(bounded) == ["SELECT $1::int AS a", "SELECT $1::int AS b"])
    }

    /// The error migrating throws; an issue is recorded when it throws none.
    func failure(migrating connection: PGConnection, _ migrations: [PGMigration]) -> PGError? {
        #expect(throws: PGError.self) { try PGMigrator.migrate(connection, migrations: migrations) }
    }

    @Test func aFailingMigrationNamesItselfAndLeavesNoTrace() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        let broken = PGMigration(
            version: 99, name: "broken", sql: "CREATE TABLE ok (v int); SELECT nonsense FROM nowhere")
        let error = failure(migrating: connection, [broken])
        #expect(error?.code == .migration)
        #expect(error?.step == "migration 99 broken")
        #expect(try connection.query("SELECT to_regclass('ok') IS NULL AS absent").first?.decode("absent") == true)
    }

    /// `CREATE INDEX CONCURRENTLY` runs only outside a transaction: such a migration's statements
    /// run one at a time before its record, and one that fails midway is run again from its first
    /// statement (here the invalid index a failed concurrent build leaves is dropped and built anew).
    @Test func aMigrationOutsideATransactionBuildsConcurrentlyAndRunsAgainAfterAFailure() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        try connection.execute(unsafeSQL: "CREATE TABLE rows (v int); INSERT INTO rows VALUES (1), (1)")
        let index = PGMigration(
            version: 5, name: "index",
            outsideTransaction: [
                "DROP INDEX CONCURRENTLY IF EXISTS rows_v", "CREATE UNIQUE INDEX CONCURRENTLY rows_v ON rows (v)",
            ])
        let error = failure(migrating: connection, [index])
        #expect(error?.code == .migration, "a unique index over duplicates cannot be built")
        #expect(error?.step == "migration 5 index")
        #expect(try PGMigrator.currentVersion(connection) == nil)
        let invalid: PGQuery =
            "SELECT count(*) AS n FROM pg_index WHERE indexrelid = to_regclass('rows_v') AND NOT indisvalid"
        #expect(try connection.query(invalid).first?.decode("n", as: Int.self) == 1, "the failed build's leftover")
        try connection.execute(unsafeSQL: "DELETE FROM rows WHERE ctid = (SELECT min(ctid) FROM rows)")
        #expect(try PGMigrator.migrate(connection, migrations: [index]) == [5])
        #expect(try connection.query(invalid).first?.decode("n", as: Int.self) == 0)
        let valid: PGQuery =
            "SELECT count(*) AS n FROM pg_index WHERE indexrelid = to_regclass('rows_v') AND indisvalid"
        #expect(try connection.query(valid).first?.decode("n", as: Int.self) == 1)
        #expect(try PGMigrator.migrate(connection, migrations: [index]) == [])
    }

    /// A migrator waiting for another's lock holds no snapshot, so the other's `CREATE INDEX
    /// CONCURRENTLY` (which waits for every older snapshot) goes on: replicas starting together
    /// both migrate. Waiting in `pg_advisory_lock` instead, the two deadlocked and one failed.
    @Test func aMigratorWaitingForTheLockDoesNotHoldUpAnotherBuildingConcurrently() async throws {
        let url = try IntegrationEnvironment.makeDatabaseNow()
        let first = try PGConnection(conninfo: url)
        try first.execute(unsafeSQL: "CREATE TABLE rows (v int); INSERT INTO rows VALUES (1), (2)")
        try first.query("SELECT pg_advisory_lock(\(PGMigrator.lockKey))")
        // The waiting migrator on a thread of its own: it blocks, and the pool's few threads
        // are the other tests' too.
        let second = Task {
            try await Blocking.run {
                let connection = try PGConnection(conninfo: url)
                let index = PGMigration(
                    version: 7, name: "index",
                    outsideTransaction: ["CREATE INDEX CONCURRENTLY IF NOT EXISTS rows_v ON rows (v)"])
                return try PGMigrator.migrate(connection, migrations: [index])
            }
        }
        try await Task.sleep(for: .milliseconds(500))
        // The first migrator's own concurrent build, while the second waits for its lock.
        try first.execute(unsafeSQL: "SET lock_timeout = '10s'")
        try first.execute(unsafeSQL: "CREATE INDEX CONCURRENTLY rows_w ON rows (v)")
        try first.query("SELECT pg_advisory_unlock(\(PGMigrator.lockKey))")
        #expect(try await second.value == [7])
    }

    /// A migration whose table is held by a long transaction (a report, a dump) gives up its lock
    /// wait every `timeout` and tries again, so the writes queued behind its request go on
    /// meanwhile; it applies once the transaction ends. Waiting without bound, it held the insert
    /// below until the reader's end.
    @Test func aMigrationWaitingForATableDoesNotHoldTheWritesUp() async throws {
        let url = try IntegrationEnvironment.makeDatabaseNow()
        let reader = try PGConnection(conninfo: url)
        try reader.execute(unsafeSQL: "CREATE TABLE rows (v int); INSERT INTO rows VALUES (1)")
        try reader.execute(unsafeSQL: "BEGIN")
        try reader.query("SELECT count(*) AS n FROM rows")
        let migrating = Task {
            try await Blocking.run {
                let connection = try PGConnection(conninfo: url)
                let column = PGMigration(version: 3, name: "column", sql: "ALTER TABLE rows ADD COLUMN w int")
                return try PGMigrator.migrate(
                    connection, migrations: [column],
                    lockWaits: PGMigrator.LockWaits(timeout: 0.2, pause: 0.1, attempts: 200))
            }
        }
        try await Task.sleep(for: .milliseconds(300))
        let writer = try PGConnection(conninfo: url)
        try writer.execute(unsafeSQL: "SET statement_timeout = '5s'")
        let started = ContinuousClock.now
        try writer.execute(unsafeSQL: "INSERT INTO rows VALUES (2)")
        #expect(ContinuousClock.now - started < .seconds(1), "the insert waited at most one lock wait")
        try reader.execute(unsafeSQL: "COMMIT")
        #expect(try await migrating.value == [3])
        #expect(try writer.query("SELECT count(w) AS n FROM rows").first?.decode("n", as: Int.self) == 0)
    }

    /// A migration's statements run without the connection's statement timeout (an index built on
    /// a big table takes as long as the table needs; the default minute cancelled it), and the
    /// connection has its timeout back afterwards.
    @Test func aMigrationIsNotCutShortByTheConnectionsStatementTimeout() throws {
        let url = try IntegrationEnvironment.makeDatabaseNow()
        let connection = try PGConnection(conninfo: url + "&options=-c%20statement_timeout%3D200")
        let slow = PGMigration(
            version: 4, name: "slow", outsideTransaction: ["SELECT pg_sleep(0.5)"], sql: "SELECT pg_sleep(0.5)")
        #expect(try PGMigrator.migrate(connection, migrations: [slow]) == [4])
        #expect(throws: PGError.self, "the connection's own timeout holds again") {
            try connection.execute(unsafeSQL: "SELECT pg_sleep(0.5)")
        }
    }

    @Test func thePoolBoundsConnectionsAndServesConcurrentCallers() async throws {
        let pool = PGPool(conninfo: try await IntegrationEnvironment.makeDatabase(), size: 3)
        let pids = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<30 {
                group.addTask {
                    try await pool.withConnection { connection in
                        try connection.query("SELECT pg_backend_pid() AS pid, pg_sleep(0.01)").first?.decode(
                            "pid", as: Int.self) ?? 0
                    }
                }
            }
            var pids = Set<Int>()
            for try await pid in group { pids.insert(pid) }
            return pids
        }
        #expect(pids.count <= 3)
        #expect(pids.count >= 1)
        await pool.close()
    }

    @Test func anUnreachableServerIsARetriableConnectionError() throws {
        do {
            _ = try PGConnection(conninfo: "postgres://postgres@127.0.0.1:1/none?connect_timeout=2")
            Issue.record("expected a connection error")
        } catch let error as PGError {
            #expect(error.code == .connection)
            #expect(error.isRetriable)
        }
    }
}
