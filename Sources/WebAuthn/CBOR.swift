/// A CBOR data item (RFC 8949), as WebAuthn uses them: integers, byte and text strings, arrays,
/// maps, booleans and null. Floats and tags never occur in attestation objects or COSE keys and
/// are refused.
public indirect enum CBORValue: Sendable, Equatable {
    case integer(Int64)
    case bytes([UInt8])
    case text(String)
    case array([CBORValue])
    /// Entries in the order they were read; keys are unique.
    case map([CBORMapEntry])
    case bool(Bool)
    case null

    /// The value under an integer key of a map (COSE keys are integers).
    public subscript(key: Int64) -> CBORValue? {
        guard case .map(let entries) = self else { return nil }
        return entries.first { $0.key == .integer(key) }?.value
    }

    /// The value under a text key of a map.
    public subscript(key: String) -> CBORValue? {
        guard case .map(let entries) = self else { return nil }
        return entries.first { $0.key == .text(key) }?.value
    }

    public var bytesValue: [UInt8]? {
        if case .bytes(let bytes) = self { return bytes }
        return nil
    }

    public var integerValue: Int64? {
        if case .integer(let value) = self { return value }
        return nil
    }

    public var textValue: String? {
        if case .text(let value) = self { return value }
        return nil
    }
}

/// One key and value of a CBOR map.
public struct CBORMapEntry: Sendable, Equatable {
    public var key: CBORValue
    public var value: CBORValue

    public init(key: CBORValue, value: CBORValue) {
        self.key = key
        self.value = value
    }
}

/// A strict CBOR reader for what authenticators send.
///
/// Refused: indefinite lengths, integers not in their shortest form, map keys other than integers
/// and text, duplicate map keys, text that is not UTF-8, floats, tags, simple values other than
/// false/true/null, nesting deeper than `maximumDepth`, more than `maximumItems` items in all, a
/// length past the end of the input, and (for `decode`) bytes after the item.
public enum CBOR {
    public static let maximumDepth = 16
    public static let maximumItems = 4096

    /// Why bytes are not acceptable CBOR, and where.
    public struct Failure: Error, Equatable, Sendable, CustomStringConvertible {
        public var reason: String
        public var offset: Int
        public var description: String { "\(reason) at byte \(offset)" }
    }

    /// The one item `bytes` holds.
    public static func decode(_ bytes: [UInt8]) throws(Failure) -> CBORValue {
        var reader = Reader(bytes: bytes[...])
        let value = try reader.item(depth: 0)
        guard reader.position == bytes.endIndex else {
            throw Failure(reason: "trailing bytes after the item", offset: reader.position)
        }
        return value
    }

    /// The item at the start of `bytes`, and the index just past it (for items followed by more,
    /// as the credential key in authenticator data is).
    public static func decodePrefix(_ bytes: ArraySlice<UInt8>) throws(Failure) -> (CBORValue, end: Int) {
        var reader = Reader(bytes: bytes)
        let value = try reader.item(depth: 0)
        return (value, reader.position)
    }

    private struct Reader {
        let bytes: ArraySlice<UInt8>
        var position: Int
        var items = 0

        init(bytes: ArraySlice<UInt8>) {
            self.bytes = bytes
            position = bytes.startIndex
        }

        func fail(_ reason: String, at offset: Int? = nil) -> Failure {
            Failure(reason: reason, offset: (offset ?? position) - bytes.startIndex)
        }

        mutating func byte() throws(Failure) -> UInt8 {
            guard position < bytes.endIndex else { throw fail("unexpected end of input") }
            defer { position += 1 }
            return bytes[position]
        }

        mutating func take(_ count: UInt64) throws(Failure) -> ArraySlice<UInt8> {
            guard count <= UInt64(bytes.endIndex - position) else { throw fail("length past the end of the input") }
            let end = position + Int(count)
            defer { position = end }
            return bytes[position..<end]
        }

        /// The argument of a head: its additional information, in the shortest form only.
        mutating func argument(_ info: UInt8, start: Int) throws(Failure) -> UInt64 {
            switch info {
            case 0..<24:
                return UInt64(info)
            case 24, 25, 26, 27:
                let size = 1 << Int(info - 24)
                var value: UInt64 = 0
                for byte in try take(UInt64(size)) { value = value << 8 | UInt64(byte) }
                let smallest: UInt64 =
                    switch size {
                    case 1: 24
                    case 2: 0x100
                    case 4: 0x1_0000
                    default: 0x1_0000_0000
                    }
                guard value >= smallest else { throw fail("integer not in its shortest form", at: start) }
                return value
            case 31:
                throw fail("indefinite lengths are not accepted", at: start)
            default:
                throw fail("reserved additional information \(info)", at: start)
            }
        }

        mutating func item(depth: Int) throws(Failure) -> CBORValue {
            guard depth < CBOR.maximumDepth else { throw fail("nested deeper than \(CBOR.maximumDepth)") }
            items += 1
            guard items <= CBOR.maximumItems else { throw fail("more than \(CBOR.maximumItems) items") }
            let start = position
            let head = try byte()
            let major = head >> 5
            let info = head & 0x1F
            switch major {
            case 0:
                let value = try argument(info, start: start)
                guard value <= UInt64(Int64.max) else { throw fail("integer out of range", at: start) }
                return .integer(Int64(value))
            case 1:
                let value = try argument(info, start: start)
                guard value <= UInt64(Int64.max) else { throw fail("integer out of range", at: start) }
                return .integer(-1 - Int64(value))
            case 2:
                return .bytes(Array(try take(try argument(info, start: start))))
            case 3:
                let raw = try take(try argument(info, start: start))
                guard let text = String(validating: raw, as: UTF8.self) else {
                    throw fail("text string is not UTF-8", at: start)
                }
                return .text(text)
            case 4:
                let count = try argument(info, start: start)
                guard count <= UInt64(bytes.endIndex - position) else {
                    throw fail("length past the end of the input", at: start)
                }
                var elements: [CBORValue] = []
                elements.reserveCapacity(Int(count))
                for _ in 0..<count { elements.append(try item(depth: depth + 1)) }
                return .array(elements)
            case 5:
                let count = try argument(info, start: start)
                guard count <= UInt64(bytes.endIndex - position) / 2 else {
                    throw fail("length past the end of the input", at: start)
                }
                var entries: [CBORMapEntry] = []
                entries.reserveCapacity(Int(count))
                // Keys seen, by kind: a hash each, so a map of thousands of entries is checked in
                // linear time (an unauthenticated sign-in can carry one).
                var integerKeys = Set<Int64>()
                var textKeys = Set<String>()
                for _ in 0..<count {
                    let keyStart = position
                    let key = try item(depth: depth + 1)
                    let isNew: Bool
                    switch key {
                    case .integer(let value): isNew = integerKeys.insert(value).inserted
                    case .text(let value): isNew = textKeys.insert(value).inserted
                    default: throw fail("map keys must be integers or text", at: keyStart)
                    }
                    guard isNew else { throw fail("duplicate map key", at: keyStart) }
                    entries.append(CBORMapEntry(key: key, value: try item(depth: depth + 1)))
                }
                return .map(entries)
            case 6:
                throw fail("tags are not accepted", at: start)
            default:
                switch info {
                case 20: return .bool(false)
                case 21: return .bool(true)
                case 22: return .null
                case 25, 26, 27: throw fail("floating-point values are not accepted", at: start)
                case 31: throw fail("unexpected break", at: start)
                default: throw fail("simple value \(info) is not accepted", at: start)
                }
            }
        }
    }
}
