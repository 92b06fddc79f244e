import AdminConsole
import AuthClient
import AuthCrypto
import AuthDomain
import AuthStore
import AuthWorker
import Foundation
import JOSE
import Kafka
import Messages
import PGStore
import Passwords
import ServiceKit

#if canImport(Glibc)
    import Glibc
#endif

/// The `auth-worker` command: parses arguments, runs one command, returns the exit status.
///
/// Every command prints a usage line for `--help` and a one-line reason on error, with a non-zero
/// exit status. Configuration comes from the environment (docs/operations.md), never from arguments.
public struct CommandLineInterface: Sendable {
    /// One command: its words, what it takes, and what it does.
    struct Command: Sendable {
        /// `["keys", "generate"]`.
        let words: [String]
        /// What follows the words in the usage line.
        let arguments: String
        let summary: String
        /// Options that take a value (`--alg ES256`).
        var options: [String] = []
        /// Options that stand alone (`--status`); at most one of them.
        var flags: [String] = []
        /// How many positional arguments.
        var positionals: ClosedRange<Int> = 0...0

        var usage: String {
            "usage: auth-worker " + (words + [arguments]).filter { !$0.isEmpty }.joined(separator: " ")
        }
    }

    static let commands: [Command] = [
        Command(words: ["run"], arguments: "", summary: "consume and answer login requests until SIGTERM"),
        Command(
            words: ["admin"], arguments: "",
            summary:
                "serve the admin console (pages and JSON API) on AUTH_CONSOLE_ADDRESS:AUTH_CONSOLE_PORT until SIGTERM"),
        Command(
            words: ["migrate"], arguments: "[--status | --dry-run]",
            summary: "bring the database schema up to date, then exit; with an option, only say what would be applied",
            flags: ["--status", "--dry-run"]),
        Command(
            words: ["config", "check"], arguments: "",
            summary:
                "check the whole AUTH_* environment (keys, providers file, limits) without connecting to anything"),
        Command(
            words: ["config", "reference"], arguments: "",
            summary: "print every AUTH_* variable with its meaning and default, as Markdown (docs/operations.md)"),
        Command(
            words: ["version"], arguments: "", summary: "print the version, the commit and the C libraries' versions"),
        Command(
            words: ["probe"], arguments: "[livez | readyz]",
            summary: "ask this machine's health endpoint (a container HEALTHCHECK); exit 0 when it answers 200",
            positionals: 0...1),
        Command(
            words: ["keys", "generate"], arguments: "FILE [--alg ES256|EdDSA|X25519]",
            summary: "make a signing key, or with X25519 a credential key (PEM, mode 0600, never overwritten)",
            options: ["--alg"], positionals: 1...1),
        Command(
            words: ["keys", "jwks"], arguments: "",
            summary: "print the public JWK Set of AUTH_SIGNING_KEYS and AUTH_CREDENTIAL_KEYS"),
        Command(
            words: ["request", "guest"], arguments: "[--device NAME] [--platform P] [--timeout SECONDS]",
            summary: "publish a guest login and print its result", options: ["--device", "--platform", "--timeout"]),
        Command(
            words: ["topics", "create"], arguments: "[--partitions N]",
            summary:
                "create the AUTH_TOPIC_* topics that do not exist yet (default 4 partitions, the cluster's replication)",
            options: ["--partitions"]),
        Command(
            words: ["users", "show"], arguments: "ID_OR_EMAIL",
            summary: "print a user, its identities and sessions (no secrets)", positionals: 1...1),
        Command(
            words: ["users", "audit"], arguments: "ID_OR_EMAIL [--since DURATION]",
            summary: "print a user's audit trail, one JSON line a row, oldest first (--since 30d: only newer)",
            options: ["--since"], positionals: 1...1),
        Command(
            words: ["users", "delete"], arguments: "ID",
            summary: "delete a user and its sessions; emits auth.user.deleted", positionals: 1...1),
        Command(
            words: ["users", "disable"], arguments: "ID_OR_EMAIL",
            summary: "disable a user: its sessions end, its sign-ins and refreshes answer account_disabled",
            positionals: 1...1),
        Command(
            words: ["users", "enable"], arguments: "ID_OR_EMAIL", summary: "enable a disabled user again",
            positionals: 1...1),
        Command(
            words: ["users", "end-sessions"], arguments: "ID_OR_EMAIL [SESSION_ID]",
            summary: "end one session of a user's, or all of them; emits auth.session.revoked (reason admin)",
            positionals: 1...2),
        Command(
            words: ["users", "remove-factor"], arguments: "ID_OR_EMAIL",
            summary: "remove a user's second factor (a lost phone); emits auth.mfa.disabled", positionals: 1...1),
        Command(
            words: ["users", "remove-passkeys"], arguments: "ID_OR_EMAIL [PASSKEY_ID]",
            summary: "remove one of a user's passkeys, or all; emits auth.passkey.removed (reason admin)",
            positionals: 1...2),
        Command(
            words: ["admins", "grant"], arguments: "EMAIL --role support|admin",
            summary: "let a password account use the admin console (support: read, end sessions; admin: all)",
            options: ["--role"], positionals: 1...1),
        Command(
            words: ["admins", "revoke"], arguments: "EMAIL", summary: "take an account's console role away",
            positionals: 1...1),
        Command(words: ["admins", "list"], arguments: "", summary: "print the console's users, one JSON line each"),
        Command(
            words: ["guests", "purge"], arguments: "--older-than DURATION",
            summary: "delete guests older than DURATION (30d, 12h) that never signed up", options: ["--older-than"]),
        Command(
            words: ["token", "verify"], arguments: "--provider NAME [--keys FILE] [--at UNIX_TIME] [--nonce RAW] TOKEN",
            summary: "verify a provider token as a login would; print its header and claims, or the error code and why",
            options: ["--provider", "--keys", "--at", "--nonce"], positionals: 1...1),
    ]

