import AuthCLI
import AuthDomain
import AuthStore
import AuthWorker
import Foundation
import Kafka
import Messages
import ServiceKit
import Synchronization

/// Plays the gateway in tests that need raw bytes: publishes any value (malformed input,
/// notifications, hand-built envelopes) and reads results as bytes. Gateways use `AuthClient`;
/// so do `AuthClientTests` and `auth-worker request guest`.
final class GatewayClient: Sendable {
    private let producer: KafkaProducer
    private let resultsConsumer: KafkaConsumer
    private let topics: WorkerConfiguration.Topics
    /// Results read while waiting for another one, by request id.
    private let buffered = Mutex<[[UInt8]: [UInt8]]>([:])

    /// - Parameter configuration: brokers and topic names; results are read by a throwaway group.
    init(configuration: WorkerSetup, logger: Logger) throws {
        producer = try KafkaProducer(configuration: configuration.kafka.producerConfiguration, logger: logger)
        var consumerConfiguration = configuration.kafka.consumerConfiguration
        consumerConfiguration.groupID = "auth-gateway-\(UUID().uuidString.lowercased())"
        consumerConfiguration.autoOffsetReset = "earliest"
        consumerConfiguration.sessionTimeout = .seconds(6)
        resultsConsumer = try KafkaConsumer(
            configuration: consumerConfiguration, topics: [configuration.topics.results], logger: logger)
        topics = configuration.topics
    }

    /// Publishes a request event with `requestID` as its id and Kafka key.
    func publish(requestID: String, data: LoginRequestData, source: String = "/gateway/cli") async throws {
        let event = CloudEvent(
            id: requestID, source: source, type: RequestDecoder.requestType, time: Date(), data: data)
        try await publishRaw(key: Array(requestID.utf8), value: MessageCoding.encode(event))
    }

    /// Publishes arbitrary bytes on the requests topic, or another (malformed input, notifications).
    func publishRaw(topic: String? = nil, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader] = [])
        async throws
    {
        try await producer.send(
            ProducerRecord(topic: topic ?? topics.requests, key: key, value: value, headers: headers))
    }

    /// Waits for the result whose key is `requestID`.
    /// - Returns: the result's JSON bytes, or nil after `timeout`.
    func awaitResult(requestID: String, timeout: Duration) async throws -> [UInt8]? {
        let deadline = ContinuousClock.now + timeout
        let key = Array(requestID.utf8)
        while ContinuousClock.now < deadline {
            if let value = buffered.withLock({ $0.removeValue(forKey: key) }) { return value }
            let messages = try await resultsConsumer.poll(maxMessages: 500, timeout: .milliseconds(200))
            buffered.withLock { buffer in
                for message in messages { buffer[message.key ?? []] = message.value }
            }
        }
        return buffered.withLock { $0.removeValue(forKey: key) }
    }

    /// Publishes a request with a fresh id and waits for its result's data.
    /// - Returns: nil when no result came within `timeout`.
    func login(_ data: LoginRequestData, timeout: Duration = .seconds(30)) async throws -> LoginResultData? {
        let id = UUID().uuidString.lowercased()
        try await publish(requestID: id, data: data)
        guard let bytes = try await awaitResult(requestID: id, timeout: timeout) else { return nil }
        return try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: bytes).data
    }

    func close() {
        producer.close(timeout: .seconds(5))
        Task { [resultsConsumer] in await resultsConsumer.close() }
    }
}

extension GatewayClient {
    /// Publishes `others` and `count` guest sign-ins all at once, so the worker takes them in
    /// together, and reads every result from `results` (a reader of the results topic).
    /// - Returns: each guest's milliseconds from publication to its result (the result's broker
    ///   timestamp), sorted, every guest answered `ok`; and the other requests' results.
    func burst(guests count: Int, with others: [LoginRequestData] = [], results: TopicReader) async throws -> (
        guests: [Int64], others: [LoginResultData]
    ) {
        let otherIDs = others.map { _ in UUID().uuidString.lowercased() }
        let guestIDs = Set((0..<count).map { _ in UUID().uuidString.lowercased() })
        let all = guestIDs.union(otherIDs)
        let published = Int64(Date().timeIntervalSince1970 * 1000)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (id, data) in zip(otherIDs, others) {
                group.addTask { try await self.publish(requestID: id, data: data) }
            }
            for id in guestIDs {
                group.addTask { try await self.publish(requestID: id, data: LoginRequestData(method: "guest")) }
            }
            try await group.waitForAll()
        }
        let seen = try await results.waitUntil { messages in all.isSubset(of: Set(messages.map(\.keyString))) }
        var latencies: [Int64] = []
        var answers: [LoginResultData] = []
        for message in seen where all.contains(message.keyString) {
            let result = try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: message.value).data
            if guestIDs.contains(message.keyString) {
                guard result.status == "ok", let answered = message.timestamp else {
                    throw Failure("a guest was not answered ok: \(String(describing: result.error))")
                }
                latencies.append(answered - published)
            } else {
                answers.append(result)
            }
        }
        guard latencies.count == count, answers.count == others.count else { throw Failure("results missing") }
        return (latencies.sorted(), answers)
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}
