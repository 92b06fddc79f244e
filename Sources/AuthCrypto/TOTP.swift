import COpenSSL
import Foundation

/// Time-based one-time passwords as RFC 6238 defines them and authenticator apps use them:
/// HMAC-SHA-1, six digits, 30-second steps from the Unix epoch.
public enum TOTP {
    /// Seconds per step.
    public static let period: Int64 = 30

    /// The step `date` falls in.
    public static func step(at date: Date) -> Int64 {
        Int64(date.timeIntervalSince1970.rounded(.down)) / period
    }

    /// The six-digit code of `step` (RFC 4226's dynamic truncation of HMAC-SHA-1 over the step
    /// as a big-endian 64-bit counter).
    public static func code(secret: [UInt8], step: Int64) -> String {
        let counter = (0..<8).map { UInt8(truncatingIfNeeded: UInt64(bitPattern: step) >> (56 - 8 * UInt64($0))) }
        let mac = hmacSHA1(key: secret, message: counter)
        guard mac.count == 20 else { return "" }
        let offset = Int(mac[19] & 0x0F)
        let binary =
            UInt32(mac[offset] & 0x7F) << 24 | UInt32(mac[offset + 1]) << 16 | UInt32(mac[offset + 2]) << 8
            | UInt32(mac[offset + 3])
        let digits = String(binary % 1_000_000)
        return String(repeating: "0", count: 6 - digits.count) + digits
    }

    /// The step within `window` steps of `date` whose code is `code`, or nil. Every candidate is
    /// compared, in constant time, whichever matches.
    public static func matchingStep(_ code: String, secret: [UInt8], at date: Date, window: Int64 = 1) -> Int64? {
        let current = step(at: date)
        var found: Int64?
        for candidate in (current - window)...(current + window) {
            if ConstantTime.equals(Array(Self.code(secret: secret, step: candidate).utf8), Array(code.utf8)) {
                found = candidate
            }
        }
        return found
    }

    /// HMAC-SHA-1: what TOTP is defined over (its weaknesses as a hash do not touch the HMAC).
    static func hmacSHA1(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let done = key.withUnsafeBytes { keyBytes in
            message.withUnsafeBytes { messageBytes in
                HMAC(
                    EVP_sha1(), keyBytes.baseAddress, Int32(key.count),
                    messageBytes.baseAddress?.assumingMemoryBound(to: UInt8.self), message.count, &out, &length)
            }
        }
        return done == nil ? [] : Array(out.prefix(Int(length)))
    }
}

/// RFC 4648 base32 (upper case, no padding): how authenticator apps take a secret.
public enum Base32 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    public static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for byte in bytes {
            buffer = buffer << 8 | UInt32(byte)
            bits += 8
            while bits >= 5 {
                out.append(alphabet[Int(buffer >> UInt32(bits - 5) & 0x1F)])
                bits -= 5
            }
        }
        if bits > 0 { out.append(alphabet[Int(buffer << UInt32(5 - bits) & 0x1F)]) }
        return String(decoding: out, as: UTF8.self)
    }
}
