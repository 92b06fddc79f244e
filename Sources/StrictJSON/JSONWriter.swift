/// Writes JSON directly into bytes: the one way every message is written.
///
/// `JSONEncoder` goes through `Codable`'s boxes and a sort of every object's keys; for a result,
/// an event and a kept answer per login it was most of the worker's CPU. A `JSONWritable` type
/// writes canonical JSON: members in sorted key order, absent optionals omitted, only what must
/// be escaped escaped (`/` and non-ASCII as they are). Message types are read by `Decodable` and
/// are not `Encodable`; a unit test reads back what each writes.
public struct JSONWriter {
    public private(set) var bytes: [UInt8]
    /// How many objects are open.
    private var depth = 0
    /// Per open object, whether a member has been written (so the next needs a comma): bit `d`
    /// for the object at depth `d` below 64 (no allocation for the writer's own messages), then
    /// `deeper` for a value nested further.
    private var written: UInt64 = 0
    private var deeper: [Bool] = []

    public init(capacity: Int = 512) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    /// `{`, the members `body` writes, `}`.
    public mutating func object(_ body: (inout JSONWriter) throws -> Void) rethrows {
        bytes.append(UInt8(ascii: "{"))
        if depth < 64 {
            written &= ~(1 << UInt64(depth))
        } else if depth - 64 < deeper.count {
            deeper[depth - 64] = false
        } else {
            deeper.append(false)
        }
        depth += 1
        try body(&self)
        depth -= 1
        bytes.append(UInt8(ascii: "}"))
    }

    /// A comma unless this is the innermost open object's first member.
    private mutating func separate() {
        let level = depth - 1
        if level < 64 {
            let bit: UInt64 = 1 << UInt64(level)
            if written & bit != 0 { bytes.append(UInt8(ascii: ",")) } else { written |= bit }
        } else {
            if deeper[level - 64] { bytes.append(UInt8(ascii: ",")) } else { deeper[level - 64] = true }
        }
    }