    /// The overview `--help` prints.
    public static var usage: String {
        let width = 34
        var lines = ["usage: auth-worker <command> [options]", "", "commands:"]
        for command in commands {
            let head = "  " + (command.words + [command.arguments]).filter { !$0.isEmpty }.joined(separator: " ")
            if head.count < width {
                lines.append(head.padding(toLength: width, withPad: " ", startingAt: 0) + command.summary)
            } else {
                lines.append(head)
                lines.append(String(repeating: " ", count: width) + command.summary)
            }
        }
        lines += [
            "",
            "Every command takes --help. Configuration is read from AUTH_* environment variables: auth-worker config reference lists them.",
        ]
        return lines.joined(separator: "\n")
    }

    /// A command's arguments, parsed against its `Command`.
    struct Arguments {
        var values: [String: String] = [:]
        var flag: String?
        var positionals: [String] = []

        /// Refuses what `command` does not take, with its usage line.
        init(_ arguments: [String], for command: Command) throws {
            var index = 0
            while index < arguments.count {
                let argument = arguments[index]
                if command.options.contains(argument) {
                    guard index + 1 < arguments.count else {
                        throw UsageError(message: "\(argument) needs a value; \(command.usage)")
                    }
                    values[argument] = arguments[index + 1]
                    index += 2
                } else if command.flags.contains(argument) {
                    guard flag == nil else { throw UsageError(message: "one option at most; \(command.usage)") }
                    flag = argument
                    index += 1
                } else if argument.hasPrefix("-"), argument.count > 1 {
                    throw UsageError(message: "unknown option \(argument); \(command.usage)")
                } else {
                    positionals.append(argument)
                    index += 1
                }
            }
            guard command.positionals.contains(positionals.count) else {
                throw UsageError(message: command.usage)
            }
        }
    }

    private let environment: [String: String]
    private let output: @Sendable (String) -> Void
    private let errorOutput: @Sendable (String) -> Void

    public init(
        environment: [String: String] = ProcessInfo.processInfo.environment,
        output: @escaping @Sendable (String) -> Void = { print($0) },
        errorOutput: @escaping @Sendable (String) -> Void = { message in
            FileHandle.standardError.write(Data((message + "\n").utf8))
        }
    ) {
        self.environment = environment
        self.output = output
        self.errorOutput = errorOutput
    }

