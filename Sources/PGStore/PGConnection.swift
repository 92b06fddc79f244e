import CLibPQ
import Foundation

/// One libpq connection. Not thread-safe: confine it to one thread (`PGDedicatedConnection` does).
///
/// Parameters are always sent separately from the statement: values in text format, `PGArray`s
/// in binary. A statement is prepared (parsed and analysed, under a name) the first time the
/// connection runs it, in the same round trip, and from then on only bound, planned for its
/// values and run: the store's statements are fixed texts, so a small batch does not pay to
/// parse ten of them every time.
public final class PGConnection {
    private var connection: OpaquePointer?
    private let conninfo: String
    /// Whether statements are prepared once per connection (see the type's description).
    public let preparesStatements: Bool
    /// How many statements are prepared at most; past it, new texts run unnamed (planned every
    /// time). A guard against unbounded growth: the store has a few dozen statements.
    public let preparedStatementLimit: Int
    /// The prepared statements' names, by SQL text.
    private var statements: [StatementText: String] = [:]
    /// Names are never reused on a connection: a statement prepared but not recorded (its
    /// acknowledgement lost) cannot collide with a later one.
    private var statementsNamed = 0

    /// Opens a connection.
    /// - Parameters:
    ///   - conninfo: a `postgres://` URL or a `key=value` string.
    ///   - preparesStatements: false behind a pooler that runs each transaction on whichever
    ///     server connection is free without carrying prepared statements along (PgBouncer in
    ///     transaction mode before 1.21, or with `max_prepared_statements = 0`). Default: true.
    ///   - preparedStatementLimit: the most statements prepared. Default: 256.
    /// - Throws: `PGError` `.connection` (retriable) when the server cannot be reached.
    public init(conninfo: String, preparesStatements: Bool = true, preparedStatementLimit: Int = 256) throws {
        self.conninfo = conninfo
        self.preparesStatements = preparesStatements
        self.preparedStatementLimit = preparedStatementLimit
        try connect()
    }

    deinit {
        if let connection { PQfinish(connection) }
    }

    /// Connection settings that keep a frozen or vanished server from hanging a caller for ever:
    /// a connect timeout, TCP keepalives, a TCP user timeout for unacknowledged sends, and a
    /// statement timeout. Anything the connection string sets itself wins.
    public static let defaultSettings: [(String, String)] = [
        ("connect_timeout", "5"), ("keepalives", "1"), ("keepalives_idle", "10"), ("keepalives_interval", "5"),
        ("keepalives_count", "3"), ("tcp_user_timeout", "30000"), ("options", "-c statement_timeout=60000"),
    ]

    private func connect() throws {
        if let connection { PQfinish(connection) }
        // Defaults first, then the connection string (expanded): later keywords win.
        let pairs = Self.defaultSettings + [("dbname", conninfo)]
        connection = Self.withCStrings(pairs.map(\.0)) { keywords in
            Self.withCStrings(pairs.map(\.1)) { values in
                PQconnectdbParams(keywords, values, 1)
            }
        }
        guard let connection, PQstatus(connection) == CONNECTION_OK else {
            let message = connection.map { Self.message(PQerrorMessage($0)) } ?? "out of memory"
            throw PGError(.connection, detail: message)
        }
        // Server notices ("relation already exists, skipping") would go to stderr; they are not errors.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
        // Fixed session settings the text decoders rely on. Prepared statements are still planned
        // for each run's values, as unnamed ones are: a generic plan chosen while a table was
        // small (a sequential scan for `request_id = ANY($1)`) would otherwise stay chosen as it
        // grows. Preparing saves the parse and analysis, not the plan. (A transaction may still
        // let statements whose plan cannot go wrong that way, inserts, use the plan cache with
        // `SET LOCAL plan_cache_mode = auto`: the batch writer's last round trip does.)
        _ = try execute(
            unsafeSQL: """
                SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET client_encoding = 'UTF8';
                SET plan_cache_mode = force_custom_plan
                """)
    }

    /// A NULL-terminated array of C strings, alive for `body`.
    private static func withCStrings<Result>(
        _ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> Result
    ) -> Result {
        let copies = strings.map { strdup($0) }
        defer { for copy in copies { free(copy) } }
        let pointers = copies.map { UnsafePointer($0) } + [nil]
        return pointers.withUnsafeBufferPointer { buffer in
            // Never empty (the terminating nil is there), so there is always a base address.
            guard let base = buffer.baseAddress else { preconditionFailure("an array of one has storage") }
            return body(base)
        }
    }

    /// True while the connection is usable.
    public var isHealthy: Bool {
        guard let connection else { return false }
        return PQstatus(connection) == CONNECTION_OK
    }

