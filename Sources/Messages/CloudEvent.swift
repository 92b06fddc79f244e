import Foundation
import StrictJSON

/// A CloudEvents 1.0 envelope in structured JSON mode.
///
/// `traceparent` is the W3C trace-context extension: copied from a request to everything emitted for it.
public struct CloudEvent<Payload: Decodable & Sendable>: Decodable, Sendable {
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

/// The JSON coders every message uses.
///
/// A message is written one way: by its own `JSONWritable.write(to:)` (members in sorted key
/// order, absent optionals omitted, `/` not escaped), and read by `Decodable`. No message type is
/// `Encodable`, so there is no second writer to keep in step; a test reads back what each writes.
public enum MessageCoding {
    /// A message's JSON.
    public static func encode(_ value: some JSONWritable) -> [UInt8] {
        value.jsonBytes
    }

    /// JSON for a document that is not a message (a command's output, a key set): `JSONEncoder`
    /// with sorted keys and slashes unescaped.
    public static func encodeDocument(_ value: some Encodable) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array(try encoder.encode(value))
    }

    /// Decodes a message value.
    public static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        try JSONDecoder().decode(type, from: Data(bytes))
    }
}

// Written here, beside the type: its `CodingKeys` (synthesized) are its own.
extension CloudEvent: JSONWritable where Payload: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.data, data)
            out.member(CodingKeys.datacontenttype, datacontenttype)
            out.member(CodingKeys.id, id)
            out.member(CodingKeys.source, source)
            out.member(CodingKeys.specversion, specversion)
            out.member(CodingKeys.time, time)
            out.member(CodingKeys.traceparent, traceparent)
            out.member(CodingKeys.type, type)
        }
    }
}

extension CloudEvent {
    /// The event's JSON with `data` given as JSON already written, the same bytes as encoding the
    /// whole event with `data` would give.
    public static func json(
        id: String, source: String, type: String, time: Date?, traceparent: String?, data: [UInt8]
    ) -> [UInt8] {
        var writer = JSONWriter(capacity: data.count + 256)
        writer.object { out in
            out.member(CodingKeys.data, raw: data)
            out.member(CodingKeys.datacontenttype, "application/json")
            out.member(CodingKeys.id, id)
            out.member(CodingKeys.source, source)
            out.member(CodingKeys.specversion, "1.0")
            out.member(CodingKeys.time, time.map(Timestamp.format))
            out.member(CodingKeys.traceparent, traceparent)
            out.member(CodingKeys.type, type)
        }
        return writer.bytes
    }
}
