/// A transaction under way on one connection (`PGConnection.withPipelinedTransaction`). Its
/// `BEGIN` rides in its first round trip (`begin(with:)`) and its `COMMIT` in its last
/// (`commit(with:)`), so a batch pays no round trip for either. Whatever ends it early is the
/// wrapper's to handle: a body that throws is rolled back there, with the same errors as
/// `withTransaction` (`PGTransactionError` when the rollback fails too).
///
/// Used on the connection's own thread, by one caller at a time, like the connection itself.
public final class PGTransaction {
    public let connection: PGConnection

    enum State {
        case notBegun
        /// `BEGIN` was sent: the server may hold a transaction, open or failed.
        case begun
        case ended
    }

    private(set) var state = State.notBegun

    package init(connection: PGConnection) {
        self.connection = connection
    }

    /// Sends `BEGIN` and `statements` in one round trip.
    /// - Returns: the answers to `statements`, in order.
    @discardableResult
    public func begin(with statements: [PGQuery] = []) throws -> ArraySlice<PGRows> {
        precondition(state == .notBegun, "a transaction begins once")
        state = .begun
        guard !statements.isEmpty else {
            try connection.step("BEGIN")
            return []
        }
        let trip = Self.firstRoundTrip(statements)
        let results = try connection.pipeline(trip)
        guard results.count == trip.count else {
            throw PGError(.decoding, detail: "the transaction's first answers are missing")
        }
        return results.dropFirst()
    }

    /// Sends `statements` and `COMMIT` in one round trip.
    public func commit(with statements: [PGQuery] = []) throws {
        precondition(state == .begun, "only a transaction under way commits")
        if statements.isEmpty {
            try connection.step("COMMIT")
        } else {
            try connection.pipeline(statements + ["COMMIT"])
        }
        state = .ended
    }

    /// What `begin(with:)` sends in its round trip: `BEGIN`, then `statements`.
    package static func firstRoundTrip(_ statements: [PGQuery]) -> [PGQuery] {
        var trip: [PGQuery] = ["BEGIN"]
        trip.reserveCapacity(statements.count + 1)
        trip += statements
        return trip
    }

    /// Ends the transaction keeping nothing it did: the caller declined it (what its first round
    /// trip read said no).
    public func rollBack() throws {
        precondition(state == .begun, "only a transaction under way rolls back")
        try connection.rollBack()
        state = .ended
    }

    /// Marks where `rollBackToSavepoint` returns to (one savepoint at a time, `item`).
    public func savepoint() throws { try connection.execute(unsafeSQL: "SAVEPOINT item") }

    /// Keeps what was done since the savepoint.
    public func releaseSavepoint() throws { try connection.execute(unsafeSQL: "RELEASE SAVEPOINT item") }

    /// Drops what was done since the savepoint, and the savepoint.
    public func rollBackToSavepoint() throws {
        try connection.execute(unsafeSQL: "ROLLBACK TO SAVEPOINT item")
        try releaseSavepoint()
    }

    /// After `body` ended: rolls back after an error, commits what it left open.
    fileprivate func end<T>(_ body: () throws -> T) throws -> T {
        let value: T
        do {
            value = try body()
        } catch {
            guard state == .begun else { throw error }
            state = .ended
            throw connection.rollBack(after: error)
        }
        if state == .begun { try commit() }
        return value
    }
}

extension PGConnection {
    /// Runs `body` in a transaction whose `BEGIN` and `COMMIT` it sends with its own statements
    /// (`PGTransaction.begin(with:)`, `commit(with:)`): a body that returns with the transaction
    /// still open is committed; one that throws is rolled back.
    /// - Throws: the body's error when the rollback went through; `PGTransactionError` with both
    ///   when the rollback failed too.
    public func withPipelinedTransaction<T>(_ body: (PGTransaction) throws -> T) throws -> T {
        let transaction = PGTransaction(connection: self)
        return try transaction.end { try body(transaction) }
    }
}
