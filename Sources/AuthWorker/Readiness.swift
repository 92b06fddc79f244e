import AuthDomain
import AuthStore
import Foundation
import Kafka
import ServiceKit
import Synchronization

/// The request path's word that PostgreSQL went away (a write or lookup lost its connection, or
/// could not make one). `/readyz` answers 503 from that moment until a readiness check passes
/// again, rather than up to a check's interval later: a failover is seen within the request
/// that met it.
public final class DatabaseLossSignal: Sendable {
    private let latest = Mutex<(at: ContinuousClock.Instant, reason: String)?>(nil)

    public init() {}

    public func report(_ reason: String) {
        latest.withLock { $0 = (.now, reason) }
    }

    /// The last loss reported, and when.
    public var last: (at: ContinuousClock.Instant, reason: String)? { latest.withLock { $0 } }
}

/// Whether the worker can do its job, checked every `interval` in the background so `/readyz`
/// answers at once from the last result: PostgreSQL answers a query, a broker answers, and every
/// topic the worker uses exists. A check that has not come back for `staleAfter` (PostgreSQL
/// frozen, the broker unreachable) counts as not ready, and says so: the first check too, timed
/// from start-up, so a worker starting against a frozen server does not say "starting" for as
/// long as the client libraries take to give up.
public final class Readiness: Service, Sendable {
    private struct State {
        var ready = false
        var reason = "starting: the first readiness check has not finished\n"
        var checkedAt: ContinuousClock.Instant?
        /// When the check under way began (before the first, when the readiness was created); nil
        /// between checks.
        var checkStartedAt: ContinuousClock.Instant? = .now
    }

    private let database: DatabaseProbe
    private let producer: KafkaProducer
    private let topics: [String]
    private let interval: Duration
    private let staleAfter: Duration
    private let state = Mutex(State())
    private let stopped = Atomic<Bool>(false)
    private let logger: Logger?
    private let outboxBacklog: Gauge?
    private let databaseLoss: DatabaseLossSignal?
    /// How long commits may wait for a synchronous standby before the worker says it is not ready.
    private let synchronousWaitLimit: Duration

    /// - Parameters:
    ///   - outboxBacklog: set to the outbox's backlog at each check, when given.
    ///   - databaseLoss: the request path's reports of PostgreSQL going away.
    ///   - synchronousWaitLimit: how long a commit may wait for a synchronous standby (the
    ///     standby lost, the primary configured to wait for it) before `/readyz` says so.
    public init(
        database: DatabaseProbe, producer: KafkaProducer, topics: [String], interval: Duration = .seconds(2),
        staleAfter: Duration = .seconds(10), outboxBacklog: Gauge? = nil, databaseLoss: DatabaseLossSignal? = nil,
        synchronousWaitLimit: Duration = .seconds(5), logger: Logger? = nil
    ) {
        self.logger = logger
        self.databaseLoss = databaseLoss
        self.synchronousWaitLimit = synchronousWaitLimit
        self.outboxBacklog = outboxBacklog
        self.database = database
        self.producer = producer
        self.topics = topics
        self.interval = interval
        self.staleAfter = staleAfter
    }

    /// The `/readyz` answer: 200 when the last check passed and is recent, else 503 and why.
    public func answer() -> (status: Int, body: String) {
        let current = state.withLock { $0 }
        let now = ContinuousClock.now
        // A check under way for longer than `staleAfter` is an answer of its own.
        if let begun = current.checkStartedAt, now - begun > staleAfter {
            return (503, Self.notComingBack(for: now - begun))
        }
        guard let checkedAt = current.checkedAt else { return (503, current.reason) }
        if let loss = databaseLoss?.last, loss.at > checkedAt {
            return (503, "PostgreSQL is unreachable: the request path lost it (\(loss.reason)); retrying\n")
        }
        let age = now - checkedAt
        guard age <= staleAfter else { return (503, Self.notComingBack(for: age)) }
        return current.ready ? (200, "ready\n") : (503, current.reason)
    }

    private static func notComingBack(for age: Duration) -> String {
        "the readiness check has not come back for \(age.components.seconds) s (PostgreSQL or the broker is not answering)\n"
    }

    public func run() async throws {
        while !stopped.load(ordering: .acquiring), !Task.isCancelled {
            // The first check's clock started with the readiness itself (the task running this
            // may have started late); later ones start now.
            state.withLock { current in
                if current.checkStartedAt == nil { current.checkStartedAt = .now }
            }
            let (ready, reason) = await check()
            let previous = state.withLock { current in
                defer { current = State(ready: ready, reason: reason, checkedAt: .now, checkStartedAt: nil) }
                return current
            }
            // Changes are logged, so "why was it not ready at 3 a.m." has an answer in the log.
            if previous.checkedAt == nil || previous.ready != ready || previous.reason != reason {
                if ready {
                    logger?.info("Ready")
                } else {
                    logger?.warning(
                        "Not ready", metadata: ["health.reason": reason.trimmingCharacters(in: .newlines)])
                }
            }
            try? await Task.sleep(for: interval)
        }
    }

    public func triggerGracefulShutdown() {
        stopped.store(true, ordering: .releasing)
    }

    private func check() async -> (Bool, String) {
        do {
            try await database.ping()
        } catch {
            return (false, "PostgreSQL is unreachable\n")
        }
        if let waited = try? await database.longestSynchronousReplicationWait(), waited > synchronousWaitLimit {
            return (
                false,
                "PostgreSQL's commits have waited \(waited.components.seconds) s for a synchronous standby (synchronous_standby_names): the standby is gone or far behind, and the primary waits for it\n"
            )
        }
        if let outboxBacklog {
            do {
                outboxBacklog.set(Double(try await database.outboxBacklog()))
            } catch {
                return (false, "PostgreSQL answers but the outbox cannot be read (schema not migrated?)\n")
            }
        }
        let exists: [String: Bool]
        do {
            exists = try await producer.describeTopics(topics, timeout: .seconds(2))
        } catch {
            return (false, "no Kafka broker answers\n")
        }
        let missing = topics.filter { exists[$0] != true }
        guard missing.isEmpty else { return (false, "topics missing: \(missing.joined(separator: ", "))\n") }
        return (true, "ready\n")
    }
}
