import AuthDomain
import Foundation
import PGStore
import Synchronization
import Testing

@testable import AuthStore
@testable import TestSupport

/// The application's migrations, applied to a real PostgreSQL.
@Suite(.requiresDatabase) struct MigrationTests {
    @Test func migrationsApplyOnceAndRecordTheirVersion() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        #expect(try PGMigrator.currentVersion(connection) == nil)
        #expect(try PGMigrator.migrate(connection, migrations: Migrations.all) == Migrations.all.map(\.version))
        #expect(try PGMigrator.migrate(connection, migrations: Migrations.all) == [])
        #expect(try PGMigrator.currentVersion(connection) == Migrations.all.map(\.version).max())
        let tables = try connection.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1"
        ).map { try $0.decode("table_name", as: String.self) }
        #expect(
            tables == [
                "access_tokens", "admin_roles", "apple_jobs", "apple_tokens", "audit_log", "console_sessions",
                "identities",
                "login_throttle",
                "mfa_factors", "mfa_recovery_codes", "one_time_codes", "outbox", "passkey_users", "passkeys",
                "processed_requests", "rate_limits",
                "refresh_tokens", "schema_migrations", "sessions", "users", "webauthn_challenges",
            ])
        let views = try connection.query(
            "SELECT table_name FROM information_schema.views WHERE table_schema = 'public' ORDER BY 1"
        ).map { try $0.decode("table_name", as: String.self) }
        #expect(views == ["gateway_access_tokens"], "the read-only view gateways may be granted")
        // Every event an insert writes is indexed twice: by its sequence and by its id (the marks).
        let outboxIndexes = try connection.query(
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'outbox' ORDER BY 1"
        ).map { try $0.decode("indexname", as: String.self) }
        #expect(outboxIndexes == ["outbox_event_id_key", "outbox_pkey"])
    }

    /// Jobs that finished before migration 18 drop the secrets they kept; a job still to run
    /// keeps its own.
    @Test func finishedAppleJobsDropTheirSecretsOnUpgrade() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        _ = try PGMigrator.migrate(connection, migrations: Migrations.all.filter { $0.version < 18 })
        _ = try connection.execute(
            unsafeSQL: """
                INSERT INTO apple_jobs (id, kind, subject, client_id, secret_sealed, next_attempt_at, created_at,
                                        finished_at, outcome)
                VALUES (gen_random_uuid(), 'revoke', 'done', 'client', '\\x0102'::bytea, now(), now(), now(), 'revoked'),
                       (gen_random_uuid(), 'revoke', 'due', 'client', '\\x0304'::bytea, now(), now(), NULL, NULL)
                """)
        #expect(try PGMigrator.migrate(connection, migrations: Migrations.all).contains(18))
        let secrets = try connection.query(
            "SELECT subject, octet_length(secret_sealed) AS n FROM apple_jobs ORDER BY 1"
        )
        .map { "\(try $0.decode("subject", as: String.self)) \(try $0.decode("n", as: Int.self))" }
        #expect(secrets == ["done 0", "due 2"])
    }

    /// Deleting a row checks each foreign key that references its table by looking the row up in
    /// the referencing table: without an index that leads with the referencing columns (a partial
    /// one does not serve), that is a read of the whole table for every row deleted.
    @Test func everyForeignKeyHasAnIndexToCheckItBy() throws {
        let connection = try PGConnection(conninfo: try IntegrationEnvironment.makeDatabaseNow())
        _ = try PGMigrator.migrate(connection, migrations: Migrations.all)
        let unserved = try connection.query(
            """
            SELECT c.conrelid::regclass::text || ' ' || c.conname AS key FROM pg_constraint c
            WHERE c.contype = 'f' AND NOT EXISTS (
                SELECT 1 FROM pg_index i
                WHERE i.indrelid = c.conrelid AND i.indpred IS NULL
                  AND (i.indkey::int2[])[0:cardinality(c.conkey) - 1] = c.conkey)
            ORDER BY 1
            """
        ).map { try $0.decode("key", as: String.self) }
        #expect(unserved == [])
    }

    /// A user with sessions, tokens (a family rotated five times), codes, challenges and a console
    /// session is deleted among thousands of others' rows: every table the deletion cascades
    /// through is read by index, none whole (`pg_stat_xact_user_tables` counts the transaction's
    /// own scans, the foreign keys' checks included).
    @Test func deletingAUserReadsNoWholeTable() async throws {
        let connection = try await Self.thousandsOfUsersDatabase()
        let tables = [
            "access_tokens", "console_sessions", "one_time_codes", "refresh_tokens", "sessions", "users",
            "webauthn_challenges",
        ]
        _ = try connection.execute(unsafeSQL: "BEGIN")
        defer { _ = try? connection.execute(unsafeSQL: "ROLLBACK") }
        let deleted = try connection.query("DELETE FROM users WHERE handle = 'h1234' RETURNING id")
        #expect(deleted.count == 1)
        let scans = try connection.query(
            """
            SELECT relname, seq_scan, n_tup_del FROM pg_stat_xact_user_tables
            WHERE relname = ANY(\(PGArray(tables))) ORDER BY relname
            """
        ).map { row in
            (
                try row.decode("relname", as: String.self), try row.decode("seq_scan", as: Int.self),
                try row.decode("n_tup_del", as: Int.self)
            )
        }
        #expect(scans.map(\.0) == tables)
        for (table, sequentialScans, _) in scans {
            #expect(sequentialScans == 0, "\(table) was read whole")
        }
        // The cascade still took every row of the user's: one user, one session, five refresh
        // tokens, one of everything else.
        let deletions = Dictionary(uniqueKeysWithValues: scans.map { ($0.0, $0.2) })
        #expect(
            deletions == [
                "access_tokens": 1, "console_sessions": 1, "one_time_codes": 1, "refresh_tokens": 5, "sessions": 1,
                "users": 1, "webauthn_challenges": 1,
            ])
    }

    /// What the account export (`account_export`) and the devices list (`session_list`) read of
    /// one user among thousands: every row by index, no table whole.
    @Test func exportingAnAccountReadsNoWholeTable() async throws {
        let connection = try await Self.thousandsOfUsersDatabase()
        let id = try #require(
            try connection.query("SELECT id FROM users WHERE handle = 'h1234'").first?.decode("id", as: UUID.self))
        _ = try connection.execute(unsafeSQL: "BEGIN")
        defer { _ = try? connection.execute(unsafeSQL: "ROLLBACK") }
        let unit = PostgresUnitOfWork(transaction: PGTransaction(connection: connection))
        let records = try unit.accountRecords(userID: id)
        let sessions = try unit.sessionDetails(userID: id, live: false, at: Date())
        #expect(records.identities.count == 1)
        #expect(records.unusedRecoveryCodes == 3)
        #expect(records.codes.count == 1)
        #expect(records.requests.count == 5)
        #expect(records.audit.count == 5)
        #expect(records.passkeyChallenges.count == 1)
        #expect(records.consoleSessions.count == 1)
        #expect(sessions.count == 1)
        let tables = [
            "audit_log", "console_sessions", "identities", "mfa_recovery_codes", "one_time_codes",
            "processed_requests", "refresh_tokens", "sessions", "users", "webauthn_challenges",
        ]
        let scans = try connection.query(
            """
            SELECT relname, seq_scan FROM pg_stat_xact_user_tables
            WHERE relname = ANY(\(PGArray(tables))) AND seq_scan > 0 ORDER BY relname
            """
        ).map { try $0.decode("relname", as: String.self) }
        #expect(scans == [], "read whole")
        // The session's last use is its newest refresh token's time: at most one token read of
        // its five (five by the index on the session alone). None when the read is index-only and
        // autovacuum has already marked the table's pages all-visible (CI at c46ded8 saw it).
        let tokensRead = try connection.query(
            "SELECT idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relname = 'refresh_tokens'"
        ).first?.decode("idx_tup_fetch", as: Int.self)
        #expect((tokensRead ?? 5) <= 1, "\(tokensRead ?? -1) refresh tokens read")
    }

    /// A fresh database as the migrations leave it: the plans a connection caches on its first
    /// rows (the foreign keys' checks, made once a connection) find the referenced row by its key
    /// as the tables fill. A migration that analyzed `users` while it was empty recorded it as
    /// holding nothing, and each connection's check of `sessions.user_id` became a sequential
    /// scan of `users`, kept as the table grew: guest logins 12,700 → 8,000/s, PostgreSQL 61 →
    /// 138 µs a login in the bench.
    @Test func aFreshDatabasesCachedPlansStayIndexScansAsItFills() async throws {
        let url = try IntegrationEnvironment.makeDatabaseNow()
        let scans = try await Blocking.run {
            let migrator = try PGConnection(conninfo: url)
            _ = try PGMigrator.migrate(migrator, migrations: Migrations.all)
            let connection = try PGConnection(conninfo: url)
            _ = try connection.execute(unsafeSQL: "BEGIN")
            defer { _ = try? connection.execute(unsafeSQL: "ROLLBACK") }
            let fill = """
                INSERT INTO users (id, handle, is_guest, created_at, updated_at)
                    SELECT md5('u' || g)::uuid, 'h' || g, true, now(), now() FROM generate_series(1, 2000) g;
                INSERT INTO sessions (id, user_id, provider, abilities, created_at, expires_at)
                    SELECT md5('s' || g)::uuid, md5('u' || g)::uuid, 'guest', '{}', now(), now() + interval '1 day'
                    FROM generate_series(1, 2000) g;
                """
            _ = try connection.execute(unsafeSQL: fill.replacingOccurrences(of: "2000", with: "1"))
            _ = try connection.execute(unsafeSQL: fill.replacingOccurrences(of: "(1, 2000)", with: "(2, 2000)"))
            return try connection.query(
                "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'users'"
            ).first?.decode("seq_scan", as: Int.self)
        }
        #expect(scans == 0, "users read whole for the sessions' foreign key")
    }

    /// A refresh's rotation and a returning sign-in's stamp update rows that later inserts
    /// buried: pages filled to the brim would send each new version to another page, with an
    /// entry in each of the table's indexes (three pages more to change a login, each written
    /// whole to the WAL after a checkpoint, at ten million accounts most of what a refresh cost).
    /// With the room migration 25 leaves, the worker's own rotation statement and the identity's
    /// stamp are heap-only updates: no index entry.
    @Test func aRotationAndAReturningSignInUpdateTheirRowInPlace() async throws {
        let url = try await IntegrationEnvironment.makeMigratedDatabase()
        let updates = try await Blocking.run {
            let connection = try PGConnection(conninfo: url)
            _ = try connection.execute(unsafeSQL: "BEGIN")
            defer { _ = try? connection.execute(unsafeSQL: "ROLLBACK") }
            // Pages full of rows written after the ones updated: 2,000 tokens and identities.
            _ = try connection.execute(
                unsafeSQL: """
                    INSERT INTO users (id, handle, is_guest, created_at, updated_at)
                        SELECT md5('u' || g)::uuid, 'h' || g, false, now(), now() FROM generate_series(1, 2000) g;
                    INSERT INTO identities (provider, subject, user_id, email, created_at, last_login_at)
                        SELECT 'apple', '001.' || g, md5('u' || g)::uuid, 'u' || g || '@example.com', now(), now()
                        FROM generate_series(1, 2000) g;
                    INSERT INTO sessions (id, user_id, provider, abilities, created_at, expires_at)
                        VALUES ('00000000-0000-0000-0001-000000000001', md5('u1')::uuid, 'apple', '{}', now(),
                                now() + interval '1 day');
                    INSERT INTO refresh_tokens (id, session_id, token_hash, created_at, expires_at)
                        SELECT ('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid,
                               '00000000-0000-0000-0001-000000000001', sha256(g::text::bytea), now(),
                               now() + interval '1 day'
                        FROM generate_series(1, 2000) g;
                    """)
            // Twenty rows a hundred apart, each on a page of its own, as a day's refreshes are
            // (a page's room holds a few new versions until the dead ones are pruned).
            var writes = Writes()
            for index in stride(from: 1, through: 1901, by: 100) {
                let used = try #require(UUID(uuidString: "00000000-0000-0000-0000-\(String(format: "%012d", index))"))
                let successor = UUID()
                writes.refreshTokens.append(
                    NewRefreshTokenRow(
                        id: successor,
                        sessionID: try #require(UUID(uuidString: "00000000-0000-0000-0001-000000000001")),
                        hash: Array(repeating: UInt8(truncatingIfNeeded: index), count: 32), parentID: used,
                        createdAt: Date(),
                        expiresAt: Date() + 3600))
                writes.rotations.append(
                    RotationRow(
                        usedTokenID: used, at: Date(), successorID: successor,
                        successorSealed: Array(repeating: 7, count: 96)))
            }
            for query in writes.queries() { _ = try connection.query(query) }
            _ = try connection.execute(
                unsafeSQL: """
                    UPDATE identities SET email = email, last_login_at = now()
                    WHERE provider = 'apple' AND subject IN (SELECT '001.' || g FROM generate_series(1, 1901, 100) g)
                    """)
            return try connection.query(
                """
                SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
                WHERE relname IN ('refresh_tokens', 'identities') ORDER BY relname
                """
            ).map {
                "\(try $0.decode("relname", as: String.self)) \(try $0.decode("n_tup_upd", as: Int.self)) "
                    + "\(try $0.decode("n_tup_hot_upd", as: Int.self))"
            }
        }
        // Each table: 20 updates, all heap-only.
        #expect(updates == ["identities 20 20", "refresh_tokens 20 20"])
    }

    /// A writer's foreign-key checks after autovacuum analyzed `users` while it was small (its
    /// first visit comes at 50 changed rows): a connection plans each check once and keeps the
    /// plan until the table is analyzed again, and planned against a table of one page it is a
    /// sequential scan, kept as sign-ups fill the table (a fresh deployment's first minute
    /// under a burst, or a load test right after a deploy). A writer's transaction disfavours
    /// sequential scans, so the check is planned by the key whatever the statistics say.
    @Test func aWritersForeignKeyChecksFindUsersByKeyAfterASmallTableWasAnalyzed() async throws {
        let url = try await IntegrationEnvironment.makeMigratedDatabase()
        let now = Date(timeIntervalSince1970: 1_795_953_600)
        let scans = try await Blocking.run {
            let connection = try PGConnection(conninfo: url)
            /// Guests `range` with a session each, in one transaction as a writer sends it (the
            /// writes in the commit's round trip).
            func signUp(_ range: Range<Int>) throws {
                let unit = PostgresUnitOfWork(transaction: PGTransaction(connection: connection))
                var prefetch = Prefetch()
                prefetch.handles = range.map { "h\($0)" }
                try unit.begin(head: [], prefetch: prefetch)
                for n in range {
                    unit.beginRequest(tenant: TenantScope.defaultName)
                    let user = try unit.insertUser(
                        NewUser(
                            id: UUID(), name: nil, email: nil, emailVerified: false, isPrivateEmail: false,
                            isGuest: true, createdAt: now),
                        handles: ["h\(n)"])
                    try unit.insertSession(
                        NewSession(
                            id: UUID(), provider: "guest", deviceName: nil, devicePlatform: nil, abilities: [],
                            createdAt: now, expiresAt: now + 86_400, accessTokenID: UUID(), accessTokenHash: nil,
                            accessTokenExpiresAt: now + 3600, refreshTokenID: UUID(),
                            refreshTokenHash: Array(String(format: "%032d", n).utf8),
                            refreshTokenExpiresAt: now + 86_400),
                        userID: user.id)
                    unit.endRequest()
                }
                // This connection's counts reach the statistics at its commit.
                try connection.query("SELECT pg_stat_force_next_flush()")
                try unit.commit()
            }
            /// The rows of `users` read by sequential scans so far (nil without statistics, which
            /// then fails the expectation rather than passing it).
            func usersReadWhole() throws -> Int? {
                try connection.query("SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = 'users'").first?
                    .decode("seq_tup_read")
            }
            try signUp(0..<60)
            _ = try PGConnection(conninfo: url).execute(unsafeSQL: "ANALYZE users")
            // A light load's transactions of one sign-up each: from the sixth on, a check may run
            // from a plan cached on the connection, made for the table's size then.
            for n in 60..<70 { try signUp(n..<n + 1) }
            let before = try usersReadWhole()
            for start in stride(from: 70, to: 2070, by: 500) { try signUp(start..<start + 500) }
            let after = try usersReadWhole()
            return before.flatMap { before in after.map { $0 - before } }
        }
        #expect(scans == 0, "rows of users read whole for the sessions' foreign key")
    }

    /// The console's user search and `auth-worker users show` among thousands of users: every
    /// way they match (an address in any case or by its beginning, a handle's or a phone number's beginning, a
    /// provider's subject, an id, a page of the newest) read by index, no table whole (a search
    /// read `users` and `identities` whole, 0.7 s at a million accounts), and the matches newest
    /// first.
    @Test func searchingUsersReadsNoWholeTable() async throws {
        let connection = try await Self.thousandsOfUsersDatabase()
        _ = try connection.execute(unsafeSQL: "BEGIN")
        defer { _ = try? connection.execute(unsafeSQL: "ROLLBACK") }
        let id = try #require(
            try connection.query("SELECT id FROM users WHERE handle = 'h1234'").first?.decode("id", as: UUID.self))
        try connection.query(
            "UPDATE users SET email = 'Person' || handle || '@Mail.example' WHERE handle IN ('h77', 'h778')")
        try connection.query(
            """
            UPDATE users SET phone = '+1415555' || (1000 + substr(handle, 2)::int)
            WHERE handle IN ('h12', 'h13', 'h500')
            """)
        try connection.query(
            """
            INSERT INTO identities (provider, subject, user_id, created_at, last_login_at)
            VALUES ('apple', '001234.0f0e.0123', \(id), now(), now())
            """)
        func found(_ query: String, offset: Int = 0) throws -> [String] {
            let rows = try connection.query(
                PostgresStore.userSearch(query, tenant: "default", offset: offset, limit: 21))
            let ids = try rows.map { try $0.decode("id", as: UUID.self) }
            #expect(ids.map(\.uuidString) == ids.map(\.uuidString).sorted(by: >), "newest (the highest id) first")
            return try rows.map { try $0.decode("handle") }
        }
        #expect(try found("U1234@Example.COM") == ["h1234"], "a password identity's address, in any case")
        #expect(try found("001234.0f0e.0123") == ["h1234"], "an Apple subject")
        #expect(try found("001234.0F0E.0123") == [], "subjects are matched exactly")
        #expect(try found(id.uuidString) == ["h1234"])
        #expect(try Set(found("personh77")) == ["h77", "h778"], "users' own addresses by their beginning")
        #expect(try Set(found("  h123 ")) == Set(["h123"] + (0...9).map { "h123\($0)" }), "handles by their beginning")
        #expect(try found("h\\") == [] && found("h%") == [] && found("h_") == [], "LIKE's characters are literal")
        #expect(try found("nobody") == [])
        #expect(try Set(found("+141555510")) == ["h12", "h13"], "phone numbers by their beginning")
        #expect(try found("+14155551500") == ["h500"])
        let all = try connection.query("SELECT id FROM users ORDER BY id DESC LIMIT 21 OFFSET 40").map {
            try $0.decode("id", as: UUID.self)
        }
        let page = try connection.query(PostgresStore.userSearch("", tenant: "default", offset: 40, limit: 21)).map {
            try $0.decode("id", as: UUID.self)
        }
        #expect(page == all && page.count == 21, "everyone, newest first, a page at a time")
        let report = try #require(
            try connection.query(UserReport.lookup("PersonH778@mail.example", tenant: "default")).first)
        #expect(try report.decode("handle", as: String.self) == "h778")
        let byIdentity = try #require(
            try connection.query(UserReport.lookup("u1234@EXAMPLE.com", tenant: "default")).first)
        #expect(try byIdentity.decode("id", as: UUID.self) == id)
        #expect(try connection.query(UserReport.lookup(id.uuidString, tenant: "default")).count == 1)
        let byPhone = try #require(try connection.query(UserReport.lookup("+14155551500", tenant: "default")).first)
        #expect(try byPhone.decode("handle", as: String.self) == "h500")
        let scans = try connection.query(
            """
            SELECT relname, seq_scan FROM pg_stat_xact_user_tables
            WHERE relname IN ('users', 'identities') AND seq_scan > 0 ORDER BY relname
            """
        ).map { try $0.decode("relname", as: String.self) }
        #expect(scans == [], "read whole")
    }

    /// Four thousand users with a session each, a family of five refresh tokens, an access token, a
    /// code, a passkey challenge, a console session, a password identity, recovery codes, five
    /// kept requests and five audit rows, analyzed: enough that PostgreSQL reads a user's rows by
    /// index wherever an index serves.
    /// A migrated database holding `thousandsOfUsers`, filled on a thread of its own (seconds of
    /// statements that would hold one of the few cooperative threads the other tests need).
    /// Migration 26 on a running deployment of a million accounts: every existing row is the
    /// default tenant's, the keys gain the tenant, and sign-ins as the release before makes them
    /// (by `(provider, subject)`, inserting without a tenant) go on throughout, none held up for a
    /// second, even while a long transaction holds a table the migration must alter (each `ALTER`
    /// gives up after half a second and the migration is tried again).
    @Test(.timeLimit(.minutes(10))) func tenantsArriveOnAMillionAccountsWithoutHoldingSignInsUp() async throws {
        let url = try await IntegrationEnvironment.makeDatabase()
        let before = Migrations.all.filter { $0.version < 26 }
        try await Blocking.run {
            let connection = try PGConnection(conninfo: url)
            try PGMigrator.migrate(connection, migrations: before)
            // The load is the test's setup, not a statement the worker runs: no time limit (under
            // a full parallel run it took over the connections' default minute).
            try connection.execute(unsafeSQL: "SET statement_timeout = 0")
            for load in [
                """
                INSERT INTO users (id, handle, email_verified, is_private_email, is_guest, created_at, updated_at)
                SELECT md5(n::text)::uuid, 'user_' || n, false, false, false, now(), now()
                FROM generate_series(1, 1000000) AS n
                """,
                """
                INSERT INTO identities (provider, subject, user_id, email_verified, is_private_email, created_at,
                                        last_login_at)
                SELECT 'apple', 'sub.' || n, md5(n::text)::uuid, false, false, now(), now()
                FROM generate_series(1, 1000000) AS n
                """,
                """
                INSERT INTO processed_requests (request_id, method, status, processed_at, expires_at)
                SELECT 'request-' || n, 'apple', 'ok', now(), now() + interval '1 day'
                FROM generate_series(1, 1000000) AS n
                """,
                "ANALYZE",
            ] {
                try connection.execute(unsafeSQL: load)
            }
        }
        let migrating = Atomic<Bool>(true)
        // Sign-ins as the release before writes them, one after another, each timed.
        let probes = Task {
            try await Blocking.run {
                let connection = try PGConnection(conninfo: url)
                var slowest: TimeInterval = 0
                var count = 0
                while migrating.load(ordering: .relaxed) || count < 5 {
                    count += 1
                    let began = Date()
                    try connection.execute(
                        unsafeSQL: """
                            BEGIN;
                            SELECT user_id FROM identities WHERE provider = 'apple' AND subject = 'sub.\(count * 7)'
                                FOR UPDATE;
                            INSERT INTO users (id, handle, email_verified, is_private_email, is_guest, created_at,
                                               updated_at)
                                VALUES ('\(UUID())', 'probe_\(count)', false, false, false, now(), now());
                            INSERT INTO identities (provider, subject, user_id, email_verified, is_private_email,
                                                    created_at, last_login_at)
                                SELECT 'apple', 'probe.\(count)', id, false, false, now(), now() FROM users
                                WHERE handle = 'probe_\(count)';
                            INSERT INTO processed_requests (request_id, method, status, processed_at, expires_at)
                                VALUES ('probe-\(count)', 'apple', 'ok', now(), now() + interval '1 day');
                            COMMIT
                            """)
                    slowest = max(slowest, Date().timeIntervalSince(began))
                    Thread.sleep(forTimeInterval: 0.01)
                }
                return (slowest, count)
            }
        }
        // A long transaction (a report) holds `users` for two seconds as the migration begins.
        let report = Task {
            try await Blocking.run {
                let connection = try PGConnection(conninfo: url)
                try connection.execute(unsafeSQL: "BEGIN; SELECT count(*) FROM users; SELECT pg_sleep(2); COMMIT")
            }
        }
        try await Task.sleep(for: .milliseconds(200))
        let began = Date()
        let applied = try await Blocking.run {
            try PGMigrator.migrate(try PGConnection(conninfo: url), migrations: Migrations.all)
        }
        let took = Date().timeIntervalSince(began)
        migrating.store(false, ordering: .relaxed)
        let (slowest, signIns) = try await probes.value
        try await report.value
        #expect(applied.contains(26))
        #expect(took > 1.5, "the migration waited for the report, a try at a time (\(took) s)")
        #expect(slowest < 1.0, "the slowest of \(signIns) sign-ins during the migration took \(slowest) s")
        try await Blocking.run {
            let connection = try PGConnection(conninfo: url)
            for table in Migrations.tenantTables {
                let others = try connection.query(
                    PGQuery(unsafeSQL: "SELECT count(*) AS n FROM \(table) WHERE tenant <> 'default'"))
                #expect(try others.first?.decode("n", as: Int.self) == 0, "\(table)")
            }
            let defaults = try connection.query("SELECT count(*) AS n FROM identities WHERE tenant = 'default'")
            #expect(try defaults.first?.decode("n", as: Int.self) == 1_000_000 + signIns)
            // The keys, under their old names, end with the tenant; no index is left over.
            let keys = try connection.query(
                """
                SELECT c.relname AS name, pg_get_indexdef(c.oid) AS definition
                FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
                WHERE c.relname IN ('identities_pkey', 'users_handle', 'processed_requests_pkey',
                                    'passkeys_credential_id_key', 'apple_tokens_key_by_tenant')
                   OR c.relname LIKE '%_by_tenant%'
                ORDER BY 1
                """
            ).map { (try $0.decode("name", as: String.self), try $0.decode("definition", as: String.self)) }
            #expect(
                keys.map(\.0) == [
                    "apple_tokens_key_by_tenant", "identities_pkey", "passkeys_credential_id_key",
                    "processed_requests_pkey",
                    "users_handle",
                ])
            #expect(keys.allSatisfy { $0.1.hasSuffix(", tenant)") }, "\(keys)")
        }
    }

    static func thousandsOfUsersDatabase() async throws -> PGConnection {
        let url = try IntegrationEnvironment.makeDatabaseNow()
        try await Blocking.run {
            let connection = try PGConnection(conninfo: url)
            _ = try PGMigrator.migrate(connection, migrations: Migrations.all)
            _ = try connection.execute(unsafeSQL: Self.thousandsOfUsers)
        }
        return try PGConnection(conninfo: url)
    }

    static let thousandsOfUsers = """
        INSERT INTO users (id, handle, is_guest, created_at, updated_at)
            SELECT md5('u' || g)::uuid, 'h' || g, true, now(), now() FROM generate_series(1, 4000) g;
        INSERT INTO sessions (id, user_id, provider, abilities, created_at, expires_at)
            SELECT md5('s' || g)::uuid, md5('u' || g)::uuid, 'guest', '{}', now(), now() + interval '30 days'
            FROM generate_series(1, 4000) g;
        INSERT INTO refresh_tokens (id, session_id, token_hash, parent_id, created_at, expires_at)
            SELECT md5('r' || g || '.' || k)::uuid, md5('s' || g)::uuid,
                   sha256(convert_to('t' || g || '.' || k, 'UTF8')),
                   CASE WHEN k > 1 THEN md5('r' || g || '.' || (k - 1))::uuid END,
                   now(), now() + interval '30 days'
            FROM generate_series(1, 4000) g, generate_series(1, 5) k;
        INSERT INTO access_tokens (id, session_id, token_hash, abilities, created_at, expires_at)
            SELECT md5('a' || g)::uuid, md5('s' || g)::uuid, sha256(convert_to('a' || g, 'UTF8')), '{}',
                   now(), now() + interval '1 hour'
            FROM generate_series(1, 4000) g;
        INSERT INTO one_time_codes (id, user_id, purpose, email, code_hmac, link_hash, created_at, expires_at)
            SELECT md5('c' || g)::uuid, md5('u' || g)::uuid, 'verify_email', 'u' || g || '@example.com',
                   sha256(convert_to('c' || g, 'UTF8')), sha256(convert_to('l' || g, 'UTF8')),
                   now(), now() + interval '15 minutes'
            FROM generate_series(1, 4000) g;
        INSERT INTO webauthn_challenges (challenge_hash, purpose, user_id, created_at, expires_at)
            SELECT sha256(convert_to('w' || g, 'UTF8')), 'register', md5('u' || g)::uuid, now(),
                   now() + interval '5 minutes'
            FROM generate_series(1, 4000) g;
        INSERT INTO console_sessions (id_hash, user_id, session_id, client, created_at, last_seen_at)
            SELECT sha256(convert_to('k' || g, 'UTF8')), md5('u' || g)::uuid, md5('s' || g)::uuid, 'test',
                   now(), now()
            FROM generate_series(1, 4000) g;
        INSERT INTO identities (provider, subject, user_id, email, created_at, last_login_at)
            SELECT 'password', 'u' || g || '@example.com', md5('u' || g)::uuid, 'u' || g || '@example.com', now(),
                   now()
            FROM generate_series(1, 4000) g;
        INSERT INTO mfa_recovery_codes (user_id, code_hash)
            SELECT md5('u' || g)::uuid, sha256(convert_to('m' || g || '.' || k, 'UTF8'))
            FROM generate_series(1, 4000) g, generate_series(1, 3) k;
        INSERT INTO processed_requests (request_id, method, status, user_id, session_id, processed_at, expires_at)
            SELECT 'request-' || g || '.' || k, 'refresh', 'ok', md5('u' || g)::uuid, md5('s' || g)::uuid, now(),
                   now() + interval '7 days'
            FROM generate_series(1, 4000) g, generate_series(1, 5) k;
        INSERT INTO audit_log (at, user_id, action, outcome, request_id, actor)
            SELECT now(), md5('u' || g)::uuid, 'refresh', 'ok', 'request-' || g || '.' || k, 'user'
            FROM generate_series(1, 4000) g, generate_series(1, 5) k;
        ANALYZE;

        """
}
