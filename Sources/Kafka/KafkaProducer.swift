import CRdKafka
import Foundation
import ServiceKit
import Synchronization

/// An idempotent Kafka producer whose sends complete when the broker acknowledges them.
///
/// `rd_kafka_t` is thread-safe, so the producer is `Sendable`. A background thread serves
/// librdkafka's delivery callbacks, which resume the awaiting `send` calls.
public final class KafkaProducer: Sendable {
    private let handle: Handle
    private let deliveries: DeliveryRegistry
    private let pollThreadDone = DispatchSemaphore(value: 0)
    /// Where the blocking metadata requests run (readiness probes, topic checks), one at a time:
    /// one long-lived thread rather than one per request, and a queue `close` can drain before
    /// the client is destroyed.
    private let metadataExecutor = ThreadExecutor(name: "kafka-metadata")
    private let logger: Logger

    /// Creates the client; brokers are contacted lazily.
    /// - Throws: `KafkaError` with code `.configuration` or `.clientCreation`.
    public init(configuration: KafkaProducerConfiguration, logger: Logger) throws {
        try configuration.kafka.validate()
        self.logger = logger
        let deliveries = DeliveryRegistry(logger: logger)
        self.deliveries = deliveries
        let conf = try KafkaClientFactory.makeConf(configuration.librdkafkaProperties)
        rd_kafka_conf_set_opaque(conf, Unmanaged.passUnretained(deliveries).toOpaque())
        rd_kafka_conf_set_dr_msg_cb(conf) { _, message, opaque in
            guard let message, let opaque else { return }
            Unmanaged<DeliveryRegistry>.fromOpaque(opaque).takeUnretainedValue().complete(message)
        }
        rd_kafka_conf_set_log_cb(conf) { client, level, facility, text in
            guard let client, let opaque = rd_kafka_opaque(client) else { return }
            Unmanaged<DeliveryRegistry>.fromOpaque(opaque).takeUnretainedValue()
                .log(level: level, facility: facility, text: text)
        }
        handle = Handle(try KafkaClientFactory.makeClient(RD_KAFKA_PRODUCER, conf: conf))
        let thread = Thread { [handle, pollThreadDone] in
            // Named from inside, within the kernel's 15 bytes (a longer name given to `Thread`
            // never reached the kernel: `top -H` showed the dispatch worker's name it started from).
            ThreadExecutor.nameCurrentThread("kafka-producer")
            // Serves delivery reports until close() flags the handle as closing (and yields: a
            // report, or the yield, ends the wait at once; an idle producer wakes once a second).
            while !handle.isClosing.load(ordering: .acquiring) {
                rd_kafka_poll(handle.pointer, 1000)
            }
            pollThreadDone.signal()
        }
        thread.name = "kafka-producer"
        thread.start()
    }

    deinit {
        close(timeout: .seconds(5))
    }

    /// Produces one record and waits for the broker's acknowledgement.
    /// - Returns: where the record landed.
    /// - Throws: `KafkaError` (`.produce` when the local queue refused it, `.delivery` when the broker did).
    @discardableResult
    public func send(_ record: ProducerRecord) async throws -> DeliveryReport {
        guard let outcome = await deliver([record]).first else {
            throw KafkaError(.delivery, reason: "no delivery report", isRetriable: true)
        }
        return try outcome.get()
    }

    /// Produces records in order and waits until the broker acknowledged every one.
    ///
    /// Records are handed to librdkafka in array order, so records with the same key keep their
    /// order in their partition.
    /// - Returns: the delivery reports, in the records' order.
    /// - Throws: the first `KafkaError` once every record has settled.
    @discardableResult
    public func send(_ records: [ProducerRecord]) async throws -> [DeliveryReport] {
        try await deliver(records).map { try $0.get() }
    }

