import ServiceKit

/// One PostgreSQL connection confined to a thread of its own, usable from async code (a pool of
/// them is `PGPool`).
///
/// libpq calls block, so they run on the client's dedicated thread rather than on Swift's
/// cooperative pool. A broken connection is re-established on the next use.
public actor PGDedicatedConnection {
    private let executor: ThreadExecutor
    private let conninfo: String
    private let preparesStatements: Bool
    private var connection: PGConnection?

    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    /// The connection's thread, as a task executor: a task started on it
    /// (`Task(executorPreference:)`) that uses this connection runs on that one thread from start
    /// to end, instead of starting on the cooperative pool, hopping here and back.
    public nonisolated var taskExecutor: any TaskExecutor { executor }

    /// Creates the client; the connection is opened on first use.
    /// - Parameters:
    ///   - conninfo: a `postgres://` URL or `key=value` string.
    ///   - name: the name of the client's thread.
    ///   - preparesStatements: whether the connection prepares its statements (see `PGConnection`).
    public init(conninfo: String, name: String = "pg-client", preparesStatements: Bool = true) {
        self.conninfo = conninfo
        self.preparesStatements = preparesStatements
        self.executor = ThreadExecutor(name: name)
    }

    deinit {
        executor.shutdown()
    }

    /// Runs `body` with the connection, on the client's thread.
    /// - Throws: `PGError` `.connection` when no connection can be made, or what `body` throws.
    @discardableResult
    public func withConnection<T: Sendable>(_ body: @Sendable (PGConnection) throws -> T) throws -> T {
        let connection = try connected()
        do {
            return try body(connection)
        } catch let error as PGError where error.code == .connection {
            // Drop it; the next call reconnects.
            self.connection = nil
            throw error
        }
    }

    /// Runs `body` in a transaction on the client's thread.
    @discardableResult
    public func withTransaction<T: Sendable>(_ body: @Sendable (PGConnection) throws -> T) throws -> T {
        try withConnection { try $0.withTransaction(body) }
    }

    /// Closes the connection; the next use opens a new one.
    public func close() {
        connection = nil
    }

    private func connected() throws -> PGConnection {
        if let connection, connection.isHealthy { return connection }
        connection = nil
        let fresh = try PGConnection(conninfo: conninfo, preparesStatements: preparesStatements)
        connection = fresh
        return fresh
    }
}
