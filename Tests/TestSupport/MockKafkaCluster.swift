import CRdKafka
import Foundation

/// librdkafka's in-process mock cluster: brokers on loopback ports inside this process, with
/// topics, consumer groups and committed offsets, so the worker loop can be tested without a
/// broker. Clients reach it through `bootstrapServers` like any cluster.
final class MockKafkaCluster: @unchecked Sendable {
    // @unchecked: the handles are only used by init, `createTopic` (thread-safe in librdkafka)
    // and deinit.
    private let handle: OpaquePointer
    private let cluster: OpaquePointer
    let bootstrapServers: String

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    init(brokers: Int32 = 1) throws {
        guard let conf = rd_kafka_conf_new() else { throw Failure(description: "rd_kafka_conf_new failed") }
        var errorBuffer = [CChar](repeating: 0, count: 512)
        // The mock cluster lives in a client of its own; this one only hosts it.
        guard rd_kafka_conf_set(conf, "log_level", "3", &errorBuffer, errorBuffer.count) == RD_KAFKA_CONF_OK,
            let client = rd_kafka_new(RD_KAFKA_PRODUCER, conf, &errorBuffer, errorBuffer.count)
        else {
            rd_kafka_conf_destroy(conf)
            throw Failure(
                description:
                    "no host client: \(String(decoding: errorBuffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))"
            )
        }
        guard let cluster = rd_kafka_mock_cluster_new(client, brokers) else {
            rd_kafka_destroy(client)
            throw Failure(description: "rd_kafka_mock_cluster_new failed")
        }
        handle = client
        self.cluster = cluster
        bootstrapServers = String(cString: rd_kafka_mock_cluster_bootstraps(cluster))
    }

    func createTopic(_ name: String, partitions: Int32) throws {
        let error = rd_kafka_mock_topic_create(cluster, name, partitions, 1)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw Failure(description: "creating \(name): \(String(cString: rd_kafka_err2str(error)))")
        }
    }

    deinit {
        rd_kafka_mock_cluster_destroy(cluster)
        rd_kafka_destroy(handle)
    }
}
