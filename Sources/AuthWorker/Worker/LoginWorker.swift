import AuthCrypto
import Foundation
import JOSE
import Kafka
import Messages
import PGStore
import ServiceKit
import Synchronization

/// The consume loop: polls login requests in batches, answers each, then stores the offsets.
///
/// Per batch: messages with the same partition and key are handled in order, different keys in
/// parallel; transient failures are retried with capped exponential backoff and jitter; results,
/// dead letters and events are produced and acknowledged; only then are the batch's offsets stored.
/// A crash at any point replays the batch; the request id makes the replay harmless.
public final class LoginWorker: Service {
    private let configuration: WorkerConfiguration
    private let consumer: KafkaConsumer
    private let producer: KafkaProducer
    private let service: LoginService
    private let store: any AuthStore
    private let clock: any WorkerClock
    private let logger: Logger
    private let decoder = RequestDecoder()
    private let notifications: AppleNotificationHandler?
    private let stopping = Atomic<Bool>(false)
    private let metrics: WorkerMetrics
    /// When the loop last showed progress (a poll, or a retry attempt), as Unix seconds.
    private let heartbeat = Atomic<Int>(Int(Date().timeIntervalSince1970))

    /// Seconds since the consume loop last showed progress: liveness.
    public var secondsSinceHeartbeat: Int { Int(Date().timeIntervalSince1970) - heartbeat.load(ordering: .relaxed) }

    private func beat() { heartbeat.store(Int(Date().timeIntervalSince1970), ordering: .relaxed) }

    public init(
        configuration: WorkerConfiguration, consumer: KafkaConsumer, producer: KafkaProducer, service: LoginService,
        store: any AuthStore, notifications: AppleNotificationHandler? = nil, clock: any WorkerClock,
        metrics: WorkerMetrics, logger: Logger
    ) {
        self.notifications = notifications
        self.configuration = configuration
        self.consumer = consumer
        self.producer = producer
        self.service = service
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
    }

    public func triggerGracefulShutdown() {
        stopping.store(true, ordering: .releasing)
    }

    private var isStopping: Bool { stopping.load(ordering: .acquiring) }

    public func run() async throws {
        logger.info("Consuming", metadata: [LogKey.topic: configuration.topics.requests])
        defer { logger.info("Consumer stopped") }
        do {
            while !isStopping {
                beat()
                let batch = try await consumer.poll(
                    maxMessages: configuration.processing.batchSize, timeout: configuration.processing.batchWait)
                guard !batch.isEmpty else { continue }
                do {
                    try await process(batch)
                } catch is ShutdownDuringRetry {
                    logger.warning(
                        "Batch abandoned during shutdown; it will be replayed",
                        metadata: [LogKey.count: String(batch.count)])
                    break
                }
                await consumer.storeOffsets(batch)
            }
        } catch {
            await consumer.close()
            throw error
        }
        // Leaving the group commits the stored offsets.
        await consumer.close()
    }

    // MARK: - Batches

    /// Handles a batch and publishes everything it produced.
    func process(_ batch: [KafkaMessage]) async throws {
        var lanes: [String: [KafkaMessage]] = [:]
        var laneOrder: [String] = []
        for message in batch {
            let lane = "\(message.topic)/\(message.partition)/\(message.key.map { Base64Lane.encode($0) } ?? "")"
            if lanes[lane] == nil { laneOrder.append(lane) }
            lanes[lane, default: []].append(message)
        }
        let outputs = try await withThrowingTaskGroup(of: [MessageOutput].self) { group in
            for lane in laneOrder {
                let messages = lanes[lane] ?? []
                group.addTask {
                    var outputs: [MessageOutput] = []
                    for message in messages {
                        outputs.append(try await self.retrying("handle request") { try await self.handle(message) })
                    }
                    return outputs
                }
            }
            var all: [MessageOutput] = []
            for try await outputs in group { all += outputs }
            return all
        }
        let records = outputs.flatMap(\.records)
        try await retrying("publish") { try await self.producer.send(records) }
        let eventIDs = outputs.flatMap(\.publishedEventIDs)
        if !eventIDs.isEmpty {
            let now = clock.now()
            try await retrying("mark events published") { try await self.store.markPublished(eventIDs, at: now) }
        }
    }

    /// What one message produced: records to publish and the outbox events among them.
    struct MessageOutput: Sendable {
        var records: [ProducerRecord]
        var publishedEventIDs: [UUID]
    }

