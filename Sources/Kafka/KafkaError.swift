import CRdKafka

/// An error from the Kafka client, saying whether trying again may succeed.
public struct KafkaError: Error, CustomStringConvertible, Equatable {
    /// What went wrong, as a growable set of codes.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Kind: Hashable, Sendable {
            case configuration, clientCreation, subscription, produce, delivery, poll, commit, admin, closed, timedOut
        }

        private let kind: Kind

        public static let configuration = Code(kind: .configuration)
        public static let clientCreation = Code(kind: .clientCreation)
        public static let subscription = Code(kind: .subscription)
        public static let produce = Code(kind: .produce)
        public static let delivery = Code(kind: .delivery)
        public static let poll = Code(kind: .poll)
        public static let commit = Code(kind: .commit)
        public static let admin = Code(kind: .admin)
        public static let closed = Code(kind: .closed)
        public static let timedOut = Code(kind: .timedOut)

        public var description: String { "\(kind)" }
    }

    /// The category of failure.
    public var code: Code
    /// librdkafka's error name and text, or ours.
    public var reason: String
    /// librdkafka's numeric error, when one was given.
    public var librdkafkaError: Int32?
    /// True when the same operation may succeed later (broker down, queue full, timeout).
    public var isRetriable: Bool
    public var file: String
    public var line: Int

    public init(
        _ code: Code, reason: String, librdkafkaError: Int32? = nil, isRetriable: Bool,
        file: String = #fileID, line: Int = #line
    ) {
        self.code = code
        self.reason = reason
        self.librdkafkaError = librdkafkaError
        self.isRetriable = isRetriable
        self.file = file
        self.line = line
    }

    /// Wraps a librdkafka response error.
    init(_ code: Code, error: rd_kafka_resp_err_t, file: String = #fileID, line: Int = #line) {
        let name = String(cString: rd_kafka_err2name(error))
        let text = String(cString: rd_kafka_err2str(error))
        self.init(
            code, reason: "\(name): \(text)", librdkafkaError: error.rawValue,
            isRetriable: Self.isTransient(error), file: file, line: line)
    }

    static func isTransient(_ error: rd_kafka_resp_err_t) -> Bool {
        switch error {
        case RD_KAFKA_RESP_ERR__QUEUE_FULL, RD_KAFKA_RESP_ERR__TRANSPORT, RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN,
            RD_KAFKA_RESP_ERR__TIMED_OUT, RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
            RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION, RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
            RD_KAFKA_RESP_ERR_NOT_COORDINATOR, RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
            RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS, RD_KAFKA_RESP_ERR__WAIT_COORD, RD_KAFKA_RESP_ERR__RESOLVE,
            RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
            return true
        default:
            return false
        }
    }

    public var description: String { "Kafka \(code): \(reason)" }

    public static func == (lhs: KafkaError, rhs: KafkaError) -> Bool { lhs.code == rhs.code }
}
