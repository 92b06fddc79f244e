import CRdKafka
import ServiceKit
import Synchronization

/// A Kafka group consumer whose offsets are stored by the application after processing.
///
/// An actor running on its own thread: `rd_kafka_consumer_poll` blocks, and librdkafka calls the
/// rebalance callback on the thread that polls. Messages are copied out as `Sendable` values.
/// Offsets are stored only through `storeOffsets(_:)`, and committed in the background and on close,
/// so a message whose outcome is not durable is redelivered after a crash or rebalance.
public actor KafkaConsumer {
    private let executor: ThreadExecutor
    private let handle: Handle
    private var pointer: OpaquePointer { handle.pointer }
    private let context: ConsumerContext
    private let waker: Waker
    private var closed = false
    /// Whether offsets may still be stored: `storeOffsets` runs on its caller's thread, and
    /// `close` shuts this before the client goes.
    private let storing = Mutex(true)

    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    /// The consumer's thread, as a task executor. A loop that runs there
    /// (`withTaskExecutorPreference`) polls without a hop to this thread and back: a poll that
    /// finds nothing waiting costs no wake-up of another thread.
    public nonisolated var taskExecutor: any TaskExecutor { executor }

    /// Creates the client and subscribes to `topics`.
    /// - Throws: `KafkaError` `.configuration`, `.clientCreation` or `.subscription`.
    public init(configuration: KafkaConsumerConfiguration, topics: [String], logger: Logger) throws {
        guard !topics.isEmpty else {
            throw KafkaError(.subscription, reason: "no topics to subscribe to", isRetriable: false)
        }
        try self.init(configuration: configuration, logger: logger)
        guard let list = rd_kafka_topic_partition_list_new(Int32(topics.count)) else {
            throw KafkaError(.subscription, reason: "out of memory", isRetriable: false)
        }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for topic in topics {
            rd_kafka_topic_partition_list_add(list, topic, rdkafka_shim_partition_unassigned())
        }
        let error = rd_kafka_subscribe(handle.pointer, list)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(.subscription, error: error) }
    }

    /// Creates the client without subscribing: partitions are then assigned by the application
    /// (`assignAtEnd`), outside any group's rebalancing.
    /// - Throws: `KafkaError` `.configuration` or `.clientCreation`.
    public init(configuration: KafkaConsumerConfiguration, logger: Logger) throws {
        try configuration.kafka.validate()
        let context = ConsumerContext(logger: logger)
        let conf = try KafkaClientFactory.makeConf(configuration.librdkafkaProperties)
        rd_kafka_conf_set_opaque(conf, Unmanaged.passUnretained(context).toOpaque())
        rd_kafka_conf_set_rebalance_cb(conf) { client, error, partitions, opaque in
            guard let client, let opaque else { return }
            Unmanaged<ConsumerContext>.fromOpaque(opaque).takeUnretainedValue()
                .rebalance(client: client, error: error, partitions: partitions)
        }
        rd_kafka_conf_set_log_cb(conf) { client, level, facility, text in
            guard let client, let opaque = rd_kafka_opaque(client) else { return }
            let context = Unmanaged<ConsumerContext>.fromOpaque(opaque).takeUnretainedValue()
            KafkaLog.forward(context.logger, level: level, facility: facility, text: text)
        }
        let pointer = try KafkaClientFactory.makeClient(RD_KAFKA_CONSUMER, conf: conf)
        // Route the main queue into the consumer queue, so one poll serves both.
        rd_kafka_poll_set_consumer(pointer)
        self.handle = Handle(pointer)
        self.context = context
        self.waker = Waker(queue: rd_kafka_queue_get_consumer(pointer))
        self.executor = ThreadExecutor(name: "kafka-consumer")
    }

    /// Takes every partition of `topic`, starting at its current end: what is produced from now
    /// on is read, nothing before (a reply topic's reader: each reader sees every partition).
    /// Blocks this consumer's own thread while the brokers answer.
    /// - Throws: `KafkaError` `.subscription` when the topic is unknown or no broker answers in `timeout`.
    public func assignAtEnd(_ topic: String, timeout: Duration) throws {
        guard !closed else { throw KafkaError(.closed, reason: "consumer is closed", isRetriable: false) }
        let milliseconds = Int32(clamping: timeout.milliseconds)
        guard let topicHandle = rd_kafka_topic_new(pointer, topic, nil) else {
            throw KafkaError(.subscription, reason: "cannot name topic \(topic)", isRetriable: false)
        }
        var metadata: UnsafePointer<rd_kafka_metadata>?
        let error = rd_kafka_metadata(pointer, 0, topicHandle, &metadata, milliseconds)
        rd_kafka_topic_destroy(topicHandle)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata else {
            throw KafkaError(.subscription, error: error)
        }
        defer { rd_kafka_metadata_destroy(metadata) }
        var partitions: [Int32] = []
        for index in 0..<Int(metadata.pointee.topic_cnt) {
            let entry = metadata.pointee.topics[index]
            guard String(cString: entry.topic) == topic, entry.err == RD_KAFKA_RESP_ERR_NO_ERROR else { continue }
            partitions = (0..<Int(entry.partition_cnt)).map { entry.partitions[$0].id }
        }
        guard !partitions.isEmpty else {
            throw KafkaError(.subscription, reason: "topic \(topic) does not exist", isRetriable: false)
        }
        guard let list = rd_kafka_topic_partition_list_new(Int32(partitions.count)) else {
            throw KafkaError(.subscription, reason: "out of memory", isRetriable: false)
        }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for partition in partitions {
            var low: Int64 = 0
            var high: Int64 = 0
            let queried = rd_kafka_query_watermark_offsets(pointer, topic, partition, &low, &high, milliseconds)
            guard queried == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(.subscription, error: queried) }
            rd_kafka_topic_partition_list_add(list, topic, partition)?.pointee.offset = high
        }
        let assigned = rd_kafka_assign(pointer, list)
        guard assigned == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(.subscription, error: assigned) }
    }

    deinit {
        waker.invalidate()
        if handle.beginClosing() {
            rd_kafka_consumer_close(handle.pointer)
            rd_kafka_destroy(handle.pointer)
        }
        executor.shutdown()
    }

    /// Makes a `poll` that is waiting return now (with what it has, perhaps nothing), or the next
    /// one return at once if none is waiting. For work finished elsewhere that the poller should
    /// see without waiting out its timeout. Callable from any thread; does nothing once closed.
    public nonisolated func wake() { waker.wake() }

    /// Calls `handler` (on a librdkafka thread) whenever something arrives on the consumer's
    /// queue while it is empty: a message, or an event a `poll` must serve (a rebalance, an
    /// error). For a loop that waits on work of its own and polls only when there is something to
    /// take: after a `poll` that emptied the queue, the next arrival calls `handler` again; after
    /// one that stopped at `maxMessages`, it may not. The handler must be quick and must not call
    /// this consumer. Replaces the previous handler; nil removes it.
    public nonisolated func onArrival(_ handler: (@Sendable () -> Void)?) { waker.onArrival(handler) }

    /// Waits up to `timeout` for a first message, then takes whatever else is already fetched, up to
    /// `maxMessages`.
    /// - Returns: the messages in partition order; empty when none arrived in time.
    /// - Throws: `KafkaError` `.poll` for fatal consumer errors, `.closed` after `close()`.
    public func poll(maxMessages: Int, timeout: Duration) throws -> [KafkaMessage] {
        guard !closed else { throw KafkaError(.closed, reason: "consumer is closed", isRetriable: false) }
        var batch: [KafkaMessage] = []
        var wait = Int32(clamping: timeout.milliseconds)
        while batch.count < maxMessages {
            guard let message = rd_kafka_consumer_poll(pointer, wait) else { break }
            defer { rd_kafka_message_destroy(message) }
            wait = 0
            let error = message.pointee.err
            if error != RD_KAFKA_RESP_ERR_NO_ERROR {
                try handlePollError(error, message: message)
                continue
            }
            batch.append(copy(message))
        }
        return batch
    }

    private func handlePollError(_ error: rd_kafka_resp_err_t, message: UnsafeMutablePointer<rd_kafka_message_t>) throws
    {
        if error == RD_KAFKA_RESP_ERR__PARTITION_EOF { return }
        var reason = String(cString: rd_kafka_err2str(error))
        if let payload = message.pointee.payload, message.pointee.len > 0 {
            reason = String(decoding: UnsafeRawBufferPointer(start: payload, count: message.pointee.len), as: UTF8.self)
        }
        if error == RD_KAFKA_RESP_ERR__FATAL {
            throw KafkaError(.poll, reason: reason, librdkafkaError: error.rawValue, isRetriable: false)
        }
        // Everything else (broker down, unknown topic) is reported and retried by librdkafka itself.
        context.logger.warning(
            "Consumer error",
            metadata: ["kafka.error": String(cString: rd_kafka_err2name(error)), "kafka.reason": reason])
    }

    private func copy(_ message: UnsafeMutablePointer<rd_kafka_message_t>) -> KafkaMessage {
        let value =
            message.pointee.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: message.pointee.len)) } ?? []
        let key = message.pointee.key.map { Array(UnsafeRawBufferPointer(start: $0, count: message.pointee.key_len)) }
        let topic = message.pointee.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? ""
        var timestampType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        let timestamp = rd_kafka_message_timestamp(message, &timestampType)
        return KafkaMessage(
            topic: topic, partition: message.pointee.partition, offset: message.pointee.offset, key: key, value: value,
            headers: KafkaClientFactory.headers(of: message),
            timestamp: timestampType == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? nil : timestamp,
            assignment: context.assignment(of: TopicPartition(topic: topic, partition: message.pointee.partition)))
    }

    /// Marks messages as processed: their offsets (plus one) are committed in the background and on close.
    ///
    /// Offsets of partitions this member no longer owns are skipped: the new owner replays them.
    public nonisolated func storeOffsets(_ messages: [KafkaMessage]) {
        var next: [TopicPartition: Int64] = [:]
        for message in messages {
            let partition = TopicPartition(topic: message.topic, partition: message.partition)
            next[partition] = max(next[partition] ?? 0, message.offset + 1)
        }
        storeOffsets(next)
    }

    /// Records, per partition, the offset of the next message to consume: everything before it is
    /// processed. Committed in the background and on close.
    ///
    /// Runs on the caller's thread (librdkafka's offset store is thread-safe), not the consumer's:
    /// a finished batch costs no hop there. Offsets of partitions this member no longer owns are
    /// skipped: the new owner replays them. Does nothing once `close` has begun.
    public nonisolated func storeOffsets(_ next: [TopicPartition: Int64]) {
        guard !next.isEmpty else { return }
        storing.withLock { open in
            guard open else { return }
            store(next)
        }
    }

    private nonisolated func store(_ next: [TopicPartition: Int64]) {
        guard let list = rd_kafka_topic_partition_list_new(Int32(next.count)) else { return }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for (partition, offset) in next {
            rd_kafka_topic_partition_list_add(list, partition.topic, partition.partition)?.pointee.offset = offset
        }
        let error = rd_kafka_offsets_store(handle.pointer, list)
        if error == RD_KAFKA_RESP_ERR_NO_ERROR {
            context.stored(next)
        } else {
            context.logger.info(
                "Offsets not stored (partition revoked?)",
                metadata: ["kafka.error": String(cString: rd_kafka_err2name(error))])
        }
    }

    /// The partitions taken from this member by rebalances since the last call, each with the
    /// `KafkaMessage.assignment` it ended at: messages read under an earlier assignment are no
    /// longer this member's to commit (their partition's next owner replays them); messages with a
    /// later one come from the partition being assigned again, perhaps in the same poll.
    public nonisolated func takeRevokedPartitions() -> [TopicPartition: Int] {
        context.takeRevoked()
    }

    /// Per assigned partition, how many messages lie between this member's position (the next
    /// message it will be handed) and the partition's end, from the watermarks of the last fetch
    /// (no request to the broker). Partitions whose position or end is not known yet are left out.
    public func lag() -> [TopicPartition: Int64] {
        guard !closed else { return [:] }
        var list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
        guard rd_kafka_assignment(pointer, &list) == RD_KAFKA_RESP_ERR_NO_ERROR, let list else { return [:] }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        _ = rd_kafka_position(pointer, list)
        var lag: [TopicPartition: Int64] = [:]
        for index in 0..<Int(list.pointee.cnt) {
            let element = list.pointee.elems[index]
            guard let topic = element.topic else { continue }
            var low: Int64 = -1
            var high: Int64 = -1
            guard
                rd_kafka_get_watermark_offsets(pointer, topic, element.partition, &low, &high)
                    == RD_KAFKA_RESP_ERR_NO_ERROR,
                high >= 0
            else { continue }
            // No position yet (nothing consumed since assignment): count from the log's start.
            let position = element.offset >= 0 ? element.offset : max(low, 0)
            lag[TopicPartition(topic: String(cString: topic), partition: element.partition)] = max(high - position, 0)
        }
        return lag
    }

    /// Commits stored offsets, leaves the group and destroys the client. Idempotent.
    public func close() {
        guard !closed, handle.beginClosing() else { return }
        closed = true
        storing.withLock { $0 = false }
        waker.invalidate()
        let error = rd_kafka_consumer_close(pointer)
        if error != RD_KAFKA_RESP_ERR_NO_ERROR {
            context.logger.warning(
                "Consumer close reported an error", metadata: ["kafka.error": String(cString: rd_kafka_err2name(error))]
            )
        }
        rd_kafka_destroy(pointer)
    }
}

