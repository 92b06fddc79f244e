import Foundation
import Kafka
import ServiceKit

/// The worker's Kafka client: the brokers, its group, librdkafka properties (SASL, TLS) and its
/// timings. Its settings are declared here, by the module that talks to Kafka, read from the
/// environment here, and turned into the producer's and the consumer's configuration here.
public struct KafkaSettings: Sendable, Equatable {
    /// Bootstrap servers. Required: no default (the local scripts set the local setup's), so a
    /// forgotten variable never reaches some other broker.
    public var brokers: [String]
    /// The consumer group. Default: `auth-worker`.
    public var group = "auth-worker"
    /// Raw librdkafka properties (SASL, TLS), from the `key=value` file `AUTH_KAFKA_PROPERTIES_FILE`.
    public var properties: [String: String] = [:]
    /// The consumer's session timeout. Default: 10 s.
    public var sessionTimeout: Duration = .seconds(10)
    /// The longest the consumer may go between polls before it leaves the group, and so how long
    /// a rebalance waits for a member to rejoin: a member that died mid-rebalance holds every
    /// partition of the group until then on a broker that does not end its session sooner. The
    /// loop polls at least every 100 ms while it has room for more requests. At least the session
    /// timeout. Default: 300 s (librdkafka's).
    public var maxPollInterval: Duration = .seconds(300)
    /// How long the broker may hold a fetch waiting for data. Apache Kafka (and Redpanda, MSK,
    /// Confluent Cloud) answers a waiting fetch as soon as data arrives, so there this only sets
    /// how often an idle consumer asks again (an idle worker: 10 fetches a second, under half a
    /// percent of a core). A broker that holds every fetch for the whole wait (Tansu, librdkafka's
    /// mock cluster) makes it each request's latency floor: set a few milliseconds there (the
    /// local setup uses 5). Default: 100 ms.
    public var fetchWait: Duration = .milliseconds(100)
    /// How long the producer waits to fill a batch. A batch's records are handed over together
    /// and leave in one request regardless, so waiting only delays answers: measured on the local
    /// setup, 1 ms of linger doubled the time to an acknowledgement. Default: 0.
    public var linger: Duration = .zero

    /// Empty brokers are "not set", refused by `validate()`.
    public init(brokers: [String] = []) {
        self.brokers = brokers
    }

    /// Every setting of the Kafka client, in the reference's order.
    public static let declared: [Setting] = [
        .kafkaBrokers, .kafkaGroup, .kafkaPropertiesFile, .kafkaSessionTimeoutMS, .kafkaMaxPollIntervalMS,
        .kafkaFetchWaitMS, .kafkaLingerMS,
    ]

