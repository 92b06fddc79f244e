import COpenSSL
import Synchronization

/// Random bytes from OpenSSL's CSPRNG.
///
/// Small requests (ids, handles, tokens, nonces: several per login) are served from a 4 KiB
/// buffer filled by one `RAND_bytes` call, as `arc4random` does: each call into OpenSSL's DRBG
/// costs a lock, a fork check (a `getpid` system call) and a provider lookup, which came to more
/// than the bytes. Bytes handed out are wiped from the buffer. The process never forks without
/// executing another program at once, so no child inherits the buffer.
public enum SecureRandom {
    /// Errors from the random generator; OpenSSL fails only when it cannot seed.
    public struct Failure: Error, CustomStringConvertible {
        public var description: String { "OpenSSL RAND_bytes failed" }
    }

    private static let pool = Mutex(Pool())

    /// Returns `count` bytes from the operating system's seeded generator.
    /// - Throws: `Failure` when OpenSSL could not produce them; never returns weak bytes.
    public static func bytes(_ count: Int) throws -> [UInt8] {
        guard count > 0 else { return [] }
        guard count <= Pool.largestServed else { return try generate(count) }
        return try pool.withLock { try $0.take(count) }
    }

    /// `count` bytes straight from `RAND_bytes`.
    static func generate(_ count: Int) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        let status = out.withUnsafeMutableBytes { buffer -> Int32 in
            guard let base = buffer.baseAddress else { return 1 }
            return RAND_bytes(base.assumingMemoryBound(to: UInt8.self), Int32(buffer.count))
        }
        guard status == 1 else { throw Failure() }
        return out
    }

    /// Random bytes not yet handed out, from `next` to the end of `buffer`.
    struct Pool: ~Copyable {
        static let size = 4096
        static let largestServed = 256
        var buffer = [UInt8](repeating: 0, count: size)
        var next = size

        mutating func take(_ count: Int) throws -> [UInt8] {
            if next + count > buffer.count {
                buffer = try SecureRandom.generate(Self.size)
                next = 0
            }
            let range = next..<(next + count)
            let out = Array(buffer[range])
            buffer.replaceSubrange(range, with: repeatElement(0, count: count))
            next += count
            return out
        }
    }
}

/// A source of randomness that tests can replace.
public protocol RandomSource: Sendable {
    /// Fills and returns `count` bytes.
    func bytes(_ count: Int) throws -> [UInt8]
}

/// The production source: OpenSSL's CSPRNG.
public struct SystemRandom: RandomSource {
    public init() {}
    public func bytes(_ count: Int) throws -> [UInt8] { try SecureRandom.bytes(count) }
}

/// The OpenSSL this process runs on, as linked at run time (`auth-worker version`).
public enum OpenSSLLibrary {
    public static var version: String { String(cString: OpenSSL_version(OPENSSL_VERSION)) }
}
