/// A JSON value as the token reader sees it.
public enum JSONValue: Sendable, Equatable {
    case string(String)
    case number(Double)
    case bool(Bool)
    case null
    case array([JSONValue])
    case object([String: JSONValue])
}

/// A small strict JSON reader for JOSE headers and claims (RFC 8259).
///
/// Tokens arrive by the thousand per second and are tiny; Foundation's decoders cost more than
/// the signature check around them. This reader works on the bytes directly, and is stricter than
/// most: duplicate member names are refused (RFC 7515 §5.2 lets a verifier do so, and it removes
/// the "which `sub` wins" ambiguity), as are invalid UTF-8, unescaped control characters,
/// trailing data, and nesting deeper than `maximumDepth`.
public enum JSONReader {
    /// Why the bytes are not acceptable JSON; the offset helps debugging, the content is never echoed.
    public struct Failure: Error, Equatable, CustomStringConvertible {
        public var reason: String
        public var offset: Int
        public var description: String { "\(reason) at byte \(offset)" }
    }

    public static let maximumDepth = 16

    /// Parses bytes that must hold exactly one JSON object.
    public static func object(_ bytes: [UInt8]) throws -> [String: JSONValue] {
        try bytes.withUnsafeBufferPointer { buffer in
            var parser = Parser(bytes: buffer)
            parser.skipWhitespace()
            guard parser.peek == UInt8(ascii: "{") else { throw parser.failure("expected an object") }
            guard case .object(let members) = try parser.value(depth: 0) else {
                throw parser.failure("expected an object")
            }
            parser.skipWhitespace()
            guard parser.index == buffer.count else { throw parser.failure("trailing data") }
            return members
        }
    }

    /// Parses bytes that must hold exactly one JSON value of any kind (an API's list, say).
    public static func value(_ bytes: [UInt8]) throws -> JSONValue {
        try bytes.withUnsafeBufferPointer { buffer in
            var parser = Parser(bytes: buffer)
            parser.skipWhitespace()
            let value = try parser.value(depth: 0)
            parser.skipWhitespace()
            guard parser.index == buffer.count else { throw parser.failure("trailing data") }
            return value
        }
    }

    /// The top-level string member `name` of an object, read without building the rest: other
    /// members' values are skipped however deeply they nest. For answering a value the strict
    /// reader refuses (nested too deeply, a duplicate name inside) when its id can still be read.
    /// - Returns: nil unless the bytes are a well-formed object at its top level holding `name`
    ///   exactly once, as a string.
    public static func topLevelString(_ bytes: [UInt8], member name: String) -> String? {
        bytes.withUnsafeBufferPointer { buffer -> String? in
            var parser = Parser(bytes: buffer)
            parser.skipWhitespace()
            guard (try? parser.expect(UInt8(ascii: "{"))) != nil else { return nil }
            var found: String?
            var seen = 0
            parser.skipWhitespace()
            if parser.peek == UInt8(ascii: "}") { return nil }
            while true {
                parser.skipWhitespace()
                guard let key = try? parser.string() else { return nil }
                parser.skipWhitespace()
                guard (try? parser.expect(UInt8(ascii: ":"))) != nil else { return nil }
                parser.skipWhitespace()
                if key == name {
                    seen += 1
                    if parser.peek == UInt8(ascii: "\"") {
                        found = try? parser.string()
                    } else {
                        found = nil
                        guard parser.skipValue() else { return nil }
                    }
                } else {
                    guard parser.skipValue() else { return nil }
                }
                parser.skipWhitespace()
                if parser.peek == UInt8(ascii: ",") {
                    parser.index += 1
                    continue
                }
                guard parser.peek == UInt8(ascii: "}") else { return nil }
                parser.index += 1
                parser.skipWhitespace()
                guard parser.index == buffer.count, seen == 1 else { return nil }
                return found
            }
        }
    }

    struct Parser {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

        func failure(_ reason: String) -> Failure { Failure(reason: reason, offset: index) }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }

        mutating func expect(_ byte: UInt8) throws {
            guard peek == byte else { throw failure("expected '\(Character(Unicode.Scalar(byte)))'") }
            index += 1
        }