    func handle(_ message: KafkaMessage) async throws -> MessageOutput {
        if message.topic == configuration.topics.notifications {
            return try await handleNotification(message)
        }
        switch decoder.decode(message.value) {
        case .unanswerable(let reason, let text):
            metrics.deadLettered.increment()
            logger.warning(
                "Request sent to the dead-letter topic",
                metadata: [
                    "dlq.reason": reason, LogKey.topic: message.topic, LogKey.partition: String(message.partition),
                    LogKey.offset: String(message.offset),
                ])
            return MessageOutput(records: [deadLetter(message, reason: reason, text: text)], publishedEventIDs: [])
        case .invalid(let id, let traceparent, let error):
            let failure = LoginError(error.code, error.description, field: error.field)
            return MessageOutput(
                records: [
                    try resultRecord(.failure(requestID: id, error: failure.payload), requestID: id, traceparent)
                ],
                publishedEventIDs: [])
        case .valid(var request):
            request.partitionKey = message.key.flatMap { String(validating: $0, as: UTF8.self) }
            let sent = request.time ?? message.timestamp.map { Date(timeIntervalSince1970: Double($0) / 1000) }
            if configuration.requestDeadline > 0, let sent,
                clock.now().timeIntervalSince(sent) > configuration.requestDeadline
            {
                // The gateway has given up on it: acting now would create a session nobody receives.
                metrics.expired.increment()
                let failure = LoginError(
                    .internalError, "the request expired before it could be processed; send a new one", retriable: true)
                return MessageOutput(
                    records: [
                        try resultRecord(
                            .failure(requestID: request.id, error: failure.payload), requestID: request.id,
                            request.traceparent)
                    ],
                    publishedEventIDs: [])
            }
            return try await handle(request)
        }
    }

    private func handle(_ request: LoginRequest) async throws -> MessageOutput {
        let started = ContinuousClock.now
        defer { metrics.observeLatency(ContinuousClock.now - started) }
        let result: LoginResultData
        var events: [OutboxEvent] = []
        do {
            guard let outcome = try await service.handle(request) else {
                metrics.duplicates.increment()
                return try await replay(request)
            }
            result = outcome.result
            events = outcome.events
        } catch let error as LoginError {
            result = .failure(requestID: request.id, error: error.payload)
        } catch let reuse as RefreshReuse {
            result = .failure(requestID: request.id, error: reuse.loginError.payload)
            events = reuse.events
        } catch let error where Self.isTransient(error) {
            throw error
        } catch {
            logger.error(
                "Request failed unexpectedly",
                metadata: [LogKey.requestID: request.id, LogKey.error: Self.loggable(error)])
            let failure = LoginError(.internalError, "internal error; see the worker's log", retriable: true)
            result = .failure(requestID: request.id, error: failure.payload)
        }
        metrics.count(result)
        if let error = result.error {
            logger.info(
                "Request refused",
                metadata: [
                    LogKey.requestID: request.id, LogKey.method: request.method.rawValue,
                    LogKey.errorCode: error.code.rawValue,
                ])
        }
        var records = [try resultRecord(result, requestID: request.id, request.traceparent)]
        records += events.map(\.record)
        return MessageOutput(records: records, publishedEventIDs: events.map(\.id))
    }

    /// Provider notifications get no result: they are applied, or refused with a log line.
    private func handleNotification(_ message: KafkaMessage) async throws -> MessageOutput {
        guard let notifications else { return MessageOutput(records: [], publishedEventIDs: []) }
        do {
            let events = try await notifications.handle(message.value)
            return MessageOutput(records: events.map(\.record), publishedEventIDs: events.map(\.id))
        } catch let refusal as AppleNotificationHandler.Refusal {
            logger.warning(
                "Provider notification refused",
                metadata: [
                    LogKey.error: refusal.description, LogKey.partition: String(message.partition),
                    LogKey.offset: String(message.offset),
                ])
            return MessageOutput(records: [], publishedEventIDs: [])
        }
    }

    // MARK: - Redelivered requests

    /// A request processed before (a redelivery after a crash or rebalance): its effects are never
    /// repeated; its kept result is published again, with the same event id.
    private func replay(_ request: LoginRequest) async throws -> MessageOutput {
        guard let key = configuration.resultsKey, let sealed = try await store.storedResult(requestID: request.id),
            let result = LoginService.openKeptResult(sealed, requestID: request.id, key: key)
        else {
            logger.info(
                "Request already processed; no kept result to publish again", metadata: [LogKey.requestID: request.id])
            return MessageOutput(records: [], publishedEventIDs: [])
        }
        logger.info("Request already processed; publishing its result again", metadata: [LogKey.requestID: request.id])
        return MessageOutput(
            records: [try resultRecord(result, requestID: request.id, request.traceparent)], publishedEventIDs: [])
    }

