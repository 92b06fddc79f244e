import CRdKafka

/// Topic administration, borrowing a producer's connection.
public enum KafkaAdmin {
    /// Creates topics that do not exist yet; existing ones are left as they are.
    /// - Throws: `KafkaError` `.admin` for any other failure.
    public static func createTopics(
        _ names: [String], partitions: Int32, using producer: KafkaProducer, timeout: Duration = .seconds(10)
    ) throws {
        try producer.withHandle { client in
            guard let queue = rd_kafka_queue_new(client) else {
                throw KafkaError(.admin, reason: "rd_kafka_queue_new failed", isRetriable: false)
            }
            defer { rd_kafka_queue_destroy(queue) }
            var errorBuffer = [CChar](repeating: 0, count: 512)
            var topics: [OpaquePointer?] = []
            defer { topics.forEach { rd_kafka_NewTopic_destroy($0) } }
            for name in names {
                guard let topic = rd_kafka_NewTopic_new(name, partitions, -1, &errorBuffer, errorBuffer.count) else {
                    throw KafkaError(.admin, reason: KafkaClientFactory.decodeCString(errorBuffer), isRetriable: false)
                }
                topics.append(topic)
            }
            rd_kafka_CreateTopics(client, &topics, topics.count, nil, queue)
            guard let event = rd_kafka_queue_poll(queue, Int32(clamping: timeout.milliseconds)) else {
                throw KafkaError(.timedOut, reason: "CreateTopics timed out", isRetriable: true)
            }
            defer { rd_kafka_event_destroy(event) }
            let eventError = rd_kafka_event_error(event)
            if eventError != RD_KAFKA_RESP_ERR_NO_ERROR {
                throw KafkaError(.admin, error: eventError)
            }
            guard let result = rd_kafka_event_CreateTopics_result(event) else { return }
            var count = 0
            guard let results = rd_kafka_CreateTopics_result_topics(result, &count) else { return }
            for index in 0..<count {
                let error = rd_kafka_topic_result_error(results[index])
                if error != RD_KAFKA_RESP_ERR_NO_ERROR, error != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS {
                    throw KafkaError(.admin, error: error)
                }
            }
        }
    }
}
