import AuthCrypto
import Foundation
import Kafka
import Messages
import PGStore
import ServiceKit
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// The worker end to end: a real broker, a real PostgreSQL, the same builder `auth-worker run` uses.
@Suite(.requiresServices, .serialized, .timeLimit(.minutes(3))) struct WorkerIntegrationTests {
    func request(id: String, data: String) -> [UInt8] {
        Array(
            #"{"specversion":"1.0","id":"\#(id)","source":"/gateway/test","type":"auth.login.request","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","data":\#(data)}"#
                .utf8)
    }

    @Test func aGuestLoginIsAnsweredStoredAndAnnounced() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        let config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        let worker = try await RunningWorker(config)
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        let events = try TopicReader(topic: topics.events)

        let id = UUID().uuidString.lowercased()
        try await gateway.publishRaw(
            key: Array("device-1".utf8),
            value: request(id: id, data: #"{"method":"guest","device":{"name":"Pixel 9","platform":"android"}}"#))
        let resultBytes = try #require(try await gateway.awaitResult(requestID: id, timeout: .seconds(30)))
        let result = try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: resultBytes)
        #expect(result.type == "auth.login.result")
        #expect(result.traceparent == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        #expect(result.data.requestId == id)
        #expect(result.data.status == "ok")
        let user = try #require(result.data.user)
        let session = try #require(result.data.session)
        #expect(user.isGuest)
        #expect(result.data.newUser == true)
        #expect(session.abilities == ["guest"])
        // A lone login under light load is looked up, prepared and written in one task.
        #expect(worker.application.metrics.writeBatches.labels("lookup").count == 1)
        #expect(worker.application.metrics.writeBatches.labels("loop").count == 0)

        // auth.user.created, keyed by the user id, with the request's trace.
        let created = try await events.waitUntil { $0.contains { $0.keyString == user.id } }
        let event = try #require(created.first { $0.keyString == user.id })
        #expect(event.json["type"] as? String == "auth.user.created")
        #expect(event.json["traceparent"] as? String == result.traceparent)
        #expect(event.data["handle"] as? String == user.handle)
        #expect(event.data["is_guest"] as? Bool == true)
        #expect(event.headers.string("content-type") == "application/cloudevents+json")

        // The rows: a guest user, a session with the device, token rows holding only hashes.
        let connection = try PGConnection(conninfo: databaseURL)
        let userRow = try #require(
            try connection.query("SELECT * FROM users WHERE id = \(UUID(uuidString: user.id))").first)
        #expect(try userRow.decode("is_guest") == true)
        #expect(try userRow.decode("handle") == user.handle)
        let sessionRow = try #require(
            try connection.query("SELECT * FROM sessions WHERE user_id = \(UUID(uuidString: user.id))").first)
        #expect(try sessionRow.decode("device_name") == "Pixel 9")
        let tokenRow = try #require(try connection.query("SELECT * FROM access_tokens").first)
        let storedHash = try tokenRow.decode("token_hash", as: PGBytes.self).bytes
        #expect(storedHash == SHA256.hash(session.accessToken))
        let refreshHash = try #require(try connection.query("SELECT token_hash FROM refresh_tokens").first)
            .decode("token_hash", as: PGBytes.self).bytes
        #expect(refreshHash == SHA256.hash(session.refreshToken ?? ""))
        let dump = try connection.query(
            """
            SELECT string_agg(t::text, ' ') AS everything FROM (
              SELECT row_to_json(a)::text AS t FROM access_tokens a UNION ALL SELECT row_to_json(r)::text FROM refresh_tokens r
              UNION ALL SELECT row_to_json(s)::text FROM sessions s UNION ALL SELECT row_to_json(o)::text FROM outbox o
              UNION ALL SELECT row_to_json(p)::text FROM processed_requests p) x
            """
        ).first?.decode("everything", as: String.self)
        let secretPart = String(session.accessToken.split(separator: "|").last ?? "")
        #expect(dump?.contains(secretPart) == false, "no plaintext access token in the database")
        #expect(dump?.contains(session.refreshToken ?? "-") == false, "no plaintext refresh token in the database")
        // The event was published, so the outbox drains (marked by the next batch or while idle).
        var unpublished = -1
        for _ in 0..<100 {
            unpublished =
                try connection.query("SELECT count(*) AS n FROM outbox WHERE published_at IS NULL").first?.decode(
                    "n", as: Int.self) ?? -1
            if unpublished == 0 { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(unpublished == 0)

        await events.close()
        gateway.close()
        try await worker.stop()
    }

    @Test func badRequestsGetErrorResultsOrTheDeadLetterTopic() async throws {
        let topics = try await IntegrationEnvironment.makeTopics()
        let config = try IntegrationEnvironment.workerConfiguration(
            databaseURL: try await IntegrationEnvironment.makeDatabase(), topics: topics)
        let worker = try await RunningWorker(config)
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        let deadLetters = try TopicReader(topic: topics.deadLetters)

        let malformed = "malformed-\(UUID())"
        let unknown = "unknown-\(UUID())"
        let notYet = "apple-\(UUID())"
        try await gateway.publishRaw(key: nil, value: request(id: malformed, data: #"{"method":42}"#))
        try await gateway.publishRaw(key: nil, value: request(id: unknown, data: #"{"method":"carrier-pigeon"}"#))
        try await gateway.publishRaw(
            key: nil, value: request(id: notYet, data: #"{"method":"apple","identity_token":"a.b.c"}"#))
        try await gateway.publishRaw(
            key: Array("poison-key".utf8), value: Array("{not json".utf8),
            headers: [KafkaHeader(key: "x-gateway", string: "ios")])
        try await gateway.publishRaw(key: nil, value: Array(#"{"data":{"method":"guest"}}"#.utf8))

        func error(_ id: String) async throws -> ErrorPayload? {
            let bytes = try #require(try await gateway.awaitResult(requestID: id, timeout: .seconds(30)))
            return try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: bytes).data.error
        }
        let malformedError = try await error(malformed)
        #expect(malformedError?.code == .malformedRequest)
        #expect(malformedError?.field == "data.method")
        #expect(malformedError?.retriable == false)
        #expect(try await error(unknown)?.code == .unsupportedMethod)
        #expect(try await error(notYet)?.code == .unsupportedMethod)

        let dlq = try await deadLetters.waitUntil { $0.count >= 2 }
        let poison = try #require(dlq.first { $0.keyString == "poison-key" })
        #expect(poison.value == Array("{not json".utf8), "the original bytes, unchanged")
        #expect(poison.headers.string("dlq-reason") == "invalid_json")
        #expect(poison.headers.string("dlq-source-topic") == topics.requests)
        #expect(poison.headers.string("dlq-source-partition") != nil)
        #expect(poison.headers.string("dlq-source-offset") != nil)
        #expect(poison.headers.string("dlq-message") != nil)
        #expect(poison.headers.string("x-gateway") == "ios", "original headers are kept")
        #expect(dlq.contains { $0.headers.string("dlq-reason") == "missing_id" })

        await deadLetters.close()
        gateway.close()
        try await worker.stop()
    }

    /// Values of about a megabyte and more used to stop the worker for good: their dead letter
    /// (value plus `dlq-*` headers) was over the producer's limit, the error was fatal and the
    /// offset never moved. Now they are dead-lettered cut short and the worker goes on.
    @Test func oversizedPoisonIsDeadLetteredCutShortAndTheWorkerGoesOn() async throws {
        let topics = try await IntegrationEnvironment.makeTopics()
        let config = try IntegrationEnvironment.workerConfiguration(
            databaseURL: try await IntegrationEnvironment.makeDatabase(), topics: topics)
        let worker = try await RunningWorker(config)
        // The gateway's producer may send what the broker takes, up to 16 MB here.
        var gatewayConfig = config
        gatewayConfig.kafka.properties = ["message.max.bytes": "16000000"]
        let gateway = try GatewayClient(configuration: gatewayConfig, logger: IntegrationEnvironment.quietLogger)
        let deadLetters = try TopicReader(topic: topics.deadLetters)

        let sizes = [999_900, 2_000_000, 10_000_000]
        for (index, size) in sizes.enumerated() {
            // Not JSON: a dead letter. The password-looking part must not survive either.
            var value = Array(#"{"data":{"password":"big-secret"},"padding":""#.utf8)
            value += [UInt8](repeating: UInt8(ascii: "x"), count: size - value.count)
            try await gateway.publishRaw(key: Array("big-\(index)".utf8), value: value)
        }
        let after = "after-\(UUID())"
        try await gateway.publishRaw(key: Array(after.utf8), value: request(id: after, data: #"{"method":"guest"}"#))
        let answer = try #require(try await gateway.awaitResult(requestID: after, timeout: .seconds(60)))
        #expect(try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: answer).data.status == "ok")

        let dlq = try await deadLetters.waitUntil(timeout: .seconds(60)) { messages in
            Set(messages.map(\.keyString)).isSuperset(of: ["big-0", "big-1", "big-2"])
        }
        for (index, size) in sizes.enumerated() {
            let letter = try #require(dlq.first { $0.keyString == "big-\(index)" })
            #expect(letter.headers.string("dlq-truncated") == String(size))
            #expect(letter.value.count == config.processing.deadLetterMaxBytes)
            #expect(letter.headers.string("dlq-redacted") == "credentials")
            #expect(!String(decoding: letter.value, as: UTF8.self).contains("big-secret"))
        }
        await deadLetters.close()
        gateway.close()
        try await worker.stop()
    }

    /// When the limit on the way out is lower than the dead letter (here the producer's own
    /// `message.max.bytes`, as a topic's `max.message.bytes` would be), the record of it goes
    /// instead: headers only, with the original size.
    @Test func aDeadLetterTooLargeForTheTopicIsRecordedWithoutItsValue() async throws {
        let topics = try await IntegrationEnvironment.makeTopics()
        var config = try IntegrationEnvironment.workerConfiguration(
            databaseURL: try await IntegrationEnvironment.makeDatabase(), topics: topics)
        config.kafka.properties = ["message.max.bytes": "100000"]
        config.processing.deadLetterMaxBytes = 400_000
        let worker = try await RunningWorker(config)
        var gatewayConfig = config
        gatewayConfig.kafka.properties = ["message.max.bytes": "16000000"]
        let gateway = try GatewayClient(configuration: gatewayConfig, logger: IntegrationEnvironment.quietLogger)
        let deadLetters = try TopicReader(topic: topics.deadLetters)

        try await gateway.publishRaw(
            key: Array("refused".utf8), value: [UInt8](repeating: UInt8(ascii: "y"), count: 300_000))
        let after = "after-\(UUID())"
        try await gateway.publishRaw(key: Array(after.utf8), value: request(id: after, data: #"{"method":"guest"}"#))
        #expect(try await gateway.awaitResult(requestID: after, timeout: .seconds(60)) != nil)
        let dlq = try await deadLetters.waitUntil(timeout: .seconds(60)) { $0.contains { $0.keyString == "refused" } }
        let letter = try #require(dlq.first { $0.keyString == "refused" })
        #expect(letter.value.isEmpty)
        #expect(letter.headers.string("dlq-truncated") == "300000")
        #expect(letter.headers.string("dlq-reason") == "invalid_json")
        await deadLetters.close()
        gateway.close()
        try await worker.stop()
    }

    /// A retry's log line names the requests it holds up, so following one request id shows its
    /// retries: PostgreSQL drops the worker's connections, the next request's lookup fails once and
    /// is retried, and the retry line carries that request's id.
    @Test func retriesNameTheRequestsTheyHoldUp() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        let config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        let logs = InMemoryLogHandler()
        let application = try await WorkerApplication.build(
            configuration: config.worker, kafka: config.kafka,
            logger: Logger(label: "test", level: .info, handler: logs))
        let group = application.makeServiceGroup(signals: [])
        let task = Task { [application, group] in try await application.run(group) }
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        defer { gateway.close() }

        let warm = UUID().uuidString.lowercased()
        try await gateway.publishRaw(key: nil, value: request(id: warm, data: #"{"method":"guest"}"#))
        _ = try #require(try await gateway.awaitResult(requestID: warm, timeout: .seconds(30)))
        let database = try #require(
            databaseURL.split(separator: "?").first?.split(separator: "/").last.map(String.init))
        let admin = PGDedicatedConnection(
            conninfo: try #require(IntegrationEnvironment.databaseServer) + "/postgres", name: "admin")
        let terminated = try await admin.withConnection { connection in
            try connection.query(
                "SELECT pg_terminate_backend(pid) AS gone FROM pg_stat_activity WHERE datname = \(database) AND pid <> pg_backend_pid()"
            ).count
        }
        await admin.close()
        #expect(terminated > 0)

        let id = UUID().uuidString.lowercased()
        try await gateway.publishRaw(key: nil, value: request(id: id, data: #"{"method":"guest"}"#))
        let answer = try #require(try await gateway.awaitResult(requestID: id, timeout: .seconds(30)))
        #expect(try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: answer).data.status == "ok")
        group.startGracefulShutdown(reason: "test")
        try await task.value

        let retries = logs.lines.filter { $0.contains("Transient failure; retrying") }
        #expect(!retries.isEmpty, "the dropped connections were retried")
        #expect(retries.contains { $0.contains("\"auth.request_ids\":\"\(id)") }, "\(retries)")
    }

    @Test func aRestartedWorkerResumesFromCommittedOffsets() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        let config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        let results = try TopicReader(topic: topics.results)

        let firstIDs = (0..<8).map { "first-\($0)-\(UUID())" }
        let secondIDs = (0..<8).map { "second-\($0)-\(UUID())" }

        let first = try await RunningWorker(config)
        for id in firstIDs {
            try await gateway.publishRaw(key: Array(id.utf8), value: request(id: id, data: #"{"method":"guest"}"#))
        }
        try await results.waitUntil { messages in Set(messages.map(\.keyString)).isSuperset(of: firstIDs) }
        try await first.stop()

        // Published while no worker runs; the next one must take exactly these.
        for id in secondIDs {
            try await gateway.publishRaw(key: Array(id.utf8), value: request(id: id, data: #"{"method":"guest"}"#))
        }
        let second = try await RunningWorker(config)
        try await results.waitUntil { messages in Set(messages.map(\.keyString)).isSuperset(of: secondIDs) }
        let all = try await results.drain(for: .seconds(1))
        try await second.stop()

        let keys = all.map(\.keyString)
        for id in firstIDs + secondIDs { #expect(keys.filter { $0 == id }.count == 1, "one result for \(id)") }
        #expect(second.application.metrics.duplicates.count == 0, "nothing before the committed offset was replayed")
        let users = try PGConnection(conninfo: databaseURL).query("SELECT count(*) AS n FROM users").first?
            .decode("n", as: Int.self)
        #expect(users == 16)

        await results.close()
        gateway.close()
    }

    @Test func aReplayedRequestIsAnsweredAgainIdenticallyAndCreatesNothing() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        var config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        config.resultsKey = try SecureRandom.bytes(32)
        let worker = try await RunningWorker(config)
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        let results = try TopicReader(topic: topics.results)
        let id = "replayed-\(UUID())"
        let key = Array("same-device".utf8)
        try await gateway.publishRaw(key: key, value: request(id: id, data: #"{"method":"guest"}"#))
        try await results.waitUntil { $0.contains { $0.keyString == id } }
        // The same request delivered again (as after a crash before the offset was committed).
        try await gateway.publishRaw(key: key, value: request(id: id, data: #"{"method":"guest"}"#))
        let copies = try await results.waitUntil { $0.filter { $0.keyString == id }.count >= 2 }.filter {
            $0.keyString == id
        }
        #expect(copies.count == 2)
        #expect(copies[0].json["id"] as? String == copies[1].json["id"] as? String, "one answer, one event id")
        let first = try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: copies[0].value).data
        let second = try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: copies[1].value).data
        #expect(first == second, "the same user and the same tokens")
        #expect(worker.application.metrics.duplicates.count == 1)
        // The first was written with its lookup; the replay wrote nothing.
        #expect(worker.application.metrics.writeBatches.labels("lookup").count == 1)
        #expect(worker.application.metrics.writeBatches.labels("loop").count == 0)
        let connection = try PGConnection(conninfo: databaseURL)
        #expect(try connection.query("SELECT count(*) AS n FROM users").first?.decode("n", as: Int.self) == 1)
        #expect(try connection.query("SELECT count(*) AS n FROM sessions").first?.decode("n", as: Int.self) == 1)
        let kept =
            try connection.query("SELECT encode(result_sealed, 'escape') AS r FROM processed_requests").first?
            .decode("r", as: String?.self) ?? ""
        #expect(!kept.contains(first.session?.refreshToken ?? "-"), "the kept result is sealed")
        await results.close()
        gateway.close()
        try await worker.stop()
    }

    /// With `AUTH_BATCH_LINGER_MS`, requests sent apart within the linger are looked up and
    /// written together, in one transaction, once the first has waited the linger; each is
    /// answered. (Without it, each would be its own transaction, answered at once.)
    @Test func aLingerGathersRequestsSentApartIntoOneTransaction() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        var config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        config.processing.batchLinger = .seconds(1)
        let worker = try await RunningWorker(config)
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        // A first request, answered once the worker reads the topic: the three after it reach a
        // worker that is polling, one by one.
        let warmUp = "linger-warm-up-\(UUID())"
        try await gateway.publishRaw(key: nil, value: request(id: warmUp, data: #"{"method":"guest"}"#))
        _ = try #require(try await gateway.awaitResult(requestID: warmUp, timeout: .seconds(30)))
        let batchesBefore = worker.application.metrics.writeBatches.labels("lookup").count
        let ids = (0..<3).map { _ in "linger-\(UUID())" }
        let firstSent = ContinuousClock.now
        for (index, id) in ids.enumerated() {
            if index > 0 { try await Task.sleep(for: .milliseconds(150)) }
            try await gateway.publishRaw(
                key: Array("device-\(index)".utf8), value: request(id: id, data: #"{"method":"guest"}"#))
        }
        for id in ids {
            let bytes = try #require(try await gateway.awaitResult(requestID: id, timeout: .seconds(30)))
            #expect(try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: bytes).data.status == "ok")
        }
        #expect(ContinuousClock.now - firstSent >= .seconds(1), "the first waited the linger")
        #expect(worker.application.metrics.writeBatches.labels("lookup").count == batchesBefore + 1)
        #expect(worker.application.metrics.writeBatches.labels("loop").count == 0)
        #expect(
            try PGConnection(conninfo: databaseURL).query("SELECT count(*) AS n FROM users").first?.decode(
                "n", as: Int.self) == 4)
        gateway.close()
        try await worker.stop()
    }

    /// A linger holds nothing while a batch's worth is in flight (64, or `AUTH_BATCH_MAX` when
    /// smaller): four requests sent at once with batches of four go at once; one sent alone
    /// after them waits the linger.
    @Test func aLingerHoldsNothingWhileABatchIsInFlight() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        var config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        config.processing.batchLinger = .seconds(1)
        config.processing.batchMax = 4
        let worker = try await RunningWorker(config)
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        let warmUp = "linger-warm-up-\(UUID())"
        try await gateway.publishRaw(key: nil, value: request(id: warmUp, data: #"{"method":"guest"}"#))
        _ = try #require(try await gateway.awaitResult(requestID: warmUp, timeout: .seconds(30)))

        let four = (0..<4).map { _ in "linger-full-\(UUID())" }
        let sent = ContinuousClock.now
        for id in four {
            try await gateway.publishRaw(key: Array(id.utf8), value: request(id: id, data: #"{"method":"guest"}"#))
        }
        for id in four {
            _ = try #require(try await gateway.awaitResult(requestID: id, timeout: .seconds(30)))
        }
        #expect(ContinuousClock.now - sent < .seconds(1), "four in flight: none waited")

        // Once the four are finished, one alone waits.
        try await Task.sleep(for: .milliseconds(200))
        let alone = "linger-alone-\(UUID())"
        let aloneSent = ContinuousClock.now
        try await gateway.publishRaw(key: nil, value: request(id: alone, data: #"{"method":"guest"}"#))
        _ = try #require(try await gateway.awaitResult(requestID: alone, timeout: .seconds(30)))
        #expect(ContinuousClock.now - aloneSent >= .seconds(1), "alone, it waited the linger")
        gateway.close()
        try await worker.stop()
    }

    @Test func aRequestPastItsDeadlineIsNotActedOn() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        var config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        config.requestDeadline = 60
        let worker = try await RunningWorker(config)
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        let id = "late-\(UUID())"
        let late = Timestamp.format(Date() - 3600)
        let value = Array(
            #"{"specversion":"1.0","id":"\#(id)","source":"/g","type":"auth.login.request","time":"\#(late)","data":{"method":"guest"}}"#
                .utf8)
        try await gateway.publishRaw(key: nil, value: value)
        let bytes = try #require(try await gateway.awaitResult(requestID: id, timeout: .seconds(30)))
        let result = try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: bytes).data
        #expect(result.error?.code == .internalError)
        #expect(result.error?.retriable == true)
        // Expired, it is not written with its lookup: the loop writes its refusal's audit row.
        #expect(worker.application.metrics.writeBatches.labels("lookup").count == 0)
        #expect(worker.application.metrics.writeBatches.labels("loop").count == 1)
        #expect(
            try PGConnection(conninfo: databaseURL).query("SELECT count(*) AS n FROM users").first?.decode(
                "n", as: Int.self) == 0)
        gateway.close()
        try await worker.stop()
    }

    @Test func registrationPasswordLoginAndGuestUpgradeThroughTheBroker() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        var config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        config.accounts.argon2 = fastArgon2
        let worker = try await RunningWorker(config)
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        let events = try TopicReader(topic: topics.events)
        func send(_ data: LoginRequestData) async throws -> LoginResultData {
            try #require(try await gateway.login(data))
        }
        var register = LoginRequestData(method: "register")
        register.email = "Ada@Example.com"
        register.password = "correct horse"
        register.name = "Ada"
        let registered = try await send(register)
        #expect(registered.status == "ok" && registered.newUser == true)
        #expect(try await send(register).error?.code == .emailTaken)
        register.email = "weak@example.com"
        register.password = "12345678"
        #expect(try await send(register).error?.code == .weakPassword)

        var login = LoginRequestData(method: "password")
        login.email = "ada@example.com"
        login.password = "correct horse"
        let loggedIn = try await send(login)
        #expect(loggedIn.user?.id == registered.user?.id)
        login.password = "wrong horse"
        #expect(try await send(login).error?.code == .invalidCredentials)

        let guest = try await send(LoginRequestData(method: "guest"))
        var upgrade = LoginRequestData(method: "register")
        upgrade.email = "grace@example.com"
        upgrade.password = "correct horse"
        upgrade.linkTo = guest.session?.accessToken
        let upgraded = try await send(upgrade)
        #expect(upgraded.user?.id == guest.user?.id)
        #expect(upgraded.user?.isGuest == false)

        let seen = try await events.waitUntil { $0.count >= 3 }
        let types = seen.map { "\($0.json["type"] as? String ?? "?") \($0.keyString)" }
        #expect(types.contains("auth.user.created \(registered.user?.id ?? "")"))
        #expect(types.contains("auth.user.created \(guest.user?.id ?? "")"))
        #expect(types.contains("auth.user.upgraded \(guest.user?.id ?? "")"))
        await events.close()
        gateway.close()
        try await worker.stop()
    }
}
