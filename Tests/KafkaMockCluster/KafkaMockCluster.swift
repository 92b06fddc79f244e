import CRdKafka
import Foundation

/// librdkafka's mock cluster (`rdkafka_mock.h`): brokers on loopback ports inside this process,
/// with topics, consumer groups and committed offsets. Other processes reach it through
/// `bootstrapServers` like any cluster, with no proxy: the benchmark's broker (`auth-bench
/// broker`) and the worker loop's unit tests run on it. It keeps data in memory and trims a
/// partition at about 5 MB.
public final class KafkaMockCluster: @unchecked Sendable {
    // @unchecked: the handles are used only by init, `createTopic` (thread-safe in librdkafka)
    // and deinit.
    private let handle: OpaquePointer
    private let cluster: OpaquePointer
    /// `host:port` of each mock broker, comma-separated.
    public let bootstrapServers: String

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// - Parameter brokers: how many brokers the cluster has.
    public init(brokers: Int32 = 1) throws {
        guard let conf = rd_kafka_conf_new() else { throw Failure(description: "rd_kafka_conf_new failed") }
        var errorBuffer = [CChar](repeating: 0, count: 512)
        // The cluster lives in a client of its own; this one only hosts it. rd_kafka_new frees the
        // conf only on success.
        guard rd_kafka_conf_set(conf, "log_level", "3", &errorBuffer, errorBuffer.count) == RD_KAFKA_CONF_OK,
            let client = rd_kafka_new(RD_KAFKA_PRODUCER, conf, &errorBuffer, errorBuffer.count)
        else {
            rd_kafka_conf_destroy(conf)
            let reason = String(decoding: errorBuffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            throw Failure(description: "no host client: \(reason)")
        }
        guard let cluster = rd_kafka_mock_cluster_new(client, brokers) else {
            rd_kafka_destroy(client)
            throw Failure(description: "rd_kafka_mock_cluster_new failed")
        }
        handle = client
        self.cluster = cluster
        bootstrapServers = String(cString: rd_kafka_mock_cluster_bootstraps(cluster))
    }

    /// Creates a topic with `partitions` partitions (replication factor 1).
    public func createTopic(_ name: String, partitions: Int32) throws {
        let error = rd_kafka_mock_topic_create(cluster, name, partitions, 1)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw Failure(description: "creating \(name): \(String(cString: rd_kafka_err2str(error)))")
        }
    }

    /// Disconnects every broker and refuses new connections (`up` is false), or accepts them
    /// again; the data and the groups' committed offsets stay.
    public func setReachable(_ up: Bool) throws {
        let error = up ? rd_kafka_mock_broker_set_up(cluster, -1) : rd_kafka_mock_broker_set_down(cluster, -1)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
            let reason = String(cString: rd_kafka_err2str(error))
            throw Failure(description: "setting the brokers \(up ? "up" : "down"): \(reason)")
        }
    }

    deinit {
        rd_kafka_mock_cluster_destroy(cluster)
        rd_kafka_destroy(handle)
    }
}
