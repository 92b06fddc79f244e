import Foundation

/// The time, injectable so tests can pin it.
public protocol WorkerClock: Sendable {
    func now() -> Date
}

/// The system's wall clock.
public struct SystemClock: WorkerClock {
    public init() {}
    public func now() -> Date { Date() }
}

/// A clock that says what tests tell it.
public final class ManualClock: WorkerClock, @unchecked Sendable {
    // @unchecked: `current` is only touched under `lock`.
    private let lock = NSLock()
    private var current: Date

    public init(_ start: Date) { current = start }

    public func now() -> Date { lock.withLock { current } }

    public func advance(by interval: TimeInterval) { lock.withLock { current += interval } }
}
