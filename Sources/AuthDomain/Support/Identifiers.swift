import AuthCrypto
import Foundation

/// Makes the service's identifiers: UUIDv7 ids, handles and secret tokens.
public struct Identifiers: Sendable {
    private let clock: any WorkerClock
    private let random: any RandomSource

    public init(clock: any WorkerClock, random: any RandomSource = SystemRandom()) {
        self.clock = clock
        self.random = random
    }

    /// A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds then random bits, so ids sort by creation.
    public func uuid() throws -> UUID {
        let milliseconds = UInt64(max(clock.now().timeIntervalSince1970, 0) * 1000)
        // Random bytes straight into the UUID's own sixteen: no array a UUID (several a login).
        var raw: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        try withUnsafeMutableBytes(of: &raw) { bytes in
            try random.fill(bytes)
            for index in 0..<6 { bytes[index] = UInt8(truncatingIfNeeded: milliseconds >> (40 - 8 * UInt64(index))) }
            bytes[6] = 0x70 | (bytes[6] & 0x0F)
            bytes[8] = 0x80 | (bytes[8] & 0x3F)
        }
        return UUID(uuid: raw)
    }

    /// A handle: the slug of `name` (or `guest`/`user`) plus `_` and a random hex suffix of
    /// `bytes` bytes (default: 3 for guests, 2 for named users).
    public func handle(name: String?, isGuest: Bool, bytes: Int? = nil) throws -> String {
        try handle(slug: name.map(Self.slug) ?? "", isGuest: isGuest, bytes: bytes)
    }

    /// A handle from a name's slug already made (`slug(_:)`; empty for none): a sign-up's
    /// candidates share one.
    public func handle(slug: String, isGuest: Bool, bytes: Int? = nil) throws -> String {
        let base = slug.isEmpty ? (isGuest ? "guest" : "user") : slug
        return base + "_" + Hex.encode(try random.bytes(bytes ?? (isGuest ? 3 : 2)))
    }

    /// Lower-case ASCII letters and digits joined by `_`, accents folded, at most 24 characters.
    public static func slug(_ name: String) -> String {
        // Most names are ASCII: they need no folding, which costs more than the rest of a sign-in.
        let folded =
            name.utf8.allSatisfy { $0 < 0x80 }
            ? name
            : name.folding(options: [.diacriticInsensitive, .caseInsensitive, .widthInsensitive], locale: nil)
                .lowercased()
        // Words are runs of ASCII letters and digits; anything else ends one. Read as UTF-8: every
        // byte of a scalar beyond ASCII is 0x80 or above, so it ends a word as the scalar would.
        var result: [UInt8] = []
        result.reserveCapacity(24)
        var word: [UInt8] = []
        var firstWord: [UInt8]?
        var full = false
        func end() {
            guard !word.isEmpty else { return }
            if firstWord == nil { firstWord = word }
            if !full {
                let length = result.isEmpty ? word.count : result.count + 1 + word.count
                if length > 24 {
                    full = true
                } else {
                    if !result.isEmpty { result.append(UInt8(ascii: "_")) }
                    result += word
                }
            }
            word.removeAll(keepingCapacity: true)
        }
        for byte in folded.utf8 {
            switch byte {
            case 0x30...0x39, 0x61...0x7A: word.append(byte)
            case 0x41...0x5A: word.append(byte + 0x20)
            default: end()
            }
        }
        end()
        if result.isEmpty, let firstWord { result = Array(firstWord.prefix(24)) }
        return String(decoding: result, as: UTF8.self)
    }

    private static let tokenAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8)

    /// `count` characters from [A-Za-z0-9], uniformly chosen (rejection sampling, no modulo bias).
    public func secret(characters count: Int) throws -> String {
        guard count > 0 else { return "" }
        // Drawn into a buffer on the stack, written straight into the string's storage; the
        // buffer is wiped after, as the random pool wipes what it hands out.
        return try withUnsafeTemporaryAllocation(byteCount: count, alignment: 1) { drawn in
            defer { drawn.initializeMemory(as: UInt8.self, repeating: 0) }
            return try String(unsafeUninitializedCapacity: count) { out in
                var written = 0
                while written < count {
                    try random.fill(drawn)
                    for byte in drawn where byte < 248 {
                        out[written] = Self.tokenAlphabet[Int(byte % 62)]
                        written += 1
                        if written == count { break }
                    }
                }
                return count
            }
        }
    }
}