    /// Runs the command named by `arguments` (without the program name).
    /// - Returns: the exit status: 0 on success, 1 on failure, 2 on a usage error.
    public func run(_ arguments: [String]) async -> Int32 {
        if arguments.isEmpty || ["--help", "-h", "help"].contains(arguments[0]) {
            output(Self.usage)
            return arguments.isEmpty ? 2 : 0
        }
        // The command whose words begin the arguments, the longest first (`keys generate`).
        guard
            let command = Self.commands.filter({ arguments.starts(with: $0.words) }).max(by: {
                $0.words.count < $1.words.count
            })
        else {
            errorOutput(
                "auth-worker: unknown command '\(arguments.prefix(2).joined(separator: " "))'\n"
                    + "usage: auth-worker <command> [options]; see auth-worker --help")
            return 2
        }
        let rest = Array(arguments.dropFirst(command.words.count))
        if rest.contains("--help") || rest.contains("-h") {
            output(command.usage + "\n\n" + command.summary)
            return 0
        }
        do {
            let parsed = try Arguments(rest, for: command)
            switch command.words {
            case ["run"]:
                try await runWorker()
            case ["admin"]:
                try await runConsole()
            case ["migrate"]:
                try await migrate(apply: parsed.flag == nil)
            case ["config", "check"]:
                try checkConfiguration()
            case ["config", "reference"]:
                output(Self.configurationReference)
            case ["probe"]:
                let path = parsed.positionals.first ?? "livez"
                guard ["livez", "readyz"].contains(path) else { throw UsageError(message: command.usage) }
                return probe(path)
            case ["version"]:
                output("auth-worker \(Self.version) commit \(BuildInfo.commit) (\(Self.libraryVersions))")
            case ["keys", "generate"]:
                try generateKey(parsed)
            case ["keys", "jwks"]:
                try printJWKS()
            case ["request", "guest"]:
                return try await requestGuest(parsed)
            case ["topics", "create"]:
                return try await createTopics(parsed, usage: command.usage)
            case ["users", "show"]:
                return try await showUser(parsed.positionals[0])
            case ["users", "delete"]:
                return try await deleteUser(parsed.positionals[0])
            case ["users", "audit"]:
                return try await showAudit(parsed, usage: command.usage)
            case ["guests", "purge"]:
                return try await purgeGuests(parsed, usage: command.usage)
            case ["users", "disable"]:
                return try await setDisabled(parsed.positionals[0], disabled: true)
            case ["users", "enable"]:
                return try await setDisabled(parsed.positionals[0], disabled: false)
            case ["users", "end-sessions"]:
                return try await endSessions(parsed.positionals, usage: command.usage)
            case ["users", "remove-factor"]:
                return try await removeFactor(parsed.positionals[0])
            case ["users", "remove-passkeys"]:
                return try await removePasskeys(parsed.positionals, usage: command.usage)
            case ["admins", "grant"]:
                return try await grantAdmin(parsed, usage: command.usage)
            case ["admins", "revoke"]:
                return try await revokeAdmin(parsed.positionals[0])
            case ["admins", "list"]:
                return try await listAdmins()
            case ["token", "verify"]:
                return try await verifyToken(parsed, usage: command.usage)
            default:
                throw UsageError(message: command.usage)
            }
            return 0
        } catch let error as UsageError {
            errorOutput("auth-worker: \(error.message)")
            return 2
        } catch let error as PGError {
            errorOutput("auth-worker: \(error.debugDescription)")
            return 1
        } catch {
            errorOutput("auth-worker: \(error)")
            return 1
        }
    }

