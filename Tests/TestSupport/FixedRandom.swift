import AuthCrypto
import Synchronization

/// A deterministic random source for tests: a counter-driven byte stream.
final class CountingRandom: RandomSource {
    private let counter = Mutex<UInt8>(0)

    func bytes(_ count: Int) throws -> [UInt8] {
        counter.withLock { value in
            (0..<count).map { _ in
                value &+= 37
                return value
            }
        }
    }
}
