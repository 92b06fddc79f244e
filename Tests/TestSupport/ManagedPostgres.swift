import Foundation
import PGStore

#if canImport(Glibc)
    import Glibc
#endif

/// A PostgreSQL server set up as managed services run it: SCRAM-SHA-256 passwords and TLS only
/// (`hostssl`, no `trust`, no plain TCP), its certificate issued by a CA this test makes for the
/// name `localhost` only, and a client certificate that signs `certuser` in (`cert` auth). On a
/// free loopback port, in a directory of its own; `stop()` ends it.
final class ManagedPostgres: @unchecked Sendable {
    let port: Int
    let directory: String
    /// The superuser's password (`postgres`).
    let password = "s3cret 'with' \\ and %20 spaces"
    var caFile: String { directory + "/client/ca.crt" }
    var clientCertificate: String { directory + "/client/certuser.crt" }
    var clientKey: String { directory + "/client/certuser.key" }
    private var server: Process?

    static var isPossible: Bool { IsolatedCluster.isPossible }

    init() throws {
        port = try IsolatedCluster.freePort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("managed-pg-\(UUID())").path
        let fm = FileManager.default
        try fm.createDirectory(atPath: directory + "/server", withIntermediateDirectories: true)
        try fm.createDirectory(atPath: directory + "/client", withIntermediateDirectories: true)
        try makeCertificates()
        try IsolatedCluster.run("/bin/chown", ["-R", "postgres:postgres", directory + "/server"])
        try IsolatedCluster.run("/bin/chown", ["postgres:postgres", directory])
        try Data((password + "\n").utf8).write(to: URL(fileURLWithPath: directory + "/server/pwfile"))
        try IsolatedCluster.run("/bin/chown", ["postgres:postgres", directory + "/server/pwfile"])
        try IsolatedCluster.run(
            "/usr/sbin/runuser",
            [
                "-u", "postgres", "--", "\(IsolatedCluster.pgBin)/initdb", "-D", directory + "/server/data", "-U",
                "postgres", "--auth=scram-sha-256", "--pwfile", directory + "/server/pwfile", "-E", "UTF8",
                "--locale=C.UTF-8",
            ])
        // Only TLS connections, with a password or (for certuser) a client certificate.
        try Data(
            """
            hostssl all certuser 127.0.0.1/32 cert
            hostssl all all 127.0.0.1/32 scram-sha-256

            """.utf8
        ).write(to: URL(fileURLWithPath: directory + "/server/data/pg_hba.conf"))
        try start()
        let admin = try PGConnection(conninfo: url(user: "postgres", host: "localhost", database: "postgres"))
        try admin.execute(unsafeSQL: "CREATE DATABASE auth")
        try admin.execute(unsafeSQL: "CREATE ROLE certuser LOGIN; GRANT ALL ON DATABASE auth TO certuser")
        try PGConnection(conninfo: url(user: "postgres", host: "localhost", database: "auth")).execute(
            unsafeSQL: "GRANT ALL ON SCHEMA public TO certuser")
    }

    /// A URL verifying the server fully against the test's CA; the password only when asked.
    func url(user: String = "postgres", host: String, database: String = "auth", withPassword: Bool = true) -> String {
        var url = "postgresql://\(user)@\(host):\(port)/\(database)?sslmode=verify-full&sslrootcert=\(caFile)"
        if withPassword, user == "postgres" {
            url += "&password=" + (password.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")
        }
        return url
    }

    private func start() throws {
        let data = directory + "/server/data"
        server = try IsolatedCluster.spawn(
            "/usr/sbin/runuser",
            [
                "-u", "postgres", "--", "\(IsolatedCluster.pgBin)/postgres", "-D", data, "-p", String(port), "-k",
                directory, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "ssl=on", "-c",
                "ssl_cert_file=\(directory)/server/server.crt", "-c", "ssl_key_file=\(directory)/server/server.key",
                "-c", "ssl_ca_file=\(directory)/server/ca.crt", "-c", "password_encryption=scram-sha-256",
            ])
        try IsolatedCluster.waitForPort(port, of: server)
        for _ in 0..<100 {
            if (try? PGConnection(conninfo: url(host: "localhost", database: "postgres"))) != nil { return }
            usleep(100_000)
        }
        throw IsolatedCluster.Failure(description: "the managed PostgreSQL did not take connections")
    }

    /// A CA, the server's certificate for `localhost` only (not `127.0.0.1`), and certuser's.
    private func makeCertificates() throws {
        let server = directory + "/server", client = directory + "/client"
        let authority = try TestCertificateAuthority(directory: client)
        try authority.issue(
            "server", subject: "/CN=localhost", extensions: ["subjectAltName=DNS:localhost"], in: server)
        try authority.issue("certuser", subject: "/CN=certuser", extensions: ["extendedKeyUsage=clientAuth"])
        try FileManager.default.copyItem(atPath: authority.certificate, toPath: server + "/ca.crt")
    }

    func stop() {
        if let text = try? String(contentsOfFile: directory + "/server/data/postmaster.pid", encoding: .utf8),
            let pid = Int32(text.split(separator: "\n").first ?? "")
        {
            kill(pid, SIGQUIT)
        }
        server?.waitUntilExit()
        try? FileManager.default.removeItem(atPath: directory)
    }
}