    /// Produces records in order and waits until each one is acknowledged or has failed.
    ///
    /// One record's failure (too large, refused by the broker) is that record's outcome; the
    /// others are delivered regardless.
    /// - Returns: one outcome per record, in the records' order.
    public func deliver(_ records: [ProducerRecord]) async -> [Result<DeliveryReport, KafkaError>] {
        guard !records.isEmpty else { return [] }
        return await withCheckedContinuation { continuation in
            deliver(records) { continuation.resume(returning: $0) }
        }
    }

    /// Produces records in order and calls `completion` once each one is acknowledged or has
    /// failed: for a caller that waits on work of its own and should be woken once, by the
    /// completion, not by a task resumed on the pool first.
    /// - Parameter completion: called once, with one outcome per record in the records' order, on
    ///   the thread serving delivery reports (or on the caller's, before this returns, when no
    ///   record could be queued). It must be quick and must not wait for this producer.
    public func deliver(
        _ records: [ProducerRecord], then completion: @escaping @Sendable ([Result<DeliveryReport, KafkaError>]) -> Void
    ) {
        guard !records.isEmpty else { return completion([]) }
        guard !handle.isClosing.load(ordering: .acquiring) else {
            return completion(
                records.map { _ in .failure(KafkaError(.closed, reason: "producer is closed", isRetriable: false)) })
        }
        let ids = deliveries.register(count: records.count, completion)
        for (record, id) in zip(records, ids) {
            let error = enqueue(record, opaque: UnsafeMutableRawPointer(bitPattern: id))
            if error != RD_KAFKA_RESP_ERR_NO_ERROR {
                deliveries.settle(id, with: .failure(KafkaError(.produce, error: error)))
            }
        }
    }

    private func enqueue(_ record: ProducerRecord, opaque: UnsafeMutableRawPointer?) -> rd_kafka_resp_err_t {
        var headers: OpaquePointer?
        if !record.headers.isEmpty {
            headers = rd_kafka_headers_new(record.headers.count)
            for header in record.headers {
                // The name by its bytes and length: passed as a C string, a name of up to 15
                // bytes (`content-type`: a small string, with no storage to point at) was copied
                // to the heap for every record.
                var name = header.key
                name.withUTF8 { name in
                    name.withMemoryRebound(to: CChar.self) { name in
                        if let value = header.value {
                            value.withUnsafeBytes { bytes in
                                _ = rd_kafka_header_add(
                                    headers, name.baseAddress, name.count, bytes.baseAddress, bytes.count)
                            }
                        } else {
                            _ = rd_kafka_header_add(headers, name.baseAddress, name.count, nil, 0)
                        }
                    }
                }
            }
        }
        let partition = record.partition ?? rdkafka_shim_partition_unassigned()
        let error = record.value.withUnsafeBytes { value in
            withOptionalBytes(record.key) { key in
                // RD_KAFKA_MSG_F_COPY: librdkafka copies key and value before returning.
                rdkafka_shim_produce(
                    handle.pointer, record.topic, partition, key.baseAddress, key.count, value.baseAddress,
                    value.count, headers, opaque)
            }
        }
        // On success librdkafka owns the headers; on failure they are still ours.
        if error != RD_KAFKA_RESP_ERR_NO_ERROR, let headers { rd_kafka_headers_destroy(headers) }
        return error
    }

    /// Waits until every queued record is delivered or failed.
    /// - Throws: `KafkaError` `.timedOut` when records are still outstanding after `timeout`.
    public func flush(timeout: Duration) throws {
        let error = rd_kafka_flush(handle.pointer, Int32(clamping: timeout.milliseconds))
        if error != RD_KAFKA_RESP_ERR_NO_ERROR {
            throw KafkaError(.timedOut, error: error)
        }
    }

