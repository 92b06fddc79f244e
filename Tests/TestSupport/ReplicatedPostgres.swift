import Foundation
import PGStore

#if canImport(Glibc)
    import Glibc
#endif

/// A primary and a synchronous streaming standby on loopback, as a managed service's high
/// availability runs them: TLS and SCRAM only, the standby made from the primary with
/// `pg_basebackup` and named in the primary's `synchronous_standby_names`, so a commit is
/// acknowledged only once the standby has it. Clients use a multi-host URL with
/// `target_session_attrs=read-write`: whichever node is the primary takes the writes.
final class ReplicatedPostgres: @unchecked Sendable {
    // @unchecked: driven by the one test.
    let directory: String
    let password = UUID().uuidString
    let ports: [Int]
    let authority: TestCertificateAuthority
    private var servers: [Int: Process] = [:]
    static let standbyName = "standby1"

    static var isPossible: Bool {
        IsolatedCluster.isPossible
            && FileManager.default.isExecutableFile(atPath: "\(IsolatedCluster.pgBin)/pg_basebackup")
    }

    init() throws {
        directory = "/tmp/auth-failover-\(UUID().uuidString.prefix(8))"
        ports = [try IsolatedCluster.freePort(), try IsolatedCluster.freePort()]
        authority = try TestCertificateAuthority(directory: directory + "/tls")
        try authority.issue("server", subject: "/CN=127.0.0.1", extensions: ["subjectAltName=IP:127.0.0.1"])
        try Data((password + "\n").utf8).write(to: URL(fileURLWithPath: directory + "/tls/pwfile"))
        try IsolatedCluster.run("/bin/chown", ["-R", "postgres:postgres", directory])
        try Self.asPostgres(
            "\(IsolatedCluster.pgBin)/initdb",
            [
                "-D", node(0), "-U", "postgres", "--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile",
                directory + "/tls/pwfile", "-E", "UTF8", "--locale=C.UTF-8",
            ])
        try Data(
            """
            local all postgres trust
            hostssl all all 127.0.0.1/32 scram-sha-256
            hostssl replication postgres 127.0.0.1/32 scram-sha-256

            """.utf8
        ).write(to: URL(fileURLWithPath: node(0) + "/pg_hba.conf"))
        try start(0)
        // The standby, copied from the running primary; it follows it from the start.
        try Self.asPostgres(
            "\(IsolatedCluster.pgBin)/pg_basebackup",
            [
                "-D", node(1), "-R", "-X", "stream", "-d",
                "host=127.0.0.1 port=\(ports[0]) user=postgres password=\(password) sslmode=verify-full sslrootcert=\(authority.certificate) application_name=\(Self.standbyName)",
            ])
        try start(1)
        // Synchronous from now on, on the primary only (the standby, once promoted, has no
        // standby of its own to wait for).
        let primary = try connection(to: 0)
        try primary.execute(unsafeSQL: "ALTER SYSTEM SET synchronous_standby_names = '\(Self.standbyName)'")
        _ = try primary.query("SELECT pg_reload_conf() AS reloaded")
        try waitUntilSynchronous()
    }

    func node(_ index: Int) -> String { "\(directory)/node\(index)" }
    func logPath(_ index: Int) -> String { "\(directory)/node\(index).log" }

    /// Both nodes, the writable one chosen at each connection.
    func url(_ database: String) -> String {
        "postgres://postgres:\(password)@127.0.0.1:\(ports[0]),127.0.0.1:\(ports[1])/\(database)"
            + "?target_session_attrs=read-write&sslmode=verify-full&sslrootcert=\(authority.certificate)&connect_timeout=5"
    }

    /// One node, whatever its role.
    func connection(to index: Int, database: String = "postgres") throws -> PGConnection {
        try PGConnection(
            conninfo:
                "postgres://postgres:\(password)@127.0.0.1:\(ports[index])/\(database)?sslmode=verify-full&sslrootcert=\(authority.certificate)"
        )
    }

    func start(_ index: Int) throws {
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/sbin/runuser")
        // Its log beside its data, named in a failure's message.
        let log = logPath(index)
        if !FileManager.default.fileExists(atPath: log) {
            _ = FileManager.default.createFile(atPath: log, contents: nil)
        }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        handle.seekToEndOfFile()
        server.standardOutput = handle
        server.standardError = handle
        server.arguments = [
            "-u", "postgres", "--", "\(IsolatedCluster.pgBin)/postgres", "-D", node(index), "-p",
            String(ports[index]), "-k", directory, "-c", "listen_addresses=127.0.0.1", "-c", "ssl=on", "-c",
            "ssl_cert_file=\(authority.directory)/server.crt", "-c",
            "ssl_key_file=\(authority.directory)/server.key", "-c", "max_connections=100",
            "-c", "wal_level=replica", "-c", "max_wal_senders=5", "-c", "hot_standby=on",
        ]
        try server.run()
        servers[index] = server
        try IsolatedCluster.waitForPort(ports[index])
        for _ in 0..<100 {
            if (try? connection(to: index)) != nil { return }
            usleep(100_000)
        }
        throw IsolatedCluster.Failure(description: "node \(index) did not take connections")
    }

    /// Waits until the primary reports the standby as its synchronous one.
    func waitUntilSynchronous(primary: Int = 0, timeout: Duration = .seconds(60)) throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let state = try? connection(to: primary).query(
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = \(Self.standbyName)"
            ).first?.decode("sync_state", as: String.self), state == "sync" {
                return
            }
            usleep(100_000)
        }
        let log = (try? String(contentsOfFile: logPath(1), encoding: .utf8)) ?? ""
        throw IsolatedCluster.Failure(
            description:
                "the standby did not become synchronous; its log:\n\(log.split(separator: "\n").suffix(10).joined(separator: "\n"))"
        )
    }

    /// The node's postmaster and every process it started, killed at once (SIGKILL): the host
    /// gone, connections cut without a word, nothing flushed that was not.
    func kill(_ index: Int) {
        guard let server = servers[index] else { return }
        if let text = try? String(contentsOfFile: node(index) + "/postmaster.pid", encoding: .utf8),
            let pid = Int32(text.split(separator: "\n").first ?? "")
        {
            let children = (try? IsolatedCluster.run("/usr/bin/pgrep", ["-P", String(pid)])) ?? ""
            Glibc.kill(pid, SIGKILL)
            for child in children.split(separator: "\n").compactMap({ Int32($0) }) { Glibc.kill(child, SIGKILL) }
        }
        server.waitUntilExit()
        servers[index] = nil
    }

    /// Promotes the standby `index` and waits until it takes writes.
    func promote(_ index: Int) throws {
        _ = try connection(to: index).query("SELECT pg_promote(true, 60) AS promoted")
    }

    /// Stops waiting for a synchronous standby (what an operator or an HA manager does when the
    /// standby is lost and writes must go on): commits waiting for it complete.
    func degradeToAsynchronous(primary: Int) throws {
        let connection = try connection(to: primary)
        try connection.execute(unsafeSQL: "ALTER SYSTEM SET synchronous_standby_names = ''")
        _ = try connection.query("SELECT pg_reload_conf() AS reloaded")
    }

    func shutdown() {
        for index in servers.keys { kill(index) }
        try? FileManager.default.removeItem(atPath: directory)
    }

    private static func asPostgres(_ path: String, _ arguments: [String]) throws {
        try IsolatedCluster.run("/usr/sbin/runuser", ["-u", "postgres", "--", path] + arguments)
    }
}
