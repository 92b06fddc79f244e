import Foundation
import Testing

@testable import PGStore
@testable import TestSupport

@Suite struct PGQueryTests {
    @Test func interpolatedValuesBecomeBoundParameters() {
        let email = "x'; DROP TABLE users; --"
        let query: PGQuery = "SELECT id FROM users WHERE email = \(email) AND is_guest = \(false) LIMIT \(5)"
        #expect(query.sql == "SELECT id FROM users WHERE email = $1 AND is_guest = $2 LIMIT $3")
        #expect(query.parameters.map { $0?.text } == [email, "f", "5"])
        #expect(!query.description.contains("DROP"), "descriptions never show values")
    }

    @Test func optionalsBindNull() {
        let missing: String? = nil
        let query: PGQuery =
            "UPDATE users SET name = \(missing) WHERE id = \(UUID(uuidString: "01a22751-bb1f-74b7-b623-f9d339ce44f3")!)"
        #expect(query.parameters.map { $0?.text } == [nil, "01a22751-bb1f-74b7-b623-f9d339ce44f3"])
    }

    /// An array goes in PostgreSQL's binary format (`array_send`'s layout: dimensions, NULL flag,
    /// element type, length and lower bound, then each element's length and bytes), cast in the
    /// statement to its element type's array.
    @Test func arraysAreBinaryAndCastToTheirType() {
        let query: PGQuery = "SELECT * FROM unnest(\(PGArray([Int32(1), nil, -2]))) WHERE \(PGArray([String]()))"
        #expect(query.sql == "SELECT * FROM unnest($1::integer[]) WHERE $2::text[]")
        let numbers = query.parameters[0]
        #expect(numbers?.isBinary == true)
        #expect(
            numbers?.bytes == [
                0, 0, 0, 1, /* one dimension */ 0, 0, 0, 1, /* with NULLs */ 0, 0, 0, 23, /* int4 */
                0, 0, 0, 3, 0, 0, 0, 1, /* three elements from index 1 */
                0, 0, 0, 4, 0, 0, 0, 1, /* 1 */ 0xFF, 0xFF, 0xFF, 0xFF, /* NULL */ 0, 0, 0, 4, 0xFF, 0xFF, 0xFF, 0xFE,
            ])
        #expect(query.parameters[1]?.bytes == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 25], "empty: no dimensions")
        let id = UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16))
        let uuids = PGArray([id]).parameter.bytes
        #expect(uuids.suffix(20) == [0, 0, 0, 16] + Array(1...16))
        #expect(PGArray([UUID]()).typeName == "uuid[]" && PGArray([Date]()).typeName == "timestamptz[]")
        // timestamptz: microseconds from 2000-01-01 UTC.
        let dates = PGArray([Date(timeIntervalSince1970: 946_684_800.000_001)]).parameter.bytes
        #expect(dates.suffix(8) == [0, 0, 0, 0, 0, 0, 0, 1])
    }

    /// The text is written as bytes: placeholders past one digit, and text that is not ASCII in
    /// the statement's own literal, come out as written.
    @Test func placeholdersOfEveryWidthAndTextBeyondASCII() {
        var interpolation = PGQuery.StringInterpolation(literalCapacity: 0, interpolationCount: 120)
        interpolation.appendLiteral("SELECT 'é ✓' AS mark")
        for value in 1...120 {
            interpolation.appendLiteral(", ")
            interpolation.appendInterpolation(value)
        }
        interpolation.appendLiteral(", ")
        interpolation.appendInterpolation(PGArray([1, 2].map(Int32.init)))
        let query = PGQuery(stringInterpolation: interpolation)
        let expected = "SELECT 'é ✓' AS mark" + (1...120).map { ", $\($0)" }.joined() + ", $121::integer[]"
        #expect(query.sql == expected)
        #expect(query.parameters.count == 121)
        #expect(query.parameters[9]?.text == "10" && query.parameters[99]?.text == "100")
    }

    /// Prepared statements are found by their text under a hash of its own: equal texts, however
    /// they were made, are one key; texts that differ anywhere (in a whole eight-byte word, in
    /// the bytes after the last one, in length) are not, and none is equal to another.
    @Test func statementTextsAreOneKeyExactlyWhenEqual() {
        let interpolated: PGQuery = "SELECT v FROM t WHERE id = \(1) AND at > \(2)"
        let written = StatementText("SELECT v FROM t WHERE id = $1 AND at > $2")
        #expect(StatementText(interpolated.sql) == written)
        #expect(StatementText(interpolated.sql).hashValue == written.hashValue)
        let texts = [
            "SELECT 1", "SELECT 2", "SELECT $1", "SELECT $2", "SELECT $1 ", "SELECT $10",
            "INSERT INTO t VALUES ($1)", "INSERT INTO u VALUES ($1)", "", "é", "e",
        ]
        let keys = texts.map(StatementText.init)
        #expect(Set(keys).count == texts.count)
        #expect(Set(keys.map(\.digest)).count == texts.count, "these differ in their digests too")
        var byText: [StatementText: Int] = [:]
        for (index, key) in keys.enumerated() { byText[key] = index }
        for (index, text) in texts.enumerated() { #expect(byText[StatementText(text)] == index) }
    }

    @Test func rawFragmentsAreExplicit() {
        let query: PGQuery = "SELECT * FROM \(unsafeRaw: "users") WHERE id = \(1)"
        #expect(query.sql == "SELECT * FROM users WHERE id = $1")
        #expect(query.parameters.count == 1)
    }
}