    /// Asks the brokers about `topics`: which of them exist (with at least one partition). Also
    /// teaches the producer where they live, so the first record sent to each does not wait
    /// for that.
    /// - Throws: `KafkaError` when no broker answered within `timeout`.
    public func describeTopics(_ topics: [String], timeout: Duration) async throws -> [String: Bool] {
        guard !handle.isClosing.load(ordering: .acquiring) else {
            throw KafkaError(.closed, reason: "producer is closed", isRetriable: false)
        }
        let outcome: Result<[String: Bool], KafkaError> = await onMetadataThread(
            closed: .failure(KafkaError(.closed, reason: "producer is closed", isRetriable: false))
        ) { pointer in
            var found: [String: Bool] = [:]
            for topic in topics {
                guard let topicHandle = rd_kafka_topic_new(pointer, topic, nil) else { continue }
                defer { rd_kafka_topic_destroy(topicHandle) }
                var metadata: UnsafePointer<rd_kafka_metadata>?
                let error = rd_kafka_metadata(pointer, 0, topicHandle, &metadata, Int32(clamping: timeout.milliseconds))
                guard error == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata else {
                    return .failure(KafkaError(.poll, error: error))
                }
                defer { rd_kafka_metadata_destroy(metadata) }
                var exists = false
                for index in 0..<Int(metadata.pointee.topic_cnt) {
                    let entry = metadata.pointee.topics[index]
                    if String(cString: entry.topic) == topic, entry.err == RD_KAFKA_RESP_ERR_NO_ERROR,
                        entry.partition_cnt > 0
                    {
                        exists = true
                    }
                }
                found[topic] = exists
            }
            return .success(found)
        }
        return try outcome.get()
    }

    /// Runs a blocking metadata request on the metadata thread; answers `closed` without touching
    /// the client once the producer is closing.
    func onMetadataThread<T: Sendable>(
        closed: T, _ body: @escaping @Sendable (OpaquePointer) -> T
    ) async -> T {
        let handle = self.handle
        return await withCheckedContinuation { continuation in
            metadataExecutor.submit {
                guard !handle.isClosing.load(ordering: .acquiring) else {
                    continuation.resume(returning: closed)
                    return
                }
                continuation.resume(returning: body(handle.pointer))
            }
        }
    }

    /// Flushes, stops the delivery thread and destroys the client. Idempotent.
    public func close(timeout: Duration = .seconds(10)) {
        guard handle.beginClosing() else { return }
        // Wakes the delivery thread's wait on the main queue, so it sees the flag now.
        if let queue = rd_kafka_queue_get_main(handle.pointer) {
            rd_kafka_queue_yield(queue)
            rd_kafka_queue_destroy(queue)
        }
        pollThreadDone.wait()
        // A metadata request under way finishes before the client goes; later ones see it closing.
        let drained = DispatchSemaphore(value: 0)
        metadataExecutor.submit { drained.signal() }
        drained.wait()
        metadataExecutor.shutdown()
        let error = rd_kafka_flush(handle.pointer, Int32(clamping: timeout.milliseconds))
        if error != RD_KAFKA_RESP_ERR_NO_ERROR {
            logger.warning(
                "Producer closed with undelivered records",
                metadata: ["kafka.outstanding": String(rd_kafka_outq_len(handle.pointer))])
        }
        rd_kafka_destroy(handle.pointer)
        deliveries.failAll(with: KafkaError(.closed, reason: "producer closed before delivery", isRetriable: true))
    }

    /// `close` for async callers: the wait for the delivery thread and the flush (up to
    /// `timeout`) run on a thread of their own, never on the cooperative pool, whose few threads
    /// every other task needs meanwhile.
    public func shutdown(timeout: Duration = .seconds(10)) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let thread = Thread { [self] in
                close(timeout: timeout)
                continuation.resume()
            }
            thread.name = "kafka-producer-close"
            thread.start()
        }
    }

}

/// Owns the rd_kafka_t pointer and the closing flag.
///
/// `@unchecked Sendable`: rd_kafka_t is documented thread-safe; the flag is atomic.
final class Handle: @unchecked Sendable {
    let pointer: OpaquePointer
    let isClosing = Atomic<Bool>(false)

    init(_ pointer: OpaquePointer) { self.pointer = pointer }

    /// True for the one caller that gets to close.
    func beginClosing() -> Bool {
        isClosing.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
    }
}

