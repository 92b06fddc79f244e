import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A broker as managed Kafka services run it, for one test: TLS verified against a CA the test
/// makes (and, for `.mutualTLS`, a client certificate it issues), SASL (SCRAM-SHA-512 or PLAIN)
/// over TLS. The local broker (Tansu, in memory) sits behind its compatibility proxy; SASL is
/// checked by `scripts/kafka-sasl-gate.py` in front of that, as a broker's listener does; TLS ends
/// in stunnel in front of everything, the address the broker advertises, so every connection a
/// client makes after bootstrap goes through the same checks.
final class SecureKafka: @unchecked Sendable {
    enum Listener: Sendable, CustomStringConvertible {
        /// TLS, the broker verified; no client identity (a broker of its own network).
        case tls
        /// TLS both ways: the client presents a certificate the broker's CA issued (MSK, Aiven).
        case mutualTLS
        /// SASL over TLS with the mechanism (`SCRAM-SHA-512`: MSK, Aiven, Redpanda; `PLAIN`:
        /// Confluent Cloud's API keys).
        case sasl(String)

        var description: String {
            switch self {
            case .tls: "TLS"
            case .mutualTLS: "mutual TLS"
            case .sasl(let mechanism): "SASL_SSL \(mechanism)"
            }
        }
    }

    static var isPossible: Bool {
        IsolatedCluster.isPossible && FileManager.default.isExecutableFile(atPath: "/usr/bin/stunnel")
    }

    static let username = "auth-worker"
    /// The SASL password (with a space and a colon, as generated secrets may have).
    static let password = "s3cret: \(UUID().uuidString.prefix(8))"

    let listener: Listener
    let directory: String
    let authority: TestCertificateAuthority
    /// What clients bootstrap from: stunnel's TLS port, which the broker advertises.
    let bootstrap: String
    private let brokerPort: Int
    private var processes: [Process] = []

    /// Starts the chain for `listener`, trying again on fresh ports when a part of it does not come
    /// up: a port found free can be taken by another test's connection before its server binds it.
    static func start(_ listener: Listener, attempts: Int = 3) throws -> SecureKafka {
        var attempt = 1
        while true {
            do {
                return try SecureKafka(listener)
            } catch is IsolatedCluster.Failure where attempt < attempts {
                attempt += 1
            }
        }
    }

    private init(_ listener: Listener) throws {
        self.listener = listener
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("secure-kafka-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        authority = try TestCertificateAuthority(directory: directory + "/ca", name: "test Kafka CA")
        try authority.issue(
            "broker", subject: "/CN=127.0.0.1", extensions: ["subjectAltName=IP:127.0.0.1,DNS:localhost"])
        try authority.issue("client", subject: "/CN=auth-worker", extensions: ["extendedKeyUsage=clientAuth"])
        brokerPort = try IsolatedCluster.freePort()
        let proxyPort = try IsolatedCluster.freePort()
        let tlsPort = try IsolatedCluster.freePort()
        bootstrap = "127.0.0.1:\(tlsPort)"
        do {
            let root = ProjectPaths.root.path
            processes.append(
                try Self.spawn(
                    IsolatedCluster.tansu,
                    [
                        "broker", "--listener-url", "tcp://127.0.0.1:\(brokerPort)", "--advertised-listener-url",
                        "tcp://\(bootstrap)", "--storage-engine", "memory://tansu/",
                    ], log: directory + "/broker.log"))
            try IsolatedCluster.waitForPort(brokerPort, of: processes.last, log: directory + "/broker.log")
            processes.append(
                try Self.spawn(
                    "/usr/bin/env",
                    [
                        "python3", root + "/scripts/kafka-compat-proxy.py", "127.0.0.1:\(proxyPort)",
                        "127.0.0.1:\(brokerPort)",
                    ],
                    log: directory + "/proxy.log"))
            try IsolatedCluster.waitForPort(proxyPort, of: processes.last, log: directory + "/proxy.log")
            var behindTLS = proxyPort
            if case .sasl(let mechanism) = listener {
                let gatePort = try IsolatedCluster.freePort()
                try Data("\(Self.username):\(Self.password)\n".utf8).write(
                    to: URL(fileURLWithPath: directory + "/users"))
                processes.append(
                    try Self.spawn(
                        "/usr/bin/env",
                        [
                            "python3", root + "/scripts/kafka-sasl-gate.py", "127.0.0.1:\(gatePort)",
                            "127.0.0.1:\(proxyPort)", directory + "/users", mechanism,
                        ], log: gateLog))
                try IsolatedCluster.waitForPort(gatePort, of: processes.last, log: gateLog)
                behindTLS = gatePort
            }
            var tunnel = """
                foreground = yes
                pid =
                output = \(directory)/stunnel.log
                [kafka]
                accept = \(bootstrap)
                connect = 127.0.0.1:\(behindTLS)
                cert = \(authority.directory)/broker.crt
                key = \(authority.directory)/broker.key

                """
            if case .mutualTLS = listener {
                // The client's certificate is required and its chain checked against the CA.
                tunnel += "CAfile = \(authority.certificate)\nrequireCert = yes\nverifyChain = yes\n"
            }
            try Data(tunnel.utf8).write(to: URL(fileURLWithPath: directory + "/stunnel.conf"))
            processes.append(try Self.spawn("/usr/bin/stunnel", [directory + "/stunnel.conf"], log: nil))
            try IsolatedCluster.waitForPort(tlsPort, of: processes.last, log: directory + "/stunnel.log")
        } catch {
            stop()
            throw error
        }
    }

    /// The SASL gate's log: a line per connection, authenticated or refused and why.
    var gateLog: String { directory + "/gate.log" }

    /// librdkafka's properties for this listener: what an operator's properties file holds.
    func properties(password: String = SecureKafka.password, caFile: String? = nil) -> [String: String] {
        var properties = ["ssl.ca.location": caFile ?? authority.certificate]
        switch listener {
        case .tls:
            properties["security.protocol"] = "SSL"
        case .mutualTLS:
            properties["security.protocol"] = "SSL"
            properties["ssl.certificate.location"] = authority.directory + "/client.crt"
            properties["ssl.key.location"] = authority.directory + "/client.key"
        case .sasl(let mechanism):
            properties["security.protocol"] = "SASL_SSL"
            properties["sasl.mechanism"] = mechanism
            properties["sasl.username"] = Self.username
            properties["sasl.password"] = password
        }
        return properties
    }

    /// Writes `properties` as a `key=value` file (AUTH_KAFKA_PROPERTIES_FILE) and returns its path.
    func propertiesFile(_ properties: [String: String], name: String = "kafka.properties") throws -> String {
        let path = directory + "/" + name
        let text = properties.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)\n" }.joined()
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        chmod(path, 0o600)
        return path
    }

    /// Creates topics on the broker itself (behind the listener's checks).
    func createTopics(_ names: [String], partitions: Int = 2) throws {
        for name in names {
            try IsolatedCluster.run(
                IsolatedCluster.tansu,
                [
                    "topic", "create", "--broker", "tcp://127.0.0.1:\(brokerPort)", "--partitions", String(partitions),
                    name,
                ])
        }
    }

    func stop() {
        for process in processes.reversed() where process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        processes = []
        try? FileManager.default.removeItem(atPath: directory)
    }

    private static func spawn(_ path: String, _ arguments: [String], log: String?) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        if let log {
            _ = FileManager.default.createFile(atPath: log, contents: nil)
            process.standardError = FileHandle(forWritingAtPath: log) ?? FileHandle.nullDevice
        } else {
            process.standardError = FileHandle.nullDevice
        }
        try process.run()
        return process
    }
}
