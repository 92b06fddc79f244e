import Foundation

/// A Swift value that can be sent as a parameter in PostgreSQL's text format.
public protocol PGEncodable: Sendable {
    /// The text PostgreSQL parses for this value.
    var pgText: String { get }
}

/// A Swift value that can be read from PostgreSQL's text output.
public protocol PGDecodable: Sendable {
    /// Parses the server's text; nil when it does not fit the type.
    init?(pgText: String)
}

extension String: PGEncodable, PGDecodable {
    public var pgText: String { self }
    public init?(pgText: String) { self = pgText }
}

extension Int: PGEncodable, PGDecodable {
    public var pgText: String { String(self) }
    public init?(pgText: String) { self.init(pgText, radix: 10) }
}

extension Int64: PGEncodable, PGDecodable {
    public var pgText: String { String(self) }
    public init?(pgText: String) { self.init(pgText, radix: 10) }
}

extension Int32: PGEncodable, PGDecodable {
    public var pgText: String { String(self) }
    public init?(pgText: String) { self.init(pgText, radix: 10) }
}

extension Double: PGEncodable, PGDecodable {
    public var pgText: String { String(self) }
    public init?(pgText: String) { self.init(pgText) }
}

extension Bool: PGEncodable, PGDecodable {
    public var pgText: String { self ? "t" : "f" }
    public init?(pgText: String) {
        switch pgText {
        case "t", "true": self = true
        case "f", "false": self = false
        default: return nil
        }
    }
}