    /// Reads the Kafka client's settings from environment variables (tests pass a dictionary).
    /// - Throws: `ConfigurationError` naming the first variable that does not parse.
    public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) throws
        -> KafkaSettings
    {
        let reader = EnvironmentReader(environment: environment)
        var settings = KafkaSettings(brokers: reader.list(.kafkaBrokers) ?? [])
        if let group = reader.string(.kafkaGroup) { settings.group = group }
        if let path = reader.string(.kafkaPropertiesFile) { settings.properties = try Self.readProperties(path: path) }
        if let value = try reader.integer(.kafkaSessionTimeoutMS) { settings.sessionTimeout = .milliseconds(value) }
        if let value = try reader.integer(.kafkaMaxPollIntervalMS) { settings.maxPollInterval = .milliseconds(value) }
        if let value = try reader.integer(.kafkaFetchWaitMS) { settings.fetchWait = .milliseconds(value) }
        if let value = try reader.integer(.kafkaLingerMS) { settings.linger = .milliseconds(value) }
        return settings
    }

    /// Throws a `ConfigurationError` naming the setting that cannot work.
    public func validate() throws {
        try validateBrokers()
        guard !group.isEmpty else {
            throw ConfigurationError(variable: Setting.kafkaGroup.name, reason: "must not be empty")
        }
        guard maxPollInterval >= sessionTimeout else {
            throw ConfigurationError(
                variable: Setting.kafkaMaxPollIntervalMS.name, reason: "must be at least AUTH_KAFKA_SESSION_TIMEOUT_MS")
        }
    }

    /// Throws unless `AUTH_KAFKA_BROKERS` is set to host:port pairs.
    public func validateBrokers() throws {
        guard !brokers.isEmpty else {
            throw ConfigurationError(
                variable: Setting.kafkaBrokers.name,
                reason: "is not set: list the brokers as host:port,host:port (scripts/run sets the local setup's)")
        }
        guard brokers.allSatisfy({ $0.contains(":") }) else {
            throw ConfigurationError(variable: Setting.kafkaBrokers.name, reason: "must list host:port pairs")
        }
    }

    /// Producer settings for librdkafka.
    public var producerConfiguration: KafkaProducerConfiguration {
        var kafka = KafkaConfiguration(bootstrapServers: brokers)
        kafka.properties = properties
        var producer = KafkaProducerConfiguration(kafka: kafka)
        producer.linger = linger
        return producer
    }

    /// Consumer settings for librdkafka.
    public var consumerConfiguration: KafkaConsumerConfiguration {
        var kafka = KafkaConfiguration(bootstrapServers: brokers)
        kafka.properties = properties
        var consumer = KafkaConsumerConfiguration(kafka: kafka, groupID: group)
        consumer.sessionTimeout = sessionTimeout
        consumer.maxPollInterval = maxPollInterval
        consumer.fetchWaitMax = fetchWait
        return consumer
    }

    /// Parses a librdkafka properties file: `key=value` lines, `#` comments.
    static func readProperties(path: String) throws -> [String: String] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw ConfigurationError(variable: Setting.kafkaPropertiesFile.name, reason: "cannot read \(path)")
        }
        var properties: [String: String] = [:]
        for line in text.split(whereSeparator: \.isNewline) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            guard let equals = trimmed.firstIndex(of: "=") else {
                throw ConfigurationError(variable: Setting.kafkaPropertiesFile.name, reason: "has a line without '='")
            }
            properties[trimmed[..<equals].trimmingCharacters(in: .whitespaces)] =
                trimmed[trimmed.index(after: equals)...].trimmingCharacters(in: .whitespaces)
        }
        return properties
    }
}

extension Setting {
    public static let kafkaBrokers = Setting(
        "AUTH_KAFKA_BROKERS", .kafka,
        "bootstrap servers, comma-separated",
        default: "none: required (`scripts/run` sets the local setup's; empty counts as unset)")
    public static let kafkaGroup = Setting(
        "AUTH_KAFKA_GROUP", .kafka,
        "consumer group id",
        default: "`auth-worker`")
    public static let kafkaPropertiesFile = Setting(
        "AUTH_KAFKA_PROPERTIES_FILE", .kafka,
        "file of `key=value` librdkafka properties (SASL, TLS, …), passed through",
        default: "none")
    public static let kafkaSessionTimeoutMS = Setting(
        "AUTH_KAFKA_SESSION_TIMEOUT_MS", .kafka,
        "consumer group session timeout",
        default: "`10000`")
    public static let kafkaMaxPollIntervalMS = Setting(
        "AUTH_KAFKA_MAX_POLL_INTERVAL_MS", .kafka,
        "the longest between polls before the consumer leaves its group, and how long a rebalance waits for a member to rejoin (a member that died mid-rebalance can hold the group's partitions that long); at least the session timeout",
        default: "`300000`")
    public static let kafkaFetchWaitMS = Setting(
        "AUTH_KAFKA_FETCH_WAIT_MS", .kafka,
        "how long the broker may hold a fetch open waiting for data (`fetch.wait.max.ms`); Apache Kafka answers early when data arrives, a broker that holds every fetch (the local one) needs a few milliseconds (`scripts/dev-env env` sets `5`)",
        default: "`100`")
    public static let kafkaLingerMS = Setting(
        "AUTH_KAFKA_LINGER_MS", .kafka,
        "how long the producer waits to fill a batch (`linger.ms`); a batch's records leave together regardless",
        default: "`0`")
}
