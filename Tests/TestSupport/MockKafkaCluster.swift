import Kafka
import KafkaMockCluster

/// The worker loop's tests run on librdkafka's mock cluster, as the benchmark's broker does.
typealias MockKafkaCluster = KafkaMockCluster
