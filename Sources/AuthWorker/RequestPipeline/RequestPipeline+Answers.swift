import AuthCrypto
import AuthDomain
import AuthStore
import Foundation
import JOSE
import Kafka
import Messages
import PGStore
import ServiceKit
import Synchronization

/// What the worker answers without a write: kept results replayed, refusals, dead letters, and
/// how every result record is made.
extension RequestPipeline {
    // MARK: - Answers

    /// The answer a redelivered request gets: its kept result, with the same event id.
    func replay(_ kept: KeptRequest, job: Job, request: LoginRequest) -> [ProducerRecord] {
        metrics.duplicates.increment()
        guard let key = configuration.resultsKey, let sealed = kept.resultSealed,
            let box = AESGCM.Sealed(combined: sealed),
            let json = AESGCM.open(box, key: key, aad: Array(request.id.utf8)),
            let result = try? MessageCoding.decode(LoginResultData.self, from: json)
        else {
            // No results key, or another one than sealed it: the request was acted on, and its
            // answer cannot be given again (nor its content compared).
            logger.warning(
                "Request already processed; its answer cannot be given again", metadata: [LogKey.requestID: request.id])
            return refusal(
                LoginError(
                    .internalError, "the request was processed, but its answer cannot be given again; send a new one",
                    retriable: true), job: job, request: request)
        }
        // A reused id with other content never gets the first request's answer. The digests are
        // keyed with the key that opened the answer, so they compare.
        if let stored = kept.digest, !ConstantTime.equals(stored, job.digest) {
            logger.warning("Request id reused with other content", metadata: [LogKey.requestID: request.id])
            return refusal(
                LoginError(.malformedRequest, "this id belongs to another request; send a new id", field: "id"),
                job: job, request: request)
        }
        logger.info("Request already processed; publishing its result again", metadata: [LogKey.requestID: request.id])
        return [
            resultRecord(
                result, requestID: request.id, request.traceparent, tenant: request.tenant, mode: request.mode,
                tag: Self.answerTag(digest: job.digest))
        ]
    }

    /// The answer of a refused request (nothing written); unexpected errors are logged and
    /// answered `internal_error`.
    func refusal(_ error: any Error, job: Job, request: LoginRequest) -> [ProducerRecord] {
        let failure: LoginError
        if let error = error as? LoginError {
            failure = error
        } else {
            logger.error(
                "Request failed unexpectedly",
                metadata: [LogKey.requestID: request.id, LogKey.error: ErrorPolicy.loggable(error)])
            failure = LoginError(.internalError, "internal error; see the worker's log", retriable: true)
        }
        return [
            resultRecord(
                .failure(requestID: request.id, error: failure.payload), requestID: request.id, request.traceparent,
                tenant: request.tenant, mode: request.mode, tag: Self.refusalTag(failure, digest: job.digest))
        ]
    }

    /// A refused request's step: its error result, and its audit row (ridden in the next batch's
    /// transaction: no round trip of its own).
    func refused(_ error: any Error, job: Job, request: LoginRequest) -> Step {
        .publish(
            refusal(error, job: job, request: request), outcome: Self.outcome(of: error),
            audit: AuditEntry.refused(request, error: error, at: clock.now()))
    }

    static func outcome(of error: any Error) -> String {
        (error as? LoginError)?.code.rawValue ?? ErrorCode.internalError.rawValue
    }

    // MARK: - Records

    /// The result's CloudEvent id: every copy of one answer has the same id (so a gateway can
    /// deduplicate), and two different answers to one id never do.
    static func resultEventID(requestID: String, tag: String) -> String {
        // One string, sized once (each `+` made a string of its own).
        var input = "auth.login.result:"
        input.reserveCapacity(input.utf8.count + requestID.utf8.count + 1 + tag.utf8.count)
        input += requestID
        input += "\u{0}"
        input += tag
        var bytes = SHA256.hash(input)
        bytes[6] = 0x80 | (bytes[6] & 0x0F)  // UUIDv8: custom
        bytes[8] = 0x80 | (bytes[8] & 0x3F)
        // The first 16 of SHA-256's 32 bytes, written as a lowercase UUID.
        return UUID(uuid: bytes.withUnsafeBytes { $0.loadUnaligned(as: uuid_t.self) }).lowercasedString
    }