    /// A member's key; its value must follow. Keys are the code's own (ASCII, nothing to escape),
    /// written in sorted order by the caller.
    public mutating func key(_ key: StaticString) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        key.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
    }

    /// A member's key from its type's `CodingKeys`, where the member's wire name is spelled, once,
    /// for reading and writing alike (ASCII, nothing to escape).
    public mutating func key(_ key: some CodingKey) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: key.stringValue.utf8)
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
    }

    /// A member's key chosen at run time (escaped like any string).
    public mutating func key(_ key: String) {
        separate()
        string(key)
        bytes.append(UInt8(ascii: ":"))
    }

    public mutating func member(_ key: StaticString, _ value: String) {
        self.key(key)
        string(value)
    }

    /// Omitted when nil, as `encodeIfPresent` does.
    public mutating func member(_ key: StaticString, _ value: String?) {
        guard let value else { return }
        member(key, value)
    }

    public mutating func member(_ key: StaticString, _ value: Bool) {
        self.key(key)
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    public mutating func member(_ key: StaticString, _ value: Bool?) {
        guard let value else { return }
        member(key, value)
    }

    public mutating func member(_ key: StaticString, _ value: Int64) {
        self.key(key)
        bytes.append(contentsOf: String(value).utf8)
    }

    public mutating func member(_ key: StaticString, _ value: [String]) {
        self.key(key)
        bytes.append(UInt8(ascii: "["))
        for (index, element) in value.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            string(element)
        }
        bytes.append(UInt8(ascii: "]"))
    }

    /// A member whose value is JSON already written (a value encoded once, used twice).
    public mutating func member(_ key: StaticString, raw value: [UInt8]) {
        self.key(key)
        bytes.append(contentsOf: value)
    }

    /// A nested value, omitted when nil.
    public mutating func member(_ key: StaticString, _ value: (some JSONWritable)?) {
        guard let value else { return }
        self.key(key)
        value.write(to: &self)
    }

    /// An array of nested values, omitted when nil.
    public mutating func member<Element: JSONWritable>(_ key: StaticString, _ values: [Element]?) {
        guard let values else { return }
        self.key(key)
        bytes.append(UInt8(ascii: "["))
        for (index, element) in values.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            element.write(to: &self)
        }
        bytes.append(UInt8(ascii: "]"))
    }

    // The same members, keyed by a type's `CodingKeys`.

    public mutating func member(_ key: some CodingKey, _ value: String) {
        self.key(key)
        string(value)
    }

    /// Omitted when nil, as `encodeIfPresent` does.
    public mutating func member(_ key: some CodingKey, _ value: String?) {
        guard let value else { return }
        member(key, value)
    }

    public mutating func member(_ key: some CodingKey, _ value: Bool) {
        self.key(key)
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    public mutating func member(_ key: some CodingKey, _ value: Bool?) {
        guard let value else { return }
        member(key, value)
    }

    public mutating func member(_ key: some CodingKey, _ value: Int64) {
        self.key(key)
        bytes.append(contentsOf: String(value).utf8)
    }

    public mutating func member(_ key: some CodingKey, _ value: [String]) {
        self.key(key)
        bytes.append(UInt8(ascii: "["))
        for (index, element) in value.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            string(element)
        }
        bytes.append(UInt8(ascii: "]"))
    }

    /// A member whose value is JSON already written (a value encoded once, used twice).
    public mutating func member(_ key: some CodingKey, raw value: [UInt8]) {
        self.key(key)
        bytes.append(contentsOf: value)
    }

    /// A nested value, omitted when nil.
    public mutating func member(_ key: some CodingKey, _ value: (some JSONWritable)?) {
        guard let value else { return }
        self.key(key)
        value.write(to: &self)
    }

    /// An array of nested values, omitted when nil.
    public mutating func member<Element: JSONWritable>(_ key: some CodingKey, _ values: [Element]?) {
        guard let values else { return }
        self.key(key)
        bytes.append(UInt8(ascii: "["))
        for (index, element) in values.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            element.write(to: &self)
        }
        bytes.append(UInt8(ascii: "]"))
    }

    private static let hex = Array("0123456789abcdef".utf8)

    /// A string, escaped as JSON requires: quote, backslash and control characters; everything
    /// else (`/` and non-ASCII as they are) copied in runs between them.
    public mutating func string(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { utf8 in
            var start = 0
            var index = Self.nextEscape(in: utf8, from: 0)
            while index < utf8.count {
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<index]))
                let byte = utf8[index]
                bytes.append(UInt8(ascii: "\\"))
                switch byte {
                case 0x22: bytes.append(0x22)
                case 0x5C: bytes.append(0x5C)
                case 0x08: bytes.append(UInt8(ascii: "b"))
                case 0x0C: bytes.append(UInt8(ascii: "f"))
                case 0x0A: bytes.append(UInt8(ascii: "n"))
                case 0x0D: bytes.append(UInt8(ascii: "r"))
                case 0x09: bytes.append(UInt8(ascii: "t"))
                default:
                    bytes.append(contentsOf: "u00".utf8)
                    bytes.append(Self.hex[Int(byte >> 4)])
                    bytes.append(Self.hex[Int(byte & 0x0F)])
                }
                start = index + 1
                index = Self.nextEscape(in: utf8, from: start)
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start...]))
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// The index of the first byte at or after `start` that must be escaped (a control character,
    /// `"` or `\\`), or the count when none is. Eight bytes are tested at a time (tokens and ids,
    /// most of what is written, have nothing to escape): a byte below 0x20 leaves its high bit set
    /// in `byte - 0x20` while clear in `byte`, and a byte equal to `"` or `\\` is zero after the xor,
    /// so `- 1` sets its high bit. A borrow only marks a byte above one truly marked, so a clean word
    /// is clean, and a marked word holds a byte the byte-wise scan then finds.
    static func nextEscape(in utf8: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        var index = start
        if let base = utf8.baseAddress {
            let raw = UnsafeRawPointer(base)
            let ones: UInt64 = 0x0101_0101_0101_0101
            let highs: UInt64 = 0x8080_8080_8080_8080
            while index + 8 <= utf8.count {
                let word = raw.loadUnaligned(fromByteOffset: index, as: UInt64.self)
                let quote = word ^ (ones &* 0x22)
                let backslash = word ^ (ones &* 0x5C)
                let marked =
                    ((word &- ones &* 0x20) & ~word) | ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash)
                if marked & highs != 0 { break }
                index += 8
            }
        }
        while index < utf8.count {
            let byte = utf8[index]
            if byte < 0x20 || byte == 0x22 || byte == 0x5C { return index }
            index += 1
        }
        return index
    }
}

/// A value that writes itself as JSON (canonical: sorted keys, absent optionals omitted).
public protocol JSONWritable {
    func write(to writer: inout JSONWriter)
}

extension JSONWritable {
    /// The value's JSON.
    public var jsonBytes: [UInt8] {
        var writer = JSONWriter()
        write(to: &writer)
        return writer.bytes
    }
}
