/// An error from PostgreSQL or libpq.
///
/// `description` is deliberately generic: server messages can echo parameter values (e-mail
/// addresses, hashes), so the details are only in `debugDescription`, for the worker's own log.
public struct PGError: Error, CustomStringConvertible, CustomDebugStringConvertible, Equatable {
    /// What failed, as a growable set of codes.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Kind: Hashable, Sendable {
            case connection, query, transaction, decoding, migration, pipeline, parameter
        }

        private let kind: Kind
        public static let connection = Code(kind: .connection)
        public static let query = Code(kind: .query)
        public static let transaction = Code(kind: .transaction)
        public static let decoding = Code(kind: .decoding)
        public static let migration = Code(kind: .migration)
        public static let pipeline = Code(kind: .pipeline)
        /// A value that cannot be sent (a NUL byte in text); never reaches the server.
        public static let parameter = Code(kind: .parameter)

        public var description: String { "\(kind)" }
    }

    public var code: Code
    /// The five-character SQLSTATE, when the server sent one (`23505` is a unique violation).
    public var sqlState: String?
    /// What went wrong in words: the server's or libpq's message, or the client's own reason. May
    /// quote row values (an e-mail in "failing row contains"), so it is never in `description`.
    public var detail: String
    /// Which step failed (`BEGIN`, `COMMIT`, a migration's name, …).
    public var step: String?
    /// The server function that raised the error (`PG_DIAG_SOURCE_FUNCTION`). Unlike `detail`,
    /// it is not translated to the server's `lc_messages`, so checks can rely on it.
    public var serverFunction: String?
    public var file: String
    public var line: Int

    public init(
        _ code: Code, sqlState: String? = nil, detail: String, step: String? = nil, serverFunction: String? = nil,
        file: String = #fileID, line: Int = #line
    ) {
        self.code = code
        self.sqlState = sqlState
        self.detail = detail
        self.step = step
        self.serverFunction = serverFunction
        self.file = file
        self.line = line
    }

    /// True when the same work may succeed on another try: the connection broke, the server is
    /// starting or shutting down, or a serialization failure or deadlock aborted the transaction.
    public var isRetriable: Bool {
        if isConnectionLoss || isStalePreparedStatement { return true }
        guard let sqlState else { return false }
        return sqlState == "40001" || sqlState == "40P01" || sqlState == "53300"
    }

    /// True when the server cannot be reached or has just gone: the connection refused or lost
    /// (`08xxx`), or the server shutting down or not yet taking connections (`57Pxx`).
    public var isConnectionLoss: Bool {
        if code == .connection { return true }
        guard let sqlState else { return false }
        return sqlState.hasPrefix("08") || sqlState.hasPrefix("57P")
    }

    /// True when a prepared statement the connection relied on is gone (`26000`: the server
    /// connection changed under a pooler, or someone ran `DEALLOCATE`) or no longer fits the
    /// schema (`0A000` "cached plan must not change result type", after a migration). The
    /// connection then prepares its statements again, so another try succeeds.
    public var isStalePreparedStatement: Bool {
        if sqlState == "26000" { return true }
        guard sqlState == "0A000" else { return false }
        // The plan cache's revalidation raises it; the message is only English on some servers.
        return serverFunction == "RevalidateCachedQuery" || detail.contains("cached plan must not change result type")
    }

    /// True for a violated unique constraint.
    public var isUniqueViolation: Bool { sqlState == "23505" }

    public var description: String {
        var text = "PostgreSQL \(code) error"
        if let sqlState { text += " (SQLSTATE \(sqlState))" }
        if let step { text += " at \(step)" }
        return text
    }

    public var debugDescription: String { "\(description): \(detail) [\(file):\(line)]" }

    public static func == (lhs: PGError, rhs: PGError) -> Bool { lhs.code == rhs.code && lhs.sqlState == rhs.sqlState }
}

/// A transaction whose body failed and whose rollback failed too: both kept (postgres-nio's
/// `PostgresTransactionError`). Retriable when either is: a rollback fails when the connection is
/// gone, and nothing was committed.
public struct PGTransactionError: Error, CustomStringConvertible, CustomDebugStringConvertible {
    /// What stopped the transaction (the body's error, or a statement of the batch).
    public var closureError: any Error
    /// Why the `ROLLBACK` after it failed.
    public var rollbackError: any Error

    public init(closureError: any Error, rollbackError: any Error) {
        self.closureError = closureError
        self.rollbackError = rollbackError
    }

    public var isRetriable: Bool {
        (closureError as? PGError)?.isRetriable ?? false || (rollbackError as? PGError)?.isRetriable ?? true
    }

    public var description: String { "transaction failed, and its rollback too" }

    public var debugDescription: String {
        "transaction failed (\(String(reflecting: closureError))), and its rollback too (\(String(reflecting: rollbackError)))"
    }
}