    static func answerTag(digest: [UInt8]) -> String { "answer:" + Hex.encode(digest) }

    static func refusalTag(_ error: LoginError, digest: [UInt8]) -> String {
        "refused:\(error.code.rawValue):" + Hex.encode(digest)
    }

    func resultRecord(
        _ result: LoginResultData, json: [UInt8]? = nil, requestID: String, _ traceparent: String?,
        tenant: String? = nil, mode: CloudEventMode, tag: String
    ) -> ProducerRecord {
        // A tenant's label only for one served: a name a request chose is not a bounded set.
        let served = tenant ?? Tenant.defaultName
        metrics.count(result, tenant: tenants.flows(for: served) == nil ? nil : served)
        let id = Self.resultEventID(requestID: requestID, tag: tag)
        guard mode == .structured else {
            // Binary content mode, as the request came: the attributes in `ce_` headers, the data
            // as the value.
            var headers = [
                KafkaHeader(key: "ce_specversion", string: "1.0"), KafkaHeader(key: "ce_id", string: id),
                KafkaHeader(key: "ce_source", string: configuration.eventSource),
                KafkaHeader(key: "ce_type", string: LoginResultData.eventType),
                KafkaHeader(key: "ce_time", string: Timestamp.format(clock.now())),
                KafkaHeader(key: "content-type", string: "application/json"),
            ]
            if let traceparent { headers.append(KafkaHeader(key: "ce_traceparent", string: traceparent)) }
            if let tenant { headers.append(KafkaHeader(key: "ce_tenant", string: tenant)) }
            return ProducerRecord(
                topic: configuration.topics.results, key: Array(requestID.utf8), value: json ?? result.jsonBytes,
                headers: headers)
        }
        let value = CloudEvent<LoginResultData>.json(
            id: id, source: configuration.eventSource, type: LoginResultData.eventType, time: clock.now(),
            traceparent: traceparent, tenant: tenant, data: json ?? result.jsonBytes)
        return ProducerRecord(
            topic: configuration.topics.results, key: Array(requestID.utf8), value: value,
            headers: ProducerRecord.cloudEventHeaders)
    }

    /// The dead letter of a message: a copy without the credentials the worker can find, cut to
    /// `AUTH_DLQ_MAX_BYTES`, with `dlq-*` headers saying why and where it came from.
    func deadLetter(_ message: KafkaMessage, reason: String, text: String) -> ProducerRecord {
        metrics.deadLetters.labels(reason).increment()
        let copy = DeadLetters.copy(of: message.value, limit: configuration.processing.deadLetterMaxBytes)
        var headers =
            message.headers.filter { !$0.key.hasPrefix("dlq-") } + [
                KafkaHeader(key: "dlq-reason", string: reason),
                KafkaHeader(key: "dlq-message", string: text),
                KafkaHeader(key: "dlq-source-topic", string: message.topic),
                KafkaHeader(key: "dlq-source-partition", string: String(message.partition)),
                KafkaHeader(key: "dlq-source-offset", string: String(message.offset)),
            ]
        if copy.redacted { headers.append(KafkaHeader(key: "dlq-redacted", string: "credentials")) }
        if let size = copy.truncatedFrom { headers.append(KafkaHeader(key: "dlq-truncated", string: String(size))) }
        // Headers are the gateway's: a message with megabytes of them is cut to its dlq-* headers.
        if headers.reduce(0, { $0 + $1.key.utf8.count + ($1.value?.count ?? 0) }) > 64 << 10 {
            headers = headers.filter { $0.key.hasPrefix("dlq-") }
        }
        return ProducerRecord(
            topic: configuration.topics.deadLetters, key: message.key.map { Array($0.prefix(4096)) }, value: copy.value,
            headers: headers)
    }

    /// What is published when the broker refuses a dead letter for good (too large for the
    /// topic's own limit): the record of it, headers only.
    static func recordOf(_ deadLetter: ProducerRecord) -> ProducerRecord {
        var headers = deadLetter.headers.filter { $0.key.hasPrefix("dlq-") }
        if !headers.contains(where: { $0.key == "dlq-truncated" }) {
            headers.append(KafkaHeader(key: "dlq-truncated", string: String(deadLetter.value.count)))
        }
        return ProducerRecord(topic: deadLetter.topic, key: deadLetter.key, value: [], headers: headers)
    }

}