    /// The result's CloudEvent id is derived from the request id, so every copy of one answer has
    /// the same id and a gateway can deduplicate by it.
    static func resultEventID(requestID: String) -> String {
        var bytes = Array(SHA256.hash("auth.login.result:" + requestID).prefix(16))
        bytes[6] = 0x80 | (bytes[6] & 0x0F)  // UUIDv8: custom
        bytes[8] = 0x80 | (bytes[8] & 0x3F)
        let hex = Hex.encode(bytes)
        let parts = [
            hex.prefix(8), hex.dropFirst(8).prefix(4), hex.dropFirst(12).prefix(4), hex.dropFirst(16).prefix(4),
            hex.dropFirst(20),
        ]
        return parts.joined(separator: "-")
    }

    private func resultRecord(_ result: LoginResultData, requestID: String, _ traceparent: String?) throws
        -> ProducerRecord
    {
        let envelope = CloudEvent(
            id: Self.resultEventID(requestID: requestID), source: configuration.eventSource,
            type: LoginResultData.eventType,
            time: clock.now(), traceparent: traceparent, data: result)
        return ProducerRecord(
            topic: configuration.topics.results, key: Array(requestID.utf8), value: try MessageCoding.encode(envelope),
            headers: [KafkaHeader(key: "content-type", string: CloudEvent<LoginResultData>.contentType)])
    }

    private func deadLetter(_ message: KafkaMessage, reason: String, text: String) -> ProducerRecord {
        let headers =
            message.headers.filter { !$0.key.hasPrefix("dlq-") } + [
                KafkaHeader(key: "dlq-reason", string: reason),
                KafkaHeader(key: "dlq-message", string: text),
                KafkaHeader(key: "dlq-source-topic", string: message.topic),
                KafkaHeader(key: "dlq-source-partition", string: String(message.partition)),
                KafkaHeader(key: "dlq-source-offset", string: String(message.offset)),
            ]
        return ProducerRecord(
            topic: configuration.topics.deadLetters, key: message.key, value: message.value, headers: headers)
    }

    // MARK: - Retries

    /// An error as the log may show it. PostgreSQL's own messages can quote row values (an
    /// e-mail, a password hash in "failing row contains"), so only the generic description and the
    /// SQLSTATE of a `PGError` are logged.
    static func loggable(_ error: any Error) -> String {
        if let error = error as? PGError { return error.description }
        return String(describing: error)
    }

    /// Errors that another try may fix: the database or the broker being unreachable.
    static func isTransient(_ error: any Error) -> Bool {
        switch error {
        case let error as PGError: error.isRetriable
        case let error as KafkaError: error.isRetriable
        case let error as JOSEError: error.code == .keySetUnavailable
        default: false
        }
    }

    /// Runs `body` until it succeeds or fails definitely; transient failures wait with capped
    /// exponential backoff and full jitter. Gives up only when the worker is stopping.
    @discardableResult
    func retrying<T: Sendable>(_ what: String, _ body: @Sendable () async throws -> T) async throws -> T {
        var delay = configuration.processing.initialRetryDelay
        var attempt = 1
        while true {
            do {
                return try await body()
            } catch let error where Self.isTransient(error) {
                if isStopping { throw ShutdownDuringRetry() }
                beat()
                metrics.retries.increment()
                let jittered = Duration.milliseconds(Int64.random(in: 0...max(delay.wholeMilliseconds, 1)))
                logger.warning(
                    "Transient failure; retrying",
                    metadata: [
                        "retry.operation": what, LogKey.attempt: String(attempt),
                        LogKey.delay: String(jittered.wholeMilliseconds),
                        LogKey.error: String(describing: error),
                    ])
                try await Task.sleep(for: jittered)
                delay = min(delay * 2, configuration.processing.maxRetryDelay)
                attempt += 1
            }
        }
    }
}

/// Thrown when a shutdown arrives while a batch is waiting out a transient failure.
struct ShutdownDuringRetry: Error {}

/// Kafka keys are bytes; lanes group them by a printable form.
enum Base64Lane {
    static func encode(_ bytes: [UInt8]) -> String { Data(bytes).base64EncodedString() }
}

extension Duration {
    var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
