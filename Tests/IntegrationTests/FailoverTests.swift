import AuthCrypto
import Foundation
import JOSEFixtures
import Kafka
import Messages
import PGStore
import Synchronization
import Testing

@testable import AuthDomain
@testable import AuthWorker
@testable import TestSupport

/// PostgreSQL's high availability under steady load (guest sign-ups, Apple sign-ins new and
/// returning, registrations and sign-ins with a password, refreshes): a primary and a synchronous standby
/// (`ReplicatedPostgres`), the worker on a multi-host URL (`target_session_attrs=read-write`).
///
/// First the standby is lost: the primary's commits wait for it, the worker says so on `/readyz`
/// (nothing is answered, nothing is lost), until the primary is made asynchronous, as an
/// operator or an HA manager does; the standby comes back and is synchronous again. Then the
/// primary is killed (SIGKILL, mid-batch) and the standby promoted: the worker is not ready
/// within a second, finds the new primary by itself, and every request is answered, each with one
/// answer and its effects written once: one user per sign-up, one `auth.user.created` per user,
/// each refresh token rotated exactly once (its successor works, it does not). A commit whose
/// acknowledgement was lost with the primary is resolved by the request id (`processed_requests`).
extension FaultInjectionTests {
    final class Load: Sendable {
        /// Request id → what it is (`guest`, `apple-new`, `apple-again`, `register`, `password`,
        /// `refresh`).
        let sent = Mutex<[String: String]>([:])
        /// A refresh request's id → the token it presented.
        let refreshes = Mutex<[String: String]>([:])
        /// Each `/readyz` answer, and when.
        let probes = Mutex<[Probe]>([])
        let probing = Atomic<Bool>(true)
    }

    struct Probe: Sendable {
        var at: ContinuousClock.Instant
        var status: Int
        var body: String
    }

    @Test(
        .enabled(
            if: ReplicatedPostgres.isPossible && IntegrationEnvironment.isAvailable,
            "needs root, PostgreSQL with pg_basebackup, and the local broker (scripts/dev-env up)"))
    func aPostgreSQLFailoverLosesNothing() async throws {
        let cluster = try await Blocking.run { try ReplicatedPostgres() }
        defer { cluster.shutdown() }
        try cluster.connection(to: 0).execute(unsafeSQL: "CREATE DATABASE auth")
        let topics = try await IntegrationEnvironment.makeTopics(partitions: 2)
        let brokers = try #require(IntegrationEnvironment.kafkaBrokers)
        let keys = try KeyServer()
        defer { keys.stop() }
        keys.serve("/apple/keys", .init(body: TestSigner.keySet([Signers.rsa2048])))
        let keyFile = FileManager.default.temporaryDirectory.appendingPathComponent("results-\(UUID()).key").path
        try Hex.encode(try SecureRandom.bytes(32)).write(toFile: keyFile, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: keyFile) }
        let healthPort = try IsolatedCluster.freePort()
        let worker = WorkerProcess(environment: [
            "AUTH_KAFKA_BROKERS": brokers, "AUTH_DATABASE_URL": cluster.url("auth"), "AUTH_MIGRATE_ON_START": "true",
            "AUTH_KAFKA_GROUP": IntegrationEnvironment.uniqueName("group"), "AUTH_TOPIC_REQUESTS": topics.requests,
            "AUTH_TOPIC_RESULTS": topics.results, "AUTH_TOPIC_EVENTS": topics.events,
            "AUTH_TOPIC_NOTIFICATIONS": topics.notifications, "AUTH_TOPIC_DLQ": topics.deadLetters,
            "AUTH_ACCESS_TOKEN_FORMAT": "opaque", "AUTH_RESULTS_KEY_FILE": keyFile,
            "AUTH_APPLE_AUDIENCES": "com.example.app", "AUTH_APPLE_KEYS_URL": keys.url("/apple/keys").absoluteString,
            "AUTH_HEALTH_PORT": String(healthPort), "AUTH_HEALTH_ADDRESS": "127.0.0.1",
            "AUTH_MAX_RETRY_DELAY_MS": "500", "AUTH_REQUEST_DEADLINE_SECONDS": "0", "AUTH_BATCH_WAIT_MS": "20",
            "AUTH_GUEST_RATE_LIMIT": "0/60", "AUTH_GUEST_GLOBAL_RATE_LIMIT": "0/60", "AUTH_KAFKA_FETCH_WAIT_MS": "5",
            "AUTH_OUTBOX_RELAY_GRACE_SECONDS": "2", "AUTH_LOG_LEVEL": "info", "AUTH_SHUTDOWN_TIMEOUT_SECONDS": "30",
            "AUTH_ARGON2_MEMORY_KIB": "8192", "AUTH_ARGON2_ITERATIONS": "1",
            // A rotated token presented again is refused at once (no grace), so the check below
            // tells a token rotated once from one never rotated.
            "AUTH_REFRESH_REUSE_GRACE_SECONDS": "0",
        ])
        try await Blocking.run {
            try worker.start()
            worker.waitUntilConsuming()
        }
        defer { worker.kill9() }

