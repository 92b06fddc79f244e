import Foundation

/// One schema change, applied once and recorded in `schema_migrations`.
public struct PGMigration: Sendable {
    /// Applied in increasing order; never reuse or renumber a version once released.
    public var version: Int
    public var name: String
    /// SQL text (may hold several statements); runs in one transaction with its record.
    public var sql: String
    /// Statements run one at a time outside a transaction, before the record is written: for
    /// what PostgreSQL refuses inside one (`CREATE INDEX CONCURRENTLY`, which builds an index on a
    /// busy table without holding its writes up). Each must be safe to run again, as a failure
    /// or a stop between them leaves the migration unrecorded, to be run again from the first.
    public var outsideTransaction: [String]
    /// For a statement of `outsideTransaction`, a query whose one row's `done` column is true when
    /// what the statement does is done already (an index built and swapped in by an earlier run):
    /// then it is skipped. A migration tried again after a lock wait runs from its first
    /// statement, and rebuilding a big index on each try would cost minutes.
    public var skipWhen: [String: String] = [:]

    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
        self.outsideTransaction = []
    }

    /// A migration of statements that cannot run in a transaction (`outsideTransaction`), then
    /// `sql` in one with its record.
    public init(version: Int, name: String, outsideTransaction statements: [String], sql: String = "") {
        self.version = version
        self.name = name
        self.sql = sql
        self.outsideTransaction = statements
    }
}

/// Applies migrations under an advisory lock, so replicas starting together do not race.
public enum PGMigrator {
    /// An arbitrary constant identifying this service's migration lock.
    static let lockKey: Int64 = 0x6175_7468_776b  // "authwk"

    /// How a migration waits for the locks its statements take.
    public struct LockWaits: Sendable {
        /// The longest a statement waits for a table's lock (`lock_timeout`) before the migration
        /// gives up and is tried again. A statement waiting for a lock that conflicts with the
        /// logins' (`ALTER TABLE`) holds every login behind it; bounded, a long transaction on the
        /// table (a report, a backup's dump) costs the logins that long at most, a try at a time.
        /// Statements that build or drop `CONCURRENTLY` hold no login up and wait without bound.
        public var timeout: TimeInterval
        /// The pause before trying a migration again, and how many tries in all (by default a
        /// minute of them: 40 of half a second, each followed by a pause of 1 s).
        public var pause: TimeInterval
        public var attempts: Int

        public init(timeout: TimeInterval = 0.5, pause: TimeInterval = 1, attempts: Int = 40) {
            self.timeout = timeout
            self.pause = pause
            self.attempts = attempts
        }
    }

    /// Applies every migration newer than the database's version, each in its own transaction.
    /// - Returns: the versions applied now (empty when already up to date).
    /// - Throws: `PGError` `.migration` naming the migration that failed; earlier ones stay applied.
    @discardableResult
    public static func migrate(
        _ connection: PGConnection, migrations: [PGMigration], lockWaits: LockWaits = LockWaits()
    ) throws -> [Int] {
        try takeLock(connection)
        // A build on a big table takes as long as the table needs: the connection's statement
        // timeout (a minute by default, `PGConnection.defaultSettings`) would cancel it there.
        try connection.execute(unsafeSQL: "SET statement_timeout = 0")
        defer {
            _ = try? connection.execute(unsafeSQL: "RESET statement_timeout")
            _ = try? connection.execute(unsafeSQL: "RESET lock_timeout")
            _ = try? connection.query("SELECT pg_advisory_unlock(\(lockKey))")
        }
        try connection.execute(
            unsafeSQL: """
                CREATE TABLE IF NOT EXISTS schema_migrations (
                    version integer PRIMARY KEY,
                    name text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """)
        let applied = Set(
            try connection.query("SELECT version FROM schema_migrations").map { try $0.decode("version", as: Int.self) }
        )
        let bounded = "SET lock_timeout = '\(max(Int(lockWaits.timeout * 1000), 1))ms'"
        var done: [Int] = []
        for migration in migrations.sorted(by: { $0.version < $1.version }) where !applied.contains(migration.version) {
            var attempt = 1
            while true {
                do {
                    try apply(migration, on: connection, bounded: bounded)
                    break
                } catch let error as PGError where error.sqlState == "55P03" && attempt < lockWaits.attempts {
                    // A table's lock not had in time: nothing of the try stayed (its transaction
                    // rolled back; statements outside one are safe to run again).
                    attempt += 1
                    Thread.sleep(forTimeInterval: lockWaits.pause)
                } catch var error as PGError {
                    error.code = error.code == .connection ? .connection : .migration
                    error.step = "migration \(migration.version) \(migration.name)"
                    throw error
                }
            }
            done.append(migration.version)
        }
        return done
    }

    /// One try at one migration: its statements outside a transaction, then its SQL with its record.
    private static func apply(_ migration: PGMigration, on connection: PGConnection, bounded: String) throws {
        for statement in migration.outsideTransaction {
            if let check = migration.skipWhen[statement],
                try connection.query(PGQuery(unsafeSQL: check)).first?.decode("done", as: Bool.self) == true
            {
                continue
            }
            try connection.execute(unsafeSQL: statement.contains("CONCURRENTLY") ? "SET lock_timeout = 0" : bounded)
            try connection.execute(unsafeSQL: statement)
        }
        try connection.execute(unsafeSQL: bounded)
        try connection.withTransaction { connection in
            if !migration.sql.isEmpty { try connection.execute(unsafeSQL: migration.sql) }
            try connection.query(
                "INSERT INTO schema_migrations (version, name) VALUES (\(migration.version), \(migration.name))")
        }
    }

    /// Takes the migration lock, asking again every `retry` while another migrator holds it.
    ///
    /// Not `pg_advisory_lock`, which waits inside its statement: a session waiting there holds a
    /// snapshot, and `CREATE INDEX CONCURRENTLY` in the session holding the lock waits for every
    /// older snapshot to end. Two replicas starting together deadlocked so (PostgreSQL broke it by
    /// failing one of them, which exited). Between two tries a waiting session holds nothing.
    static func takeLock(_ connection: PGConnection, retry: TimeInterval = 0.1) throws {
        while try connection.query("SELECT pg_try_advisory_lock(\(lockKey)) AS locked").first?.decode(
            "locked", as: Bool.self) != true
        {
            Thread.sleep(forTimeInterval: retry)
        }
    }

    /// The highest applied version, or nil for an empty database.
    public static func currentVersion(_ connection: PGConnection) throws -> Int? {
        let exists = try connection.query("SELECT to_regclass('schema_migrations') IS NOT NULL AS present")
        guard try exists.first?.decode("present", as: Bool.self) == true else { return nil }
        return try connection.query("SELECT max(version) AS version FROM schema_migrations").first?
            .decode("version", as: Int?.self)
    }
}
