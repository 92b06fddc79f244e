import Foundation
import Kafka
import PGStore
import ServiceKit
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// `/readyz` tells the truth without waiting for it: a frozen PostgreSQL (a server that accepts
/// connections and never answers) and a missing topic make the worker not ready, and the probe
/// answers at once all the while.
@Suite(.requiresServices, .timeLimit(.minutes(4))) struct ReadinessTests {
    /// A TCP port that accepts connections and never answers: what a SIGSTOPped PostgreSQL is.
    final class BlackHole: @unchecked Sendable {
        let fd: Int32
        let port: UInt16

        init() throws {
            let socketFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = 0
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let ok = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(socketFD, $0, length) == 0 && listen(socketFD, 64) == 0
                        && getsockname(socketFD, $0, &length) == 0
                }
            }
            guard ok else {
                close(socketFD)
                throw CannotListen()
            }
            fd = socketFD
            port = UInt16(bigEndian: address.sin_port)
        }

        struct CannotListen: Error {}

        deinit { close(fd) }
    }

    func producer() throws -> KafkaProducer {
        guard let brokers = IntegrationEnvironment.kafkaBrokers else { throw IntegrationEnvironment.Skip() }
        return try KafkaProducer(
            configuration: KafkaProducerConfiguration(kafka: KafkaConfiguration(bootstrapServers: [brokers])),
            logger: IntegrationEnvironment.quietLogger)
    }

    /// Polls `answer` until `done` holds for it (or `timeout`), returning the slowest call and
    /// the last answer.
    func watch(
        _ readiness: Readiness, timeout: Duration = .seconds(30),
        until done: (_ status: Int, _ body: String) -> Bool
    ) async throws -> (slowest: Duration, last: String) {
        var slowest = Duration.zero
        var last = ""
        let end = ContinuousClock.now + timeout
        // Asked once more after the deadline: in the parallel run a sleep can end seconds late
        // (the two cooperative threads busy with other suites), and the answer then is the one
        // that counts.
        while true {
            let started = ContinuousClock.now
            let (status, body) = readiness.answer()
            slowest = max(slowest, ContinuousClock.now - started)
            last = body
            if done(status, body) || started >= end { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        return (slowest, last)
    }

    /// A readiness whose PostgreSQL is `hole`: checked every 200 ms, stale after 1 s.
    func frozenDatabaseReadiness(_ hole: BlackHole, producer: KafkaProducer) -> Readiness {
        Readiness(
            database: DatabaseProbe(conninfo: "postgres://postgres@127.0.0.1:\(hole.port)/auth"),
            producer: producer, topics: [], interval: .milliseconds(200), staleAfter: .seconds(1))
    }

    @Test func aFrozenDatabaseIsNotReadyAndTheProbeNeverWaits() async throws {
        let hole = try BlackHole()
        let producer = try producer()
        defer { producer.close() }
        // libpq gives up on the frozen server after its connect timeout (5 s); the probe must not
        // wait for that to say so, first check or not: a check that has not come back for
        // `staleAfter` (1 s here) is reported as such.
        let readiness = frozenDatabaseReadiness(hole, producer: producer)
        let started = ContinuousClock.now
        let task = Task { try await readiness.run() }
        // Either answer names PostgreSQL: "has not come back (PostgreSQL or the broker is not
        // answering)" from 1 s, or "PostgreSQL is unreachable" once libpq gives up; never
        // "starting" past the first second.
        let (slowest, last) = try await watch(readiness, timeout: .seconds(4)) { _, body in
            body.contains("PostgreSQL")
        }
        let took = ContinuousClock.now - started
        #expect(slowest < .milliseconds(500), "\(slowest)")
        #expect(readiness.answer().status == 503)
        #expect(last.contains("PostgreSQL"), "after \(took): \(last)")
        readiness.triggerGracefulShutdown()
        task.cancel()
    }

    /// The first check's clock starts with the readiness, not with the task that runs the checks:
    /// on a busy machine that task can start seconds late (the parallel test run once held it
    /// 9 s), and its start must not make a worker that has answered nothing look freshly started.
    @Test func theFirstCheckIsTimedFromStartUp() async throws {
        let hole = try BlackHole()
        let producer = try producer()
        defer { producer.close() }
        let readiness = frozenDatabaseReadiness(hole, producer: producer)
        #expect(readiness.answer().body.hasPrefix("starting"))
        try await Task.sleep(for: .milliseconds(1_200))
        #expect(readiness.answer().body.contains("not come back"), "\(readiness.answer().body)")
        let task = Task { try await readiness.run() }
        // The check under way (against the black hole) has just begun; the answer stays "not
        // come back", never "starting". A parallel run can stretch these sleeps past libpq's
        // connect timeout (5 s), and then the check has come back, as "unreachable": also an
        // answer about PostgreSQL, not a fresh start.
        for _ in 0..<5 {
            try await Task.sleep(for: .milliseconds(100))
            let body = readiness.answer().body
            #expect(!body.hasPrefix("starting"), "\(body)")
            #expect(body.contains("not come back") || body.hasPrefix("PostgreSQL is unreachable"), "\(body)")
        }
        readiness.triggerGracefulShutdown()
        task.cancel()
    }

    /// A request that lost PostgreSQL makes the worker not ready at once, not at the next check:
    /// until a check passes after it. Connection losses count; a refused row does not.
    @Test func aLostDatabaseConnectionIsNotReadyAtOnce() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let producer = try producer()
        defer { producer.close() }
        let loss = DatabaseLossSignal()
        // Checked once a minute: only the report can change the answer in between.
        let readiness = Readiness(
            database: DatabaseProbe(conninfo: databaseURL), producer: producer, topics: [],
            interval: .seconds(60), staleAfter: .seconds(120), databaseLoss: loss)
        let task = Task { try await readiness.run() }
        _ = try await watch(readiness) { status, _ in status == 200 }
        #expect(readiness.answer().status == 200)
        loss.report("PostgreSQL connection error")
        let answer = readiness.answer()
        #expect(answer.status == 503 && answer.body.contains("the request path lost it"), "\(answer.body)")
        readiness.triggerGracefulShutdown()
        task.cancel()

        #expect(ErrorPolicy.isDatabaseUnreachable(PGError(.connection, detail: "server closed the connection")))
        #expect(!ErrorPolicy.isDatabaseUnreachable(PGError(.query, sqlState: "23505", detail: "duplicate key")))
        #expect(ErrorPolicy.isDatabaseUnreachable(PGError(.query, sqlState: "57P01", detail: "terminating connection")))
        #expect(!ErrorPolicy.isDatabaseUnreachable(LoginError(.invalidToken, "no")))
    }

    @Test func aMissingTopicIsNotReadyAndAllTopicsAre() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        let producer = try producer()
        defer { producer.close() }
        let missing = Readiness(
            database: DatabaseProbe(conninfo: databaseURL), producer: producer,
            topics: topics.all + ["no-such-topic-\(UUID())"], interval: .milliseconds(200))
        let present = Readiness(
            database: DatabaseProbe(conninfo: databaseURL), producer: producer,
            topics: topics.all,
            interval: .milliseconds(200))
        let tasks = [Task { try await missing.run() }, Task { try await present.run() }]
        _ = try await watch(missing) { _, body in body.contains("topics missing") }
        _ = try await watch(present) { status, _ in status == 200 }
        #expect(missing.answer().status == 503)
        #expect(missing.answer().body.contains("topics missing"))
        #expect(present.answer().status == 200, "\(present.answer().body)")
        missing.triggerGracefulShutdown()
        present.triggerGracefulShutdown()
        for task in tasks { task.cancel() }
    }
}
