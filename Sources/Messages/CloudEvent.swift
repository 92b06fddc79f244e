import Foundation
import StrictJSON

/// A CloudEvents 1.0 envelope in structured JSON mode.
///
/// `traceparent` is the W3C trace-context extension: copied from a request to everything emitted for it.
/// `tenant` is this service's extension: the tenant a request is for, absent for the default one
/// (`Tenant`); a result carries the one its request named.
public struct CloudEvent<Payload: Decodable & Sendable>: Decodable, Sendable {
    public var specversion: String
    public var id: String
    public var source: String
    public var type: String
    public var time: String?
    public var datacontenttype: String?
    public var traceparent: String?
    public var tenant: String?
    public var data: Payload

    /// - Parameters:
    ///   - id: unique per event; stable across re-publication, so consumers can deduplicate.
    ///   - source: a URI reference naming the emitter (`/auth-worker`).
    ///   - type: `auth.login.result`, `auth.user.created`, …
    public init(
        id: String, source: String, type: String, time: Date?, traceparent: String? = nil, tenant: String? = nil,
        data: Payload
    ) {
        self.specversion = "1.0"
        self.id = id
        self.source = source
        self.type = type
        self.time = time.map(Timestamp.format)
        self.datacontenttype = "application/json"
        self.traceparent = traceparent
        self.tenant = tenant
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
            out.member(CodingKeys.tenant, tenant)
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
        id: String, source: String, type: String, time: Date?, traceparent: String?, tenant: String? = nil,
        data: [UInt8]
    ) -> [UInt8] {
        var writer = JSONWriter(capacity: data.count + 256)
        writer.object { out in
            out.member(CodingKeys.data, raw: data)
            out.member(CodingKeys.datacontenttype, "application/json")
            out.member(CodingKeys.id, id)
            out.member(CodingKeys.source, source)
            out.member(CodingKeys.specversion, "1.0")
            out.member(CodingKeys.tenant, tenant)
            out.member(CodingKeys.time, time.map(Timestamp.format))
            out.member(CodingKeys.traceparent, traceparent)
            out.member(CodingKeys.type, type)
        }
        return writer.bytes
    }
}

/// A structured CloudEvent (as the outbox keeps every event) in binary content mode: each string
/// attribute as a `ce_` header (`datacontenttype` as `content-type`), the `data` member's bytes,
/// as written, as the value.
public struct BinaryCloudEvent: Sendable {
    /// The Kafka headers, in name order, `content-type` among them.
    public let headers: [(key: String, value: String)]
    public let data: [UInt8]

    /// Nil when `structured` is not a CloudEvent with an object `data` (the caller then
    /// publishes it structured: an event is never lost to its form).
    public init?(structured: [UInt8]) {
        guard let members = try? JSONReader.object(structured), case .object = members["data"],
            let data = Self.memberValue(named: "data", in: structured)
        else { return nil }
        var headers: [(key: String, value: String)] = []
        for (name, value) in members.sorted(by: { $0.key < $1.key }) {
            guard case .string(let text) = value else { continue }
            headers.append((key: name == "datacontenttype" ? "content-type" : "ce_" + name, value: text))
        }
        if !headers.contains(where: { $0.key == "content-type" }) {
            headers.append((key: "content-type", value: "application/json"))
        }
        self.headers = headers
        self.data = data
    }

    /// The bytes of the top-level member `name`'s value in a JSON object (valid JSON: it was
    /// parsed already), found by walking the object's members: strings with their escapes, nested
    /// objects and arrays by depth.
    static func memberValue(named name: String, in json: [UInt8]) -> [UInt8]? {
        let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\")
        var index = 0
        func skipSpace() {
            while index < json.count, [0x20, 0x0A, 0x0D, 0x09].contains(json[index]) { index += 1 }
        }
        /// Moves past the string whose opening quote is at `index`; returns its raw bytes.
        func skipString() -> ArraySlice<UInt8> {
            index += 1
            let start = index
            while index < json.count, json[index] != quote { index += json[index] == backslash ? 2 : 1 }
            let end = min(index, json.count)
            index += 1
            return json[start..<end]
        }
        /// Moves past the value starting at `index`, to the `,` or `}` after it.
        func skipValue() {
            var depth = 0
            while index < json.count {
                switch json[index] {
                case quote:
                    _ = skipString()
                    if depth == 0 { return }
                    continue
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    if depth == 0 { return }
                    depth -= 1
                    if depth == 0 {
                        index += 1
                        return
                    }
                case UInt8(ascii: ","):
                    if depth == 0 { return }
                default:
                    break
                }
                index += 1
            }
        }
        skipSpace()
        guard index < json.count, json[index] == UInt8(ascii: "{") else { return nil }
        index += 1
        while index < json.count {
            skipSpace()
            guard index < json.count, json[index] == quote else { return nil }
            let key = skipString()
            skipSpace()
            guard index < json.count, json[index] == UInt8(ascii: ":") else { return nil }
            index += 1
            skipSpace()
            let start = index
            skipValue()
            if key.elementsEqual(name.utf8) {
                var end = index
                while end > start, [0x20, 0x0A, 0x0D, 0x09].contains(json[end - 1]) { end -= 1 }
                return Array(json[start..<end])
            }
            skipSpace()
            guard index < json.count, json[index] == UInt8(ascii: ",") else { return nil }
            index += 1
        }
        return nil
    }
}

/// Tenants: the apps one deployment serves, each named by a request's `tenant` attribute
/// (`[a-z0-9-]{1,32}`). A request without one is the default tenant's: the deployment's own
/// configuration, as before tenants.
public enum Tenant {
    /// The default tenant's name: what a request without `tenant` is for, and may name.
    public static let defaultName = "default"

    /// True for 1 to 32 of `a`–`z`, `0`–`9` and `-`.
    public static func isValidName(_ name: String) -> Bool {
        let utf8 = name.utf8
        return (1...32).contains(utf8.count)
            && utf8.allSatisfy {
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || $0 == UInt8(ascii: "-")
            }
    }
}
