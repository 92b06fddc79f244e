import Foundation
import Kafka
import Messages
import Testing

@testable import AuthWorker
@testable import TestSupport

/// CloudEvents' binary content mode on Kafka: a request whose attributes are `ce_` headers and
/// whose value is its `data` is checked as the structured form is, and answered the way it came.
@Suite(.requiresServices, .timeLimit(.minutes(2))) struct BinaryModeTests {
    static let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    /// The headers of a binary-mode request; nil leaves an attribute out.
    static func headers(
        id: String?, type: String = "auth.login.request", contentType: String? = "application/json",
        traceparent: String? = traceparent
    ) -> [KafkaHeader] {
        var headers = [
            KafkaHeader(key: "ce_specversion", string: "1.0"), KafkaHeader(key: "ce_source", string: "/gateway/binary"),
            KafkaHeader(key: "ce_type", string: type),
        ]
        if let id { headers.append(KafkaHeader(key: "ce_id", string: id)) }
        if let contentType { headers.append(KafkaHeader(key: "content-type", string: contentType)) }
        if let traceparent { headers.append(KafkaHeader(key: "ce_traceparent", string: traceparent)) }
        return headers
    }

    @Test func aBinaryModeRequestIsCheckedAsAStructuredOneAndAnsweredInBinaryMode() async throws {
        let topics = try await IntegrationEnvironment.makeTopics()
        var config = try IntegrationEnvironment.workerConfiguration(
            databaseURL: try await IntegrationEnvironment.makeDatabase(), topics: topics)
        config.resultsKey = Array(repeating: 7, count: 32)  // kept answers can be given again
        config.eventsContentMode = .binary
        let worker = try await RunningWorker(config)
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        let results = try TopicReader(topic: topics.results)
        let events = try TopicReader(topic: topics.events)
        let deadLetters = try TopicReader(topic: topics.deadLetters)

        let guest = "binary-guest-\(UUID())"
        let malformed = "binary-malformed-\(UUID())"
        let textPlain = "binary-text-\(UUID())"
        let notJSON = "binary-notjson-\(UUID())"
        let wrongType = "binary-type-\(UUID())"
        let structured = "structured-\(UUID())"
        let guestData = Array(#"{"method":"guest","client_id":"binary-1"}"#.utf8)
        try await gateway.publishRaw(key: Array(guest.utf8), value: guestData, headers: Self.headers(id: guest))
        try await gateway.publishRaw(
            key: nil, value: Array(#"{"method":42}"#.utf8), headers: Self.headers(id: malformed, traceparent: nil))
        try await gateway.publishRaw(
            key: nil, value: guestData, headers: Self.headers(id: textPlain, contentType: "text/plain"))
        try await gateway.publishRaw(key: nil, value: Array("not json".utf8), headers: Self.headers(id: notJSON))
        try await gateway.publishRaw(
            key: nil, value: guestData, headers: Self.headers(id: wrongType, type: "auth.login.result"))
        try await gateway.publishRaw(
            key: Array("no-id".utf8), value: guestData, headers: Self.headers(id: nil))
        // `ce_` headers beside a structured content type: the structured mode, as the binding says.
        let envelope =
            #"{"specversion":"1.0","id":"\#(structured)","source":"/gateway/test","type":"auth.login.request","data":{"method":"guest","client_id":"binary-2"}}"#
        try await gateway.publishRaw(
            key: nil, value: Array(envelope.utf8),
            headers: Self.headers(id: "ignored", contentType: "application/cloudevents+json"))

        let ids = [guest, malformed, textPlain, notJSON, wrongType, structured]
        let answered = try await results.waitUntil { messages in
            Set(messages.compactMap(\.keyString)).isSuperset(of: ids)
        }
        func answer(_ id: String) throws -> KafkaMessage { try #require(answered.first { $0.keyString == id }) }
        /// A binary-mode answer: its attributes in headers, its data the value.
        func binaryResult(_ id: String) throws -> LoginResultData {
            let message = try answer(id)
            #expect(message.headers.string("ce_specversion") == "1.0")
            #expect(message.headers.string("ce_type") == "auth.login.result")
            #expect(message.headers.string("ce_source") == config.eventSource)
            #expect(message.headers.string("ce_id")?.isEmpty == false)
            #expect(message.headers.string("ce_time").flatMap(Timestamp.parse) != nil)
            #expect(message.headers.string("content-type") == "application/json")
            let result = try MessageCoding.decode(LoginResultData.self, from: message.value)
            #expect(result.requestId == id)
            return result
        }

        let signedIn = try binaryResult(guest)
        #expect(signedIn.status == "ok" && signedIn.session != nil && signedIn.user?.isGuest == true)
        #expect(try answer(guest).headers.string("ce_traceparent") == Self.traceparent, "the trace goes on")
        let refused = try binaryResult(malformed)
        #expect(refused.error?.code == .malformedRequest && refused.error?.field == "data.method")
        #expect(try answer(malformed).headers.string("ce_traceparent") == nil)
        #expect(try binaryResult(textPlain).error?.field == "datacontenttype")
        #expect(try binaryResult(notJSON).error?.field == "data")
        #expect(try binaryResult(wrongType).error?.field == "type")
        let plain = try answer(structured)
        #expect(plain.headers.string("ce_id") == nil)
        #expect(plain.headers.string("content-type") == "application/cloudevents+json")
        let structuredResult = try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: plain.value)
        #expect(structuredResult.data.status == "ok")

        // Events in binary mode too (`AUTH_EVENTS_CONTENT_MODE=binary`), whichever mode the request
        // came in: the two guests' `auth.user.created`, the data as the value.
        let created = try await events.waitUntil { messages in
            messages.filter { $0.headers.string("ce_type") == "auth.user.created" }.count >= 2
        }.filter { $0.headers.string("ce_type") == "auth.user.created" }
        let userIDs = try created.map { try MessageCoding.decode(UserCreatedData.self, from: $0.value).userId }
        #expect(Set(userIDs).contains(try #require(signedIn.user?.id)))
        #expect(Set(userIDs).contains(try #require(structuredResult.data.user?.id)))
        for event in created {
            #expect(event.headers.string("ce_specversion") == "1.0" && event.headers.string("ce_id") != nil)
            #expect(event.headers.string("content-type") == "application/json")
        }
        #expect(
            created.contains { $0.headers.string("ce_traceparent") == Self.traceparent },
            "the binary request's trace goes on into its event")

        // A binary request without `ce_id` cannot be answered: the dead-letter topic, as a
        // structured one without an id.
        let dlq = try await deadLetters.waitUntil { $0.contains { $0.keyString == "no-id" } }
        #expect(dlq.first { $0.keyString == "no-id" }?.headers.string("dlq-reason") == "missing_id")

        // The same request again, in either mode, is answered from the kept answer in its own mode.
        try await gateway.publishRaw(key: Array(guest.utf8), value: guestData, headers: Self.headers(id: guest))
        let again = try await results.waitUntil { $0.filter { $0.keyString == guest }.count >= 2 }
        let replay = try #require(again.last { $0.keyString == guest })
        #expect(replay.headers.string("ce_specversion") == "1.0")
        #expect(try MessageCoding.decode(LoginResultData.self, from: replay.value).user?.id == signedIn.user?.id)

        await results.close()
        await events.close()
        await deadLetters.close()
        gateway.close()
        try await worker.stop()
    }
}
