import Foundation
import StrictJSON

/// A CloudEvents 1.0 envelope in structured JSON mode.
///
/// `traceparent` is the W3C trace-context extension: copied from a request to everything emitted for it.
public struct CloudEvent<Payload: Codable & Sendable>: Codable, Sendable {
    public var specversion: String
    public var id: String
    public var source: String
    public var type: String
    public var time: String?
    public var datacontenttype: String?
    public var traceparent: String?
    public var data: Payload

    /// - Parameters:
    ///   - id: unique per event; stable across re-publication, so consumers can deduplicate.
    ///   - source: a URI reference naming the emitter (`/auth-worker`).
    ///   - type: `auth.login.result`, `auth.user.created`, …
    public init(
        id: String, source: String, type: String, time: Date?, traceparent: String? = nil, data: Payload
    ) {
        self.specversion = "1.0"
        self.id = id
        self.source = source
        self.type = type
        self.time = time.map(Timestamp.format)
        self.datacontenttype = "application/json"
        self.traceparent = traceparent
        self.data = data
    }

    /// The MIME type of a structured-mode CloudEvent, sent as the `content-type` header.
    public static var contentType: String { "application/cloudevents+json" }
}

/// RFC 3339 timestamps in UTC with whole seconds, as the contract shows them.
public enum Timestamp {
    /// `2026-11-29T12:00:00Z` (`RFC3339.format`, whole seconds).
    public static func format(_ date: Date) -> String { RFC3339.format(date) }

    /// Parses RFC 3339 with or without fractional seconds; nil when it is not one.
    public static func parse(_ text: String) -> Date? {
        if let date = try? Date(text, strategy: .iso8601) { return date }
        let fractional = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        return try? fractional.parse(text)
    }
}

/// The JSON coders every message uses: stable key order, no escaped slashes.
public enum MessageCoding {
    /// Encodes a message value (the messages of every request write themselves: `JSONWritable`).
    public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        if let writable = value as? any JSONWritable { return writable.jsonBytes }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array(try encoder.encode(value))
    }

    /// Decodes a message value.
    public static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        try JSONDecoder().decode(type, from: Data(bytes))
    }
}