/// The consumer queue's handle, for `rd_kafka_queue_yield` from any thread. The handle is
/// destroyed before the client, under the lock, so a late `wake` never touches a freed queue.
final class Waker: Sendable {
    private struct Queue: @unchecked Sendable {
        let pointer: OpaquePointer
    }

    /// What librdkafka's queue event calls: kept for the waker's life, so a callback already
    /// under way when it is removed still finds it.
    final class Arrival: Sendable {
        /// The handler in a box of its own: a closure read out of a `Mutex` through `inout` is
        /// re-thunked on the way in and out, a layer more each call (found by `perf`: the chain
        /// grew with every message).
        final class Handler: Sendable {
            let call: @Sendable () -> Void

            init(_ call: @escaping @Sendable () -> Void) { self.call = call }
        }

        let handler = Mutex<Handler?>(nil)

        func call() {
            let current = handler.withLock { $0 }
            current?.call()
        }
    }

    private let queue: Mutex<Queue?>
    private let arrival = Arrival()

    func onArrival(_ handler: (@Sendable () -> Void)?) {
        let boxed = handler.map(Arrival.Handler.init)
        arrival.handler.withLock { $0 = boxed }
        queue.withLock { queue in
            guard let queue else { return }
            if handler == nil {
                rd_kafka_queue_cb_event_enable(queue.pointer, nil, nil)
            } else {
                rd_kafka_queue_cb_event_enable(
                    queue.pointer,
                    { _, opaque in
                        guard let opaque else { return }
                        Unmanaged<Arrival>.fromOpaque(opaque).takeUnretainedValue().call()
                    }, Unmanaged.passUnretained(arrival).toOpaque())
            }
        }
    }

