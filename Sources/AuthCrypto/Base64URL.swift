/// Base64url without padding (RFC 4648 §5), as JOSE uses it: table-driven and strict.
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    private static let invalid: UInt8 = 0xFF
    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, character) in alphabet.enumerated() { table[Int(character)] = UInt8(index) }
        return table
    }()

    /// Encodes without padding.
    public static func encode<Bytes: Collection>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        if let encoded = bytes.withContiguousStorageIfAvailable(encode(buffer:)) { return encoded }
        return Array(bytes).withUnsafeBufferPointer(encode(buffer:))
    }

    /// Written straight into the string's storage (one allocation, none for up to 15 characters),
    /// from the bytes where they are.
    private static func encode(buffer input: UnsafeBufferPointer<UInt8>) -> String {
        let rest = input.count % 3
        let length = input.count / 3 * 4 + (rest == 0 ? 0 : rest + 1)
        guard length > 0 else { return "" }
        return alphabet.withUnsafeBufferPointer { alphabet in
            String(unsafeUninitializedCapacity: length) { out in
                var at = 0
                var index = 0
                while index + 3 <= input.count {
                    let chunk = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
                    out[at] = alphabet[Int(chunk >> 18 & 0x3F)]
                    out[at + 1] = alphabet[Int(chunk >> 12 & 0x3F)]
                    out[at + 2] = alphabet[Int(chunk >> 6 & 0x3F)]
                    out[at + 3] = alphabet[Int(chunk & 0x3F)]
                    at += 4
                    index += 3
                }
                switch input.count - index {
                case 1:
                    let chunk = UInt32(input[index]) << 16
                    out[at] = alphabet[Int(chunk >> 18 & 0x3F)]
                    out[at + 1] = alphabet[Int(chunk >> 12 & 0x3F)]
                    at += 2
                case 2:
                    let chunk = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
                    out[at] = alphabet[Int(chunk >> 18 & 0x3F)]
                    out[at + 1] = alphabet[Int(chunk >> 12 & 0x3F)]
                    out[at + 2] = alphabet[Int(chunk >> 6 & 0x3F)]
                    at += 3
                default:
                    break
                }
                return at
            }
        }
    }

    /// Decodes strict unpadded base64url.
    ///
    /// Returns nil for padding, characters outside the alphabet, a length of 1 modulo 4, or
    /// non-zero trailing bits (so every byte string has exactly one accepted encoding).
    @inlinable
    public static func decode<Text: Collection>(_ text: Text) -> [UInt8]? where Text.Element == UInt8 {
        if let result = text.withContiguousStorageIfAvailable({ decode(buffer: $0) }) { return result }
        return Array(text).withUnsafeBufferPointer { decode(buffer: $0) }
    }

    /// The decoder proper, on contiguous bytes: not generic, so it is fast across modules.
    ///
    /// Four characters a step, into three bytes: a character outside the alphabet reads as 0xFF
    /// from the table, so one test of the four values' high bits finds any of them. (A bit at a
    /// time, an Apple ID token's kilobyte cost about 18 instructions a character.)
    public static func decode(buffer text: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let count = text.count
        let rest = count % 4
        if rest == 1 { return nil }
        let length = count / 4 * 3 + (rest == 0 ? 0 : rest - 1)
        return decodeTable.withUnsafeBufferPointer { table -> [UInt8]? in
            var valid = true
            let output = [UInt8](unsafeUninitializedCapacity: length) { output, written in
                written = 0
                var index = 0
                var at = 0
                while index + 4 <= count {
                    let a = table[Int(text[index])]
                    let b = table[Int(text[index + 1])]
                    let c = table[Int(text[index + 2])]
                    let d = table[Int(text[index + 3])]
                    guard (a | b | c | d) & 0x80 == 0 else {
                        valid = false
                        return
                    }
                    let chunk = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    output[at] = UInt8(truncatingIfNeeded: chunk >> 16)
                    output[at + 1] = UInt8(truncatingIfNeeded: chunk >> 8)
                    output[at + 2] = UInt8(truncatingIfNeeded: chunk)
                    index += 4
                    at += 3
                }
                if rest != 0 {
                    // Two characters are one byte and four spare bits, three are two bytes and two
                    // spare bits; the spare bits must be zero (one encoding for every byte string).
                    let a = table[Int(text[index])]
                    let b = table[Int(text[index + 1])]
                    let c = rest == 3 ? table[Int(text[index + 2])] : 0
                    let chunk = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6
                    let spare = rest == 3 ? chunk & 0xFF : chunk & 0xFFFF
                    guard (a | b | c) & 0x80 == 0, spare == 0 else {
                        valid = false
                        return
                    }
                    output[at] = UInt8(truncatingIfNeeded: chunk >> 16)
                    if rest == 3 { output[at + 1] = UInt8(truncatingIfNeeded: chunk >> 8) }
                }
                written = length
            }
            return valid ? output : nil
        }
    }

    /// Decodes the UTF-8 bytes of `string`.
    public static func decode(_ string: String) -> [UInt8]? {
        decode(Array(string.utf8))
    }
}
