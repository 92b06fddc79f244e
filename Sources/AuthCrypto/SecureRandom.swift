import COpenSSL

/// Random bytes from OpenSSL's CSPRNG.
public enum SecureRandom {
    /// Errors from the random generator; OpenSSL fails only when it cannot seed.
    public struct Failure: Error, CustomStringConvertible {
        public var description: String { "OpenSSL RAND_bytes failed" }
    }

    /// Returns `count` bytes from the operating system's seeded generator.
    /// - Throws: `Failure` when OpenSSL could not produce them; never returns weak bytes.
    public static func bytes(_ count: Int) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        let status = out.withUnsafeMutableBytes { buffer -> Int32 in
            guard let base = buffer.baseAddress else { return 1 }
            return RAND_bytes(base.assumingMemoryBound(to: UInt8.self), Int32(buffer.count))
        }
        guard status == 1 else { throw Failure() }
        return out
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
