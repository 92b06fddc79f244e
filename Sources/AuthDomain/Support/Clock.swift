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

/// A clock stopped at one moment (`auth-worker token verify --at`, replaying an old token).
public struct FixedClock: WorkerClock {
    public let moment: Date

    public init(_ moment: Date) { self.moment = moment }

    public func now() -> Date { moment }
}
