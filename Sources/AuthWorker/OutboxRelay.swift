import AuthDomain
import AuthStore
import Foundation
import Kafka
import Messages
import ServiceKit
import Synchronization

/// Publishes outbox events that a crash left unpublished, in the order they were written, forgets
/// what has expired (request ids, old throttle and rate-limit rows), and keeps the cost of checking
/// an unknown e-mail's password equal to a typical stored hash's.
///
/// The consume loop publishes its own events right after commit; this relay only picks up rows
/// older than `grace`, so the two rarely overlap (and a consumer deduplicates by event id if they do).
public final class OutboxRelay: Service {
    private let store: PostgresStore
    private let producer: KafkaProducer
    private let clock: any WorkerClock
    private let logger: Logger
    private let interval: Duration
    private let grace: TimeInterval
    private let throttleWindow: TimeInterval
    private let rateLimitWindow: TimeInterval
    private let auditRetention: TimeInterval
    private let purgeInterval: Duration
    private let purgeLimit: Int
    private let passwords: PasswordService?
    private let eventMode: CloudEventMode
    private let stopping = Atomic<Bool>(false)

    /// - Parameters:
    ///   - interval: how often to look. Default: 5 s.
    ///   - grace: how old an unpublished event must be to be taken. Default: 30 s.
    ///   - throttleWindow: how long failed password attempts count. Default: a day.
    ///   - rateLimitWindow: the longest rate-limit window. Default: an hour.
    ///   - auditRetention: how long audit rows are kept. Default: 400 days.
    ///   - purgeInterval: how often a purge cycle starts. Default: 10 minutes.
    ///   - purgeLimit: the most rows of a table one round forgets; a cycle that finds more goes
    ///     on at the next round (every `interval`) until it is through. Default: 50,000, 10,000
    ///     rows a second at the default interval (every replica purges, taking different rows).
    ///   - eventMode: how events are published (`AUTH_EVENTS_CONTENT_MODE`). Default: structured.
    public init(
        store: PostgresStore, producer: KafkaProducer, clock: any WorkerClock, logger: Logger,
        interval: Duration = .seconds(5), grace: TimeInterval = 30, throttleWindow: TimeInterval = 86400,
        rateLimitWindow: TimeInterval = 3600, auditRetention: TimeInterval = 400 * 86_400,
        purgeInterval: Duration = .seconds(600), purgeLimit: Int = 50_000, passwords: PasswordService? = nil,
        eventMode: CloudEventMode = .structured
    ) {
        self.eventMode = eventMode
        self.auditRetention = auditRetention
        self.purgeInterval = purgeInterval
        self.purgeLimit = purgeLimit
        self.passwords = passwords
        self.throttleWindow = throttleWindow
        self.rateLimitWindow = rateLimitWindow
        self.store = store
        self.producer = producer
        self.clock = clock
        self.logger = logger
        self.interval = interval
        self.grace = grace
    }

    public func triggerGracefulShutdown() {
        stopping.store(true, ordering: .releasing)
        nap.withLock { $0?.cancel() }
    }

    /// The sleep between rounds, cancelled by a shutdown (one wake-up a round, not ten a second).
    private let nap = Mutex<Task<Void, Never>?>(nil)

    private func sleepUntilNextRound() async {
        let sleeping = Task { [interval] in _ = try? await Task.sleep(for: interval) }
        nap.withLock { $0 = sleeping }
        // A shutdown asked between the loop's check and the line above finds no nap to cancel.
        if stopping.load(ordering: .acquiring) { sleeping.cancel() }
        await sleeping.value
        nap.withLock { $0 = nil }
    }

    public func run() async throws {
        var lastCycle = ContinuousClock.now - purgeInterval - .seconds(1)
        var cycleUnfinished = false
        while !stopping.load(ordering: .acquiring) {
            do {
                let published = try await publishPending()
                if published > 0 { logger.info("Relayed outbox events", metadata: [LogKey.count: String(published)]) }
                let startsCycle = ContinuousClock.now - lastCycle > purgeInterval
                if startsCycle || cycleUnfinished {
                    if startsCycle { lastCycle = ContinuousClock.now }
                    try await purge(startingCycle: startsCycle, unfinished: &cycleUnfinished)
                    if startsCycle { try await calibratePasswords() }
                }
            } catch {
                logger.warning(
                    "Outbox relay failed; will try again", metadata: [LogKey.error: String(describing: error)])
            }
            await sleepUntilNextRound()
        }
    }

    /// One round of a purge cycle: at most `purgeLimit` rows of each table that grows with logins
    /// (`PostgresStore.purgeExpired`, which says why in slices), and at a cycle's start the expired
    /// throttles and rate-limit windows.
    private func purge(startingCycle: Bool, unfinished: inout Bool) async throws {
        let purged = try await store.purgeExpired(
            at: clock.now(), throttleWindow: throttleWindow, rateLimitWindow: rateLimitWindow,
            auditRetention: auditRetention, limit: purgeLimit, windows: startingCycle)
        unfinished = purged.isPartial
        guard purged.total > 0 else { return }
        logger.info(
            "Forgot expired rows",
            metadata: [
                "purge.requests": String(purged.requests), "purge.throttles": String(purged.throttles),
                "purge.rate_limits": String(purged.rateLimits), "purge.codes": String(purged.codes),
                "purge.audit": String(purged.auditRows), "purge.challenges": String(purged.challenges),
                "purge.apple_jobs": String(purged.appleJobs), "purge.ended_sessions": String(purged.endedSessions),
                "purge.more": String(purged.isPartial),
            ])
    }

    /// Keeps unknown e-mails as costly as known ones after an Argon2 parameter change.
    private func calibratePasswords() async throws {
        guard let passwords, let typical = try await store.typicalPasswordHash() else { return }
        if let parameters = try await passwords.calibrate(typical: typical) {
            logger.info(
                "Unknown e-mails are now checked at the parameters of most stored hashes",
                metadata: [
                    "argon2.memory_kib": String(parameters.memoryKiB),
                    "argon2.iterations": String(parameters.iterations),
                    "argon2.parallelism": String(parameters.parallelism),
                ])
        }
    }

    /// Publishes one page of pending events.
    /// - Returns: how many were published.
    @discardableResult
    public func publishPending(limit: Int = 500) async throws -> Int {
        let events = try await store.unpublishedEvents(olderThan: clock.now() - grace, limit: limit)
        guard !events.isEmpty else { return 0 }
        try await producer.send(events.map { $0.record(eventMode) })
        try await store.deletePublished(events.map(\.id))
        return events.count
    }
}
