import CRdKafka

extension KafkaProducer {
    /// Creates the topics that do not exist yet, with the cluster's default replication;
    /// existing ones are left as they are (`auth-worker topics create`). Runs on the producer's
    /// metadata thread, off the cooperative pool.
    /// - Throws: `KafkaError` `.admin` for a refusal other than "already exists", `.timedOut`
    ///   when the cluster did not answer within `timeout`.
    public func createTopics(_ names: [String], partitions: Int32, timeout: Duration = .seconds(10)) async throws {
        let failure = await onMetadataThread(
            closed: KafkaError(.closed, reason: "producer is closed", isRetriable: false)
        ) { client in
            Self.createTopics(names, partitions: partitions, timeout: timeout, client: client)
        }
        if let failure { throw failure }
    }

    /// The blocking part: a CreateTopics request and the wait for its result.
    private static func createTopics(_ names: [String], partitions: Int32, timeout: Duration, client: OpaquePointer)
        -> KafkaError?
    {
        guard let queue = rd_kafka_queue_new(client) else {
            return KafkaError(.admin, reason: "rd_kafka_queue_new failed", isRetriable: false)
        }
        defer { rd_kafka_queue_destroy(queue) }
        var errorBuffer = [CChar](repeating: 0, count: 512)
        var topics: [OpaquePointer?] = []
        defer { topics.forEach { rd_kafka_NewTopic_destroy($0) } }
        for name in names {
            guard let topic = rd_kafka_NewTopic_new(name, partitions, -1, &errorBuffer, errorBuffer.count) else {
                return KafkaError(.admin, reason: KafkaClientFactory.decodeCString(errorBuffer), isRetriable: false)
            }
            topics.append(topic)
        }
        rd_kafka_CreateTopics(client, &topics, topics.count, nil, queue)
        guard let event = rd_kafka_queue_poll(queue, Int32(clamping: timeout.milliseconds)) else {
            return KafkaError(.timedOut, reason: "CreateTopics timed out", isRetriable: true)
        }
        defer { rd_kafka_event_destroy(event) }
        let eventError = rd_kafka_event_error(event)
        if eventError != RD_KAFKA_RESP_ERR_NO_ERROR { return KafkaError(.admin, error: eventError) }
        guard let result = rd_kafka_event_CreateTopics_result(event) else { return nil }
        var count = 0
        guard let results = rd_kafka_CreateTopics_result_topics(result, &count) else { return nil }
        for index in 0..<count {
            let error = rd_kafka_topic_result_error(results[index])
            if error != RD_KAFKA_RESP_ERR_NO_ERROR, error != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS {
                return KafkaError(.admin, error: error)
            }
        }
        return nil
    }
}
