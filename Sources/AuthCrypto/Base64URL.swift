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
        let input = Array(bytes)
        var out: [UInt8] = []
        out.reserveCapacity((input.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= input.count {
            let chunk = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            out.append(alphabet[Int(chunk >> 18 & 0x3F)])
            out.append(alphabet[Int(chunk >> 12 & 0x3F)])
            out.append(alphabet[Int(chunk >> 6 & 0x3F)])
            out.append(alphabet[Int(chunk & 0x3F)])
            index += 3
        }
        switch input.count - index {
        case 1:
            let chunk = UInt32(input[index]) << 16
            out.append(alphabet[Int(chunk >> 18 & 0x3F)])
            out.append(alphabet[Int(chunk >> 12 & 0x3F)])
        case 2:
            let chunk = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
            out.append(alphabet[Int(chunk >> 18 & 0x3F)])
            out.append(alphabet[Int(chunk >> 12 & 0x3F)])
            out.append(alphabet[Int(chunk >> 6 & 0x3F)])
        default:
            break
        }
        return String(decoding: out, as: UTF8.self)
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
