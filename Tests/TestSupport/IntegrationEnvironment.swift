import AuthCLI
import AuthDomain
import AuthStore
import AuthWorker
import Foundation
import Kafka
import PGStore
import ServiceKit
import Testing

/// The real PostgreSQL server and broker the integration tests use, from the environment:
///
/// - `AUTH_TEST_DATABASE_SERVER`: `postgres://user:password@host:port` (each test gets a database of its own)
/// - `AUTH_TEST_DATABASE_OPTIONS`: libpq parameters every database URL ends with (the local
///   setup's `sslmode=verify-full&sslrootcert=…`: the workers the tests start run with an
///   environment of their own, without libpq's `PGSSLMODE`)
/// - `AUTH_TEST_KAFKA_BROKERS`: bootstrap servers (each test gets topics of its own)
///
/// `scripts/test` sets both. Without them the integration suites are skipped, unless
/// `AUTH_TEST_REQUIRE_INTEGRATION=1`, which makes their absence a failure.
enum IntegrationEnvironment {
    static let environment = ProcessInfo.processInfo.environment
    static let databaseServer = environment["AUTH_TEST_DATABASE_SERVER"]
    static let kafkaBrokers = environment["AUTH_TEST_KAFKA_BROKERS"]
    static let isRequired = environment["AUTH_TEST_REQUIRE_INTEGRATION"] == "1"

    static var isAvailable: Bool { databaseServer != nil && kafkaBrokers != nil }
    static var hasDatabase: Bool { databaseServer != nil }

    static func uniqueName(_ prefix: String) -> String {
        "\(prefix)_\(UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(12))"
    }

    /// The tests' connections wait up to a minute to connect (the worker's default is 5 s): at the
    /// start of the parallel run dozens of tests create and migrate their databases at once, and on
    /// a slow host a connection once took longer than 5 s to be set up (a test failed on it).
    static let patientConnect =
        "connect_timeout=60" + (environment["AUTH_TEST_DATABASE_OPTIONS"].map { $0.isEmpty ? "" : "&" + $0 } ?? "")

    /// Creates an empty database and returns its URL (with `patientConnect`).
    static func makeDatabase() async throws -> String {
        try await Blocking.run { try makeDatabaseNow() }
    }

    /// `makeDatabase` for code that is not async (the wait holds the calling thread).
    static func makeDatabaseNow() throws -> String {
        guard let server = databaseServer else { throw Skip() }
        let name = uniqueName("auth_test")
        let admin = try PGConnection(conninfo: "\(server)/postgres?\(patientConnect)")
        try admin.execute(unsafeSQL: "CREATE DATABASE \(name)")
        return "\(server)/\(name)?\(patientConnect)"
    }

    /// A migrated database.
    static func makeMigratedDatabase() async throws -> String {
        try await Blocking.run {
            let url = try makeDatabaseNow()
            let connection = try PGConnection(conninfo: url)
            try PGMigrator.migrate(connection, migrations: Migrations.all)
            return url
        }
    }

    /// Topic names unique to one test (`requests.<prefix>_<random>`, …), not yet created.
    static func uniqueTopics(_ prefix: String = "t") -> WorkerConfiguration.Topics {
        let suffix = uniqueName(prefix)
        var topics = WorkerConfiguration.Topics()
        topics.requests = "requests.\(suffix)"
        topics.results = "results.\(suffix)"
        topics.events = "events.\(suffix)"
        topics.notifications = "notifications.\(suffix)"
        topics.deadLetters = "dlq.\(suffix)"
        return topics
    }

    /// Topic names unique to one test, created on the broker.
    static func makeTopics(partitions: Int32 = 2) async throws -> WorkerConfiguration.Topics {
        guard let brokers = kafkaBrokers else { throw Skip() }
        let topics = uniqueTopics()
        let producer = try KafkaProducer(
            configuration: KafkaProducerConfiguration(kafka: KafkaConfiguration(bootstrapServers: [brokers])),
            logger: quietLogger)
        try await producer.createTopics(topics.all, partitions: partitions)
        await producer.shutdown()
        return topics
    }

