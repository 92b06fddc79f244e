import CRdKafka

/// Settings shared by producers and consumers, mapped onto librdkafka properties.
///
/// Typed fields cover what this service tunes; `properties` passes anything else through
/// unchanged (SASL, TLS, debug contexts), and wins over the typed fields.
public struct KafkaConfiguration: Sendable, Equatable {
    /// Bootstrap servers, `host:port`.
    public var bootstrapServers: [String]
    /// Sent to brokers for their logs and quotas. Default: `auth-worker`.
    public var clientID: String = "auth-worker"
    /// Raw librdkafka properties (`security.protocol`, `sasl.mechanisms`, `ssl.ca.location`, …).
    /// Default: none.
    public var properties: [String: String] = [:]

    /// - Parameter bootstrapServers: at least one `host:port`.
    public init(bootstrapServers: [String]) {
        self.bootstrapServers = bootstrapServers
    }

    /// Throws when the configuration cannot work.
    public func validate() throws {
        guard !bootstrapServers.isEmpty, bootstrapServers.allSatisfy({ !$0.isEmpty }) else {
            throw KafkaError(.configuration, reason: "bootstrap servers are empty", isRetriable: false)
        }
    }

    /// Nagle's algorithm holds small writes back for up to 40 ms: off, for an interactive service.
    var commonProperties: [String: String] {
        [
            "bootstrap.servers": bootstrapServers.joined(separator: ","), "client.id": clientID,
            "socket.nagle.disable": "true",
        ]
    }
}

/// Producer settings.
public struct KafkaProducerConfiguration: Sendable, Equatable {
    /// Where and who.
    public var kafka: KafkaConfiguration
    /// Exactly-once per partition within a producer session (no duplicates from internal retries).
    /// Default: true.
    public var idempotent: Bool = true
    /// How long librdkafka waits to fill a batch. Records handed over together are batched
    /// regardless; this only delays a lone record. Default: 1 ms.
    public var linger: Duration = .milliseconds(1)
    /// How long a message may wait for delivery before it fails. Default: 30 s.
    public var deliveryTimeout: Duration = .seconds(30)
    /// `none`, `gzip`, `snappy`, `lz4` or `zstd`. Default: `lz4`.
    public var compression: String = "lz4"
    /// Let the broker create a topic the producer names (when the broker allows it). Default:
    /// false: topics are created on purpose, and asking whether one exists must not create it.
    public var allowAutoCreateTopics = false

    public init(kafka: KafkaConfiguration) {
        self.kafka = kafka
    }

    /// The librdkafka properties this configuration sets.
    /// Throws `KafkaError.configuration` for what librdkafka refuses, connecting to nothing.
    public func check() throws {
        try kafka.validate()
        try KafkaClientFactory.checkConf(librdkafkaProperties)
    }

    public var librdkafkaProperties: [String: String] {
        var result = kafka.commonProperties
        result["enable.idempotence"] = idempotent ? "true" : "false"
        result["acks"] = "all"
        result["linger.ms"] = String(linger.milliseconds)
        result["message.timeout.ms"] = String(deliveryTimeout.milliseconds)
        result["compression.codec"] = compression
        result["allow.auto.create.topics"] = allowAutoCreateTopics ? "true" : "false"
        for (key, value) in kafka.properties { result[key] = value }
        return result
    }
}

/// Group consumer settings.
public struct KafkaConsumerConfiguration: Sendable, Equatable {
    /// Where and who.
    public var kafka: KafkaConfiguration
    /// The consumer group.
    public var groupID: String
    /// A member that sends no heartbeat for this long is removed from the group. Default: 10 s.
    public var sessionTimeout: Duration = .seconds(10)
    /// A member that does not poll for this long leaves the group. Default: 5 min.
    public var maxPollInterval: Duration = .seconds(300)
    /// Where a group without committed offsets starts: `earliest` or `latest`. Default: `earliest`,
    /// so requests published before the first worker started are still answered.
    public var autoOffsetReset: String = "earliest"
    /// How often stored offsets are committed in the background. Default: 1 s.
    public var autoCommitInterval: Duration = .seconds(1)
    /// How long the broker may hold a fetch open waiting for data. A broker that does not answer a
    /// waiting fetch early when data arrives (Tansu) adds up to this much to every message's
    /// latency; a small value costs more fetch requests while idle. Default: 100 ms.
    public var fetchWaitMax: Duration = .milliseconds(100)

    public init(kafka: KafkaConfiguration, groupID: String) {
        self.kafka = kafka
        self.groupID = groupID
    }

    /// The librdkafka properties this configuration sets.
    ///
    /// Offsets are stored by the application only after a message's outcome is durable
    /// (`enable.auto.offset.store=false`) and committed in the background from that store.
    /// Throws `KafkaError.configuration` for what librdkafka refuses, connecting to nothing.
    public func check() throws {
        try kafka.validate()
        try KafkaClientFactory.checkConf(librdkafkaProperties)
    }

    public var librdkafkaProperties: [String: String] {
        var result = kafka.commonProperties
        result["group.id"] = groupID
        result["session.timeout.ms"] = String(sessionTimeout.milliseconds)
        result["max.poll.interval.ms"] = String(maxPollInterval.milliseconds)
        result["auto.offset.reset"] = autoOffsetReset
        result["enable.auto.commit"] = "true"
        result["auto.commit.interval.ms"] = String(autoCommitInterval.milliseconds)
        result["enable.auto.offset.store"] = "false"
        result["enable.partition.eof"] = "false"
        result["fetch.wait.max.ms"] = String(fetchWaitMax.milliseconds)
        for (key, value) in kafka.properties { result[key] = value }
        return result
    }
}

extension Duration {
    /// Whole milliseconds, rounded down.
    var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}

/// The librdkafka this process runs on, as linked at run time (`auth-worker version`).
public enum KafkaLibrary {
    public static var version: String { String(cString: rd_kafka_version_str()) }
}