/// Pending sends, resumed from librdkafka's delivery callback when their whole batch has settled.
final class DeliveryRegistry: Sendable {
    // @unchecked: a batch is only read or written under `state`'s lock.
    private final class Batch: @unchecked Sendable {
        var outcomes: [Result<DeliveryReport, KafkaError>?]
        var remaining: Int
        let completion: @Sendable ([Result<DeliveryReport, KafkaError>]) -> Void

        init(count: Int, completion: @escaping @Sendable ([Result<DeliveryReport, KafkaError>]) -> Void) {
            outcomes = Array(repeating: nil, count: count)
            remaining = count
            self.completion = completion
        }
    }

    private struct State {
        var next: UInt = 1
        var waiting: [UInt: (batch: Batch, index: Int)] = [:]
    }

    // Batch objects are only touched under this lock.
    private let state = Mutex(State())
    private let logger: Logger

    init(logger: Logger) { self.logger = logger }

    /// Registers a batch of `count` records; returns one id per record, to pass as its opaque.
    func register(count: Int, _ completion: @escaping @Sendable ([Result<DeliveryReport, KafkaError>]) -> Void)
        -> [UInt]
    {
        let batch = Batch(count: count, completion: completion)
        return state.withLock { state in
            (0..<count).map { index in
                let id = state.next
                state.next += 1
                state.waiting[id] = (batch, index)
                return id
            }
        }
    }

    /// Records one record's outcome; completes its batch when it was the last.
    func settle(_ id: UInt, with outcome: Result<DeliveryReport, KafkaError>) {
        let finished = state.withLock { state -> (Batch, [Result<DeliveryReport, KafkaError>])? in
            guard let (batch, index) = state.waiting.removeValue(forKey: id) else { return nil }
            batch.outcomes[index] = outcome
            batch.remaining -= 1
            guard batch.remaining == 0 else { return nil }
            return (
                batch,
                batch.outcomes.map {
                    $0 ?? .failure(KafkaError(.delivery, reason: "no delivery report", isRetriable: true))
                }
            )
        }
        if let (batch, outcomes) = finished { batch.completion(outcomes) }
    }

    func failAll(with error: KafkaError) {
        let ids = state.withLock { Array($0.waiting.keys) }
        for id in ids { settle(id, with: .failure(error)) }
    }

    /// Called on the polling thread for every delivered or failed record.
    func complete(_ message: UnsafePointer<rd_kafka_message_t>) {
        let id = UInt(bitPattern: message.pointee._private)
        let error = message.pointee.err
        if error != RD_KAFKA_RESP_ERR_NO_ERROR {
            settle(id, with: .failure(KafkaError(.delivery, error: error)))
            return
        }
        let topic = message.pointee.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? ""
        settle(
            id,
            with: .success(
                DeliveryReport(topic: topic, partition: message.pointee.partition, offset: message.pointee.offset)))
    }

    func log(level: Int32, facility: UnsafePointer<CChar>?, text: UnsafePointer<CChar>?) {
        KafkaLog.forward(logger, level: level, facility: facility, text: text)
    }
}

/// Maps librdkafka's syslog levels onto ours.
enum KafkaLog {
    static func forward(_ logger: Logger, level: Int32, facility: UnsafePointer<CChar>?, text: UnsafePointer<CChar>?) {
        let mapped: Logger.Level =
            switch level {
            case ...3: .error
            case 4: .warning
            case 5, 6: .info
            default: .debug
            }
        logger.log(
            mapped, text.map { String(cString: $0) } ?? "",
            metadata: ["kafka.facility": facility.map { String(cString: $0) } ?? ""])
    }
}

func withOptionalBytes<T>(_ bytes: [UInt8]?, _ body: (UnsafeRawBufferPointer) -> T) -> T {
    if let bytes {
        return bytes.withUnsafeBytes(body)
    }
    return body(UnsafeRawBufferPointer(start: nil, count: 0))
}