    /// A worker configuration pointing at the test services, with fast group joins.
    static func workerConfiguration(databaseURL: String, topics: WorkerConfiguration.Topics, group: String? = nil)
        throws -> WorkerSetup
    {
        guard let brokers = kafkaBrokers else { throw Skip() }
        var config = WorkerSetup(worker: WorkerConfiguration(databaseURL: databaseURL), kafka: .forTests(brokers))
        config.topics = topics
        config.kafka.group = group ?? uniqueName("group")
        config.accessTokenFormat = .opaque
        config.processing.batchWait = .milliseconds(50)
        // Far above a drain's few milliseconds: in the parallel run the worker's tasks can wait over
        // a minute for the cooperative pool, and a drain cut short fails the test's `stop()`.
        config.shutdownTimeout = .seconds(120)
        config.healthPort = 0
        return config
    }

    static let quietLogger = Logger(label: "test", level: .warning, handler: InMemoryLogHandler())

    struct Skip: Error {}
}

/// A trait that skips a suite when the real services are not configured.
extension Trait where Self == ConditionTrait {
    static var requiresServices: Self {
        .enabled(
            if: IntegrationEnvironment.isAvailable, "AUTH_TEST_DATABASE_SERVER and AUTH_TEST_KAFKA_BROKERS not set")
    }

    static var requiresDatabase: Self {
        .enabled(if: IntegrationEnvironment.hasDatabase, "AUTH_TEST_DATABASE_SERVER not set")
    }
}

@Suite struct IntegrationEnvironmentCheck {
    /// When the test command promises the real services, their absence must fail, not skip.
    @Test func servicesArePresentWhenRequired() {
        if IntegrationEnvironment.isRequired {
            #expect(
                IntegrationEnvironment.isAvailable, "AUTH_TEST_REQUIRE_INTEGRATION=1 but services are not configured")
        }
    }
}

/// Reads every record of a topic with a throwaway group and keeps them, for assertions.
actor TopicReader {
    private let consumer: KafkaConsumer
    private(set) var messages: [KafkaMessage] = []

    init(topic: String, brokers: String? = IntegrationEnvironment.kafkaBrokers, properties: [String: String] = [:])
        throws
    {
        guard let brokers else { throw IntegrationEnvironment.Skip() }
        var kafka = KafkaConfiguration(bootstrapServers: [brokers])
        kafka.properties = properties
        var config = KafkaConsumerConfiguration(kafka: kafka, groupID: IntegrationEnvironment.uniqueName("reader"))
        config.sessionTimeout = .seconds(6)
        consumer = try KafkaConsumer(configuration: config, topics: [topic], logger: IntegrationEnvironment.quietLogger)
    }

    /// Polls until `predicate` holds over everything read so far, or `timeout` passes.
    @discardableResult
    func waitUntil(timeout: Duration = .seconds(30), _ predicate: ([KafkaMessage]) -> Bool) async throws
        -> [KafkaMessage]
    {
        let deadline = ContinuousClock.now + timeout
        while !predicate(messages), ContinuousClock.now < deadline {
            messages += try await consumer.poll(maxMessages: 500, timeout: .milliseconds(200))
        }
        return messages
    }

    /// Reads for `duration` more, to see whether anything else arrives.
    func drain(for duration: Duration) async throws -> [KafkaMessage] {
        let deadline = ContinuousClock.now + duration
        while ContinuousClock.now < deadline {
            messages += try await consumer.poll(maxMessages: 500, timeout: .milliseconds(200))
        }
        return messages
    }

    func close() async { await consumer.close() }
}

extension KafkaMessage {
    var keyString: String { String(decoding: key ?? [], as: UTF8.self) }
    var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(value))) as? [String: Any] ?? [:] }
    var data: [String: Any] { json["data"] as? [String: Any] ?? [:] }
}

/// What a test worker runs with: the domain's configuration and the Kafka client's settings, each
/// module's own; members of the first read and set as the configuration's own (`config.topics`).
@dynamicMemberLookup
struct WorkerSetup: Sendable {
    var worker: WorkerConfiguration
    var kafka: KafkaSettings

    subscript<T>(dynamicMember path: WritableKeyPath<WorkerConfiguration, T>) -> T {
        get { worker[keyPath: path] }
        set { worker[keyPath: path] = newValue }
    }
}

extension KafkaSettings {
    /// The test services' broker with fast group joins; the local broker holds a fetch for the
    /// whole wait, so the wait is short, as the local setup's.
    static func forTests(_ brokers: String, group: String = IntegrationEnvironment.uniqueName("group")) -> KafkaSettings
    {
        var settings = KafkaSettings(brokers: [brokers])
        settings.group = group
        settings.sessionTimeout = .seconds(6)
        settings.fetchWait = .milliseconds(5)
        return settings
    }
}
