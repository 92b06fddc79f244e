import AuthDomain
import Kafka

/// The Kafka clients' settings, from the service configuration: only the worker talks to Kafka.
extension WorkerConfiguration {
    /// Producer settings for librdkafka.
    public var producerConfiguration: KafkaProducerConfiguration {
        var kafka = KafkaConfiguration(bootstrapServers: kafkaBrokers)
        kafka.properties = kafkaProperties
        var producer = KafkaProducerConfiguration(kafka: kafka)
        producer.linger = processing.kafkaLinger
        return producer
    }

    /// Consumer settings for librdkafka.
    public var consumerConfiguration: KafkaConsumerConfiguration {
        var kafka = KafkaConfiguration(bootstrapServers: kafkaBrokers)
        kafka.properties = kafkaProperties
        var consumer = KafkaConsumerConfiguration(kafka: kafka, groupID: kafkaGroup)
        consumer.sessionTimeout = processing.kafkaSessionTimeout
        consumer.maxPollInterval = processing.kafkaMaxPollInterval
        consumer.fetchWaitMax = processing.kafkaFetchWait
        return consumer
    }
}