    init(queue: OpaquePointer?) {
        self.queue = Mutex(queue.map(Queue.init))
    }

    func wake() {
        queue.withLock { queue in
            if let queue { rd_kafka_queue_yield(queue.pointer) }
        }
    }

    func invalidate() {
        arrival.handler.withLock { $0 = nil }
        queue.withLock { queue in
            if let queue {
                rd_kafka_queue_cb_event_enable(queue.pointer, nil, nil)
                rd_kafka_queue_destroy(queue.pointer)
            }
            queue = nil
        }
    }
}

/// What librdkafka's callbacks need: the logger, and the rebalance handling.
final class ConsumerContext: Sendable {
    let logger: Logger
    private let revoked = Mutex<[TopicPartition: Int]>([:])
    /// Per partition, how many times it was assigned or revoked: stamped on each message read.
    private let assignments = Mutex<[TopicPartition: Int]>([:])
    /// The positions last stored per partition, for the log line of a revocation.
    private let positions = Mutex<[TopicPartition: Int64]>([:])

    init(logger: Logger) { self.logger = logger }

    func stored(_ next: [TopicPartition: Int64]) {
        positions.withLock { $0.merge(next) { $1 } }
    }

    func takeRevoked() -> [TopicPartition: Int] {
        revoked.withLock { list in
            defer { list = [:] }
            return list
        }
    }

