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
    private let logger: Logger

    /// Creates the client; brokers are contacted lazily.
    /// - Throws: `KafkaError` with code `.configuration` or `.clientCreation`.
    public init(configuration: KafkaProducerConfiguration, logger: Logger) throws {
        try configuration.kafka.validate()
        self.logger = logger
        let deliveries = DeliveryRegistry(logger: logger)
        self.deliveries = deliveries
        let conf = try KafkaClientHandle.makeConf(configuration.librdkafkaProperties)
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
        handle = Handle(try KafkaClientHandle.makeClient(RD_KAFKA_PRODUCER, conf: conf))
        let thread = Thread { [handle, pollThreadDone] in
            // Serves delivery reports until close() flags the handle as closing.
            while !handle.isClosing.load(ordering: .acquiring) {
                rd_kafka_poll(handle.pointer, 100)
            }
            pollThreadDone.signal()
        }
        thread.name = "kafka-producer-poll"
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
        guard !handle.isClosing.load(ordering: .acquiring) else {
            throw KafkaError(.closed, reason: "producer is closed", isRetriable: false)
        }
        return try await withCheckedThrowingContinuation { continuation in
            let id = deliveries.register(continuation)
            let error = enqueue(record, opaque: UnsafeMutableRawPointer(bitPattern: UInt(id)))
            if error != RD_KAFKA_RESP_ERR_NO_ERROR {
                deliveries.fail(id, with: KafkaError(.produce, error: error))
            }
        }
    }

    /// Produces records and waits for all acknowledgements; throws the first failure after all settle.
    @discardableResult
    public func send(_ records: [ProducerRecord]) async throws -> [DeliveryReport] {
        try await withThrowingTaskGroup(of: (Int, DeliveryReport).self) { group in
            for (index, record) in records.enumerated() {
                group.addTask { (index, try await self.send(record)) }
            }
            var reports = [DeliveryReport?](repeating: nil, count: records.count)
            var firstError: (any Error)?
            while let next = await group.nextResult() {
                switch next {
                case .success(let (index, report)): reports[index] = report
                case .failure(let error): if firstError == nil { firstError = error }
                }
            }
            if let firstError { throw firstError }
            return reports.compactMap { $0 }
        }
    }

    private func enqueue(_ record: ProducerRecord, opaque: UnsafeMutableRawPointer?) -> rd_kafka_resp_err_t {
        var headers: OpaquePointer?
        if !record.headers.isEmpty {
            headers = rd_kafka_headers_new(record.headers.count)
            for header in record.headers {
                if let value = header.value {
                    value.withUnsafeBytes { bytes in
                        _ = rd_kafka_header_add(headers, header.key, -1, bytes.baseAddress, bytes.count)
                    }
                } else {
                    _ = rd_kafka_header_add(headers, header.key, -1, nil, 0)
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

    /// Flushes, stops the delivery thread and destroys the client. Idempotent.
    public func close(timeout: Duration = .seconds(10)) {
        guard handle.beginClosing() else { return }
        pollThreadDone.wait()
        let error = rd_kafka_flush(handle.pointer, Int32(clamping: timeout.milliseconds))
        if error != RD_KAFKA_RESP_ERR_NO_ERROR {
            logger.warning(
                "Producer closed with undelivered records",
                metadata: ["kafka.outstanding": String(rd_kafka_outq_len(handle.pointer))])
        }
        rd_kafka_destroy(handle.pointer)
        deliveries.failAll(with: KafkaError(.closed, reason: "producer closed before delivery", isRetriable: true))
    }

    /// The raw handle, for the admin helpers that borrow a producer's connection.
    func withHandle<T>(_ body: (OpaquePointer) throws -> T) rethrows -> T {
        try body(handle.pointer)
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

/// Pending sends by id, resumed from librdkafka's delivery callback.
final class DeliveryRegistry: Sendable {
    private let pending = Mutex<(next: UInt, waiting: [UInt: CheckedContinuation<DeliveryReport, any Error>])>(
        (1, [:]))
    private let logger: Logger

    init(logger: Logger) { self.logger = logger }

    func register(_ continuation: CheckedContinuation<DeliveryReport, any Error>) -> UInt {
        pending.withLock { state in
            let id = state.next
            state.next += 1
            state.waiting[id] = continuation
            return id
        }
    }

    func fail(_ id: UInt, with error: KafkaError) {
        let continuation = pending.withLock { $0.waiting.removeValue(forKey: id) }
        continuation?.resume(throwing: error)
    }

    func failAll(with error: KafkaError) {
        let all = pending.withLock { state in
            defer { state.waiting.removeAll() }
            return Array(state.waiting.values)
        }
        all.forEach { $0.resume(throwing: error) }
    }

    /// Called on the polling thread for every delivered or failed record.
    func complete(_ message: UnsafePointer<rd_kafka_message_t>) {
        let id = UInt(bitPattern: message.pointee._private)
        guard let continuation = pending.withLock({ $0.waiting.removeValue(forKey: id) }) else { return }
        let error = message.pointee.err
        if error != RD_KAFKA_RESP_ERR_NO_ERROR {
            continuation.resume(throwing: KafkaError(.delivery, error: error))
            return
        }
        let topic = message.pointee.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? ""
        continuation.resume(
            returning: DeliveryReport(topic: topic, partition: message.pointee.partition, offset: message.pointee.offset))
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
