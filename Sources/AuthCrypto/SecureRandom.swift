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
        return try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            try fill(UnsafeMutableRawBufferPointer(buffer))
            initialized = count
        }
    }

    /// Fills `buffer` from the operating system's seeded generator, allocating nothing (a UUID's
    /// sixteen bytes, say, go straight into the UUID).
    /// - Throws: `Failure` when OpenSSL could not produce them; `buffer` is then zeroed, never
    ///   left with weak bytes.
    public static func fill(_ buffer: UnsafeMutableRawBufferPointer) throws {
        guard let base = buffer.baseAddress, !buffer.isEmpty else { return }
        guard buffer.count <= Pool.largestServed else {
            guard RAND_bytes(base.assumingMemoryBound(to: UInt8.self), Int32(buffer.count)) == 1 else {
                buffer.initializeMemory(as: UInt8.self, repeating: 0)
                throw Failure()
            }
            return
        }
        do {
            try pool.withLock { try $0.take(into: buffer) }
        } catch {
            buffer.initializeMemory(as: UInt8.self, repeating: 0)
            throw error
        }
    }

    /// Random bytes not yet handed out, from `next` to the end of `buffer`.
    struct Pool: ~Copyable {
        static let size = 4096
        static let largestServed = 256
        var buffer = [UInt8](repeating: 0, count: size)
        var next = size

        /// Copies the next `destination.count` bytes out and wipes them from the pool, refilling it
        /// first with one `RAND_bytes` call when too few are left.
        mutating func take(into destination: UnsafeMutableRawBufferPointer) throws {
            let count = destination.count
            if next + count > buffer.count {
                let status = buffer.withUnsafeMutableBufferPointer { pool in
                    RAND_bytes(pool.baseAddress, Int32(pool.count))
                }
                guard status == 1 else { throw Failure() }
                next = 0
            }
            let start = next
            buffer.withUnsafeMutableBytes { pool in
                let served = UnsafeMutableRawBufferPointer(rebasing: pool[start..<(start + count)])
                destination.copyMemory(from: UnsafeRawBufferPointer(served))
                served.initializeMemory(as: UInt8.self, repeating: 0)
            }
            next += count
        }
    }
}

/// A source of randomness that tests can replace.
public protocol RandomSource: Sendable {
    /// Fills and returns `count` bytes.
    func bytes(_ count: Int) throws -> [UInt8]
    /// Fills `buffer`: the bytes `bytes(buffer.count)` would return (a replacement need not
    /// provide it).
    func fill(_ buffer: UnsafeMutableRawBufferPointer) throws
}

extension RandomSource {
    public func fill(_ buffer: UnsafeMutableRawBufferPointer) throws {
        let drawn = try bytes(buffer.count)
        precondition(drawn.count == buffer.count, "a RandomSource returned the wrong number of bytes")
        drawn.withUnsafeBytes { buffer.copyMemory(from: $0) }
    }
}

/// The production source: OpenSSL's CSPRNG.
public struct SystemRandom: RandomSource {
    public init() {}
    public func bytes(_ count: Int) throws -> [UInt8] { try SecureRandom.bytes(count) }
    public func fill(_ buffer: UnsafeMutableRawBufferPointer) throws { try SecureRandom.fill(buffer) }
}

/// The OpenSSL this process runs on, as linked at run time (`auth-worker version`).
public enum OpenSSLLibrary {
    public static var version: String { String(cString: OpenSSL_version(OPENSSL_VERSION)) }
}
