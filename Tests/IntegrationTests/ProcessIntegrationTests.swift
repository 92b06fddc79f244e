import AuthCrypto
import Foundation
import Messages
import PGStore
import Synchronization
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// The built `auth-worker` binary as operators run it: environment in, JSON logs out, SIGTERM to stop.
@Suite(.requiresServices, .serialized, .timeLimit(.minutes(4))) struct ProcessIntegrationTests {
    static var binary: URL? {
        let candidate = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("auth-worker")
        return FileManager.default.isExecutableFile(atPath: candidate.path) ? candidate : nil
    }

    func launch(_ arguments: [String], environment: [String: String]) throws -> (Process, Pipe, Pipe) {
        let process = Process()
        let binary: URL = try #require(Self.binary, "build the auth-worker product first")
        process.executableURL = binary
        process.arguments = arguments
        // A sanitizer's settings reach a binary built with it (scripts/sanitize: no leak reports
        // about the libraries' process-lifetime allocations, which would fail a command's exit).
        let sanitizers = SanitizerRun.inheritedEnvironment
        process.environment = environment.merging(["PATH": "/usr/bin:/bin"].merging(sanitizers) { $1 }) { $1 }
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        return (process, output, errors)
    }

    /// What a command run to its end printed, and how it ended.
    struct Ended {
        let status: Int32
        let output: String
        let errors: String
    }

    /// Runs the binary to its end on a thread of its own (never holding a cooperative thread
    /// while it waits), reading both pipes as it goes.
    func runToEnd(_ arguments: [String], environment: [String: String] = [:]) async throws -> Ended {
        let (process, output, errors) = try launch(arguments, environment: environment)
        return try await Blocking.run {
            let errorText = Mutex(Data())
            let errorsRead = DispatchSemaphore(value: 0)
            Thread {
                errorText.withLock { $0 = errors.fileHandleForReading.readDataToEndOfFile() }
                errorsRead.signal()
            }.start()
            let outputData = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            errorsRead.wait()
            return Ended(
                status: process.terminationStatus, output: String(decoding: outputData, as: UTF8.self),
                errors: String(decoding: errorText.withLock { $0 }, as: UTF8.self))
        }
    }

    /// A private key file is never readable by anyone but its owner, not even for an instant: a
    /// watcher stats every file in the folder while keys are written, and sees no other mode.
    @Test func keyFilesAreNeverReadableByOthersWhileWritten() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keys-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let previous = umask(0o022)
        defer { umask(previous) }
        let watching = Atomic<Bool>(true)
        let exposed = Mutex<[String]>([])
        let path = directory.path
        let watcher = Thread {
            while watching.load(ordering: .acquiring) {
                for name in (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? [] {
                    var info = stat()
                    if stat(path + "/" + name, &info) == 0, info.st_mode & 0o077 != 0 {
                        exposed.withLock { $0.append("\(name) \(String(info.st_mode & 0o777, radix: 8))") }
                    }
                }
            }
        }
        watcher.start()
        // Ten keys, each waited for off the cooperative pool (the watcher keeps a core busy).
        for index in 0..<10 {
            let (generate, _, _) = try launch(
                ["keys", "generate", directory.appendingPathComponent("key-\(index).pem").path], environment: [:])
            await generate.exited()
            #expect(generate.terminationStatus == 0)
        }
        watching.store(false, ordering: .releasing)
        let seen = exposed.withLock { $0 }
        #expect(seen.isEmpty, "key files readable by others while written: \(seen.prefix(5))")
    }

    @Test func runAnswersAGuestAndDrainsOnSIGTERM() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        let (keyPath, _) = try TestKeys.temporaryKeyFile()
        defer { try? FileManager.default.removeItem(atPath: keyPath) }
        let group = IntegrationEnvironment.uniqueName("group")
        let environment = [
            "AUTH_KAFKA_BROKERS": try #require(IntegrationEnvironment.kafkaBrokers), "AUTH_DATABASE_URL": databaseURL,
            "AUTH_KAFKA_GROUP": group, "AUTH_TOPIC_REQUESTS": topics.requests, "AUTH_TOPIC_RESULTS": topics.results,
            "AUTH_TOPIC_EVENTS": topics.events, "AUTH_TOPIC_DLQ": topics.deadLetters, "AUTH_SIGNING_KEYS": keyPath,
            "AUTH_KAFKA_SESSION_TIMEOUT_MS": "6000", "AUTH_HEALTH_PORT": "0", "AUTH_KAFKA_FETCH_WAIT_MS": "5",
        ]
        let (process, output, _) = try launch(["run"], environment: environment)
        let logs = LogCollector(output)

        var config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        config.kafka.group = group
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        let id = UUID().uuidString.lowercased()
        var data = LoginRequestData(method: "guest")
        data.device = .init(name: "iPad", platform: "ios")
        try await gateway.publish(requestID: id, data: data)
        let bytes = try #require(try await gateway.awaitResult(requestID: id, timeout: .seconds(30)))
        let result = try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: bytes)
        let token = try #require(result.data.session?.accessToken)
        #expect(token.split(separator: ".").count == 3, "JWT access tokens by default")
        // An invalid request (answered with an error) and a poison message (dead-lettered) are
        // counted too.
        let invalidID = UUID().uuidString.lowercased()
        try await gateway.publish(requestID: invalidID, data: LoginRequestData(method: "teleport"))
        let invalid = try #require(try await gateway.awaitResult(requestID: invalidID, timeout: .seconds(30)))
        let invalidCode = try #require(
            try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: invalid).data.error?.code.rawValue)
        try await gateway.publishRaw(key: Array("poison".utf8), value: Array("not json".utf8))
        gateway.close()

        // The health endpoint, as an orchestrator probes it.
        let port = try #require(await logs.value(of: "http.port", inLineWith: "Health endpoint listening"))
        #expect(try await HTTP.get("http://127.0.0.1:\(port)/livez").status == 200)
        #expect(try await HTTP.get("http://127.0.0.1:\(port)/readyz").status == 200)
        var metrics = try await HTTP.get("http://127.0.0.1:\(port)/metrics")
        // Dead letters are counted once published; lag is sampled each second.
        for _ in 0..<50
        where !metrics.body.contains("auth_requests_dead_lettered_total{reason=")
            || !metrics.body.contains("\nauth_consumer_lag{")
        {
            try await Task.sleep(for: .milliseconds(100))
            metrics = try await HTTP.get("http://127.0.0.1:\(port)/metrics")
        }
        try await MetricsExposition.check(metrics.body)
        #expect(metrics.body.contains("auth_results_total{code=\"ok\"} 1"))
        #expect(metrics.body.contains("auth_results_total{code=\"\(invalidCode)\"} 1"), "invalid requests counted")
        #expect(metrics.body.contains("auth_requests_dead_lettered_total{reason=\"invalid_json\"} 1"))
        #expect(metrics.body.contains("auth_request_duration_seconds_count{method=\"guest\",outcome=\"ok\"} 1"))
        #expect(
            metrics.body.contains("auth_request_duration_seconds_bucket{method=\"guest\",outcome=\"ok\",le=\"10\"} 1"))
        #expect(
            metrics.body.contains("auth_build_info{version=\"\(CommandLineInterface.version)\",commit=\"unknown\"} 1"))
        for family in [
            "auth_consumer_lag{topic=", "auth_outbox_backlog_events ", "auth_db_pool_connections_in_use ",
            "process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_open_fds ",
        ] {
            #expect(metrics.body.contains("\n" + family), "\(family) is exposed")
        }
        #expect(try await HTTP.get("http://127.0.0.1:\(port)/nope").status == 404)

        let started = ContinuousClock.now
        process.terminate()  // SIGTERM
        let ended = await process.exited()
        #expect(process.terminationStatus == 0)
        #expect(ended - started < .seconds(15))
        let text = await logs.all()
        let lines = text.split(separator: "\n")
        #expect(lines.allSatisfy { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) != nil }, "JSON lines only")
        #expect(text.contains("\"msg\":\"Stopped cleanly\""))
        #expect(text.contains(id), "the request id is logged")
        #expect(!text.contains(token), "the access token is not")
        #expect(!text.contains(result.data.session?.refreshToken ?? "-"), "nor the refresh token")
    }

    /// Authentication to the broker failing (here SASL against a broker that does not speak the
    /// mechanism) is logged as an error, with librdkafka's reason, and the worker is not ready.
    /// `/readyz`'s status once it answers 503, or its last within 6 s: a worker the broker refuses.
    func readinessOnceRefused(port: String) async throws -> Int {
        var ready = 0
        for _ in 0..<30 {
            ready = try await HTTP.get("http://127.0.0.1:\(port)/readyz").status
            if ready == 503 { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        return ready
    }

    @Test func brokerAuthenticationFailuresAreLoggedAsErrors() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let (keyPath, _) = try TestKeys.temporaryKeyFile()
        defer { try? FileManager.default.removeItem(atPath: keyPath) }
        let properties = FileManager.default.temporaryDirectory.appendingPathComponent("kafka-\(UUID()).properties")
        try "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=auth\nsasl.password=wrong\n"
            .write(to: properties, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: properties) }
        let (process, output, _) = try launch(
            ["run"],
            environment: [
                "AUTH_KAFKA_BROKERS": try #require(IntegrationEnvironment.kafkaBrokers),
                "AUTH_DATABASE_URL": databaseURL,
                "AUTH_SIGNING_KEYS": keyPath, "AUTH_KAFKA_PROPERTIES_FILE": properties.path, "AUTH_HEALTH_PORT": "0",
                "AUTH_MIGRATE_ON_START": "true", "AUTH_KAFKA_GROUP": IntegrationEnvironment.uniqueName("group"),
            ])
        let logs = LogCollector(output)
        let reason = await logs.value(of: "msg", inLineWith: "SASL")
        let port = try #require(await logs.value(of: "http.port", inLineWith: "Health endpoint listening"))
        let ready = try await readinessOnceRefused(port: port)
        process.terminate()
        await process.exited()
        let lines = await logs.all().split(separator: "\n")
        let failure = lines.first { $0.contains("SASL") }
        #expect(reason != nil, "the SASL failure is logged")
        #expect(failure?.contains("\"level\":\"error\"") == true, "as an error: \(failure ?? "none")")
        #expect(!lines.contains { $0.contains("wrong") }, "the password is not logged")
        #expect(ready == 503, "not ready while the broker refuses the worker")
    }

    /// The Python gateway example (`examples/python-gateway`, confluent-kafka + jwcrypto) against
    /// the real binary: a guest login with a sealed session, the token verified against the
    /// worker's JWK Set over HTTP, a passkey added and signed in with (the software authenticator
    /// in the browser's place), a GitHub sign-in (the stand-in provider in GitHub's place), a phone
    /// sign-up (the example opening the texted code as the SMS service would), introspected,
    /// logged out.
    @Test(.requiresIndependentJOSE, .requiresSoftAuthenticator) func thePythonGatewayExampleRuns() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        let (keyPath, _) = try TestKeys.temporaryKeyFile(.es256)
        defer { try? FileManager.default.removeItem(atPath: keyPath) }
        let brokers = try #require(IntegrationEnvironment.kafkaBrokers)
        let github = try await OAuthStandIn(.github)
        defer { github.stop() }
        // The SMS service's key pair: its private half as the JWK the example reads.
        let sms = try X25519.generateKeyPair()
        let smsKeyFile = FileManager.default.temporaryDirectory.appendingPathComponent("sms-\(UUID()).jwk").path
        let resultsKeyFile = FileManager.default.temporaryDirectory.appendingPathComponent("results-\(UUID())").path
        defer {
            try? FileManager.default.removeItem(atPath: smsKeyFile)
            try? FileManager.default.removeItem(atPath: resultsKeyFile)
        }
        try Data(
            #"{"kty":"OKP","crv":"X25519","x":"\#(Base64URL.encode(sms.publicKey))","d":"\#(Base64URL.encode(sms.privateKey))"}"#
                .utf8
        ).write(to: URL(fileURLWithPath: smsKeyFile))
        try Data(Hex.encode(try SecureRandom.bytes(32)).utf8).write(to: URL(fileURLWithPath: resultsKeyFile))
        let (process, output, _) = try launch(
            ["run"],
            environment: [
                "AUTH_KAFKA_BROKERS": brokers, "AUTH_DATABASE_URL": databaseURL,
                "AUTH_KAFKA_GROUP": IntegrationEnvironment.uniqueName("group"), "AUTH_TOPIC_REQUESTS": topics.requests,
                "AUTH_TOPIC_RESULTS": topics.results, "AUTH_TOPIC_EVENTS": topics.events,
                "AUTH_TOPIC_NOTIFICATIONS": topics.notifications, "AUTH_TOPIC_DLQ": topics.deadLetters,
                "AUTH_SIGNING_KEYS": keyPath, "AUTH_KAFKA_SESSION_TIMEOUT_MS": "6000", "AUTH_HEALTH_PORT": "0",
                "AUTH_HEALTH_ADDRESS": "127.0.0.1", "AUTH_REQUIRE_REPLY_KEY": "true", "AUTH_KAFKA_FETCH_WAIT_MS": "5",
                "AUTH_WEBAUTHN_RP_ID": "example.com", "AUTH_OIDC_PROVIDERS": try github.providersFile(),
                "AUTH_SMS_KEY": Base64URL.encode(sms.publicKey), "AUTH_PHONE_CODE_SIGNUP": "true",
                "AUTH_RESULTS_KEY_FILE": resultsKeyFile,
            ])
        let logs = LogCollector(output)
        // Stopped, not waited for: a wait in `defer` would hold a cooperative thread for the
        // worker's whole drain (Foundation reaps it when it exits).
        defer { process.terminate() }
        let port = try #require(await logs.value(of: "http.port", inLineWith: "Health endpoint listening"))
        _ = await logs.value(of: "msg", inLineWith: "Partitions assigned")
        let example = try await Subprocess.run(
            ["python3", DevEnvironmentTests.root.appendingPathComponent("examples/python-gateway/gateway.py").path],
            environment: ProcessInfo.processInfo.environment.merging([
                "AUTH_KAFKA_BROKERS": brokers, "AUTH_WORKER_URL": "http://127.0.0.1:\(port)",
                "AUTH_TOPIC_REQUESTS": topics.requests, "AUTH_TOPIC_RESULTS": topics.results,
                "AUTH_EXAMPLE_GITHUB_STAND_IN": github.url, "AUTH_EXAMPLE_REDIRECT_URI": OAuthStandIn.redirectURI,
                "AUTH_TOPIC_EVENTS": topics.events, "AUTH_EXAMPLE_SMS_KEY_FILE": smsKeyFile,
                "AUTH_EXAMPLE_AUTHENTICATOR": DevEnvironmentTests.root.appendingPathComponent(
                    "Tests/Tools/soft-authenticator.py"
                ).path,
            ]) { $1 })
        let report = example.output
        #expect(example.status == 0, "\(report)")
        let steps = report.split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
        #expect(
            steps.map { $0["step"] as? String } == [
                "login", "verify", "passkey", "github", "phone", "introspect", "logout",
            ],
            "\(report)")
        #expect(steps.first?["session_opened"] as? Bool == true)
    }

    @Test func runRefusesToStartWithoutASigningKey() async throws {
        let ended = try await runToEnd(
            ["run"],
            environment: [
                "AUTH_DATABASE_URL": "postgres://postgres@127.0.0.1:1/none", "AUTH_KAFKA_BROKERS": "127.0.0.1:1",
            ])
        #expect(ended.status == 1)
        #expect(ended.errors.contains("AUTH_SIGNING_KEYS"))
        #expect(ended.errors.split(separator: "\n").count == 1, "one line")
    }

    @Test func helpAndUnknownCommands() async throws {
        let help = try await runToEnd(["--help"])
        #expect(help.status == 0)
        #expect(help.output.contains("usage:"))
        let unknown = try await runToEnd(["frobnicate"])
        #expect(unknown.status == 2)
        // Options a command does not take are refused before anything starts (`run --bogus` used
        // to start and join the live group).
        for arguments in [["run", "--bogus"], ["migrate", "--force"], ["version", "extra"]] {
            let refused = try await runToEnd(arguments)
            #expect(refused.status == 2, "\(arguments)")
            #expect(refused.errors.contains("usage") || arguments[0] != "migrate")
        }
        let version = try await runToEnd(["version"])
        #expect(version.status == 0)
        #expect(
            version.output.hasPrefix("auth-worker ") && version.output.contains("OpenSSL")
                && version.output.contains("librdkafka"))
    }

    /// The binary allocates with jemalloc, its thread caches raised to 256 KiB for librdkafka's
    /// compression context and no eager arena for password hashes' blocks (`Sources/CJemalloc`),
    /// and an operator's `MALLOC_CONF` still wins.
    @Test(.enabled(if: SanitizerRun.linksJemalloc, "a sanitizer's build links no jemalloc"))
    func theBinaryAllocatesWithJemallocAndItsSettings() async throws {
        let version = try await runToEnd(["version"])
        #expect(version.status == 0)
        #expect(version.output.contains(", jemalloc 5."), "\(version.output)")
        #expect(version.output.contains("(tcache_max 262144, oversize_threshold 0)"), "\(version.output)")
        let overridden = try await runToEnd(["version"], environment: ["MALLOC_CONF": "tcache_max:65536"])
        #expect(overridden.output.contains("(tcache_max 65536, oversize_threshold 0)"), "\(overridden.output)")
    }

    @Test func migrateAndKeysCommands() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        // --dry-run and --status only say what would be applied (--dry-run used to migrate).
        for option in ["--dry-run", "--status"] {
            let dry = try await runToEnd(["migrate", option], environment: ["AUTH_DATABASE_URL": databaseURL])
            #expect(dry.status == 0)
            #expect(dry.output.contains("would apply: 1 (initial schema)"))
        }
        let first = try await runToEnd(["migrate"], environment: ["AUTH_DATABASE_URL": databaseURL])
        #expect(first.status == 0)
        #expect(first.output.contains("applied 1"))
        let again = try await runToEnd(["migrate"], environment: ["AUTH_DATABASE_URL": databaseURL])
        #expect(again.output.contains("up to date"))

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keys-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let keyPath = directory.appendingPathComponent("new.pem").path
        let generate = try await runToEnd(["keys", "generate", keyPath, "--alg", "ES256"])
        #expect(generate.status == 0)
        let permissions = try FileManager.default.attributesOfItem(atPath: keyPath)[.posixPermissions] as? Int
        #expect(permissions == 0o600)
        let overwrite = try await runToEnd(["keys", "generate", keyPath])
        #expect(overwrite.status == 2, "never overwrites a key")

        let jwks = try await runToEnd(["keys", "jwks"], environment: ["AUTH_SIGNING_KEYS": keyPath])
        let document = try JSONSerialization.jsonObject(with: Data(jwks.output.utf8))
        let keys = try #require((document as? [String: Any])?["keys"] as? [[String: String]])
        #expect(keys.count == 1)
        #expect(keys.first?["kty"] == "EC" && keys.first?["alg"] == "ES256" && keys.first?["d"] == nil)
    }

    /// The operator's debugging tool on the real tokens: verified with the clock pinned, expired now.
    @Test(.requiresSharedTestData) func tokenVerifyOnRealTokens() async throws {
        let samples = try RealTokens.samples("apple") + RealTokens.samples("google")
        let directory = try #require(SharedTestData.directory)
        for sample in samples where sample.claims["sub"] is String {
            let iss = try #require(sample.claims["iss"] as? String)
            guard iss != "https://cloud.google.com/iap" else { continue }
            let provider = iss.contains("apple") ? "apple" : "google"
            let audience = try #require(sample.claims["aud"] as? String)
            let iat = try #require(sample.claims["iat"] as? Double)
            let environment = ["AUTH_\(provider.uppercased())_AUDIENCES": audience]
            let keys = directory.appendingPathComponent("real/\(sample.jwksFile)").path
            var arguments = ["token", "verify", "--provider", provider, "--keys", keys, "--at", String(Int(iat) + 60)]
            if provider == "google", let nonce = sample.claims["nonce"] as? String { arguments += ["--nonce", nonce] }
            let ok = try await runToEnd(arguments + [sample.token], environment: environment)
            #expect(ok.status == 0)
            let document = try JSONSerialization.jsonObject(with: Data(ok.output.utf8))
            let claims = (document as? [String: Any])?["claims"] as? [String: Any]
            #expect(claims?["sub"] as? String == sample.claims["sub"] as? String)

            let expired = try await runToEnd(
                ["token", "verify", "--provider", provider, "--keys", keys, sample.token], environment: environment)
            #expect(expired.status == 1)
            #expect(expired.errors.hasPrefix("token_expired"))
        }
        let unknown = try await runToEnd(["token", "verify", "--provider", "myspace", "x.y.z"])
        #expect(unknown.status == 1)
        #expect(unknown.errors.contains("unknown_provider"))
    }

    @Test func operatorCommandsDeleteUsersAndPurgeGuestsWithEvents() async throws {
        let databaseURL = try await IntegrationEnvironment.makeMigratedDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        let connection = try PGConnection(conninfo: databaseURL)
        let service = try await FlowHarness(
            clock: SystemClock(), passwords: try PasswordService(parameters: fastArgon2, threads: 1),
            databaseURL: databaseURL)
        func guest() async throws -> String {
            let request = LoginRequest(
                id: UUID().uuidString, source: "/t", time: nil, traceparent: nil, method: .guest,
                data: .init(method: "guest"))
            return try #require(try await service.handle(request)?.result.user?.id)
        }
        let stale = try await guest()
        let fresh = try await guest()
        try connection.query(
            "UPDATE users SET created_at = now() - interval '40 days' WHERE id = \(UUID(uuidString: stale))")
        var register = LoginRequestData(method: "register")
        register.email = "member@example.com"
        register.password = "correct horse"
        let member = try #require(
            try await service.handle(
                LoginRequest(
                    id: UUID().uuidString, source: "/t", time: nil, traceparent: nil, method: .register, data: register)
            )?.result.user?.id)

        let environment = [
            "AUTH_DATABASE_URL": databaseURL, "AUTH_KAFKA_BROKERS": try #require(IntegrationEnvironment.kafkaBrokers),
            "AUTH_TOPIC_EVENTS": topics.events,
        ]
        let events = try TopicReader(topic: topics.events)

        let (show, showOutput, _) = try launch(["users", "show", "member@example.com"], environment: environment)
        await show.exited()
        let shown = String(decoding: showOutput.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(show.terminationStatus == 0)
        #expect(shown.contains(member))
        #expect(shown.contains("\"has_password\":true"))
        #expect(!shown.contains("argon2"), "no hash is shown")

        let (purge, purgeOutput, purgeErrors) = try launch(
            ["guests", "purge", "--older-than", "30d"], environment: environment)
        await purge.exited()
        let purgeSaid = String(decoding: purgeErrors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(purge.terminationStatus == 0, "\(purgeSaid)")
        #expect(
            String(decoding: purgeOutput.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).hasPrefix(
                "purged 1 guest"))

        let (audit, auditOutput, _) = try launch(["users", "audit", "member@example.com"], environment: environment)
        await audit.exited()
        #expect(audit.terminationStatus == 0)
        let trail = String(decoding: auditOutput.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(trail.split(separator: "\n").count == 1 && trail.contains(#""action":"register""#), "\(trail)")

        let (delete, _, deleteErrors) = try launch(["users", "delete", member], environment: environment)
        await delete.exited()
        let deleteSaid = String(decoding: deleteErrors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(delete.terminationStatus == 0, "\(deleteSaid)")
        // The trail outlives the account, read by its id.
        let (after, afterOutput, _) = try launch(["users", "audit", member, "--since", "1h"], environment: environment)
        await after.exited()
        let afterTrail = String(decoding: afterOutput.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(after.terminationStatus == 0)
        #expect(afterTrail.contains(#""action":"user_deleted""#) && afterTrail.contains(#""actor":"operator""#))

        let remaining = try connection.query("SELECT id FROM users").map {
            try $0.decode("id", as: UUID.self).lowercasedString
        }
        #expect(remaining == [fresh])
        #expect(try connection.query("SELECT count(*) AS n FROM sessions").first?.decode("n", as: Int.self) == 1)
        // The commands published their own events (the flows' user.created rows wait for a relay).
        let unpublished = try connection.query(
            """
            SELECT count(*) AS n FROM outbox WHERE published_at IS NULL
              AND convert_from(payload, 'UTF8')::json->>'type' IN ('auth.user.deleted', 'auth.session.revoked')
            """
        ).first?.decode("n", as: Int.self)
        #expect(unpublished == 0)

        let published = try await events.waitUntil { messages in
            messages.filter { $0.json["type"] as? String == "auth.user.deleted" }.count >= 2
        }
        let deleted = published.filter { $0.json["type"] as? String == "auth.user.deleted" }
        #expect(Set(deleted.map(\.keyString)) == [stale, member])
        #expect(deleted.first { $0.keyString == stale }?.data["reason"] as? String == "guest_expired")
        let revoked = published.filter { $0.json["type"] as? String == "auth.session.revoked" }
        #expect(revoked.count == 1 && revoked.first?.data["reason"] as? String == "user_deleted")
        await events.close()

        let (missing, _, _) = try launch(["users", "delete", UUID().uuidString], environment: environment)
        await missing.exited()
        #expect(missing.terminationStatus == 1)
        let (bad, _, _) = try launch(["guests", "purge", "--older-than", "soon"], environment: environment)
        await bad.exited()
        #expect(bad.terminationStatus == 2)
    }
}