    func assignment(of partition: TopicPartition) -> Int {
        assignments.withLock { $0[partition] ?? 0 }
    }

    /// Starts a new assignment of each partition; returns the new numbers.
    private func nextAssignment(_ partitions: [TopicPartition]) -> [TopicPartition: Int] {
        assignments.withLock { assignments in
            var numbers: [TopicPartition: Int] = [:]
            for partition in partitions {
                let number = (assignments[partition] ?? 0) + 1
                assignments[partition] = number
                numbers[partition] = number
            }
            return numbers
        }
    }

    /// Runs on the polling thread. On revocation the stored offsets are committed first, so the next
    /// owner starts right after the last message whose outcome was durable.
    func rebalance(
        client: OpaquePointer, error: rd_kafka_resp_err_t,
        partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
    ) {
        let cooperative = Self.isCooperative(rd_kafka_rebalance_protocol(client))
        let described = partitions.map(Self.describe) ?? []
        switch error {
        case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
            logger.info("Partitions assigned", metadata: ["kafka.partitions": described.joined(separator: ",")])
            _ = nextAssignment(partitions.map(Self.topicPartitions) ?? [])
            if cooperative {
                if let failure = rd_kafka_incremental_assign(client, partitions) { rd_kafka_error_destroy(failure) }
            } else {
                rd_kafka_assign(client, partitions)
            }
        case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
            let list = partitions.map(Self.topicPartitions) ?? []
            // The positions committed now: where the partitions' next owner starts.
            let committing = positions.withLock { positions in
                list.compactMap { partition in
                    positions.removeValue(forKey: partition).map { "\(partition)@\($0)" }
                }
            }
            logger.info(
                "Partitions revoked",
                metadata: [
                    "kafka.partitions": described.joined(separator: ","),
                    "kafka.committing": committing.joined(separator: ","),
                ])
            let ended = nextAssignment(list)
            revoked.withLock { $0.merge(ended) { max($0, $1) } }
            let commitError = rd_kafka_commit(client, nil, 0)
            if commitError != RD_KAFKA_RESP_ERR_NO_ERROR, commitError != RD_KAFKA_RESP_ERR__NO_OFFSET {
                logger.warning(
                    "Commit on revocation failed",
                    metadata: ["kafka.error": String(cString: rd_kafka_err2name(commitError))])
            }
            if cooperative {
                if let failure = rd_kafka_incremental_unassign(client, partitions) { rd_kafka_error_destroy(failure) }
            } else {
                rd_kafka_assign(client, nil)
            }
        default:
            logger.error("Rebalance failed", metadata: ["kafka.error": String(cString: rd_kafka_err2name(error))])
            rd_kafka_assign(client, nil)
        }
    }

    /// Whether the group's rebalance protocol, as `rd_kafka_rebalance_protocol` names it, is the
    /// cooperative one. librdkafka answers NULL while no protocol is chosen (a rebalance event
    /// that arrives as the consumer leaves or before it joined; seen once in a test run, where
    /// reading it as a C string crashed the process): that is handled as eager, the default.
    static func isCooperative(_ protocolName: UnsafePointer<CChar>?) -> Bool {
        protocolName.map { String(cString: $0) } == "COOPERATIVE"
    }

    static func topicPartitions(_ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) -> [TopicPartition] {
        (0..<Int(list.pointee.cnt)).map { index in
            let element = list.pointee.elems[index]
            return TopicPartition(topic: String(cString: element.topic), partition: element.partition)
        }
    }

    static func describe(_ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) -> [String] {
        (0..<Int(list.pointee.cnt)).map { index in
            let element = list.pointee.elems[index]
            return "\(String(cString: element.topic))/\(element.partition)"
        }
    }
}
