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
    public static func decode(buffer text: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let count = text.count
        if count % 4 == 1 { return nil }
        let table = decodeTable
        var valid = true
        let output = [UInt8](unsafeUninitializedCapacity: count * 3 / 4 + 1) { output, written in
            var accumulator: UInt32 = 0
            var bits: UInt32 = 0
            var length = 0
            for character in text {
                let value = table[Int(character)]
                guard value != invalid else {
                    valid = false
                    break
                }
                accumulator = accumulator << 6 | UInt32(value)
                bits += 6
                if bits >= 8 {
                    bits -= 8
                    output[length] = UInt8(truncatingIfNeeded: accumulator >> bits)
                    length += 1
                    accumulator &= (1 << bits) - 1
                }
            }
            if accumulator != 0 { valid = false }
            written = valid ? length : 0
        }
        return valid ? output : nil
    }

    /// Decodes the UTF-8 bytes of `string`.
    public static func decode(_ string: String) -> [UInt8]? {
        decode(Array(string.utf8))
    }
}