    // MARK: - Queries

    /// Runs one statement with bound parameters and returns its rows.
    /// - Throws: `PGError` `.query` with the SQLSTATE, or `.connection` when the connection broke.
    @discardableResult
    public func query(_ query: PGQuery) throws -> PGRows {
        guard let connection else { throw PGError(.connection, detail: "not connected") }
        try Self.checkParameters(query.parameters)
        let text = StatementText(query.sql)
        var name = statements[text]
        if name == nil, let fresh = nameForNewStatement() {
            let prepared = PQprepare(connection, fresh, query.sql, Int32(query.parameters.count), nil)
            defer { PQclear(prepared) }
            _ = try checked { try rows(of: prepared, step: nil) }
            statements[text] = fresh
            name = fresh
        }
        let result = withParameters(query.parameters) { values, lengths, formats, count in
            if let name {
                PQexecPrepared(connection, name, count, values, lengths, formats, 0)
            } else {
                PQexecParams(connection, query.sql, count, nil, values, lengths, formats, 0)
            }
        }
        defer { PQclear(result) }
        return try checked { try rows(of: result, step: nil) }
    }

    /// A name for a statement not prepared yet, or nil when it is to run unnamed.
    private func nameForNewStatement() -> String? {
        guard preparesStatements, statementsNamed < preparedStatementLimit else { return nil }
        statementsNamed += 1
        return "auth_\(statementsNamed)"
    }