    /// Asks this machine's health endpoint (`AUTH_HEALTH_PORT`), as a container HEALTHCHECK does:
    /// exit 0 when it answers 200 within two seconds, 1 otherwise.
    private func probe(_ path: String) -> Int32 {
        let port = environment[Setting.healthPort.name].flatMap { UInt16($0) } ?? 8080
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return 1 }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            errorOutput("auth-worker: nothing listens on 127.0.0.1:\(port)")
            return 1
        }
        let request = Array("GET /\(path) HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".utf8)
        guard request.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == request.count else { return 1 }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1024)
        while response.count < 65536 {
            let count = read(fd, &buffer, buffer.count)
            if count <= 0 { break }
            response += buffer[0..<count]
        }
        let text = String(decoding: response, as: UTF8.self)
        let statusLine = text.prefix { $0 != "\r" && $0 != "\n" }
        let body = text.components(separatedBy: "\r\n\r\n").dropFirst().joined()
        output("\(statusLine): \(body.trimmingCharacters(in: .whitespacesAndNewlines))")
        return statusLine.hasPrefix("HTTP/1.1 200") ? 0 : 1
    }

    /// This release's version.
    public static var version: String { BuildInfo.version }

    /// The C libraries the worker runs on, as linked at run time.
    static var libraryVersions: String {
        "\(OpenSSLLibrary.version), librdkafka \(KafkaLibrary.version), libpq \(PGLibrary.version), "
            + Allocator.description
    }

    struct UsageError: Error {
        var message: String
    }

    /// What a command connects to, each required to be set (there are no development defaults).
    private enum Endpoint {
        case database, brokers
    }

    private func configuration(needs endpoints: Set<Endpoint> = []) throws -> WorkerConfiguration {
        let configuration = try WorkerConfiguration.fromEnvironment(environment)
        if endpoints.contains(.database) { try configuration.validateDatabase() }
        if endpoints.contains(.brokers) { try configuration.validateBrokers() }
        return configuration
    }

    private func logger(_ configuration: WorkerConfiguration) -> Logger {
        Logger(label: "auth-worker", level: configuration.logLevel)
    }

    // MARK: - run, migrate

    /// `auth-worker admin`: the console, in a process of its own. It needs PostgreSQL only: the
    /// events its actions cause wait in the outbox for the worker's relay to publish.
    private func runConsole() async throws {
        let configuration = try configuration(needs: [.database])
        try configuration.validate()
        let logger = logger(configuration)
        let console = configuration.console
        guard configuration.resultsKey != nil else {
            throw ConfigurationError(
                variable: Setting.resultsKeyFile.name,
                reason:
                    "the console's sign-in asks for the second factor, whose secrets are sealed with the results key")
        }
        if !console.isLoopback && !console.behindTLS {
            throw ConfigurationError(
                variable: Setting.consoleBehindTls.name,
                reason:
                    "the console's cookies are Secure: set it to true when TLS ends in front of the console "
                    + "(an ingress, a proxy), or listen on 127.0.0.1 for development")
        }
        if console.isLoopback {
            logger.warning(
                "The admin console serves plain HTTP on loopback: for development only; put TLS in front of it "
                    + "(AUTH_CONSOLE_BEHIND_TLS) anywhere else",
                metadata: ["http.address": console.address, "http.port": String(console.port)])
        }
        let clock = SystemClock()
        let identifiers = Identifiers(clock: clock)
        var passwordPolicy = PasswordPolicy()
        passwordPolicy.contextWords = configuration.accounts.passwordContextWords
        let passwords = try PasswordService(
            parameters: configuration.accounts.argon2, threads: configuration.accounts.hashingThreads,
            policy: passwordPolicy)
        let store = PostgresStore(
            pool: PGPool(
                conninfo: configuration.databaseURL, size: 4,
                preparesStatements: configuration.processing.preparedStatements))
        if configuration.migrateOnStart { try await store.migrate() }
        let flows = LoginFlows(
            configuration: configuration,
            accessTokens: try WorkerApplication.makeAccessTokenIssuer(configuration, identifiers: identifiers),
            passwords: passwords, attempts: store, clock: clock, identifiers: identifiers,
            logger: logger.child(label: "auth.flows"))
        let service = try ConsoleService(
            console: AdminConsole(
                configuration: configuration, store: store, flows: flows, clock: clock,
                logger: logger.child(label: "auth.console")),
            host: console.address, port: console.port, logger: logger.child(label: "auth.console.http"))
        logger.info(
            "Admin console listening",
            metadata: ["http.address": console.address, "http.port": String(service.port)])
        try await ServiceGroup(services: [service], logger: logger).run()
    }

    private func runWorker() async throws {
        let configuration = try configuration()
        let logger = logger(configuration)
        logger.info(
            "Starting",
            metadata: [
                "kafka.brokers": configuration.kafkaBrokers.joined(separator: ","),
                "kafka.group": configuration.kafkaGroup, "auth.token_format": configuration.accessTokenFormat.rawValue,
                "allocator": Allocator.description,
            ])
        let application = try await WorkerApplication.build(configuration: configuration, logger: logger)
        try await application.run()
    }

    /// Checks everything the worker would check at start, and more, connecting to nothing: the
    /// variables, the key files, the providers file, the librdkafka properties.
    private func checkConfiguration() throws {
        let configuration = try configuration()
        try configuration.validate()
        do {
            try configuration.producerConfiguration.check()
            try configuration.consumerConfiguration.check()
        } catch let error as KafkaError {
            throw ConfigurationError(variable: Setting.kafkaPropertiesFile.name, reason: "librdkafka refuses \(error)")
        }
        var signing: [String] = []
        if !configuration.signingKeyPaths.isEmpty {
            var jwt = configuration
            jwt.accessTokenFormat = .jwt
            let issuer = try JWTAccessTokenIssuer(configuration: jwt)
            signing =
                issuer.keys.enumerated().map { index, key in
                    "\(key.algorithm.rawValue) \(key.keyID) (\(index == 0 ? "current" : "previous"))"
                } + issuer.nextKeys.map { "\($0.algorithm.rawValue) \($0.keyID) (next)" }
        }
        let credentials = try CredentialKeys(paths: configuration.credentialKeyPaths).keys.map(\.keyID)
        let providers = try configuration.identityProviders().map(\.name)
        var database = "set"
        if let url = URLComponents(string: configuration.databaseURL) {
            // Where it points, never the password.
            database = "\(url.host ?? "local socket"):\(url.port.map(String.init) ?? "5432")\(url.path)"
        }
        output(
            """
            configuration is valid
              brokers: \(configuration.kafkaBrokers.joined(separator: ",")) (group \(configuration.kafkaGroup))
              database: \(database)
              topics: \(configuration.topics.all.joined(separator: ", "))
              access tokens: \(configuration.accessTokenFormat.rawValue); signing keys: \(signing.isEmpty ? "none" : signing.joined(separator: ", "))
              credential keys: \(credentials.isEmpty ? "none" : credentials.joined(separator: ", "))\(configuration.requireSealedCredentials ? " (sealed credentials required)" : "")
              identity providers: \(providers.isEmpty ? "none" : providers.joined(separator: ", "))
              results key: \(configuration.resultsKey == nil ? "none (a redelivered request cannot be answered again)" : "set")
            """)
    }

    /// The store an operator command uses: one connection, prepared statements as configured.
    private func operatorStore(_ configuration: WorkerConfiguration) -> PostgresStore {
        PostgresStore(
            pool: PGPool(
                conninfo: configuration.databaseURL, size: 1,
                preparesStatements: configuration.processing.preparedStatements))
    }

    /// With `apply` false (`--status`, `--dry-run`), only says what would be applied.
    private func migrate(apply: Bool) async throws {
        let configuration = try configuration(needs: [.database])
        let store = operatorStore(configuration)
        guard apply else {
            let current = try await store.schemaVersion() ?? 0
            let pending = Migrations.all.filter { $0.version > current }
            output(
                pending.isEmpty
                    ? "schema is up to date (version \(current)); nothing to apply"
                    : "schema version \(current); would apply: "
                        + pending.map { "\($0.version) (\($0.name))" }.joined(separator: ", "))
            return
        }
        let applied = try await store.migrate()
        let version = try await store.schemaVersion() ?? 0
        output(
            applied.isEmpty
                ? "schema is up to date (version \(version))"
                : "applied \(applied.map(String.init).joined(separator: ", ")); schema version \(version)")
    }

    // MARK: - keys

    private func generateKey(_ arguments: Arguments) throws {
        // ES256 by default: OpenSSL 3.0 signs P-256 about twice as fast as Ed25519 (assembly for
        // the curve; Ed25519 is portable C), and every JWT library verifies it.
        var algorithm = SigningKey.Algorithm.es256
        var encryption = false
        let path = arguments.positionals[0]
        if let name = arguments.values["--alg"] {
            if name == "X25519" {
                encryption = true
            } else if let parsed = SigningKey.Algorithm(rawValue: name) {
                algorithm = parsed
            } else {
                throw UsageError(message: "--alg takes ES256, EdDSA or X25519")
            }
        }
        guard !FileManager.default.fileExists(atPath: path) else {
            throw UsageError(message: "\(path) exists; refusing to overwrite a key")
        }
        let pem: String
        let description: String
        if encryption {
            let pair = try X25519.generateKeyPair()
            pem = try X25519.privateKeyPEM(pair.privateKey)
            description = "X25519 credential key \(try CredentialKeys.Key(privateKey: pair.privateKey).keyID)"
        } else {
            let key = try SigningKey.generate(algorithm)
            pem = try key.privateKeyPEM()
            description = "\(algorithm.rawValue) key \(key.keyID)"
        }
        do {
            try SecretFile.create(atPath: path, contents: Array(pem.utf8))
        } catch let failure as SecretFile.Failure {
            throw UsageError(message: "cannot write the key: \(failure.description)")
        }
        output("wrote \(description) to \(path)")
    }

    /// The public JWK Set: the signing keys of AUTH_SIGNING_KEYS and the credential keys of
    /// AUTH_CREDENTIAL_KEYS (`use: enc`), current keys first.
    private func printJWKS() throws {
        let published = try PublishedKeys(configuration: try configuration())
        guard !published.isEmpty else {
            throw UsageError(message: "no keys: set AUTH_SIGNING_KEYS and/or AUTH_CREDENTIAL_KEYS")
        }
        output(published.jwks)
    }

    // MARK: - topics create

    /// Creates the configured topics that are missing, then says of each whether the cluster has
    /// it: for clusters that do not create topics on first use (the worker never does).
    private func createTopics(_ arguments: Arguments, usage: String) async throws -> Int32 {
        var partitions: Int32 = 4
        if let value = arguments.values["--partitions"] {
            guard let count = Int32(value), count > 0 else {
                throw UsageError(message: "--partitions takes a positive number; \(usage)")
            }
            partitions = count
        }
        let configuration = try configuration(needs: [.brokers])
        let quiet = Logger(label: "auth-worker", level: .error, handler: JSONLinesLogHandler.standardError)
        let producer = try KafkaProducer(configuration: configuration.producerConfiguration, logger: quiet)
        let topics = configuration.topics.all
        do {
            try await producer.createTopics(topics, partitions: partitions)
            let present = try await producer.describeTopics(topics, timeout: .seconds(10))
            await producer.shutdown(timeout: .seconds(5))
            for topic in topics { output("\(topic): \(present[topic] == true ? "present" : "missing")") }
            return topics.allSatisfy { present[$0] == true } ? 0 : 1
        } catch {
            await producer.shutdown(timeout: .seconds(5))
            throw error
        }
    }

    // MARK: - request guest

    private func requestGuest(_ arguments: Arguments) async throws -> Int32 {
        var device = LoginRequestData.Device(name: "auth-worker CLI", platform: "cli")
        if let name = arguments.values["--device"] { device.name = name }
        if let platform = arguments.values["--platform"] { device.platform = platform }
        var timeout = 30
        if let value = arguments.values["--timeout"] {
            guard let seconds = Int(value), seconds > 0 else { throw UsageError(message: "--timeout takes seconds") }
            timeout = seconds
        }
        let configuration = try configuration(needs: [.brokers])
        let quiet = Logger(label: "auth-worker", level: .error, handler: JSONLinesLogHandler.standardError)
        var clientConfiguration = AuthClient.Configuration(brokers: configuration.kafkaBrokers)
        clientConfiguration.requestsTopic = configuration.topics.requests
        clientConfiguration.resultsTopic = configuration.topics.results
        clientConfiguration.source = "/gateway/cli"
        clientConfiguration.kafkaProperties = configuration.kafkaProperties
        let client = try await AuthClient.connect(clientConfiguration, logger: quiet)
        var data = LoginRequestData(method: "guest")
        data.device = device
        let started = ContinuousClock.now
        do {
            let result = try await client.login(data, timeout: .seconds(timeout))
            await client.close()
            output(String(decoding: MessageCoding.encode(result.data), as: UTF8.self))
            errorOutput(
                "answered in \(ContinuousClock.now - started) (request \(result.requestID); session sealed to a one-time key and opened)"
            )
            return 0
        } catch let failure as AuthClient.Failure {
            await client.close()
            errorOutput("auth-worker: \(failure) (is the worker running?)")
            return 1
        }
    }

    // MARK: - token verify

    private func verifyToken(_ arguments: Arguments, usage: String) async throws -> Int32 {
        guard let providerName = arguments.values["--provider"] else { throw UsageError(message: usage) }
        let token = arguments.positionals[0]
        let keysPath = arguments.values["--keys"]
        let nonce = arguments.values["--nonce"]
        var at: Date?
        if let value = arguments.values["--at"] {
            guard let seconds = Double(value) else { throw UsageError(message: "--at takes a Unix time") }
            at = Date(timeIntervalSince1970: seconds)
        }
        let configuration = try configuration()
        guard
            let providerConfiguration = try configuration.identityProviders().first(where: { $0.name == providerName })
        else {
            errorOutput(
                "auth-worker: unknown_provider: \(providerName) is not configured (Apple and Google need "
                    + "AUTH_APPLE_AUDIENCES / AUTH_GOOGLE_AUDIENCES; others AUTH_OIDC_PROVIDERS)")
            return 1
        }
        let clock: any WorkerClock = at.map { ManualClock($0) } ?? SystemClock()
        let logger = Logger(label: "auth-worker", level: .warning, handler: JSONLinesLogHandler.standardError)
        let keySet: KeySetCache
        if let keysPath {
            guard let data = FileManager.default.contents(atPath: keysPath) else {
                throw UsageError(message: "cannot read \(keysPath)")
            }
            keySet = KeySetCache(fixed: try JWKSet(json: data), clock: clock, logger: logger)
        } else {
            let source: KeySetCache.Source =
                if let url = providerConfiguration.keysURL {
                    .keysURL(url)
                } else if let discovery = providerConfiguration.discoveryURL {
                    .discovery(discovery, issuers: providerConfiguration.issuers)
                } else { throw UsageError(message: "\(providerName) has no key set URL") }
            keySet = KeySetCache(
                source: source, fetcher: HTTPDocumentFetcher(timeout: configuration.keySets.fetchTimeout), clock: clock,
                settings: configuration.keySets, logger: logger)
        }
        let provider = IdentityProvider(configuration: providerConfiguration, keySet: keySet, clock: clock)
        do {
            _ = try await provider.verify(token: token, nonce: nonce)
        } catch let error as JOSEError {
            let failure = LoginError(error)
            errorOutput("\(failure.code.rawValue): \(failure.message)")
            return 1
        }
        // Verified: print the header and claims exactly as the token carries them.
        let jws = try CompactJWS(token)
        let header = try JSONSerialization.jsonObject(with: Data(jws.headerBytes))
        let claims = try JSONSerialization.jsonObject(with: Data(jws.payload))
        let document = try JSONSerialization.data(
            withJSONObject: ["provider": providerName, "header": header, "claims": claims],
            options: [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes])
        output(String(decoding: document, as: UTF8.self))
        return 0
    }

    // MARK: - users delete, guests purge

    private func deleteUser(_ argument: String) async throws -> Int32 {
        guard let id = UUID(uuidString: argument) else {
            throw UsageError(message: "usage: auth-worker users delete ID (a user id)")
        }
        let configuration = try configuration(needs: [.database])
        let store = operatorStore(configuration)
        guard
            let deletion = try await AccountDeletion.deleteUser(
                id, reason: "operator", store: store, configuration: configuration, clock: SystemClock())
        else {
            errorOutput("auth-worker: no user \(argument)")
            return 1
        }
        await publishNow(store: store, configuration: configuration)
        output("deleted user \(id.lowercasedString); revoked \(deletion.sessionsRevoked) session(s)")
        return 0
    }

    // MARK: - users disable|enable, admins

    private func setDisabled(_ argument: String, disabled: Bool) async throws -> Int32 {
        let configuration = try configuration(needs: [.database])
        let store = operatorStore(configuration)
        guard let id = try await store.userReport(argument)?.userID,
            let change = try await AccountAdministration.setDisabled(
                id, disabled: disabled, actor: "operator", store: store, configuration: configuration,
                clock: SystemClock())
        else {
            errorOutput("auth-worker: no user \(argument)")
            return 1
        }
        await publishNow(store: store, configuration: configuration)
        let state = disabled ? "disabled" : "enabled"
        output(
            change.changed
                ? "\(state) user \(id.lowercasedString); ended \(change.sessionsEnded) session(s)"
                : "user \(id.lowercasedString) was \(state) already")
        return 0
    }

    private func endSessions(_ positionals: [String], usage: String) async throws -> Int32 {
        var only: UUID?
        if positionals.count > 1 {
            guard let session = UUID(uuidString: positionals[1]) else { throw UsageError(message: usage) }
            only = session
        }
        let configuration = try configuration(needs: [.database])
        let store = operatorStore(configuration)
        guard let id = try await store.userReport(positionals[0])?.userID,
            let ended = try await AccountAdministration.endSessions(
                id, only: only, actor: "operator", store: store, configuration: configuration, clock: SystemClock())
        else {
            errorOutput("auth-worker: no user \(positionals[0])")
            return 1
        }
        await publishNow(store: store, configuration: configuration)
        output("ended \(ended) session(s) of user \(id.lowercasedString)")
        return 0
    }

    private func removeFactor(_ argument: String) async throws -> Int32 {
        let configuration = try configuration(needs: [.database])
        let store = operatorStore(configuration)
        guard let id = try await store.userReport(argument)?.userID,
            let removed = try await AccountAdministration.removeFactor(
                id, actor: "operator", store: store, configuration: configuration, clock: SystemClock())
        else {
            errorOutput("auth-worker: no user \(argument)")
            return 1
        }
        await publishNow(store: store, configuration: configuration)
        output(
            removed
                ? "removed the second factor of user \(id.lowercasedString)"
                : "user \(id.lowercasedString) has no second factor")
        return 0
    }

    private func removePasskeys(_ positionals: [String], usage: String) async throws -> Int32 {
        var only: UUID?
        if positionals.count > 1 {
            guard let passkey = UUID(uuidString: positionals[1]) else { throw UsageError(message: usage) }
            only = passkey
        }
        let configuration = try configuration(needs: [.database])
        let store = operatorStore(configuration)
        guard let id = try await store.userReport(positionals[0])?.userID,
            let removed = try await AccountAdministration.removePasskeys(
                id, only: only, actor: "operator", store: store, configuration: configuration, clock: SystemClock())
        else {
            errorOutput("auth-worker: no user \(positionals[0])")
            return 1
        }
        await publishNow(store: store, configuration: configuration)
        output("removed \(removed) passkey(s) of user \(id.lowercasedString)")
        return 0
    }

    private func grantAdmin(_ arguments: Arguments, usage: String) async throws -> Int32 {
        guard let role = arguments.values["--role"].flatMap(AccountAdministration.Role.init(rawValue:)) else {
            throw UsageError(message: usage)
        }
        let store = operatorStore(try configuration(needs: [.database]))
        let email = arguments.positionals[0]
        switch try await store.grantAdminRole(email: email, role: role, by: "operator", at: Date()) {
        case .granted(let id):
            output("\(email) (user \(id.lowercasedString)) may use the admin console as \(role.rawValue)")
            return 0
        case .noPasswordAccount:
            errorOutput(
                "auth-worker: no account signs in with a password at \(email): the console's sign-in is the password and a second factor"
            )
            return 1
        case .addressNotVerified:
            errorOutput(
                "auth-worker: \(email) was never verified: its owner proves the mailbox first (verify_email, or a code sign-in), then grant again"
            )
            return 1
        }
    }

    private func revokeAdmin(_ email: String) async throws -> Int32 {
        let store = operatorStore(try configuration(needs: [.database]))
        guard try await store.revokeAdminRole(email: email, by: "operator", at: Date()) else {
            errorOutput("auth-worker: \(email) has no console role")
            return 1
        }
        output("\(email) may no longer use the admin console")
        return 0
    }

    private func listAdmins() async throws -> Int32 {
        let store = operatorStore(try configuration(needs: [.database]))
        for grant in try await store.adminGrants() {
            let line = AdminLine(
                email: grant.email, role: grant.role, userID: grant.userID.lowercasedString,
                grantedAt: Timestamp.format(grant.grantedAt), grantedBy: grant.grantedBy,
                emailVerified: grant.emailVerified)
            output(String(decoding: try MessageCoding.encodeDocument(line), as: UTF8.self))
        }
        return 0
    }

    private func purgeGuests(_ arguments: Arguments, usage: String) async throws -> Int32 {
        guard let text = arguments.values["--older-than"], let age = Self.duration(text) else {
            throw UsageError(message: usage + " (DURATION: 30d, 12h, 90m)")
        }
        let configuration = try configuration(needs: [.database])
        let store = operatorStore(configuration)
        let cutoff = Date() - age
        let deletion = try await AccountDeletion.purgeGuests(
            createdBefore: cutoff, store: store, configuration: configuration, clock: SystemClock())
        await publishNow(store: store, configuration: configuration)
        output("purged \(deletion.users) guest(s) created before \(Timestamp.format(cutoff))")
        return 0
    }

    /// Publishes the events the command wrote to the outbox; if the broker is unreachable, the
    /// running worker's outbox relay publishes them later.
    private func publishNow(store: PostgresStore, configuration: WorkerConfiguration) async {
        let logger = Logger(label: "auth-worker", level: .error, handler: JSONLinesLogHandler.standardError)
        do {
            var producerConfiguration = configuration.producerConfiguration
            producerConfiguration.deliveryTimeout = .seconds(10)
            let producer = try KafkaProducer(configuration: producerConfiguration, logger: logger)
            let relay = OutboxRelay(store: store, producer: producer, clock: SystemClock(), logger: logger, grace: -60)
            do {
                while try await relay.publishPending() > 0 {}
            } catch {
                await producer.shutdown(timeout: .seconds(5))
                throw error
            }
            await producer.shutdown(timeout: .seconds(5))
        } catch {
            errorOutput("auth-worker: events stay in the outbox for the worker to publish (\(error))")
        }
    }

    /// Parses `30d`, `12h`, `90m`, `3600s` (or plain seconds).
    static func duration(_ text: String) -> TimeInterval? {
        let units: [Character: TimeInterval] = ["s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604_800]
        guard let last = text.last else { return nil }
        if let unit = units[last], let value = Double(text.dropLast()), value > 0 { return value * unit }
        if let value = Double(text), value > 0 { return value }
        return nil
    }

    // MARK: - users show

    private func showAudit(_ arguments: Arguments, usage: String) async throws -> Int32 {
        var since: Date?
        if let text = arguments.values["--since"] {
            guard let age = Self.duration(text) else { throw UsageError(message: usage + " (DURATION: 30d, 12h, 90m)") }
            since = Date() - age
        }
        let configuration = try configuration(needs: [.database])
        let store = operatorStore(configuration)
        let argument = arguments.positionals[0]
        // An id is looked up as it is: the trail outlives a deleted account.
        var id = UUID(uuidString: argument)
        if id == nil { id = try await store.userReport(argument)?.userID }
        guard let id else {
            errorOutput("auth-worker: no user \(argument)")
            return 1
        }
        for entry in try await store.auditTrail(userID: id, since: since) {
            let line = AuditLine(
                at: Timestamp.format(entry.at), action: entry.action, outcome: entry.outcome, actor: entry.actor,
                requestId: entry.requestID, clientId: entry.clientID, deviceName: entry.deviceName,
                devicePlatform: entry.devicePlatform, ip: entry.ip, userAgent: entry.userAgent)
            output(String(decoding: try MessageCoding.encodeDocument(line), as: UTF8.self))
        }
        return 0
    }

    /// One line of `users audit`.
    struct AuditLine: Codable {
        var at: String
        var action: String
        var outcome: String
        var actor: String
        var requestId: String?
        var clientId: String?
        var deviceName: String?
        var devicePlatform: String?
        var ip: String?
        var userAgent: String?

        enum CodingKeys: String, CodingKey {
            case at, action, outcome, actor, ip
            case requestId = "request_id"
            case clientId = "client_id"
            case deviceName = "device_name"
            case devicePlatform = "device_platform"
            case userAgent = "user_agent"
        }
    }

    private func showUser(_ argument: String) async throws -> Int32 {
        let configuration = try configuration(needs: [.database])
        let store = operatorStore(configuration)
        guard let report = try await store.userReport(argument) else {
            errorOutput("auth-worker: no user \(argument)")
            return 1
        }
        output(String(decoding: try MessageCoding.encodeDocument(report), as: UTF8.self))
        return 0
    }
}

/// A line of `auth-worker admins list`.
private struct AdminLine: Encodable {
    var email: String
    var role: String
    var userID: String
    var grantedAt: String
    var grantedBy: String
    /// A role on an unproven address opens no console session.
    var emailVerified: Bool

    enum CodingKeys: String, CodingKey {
        case email, role
        case userID = "user_id"
        case grantedAt = "granted_at"
        case grantedBy = "granted_by"
        case emailVerified = "email_verified"
    }
}

extension CommandLineInterface {
    /// Every setting, a table a section, from their declarations (`Setting.all`).
    static var configurationReference: String {
        var lines: [String] = []
        for section in Setting.Section.allCases {
            let settings = Setting.all.filter { $0.section == section }
            guard !settings.isEmpty else { continue }
            if !lines.isEmpty { lines.append("") }
            lines += ["### \(section.rawValue)", "", "| variable | meaning | default |", "|---|---|---|"]
            for setting in settings {
                lines.append("| `\(setting.name)` | \(setting.meaning) | \(setting.defaultValue) |")
            }
        }
        return lines.joined(separator: "\n")
    }
}