        // `/readyz` every 50 ms: when it first said 503 after each fault, and why.
        let load = Load()
        let prober = Task {
            while load.probing.load(ordering: .acquiring) {
                let answer = (try? await HTTP.get("http://127.0.0.1:\(healthPort)/readyz")) ?? (status: 0, body: "")
                load.probes.withLock { $0.append(Probe(at: .now, status: answer.status, body: answer.body)) }
                try? await Task.sleep(for: .milliseconds(50))
            }
        }

        let results = try TopicReader(topic: topics.results, brokers: brokers)
        let events = try TopicReader(topic: topics.events, brokers: brokers)
        var producerConfiguration = KafkaProducerConfiguration(kafka: KafkaConfiguration(bootstrapServers: [brokers]))
        producerConfiguration.deliveryTimeout = .seconds(60)
        let producer = try KafkaProducer(
            configuration: producerConfiguration, logger: IntegrationEnvironment.quietLogger)
        let now = Int(Date().timeIntervalSince1970)
        func appleToken(_ sub: String) -> String {
            Signers.rsa2048.token(
                [
                    "iss": "https://appleid.apple.com", "aud": "com.example.app", "sub": sub, "iat": now - 5,
                    "exp": now + 3600, "nonce": Hex.encode(SHA256.hash("failover-nonce")),
                ], algorithm: .rs256)
        }
        func record(_ id: String, _ data: [String: Any]) throws -> ProducerRecord {
            let event: [String: Any] = [
                "specversion": "1.0", "id": id, "source": "/failover", "type": "auth.login.request", "data": data,
            ]
            return ProducerRecord(
                topic: topics.requests, key: Array(id.utf8),
                value: Array(try JSONSerialization.data(withJSONObject: event)))
        }

        // The load: every 100 ms two guests, a new Apple user, a returning one, a registration
        // every other tick, a sign-in with the password of a registration already answered, and
        // a refresh of a session an earlier answer opened.
        let streaming = Atomic<Bool>(true)
        let generator = Task {
            var tick = 0
            var read = 0
            var unrefreshed: [String] = []
            var registered: [Int] = []
            while streaming.load(ordering: .acquiring) {
                tick += 1
                var batch: [(String, String, [String: Any])] = []
                for index in 0..<2 {
                    batch.append(("fo-guest-\(tick)-\(index)", "guest", ["method": "guest"]))
                }
                batch.append(
                    (
                        "fo-apple-\(tick)", "apple-new",
                        [
                            "method": "apple", "identity_token": appleToken("001.failover.\(tick)"),
                            "nonce": "failover-nonce",
                        ]
                    ))
                if tick > 5 {
                    batch.append(
                        (
                            "fo-apple-again-\(tick)", "apple-again",
                            [
                                "method": "apple", "identity_token": appleToken("001.failover.\(tick - 5)"),
                                "nonce": "failover-nonce",
                            ]
                        ))
                }
                if tick % 2 == 0 {
                    batch.append(
                        (
                            "fo-register-\(tick)", "register",
                            [
                                "method": "register", "email": "failover-\(tick)@example.com",
                                "password": "a failover passphrase \(tick)",
                            ]
                        ))
                }
                // Sessions the answers so far opened, each refreshed once.
                let seen = (try? await results.drain(for: .milliseconds(1))) ?? []
                for message in seen.dropFirst(read) {
                    guard
                        let result = try? MessageCoding.decode(CloudEvent<LoginResultData>.self, from: message.value)
                            .data, result.status == "ok"
                    else { continue }
                    if message.keyString.hasPrefix("fo-guest-"), let token = result.session?.refreshToken {
                        unrefreshed.append(token)
                    } else if message.keyString.hasPrefix("fo-register-"),
                        let tick = Int(message.keyString.dropFirst("fo-register-".count))
                    {
                        registered.append(tick)
                    }
                }
                read = seen.count
                // A member registered earlier signs in with its password.
                if let registration = registered.popLast() {
                    batch.append(
                        (
                            "fo-password-\(tick)", "password",
                            [
                                "method": "password", "email": "failover-\(registration)@example.com",
                                "password": "a failover passphrase \(registration)",
                            ]
                        ))
                }
                if let token = unrefreshed.popLast() {
                    let id = "fo-refresh-\(tick)"
                    batch.append((id, "refresh", ["method": "refresh", "refresh_token": token]))
                    load.refreshes.withLock { $0[id] = token }
                }
                do {
                    _ = try await producer.send(try batch.map { try record($0.0, $0.2) })
                    load.sent.withLock { sent in for (id, kind, _) in batch { sent[id] = kind } }
                } catch {
                    load.refreshes.withLock { refreshes in for (id, _, _) in batch { refreshes[id] = nil } }
                }
                try? await Task.sleep(for: .milliseconds(100))
            }
        }