        mutating func value(depth: Int) throws -> JSONValue {
            guard depth <= JSONReader.maximumDepth else { throw failure("nested too deeply") }
            skipWhitespace()
            guard let byte = peek else { throw failure("unexpected end") }
            switch byte {
            case UInt8(ascii: "{"): return .object(try object(depth: depth))
            case UInt8(ascii: "["): return .array(try array(depth: depth))
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): return try literal("true", .bool(true))
            case UInt8(ascii: "f"): return try literal("false", .bool(false))
            case UInt8(ascii: "n"): return try literal("null", .null)
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
            default: throw failure("unexpected character")
            }
        }

        mutating func literal(_ text: StaticString, _ result: JSONValue) throws -> JSONValue {
            let count = text.utf8CodeUnitCount
            guard index + count <= bytes.count else { throw failure("unexpected end") }
            for offset in 0..<count where bytes[index + offset] != text.utf8Start[offset] {
                throw failure("bad literal")
            }
            index += count
            return result
        }

        mutating func object(depth: Int) throws -> [String: JSONValue] {
            try expect(UInt8(ascii: "{"))
            skipWhitespace()
            if peek == UInt8(ascii: "}") {
                index += 1
                return [:]
            }
            // A message's own objects (the top level and the one below: a request and its data)
            // get room for their members from the start: growing from empty rehashed two or three
            // times for each. Deeper objects grow as they fill, so many small ones in a value
            // cost no more memory than their members.
            var members = [String: JSONValue](minimumCapacity: depth <= 1 ? 8 : 0)
            while true {
                skipWhitespace()
                guard peek == UInt8(ascii: "\"") else { throw failure("expected a member name") }
                let name = try string()
                skipWhitespace()
                try expect(UInt8(ascii: ":"))
                let member = try value(depth: depth + 1)
                guard members.updateValue(member, forKey: name) == nil else {
                    throw failure("duplicate member name")
                }
                skipWhitespace()
                if peek == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                try expect(UInt8(ascii: "}"))
                return members
            }
        }

        mutating func array(depth: Int) throws -> [JSONValue] {
            try expect(UInt8(ascii: "["))
            var elements: [JSONValue] = []
            skipWhitespace()
            if peek == UInt8(ascii: "]") {
                index += 1
                return elements
            }
            while true {
                elements.append(try value(depth: depth + 1))
                skipWhitespace()
                if peek == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                try expect(UInt8(ascii: "]"))
                return elements
            }
        }

        mutating func string() throws -> String {
            try expect(UInt8(ascii: "\""))
            let start = index
            // Fast path: no escapes. ASCII needs no validation, and `String(decoding:)` of it is
            // exact; `String(validating:)` runs the standard library's generic validator, which
            // looks its type metadata up on every call (about a thousand instructions a string).
            var ascii = true
            // Eight bytes a step while none of them ends the fast path (a quote, a backslash, a
            // control character): a provider's token is a string of a thousand bytes or more, and
            // scanned a byte at a time it took 2 % of an Apple sign-in's instructions (this takes
            // 1 % off: `scripts/bench instructions apple`). The byte loop below takes over at the
            // word holding the first such byte, and finishes what is left of the string.
            if let base = bytes.baseAddress {
                let raw = UnsafeRawPointer(base)
                while index + 8 <= bytes.count {
                    let word = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: index, as: UInt64.self))
                    if Self.holdsQuoteBackslashOrControl(word) { break }
                    ascii = ascii && word & Self.highBits == 0
                    index += 8
                }
            }
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    let slice = UnsafeBufferPointer(rebasing: bytes[start..<index])
                    let decoded =
                        ascii ? String(decoding: slice, as: UTF8.self) : String(validating: slice, as: UTF8.self)
                    guard let text = decoded else { throw failure("invalid UTF-8") }
                    index += 1
                    return text
                }
                if byte == UInt8(ascii: "\\") { break }
                if byte < 0x20 { throw failure("control character in a string") }
                ascii = ascii && byte < 0x80
                index += 1
            }
            // Slow path: escapes.
            var scalars = [UInt8](UnsafeBufferPointer(rebasing: bytes[start..<index]))
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    guard let text = String(validating: scalars, as: UTF8.self) else { throw failure("invalid UTF-8") }
                    return text
                case UInt8(ascii: "\\"):
                    guard let escape = peek else { throw failure("unexpected end") }
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scalars.append(escape)
                    case UInt8(ascii: "b"): scalars.append(0x08)
                    case UInt8(ascii: "f"): scalars.append(0x0C)
                    case UInt8(ascii: "n"): scalars.append(0x0A)
                    case UInt8(ascii: "r"): scalars.append(0x0D)
                    case UInt8(ascii: "t"): scalars.append(0x09)
                    case UInt8(ascii: "u"):
                        var code = try hex4()
                        if (0xD800...0xDBFF).contains(code) {
                            guard peek == UInt8(ascii: "\\"), index + 1 < bytes.count,
                                bytes[index + 1] == UInt8(ascii: "u")
                            else { throw failure("unpaired surrogate") }
                            index += 2
                            let low = try hex4()
                            guard (0xDC00...0xDFFF).contains(low) else { throw failure("unpaired surrogate") }
                            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        } else if (0xDC00...0xDFFF).contains(code) {
                            throw failure("unpaired surrogate")
                        }
                        guard let scalar = Unicode.Scalar(code) else { throw failure("bad escape") }
                        scalars.append(contentsOf: String(Character(scalar)).utf8)
                    default:
                        throw failure("bad escape")
                    }
                default:
                    if byte < 0x20 { throw failure("control character in a string") }
                    scalars.append(byte)
                }
            }
            throw failure("unterminated string")
        }

        static var lowBits: UInt64 { 0x0101_0101_0101_0101 }
        static var highBits: UInt64 { 0x8080_8080_8080_8080 }

        /// The high bit of each byte of `word` that is below `limit` (at most 0x80), and perhaps
        /// of bytes above such a byte: subtracting `limit` from a byte below it sets that byte's
        /// high bit, which `~word` keeps only for bytes below 0x80, and borrows from the next
        /// byte up. So the mask is zero exactly when no byte is below the limit.
        @inline(__always) static func bytes(below limit: UInt8, in word: UInt64) -> UInt64 {
            (word &- lowBits &* UInt64(limit)) & ~word & highBits
        }

        /// Whether any byte of `word` is a quote, a backslash or below 0x20: the bytes that end a
        /// string's fast path. A byte equal to one is a zero byte of `word` XOR that byte.
        @inline(__always) static func holdsQuoteBackslashOrControl(_ word: UInt64) -> Bool {
            let quotes = bytes(below: 1, in: word ^ (lowBits &* 0x22))
            let backslashes = bytes(below: 1, in: word ^ (lowBits &* 0x5C))
            return quotes | backslashes | bytes(below: 0x20, in: word) != 0
        }

        mutating func hex4() throws -> UInt32 {
            guard index + 4 <= bytes.count else { throw failure("unexpected end") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt32
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
                default: throw failure("bad \\u escape")
                }
                value = value << 4 | digit
                index += 1
            }
            return value
        }

        /// RFC 8259 number grammar, checked here; the value converted by the standard library.
        mutating func number() throws -> Double {
            let start = index
            if peek == UInt8(ascii: "-") { index += 1 }
            guard let first = peek, first >= UInt8(ascii: "0"), first <= UInt8(ascii: "9") else {
                throw failure("bad number")
            }
            if first == UInt8(ascii: "0") {
                index += 1
            } else {
                skipDigits()
            }
            if peek == UInt8(ascii: ".") {
                index += 1
                guard skipDigits() > 0 else { throw failure("bad number") }
            }
            if peek == UInt8(ascii: "e") || peek == UInt8(ascii: "E") {
                index += 1
                if peek == UInt8(ascii: "+") || peek == UInt8(ascii: "-") { index += 1 }
                guard skipDigits() > 0 else { throw failure("bad number") }
            }
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            guard let value = Double(text), value.isFinite else { throw failure("bad number") }
            return value
        }

        /// Skips one value of any depth (iteratively: no recursion to exhaust); false when it is
        /// not well formed as far as brackets and strings go.
        mutating func skipValue() -> Bool {
            var depth = 0
            repeat {
                skipWhitespace()
                guard let byte = peek else { return false }
                switch byte {
                case UInt8(ascii: "\""):
                    guard (try? string()) != nil else { return false }
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    depth += 1
                    index += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    guard depth > 0 else { return false }
                    depth -= 1
                    index += 1
                case UInt8(ascii: ","), UInt8(ascii: ":"):
                    guard depth > 0 else { return false }
                    index += 1
                default:
                    // A literal or a number: up to the next delimiter.
                    let start = index
                    while let next = peek, ![0x20, 0x09, 0x0A, 0x0D, 0x2C, 0x5D, 0x7D, 0x3A].contains(next) {
                        index += 1
                    }
                    guard index > start else { return false }
                }
            } while depth > 0
            return true
        }

        @discardableResult
        mutating func skipDigits() -> Int {
            let start = index
            while let byte = peek, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") { index += 1 }
            return index - start
        }
    }
}