extension UUID: PGEncodable, PGDecodable {
    public var pgText: String {
        var out: [UInt8] = []
        appendPGText(to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// The canonical lower-case form, written directly.
    public func appendPGText(to buffer: inout [UInt8]) {
        withUnsafeBytes(of: uuid) { bytes in
            for (index, byte) in bytes.enumerated() {
                if index == 4 || index == 6 || index == 8 || index == 10 { buffer.append(UInt8(ascii: "-")) }
                buffer.append(Hexadecimal.digit(byte >> 4))
                buffer.append(Hexadecimal.digit(byte & 0x0F))
            }
        }
    }

    public init?(pgText: String) { self.init(uuidString: pgText) }
}

/// Lower-case hex digits without a table lookup.
enum Hexadecimal {
    @inline(__always) static func digit(_ nibble: UInt8) -> UInt8 { nibble < 10 ? 0x30 + nibble : 0x57 + nibble }
}

/// `bytea`, sent and read in hex format (`\x0a1b…`).
public struct PGBytes: PGEncodable, PGDecodable, Equatable, Hashable {
    public var bytes: [UInt8]

    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    public var pgText: String {
        var out: [UInt8] = []
        appendPGText(to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends `\\x` and the hex digits, writing them in place (the buffer grows geometrically).
    public func appendPGText(to buffer: inout [UInt8]) {
        let start = buffer.count
        let needed = start + 2 + bytes.count * 2
        if buffer.capacity < needed { buffer.reserveCapacity(Swift.max(needed, buffer.capacity * 2)) }
        buffer.append(contentsOf: repeatElement(0, count: needed - start))
        buffer.withUnsafeMutableBufferPointer { out in
            out[start] = UInt8(ascii: "\\")
            out[start + 1] = UInt8(ascii: "x")
            var index = start + 2
            for byte in bytes {
                out[index] = Hexadecimal.digit(byte >> 4)
                out[index + 1] = Hexadecimal.digit(byte & 0x0F)
                index += 2
            }
        }
    }

    public init?(pgText: String) {
        let utf8 = Array(pgText.utf8)
        guard utf8.count >= 2, utf8[0] == UInt8(ascii: "\\"), utf8[1] == UInt8(ascii: "x"), utf8.count % 2 == 0 else {
            return nil
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity((utf8.count - 2) / 2)
        var index = 2
        while index < utf8.count {
            guard let high = Self.nibble(utf8[index]), let low = Self.nibble(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        self.bytes = bytes
    }

    private static func nibble(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): character - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): character - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): character - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// `timestamptz`, sent as ISO 8601 in UTC and read from the ISO output style with a numeric offset.
///
/// Connections set `TimeZone=UTC` and `DateStyle=ISO`, so the server prints
/// `2026-11-29 12:00:00.123456+00`.
extension Date: PGEncodable, PGDecodable {
    public var pgText: String {
        var out: [UInt8] = []
        appendPGText(to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// `yyyy-mm-ddThh:mm:ss.ffffffZ`, written digit by digit (this runs for every row of a batch).
    public func appendPGText(to buffer: inout [UInt8]) {
        let totalMicros = Int64((timeIntervalSince1970 * 1_000_000).rounded())
        let whole = totalMicros >= 0 ? totalMicros / 1_000_000 : (totalMicros - 999_999) / 1_000_000
        let micros = Int(totalMicros - whole * 1_000_000)
        let parts = Self.gmtime(Int(whole))
        func digits(_ value: Int, _ count: Int) {
            var divisor = 1
            for _ in 1..<count { divisor *= 10 }
            var rest = max(value, 0)
            while divisor > 0 {
                buffer.append(UInt8(ascii: "0") + UInt8(rest / divisor % 10))
                rest %= divisor
                divisor /= 10
            }
        }
        digits(parts.year, 4)
        buffer.append(UInt8(ascii: "-"))
        digits(parts.month, 2)
        buffer.append(UInt8(ascii: "-"))
        digits(parts.day, 2)
        buffer.append(UInt8(ascii: "T"))
        digits(parts.hour, 2)
        buffer.append(UInt8(ascii: ":"))
        digits(parts.minute, 2)
        buffer.append(UInt8(ascii: ":"))
        digits(parts.second, 2)
        buffer.append(UInt8(ascii: "."))
        digits(micros, 6)
        buffer.append(UInt8(ascii: "Z"))
    }

    public init?(pgText: String) {
        // yyyy-mm-dd hh:mm:ss[.ffffff](+|-)hh[:mm]
        let bytes = Array(pgText.utf8)
        guard bytes.count >= 22 else { return nil }
        func number(_ start: Int, _ length: Int) -> Int? {
            var value = 0
            for index in start..<(start + length) {
                guard index < bytes.count, bytes[index] >= 48, bytes[index] <= 57 else { return nil }
                value = value * 10 + Int(bytes[index] - 48)
            }
            return value
        }
        guard let year = number(0, 4), let month = number(5, 2), let day = number(8, 2), let hour = number(11, 2),
            let minute = number(14, 2), let second = number(17, 2)
        else { return nil }
        var index = 19
        var fraction = 0.0
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            var scale = 0.1
            while index < bytes.count, bytes[index] >= 48, bytes[index] <= 57 {
                fraction += Double(bytes[index] - 48) * scale
                scale /= 10
                index += 1
            }
        }
        guard index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-"),
            let offsetHours = number(index + 1, 2)
        else { return nil }
        let sign = bytes[index] == UInt8(ascii: "+") ? 1 : -1
        var offsetMinutes = 0
        if index + 3 < bytes.count, bytes[index + 3] == UInt8(ascii: ":"), let minutes = number(index + 4, 2) {
            offsetMinutes = minutes
        }
        let days = Self.daysFromCivil(year: year, month: month, day: day)
        let epoch =
            Double(days * 86400 + hour * 3600 + minute * 60 + second) + fraction
            - Double(sign * (offsetHours * 3600 + offsetMinutes * 60))
        self.init(timeIntervalSince1970: epoch)
    }

    /// Days since 1970-01-01 in the proleptic Gregorian calendar (Howard Hinnant's algorithm).
    static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146097 + dayOfEra - 719468
    }

    private static func gmtime(_ epoch: Int) -> (year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) {
        let days = epoch >= 0 ? epoch / 86400 : (epoch - 86399) / 86400
        let secondsOfDay = epoch - days * 86400
        let z = days + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let dayOfEra = z - era * 146097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        return (year, month, day, secondsOfDay / 3600, secondsOfDay % 3600 / 60, secondsOfDay % 60)
    }
}

/// `text[]` as a text parameter: an array literal with every element quoted (`PGArray` sends
/// arrays in binary).
extension Array: PGEncodable where Element == String {
    public var pgText: String { PGArray.literal(self) }
}

/// An array parameter, NULL elements allowed, sent in PostgreSQL's binary format and cast to its
/// element type's array in the statement: `= ANY(\(PGArray(ids)))` reads `= ANY($1::uuid[])`.
///
/// Batched writes bind one array per column and read them back with `unnest`, so a thousand rows
/// cost one statement. Binary, because the server parses a text array literal character by
/// character (`array_in` was about 40 % of PostgreSQL's CPU in a full batch of guest sign-ups),
/// while it takes a binary array element by element, at their lengths. The cast comes from the
/// element's Swift type, so the statement's type and the array's header cannot disagree.
public struct PGArray: Sendable {
    public let count: Int
    /// The array type the statement casts the parameter to (`uuid[]`).
    public let typeName: String
    /// The array in binary format.
    public let parameter: PGParameter

    @inlinable public init<Element: PGArrayElement>(_ values: [Element]) {
        self.init(values.count, Element.self) { index, buffer in
            values[index].appendPGBinary(to: &buffer)
            return true
        }
    }

    @inlinable public init<Element: PGArrayElement>(_ values: [Element?]) {
        self.init(values.count, Element.self) { index, buffer in
            guard let value = values[index] else { return false }
            value.appendPGBinary(to: &buffer)
            return true
        }
    }

    /// The header (dimensions, NULL flag, element type, length and lower bound), then each
    /// element as its length and bytes (length -1: NULL).
    /// Inlinable, as the two above, so each element type's loop is specialized where it is used
    /// (a batch's arrays, generic across the module boundary, were about 4 % of the worker's CPU).
    @inlinable init<Element: PGArrayElement>(
        _ count: Int, _ type: Element.Type, _ element: (Int, inout [UInt8]) -> Bool
    ) {
        self.count = count
        typeName = Element.pgTypeName + "[]"
        var out: [UInt8] = []
        out.reserveCapacity(20 + count * (4 + Element.pgBinarySizeHint))
        func int32(_ value: Int32) { out.appendBigEndian(value) }
        int32(count == 0 ? 0 : 1)
        let flagsAt = out.count
        int32(0)
        int32(Int32(bitPattern: Element.pgTypeOID))
        if count > 0 {
            int32(Int32(clamping: count))
            int32(1)
        }
        var hasNulls = false
        var hasNUL = false
        for index in 0..<count {
            let lengthAt = out.count
            int32(0)
            guard element(index, &out) else {
                // Length -1; a NULL element writes no bytes of its own.
                out.removeSubrange((lengthAt + 4)...)
                for offset in 0..<4 { out[lengthAt + offset] = 0xFF }
                hasNulls = true
                continue
            }
            let length = out.count - lengthAt - 4
            if Element.mayHoldNUL, !hasNUL { hasNUL = out[(lengthAt + 4)...].contains(0) }
            let bits = UInt32(bitPattern: Int32(clamping: length))
            out[lengthAt] = UInt8(truncatingIfNeeded: bits >> 24)
            out[lengthAt + 1] = UInt8(truncatingIfNeeded: bits >> 16)
            out[lengthAt + 2] = UInt8(truncatingIfNeeded: bits >> 8)
            out[lengthAt + 3] = UInt8(truncatingIfNeeded: bits)
        }
        if hasNulls { out[flagsAt + 3] = 1 }
        parameter = PGParameter(binary: out, containsNUL: hasNUL)
    }

    /// `{"…","…",NULL}`, every element quoted, its `"` and `\\` escaped: the text form of a
    /// `text[]` value (`[String].pgText`).
    @usableFromInline static func literal(_ values: [String]) -> String {
        var out: [UInt8] = [UInt8(ascii: "{")]
        for (index, value) in values.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "\""))
            for byte in value.utf8 {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { out.append(UInt8(ascii: "\\")) }
                out.append(byte)
            }
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }
}

/// A type whose values can be the elements of a `PGArray`: its SQL name, its OID, and its
/// binary form as PostgreSQL's `*_recv` function reads it.
public protocol PGArrayElement: Sendable {
    /// The type's name in SQL (`uuid`).
    static var pgTypeName: String { get }
    /// The type's OID (`pg_type.oid`), named in a binary array's header.
    static var pgTypeOID: UInt32 { get }
    /// About how many bytes an element takes (to reserve the array's buffer once).
    static var pgBinarySizeHint: Int { get }
    /// Whether an element's bytes can hold a NUL that the type does not allow (text does not).
    static var mayHoldNUL: Bool { get }
    /// Appends the value in binary format, without its length.
    func appendPGBinary(to buffer: inout [UInt8])
}

extension PGArrayElement {
    @inlinable public static var mayHoldNUL: Bool { false }
}

extension UUID: PGArrayElement {
    public static var pgTypeName: String { "uuid" }
    public static var pgTypeOID: UInt32 { 2950 }
    public static var pgBinarySizeHint: Int { 16 }
    @inlinable public func appendPGBinary(to buffer: inout [UInt8]) {
        withUnsafeBytes(of: uuid) { buffer.append(contentsOf: $0) }
    }
}

extension String: PGArrayElement {
    public static var pgTypeName: String { "text" }
    public static var pgTypeOID: UInt32 { 25 }
    public static var pgBinarySizeHint: Int { 24 }
    /// PostgreSQL's text holds no NUL: a parameter with one is refused before it is sent.
    @inlinable public static var mayHoldNUL: Bool { true }
    @inlinable public func appendPGBinary(to buffer: inout [UInt8]) {
        buffer.append(contentsOf: utf8)
    }
}

/// A `text[]` value as one text element, its array literal, for a statement that casts the
/// element back (`unnest($1::text[]) AS t(abilities)` … `abilities::text[]`): a column of arrays
/// in one parameter.
extension Array: PGArrayElement where Element == String {
    public static var pgTypeName: String { "text" }
    public static var pgTypeOID: UInt32 { 25 }
    public static var pgBinarySizeHint: Int { 32 }
    @inlinable public static var mayHoldNUL: Bool { true }
    @inlinable public func appendPGBinary(to buffer: inout [UInt8]) {
        buffer.append(contentsOf: PGArray.literal(self).utf8)
    }
}

extension Bool: PGArrayElement {
    public static var pgTypeName: String { "boolean" }
    public static var pgTypeOID: UInt32 { 16 }
    public static var pgBinarySizeHint: Int { 1 }
    @inlinable public func appendPGBinary(to buffer: inout [UInt8]) {
        buffer.append(self ? 1 : 0)
    }
}

/// An integer in binary: its bytes, big-endian.
extension PGArrayElement where Self: FixedWidthInteger {
    public static var pgBinarySizeHint: Int { MemoryLayout<Self>.size }
    @inlinable public func appendPGBinary(to buffer: inout [UInt8]) {
        buffer.appendBigEndian(self)
    }
}

extension Array where Element == UInt8 {
    /// The integer's bytes, most significant first, each appended on its own: into a reserved
    /// buffer that is cheaper than `append(contentsOf:)` of the value's bytes, which goes
    /// through a buffer of its own for every value.
    @inlinable mutating func appendBigEndian<T: FixedWidthInteger>(_ value: T) {
        var shift = T.bitWidth - 8
        while shift >= 0 {
            append(UInt8(truncatingIfNeeded: value >> shift))
            shift -= 8
        }
    }
}

extension Int32: PGArrayElement {
    public static var pgTypeName: String { "integer" }
    public static var pgTypeOID: UInt32 { 23 }
}

extension Int64: PGArrayElement {
    public static var pgTypeName: String { "bigint" }
    public static var pgTypeOID: UInt32 { 20 }
}

extension PGBytes: PGArrayElement {
    public static var pgTypeName: String { "bytea" }
    public static var pgTypeOID: UInt32 { 17 }
    public static var pgBinarySizeHint: Int { 32 }
    @inlinable public func appendPGBinary(to buffer: inout [UInt8]) {
        buffer.append(contentsOf: bytes)
    }
}

/// `timestamptz` in binary: microseconds since 2000-01-01 00:00:00 UTC, as an 8-byte integer
/// (rounded to the microsecond, as the text form is).
extension Date: PGArrayElement {
    public static var pgTypeName: String { "timestamptz" }
    public static var pgTypeOID: UInt32 { 1184 }
    public static var pgBinarySizeHint: Int { 8 }
    /// Seconds from 1970-01-01 to 2000-01-01.
    @usableFromInline static let postgresEpoch: Int64 = 946_684_800
    @inlinable public func appendPGBinary(to buffer: inout [UInt8]) {
        let micros = Int64((timeIntervalSince1970 * 1_000_000).rounded()) - Self.postgresEpoch * 1_000_000
        buffer.appendBigEndian(micros)
    }
}

/// A parameter's value as libpq sends it: text (the type's input syntax) or binary.
public struct PGParameter: Sendable, Equatable {
    /// The value's bytes (for text, its UTF-8, without a terminating NUL).
    public let bytes: [UInt8]
    public let isBinary: Bool
    /// Whether it holds a NUL byte where the server allows none: libpq would cut a text
    /// parameter short there, and text array elements cannot hold one.
    let containsNUL: Bool

    public init(text: String) {
        bytes = Array(text.utf8)
        isBinary = false
        containsNUL = bytes.contains(0)
    }

    @usableFromInline init(binary: [UInt8], containsNUL: Bool) {
        bytes = binary
        isBinary = true
        self.containsNUL = containsNUL
    }

    /// The text of a text parameter (nil for a binary one).
    public var text: String? { isBinary ? nil : String(decoding: bytes, as: UTF8.self) }
}

extension Array: PGDecodable where Element == String {
    public init?(pgText: String) {
        let scalars = [Unicode.Scalar](pgText.unicodeScalars)
        guard scalars.first == "{", scalars.last == "}" else { return nil }
        var result: [String] = []
        var index = 1
        let end = scalars.count - 1
        if index == end {
            self = []
            return
        }
        while index < end {
            var element = String.UnicodeScalarView()
            if scalars[index] == "\"" {
                index += 1
                while index < end, scalars[index] != "\"" {
                    if scalars[index] == "\\" { index += 1 }
                    guard index < end else { return nil }
                    element.append(scalars[index])
                    index += 1
                }
                guard index < end else { return nil }
                index += 1
            } else {
                while index < end, scalars[index] != "," {
                    element.append(scalars[index])
                    index += 1
                }
            }
            result.append(String(element))
            if index < end {
                guard scalars[index] == "," else { return nil }
                index += 1
            }
        }
        self = result
    }
}
