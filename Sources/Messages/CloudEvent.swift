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
    /// `2026-11-29T12:00:00Z`: written digit by digit (several per message, so the format styles'
    /// cost showed), with the proleptic Gregorian calendar in UTC, years 0000 to 9999.
    public static func format(_ date: Date) -> String {
        let seconds = Int64(date.timeIntervalSince1970.rounded(.down))
        var days = seconds >= 0 ? seconds / 86400 : (seconds - 86399) / 86400
        let secondOfDay = Int(seconds - days * 86400)
        // Days to civil date (Howard Hinnant's algorithm).
        days += 719_468
        let era = (days >= 0 ? days : days - 146_096) / 146_097
        let dayOfEra = days - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = Int(dayOfYear - (153 * monthIndex + 2) / 5 + 1)
        let month = Int(monthIndex < 10 ? monthIndex + 3 : monthIndex - 9)
        let year = min(max(Int(yearOfEra + era * 400 + (month <= 2 ? 1 : 0)), 0), 9999)
        var out: [UInt8] = []
        out.reserveCapacity(20)
        func digits(_ value: Int, _ count: Int) {
            var divisor = 1
            for _ in 1..<count { divisor *= 10 }
            while divisor > 0 {
                out.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
                divisor /= 10
            }
        }
        digits(year, 4)
        out.append(UInt8(ascii: "-"))
        digits(month, 2)
        out.append(UInt8(ascii: "-"))
        digits(day, 2)
        out.append(UInt8(ascii: "T"))
        digits(secondOfDay / 3600, 2)
        out.append(UInt8(ascii: ":"))
        digits(secondOfDay % 3600 / 60, 2)
        out.append(UInt8(ascii: ":"))
        digits(secondOfDay % 60, 2)
        out.append(UInt8(ascii: "Z"))
        return String(decoding: out, as: UTF8.self)
    }

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