        func firstUnready(after instant: ContinuousClock.Instant) -> (at: ContinuousClock.Instant, body: String)? {
            load.probes.withLock { $0.first { $0.at > instant && $0.status == 503 }.map { ($0.at, $0.body) } }
        }
        func waitUntilReady(timeout: Duration = .seconds(60)) async {
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                if load.probes.withLock({ $0.last?.status }) == 200 { return }
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
        try await Task.sleep(for: .seconds(5))
        await waitUntilReady()

        // 1. The standby lost: the primary's commits wait for it, and the worker says so.
        let standbyLost = ContinuousClock.now
        try await Blocking.run { cluster.kill(1) }
        var waiting: (at: ContinuousClock.Instant, body: String)?
        for _ in 0..<200 where waiting == nil {
            try await Task.sleep(for: .milliseconds(100))
            waiting = load.probes.withLock {
                $0.first { $0.at > standbyLost && $0.body.contains("synchronous standby") }.map { ($0.at, $0.body) }
            }
        }
        #expect(waiting != nil, "the worker says its commits wait for the standby")
        // The operator's move: the primary stops waiting; the waiting commits complete.
        try await Blocking.run { try cluster.degradeToAsynchronous(primary: 0) }
        await waitUntilReady()
        let resumed = ContinuousClock.now
        // The standby comes back, catches up, and is synchronous again.
        try await Blocking.run {
            try cluster.start(1)
            let primary = try cluster.connection(to: 0)
            try primary.execute(
                unsafeSQL: "ALTER SYSTEM SET synchronous_standby_names = '\(ReplicatedPostgres.standbyName)'")
            _ = try primary.query("SELECT pg_reload_conf() AS reloaded")
            try cluster.waitUntilSynchronous()
        }
        try await Task.sleep(for: .seconds(4))

        // 2. The primary killed mid-batch (a burst just sent, most of it unanswered), the
        // standby promoted a second later, as an HA manager would.
        let burst = (0..<300).map { "fo-burst-\($0)" }
        try await producer.send(try burst.map { try record($0, ["method": "guest"]) })
        load.sent.withLock { sent in for id in burst { sent[id] = "guest" } }
        _ = try await results.waitUntil(timeout: .seconds(30)) { $0.contains { $0.keyString.hasPrefix("fo-burst-") } }
        let primaryKilled = ContinuousClock.now
        try await Blocking.run { cluster.kill(0) }
        try await Task.sleep(for: .seconds(1))
        try await Blocking.run { try cluster.promote(1) }
        await waitUntilReady()
        let failedOver = ContinuousClock.now
        try await Task.sleep(for: .seconds(5))
        streaming.store(false, ordering: .releasing)
        await generator.value

        // Every request answered, each with one answer.
        let sent = load.sent.withLock { $0 }
        let answered = try await results.waitUntil(timeout: .seconds(120)) {
            Set($0.map(\.keyString)).isSuperset(of: sent.keys)
        }
        var byRequest: [String: [LoginResultData]] = [:]
        for message in answered where sent[message.keyString] != nil {
            byRequest[message.keyString, default: []].append(
                try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: message.value).data)
        }
        let missing = Set(sent.keys).subtracting(byRequest.keys)
        #expect(missing.isEmpty, "\(missing.count) requests unanswered; the worker's log: \(worker.logPath)")
        let inconsistent = byRequest.filter { Set($0.value.map { String(describing: $0) }).count > 1 }
        #expect(inconsistent.isEmpty, "\(inconsistent.count) requests got different answers")
        let refused = byRequest.filter { $0.value.first?.status != "ok" }
        #expect(
            refused.isEmpty,
            "\(refused.count) requests refused: \(refused.prefix(3).map { "\($0.key): \($0.value.first?.error?.code.rawValue ?? "")" })"
        )

        // Effects written once, on the new primary.
        let database = try cluster.connection(to: 1, database: "auth")
        func count(_ sql: String) throws -> Int {
            try database.query(PGQuery(unsafeSQL: sql)).first?.decode("n", as: Int.self) ?? -1
        }
        let kinds = sent.values.reduce(into: [String: Int]()) { $0[$1, default: 0] += 1 }
        let signUps = (kinds["guest"] ?? 0) + (kinds["apple-new"] ?? 0) + (kinds["register"] ?? 0)
        #expect(try count("SELECT count(*) AS n FROM users") == signUps, "one user per sign-up: \(kinds)")
        #expect(try count("SELECT count(*) AS n FROM processed_requests") == sent.count, "each request recorded once")
        let users = Set(byRequest.values.compactMap { $0.first?.newUser == true ? $0.first?.user?.id : nil })
        #expect(users.count == signUps)
        let announced = try await events.waitUntil(timeout: .seconds(60)) { messages in
            Set(messages.filter { $0.json["type"] as? String == "auth.user.created" }.map(\.keyString)).count
                >= signUps
        }
        var eventIDs: [String: Set<String>] = [:]
        for event in announced where event.json["type"] as? String == "auth.user.created" {
            eventIDs[event.keyString, default: []].insert(event.json["id"] as? String ?? "")
        }
        #expect(Set(eventIDs.keys) == users, "every user announced")
        var unpublished = -1
        for _ in 0..<100 {
            unpublished = try count("SELECT count(*) AS n FROM outbox WHERE published_at IS NULL")
            if unpublished == 0 { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(unpublished == 0, "the outbox emptied on the new primary")
        #expect(eventIDs.values.allSatisfy { $0.count == 1 }, "one event id per user")

        // Each refresh rotated its token exactly once: the successor refreshes, the token does not.
        let refreshes = load.refreshes.withLock { $0 }
        #expect(refreshes.count >= 20, "refreshes throughout: \(refreshes.count)")
        var checks: [ProducerRecord] = []
        var expectations: [String: Bool] = [:]
        for (id, old) in refreshes {
            guard let successor = byRequest[id]?.first?.session?.refreshToken else { continue }
            checks.append(try record("\(id)-successor", ["method": "refresh", "refresh_token": successor]))
            expectations["\(id)-successor"] = true
            checks.append(try record("\(id)-again", ["method": "refresh", "refresh_token": old]))
            expectations["\(id)-again"] = false
        }
        try await producer.send(checks.filter { $0.keyString.hasSuffix("-successor") })
        _ = try await results.waitUntil(timeout: .seconds(60)) { messages in
            Set(messages.map(\.keyString)).isSuperset(of: expectations.filter(\.value).keys)
        }
        try await producer.send(checks.filter { $0.keyString.hasSuffix("-again") })
        let checked = try await results.waitUntil(timeout: .seconds(60)) {
            Set($0.map(\.keyString)).isSuperset(of: expectations.keys)
        }
        for message in checked {
            guard let wanted = expectations[message.keyString] else { continue }
            let result = try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: message.value).data
            #expect((result.status == "ok") == wanted, "\(message.keyString): \(result.status)")
        }

        // Not ready within a second of the primary's loss, ready again once promoted.
        let unready = firstUnready(after: primaryKilled)
        #expect(
            unready.map { $0.at - primaryKilled <= .seconds(1) } == true,
            "not ready within a second: \(String(describing: unready))")
        load.probing.store(false, ordering: .releasing)
        await prober.value
        print(
            """
            failover: \(sent.count) requests (\(kinds)); standby lost: not ready after \
            \(waiting.map { $0.at - standbyLost } ?? .zero), writes resumed \(resumed - standbyLost) after; \
            primary killed: not ready after \(unready.map { $0.at - primaryKilled } ?? .zero), ready again \
            \(failedOver - primaryKilled) after (promotion at 1 s); \(answered.count) answers delivered for \
            \(byRequest.count) requests
            """)
        await results.close()
        await events.close()
        await producer.shutdown()
    }
}

extension ProducerRecord {
    fileprivate var keyString: String { String(decoding: key ?? [], as: UTF8.self) }
}
