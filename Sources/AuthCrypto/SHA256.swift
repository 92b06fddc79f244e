import COpenSSL
import Foundation

/// SHA-256 over OpenSSL's one-shot digest.
public enum SHA256 {
    /// The 32-byte digest of `bytes`.
    public static func hash<Bytes: ContiguousBytes>(_ bytes: Bytes) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        bytes.withUnsafeBytes { input in
            digest.withUnsafeMutableBufferPointer { output in
                // SHA256 cannot fail on a valid buffer; a NULL base with count 0 hashes the empty string.
                _ = COpenSSL.SHA256(
                    input.baseAddress?.assumingMemoryBound(to: UInt8.self), input.count, output.baseAddress)
            }
        }
        return digest
    }

    /// The digest of the UTF-8 bytes of `string`.
    public static func hash(_ string: String) -> [UInt8] {
        hash(Array(string.utf8))
    }
}

/// Helpers for comparing secrets.
public enum ConstantTime {
    /// True when both byte strings are equal, in time that depends only on their lengths.
    public static func equals<A: ContiguousBytes, B: ContiguousBytes>(_ lhs: A, _ rhs: B) -> Bool {
        lhs.withUnsafeBytes { left in
            rhs.withUnsafeBytes { right in
                guard left.count == right.count else { return false }
                guard let l = left.baseAddress, let r = right.baseAddress else { return left.count == 0 }
                return CRYPTO_memcmp(l, r, left.count) == 0
            }
        }
    }
}

/// Lower-case hexadecimal encoding.
public enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    /// `bytes` as lower-case hex.
    public static func encode<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// HMAC-SHA-256 over OpenSSL's one-shot HMAC.
public enum HMACSHA256 {
    /// The 32-byte MAC of `message` under `key`.
    public static func mac(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 32
        // HMAC cannot fail with SHA-256 and valid buffers; an empty key is a valid (weak) key.
        _ = key.withUnsafeBufferPointer { keyBuffer in
            message.withUnsafeBufferPointer { messageBuffer in
                HMAC(
                    EVP_sha256(), keyBuffer.baseAddress, Int32(keyBuffer.count), messageBuffer.baseAddress,
                    messageBuffer.count, &out, &length)
            }
        }
        return out
    }
}
