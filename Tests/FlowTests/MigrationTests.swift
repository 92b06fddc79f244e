import Foundation
import PGStore
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
}