    /// Runs `body`; when the server says a prepared statement is gone or no longer fits the
    /// schema, forgets every prepared statement, so the next run prepares them again.
    private func checked<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as PGError where error.isStalePreparedStatement {
            statements = [:]
            throw error
        }
    }

    /// Runs SQL text with no parameters, possibly several statements (migrations).
    @discardableResult
    public func execute(unsafeSQL sql: String) throws -> PGRows {
        guard let connection else { throw PGError(.connection, detail: "not connected") }
        let result = PQexec(connection, sql)
        defer { PQclear(result) }
        return try rows(of: result, step: nil)
    }

    /// Runs `body` inside BEGIN … COMMIT, rolling back if it throws.
    /// - Throws: `PGError` `.transaction` naming BEGIN or COMMIT when one of those failed; the
    ///   body's own error when it threw and the rollback went through; `PGTransactionError` with
    ///   both when the rollback failed too (neither is lost).
    @discardableResult
    public func withTransaction<T>(_ body: (PGConnection) throws -> T) throws -> T {
        try withPipelinedTransaction { transaction in
            try transaction.begin()
            return try body(self)
        }
    }

    /// Ends the transaction under way after `error` stopped it.
    /// - Returns: the error to throw: `error` itself when the rollback went through, else a
    ///   `PGTransactionError` that keeps both (a rollback that fails is never swallowed: it means
    ///   the connection is gone, and the caller's retry policy must see that).
    public func rollBack(after error: any Error) -> any Error {
        let stopped = error
        do {
            try rollBack()
            return stopped
        } catch {
            return PGTransactionError(closureError: stopped, rollbackError: error)
        }
    }

    /// Ends the transaction under way without keeping anything it did (a write the caller
    /// declined after its first round trip); `rollBack(after:)` when an error stopped it.
    public func rollBack() throws {
        try step("ROLLBACK")
    }

    /// Runs a transaction's own statement (`BEGIN`, `COMMIT`, `ROLLBACK`); its error names it.
    func step(_ sql: String) throws {
        do {
            try execute(unsafeSQL: sql)
        } catch var error as PGError {
            error.step = sql
            if error.code == .query { error.code = .transaction }
            throw error
        }
    }

    /// Sends all statements in one round trip (pipeline mode) and reads every result.
    ///
    /// Everything up to the sync runs as one implicit transaction: if one statement fails, the
    /// ones after it are skipped and the earlier ones are rolled back.
    /// - Throws: the first statement's `PGError`, with `step` naming its index.
    @discardableResult
    public func pipeline(_ queries: [PGQuery]) throws -> [PGRows] {
        guard let connection else { throw PGError(.connection, detail: "not connected") }
        guard !queries.isEmpty else { return [] }
        for query in queries { try Self.checkParameters(query.parameters) }
        guard PQenterPipelineMode(connection) == 1 else {
            throw PGError(.pipeline, detail: Self.message(PQerrorMessage(connection)))
        }
        defer { PQexitPipelineMode(connection) }
        // A statement not prepared yet is prepared in the same round trip, just before it runs.
        var preparing: [StatementText: String] = [:]
        var preparedBefore: [(name: String, text: StatementText)?] = []
        for query in queries {
            let text = StatementText(query.sql)
            var name = statements[text] ?? preparing[text]
            var prepares: (name: String, text: StatementText)?
            if name == nil, let fresh = nameForNewStatement() {
                let count = Int32(query.parameters.count)
                guard PQsendPrepare(connection, fresh, query.sql, count, nil) == 1 else {
                    throw brokenPipeline(connection)
                }
                preparing[text] = fresh
                name = fresh
                prepares = (fresh, text)
            }
            preparedBefore.append(prepares)
            let sent = withParameters(query.parameters) { values, lengths, formats, count in
                if let name {
                    PQsendQueryPrepared(connection, name, count, values, lengths, formats, 0)
                } else {
                    PQsendQueryParams(connection, query.sql, count, nil, values, lengths, formats, 0)
                }
            }
            guard sent == 1 else { throw brokenPipeline(connection) }
        }
        guard PQpipelineSync(connection) == 1 else { throw brokenPipeline(connection) }

        var results: [PGRows] = []
        var firstError: PGError?
        for index in queries.indices {
            if let (name, text) = preparedBefore[index] {
                guard let prepared = PQgetResult(connection) else { throw brokenPipeline(connection) }
                do {
                    _ = try rows(of: prepared, step: "statement \(index)")
                    // Prepared statements are not transactional: it stays prepared even when a
                    // later statement fails and the transaction rolls back.
                    statements[text] = name
                } catch let error as PGError {
                    if firstError == nil { firstError = error }
                }
                PQclear(prepared)
                while let extra = PQgetResult(connection) { PQclear(extra) }
            }
            guard let result = PQgetResult(connection) else { throw brokenPipeline(connection) }
            do {
                results.append(try rows(of: result, step: "statement \(index)"))
            } catch let error as PGError {
                if firstError == nil { firstError = error }
            }
            PQclear(result)
            // Each statement's results end with a NULL.
            while let extra = PQgetResult(connection) { PQclear(extra) }
        }
        // Then the sync.
        if let sync = PQgetResult(connection) {
            PQclear(sync)
        }
        if let firstError {
            if firstError.isStalePreparedStatement { statements = [:] }
            throw firstError
        }
        return results
    }

    private func brokenPipeline(_ connection: OpaquePointer) -> PGError {
        PGError(.connection, detail: Self.message(PQerrorMessage(connection)))
    }

    // MARK: - Results

    /// - Parameter step: names the step in an error; built only for one (a pipeline's results
    ///   are "statement 3" and the like, a string a statement for nothing when all succeed).
    private func rows(of result: OpaquePointer?, step: @autoclosure () -> String?) throws -> PGRows {
        guard let result else {
            throw PGError(.connection, detail: connection.map { Self.message(PQerrorMessage($0)) } ?? "")
        }
        switch PQresultStatus(result) {
        case PGRES_TUPLES_OK, PGRES_COMMAND_OK, PGRES_EMPTY_QUERY, PGRES_PIPELINE_SYNC:
            break
        case PGRES_PIPELINE_ABORTED:
            throw PGError(.pipeline, detail: "skipped after an earlier error in the pipeline", step: step())
        default:
            let sqlState = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
            let message = Self.message(PQresultErrorMessage(result))
            let function = PQresultErrorField(result, Int32(UInt8(ascii: "R"))).map { String(cString: $0) }
            // Every error the server reports has a SQLSTATE; one without is libpq's own (the
            // server closed the connection, a send failed): the connection's problem, retriable,
            // even when libpq has not marked the connection bad yet.
            let broken = connection.map { PQstatus($0) != CONNECTION_OK } ?? true
            throw PGError(
                broken || sqlState == nil ? .connection : .query, sqlState: sqlState, detail: message,
                step: step(), serverFunction: function)
        }
        let columnCount = Int(PQnfields(result))
        let rowCount = Int(PQntuples(result))
        let columns = (0..<columnCount).map { String(cString: PQfname(result, Int32($0))) }
        var values: [[String?]] = []
        values.reserveCapacity(rowCount)
        for row in 0..<rowCount {
            var rowValues: [String?] = []
            rowValues.reserveCapacity(columnCount)
            for column in 0..<columnCount {
                if PQgetisnull(result, Int32(row), Int32(column)) == 1 {
                    rowValues.append(nil)
                } else {
                    rowValues.append(String(cString: PQgetvalue(result, Int32(row), Int32(column))))
                }
            }
            values.append(rowValues)
        }
        let affected = Int(String(cString: PQcmdTuples(result))) ?? 0
        return PGRows(columns: columns, values: values, affectedRows: affected)
    }

    /// libpq's message on one line: it breaks some over lines (`…failed: Connection refused` then
    /// `\tIs the server running…`), which would make a start's one-line reason two.
    private static func message(_ text: UnsafePointer<CChar>?) -> String {
        guard let text else { return "" }
        return String(cString: text).split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: " ")
    }

    /// Text parameters end at their first NUL byte in libpq, and PostgreSQL's text types cannot hold
    /// one: a value with a NUL would be silently cut short (`P\0A` stored as `P`), or refused by
    /// the server as a text array's element, so it is refused here.
    /// - Throws: `PGError` `.parameter` naming the parameter.
    static func checkParameters(_ parameters: [PGParameter?]) throws {
        for (index, parameter) in parameters.enumerated() where parameter?.containsNUL == true {
            throw PGError(.parameter, detail: "parameter $\(index + 1) contains a NUL byte", step: "bind")
        }
    }

    /// The parameters as libpq takes them, alive for the duration of `body`: each value's
    /// address (a text one NUL-terminated), length and format (0 text, 1 binary). The values are
    /// copied into one allocation, not one each (a batch binds some sixty).
    private func withParameters<T>(
        _ parameters: [PGParameter?],
        _ body: (UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int32>?, UnsafePointer<Int32>?, Int32) -> T
    ) -> T {
        if parameters.isEmpty { return body(nil, nil, nil, 0) }
        var size = 0
        for parameter in parameters {
            if let parameter { size += parameter.bytes.count + 1 }
        }
        let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: max(size, 1), alignment: 1)
        defer { storage.deallocate() }
        var values: [UnsafePointer<CChar>?] = []
        values.reserveCapacity(parameters.count)
        var lengths: [Int32] = []
        lengths.reserveCapacity(parameters.count)
        var formats: [Int32] = []
        formats.reserveCapacity(parameters.count)
        var offset = 0
        for parameter in parameters {
            guard let parameter else {
                values.append(nil)
                lengths.append(0)
                formats.append(0)
                continue
            }
            let count = parameter.bytes.count
            let slot = UnsafeMutableRawBufferPointer(rebasing: storage[offset..<(offset + count + 1)])
            parameter.bytes.withUnsafeBytes { bytes in slot.copyMemory(from: bytes) }
            slot[count] = 0
            values.append(slot.baseAddress.map { UnsafePointer($0.assumingMemoryBound(to: CChar.self)) })
            offset += count + 1
            lengths.append(Int32(clamping: count))
            formats.append(parameter.isBinary ? 1 : 0)
        }
        return values.withUnsafeBufferPointer { values in
            lengths.withUnsafeBufferPointer { lengths in
                formats.withUnsafeBufferPointer { formats in
                    body(values.baseAddress, lengths.baseAddress, formats.baseAddress, Int32(values.count))
                }
            }
        }
    }
}

