import Foundation
import PGStore
import Testing

@testable import TestSupport

@Suite(.requiresDatabase, .timeLimit(.minutes(2))) struct PGStoreIntegrationTests {
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

    @Test func aFailingMigrationNamesItselfAndLeavesNoTrace() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        let broken = PGMigration(
            version: 99, name: "broken", sql: "CREATE TABLE ok (v int); SELECT nonsense FROM nowhere")
        do {
            try PGMigrator.migrate(connection, migrations: [broken])
            Issue.record("expected failure")
        } catch let error as PGError {
            #expect(error.code == .migration)
            #expect(error.step == "migration 99 broken")
        }
        #expect(try connection.query("SELECT to_regclass('ok') IS NULL AS absent").first?.decode("absent") == true)
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
