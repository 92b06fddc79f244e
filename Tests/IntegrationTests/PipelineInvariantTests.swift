import AuthCrypto
import Foundation
import JOSE
import JOSEFixtures
import Kafka
import Messages
import PGStore
import Passwords
import ServiceKit
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// The invariants the batched request pipeline must hold, end to end through the broker and
/// PostgreSQL. Each of them failed on the one-transaction-per-request worker it replaced.
@Suite(.requiresServices, .serialized, .timeLimit(.minutes(4))) struct PipelineInvariantTests {
    /// A worker, a gateway, and readers of its output topics, for one test.
    struct Harness {
        let config: WorkerSetup
        let worker: RunningWorker
        let gateway: GatewayClient
        let producer: KafkaProducer
        let databaseURL: String

        init(_ configure: (inout WorkerSetup) throws -> Void = { _ in }) async throws {
            databaseURL = try await IntegrationEnvironment.makeDatabase()
            let topics = try await IntegrationEnvironment.makeTopics()
            var config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
            config.resultsKey = try SecureRandom.bytes(32)
            try configure(&config)
            self.config = config
            worker = try await RunningWorker(config)
            gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
            producer = try KafkaProducer(
                configuration: config.kafka.producerConfiguration, logger: IntegrationEnvironment.quietLogger)
            // A request that changes nothing, answered once the worker has joined its group, so the
            // test's own requests are not timed from before the worker could see them.
            let warmUp = "warm-up-\(UUID())"
            try await publish(id: warmUp, data: #"{"method":7}"#)
            _ = try await result(warmUp, timeout: .seconds(60))
        }

        /// Publishes requests in one producer batch, so they reach the worker together.
        func publish(_ requests: [(id: String, key: String, data: String)], time: Date? = nil) async throws {
            try await producer.send(
                requests.map {
                    ProducerRecord(
                        topic: config.topics.requests, key: Array($0.key.utf8),
                        value: TestRequests.request(id: $0.id, data: $0.data, time: time))
                })
        }

        func publish(id: String, key: String? = nil, data: String, time: Date? = nil) async throws {
            try await publish([(id, key ?? id, data)], time: time)
        }

        /// The next result for `id` as its CloudEvent.
        func result(_ id: String, timeout: Duration = .seconds(30)) async throws -> CloudEvent<LoginResultData> {
            let bytes = try #require(
                try await gateway.awaitResult(requestID: id, timeout: timeout), "no result for \(id)")
            return try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: bytes)
        }

        func stop() async throws {
            await producer.shutdown()
            gateway.close()
            try await worker.stop()
        }
    }

    // MARK: - Password throttling

    /// A burst of wrong passwords for one account, arriving together on different keys, gets at
    /// most the threshold's worth of verifications; the right password inside the burst is refused.
    @Test func passwordThrottlingHoldsUnderAParallelBurst() async throws {
        let harness = try await Harness {
            $0.accounts.argon2 = fastArgon2
            $0.accounts.throttle.threshold = 5
            $0.accounts.throttle.baseDelay = 300
        }
        let register = "register-\(UUID())"
        try await harness.publish(
            id: register, data: #"{"method":"register","email":"burst@example.com","password":"correct horse"}"#)
        #expect(try await harness.result(register).data.status == "ok")

        var burst: [(id: String, key: String, data: String)] = []
        for index in 0..<40 {
            let password = index == 20 ? "correct horse" : "wrong horse \(index)"
            burst.append(
                (
                    "burst-\(index)-\(UUID())", "device-\(index)",
                    TestRequests.passwordData("burst@example.com", password)
                ))
        }
        try await harness.publish(burst)
        var codes: [String: String] = [:]
        for request in burst {
            codes[request.id] = try await harness.result(request.id).data.error?.code.rawValue ?? "ok"
        }
        let verifiedWrong = codes.values.filter { $0 == ErrorCode.invalidCredentials.rawValue }.count
        #expect(verifiedWrong <= 5, "\(verifiedWrong) wrong passwords were verified; the threshold is 5")
        #expect(codes[burst[20].id] == ErrorCode.tooManyAttempts.rawValue, "the right password inside the burst")
        #expect(
            harness.worker.application.metrics.passwordVerifications.count <= 6,
            "registration's hash aside, at most 5 verifications")
        try await harness.stop()
    }

    // MARK: - Request ids

    /// A second request reusing a processed id with other content never gets the first one's result.
    @Test func aRequestIDIsBoundToItsRequest() async throws {
        let harness = try await Harness()
        let id = "bound-\(UUID())"
        try await harness.publish(id: id, data: #"{"method":"guest","device":{"name":"victim"}}"#)
        let victim = try await harness.result(id)
        #expect(victim.data.session != nil)

        let attackerKey = try X25519.generateKeyPair()
        try await harness.publish(
            id: id, data: #"{"method":"guest","reply_key":"\#(Base64URL.encode(attackerKey.publicKey))"}"#)
        let answer = try await harness.result(id)
        #expect(answer.data.error?.code == .malformedRequest)
        #expect(answer.data.error?.field == "id")
        #expect(answer.data.session == nil && answer.data.sealedSession == nil && answer.data.user == nil)
        #expect(answer.id != victim.id, "a refusal never shares the victim's result event id")

        // The victim's own redelivery still gets the victim's answer.
        try await harness.publish(id: id, data: #"{"method":"guest","device":{"name":"victim"}}"#)
        let again = try await harness.result(id)
        #expect(again.data == victim.data)
        #expect(again.id == victim.id)
        try await harness.stop()
    }

    /// An error answer and a later success for the same id are two answers: two event ids.
    @Test func anErrorAndALaterSuccessNeverShareAnEventID() async throws {
        let harness = try await Harness { $0.accounts.argon2 = fastArgon2 }
        let register = "register-\(UUID())"
        try await harness.publish(
            id: register, data: #"{"method":"register","email":"retry@example.com","password":"correct horse"}"#)
        #expect(try await harness.result(register).data.status == "ok")
        let id = "retried-\(UUID())"
        try await harness.publish(id: id, data: TestRequests.passwordData("retry@example.com", "wrong horse"))
        let refused = try await harness.result(id)
        #expect(refused.data.error?.code == .invalidCredentials)
        try await harness.publish(id: id, data: TestRequests.passwordData("retry@example.com", "correct horse"))
        let accepted = try await harness.result(id)
        #expect(accepted.data.status == "ok")
        #expect(accepted.id != refused.id)
        try await harness.stop()
    }

    /// A processed request delivered again after its deadline gets its kept answer, not a
    /// late-request error: the idempotency lookup comes first.
    @Test func theKeptAnswerWinsOverTheDeadline() async throws {
        let harness = try await Harness { $0.requestDeadline = 3 }
        let id = "late-replay-\(UUID())"
        let sent = Date()
        try await harness.publish(id: id, data: #"{"method":"guest"}"#, time: sent)
        let first = try await harness.result(id)
        #expect(first.data.status == "ok")
        try await Task.sleep(for: .seconds(4))
        try await harness.publish(id: id, data: #"{"method":"guest"}"#, time: sent)
        let again = try await harness.result(id)
        #expect(again.data == first.data)
        try await harness.stop()
    }

    // MARK: - Guest rate limit

    /// Redeliveries of one guest request count once against the client's limit.
    @Test func theGuestLimitCountsARequestOnce() async throws {
        let harness = try await Harness {
            $0.accounts.guestRateLimit = WorkerConfiguration.RateLimit(count: 2, window: 3600)
        }
        let first = "guest-once-\(UUID())"
        for _ in 0..<4 {
            try await harness.publish(id: first, key: "client-a", data: #"{"method":"guest"}"#)
            #expect(try await harness.result(first).data.status == "ok")
        }
        let second = "guest-twice-\(UUID())"
        try await harness.publish(id: second, key: "client-a", data: #"{"method":"guest"}"#)
        #expect(try await harness.result(second).data.status == "ok", "the second sign-up of this client")
        let third = "guest-thrice-\(UUID())"
        try await harness.publish(id: third, key: "client-a", data: #"{"method":"guest"}"#)
        #expect(try await harness.result(third).data.error?.code == .tooManyAttempts)
        let users = try PGConnection(conninfo: harness.databaseURL).query("SELECT count(*) AS n FROM users")
        #expect(try users.first?.decode("n", as: Int.self) == 2)
        try await harness.stop()
    }

    /// No client id and no key, or a new client id per request, sidesteps every per-client
    /// limit: the global ceiling still holds, across every client, and names when to try again.
    @Test func theGlobalGuestCeilingHoldsWhateverTheClientIds() async throws {
        let harness = try await Harness {
            $0.accounts.guestRateLimit = WorkerConfiguration.RateLimit(count: 20, window: 3600)
            $0.accounts.guestGlobalRateLimit = WorkerConfiguration.RateLimit(count: 3, window: 3600)
        }
        let ids = (0..<6).map { "guest-ceiling-\($0)-\(UUID())" }
        let bodies = ids.indices.map { index in
            index.isMultiple(of: 2) ? #"{"method":"guest"}"# : #"{"method":"guest","client_id":"c-\#(index)"}"#
        }
        for (id, data) in zip(ids, bodies) {
            try await harness.publish(id: id, data: data)
        }
        var codes: [String] = []
        for id in ids {
            let answer = try await harness.result(id).data
            codes.append(answer.error?.code.rawValue ?? answer.status)
            if let error = answer.error {
                #expect(error.retryAfter != nil, "says when to try again")
                #expect((error.retryAfterSeconds ?? 0) >= 1, "in seconds too")
            }
        }
        #expect(codes.count { $0 == "ok" } == 3, "\(codes)")
        #expect(codes.count { $0 == "too_many_attempts" } == 3, "\(codes)")
        let users = try PGConnection(conninfo: harness.databaseURL).query("SELECT count(*) AS n FROM users")
        #expect(try users.first?.decode("n", as: Int.self) == 3)
        // A redelivered allowed request is answered from its kept result and takes nothing more.
        // (Which three were allowed depends on the partitions' order, not on the publish order.)
        // Redelivered as it was sent: the same id with other content is a different request.
        let allowed = try #require(ids.indices.first { codes[$0] == "ok" })
        try await harness.publish(id: ids[allowed], data: bodies[allowed])
        #expect(try await harness.result(ids[allowed]).data.status == "ok")
        try await harness.stop()
    }

    /// Registration had no limit at all: per client (key or client id) and globally now.
    @Test func registrationsAreLimitedPerClientAndGlobally() async throws {
        let harness = try await Harness {
            $0.accounts.argon2 = Argon2Parameters(memoryKiB: 64, iterations: 1, parallelism: 1)
            $0.accounts.registerRateLimit = WorkerConfiguration.RateLimit(count: 2, window: 3600)
            $0.accounts.registerGlobalRateLimit = WorkerConfiguration.RateLimit(count: 4, window: 3600)
        }
        func register(_ index: Int, key: String?, client: String? = nil) async throws -> String {
            let id = "register-\(index)-\(UUID())"
            let clientField = client.map { #","client_id":"\#($0)""# } ?? ""
            try await harness.publish(
                id: id, key: key,
                data:
                    #"{"method":"register","email":"r\#(index)@example.com","password":"a long passphrase \#(index)"\#(clientField)}"#
            )
            let answer = try await harness.result(id).data
            return answer.error?.code.rawValue ?? answer.status
        }
        #expect(try await register(1, key: "device-a") == "ok")
        #expect(try await register(2, key: "device-a") == "ok")
        #expect(try await register(3, key: "device-a") == "too_many_attempts", "the client's third")
        #expect(try await register(4, key: "device-b", client: "c-4") == "ok")
        #expect(try await register(5, key: nil, client: "c-5") == "ok")
        #expect(try await register(6, key: nil, client: "c-6") == "too_many_attempts", "the global ceiling")
        let users = try PGConnection(conninfo: harness.databaseURL).query("SELECT count(*) AS n FROM users")
        #expect(try users.first?.decode("n", as: Int.self) == 4)
        try await harness.stop()
    }

    /// Credentials sealed to the worker's published key sign in through the broker; with sealing
    /// required, a clear password is refused naming its field, and nothing is written for it.
    @Test func sealedCredentialsSignInAndClearOnesAreRefusedWhenRequired() async throws {
        let pair = try X25519.generateKeyPair()
        let keyFile = FileManager.default.temporaryDirectory.appendingPathComponent("credential-\(UUID()).pem")
        try SecretFile.create(atPath: keyFile.path, contents: Array(try X25519.privateKeyPEM(pair.privateKey).utf8))
        defer { try? FileManager.default.removeItem(at: keyFile) }
        let harness = try await Harness {
            $0.accounts.argon2 = Argon2Parameters(memoryKiB: 64, iterations: 1, parallelism: 1)
            $0.credentialKeyPaths = [keyFile.path]
            $0.requireSealedCredentials = true
        }
        let key = try CredentialKeys.Key(privateKey: pair.privateKey)
        func sealed(_ password: String) throws -> String {
            try JWE.sealECDHES(Array(password.utf8), to: key.publicKey, keyID: key.keyID)
        }
        let register = "sealed-register-\(UUID())"
        try await harness.publish(
            id: register,
            data:
                #"{"method":"register","email":"s@example.com","sealed_credentials":{"password":"\#(try sealed("a sealed passphrase"))"}}"#
        )
        #expect(try await harness.result(register).data.status == "ok")
        let login = "sealed-login-\(UUID())"
        try await harness.publish(
            id: login,
            data:
                #"{"method":"password","email":"s@example.com","sealed_credentials":{"password":"\#(try sealed("a sealed passphrase"))"}}"#
        )
        #expect(try await harness.result(login).data.session != nil, "the sealed password was the one registered")
        let clear = "clear-login-\(UUID())"
        try await harness.publish(
            id: clear, data: #"{"method":"password","email":"s@example.com","password":"a sealed passphrase"}"#)
        let refused = try await harness.result(clear).data.error
        #expect(refused?.code == .malformedRequest)
        #expect(refused?.field == "data.password")
        try await harness.stop()
    }

    // MARK: - Failures that are not transient

    /// A redelivered request whose kept answer cannot be opened (the results key changed) is
    /// answered, not left without an answer.
    @Test func aKeptAnswerThatCannotBeOpenedIsStillAnswered() async throws {
        var harness = try await Harness()
        let id = "rekeyed-\(UUID())"
        try await harness.publish(id: id, data: #"{"method":"guest"}"#)
        #expect(try await harness.result(id).data.status == "ok")
        let config = harness.config
        try await harness.stop()

        var rekeyed = config
        rekeyed.resultsKey = try SecureRandom.bytes(32)
        rekeyed.kafka.group = IntegrationEnvironment.uniqueName("group")
        harness = try await Harness { $0 = rekeyed }
        // The new group reads the requests topic from the start: the request arrives again.
        let results = try TopicReader(topic: config.topics.results)
        let copies = try await results.waitUntil(timeout: .seconds(40)) { $0.filter { $0.keyString == id }.count >= 2 }
            .filter { $0.keyString == id }
        await results.close()
        let answer = try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: try #require(copies.last).value)
        #expect(answer.data.error?.code == .internalError)
        #expect(answer.data.error?.retriable == true)
        #expect(answer.data.session == nil)
        let users = try PGConnection(conninfo: config.databaseURL).query("SELECT count(*) AS n FROM users")
        #expect(try users.first?.decode("n", as: Int.self) == 1, "acted on once")
        try await harness.stop()
    }

    /// A notification that can never be applied (a forgery) goes to the dead-letter topic.
    @Test func aRefusedNotificationIsDeadLettered() async throws {
        let server = try KeyServer()
        defer { server.stop() }
        server.serve("/apple/keys", .init(body: TestSigner.keySet([Signers.rsa2048])))
        let harness = try await Harness {
            $0.appleAudiences = ["com.example.app"]
            $0.appleKeysURL = server.url("/apple/keys").absoluteString
        }
        let deadLetters = try TopicReader(topic: harness.config.topics.deadLetters)
        let now = Int(Date().timeIntervalSince1970)
        let forged = Signers.rsa3072.token(
            [
                "iss": "https://appleid.apple.com", "aud": "com.example.app", "iat": now, "exp": now + 600,
                "events": #"{"type":"account-delete","sub":"someone"}"#,
            ], algorithm: .rs256, header: ["kid": "rsa2048"])
        try await harness.gateway.publishRaw(
            topic: harness.config.topics.notifications, key: Array("forged".utf8),
            value: MessageCoding.encode(
                CloudEvent(
                    id: "forged", source: "/x", type: "auth.provider.notification", time: nil,
                    data: ProviderNotificationData(payload: forged)
                )))
        let dlq = try await deadLetters.waitUntil { $0.contains { $0.keyString == "forged" } }
        let letter = try #require(dlq.first { $0.keyString == "forged" })
        #expect(letter.headers.string("dlq-source-topic") == harness.config.topics.notifications)
        #expect(letter.headers.string("dlq-reason") == "notification_refused")
        await deadLetters.close()
        try await harness.stop()
    }

    /// Apple's keys unreachable: a notification waits for them in its own lane; logins go on.
    @Test func anUnverifiableNotificationNeverBlocksLogins() async throws {
        let server = try KeyServer()
        defer { server.stop() }
        server.serve("/apple/keys", .init(status: 503, body: Data()))
        let harness = try await Harness {
            $0.appleAudiences = ["com.example.app"]
            $0.appleKeysURL = server.url("/apple/keys").absoluteString
        }
        let now = Int(Date().timeIntervalSince1970)
        let token = Signers.rsa2048.token(
            [
                "iss": "https://appleid.apple.com", "aud": "com.example.app", "iat": now, "exp": now + 600,
                "events": #"{"type":"consent-revoked","sub":"someone"}"#,
            ], algorithm: .rs256)
        try await harness.gateway.publishRaw(
            topic: harness.config.topics.notifications, key: nil,
            value: MessageCoding.encode(
                CloudEvent(
                    id: "stuck", source: "/x", type: "auth.provider.notification", time: nil,
                    data: ProviderNotificationData(payload: token)))
        )
        try await Task.sleep(for: .milliseconds(500))
        for index in 0..<3 {
            let id = "after-notification-\(index)-\(UUID())"
            try await harness.publish(id: id, data: #"{"method":"guest"}"#)
            #expect(try await harness.result(id, timeout: .seconds(15)).data.status == "ok")
        }
        try await harness.stop()
    }

    // MARK: - Slow work beside fast work

    /// 150 password logins (real Argon2id cost) on one key and on many do not hold guest logins back.
    @Test func passwordLoginsDoNotHoldGuestsHostage() async throws {
        let harness = try await Harness { $0.accounts.throttle.threshold = 10_000 }
        let register = "register-\(UUID())"
        try await harness.publish(
            id: register, data: #"{"method":"register","email":"slow@example.com","password":"correct horse"}"#)
        #expect(try await harness.result(register, timeout: .seconds(60)).data.status == "ok")
        var passwords: [(id: String, key: String, data: String)] = []
        for index in 0..<150 {
            passwords.append(
                (
                    "slow-\(index)-\(UUID())", index < 75 ? "one-key" : "key-\(index)",
                    TestRequests.passwordData("slow@example.com", "correct horse")
                ))
        }
        try await harness.publish(passwords)
        var latencies: [Duration] = []
        // Twenty guests, one every 100 ms, across the password backlog: enough for the median to
        // stand still when a cluster of three lands in a scheduling hiccup (seen once in eight runs
        // with ten).
        for index in 0..<20 {
            try await Task.sleep(for: .milliseconds(100))
            let id = "fast-\(index)-\(UUID())"
            let sent = ContinuousClock.now
            try await harness.publish(id: id, data: #"{"method":"guest"}"#)
            #expect(try await harness.result(id).data.status == "ok")
            latencies.append(ContinuousClock.now - sent)
        }
        let slowest = latencies.max() ?? .zero
        let median = latencies.sorted()[latencies.count / 2]
        print("guest latencies beside password logins: \(latencies.map(\.wholeMilliseconds)) ms")
        // Held hostage, every guest would wait out the Argon2 backlog (150 hashes: seconds). Judged
        // by the median, so one scheduling hiccup of this shared 2-core machine (the first guest,
        // arriving with the burst, took 0.3-0.7 s in most runs, 1.9 s and 3 s in two loaded ones,
        // the other guests of those runs under 0.5 s) does not decide it; the benchmark measures
        // the real latencies.
        #expect(median < .milliseconds(250), "guest logins waited \(latencies) behind password logins")
        #expect(slowest < .seconds(5), "a guest login waited \(slowest) behind password logins")
        for request in passwords {
            let data = try await harness.result(request.id, timeout: .seconds(60)).data
            #expect(
                data.status == "ok", "\(request.id): \(data.error?.code.rawValue ?? "") \(data.error?.message ?? "")")
        }
        try await harness.stop()
    }

    // MARK: - Refresh

    /// A refresh answered from the grace interval is kept: its own redelivery is answered again.
    @Test func aGraceReplayIsKeptLikeAnyAnswer() async throws {
        let harness = try await Harness { $0.sessions.refreshReuseGrace = 30 }
        let guest = "guest-\(UUID())"
        try await harness.publish(id: guest, data: #"{"method":"guest"}"#)
        let token = try #require(try await harness.result(guest).data.session?.refreshToken)
        let refresh = #"{"method":"refresh","refresh_token":"\#(token)"}"#
        let first = "refresh-1-\(UUID())"
        try await harness.publish(id: first, data: refresh)
        let rotated = try await harness.result(first)
        #expect(rotated.data.status == "ok")
        let second = "refresh-2-\(UUID())"
        try await harness.publish(id: second, data: refresh)
        let replayed = try await harness.result(second)
        #expect(replayed.data.session == rotated.data.session, "the same successor within the grace interval")
        try await harness.publish(id: second, data: refresh)
        let again = try await harness.result(second)
        #expect(again.data == replayed.data)
        try await harness.stop()
    }
}