/// A statement's SQL text as the key of a connection's prepared statements, with a hash of its
/// own: the standard one reads a text byte by byte, and a batch looks up a dozen texts of some
/// hundreds of bytes (about 2 % of a batch of one's instructions). Eight bytes a step here, in a
/// multiply-and-rotate hash (FxHash's); the texts are the code's own, so no one chooses them to
/// collide, and equal texts compare whole.
struct StatementText: Hashable {
    let sql: String
    let digest: UInt64

    init(_ sql: String) {
        self.sql = sql
        var text = sql
        digest = text.withUTF8 { bytes in
            var hash: UInt64 = UInt64(truncatingIfNeeded: bytes.count)
            let raw = UnsafeRawBufferPointer(bytes)
            var index = 0
            while index + 8 <= raw.count {
                hash = Self.mix(hash, raw.loadUnaligned(fromByteOffset: index, as: UInt64.self))
                index += 8
            }
            var tail: UInt64 = 0
            var shift: UInt64 = 0
            while index < raw.count {
                tail |= UInt64(raw[index]) << shift
                shift += 8
                index += 1
            }
            return Self.mix(hash, tail)
        }
    }

    private static func mix(_ hash: UInt64, _ word: UInt64) -> UInt64 {
        ((hash << 5 | hash >> 59) ^ word) &* 0x517c_c1b7_2722_0a95
    }

    static func == (lhs: StatementText, rhs: StatementText) -> Bool {
        lhs.digest == rhs.digest && lhs.sql == rhs.sql
    }

    func hash(into hasher: inout Hasher) { hasher.combine(digest) }
}

/// The libpq this process runs on, as linked at run time (`auth-worker version`).
public enum PGLibrary {
    public static var version: String {
        let number = PQlibVersion()
        return "\(number / 10000).\(number % 100)"
    }
}
