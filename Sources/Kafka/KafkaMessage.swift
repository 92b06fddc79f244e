/// A record header: a name and raw bytes (nil for a header with no value).
public struct KafkaHeader: Sendable, Equatable {
    public var key: String
    public var value: [UInt8]?

    public init(key: String, value: [UInt8]?) {
        self.key = key
        self.value = value
    }

    /// A header whose value is the UTF-8 bytes of `value`.
    public init(key: String, string value: String) {
        self.init(key: key, value: Array(value.utf8))
    }
}

extension Array where Element == KafkaHeader {
    /// The value of the first header named `key`, decoded as UTF-8.
    public func string(_ key: String) -> String? {
        guard let header = first(where: { $0.key == key }), let value = header.value else { return nil }
        return String(decoding: value, as: UTF8.self)
    }
}

/// A record to produce.
public struct ProducerRecord: Sendable, Equatable {
    public var topic: String
    /// The partition, or nil to let the partitioner choose by key.
    public var partition: Int32?
    public var key: [UInt8]?
    public var value: [UInt8]
    public var headers: [KafkaHeader]

    public init(topic: String, partition: Int32? = nil, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader] = []) {
        self.topic = topic
        self.partition = partition
        self.key = key
        self.value = value
        self.headers = headers
    }
}

/// Where a produced record landed.
public struct DeliveryReport: Sendable, Equatable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
}

/// A consumed record, copied out of librdkafka.
public struct KafkaMessage: Sendable, Equatable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    public var key: [UInt8]?
    public var value: [UInt8]
    public var headers: [KafkaHeader]
    /// Milliseconds since the epoch, when the broker gave one.
    public var timestamp: Int64?
    /// Which assignment of its partition this member read the message under: it grows each time
    /// the partition is assigned or revoked, so work on a message of an assignment that is over
    /// (its partition revoked since, perhaps assigned again) can be told apart.
    public var assignment: Int

    public init(
        topic: String, partition: Int32, offset: Int64, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader],
        timestamp: Int64?, assignment: Int = 0
    ) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.headers = headers
        self.timestamp = timestamp
        self.assignment = assignment
    }
}

/// A partition of a topic.
public struct TopicPartition: Hashable, Sendable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32

    public init(topic: String, partition: Int32) {
        self.topic = topic
        self.partition = partition
    }

    public var description: String { "\(topic)/\(partition)" }
}

extension KafkaMessage {
    /// The partition the message was read from.
    public var topicPartition: TopicPartition { TopicPartition(topic: topic, partition: partition) }
}
