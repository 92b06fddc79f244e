import Foundation
import PGStore
import Testing

@testable import TestSupport

/// Statements with parameters are prepared once per connection and run by name, in plain queries
/// and in pipelines, and nothing a failure leaves behind (a statement skipped, a table changed
/// under a prepared statement) breaks a later use.
@Suite(.requiresDatabase, .timeLimit(.minutes(2))) struct PreparedStatementTests {
    /// The statements the server holds for this session, by text.
    static func serverStatements(_ connection: PGConnection) throws -> [String] {
        try connection.query("SELECT statement FROM pg_prepared_statements ORDER BY name").map {
            try $0.decode("statement", as: String.self)
        }
    }

    static let lookup = "SELECT id, name FROM people WHERE id = ANY("

    @Test func aStatementIsPreparedOnceAndRunByName() async throws {
        let connection = try PGConnection(conninfo: try await IntegrationEnvironment.makeDatabase())
        try connection.execute(unsafeSQL: "CREATE TABLE people (id integer PRIMARY KEY, name text NOT NULL)")
        for id in 1...3 {
            try connection.query("INSERT INTO people VALUES (\(id), \("person \(id)"))")
        }
        // Plain queries and pipelines share the statement.
        for ids in [[1], [2, 3], [1, 2, 3]] {
            let rows = try connection.query(
                "SELECT id, name FROM people WHERE id = ANY(\(ids.map(String.init))::integer[]) ORDER BY id")
            #expect(try rows.map { try $0.decode("id", as: Int.self) } == ids)
        }
        let queries: [PGQuery] = [
            "SELECT id, name FROM people WHERE id = ANY(\(["3"])::integer[]) ORDER BY id",
            "SELECT id, name FROM people WHERE id = ANY(\(["1", "3"])::integer[]) ORDER BY id",
        ]
        let results = try connection.pipeline(queries)
        #expect(
            try results.map { try $0.map { try $0.decode("name", as: String.self) } } == [
                ["person 3"], ["person 1", "person 3"],
            ])
        let statements = try Self.serverStatements(connection)
        // The insert and the select (the catalogue query has no parameters: sent as it is).
        #expect(connection.preparedStatementCount == 2)
        #expect(statements.count == 2)
        #expect(statements.filter { $0.hasPrefix(Self.lookup) }.count == 1, "\(statements)")
    }

    /// A statement repeated inside one pipeline, seen for the first time, is prepared once.
    @Test func aPipelinePreparesARepeatedNewStatementOnce() async throws {
        let connection = try PGConnection(conninfo: try await IntegrationEnvironment.makeDatabase())
        let results = try connection.pipeline((0..<5).map { "SELECT \($0)::integer + 1 AS n" })
        #expect(try results.map { try $0.first?.decode("n", as: Int.self) } == [1, 2, 3, 4, 5])
        #expect(connection.preparedStatementCount == 1)
        #expect(try Self.serverStatements(connection).count == 1)
    }

    /// A new statement after a failing one is skipped (not prepared) and runs next time; a new
    /// statement before a failing one stays prepared on the server (preparing is not undone by
    /// the rollback) and is run by its name next time, not prepared again under the same name.
    @Test func failuresInAPipelineLeaveNothingThatClashes() async throws {
        let connection = try PGConnection(conninfo: try await IntegrationEnvironment.makeDatabase())
        try connection.execute(unsafeSQL: "CREATE TABLE ids (id integer PRIMARY KEY)")
        #expect(throws: PGError.self) {
            try connection.pipeline([
                "INSERT INTO ids VALUES (\(1))",
                "INSERT INTO ids VALUES (\(1))",  // a unique violation
                "SELECT count(*) AS n FROM ids WHERE id > \(0)",  // skipped
            ])
        }
        #expect(try connection.query("SELECT count(*) AS n FROM ids WHERE id > \(0)").first?.decode("n") == 0)
        try connection.pipeline(["INSERT INTO ids VALUES (\(2))", "INSERT INTO ids VALUES (\(3))"])
        #expect(try connection.query("SELECT count(*) AS n FROM ids WHERE id > \(0)").first?.decode("n") == 2)
        // A statement that does not prepare (a syntax error) is an error like any other.
        #expect(throws: PGError.self) { try connection.pipeline(["SELEC \(1)"]) }
        #expect(throws: PGError.self) { try connection.query("SELEC \(1)") }
        #expect(try connection.query("SELECT \(7)::integer AS n").first?.decode("n") == 7)
    }

    /// A migration that changes a table under a prepared `SELECT *` (a newer replica rolling out)
    /// makes the statement unusable on that connection: the error is a retriable connection
    /// error, and the next use of the dedicated connection opens a fresh one that works.
    @Test func aTableChangedUnderAPreparedStatementIsRetriedOnAFreshConnection() async throws {
        let url = try await IntegrationEnvironment.makeDatabase()
        let admin = try PGConnection(conninfo: url)
        try admin.execute(unsafeSQL: "CREATE TABLE things (id integer PRIMARY KEY); INSERT INTO things VALUES (1)")
        let client = PGDedicatedConnection(conninfo: url, name: "pg-prepared-test")
        let before = try await client.withConnection {
            try $0.query("SELECT * FROM things WHERE id = \(1)").columns.count
        }
        #expect(before == 1)
        try admin.execute(unsafeSQL: "ALTER TABLE things ADD COLUMN label text")
        do {
            _ = try await client.withConnection { try $0.query("SELECT * FROM things WHERE id = \(1)").count }
            Issue.record("a stale prepared statement ran")
        } catch let error as PGError {
            #expect(error.code == .connection && error.isRetriable, "\(error.debugDescription)")
        }
        let after = try await client.withConnection {
            try $0.query("SELECT * FROM things WHERE id = \(1)").columns.count
        }
        #expect(after == 2)
    }

    /// Off (a pooler in transaction mode), nothing is prepared.
    @Test func offNothingIsPrepared() async throws {
        let connection = try PGConnection(
            conninfo: try await IntegrationEnvironment.makeDatabase(), preparesStatements: false)
        for value in 0..<3 {
            #expect(try connection.query("SELECT \(value)::integer AS n").first?.decode("n") == value)
        }
        try connection.pipeline(["SELECT \(1)::integer AS n"])
        #expect(connection.preparedStatementCount == 0)
        #expect(try Self.serverStatements(connection).isEmpty)
    }
}
