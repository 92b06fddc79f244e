import Foundation
import ServiceKit
import Synchronization

extension ExecutorPool {
    /// The jemalloc arena each of the pool's threads allocates from, by thread name: jobs sent
    /// four at a time per thread, each holding its thread a moment, so every thread runs one.
    public func arenasOfItsThreads() async throws -> [String: UInt32] {
        final class Seen: Sendable {
            let arenas = Mutex<[String: UInt32]>([:])
        }
        let seen = Seen()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<(size * 4) {
                group.addTask {
                    try await self.run {
                        if let arena = Allocator.threadArena {
                            seen.arenas.withLock { $0[Thread.current.name ?? ""] = arena }
                        }
                        usleep(5_000)
                    }
                }
            }
            try await group.waitForAll()
        }
        return seen.arenas.withLock { $0 }
    }
}
