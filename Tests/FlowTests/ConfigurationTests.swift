import AdminConsole
import AuthStore
import AuthWorker
import Foundation
import Kafka
import ServiceKit
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import TestSupport

@Suite struct ConfigurationTests {
    @Test func defaultsAreTheContractsAndTheEndpointsHaveNone() throws {
        let config = try WorkerConfiguration.fromEnvironment([:])
        let kafka = try KafkaSettings.fromEnvironment([:])
        #expect(kafka.brokers.isEmpty && config.databaseURL.isEmpty, "no development default")
        #expect(kafka.group == "auth-worker")
        #expect(config.topics.requests == "auth.login.requests")
        #expect(config.topics.results == "auth.login.results")
        #expect(config.topics.events == "auth.user.events")
        #expect(config.topics.notifications == "auth.provider.notifications")
        #expect(config.topics.deadLetters == "auth.login.requests.dlq")
        #expect(config.accessTokenFormat == .jwt)
        #expect(config.logLevel == .info)
        #expect(config.sessions.guestAbilities == ["guest"])
    }

    @Test func readsTheOperatorInterface() throws {
        let environment = [
            "AUTH_KAFKA_BROKERS": "k1:9092, k2:9092", "AUTH_KAFKA_GROUP": "g", "AUTH_DATABASE_URL": "postgres://db/x",
            "AUTH_TOPIC_REQUESTS": "r", "AUTH_TOPIC_RESULTS": "s", "AUTH_TOPIC_EVENTS": "e",
            "AUTH_TOPIC_NOTIFICATIONS": "n", "AUTH_TOPIC_DLQ": "d", "AUTH_APPLE_AUDIENCES": "com.example.app",
            "AUTH_GOOGLE_AUDIENCES": "a.apps.googleusercontent.com,b", "AUTH_ACCESS_TOKEN_FORMAT": "opaque",
            "AUTH_SIGNING_KEYS": "/k/new.pem,/k/old.pem", "AUTH_LOG_LEVEL": "debug", "AUTH_BATCH_MAX": "64",
            "AUTH_GUEST_ABILITIES": "guest,read", "AUTH_MIGRATE_ON_START": "false",
            "AUTH_DB_PREPARED_STATEMENTS": "false",
        ]
        let config = try WorkerConfiguration.fromEnvironment(environment)
        let kafka = try KafkaSettings.fromEnvironment(environment)
        #expect(kafka.brokers == ["k1:9092", "k2:9092"])
        #expect(kafka.group == "g")
        #expect(config.databaseURL == "postgres://db/x")
        #expect(config.topics.requests == "r" && config.topics.results == "s" && config.topics.events == "e")
        #expect(config.topics.notifications == "n" && config.topics.deadLetters == "d")
        #expect(config.appleAudiences == ["com.example.app"])
        #expect(config.googleAudiences == ["a.apps.googleusercontent.com", "b"])
        #expect(config.accessTokenFormat == .opaque)
        #expect(config.signingKeyPaths == ["/k/new.pem", "/k/old.pem"])
        #expect(config.logLevel == .debug)
        #expect(config.processing.batchMax == 64)
        #expect(config.sessions.guestAbilities == ["guest", "read"])
        #expect(!config.migrateOnStart)
        #expect(!config.processing.preparedStatements)
        #expect(try WorkerConfiguration.fromEnvironment([:]).processing.preparedStatements)
        // Phone codes and the events' content mode.
        let phone = try WorkerConfiguration.fromEnvironment([
            "AUTH_SMS_COUNTRIES": "1, +44,82", "AUTH_SMS_DAILY_BUDGET": "50", "AUTH_SMS_PREFIX_RATE_LIMIT": "4/600",
            "AUTH_PHONE_CODE_SIGNUP": "true", "AUTH_EVENTS_CONTENT_MODE": "binary",
        ])
        #expect(phone.phoneCodes.countries == [1, 44, 82] && phone.phoneCodes.signUp)
        #expect(phone.phoneCodes.dailyBudget == .init(count: 50, window: 86_400))
        #expect(phone.phoneCodes.perPrefix == .init(count: 4, window: 600))
        #expect(phone.eventsContentMode == .binary)
        #expect(try WorkerConfiguration.fromEnvironment(["AUTH_SMS_COUNTRIES": "*"]).phoneCodes.countries == nil)
        // A password file's password joins the URL's parameters, encoded for each form.
        #expect(
            WorkerConfiguration.connectionString("postgres://u@h/db", password: "p&=/ é")
                == "postgres://u@h/db?password=p%26%3D%2F%20%C3%A9")
        #expect(
            WorkerConfiguration.connectionString("postgresql://u@h/db?sslmode=verify-full", password: "x")
                == "postgresql://u@h/db?sslmode=verify-full&password=x")
        #expect(
            WorkerConfiguration.connectionString("host=h dbname=db", password: #"it's \ ok"#)
                == #"host=h dbname=db password='it\'s \\ ok'"#)
        // The purge keeps rate-limit rows as long as the longest window: the day's texting budget.
        #expect(phone.longestRateLimitWindow == 86_400)
    }

    @Test(arguments: [
        ("AUTH_ACCESS_TOKEN_FORMAT", "paseto"), ("AUTH_LOG_LEVEL", "loud"), ("AUTH_BATCH_MAX", "many"),
        ("AUTH_MIGRATE_ON_START", "maybe"), ("AUTH_KAFKA_PROPERTIES_FILE", "/nonexistent/file"),
        ("AUTH_GUEST_GLOBAL_RATE_LIMIT", "100"), ("AUTH_REGISTER_RATE_LIMIT", "10/0"),
        ("AUTH_REGISTER_GLOBAL_RATE_LIMIT", "-1/60"), ("AUTH_REQUIRE_SEALED_CREDENTIALS", "perhaps"),
        ("AUTH_DB_PREPARED_STATEMENTS", "sometimes"), ("AUTH_KAFKA_SESSION_TIMEOUT_MS", "soon"),
        ("AUTH_CONSOLE_PORT", "http"), ("AUTH_EVENTS_CONTENT_MODE", "xml"), ("AUTH_SMS_KEY", "not-a-key"),
        ("AUTH_SMS_COUNTRIES", "1,999"), ("AUTH_SMS_COUNTRIES", ","), ("AUTH_PHONE_CODE_TTL_SECONDS", "3600"),
        ("AUTH_PHONE_CODE_MAX_ATTEMPTS", "0"), ("AUTH_SMS_NUMBER_RATE_LIMIT", "3"), ("AUTH_SMS_DAILY_BUDGET", "-5"),
        ("AUTH_PHONE_CODE_SIGNUP", "sometimes"),
    ])
    func badValuesNameTheirVariable(variable: String, value: String) {
        // Each module reads its own settings, as `auth-worker config check` reads them all.
        func readAll(_ environment: [String: String]) throws {
            _ = try KafkaSettings.fromEnvironment(environment)
            _ = try WorkerConfiguration.fromEnvironment(environment)
            _ = try ConsoleSettings.fromEnvironment(environment)
        }
        #expect(throws: ConfigurationError.self) { try readAll([variable: value]) }
        do {
            try readAll([variable: value])
        } catch let error as ConfigurationError {
            #expect(error.variable == variable)
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    /// Unset or empty, the brokers and the database are refused by name: an empty
    /// `AUTH_KAFKA_BROKERS=` used to fall back to the local setup's broker.
    @Test func theEndpointsMustBeSetNotDefaulted() throws {
        for environment in [[:], ["AUTH_KAFKA_BROKERS": "", "AUTH_DATABASE_URL": "postgres://db/x"]] {
            let kafka = try KafkaSettings.fromEnvironment(environment)
            #expect(throws: ConfigurationError(variable: "AUTH_KAFKA_BROKERS", reason: "")) { try kafka.validate() }
        }
        let noDatabase = try WorkerConfiguration.fromEnvironment([
            "AUTH_KAFKA_BROKERS": "k:9092", "AUTH_DATABASE_URL": " ", "AUTH_ACCESS_TOKEN_FORMAT": "opaque",
        ])
        #expect(throws: ConfigurationError(variable: "AUTH_DATABASE_URL", reason: "")) { try noDatabase.validate() }
    }

    /// The database URL (it holds the password) can come from a mounted Secret file.
    @Test func theDatabaseURLCanComeFromAFile() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("db-\(UUID())").path
        try "postgres://auth:secret@db:5432/auth\n".write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let config = try WorkerConfiguration.fromEnvironment(["AUTH_DATABASE_URL_FILE": path])
        #expect(config.databaseURL == "postgres://auth:secret@db:5432/auth")
        #expect(throws: ConfigurationError(variable: "AUTH_DATABASE_URL_FILE", reason: "")) {
            try WorkerConfiguration.fromEnvironment([
                "AUTH_DATABASE_URL_FILE": path, "AUTH_DATABASE_URL": "postgres://x/y",
            ])
        }
        #expect(throws: ConfigurationError(variable: "AUTH_DATABASE_URL_FILE", reason: "")) {
            try WorkerConfiguration.fromEnvironment(["AUTH_DATABASE_URL_FILE": path + ".missing"])
        }
    }

    /// `AUTH_BATCH_LINGER_MS`: off unless set, read in milliseconds, refused past a second or
    /// below nothing.
    @Test func theBatchLingerIsOffUnlessSetAndAtMostASecond() throws {
        let base = [
            "AUTH_KAFKA_BROKERS": "k:9092", "AUTH_DATABASE_URL": "postgres://db/x",
            "AUTH_ACCESS_TOKEN_FORMAT": "opaque",
        ]
        #expect(try WorkerConfiguration.fromEnvironment(base).processing.batchLinger == .zero)
        let set = try WorkerConfiguration.fromEnvironment(base.merging(["AUTH_BATCH_LINGER_MS": "10"]) { $1 })
        #expect(set.processing.batchLinger == .milliseconds(10))
        try set.validate()
        let long = try WorkerConfiguration.fromEnvironment(base.merging(["AUTH_BATCH_LINGER_MS": "1001"]) { $1 })
        #expect(throws: ConfigurationError(variable: "AUTH_BATCH_LINGER_MS", reason: "")) { try long.validate() }
        #expect(throws: ConfigurationError(variable: "AUTH_BATCH_LINGER_MS", reason: "")) {
            try WorkerConfiguration.fromEnvironment(base.merging(["AUTH_BATCH_LINGER_MS": "-5"]) { $1 })
        }
    }

    /// The relay's grace is refused below 2 s: acknowledged events wait up to a second (with no
    /// transaction to carry them) to leave the outbox, and a relay that took them sooner would
    /// publish them a second time.
    @Test func thePurgeIntervalIsFromTenSecondsToADay() throws {
        let base = [
            "AUTH_KAFKA_BROKERS": "k:9092", "AUTH_DATABASE_URL": "postgres://db/x",
            "AUTH_ACCESS_TOKEN_FORMAT": "opaque",
        ]
        #expect(try WorkerConfiguration.fromEnvironment(base).purgeInterval == 600)
        for good in ["10", "86400"] {
            let config = try WorkerConfiguration.fromEnvironment(
                base.merging(["AUTH_PURGE_INTERVAL_SECONDS": good]) { $1 })
            try config.validate()
            #expect(config.purgeInterval == Double(good))
        }
        for bad in ["9", "86401"] {
            let config = try WorkerConfiguration.fromEnvironment(
                base.merging(["AUTH_PURGE_INTERVAL_SECONDS": bad]) { $1 })
            #expect(throws: ConfigurationError(variable: "AUTH_PURGE_INTERVAL_SECONDS", reason: "")) {
                try config.validate()
            }
        }
    }

    @Test func theRelaysGraceIsAtLeastTheOutboxsLongestWait() throws {
        let base = [
            "AUTH_KAFKA_BROKERS": "k:9092", "AUTH_DATABASE_URL": "postgres://db/x",
            "AUTH_ACCESS_TOKEN_FORMAT": "opaque",
        ]
        try WorkerConfiguration.fromEnvironment(base).validate()
        try WorkerConfiguration.fromEnvironment(base.merging(["AUTH_OUTBOX_RELAY_GRACE_SECONDS": "2"]) { $1 })
            .validate()
        for short in ["1", "0"] {
            let config = try WorkerConfiguration.fromEnvironment(
                base.merging(["AUTH_OUTBOX_RELAY_GRACE_SECONDS": short]) { $1 })
            #expect(throws: ConfigurationError(variable: "AUTH_OUTBOX_RELAY_GRACE_SECONDS", reason: "")) {
                try config.validate()
            }
        }
        var set = try WorkerConfiguration.fromEnvironment(base)
        set.outboxRelayGrace = 1.5
        #expect(throws: ConfigurationError(variable: "AUTH_OUTBOX_RELAY_GRACE_SECONDS", reason: "")) {
            try set.validate()
        }
    }

    /// `AUTH_DB_POOL_SIZE=0` is refused naming itself (it used to name AUTH_BATCH_SIZE).
    @Test func aPoolOfNoConnectionsNamesItsVariable() throws {
        let config = try WorkerConfiguration.fromEnvironment([
            "AUTH_KAFKA_BROKERS": "k:9092", "AUTH_DATABASE_URL": "postgres://db/x",
            "AUTH_ACCESS_TOKEN_FORMAT": "opaque",
            "AUTH_DB_POOL_SIZE": "0",
        ])
        do {
            try config.validate()
            Issue.record("a pool of no connections was accepted")
        } catch let error as ConfigurationError {
            #expect(error.variable == "AUTH_DB_POOL_SIZE")
            #expect(!error.description.contains("AUTH_BATCH_SIZE"))
        }
    }

    @Test func validationRefusesConfigurationsThatCannotWork() throws {
        var config = WorkerConfiguration(databaseURL: "postgres://db/x")
        #expect(throws: ConfigurationError(variable: "AUTH_SIGNING_KEYS", reason: "")) { try config.validate() }
        config.accessTokenFormat = .opaque
        try config.validate()
        config.databaseURL = "mysql://db"
        #expect(throws: ConfigurationError(variable: "AUTH_DATABASE_URL", reason: "")) { try config.validate() }
    }

    @Test func ceilingsAndSealingAreConfigured() throws {
        let config = try WorkerConfiguration.fromEnvironment([
            "AUTH_GUEST_GLOBAL_RATE_LIMIT": "500/60", "AUTH_REGISTER_RATE_LIMIT": "3/600",
            "AUTH_REGISTER_GLOBAL_RATE_LIMIT": "0/60", "AUTH_PASSWORD_CONTEXT_WORDS": "Acme, acme-auth ,",
        ])
        #expect(config.accounts.guestGlobalRateLimit == .init(count: 500, window: 60))
        #expect(config.accounts.registerRateLimit == .init(count: 3, window: 600))
        #expect(config.accounts.registerGlobalRateLimit.count == 0)
        #expect(config.accounts.passwordContextWords == ["Acme", "acme-auth"])
        #expect(config.accounts.longestRateLimitWindow == 3600, "the guest limit's hour")
        var sealed = WorkerConfiguration(databaseURL: "postgres://db/x")
        sealed.accessTokenFormat = .opaque
        sealed.requireSealedCredentials = true
        #expect(throws: ConfigurationError(variable: "AUTH_REQUIRE_SEALED_CREDENTIALS", reason: "")) {
            try sealed.validate()
        }
        sealed.credentialKeyPaths = ["/keys/credential.pem"]
        try sealed.validate()
    }

    @Test func kafkaPropertiesFileIsPassedThroughAndWins() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("kafka-\(UUID()).properties").path
        try "# TLS\nsecurity.protocol = SASL_SSL\nsasl.mechanisms=PLAIN\nlinger.ms=50\n".write(
            toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let kafka = try KafkaSettings.fromEnvironment(["AUTH_KAFKA_PROPERTIES_FILE": path])
        let producer = kafka.producerConfiguration.librdkafkaProperties
        #expect(producer["security.protocol"] == "SASL_SSL")
        #expect(producer["sasl.mechanisms"] == "PLAIN")
        #expect(producer["linger.ms"] == "50")
    }

    /// Pins the mapping onto librdkafka: at-least-once needs exactly these consumer settings.
    @Test func librdkafkaMapping() {
        var kafka = KafkaConfiguration(bootstrapServers: ["a:1", "b:2"])
        kafka.clientID = "worker-1"
        let producer = KafkaProducerConfiguration(kafka: kafka).librdkafkaProperties
        #expect(
            producer == [
                "bootstrap.servers": "a:1,b:2", "client.id": "worker-1", "enable.idempotence": "true", "acks": "all",
                "linger.ms": "1", "message.timeout.ms": "30000", "compression.codec": "lz4",
                "socket.nagle.disable": "true", "allow.auto.create.topics": "false",
            ])
        var consumerConfig = KafkaConsumerConfiguration(kafka: kafka, groupID: "auth-worker")
        consumerConfig.sessionTimeout = .seconds(6)
        let consumer = consumerConfig.librdkafkaProperties
        #expect(
            consumer == [
                "bootstrap.servers": "a:1,b:2", "client.id": "worker-1", "group.id": "auth-worker",
                "session.timeout.ms": "6000", "max.poll.interval.ms": "300000", "auto.offset.reset": "earliest",
                "enable.auto.commit": "true", "auto.commit.interval.ms": "1000", "enable.auto.offset.store": "false",
                "enable.partition.eof": "false", "fetch.wait.max.ms": "100", "socket.nagle.disable": "true",
            ])
    }

    /// The worker is interactive: no linger, and a fetch wait that a broker answering early (Apache
    /// Kafka) cuts short when data arrives, long enough that an idle worker rarely asks; both adjustable.
    @Test func theWorkersKafkaSettingsAreForAnInteractiveService() throws {
        let defaults = KafkaSettings()
        #expect(defaults.consumerConfiguration.librdkafkaProperties["fetch.wait.max.ms"] == "100")
        #expect(defaults.producerConfiguration.librdkafkaProperties["linger.ms"] == "0")
        let environment = ["AUTH_KAFKA_FETCH_WAIT_MS": "50", "AUTH_KAFKA_LINGER_MS": "10", "AUTH_BATCH_SIZE": "32"]
        let tuned = try KafkaSettings.fromEnvironment(environment)
        #expect(tuned.consumerConfiguration.librdkafkaProperties["fetch.wait.max.ms"] == "50")
        #expect(tuned.producerConfiguration.librdkafkaProperties["linger.ms"] == "10")
        #expect(
            try WorkerConfiguration.fromEnvironment(environment).processing.batchMax == 32,
            "the earlier name of AUTH_BATCH_MAX still works")
        #expect(defaults.consumerConfiguration.librdkafkaProperties["max.poll.interval.ms"] == "300000")
        let shortRebalances = try KafkaSettings.fromEnvironment([
            "AUTH_KAFKA_MAX_POLL_INTERVAL_MS": "30000", "AUTH_KAFKA_SESSION_TIMEOUT_MS": "6000",
        ])
        #expect(shortRebalances.consumerConfiguration.librdkafkaProperties["max.poll.interval.ms"] == "30000")
        let belowTheSession = try KafkaSettings.fromEnvironment([
            "AUTH_KAFKA_MAX_POLL_INTERVAL_MS": "5000", "AUTH_KAFKA_SESSION_TIMEOUT_MS": "6000",
            "AUTH_KAFKA_BROKERS": "k:9092", "AUTH_DATABASE_URL": "postgres://db/x",
            "AUTH_ACCESS_TOKEN_FORMAT": "opaque",
        ])
        #expect(throws: ConfigurationError(variable: "AUTH_KAFKA_MAX_POLL_INTERVAL_MS", reason: "")) {
            try belowTheSession.validate()
        }
    }

    func providersFile(_ json: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("oidc-\(UUID()).json").path
        try json.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func identityProvidersFromTheEnvironmentAndTheOIDCFile() throws {
        let path = try providersFile(
            """
            [{"name": "facebook", "issuer": "https://www.facebook.com",
              "jwks_uri": "https://limited.facebook.com/.well-known/oauth/openid/jwks/", "audiences": ["1234567890"]},
             {"name": "firebase", "issuer": "https://securetoken.google.com/my-project", "discovery": true,
              "audiences": ["my-project"], "algorithms": ["RS256"], "nonce": "sha256", "nonce_required": true}]
            """)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let config = try WorkerConfiguration.fromEnvironment([
            "AUTH_APPLE_AUDIENCES": "com.example.app", "AUTH_OIDC_PROVIDERS": path,
        ])
        let providers = try config.identityProviders()
        #expect(providers.map(\.name) == ["apple", "facebook", "firebase"], "Google has no audiences: disabled")
        #expect(providers[0].keysURL?.absoluteString == "https://appleid.apple.com/auth/keys")
        #expect(providers[1].keysURL?.absoluteString == "https://limited.facebook.com/.well-known/oauth/openid/jwks/")
        #expect(providers[1].requireKeyID == false)
        #expect(
            providers[2].discoveryURL?.absoluteString
                == "https://securetoken.google.com/my-project/.well-known/openid-configuration")
        #expect(providers[2].nonceMode == .sha256Hex)
        #expect(providers[2].requireNonce)
    }

    @Test(arguments: [
        #"[{"name": "x", "issuer": "https://x", "jwks_uri": "https://x/keys", "audiences": []}]"#,
        #"[{"name": "x", "issuer": "https://x", "audiences": ["a"]}]"#,
        #"[{"name": "x", "issuer": "https://x", "jwks_uri": "https://x/keys", "audiences": ["a"], "algorithms": ["HS256"]}]"#,
        #"[{"name": "x", "issuer": "https://x", "jwks_uri": "https://x/keys", "audiences": ["a"], "nonce": "md5"}]"#,
        #"[{"name": "apple", "issuer": "https://x", "jwks_uri": "https://x/keys", "audiences": ["a"]}]"#,
        #"[{"name": "bad name!", "issuer": "https://x", "jwks_uri": "https://x/keys", "audiences": ["a"]}]"#,
        #"{"name": "x"}"#,
        #"[{"name": "x", "issuer": "https://x", "jwks_uri": "https://x/keys", "audiences": ["a"], "algoritms": ["RS256"]}]"#,
        #"[{"name": "x", "issuer": "https://x", "jwks_uri": "not a url", "audiences": ["a"]}]"#,
        #"[{"name": "x", "issuer": "https://x", "jwks_uri": "ftp://x/keys", "audiences": ["a"]}]"#,
    ])
    func unusableProvidersAreRefusedAtStart(json: String) throws {
        let path = try providersFile(json)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let config = try WorkerConfiguration.fromEnvironment([
            "AUTH_APPLE_AUDIENCES": "com.example.app", "AUTH_OIDC_PROVIDERS": path,
        ])
        #expect(throws: ConfigurationError(variable: "AUTH_OIDC_PROVIDERS", reason: "")) {
            try config.identityProviders()
        }
    }

    /// A typo'd field used to be ignored and a missing one printed a Swift `DecodingError` dump:
    /// each is now refused with the file and the field's path.
    @Test(arguments: [
        (
            #"[{"name": "x", "issuer": "https://x", "jwks_uri": "https://x/k", "audiences": ["a"], "algoritms": []}]"#,
            "[0].algoritms is not a known field"
        ),
        (
            #"[{"name": "x", "issuer": "https://x", "jwks_uri": "https://x/k", "audiences": ["a"]}, {"name": "y"}]"#,
            "[1].issuer is required"
        ),
        (
            #"[{"name": "x", "issuer": "https://x", "jwks_uri": "https://x/k", "audiences": "a"}]"#,
            "[0].audiences must be a list of strings"
        ),
    ])
    func providersFileErrorsNameTheField(json: String, expected: String) throws {
        let path = try providersFile(json)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let config = try WorkerConfiguration.fromEnvironment(["AUTH_OIDC_PROVIDERS": path])
        do {
            _ = try config.identityProviders()
            Issue.record("accepted \(json)")
        } catch let error as ConfigurationError {
            #expect(error.description.contains(path) && error.description.contains(expected), "\(error)")
            #expect(!error.description.contains("DecodingError"))
        }
    }

    /// Each variable is declared once, and the reference lists every declaration under its
    /// section: what `scripts/check-docs.py` compares with docs/operations.md.
    @Test func everySettingIsDeclaredOnceAndListedInTheReference() throws {
        let all = CommandLineInterface.allSettings
        let names = all.map(\.name)
        #expect(
            Set(names).count == names.count,
            "declared twice: \(names.filter { name in names.filter { $0 == name }.count > 1 })")
        #expect(names.allSatisfy { $0.hasPrefix("AUTH_") && $0 == $0.uppercased() })
        #expect(all.allSatisfy { !$0.meaning.isEmpty && !$0.defaultValue.isEmpty })
        let reference = CommandLineInterface.configurationReference
        for setting in all {
            #expect(reference.components(separatedBy: "| `\(setting.name)` |").count == 2, "\(setting.name)")
        }
        for section in Setting.Section.allCases {
            #expect(reference.contains("### \(section.rawValue)\n"), "\(section.rawValue)")
        }
        // Read by its declaration: a value set under the declared name arrives.
        let environment = [
            Setting.kafkaGroup.name: "group-from-the-declaration", Setting.batchMax.name: "42",
            Setting.consolePort.name: "9443",
        ]
        #expect(try KafkaSettings.fromEnvironment(environment).group == "group-from-the-declaration")
        #expect(try WorkerConfiguration.fromEnvironment(environment).processing.batchMax == 42)
        #expect(try ConsoleSettings.fromEnvironment(environment).port == 9443)
    }
}
