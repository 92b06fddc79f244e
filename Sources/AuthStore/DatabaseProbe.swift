import PGStore

/// What the readiness check asks PostgreSQL, on a connection of its own (a busy pool never holds
/// a probe up): whether it answers, and how many events wait in the outbox.
public final class DatabaseProbe: Sendable {
    private let connection: PGDedicatedConnection

    /// - Parameter conninfo: the database to probe; the connection is made on first use and
    ///   again after a failure.
    public init(conninfo: String) {
        connection = PGDedicatedConnection(conninfo: conninfo, name: "pg-health")
    }

    /// - Throws: when PostgreSQL does not answer.
    public func ping() async throws {
        _ = try await connection.withConnection { try $0.query("SELECT 1 AS one").count }
    }

    /// How long the longest-waiting commit of this database has waited for a synchronous
    /// standby's acknowledgement (`wait_event = 'SyncRep'`), zero when none waits. The worker's
    /// own sessions are visible to it in `pg_stat_activity` without extra privileges.
    public func longestSynchronousReplicationWait() async throws -> Duration {
        let milliseconds = try await connection.withConnection {
            try $0.query(
                """
                SELECT coalesce(max(extract(epoch FROM clock_timestamp() - query_start) * 1000), 0)::bigint AS waited
                FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND datname = current_database()
                """
            ).first?.decode("waited", as: Int.self) ?? 0
        }
        return .milliseconds(milliseconds)
    }

    /// Events not yet published.
    /// - Throws: when the outbox cannot be read (the schema not migrated, say).
    public func outboxBacklog() async throws -> Int {
        try await connection.withConnection {
            try $0.query(PostgresStore.outboxBacklog).first?.decode("backlog", as: Int.self) ?? 0
        }
    }
}
