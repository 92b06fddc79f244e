import AuthCrypto
import Foundation
import Messages
import PGStore
import Testing

@testable import AuthDomain
@testable import AuthStore
@testable import TestSupport

/// PostgreSQL as managed services run it (`ManagedPostgres`): SCRAM-SHA-256 and TLS only, the
/// server verified against a CA (`sslmode=verify-full`), the password from a file, a client
/// certificate; and the worker refusing to start, in one line, when the certificate names another
/// host or the password is wrong.
extension ProcessIntegrationTests {

    @Test(.enabled(if: ManagedPostgres.isPossible, "needs root and PostgreSQL (scripts/dev-env install)"))
    func theWorkerUsesAManagedStylePostgreSQL() async throws {
        let server = try await Blocking.run { try ManagedPostgres() }
        defer { server.stop() }
        let passwordFile = server.directory + "/client/password"
        try Data((server.password + "\n").utf8).write(to: URL(fileURLWithPath: passwordFile))

        // The URL without its password, the password from the file (a mounted Secret).
        let bare = server.url(host: "localhost", withPassword: false)
        let configuration = try WorkerConfiguration.fromEnvironment([
            "AUTH_DATABASE_URL": bare, "AUTH_DATABASE_PASSWORD_FILE": passwordFile,
        ])
        let connection = try PGConnection(conninfo: configuration.databaseURL)
        let row = try #require(
            try connection.query(
                """
                SELECT s.ssl, s.version, a.usename, current_setting('password_encryption') AS encryption
                FROM pg_stat_ssl s JOIN pg_stat_activity a ON a.pid = s.pid WHERE s.pid = pg_backend_pid()
                """
            ).first)
        #expect(try row.decode("ssl", as: Bool.self), "a TLS connection")
        #expect(try row.decode("version", as: String.self).hasPrefix("TLSv1."))
        #expect(try row.decode("encryption", as: String.self) == "scram-sha-256")
        // The worker's store on it: migrations, then a guest's sign-up written and read back.
        let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
        let harness = try await FlowHarness(clock: clock, databaseURL: configuration.databaseURL)
        let guest = try #require(try await harness.handle(makeRequest(.guest)))
        #expect(guest.result.status == "ok" && guest.result.session != nil)
        #expect(try await harness.count("users") == 1)

        // The same in libpq's key=value form: the password quoted into it.
        let keyValue = try WorkerConfiguration.fromEnvironment([
            "AUTH_DATABASE_URL":
                "host=localhost port=\(server.port) dbname=auth user=postgres sslmode=verify-full sslrootcert=\(server.caFile)",
            "AUTH_DATABASE_PASSWORD_FILE": passwordFile,
        ])
        #expect(try PGConnection(conninfo: keyValue.databaseURL).query("SELECT 1 AS one").count == 1)

        // A client certificate instead of a password.
        let certified = try PGConnection(
            conninfo: server.url(user: "certuser", host: "localhost", withPassword: false)
                + "&sslcert=\(server.clientCertificate)&sslkey=\(server.clientKey)")
        #expect(try certified.query("SELECT current_user AS name").first?.decode("name", as: String.self) == "certuser")

        // Without the password, or with another, or to a name the certificate does not carry:
        // the worker stops at start with one line that says why, and never the password.
        try Data("not the password\n".utf8).write(to: URL(fileURLWithPath: passwordFile + ".wrong"))
        let cases: [(String, [String: String], String)] = [
            ("no password", ["AUTH_DATABASE_URL": bare], "password"),
            (
                "a wrong password",
                ["AUTH_DATABASE_URL": bare, "AUTH_DATABASE_PASSWORD_FILE": passwordFile + ".wrong"],
                "password authentication failed"
            ),
            (
                "another host name",
                [
                    "AUTH_DATABASE_URL": server.url(host: "127.0.0.1", withPassword: false),
                    "AUTH_DATABASE_PASSWORD_FILE": passwordFile,
                ], "does not match host name"
            ),
        ]
        let keys = try TestKeys.temporaryKeyFile(.es256)
        defer { try? FileManager.default.removeItem(atPath: keys.0) }
        for (name, environment, reason) in cases {
            let ended = try await runToEnd(
                ["migrate"],
                environment: environment.merging(["AUTH_SIGNING_KEYS": keys.0, "AUTH_HEALTH_PORT": "off"]) { $1 })
            #expect(ended.status == 1, "\(name): \(ended.errors)")
            let lines = ended.errors.split(separator: "\n")
            #expect(lines.count == 1, "\(name): one line: \(ended.errors)")
            #expect(ended.errors.contains(reason), "\(name): \(ended.errors)")
            #expect(!ended.errors.contains("s3cret") && !ended.output.contains("s3cret"), "\(name): the password shown")
        }
    }
}
