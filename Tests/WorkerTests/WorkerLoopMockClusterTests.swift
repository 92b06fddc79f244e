import AuthCrypto
import Foundation
import Kafka
import Messages
import PGStore
import Passwords
import ServiceKit
import Testing

@testable import AuthDomain
@testable import AuthWorker
@testable import TestSupport

/// The worker loop (poll, lanes, write, publish, store offsets, rebalance) against librdkafka's
/// in-process mock cluster: no broker, PostgreSQL for real. What the broker itself adds (its
/// quirks, a cut connection) is `PipelineInvariantTests`' and `FaultInjectionTests`' part.
@Suite(.requiresDatabase, .serialized, .timeLimit(.minutes(3))) struct WorkerLoopMockClusterTests {
    /// A mock cluster with the worker's topics, a database, and a configuration for both.
    struct Setup {
        let cluster: MockKafkaCluster
        let config: WorkerSetup
        let databaseURL: String

        init(partitions: Int32 = 2, _ configure: (inout WorkerSetup) -> Void = { _ in }) async throws {
            cluster = try MockKafkaCluster()
            databaseURL = try await IntegrationEnvironment.makeDatabase()
            let topics = IntegrationEnvironment.uniqueTopics("m")
            for topic in topics.all {
                try cluster.createTopic(topic, partitions: partitions)
            }
            // The mock cluster holds a fetch for the whole wait: kept short (`forTests`).
            var config = WorkerSetup(
                worker: WorkerConfiguration(databaseURL: databaseURL), kafka: .forTests(cluster.bootstrapServers))
            config.topics = topics
            config.accessTokenFormat = .opaque
            // Answers are kept (sealed with this key) so a redelivery is answered again.
            config.resultsKey = try SecureRandom.bytes(32)
            config.accounts.argon2 = fastArgon2
            config.shutdownTimeout = .seconds(120)  // as IntegrationEnvironment's, for the same reason
            config.healthPort = 0
            configure(&config)
            self.config = config
        }

        func producer() throws -> KafkaProducer {
            try KafkaProducer(
                configuration: config.kafka.producerConfiguration, logger: IntegrationEnvironment.quietLogger)
        }

        func resultsReader() throws -> TopicReader {
            try TopicReader(topic: config.topics.results, brokers: cluster.bootstrapServers)
        }

        func count(_ table: String) throws -> Int {
            let connection = try PGConnection(conninfo: databaseURL)
            return try connection.execute(unsafeSQL: "SELECT count(*) AS n FROM \(table)").first?.decode(
                "n", as: Int.self) ?? -1
        }

        func record(id: String, key: String, data: String) -> ProducerRecord {
            ProducerRecord(
                topic: config.topics.requests, key: Array(key.utf8),
                value: TestRequests.request(id: id, data: data))
        }
    }

    /// The results read so far, by request id: every copy's status and event id.
    static func answers(_ messages: [KafkaMessage]) throws -> [String: [(status: String, eventID: String)]] {
        var answers: [String: [(status: String, eventID: String)]] = [:]
        for message in messages {
            let event = try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: message.value)
            answers[event.data.requestId, default: []].append(
                (event.data.status + (event.data.error.map { ":\($0.code)" } ?? ""), event.id))
        }
        return answers
    }

    /// Registrations followed by sign-ins on the same key, among guests on many keys, all in one
    /// producer batch: each sign-in sees its key's registration (per-key order), and every request
    /// is answered exactly once.
    @Test func keysKeepTheirOrderAndEveryRequestIsAnsweredOnce() async throws {
        let setup = try await Setup()
        let worker = try await RunningWorker(setup.config)
        let producer = try setup.producer()
        let reader = try setup.resultsReader()
        var records: [ProducerRecord] = []
        var signIns: [String] = []
        var all: [String] = []
        for account in 0..<12 {
            let key = "account-\(account)"
            let email = "ordered-\(account)@example.com"
            let register = "register-\(account)-\(UUID())"
            let signIn = "sign-in-\(account)-\(UUID())"
            records.append(
                setup.record(
                    id: register, key: key,
                    data: #"{"method":"register","email":"\#(email)","password":"correct horse"}"#))
            for guest in 0..<5 {
                let id = "guest-\(account)-\(guest)-\(UUID())"
                records.append(setup.record(id: id, key: "device-\(account)-\(guest)", data: #"{"method":"guest"}"#))
                all.append(id)
            }
            records.append(
                setup.record(id: signIn, key: key, data: TestRequests.passwordData(email, "correct horse")))
            signIns.append(signIn)
            all += [register, signIn]
        }
        try await producer.send(records)
        try await reader.waitUntil(timeout: .seconds(90)) { messages in
            Set(messages.map(\.keyString)).isSuperset(of: all)
        }
        let answers = try Self.answers(try await reader.drain(for: .seconds(2)))
        for id in all {
            let copies = answers[id] ?? []
            #expect(copies.count == 1, "\(id) was answered \(copies.count) times")
            #expect(copies.first?.status == "ok", "\(id): \(copies.map(\.status))")
        }
        #expect(signIns.allSatisfy { answers[$0]?.first?.status == "ok" })
        #expect(try setup.count("users") == 12 + 60)
        await producer.shutdown()
        await reader.close()
        try await worker.stop()
    }

    /// One "Request handled" line a request, written when its answer is acknowledged (a pass's
    /// lines together): its id, method, outcome, partition, offset and trace id, and never its
    /// password. Requests sent in one producer batch, so passes finish several at once.
    @Test func everyRequestHandledIsLoggedOnceWithoutItsSecrets() async throws {
        let setup = try await Setup()
        let logs = InMemoryLogHandler()
        let worker = try await RunningWorker(setup.config, logger: Logger(label: "test", handler: logs))
        let producer = try setup.producer()
        let reader = try setup.resultsReader()
        let password = "never in a log \(UUID())"
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736"
        var expected: [String: (method: String, outcome: String)] = [:]
        var records: [ProducerRecord] = []
        for index in 0..<20 {
            let id = "guest-\(index)-\(UUID())"
            records.append(setup.record(id: id, key: "device-\(index)", data: #"{"method":"guest"}"#))
            expected[id] = ("guest", "ok")
        }
        let register = "register-\(UUID())"
        records.append(
            setup.record(
                id: register, key: "account",
                data: #"{"method":"register","email":"logged@example.com","password":"\#(password)"}"#))
        expected[register] = ("register", "ok")
        let wrong = "wrong-\(UUID())"
        records.append(
            setup.record(
                id: wrong, key: "account", data: TestRequests.passwordData("logged@example.com", password + "!")))
        expected[wrong] = ("password", "invalid_credentials")
        let traced = "traced-\(UUID())"
        records.append(
            ProducerRecord(
                topic: setup.config.topics.requests, key: Array("traced".utf8),
                value: Array(
                    #"{"specversion":"1.0","id":"\#(traced)","source":"/gateway/test","type":"auth.login.request","traceparent":"00-\#(trace)-00f067aa0ba902b7-01","data":{"method":"guest"}}"#
                        .utf8)))
        expected[traced] = ("guest", "ok")
        try await producer.send(records)
        try await reader.waitUntil(timeout: .seconds(90)) { messages in
            Set(messages.map(\.keyString)).isSuperset(of: expected.keys)
        }
        try await worker.stop()
        let handled = logs.records.filter { $0.message == "Request handled" }
        let byID = Dictionary(grouping: handled) { $0.metadata[LogKey.requestID] ?? "" }
        #expect(handled.count == expected.count && byID.count == expected.count)
        for (id, want) in expected {
            let lines = byID[id] ?? []
            #expect(lines.count == 1, "\(id): \(lines.count) lines")
            let line = try #require(lines.first)
            #expect(line.metadata[LogKey.method] == want.method && line.metadata[LogKey.outcome] == want.outcome)
            #expect(line.metadata[LogKey.partition] != nil && line.metadata[LogKey.offset] != nil)
            #expect(line.metadata[LogKey.traceID] == (id == traced ? trace : nil))
        }
        #expect(!logs.lines.contains { $0.contains(password) }, "a password reached the log")
        await producer.shutdown()
        await reader.close()
    }

    /// A worker stopped after its work stores the offsets of what it finished: the next worker of
    /// the group starts after them, and nothing is read, done or answered twice.
    @Test func aNewWorkerResumesAfterTheOffsetsOfFinishedWork() async throws {
        let setup = try await Setup()
        let producer = try setup.producer()
        let reader = try setup.resultsReader()
        let first = (0..<50).map { "first-\($0)-\(UUID())" }
        let second = (0..<50).map { "second-\($0)-\(UUID())" }

        let one = try await RunningWorker(setup.config)
        try await producer.send(first.map { setup.record(id: $0, key: $0, data: #"{"method":"guest"}"#) })
        try await reader.waitUntil(timeout: .seconds(60)) { Set($0.map(\.keyString)).isSuperset(of: first) }
        try await one.stop()

        try await producer.send(second.map { setup.record(id: $0, key: $0, data: #"{"method":"guest"}"#) })
        let two = try await RunningWorker(setup.config)
        try await reader.waitUntil(timeout: .seconds(60)) { Set($0.map(\.keyString)).isSuperset(of: second) }
        let answers = try Self.answers(try await reader.drain(for: .seconds(2)))
        for id in first + second {
            #expect(answers[id]?.count == 1, "\(id) was answered \(answers[id]?.count ?? 0) times")
        }
        #expect(try setup.count("users") == 100)
        #expect(try setup.count("processed_requests") == 100)
        await producer.shutdown()
        await reader.close()
        try await two.stop()
    }

    /// Two workers share four partitions while requests flow: a second worker joins (one
    /// rebalance), the first leaves (another). Every request is acted on once (one user each); a
    /// request answered twice across a hand-over gets the same kept answer, never a second one.
    @Test func rebalancesLoseNothingAndActOnce() async throws {
        let setup = try await Setup(partitions: 4)
        let producer = try setup.producer()
        let reader = try setup.resultsReader()
        let ids = (0..<300).map { "handover-\($0)-\(UUID())" }
        func send(_ range: Range<Int>) async throws {
            try await producer.send(ids[range].map { setup.record(id: $0, key: $0, data: #"{"method":"guest"}"#) })
        }

        let one = try await RunningWorker(setup.config)
        try await send(0..<100)
        let two = try await RunningWorker(setup.config)
        try await send(100..<200)
        try await reader.waitUntil(timeout: .seconds(60)) { Set($0.map(\.keyString)).isSuperset(of: ids[0..<200]) }
        try await one.stop()
        try await send(200..<300)
        try await reader.waitUntil(timeout: .seconds(60)) { Set($0.map(\.keyString)).isSuperset(of: ids) }
        let answers = try Self.answers(try await reader.drain(for: .seconds(2)))
        for id in ids {
            let copies = answers[id] ?? []
            #expect(!copies.isEmpty, "\(id) was never answered")
            #expect(Set(copies.map(\.eventID)).count == 1, "\(id) got different answers: \(copies)")
            #expect(copies.allSatisfy { $0.status == "ok" })
        }
        #expect(try setup.count("users") == ids.count)
        await producer.shutdown()
        await reader.close()
        try await two.stop()
    }

    /// Forty password sign-ins on one key form one lane, done one after another; a guest on
    /// another key, sent after them in the same batch, is answered long before that lane empties.
    @Test func aSlowLaneDoesNotHoldTheOthers() async throws {
        // About 30-60 ms per Argon2 verification here: the lane holds a second or more of work.
        let setup = try await Setup {
            $0.accounts.argon2 = Argon2Parameters(memoryKiB: 19_456, iterations: 2, parallelism: 1)
            $0.accounts.throttle.threshold = 10_000
        }
        let worker = try await RunningWorker(setup.config)
        let producer = try setup.producer()
        let reader = try setup.resultsReader()
        let register = "register-\(UUID())"
        try await producer.send(
            setup.record(
                id: register, key: "slow-key",
                data: #"{"method":"register","email":"lane@example.com","password":"correct horse"}"#))
        try await reader.waitUntil(timeout: .seconds(60)) { $0.contains { $0.keyString == register } }

        let slow = (0..<40).map { "slow-\($0)-\(UUID())" }
        let guest = "guest-\(UUID())"
        try await producer.send(
            slow.map {
                setup.record(
                    id: $0, key: "slow-key",
                    data: TestRequests.passwordData("lane@example.com", "correct horse"))
            } + [setup.record(id: guest, key: "fast-key", data: #"{"method":"guest"}"#)])
        let seen = try await reader.waitUntil(timeout: .seconds(60)) { $0.contains { $0.keyString == guest } }
        let slowDone = Set(seen.map(\.keyString)).intersection(slow).count
        #expect(seen.contains { $0.keyString == guest }, "the guest was never answered")
        #expect(slowDone < slow.count, "the guest waited for the whole password lane (\(slowDone) done first)")
        try await reader.waitUntil(timeout: .seconds(90)) { Set($0.map(\.keyString)).isSuperset(of: slow) }
        let answers = try Self.answers(await reader.messages)
        #expect(slow.allSatisfy { answers[$0]?.first?.status == "ok" })
        await producer.shutdown()
        await reader.close()
        try await worker.stop()
    }

    /// `auth_request_phase_seconds`: a lone guest is looked up, prepared and written in one task,
    /// one timed phase to its commit; a registration (a password to hash) goes through each phase
    /// of a batch; each request's phases add up to its `auth_request_duration_seconds`.
    @Test func eachRequestsTimeIsCountedByPhaseAndItsPhasesAddUpToItsDuration() async throws {
        let setup = try await Setup()
        let worker = try await RunningWorker(setup.config)
        let producer = try setup.producer()
        let reader = try setup.resultsReader()
        let metrics = worker.application.metrics
        func counts() -> [TimedPhase: Int] {
            var counts: [TimedPhase: Int] = [:]
            for phase in TimedPhase.allCases {
                counts[phase] = metrics.requestPhases.labels(phase.rawValue).snapshot.count
            }
            return counts
        }
        /// Observed when the answer's delivery is acknowledged, which the results reader may see first.
        func finished(_ requests: Int) async throws {
            for _ in 0..<200 where counts()[.toLookUp] != requests { try await Task.sleep(for: .milliseconds(50)) }
            #expect(counts()[.toLookUp] == requests)
        }

        let guest = "phases-guest-\(UUID())"
        try await producer.send(setup.record(id: guest, key: "device", data: #"{"method":"guest"}"#))
        try await reader.waitUntil(timeout: .seconds(60)) { $0.contains { $0.keyString == guest } }
        try await finished(1)
        #expect(
            counts() == [
                .toLookUp: 1, .writingWithLookup: 1, .publishing: 1, .lookingUp: 0, .preparing: 0, .ready: 0,
                .writing: 0,
            ])

        let register = "phases-register-\(UUID())"
        try await producer.send(
            setup.record(
                id: register, key: "account",
                data: #"{"method":"register","email":"phases@example.com","password":"correct horse"}"#))
        try await reader.waitUntil(timeout: .seconds(60)) { $0.contains { $0.keyString == register } }
        try await finished(2)
        #expect(
            counts() == [
                .toLookUp: 2, .writingWithLookup: 1, .publishing: 2, .lookingUp: 1, .preparing: 1, .ready: 1,
                .writing: 1,
            ])
        let phases = TimedPhase.allCases.map { metrics.requestPhases.labels($0.rawValue).snapshot.sum }
        let whole = [("guest", "ok"), ("register", "ok")].map {
            metrics.requestDuration.labels($0.0, $0.1).snapshot.sum
        }
        #expect(abs(phases.reduce(0, +) - whole.reduce(0, +)) < 1e-6, "\(phases) against \(whole)")
        #expect(metrics.requestPhases.labels("preparing").snapshot.sum > 0, "a password was hashed")
        await producer.shutdown()
        await reader.close()
        try await worker.stop()
    }
}