@Suite struct PGCodingTests {
    @Test func datesRoundTripThroughTheServersISOFormat() {
        let date = Date(timeIntervalSince1970: 1_795_953_600.123456)
        #expect(date.pgText == "2026-11-29T12:00:00.123456Z")
        let parsed = Date(pgText: "2026-11-29 12:00:00.123456+00")
        #expect(abs((parsed?.timeIntervalSince1970 ?? 0) - 1_795_953_600.123456) < 0.000001)
        #expect(Date(pgText: "2026-11-29 14:00:00+02")?.timeIntervalSince1970 == 1_795_953_600)
        #expect(Date(pgText: "2026-11-29 06:30:00-05:30")?.timeIntervalSince1970 == 1_795_953_600)
        #expect(Date(pgText: "1969-12-31 23:59:59+00")?.timeIntervalSince1970 == -1)
        #expect(Date(pgText: "garbage") == nil)
    }

    @Test func byteaUsesHexFormat() {
        #expect(PGBytes([0x00, 0xab, 0xff]).pgText == "\\x00abff")
        #expect(PGBytes(pgText: "\\x00ABff")?.bytes == [0x00, 0xab, 0xff])
        #expect(PGBytes(pgText: "\\x0") == nil)
        #expect(PGBytes(pgText: "00ab") == nil)
    }

    @Test func textArraysQuoteEveryElement() {
        let values = ["*", "a,b", "say \"hi\"", "back\\slash", ""]
        #expect(values.pgText == #"{"*","a,b","say \"hi\"","back\\slash",""}"#)
        #expect([String](pgText: #"{"*","a,b","say \"hi\"","back\\slash",""}"#) == values)
        #expect([String](pgText: "{guest,member}") == ["guest", "member"])
        #expect([String](pgText: "{}") == [])
        #expect([String](pgText: "guest") == nil)
    }

    @Test func retriableErrorsAreClassifiedBySQLState() {
        #expect(PGError(.connection, detail: "").isRetriable)
        #expect(PGError(.query, sqlState: "40001", detail: "").isRetriable)
        #expect(PGError(.query, sqlState: "57P01", detail: "").isRetriable)
        #expect(!PGError(.query, sqlState: "23505", detail: "").isRetriable)
        #expect(PGError(.query, sqlState: "23505", detail: "").isUniqueViolation)
        let error = PGError(.query, sqlState: "23505", detail: "Key (email)=(a@b.c) already exists")
        #expect(!error.description.contains("a@b.c"), "server messages may hold data: only in debugDescription")
        #expect(error.debugDescription.contains("a@b.c"))
    }

    /// A changed result type is recognised by the server function that raised it, so a server
    /// whose messages are translated still gets its statements prepared again.
    @Test func aStalePreparedStatementIsRecognisedWhateverTheServersLanguage() {
        let german = PGError(
            .query, sqlState: "0A000", detail: "FEHLER:  gecachter Plan darf den Ergebnistyp nicht ändern",
            serverFunction: "RevalidateCachedQuery")
        #expect(german.isStalePreparedStatement)
        #expect(german.isRetriable)
        #expect(PGError(.query, sqlState: "26000", detail: "").isStalePreparedStatement)
        let unsupported = PGError(
            .query, sqlState: "0A000", detail: "FEHLER:  nicht unterstützt", serverFunction: "transformLockingClause")
        #expect(!unsupported.isStalePreparedStatement)
        #expect(!unsupported.isRetriable)
    }
}
