import COpenSSL
import Foundation

/// SHA-256 over OpenSSL's one-shot `EVP_Digest` with the digest fetched once per process.
///
/// The `SHA256()` one-shot fetches the implementation from the provider on every call: measured
/// here, 417–481 ns for a 51-byte input against 170–184 ns with the fetched digest (a login hashes
/// its tokens several times).
public enum SHA256 {
    /// The 32-byte digest of `bytes`.
    public static func hash<Bytes: ContiguousBytes>(_ bytes: Bytes) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        bytes.withUnsafeBytes { input in
            digest.withUnsafeMutableBufferPointer { output in
                // Cannot fail on a valid buffer with the default provider; should it, the legacy
                // one-shot gives the same digest. A NULL base with count 0 hashes the empty string.
                var length: UInt32 = 0
                if EVP_Digest(
                    input.baseAddress, input.count, output.baseAddress, &length, FetchedAlgorithms.shared.sha256, nil)
                    != 1 || length != 32
                {
                    _ = COpenSSL.SHA256(
                        input.baseAddress?.assumingMemoryBound(to: UInt8.self), input.count, output.baseAddress)
                }
            }
        }
        return digest
    }

    /// The digest of the UTF-8 bytes of `string`.
    public static func hash(_ string: String) -> [UInt8] {
        // From the string's own bytes (a small string's on the stack), not a copy in an array.
        var string = string
        return string.withUTF8 { hash(UnsafeRawBufferPointer($0)) }
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
    /// `bytes` as lower-case hex.
    public static func encode<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        encode(Array(bytes))
    }

    /// `bytes` as lower-case hex, written straight into the string (the generic form, called
    /// from other modules, ran unspecialized: an iterator call per byte).
    public static func encode(_ bytes: [UInt8]) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { out in
            var index = 0
            for byte in bytes {
                out[index] = digit(byte >> 4)
                out[index + 1] = digit(byte & 0x0F)
                index += 2
            }
            return index
        }
    }

    /// The lower-case hex digit of `nibble` (0–15).
    @inlinable @inline(__always) public static func digit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? 0x30 + nibble : 0x57 + nibble
    }
}

/// HMAC-SHA-256 (RFC 2104) over two SHA-256 hashes.
///
/// Built on the one-shot digest rather than OpenSSL's `HMAC()`: in OpenSSL 3 that call fetches the
/// MAC algorithm from the provider on every use, which made it half as fast as the hashes it runs.
public enum HMACSHA256 {
    private static let blockSize = 64

    /// The 32-byte MAC of `message` under `key`.
    public static func mac(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var block = key.count > blockSize ? SHA256.hash(key) : key
        block.append(contentsOf: repeatElement(0, count: blockSize - block.count))
        var inner = [UInt8]()
        inner.reserveCapacity(blockSize + message.count)
        for byte in block { inner.append(byte ^ 0x36) }
        inner.append(contentsOf: message)
        var outer = [UInt8]()
        outer.reserveCapacity(blockSize + 32)
        for byte in block { outer.append(byte ^ 0x5C) }
        outer.append(contentsOf: SHA256.hash(inner))
        return SHA256.hash(outer)
    }
}
