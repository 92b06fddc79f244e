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

/// The commands that run the service or look at it: `run`, `admin`, `migrate`, `config`, `probe`.
extension CommandLineInterface {
    /// Asks this machine's health endpoint (`AUTH_HEALTH_PORT`), as a container HEALTHCHECK does:
    /// exit 0 when it answers 200 within two seconds, 1 otherwise.
    func probe(_ path: String) -> Int32 {
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
    enum Endpoint {
        case database, brokers
    }

    // MARK: - run, migrate

    /// `auth-worker admin`: the console, in a process of its own. It needs PostgreSQL only: the
    /// events its actions cause wait in the outbox for the worker's relay to publish.
    func runConsole() async throws {
        let configuration = try configuration(needs: [.database])
        try configuration.validate()
        let logger = logger(configuration)
        let console = try ConsoleSettings.fromEnvironment(environment)
        guard configuration.resultsKey != nil else {
            throw ConfigurationError(
                variable: Setting.resultsKeyFile.name,
                reason:
                    "the console's sign-in asks for the second factor, whose secrets are sealed with the results key")
        }
        if !console.isLoopback && !console.behindTLS {
            throw ConfigurationError(
                variable: Setting.consoleBehindTLS.name,
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
        // The other tenants' flows, for what an action sends in a tenant's name (read at start).
        var tenantFlows: [String: LoginFlows] = [:]
        for (name, tenant) in try tenantConfigurations(configuration) {
            try tenant.validate()
            tenantFlows[name] = LoginFlows(
                configuration: tenant,
                accessTokens: try WorkerApplication.makeAccessTokenIssuer(
                    tenant, identifiers: identifiers, tenant: name),
                passwords: passwords, attempts: store.attempts(for: name), clock: clock, identifiers: identifiers,
                logger: logger.child(label: "auth.flows"))
        }
        let service = try ConsoleService(
            console: AdminConsole(
                configuration: configuration, settings: console, store: store, flows: flows, tenantFlows: tenantFlows,
                clock: clock, logger: logger.child(label: "auth.console")),
            host: console.address, port: console.port, logger: logger.child(label: "auth.console.http"))
        logger.info(
            "Admin console listening",
            metadata: ["http.address": console.address, "http.port": String(service.port)])
        try await ServiceGroup(services: [service], logger: logger).run()
    }

    func runWorker() async throws {
        // SIGHUP reads the tenants file again (below); until then it is ignored, not fatal.
        signal(SIGHUP, SIG_IGN)
        let configuration = try configuration()
        let kafka = try kafka()
        let logger = logger(configuration)
        logger.info(
            "Starting",
            metadata: [
                "kafka.brokers": kafka.brokers.joined(separator: ","), "kafka.group": kafka.group,
                "auth.token_format": configuration.accessTokenFormat.rawValue, "allocator": Allocator.description,
            ])
        let tenants = try tenantConfigurations(configuration)
        let application = try await WorkerApplication.build(
            configuration: configuration, kafka: kafka, logger: logger, tenants: tenants)
        if !tenants.isEmpty {
            logger.info("Tenants served", metadata: [LogKey.tenants: tenants.keys.sorted().joined(separator: ",")])
        }
        // SIGHUP reads the tenants file again: its tenants are served from then on, or, when it
        // has a mistake, each is logged and the tenants served stay as they were.
        let reload = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
        reload.setEventHandler { [self] in
            do {
                try application.serveTenants(try tenantConfigurations(configuration))
            } catch {
                logger.error(
                    "Tenants file refused; the tenants served are unchanged",
                    metadata: [LogKey.error: "\(error)"])
            }
        }
        reload.resume()
        defer { reload.cancel() }
        try await application.run()
    }

    /// The tenants of `AUTH_TENANTS_FILE`, each a configuration of its own; none without the file.
    /// The configuration of `tenant`: the deployment's for the default tenant, else the tenants
    /// file's (a tenant it does not list is a usage error).
    func configuration(ofTenant tenant: String) throws -> WorkerConfiguration {
        let configuration = try configuration()
        guard tenant != Tenant.defaultName else { return configuration }
        guard let named = try tenantConfigurations(configuration)[tenant] else {
            throw UsageError(
                message: "no tenant \(tenant) in AUTH_TENANTS_FILE (\(configuration.tenantsFilePath ?? "not set"))")
        }
        return named
    }

    func tenantConfigurations(_ configuration: WorkerConfiguration) throws -> [String: WorkerConfiguration] {
        guard let path = configuration.tenantsFilePath else { return [:] }
        return try TenantsFile.configurations(path: path, environment: environment)
    }

    /// Checks everything the worker would check at start, and more, connecting to nothing: the
    /// variables, the key files, the providers file, the librdkafka properties.
    func checkConfiguration() throws {
        let configuration = try configuration()
        let kafka = try kafka()
        try kafka.validate()
        try configuration.validate()
        let tenants = try tenantConfigurations(configuration)
        for (_, tenant) in tenants { try tenant.validate() }
        _ = try ConsoleSettings.fromEnvironment(environment)
        do {
            try kafka.producerConfiguration.check()
            try kafka.consumerConfiguration.check()
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
        let file = try configuration.providersFile()
        let providers =
            try configuration.identityProviders(file: file).map(\.name) + file.oauth.map { "\($0.name) (oauth2)" }
        var database = "set"
        if let url = URLComponents(string: configuration.databaseURL) {
            // Where it points, never the password.
            database = "\(url.host ?? "local socket"):\(url.port.map(String.init) ?? "5432")\(url.path)"
        }
        output(
            """
            configuration is valid
              brokers: \(kafka.brokers.joined(separator: ",")) (group \(kafka.group))
              database: \(database)
              topics: \(configuration.topics.all.joined(separator: ", "))
              access tokens: \(configuration.accessTokenFormat.rawValue); signing keys: \(signing.isEmpty ? "none" : signing.joined(separator: ", "))
              credential keys: \(credentials.isEmpty ? "none" : credentials.joined(separator: ", "))\(configuration.requireSealedCredentials ? " (sealed credentials required)" : "")
              identity providers: \(providers.isEmpty ? "none" : providers.joined(separator: ", "))
              results key: \(configuration.resultsKey == nil ? "none (a redelivered request cannot be answered again)" : "set")
              tenants: default\(tenants.keys.sorted().map { ", " + $0 }.joined())
            """)
    }

    /// The store an operator command uses: one connection, prepared statements as configured.
    func operatorStore(_ configuration: WorkerConfiguration) -> PostgresStore {
        PostgresStore(
            pool: PGPool(
                conninfo: configuration.databaseURL, size: 1,
                preparesStatements: configuration.processing.preparedStatements))
    }

    /// With `apply` false (`--status`, `--dry-run`), only says what would be applied.
    func migrate(apply: Bool) async throws {
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
}

extension CommandLineInterface {
    /// Every setting the service reads: the Kafka client's, the domain's and the console's, each
    /// declared by its module.
    static let allSettings = KafkaSettings.declared + Setting.domain + ConsoleSettings.declared

    /// Every setting, a table a section, from their declarations.
    static var configurationReference: String {
        var lines: [String] = []
        for section in Setting.Section.allCases {
            let settings = allSettings.filter { $0.section == section }
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
