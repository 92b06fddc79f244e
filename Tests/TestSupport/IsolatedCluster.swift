import Foundation
import PGStore

#if canImport(Glibc)
    import Glibc
#endif

/// A PostgreSQL server and a broker of one test's own, on free loopback ports, so the test can stop
/// and start them without disturbing other suites. The broker is Tansu behind its compatibility
/// proxy, or librdkafka's mock cluster in a process of its own (`auth-bench broker`): the same
/// faults on two brokers tell a broker's quirks from the worker's.
final class IsolatedCluster: @unchecked Sendable {
    enum Broker: String, Sendable, CustomStringConvertible {
        case tansu
        /// librdkafka's mock cluster, hosted by `auth-bench broker` (built beside the tests).
        case mockCluster

        var description: String { rawValue }
    }

    // @unchecked: the pids are only changed by the one test driving the cluster.
    static let projectRoot = ProjectPaths.root
    static let pgBin = "/usr/lib/postgresql/15/bin"
    static var tansu: String { projectRoot.appendingPathComponent(".local/tansu/tansu").path }
    static var proxyScript: String { projectRoot.appendingPathComponent("scripts/kafka-compat-proxy.py").path }

    /// Root with a `postgres` user, the PostgreSQL binaries and the broker: what `scripts/dev-env install` sets up.
    /// `auth-bench`, built with the tests (it hosts the mock cluster).
    static var benchBinary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("auth-bench")
            .path
    }

    static var isPossible: Bool {
        getuid() == 0 && FileManager.default.isExecutableFile(atPath: "\(pgBin)/pg_ctl")
            && FileManager.default.isExecutableFile(atPath: tansu) && getpwnam("postgres") != nil
    }

    let broker: Broker
    let directory: String
    let pgPort: Int
    let brokerPort: Int
    let proxyPort: Int
    private var brokerProcess: Process?
    private var proxy: Process?
    /// The mock cluster's commands (`create`, `down`, `up`) and its answers, a line each.
    private var mockCommands: FileHandle?
    private var mockAnswers: FileHandle?
    private var mockAnswerBuffer: [UInt8] = []
    private var mockBootstrap = ""

    /// The mock cluster's standard error (its process's complaints), in the cluster's directory.
    var mockLogPath: String { directory + "/mock-broker.log" }
    /// Whether the broker's process is still there (false once it has exited, or before it started).
    var brokerIsRunning: Bool { brokerProcess?.isRunning ?? false }

    /// The server's superuser password (SCRAM-SHA-256; the server takes TLS logins only).
    let password = UUID().uuidString
    /// The CA the server's certificate (for 127.0.0.1) is verified against.
    var caFile: String { directory + "/tls/ca.crt" }
    var databaseServer: String { "postgres://postgres:\(password)@127.0.0.1:\(pgPort)" }
    /// A database's URL, verifying the server fully (`sslmode=verify-full`) with the password.
    func databaseURL(_ database: String) -> String {
        "\(databaseServer)/\(database)?sslmode=verify-full&sslrootcert=\(caFile)"
    }
    var brokers: String { broker == .tansu ? "127.0.0.1:\(proxyPort)" : mockBootstrap }

    init(broker: Broker = .tansu) throws {
        self.broker = broker
        directory = "/tmp/auth-fault-\(UUID().uuidString.prefix(8))"
        pgPort = try Self.freePort()
        brokerPort = try Self.freePort()
        proxyPort = try Self.freePort()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // As managed services run it: TLS only, SCRAM passwords (the local trust of the postgres
        // OS user aside).
        let authority = try TestCertificateAuthority(directory: directory + "/tls")
        try authority.issue("server", subject: "/CN=127.0.0.1", extensions: ["subjectAltName=IP:127.0.0.1"])
        try Data((password + "\n").utf8).write(to: URL(fileURLWithPath: directory + "/tls/pwfile"))
        try Self.run("/bin/chown", ["-R", "postgres:postgres", directory])
        try Self.run(
            "/usr/sbin/runuser",
            [
                "-u", "postgres", "--", "\(Self.pgBin)/initdb", "-D", "\(directory)/pg", "-U", "postgres",
                "--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile", "\(directory)/tls/pwfile", "-E",
                "UTF8", "--locale=C.UTF-8",
            ])
        try Data("local all postgres trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n".utf8).write(
            to: URL(fileURLWithPath: "\(directory)/pg/pg_hba.conf"))
        try startPostgres()
        switch broker {
        case .tansu:
            try startBroker()
            try startProxy()
        case .mockCluster:
            try startMockCluster()
        }
    }

    private var postgres: Process?

    /// The server runs in the foreground as our child (no pg_ctl daemon: Foundation's Process
    /// would never see a daemonizing pg_ctl exit), so stopping it is a signal and a wait.
    func startPostgres() throws {
        postgres = try Self.spawn(
            "/usr/sbin/runuser",
            [
                "-u", "postgres", "--", "\(Self.pgBin)/postgres", "-D", "\(directory)/pg", "-p", String(pgPort), "-k",
                directory, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "ssl=on", "-c",
                "ssl_cert_file=\(directory)/tls/server.crt", "-c", "ssl_key_file=\(directory)/tls/server.key",
            ])
        try Self.waitForPort(pgPort, of: postgres)
        // Accepting TCP is not yet accepting logins: wait until a connection works.
        for _ in 0..<100 {
            if (try? PGConnection(conninfo: databaseURL("postgres"))) != nil { return }
            usleep(100_000)
        }
    }

    /// An immediate shutdown (SIGQUIT to the postmaster): connections are cut as in a crash or failover.
    func stopPostgres() throws {
        if let text = try? String(contentsOfFile: "\(directory)/pg/postmaster.pid", encoding: .utf8),
            let pid = Int32(text.split(separator: "\n").first ?? "")
        {
            kill(pid, SIGQUIT)
        }
        postgres?.waitUntilExit()
        postgres = nil
    }

    func startBroker() throws {
        brokerProcess = try Self.spawn(
            Self.tansu,
            [
                "broker", "--listener-url", "tcp://127.0.0.1:\(brokerPort)", "--advertised-listener-url",
                "tcp://127.0.0.1:\(proxyPort)", "--storage-engine", "memory://tansu/",
            ])
        try Self.waitForPort(brokerPort, of: brokerProcess)
    }

    private func startMockCluster() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.benchBinary)
        process.arguments = ["broker"]
        let commands = Pipe()
        let answers = Pipe()
        process.standardInput = commands
        process.standardOutput = answers
        // Its complaints go to a log of its own, named in a failure's message.
        _ = FileManager.default.createFile(atPath: mockLogPath, contents: nil)
        process.standardError = FileHandle(forWritingAtPath: mockLogPath) ?? FileHandle.nullDevice
        try process.run()
        brokerProcess = process
        mockCommands = commands.fileHandleForWriting
        mockAnswers = answers.fileHandleForReading
        mockBootstrap = try nextMockAnswer()
    }

    /// Sends the mock cluster one command and waits for its `ok`.
    private func mockCommand(_ line: String) throws {
        guard let mockCommands else { throw Failure(description: "the mock cluster is not running") }
        try mockCommands.write(contentsOf: Data((line + "\n").utf8))
        let answer = try nextMockAnswer()
        guard answer == "ok" else { throw Failure(description: "mock cluster, `\(line)`: \(answer)") }
    }

    private func nextMockAnswer() throws -> String {
        while true {
            if let end = mockAnswerBuffer.firstIndex(of: 0x0A) {
                let line = String(decoding: mockAnswerBuffer[..<end], as: UTF8.self)
                mockAnswerBuffer.removeSubrange(...end)
                return line
            }
            // What is there now (at least a byte, waiting for it); empty at the end of the stream.
            guard let more = mockAnswers?.availableData, !more.isEmpty else {
                throw Failure(description: "the mock cluster exited")
            }
            mockAnswerBuffer += more
        }
    }

    /// Cuts every client off the broker (its data and the groups' offsets stay) until
    /// `reconnectBroker`: Tansu's proxy is killed (every connection drops at once, as when a
    /// broker's host goes away); the mock cluster's brokers are set down.
    func cutOffBroker() throws {
        switch broker {
        case .tansu: stopProxy()
        case .mockCluster: try mockCommand("down")
        }
    }

    func reconnectBroker() throws {
        switch broker {
        case .tansu: try startProxy()
        case .mockCluster: try mockCommand("up")
        }
    }

    /// Freezes the broker process (SIGSTOP): connections stay open and nothing answers, as
    /// with a broker stuck in a long GC pause or on a frozen VM.
    func freezeBroker() {
        if let brokerProcess, brokerProcess.isRunning { kill(brokerProcess.processIdentifier, SIGSTOP) }
    }

    /// Resumes a frozen broker (SIGCONT).
    func thawBroker() {
        if let brokerProcess, brokerProcess.isRunning { kill(brokerProcess.processIdentifier, SIGCONT) }
    }

    func stopProxy() {
        // SIGKILL: every connection drops at once, as when a broker's host goes away.
        if let proxy, proxy.isRunning { kill(proxy.processIdentifier, SIGKILL) }
        proxy?.waitUntilExit()
        proxy = nil
    }

    func startProxy() throws {
        proxy = try Self.spawn(
            "/usr/bin/env", ["python3", Self.proxyScript, "127.0.0.1:\(proxyPort)", "127.0.0.1:\(brokerPort)"])
        try Self.waitForPort(proxyPort, of: proxy)
    }

    func createTopics(_ names: [String], partitions: Int) throws {
        if broker == .mockCluster {
            for name in names { try mockCommand("create \(name) \(partitions)") }
            return
        }
        // A broker that has just opened its port can still refuse a client (seen once in CI's
        // fault suite), so each creation is tried a few times; a retry that finds the topic
        // already made by the attempt before counts as done.
        for name in names {
            var attempt = 1
            while true {
                do {
                    try Self.run(
                        Self.tansu,
                        [
                            "topic", "create", "--broker", "tcp://127.0.0.1:\(brokerPort)", "--partitions",
                            String(partitions), name,
                        ])
                    break
                } catch let failure as Failure {
                    if attempt > 1, failure.description.localizedCaseInsensitiveContains("exist") { break }
                    guard attempt < 5 else { throw failure }
                    attempt += 1
                    usleep(500_000)
                }
            }
        }
    }

    func shutdown() {
        stopProxy()
        if let brokerProcess, brokerProcess.isRunning {
            kill(brokerProcess.processIdentifier, SIGCONT)
            kill(brokerProcess.processIdentifier, SIGKILL)
        }
        brokerProcess?.waitUntilExit()
        try? stopPostgres()
        try? FileManager.default.removeItem(atPath: directory)
    }

    // MARK: - Processes and ports

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    @discardableResult
    static func run(_ path: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw Failure(
                description: "\(path) \(arguments.first ?? "") failed: \(String(decoding: data, as: UTF8.self))")
        }
        return String(decoding: data, as: UTF8.self)
    }

    static func spawn(_ path: String, _ arguments: [String]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }

    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else { throw Failure(description: "no free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// Waits up to `seconds` for something to listen on `port`; when `process` (the one meant to
    /// listen) exits first, says so at once with the end of its `log`, rather than waiting out the time.
    static func waitForPort(_ port: Int, of process: Process? = nil, log: String? = nil, seconds: Int = 30) throws {
        for _ in 0..<(seconds * 10) {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = UInt16(port).bigEndian
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            close(fd)
            if connected == 0 { return }
            if let process, !process.isRunning {
                let tail = log.flatMap { try? String(contentsOfFile: $0, encoding: .utf8) }.map {
                    String($0.suffix(600))
                }
                throw Failure(
                    description:
                        "\(process.executableURL?.lastPathComponent ?? "a process") exited (status \(process.terminationStatus)) before opening port \(port): \(tail ?? "no log")"
                )
            }
            usleep(100_000)
        }
        throw Failure(description: "port \(port) did not open in \(seconds) s")
    }
}
