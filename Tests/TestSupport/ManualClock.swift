import AuthDomain
import Foundation

/// A clock that says what tests tell it.
public final class ManualClock: WorkerClock, @unchecked Sendable {
    // @unchecked: `current` is only touched under `lock`.
    private let lock = NSLock()
    private var current: Date

    public init(_ start: Date) { current = start }

    public func now() -> Date { lock.withLock { current } }

    public func advance(by interval: TimeInterval) { lock.withLock { current += interval } }
}
