import AuthCrypto
import Foundation
import Kafka
import Messages
import Testing

@testable import AuthClient
@testable import AuthDomain
@testable import AuthWorker
@testable import TestSupport

/// Kafka as managed services run it (`SecureKafka`): TLS verified against a CA the test makes,
/// mutual TLS, SASL SCRAM-SHA-512 and PLAIN over TLS, each through the properties file an
/// operator writes (`AUTH_KAFKA_PROPERTIES_FILE`). The worker consumes, answers and relays its
/// events over it, the gateway library (`AuthClient`) talks to it, and a credential or a CA that
/// does not match is named in the worker's log, the worker not ready, the password never shown.
extension ProcessIntegrationTests {
    static let managedListeners: [SecureKafka.Listener] = [.sasl("SCRAM-SHA-512"), .sasl("PLAIN"), .mutualTLS, .tls]

    /// The worker's environment for `chain`, with `properties` as its properties file.
    func workerEnvironment(
        _ chain: SecureKafka, properties: String, topics: WorkerConfiguration.Topics, databaseURL: String,
        keyPath: String
    ) -> [String: String] {
        [
            "AUTH_KAFKA_BROKERS": chain.bootstrap, "AUTH_KAFKA_PROPERTIES_FILE": properties,
            "AUTH_DATABASE_URL": databaseURL, "AUTH_SIGNING_KEYS": keyPath, "AUTH_MIGRATE_ON_START": "true",
            "AUTH_KAFKA_GROUP": IntegrationEnvironment.uniqueName("group"), "AUTH_TOPIC_REQUESTS": topics.requests,
            "AUTH_TOPIC_RESULTS": topics.results, "AUTH_TOPIC_EVENTS": topics.events,
            "AUTH_TOPIC_NOTIFICATIONS": topics.notifications, "AUTH_TOPIC_DLQ": topics.deadLetters,
            "AUTH_KAFKA_SESSION_TIMEOUT_MS": "6000", "AUTH_KAFKA_FETCH_WAIT_MS": "5", "AUTH_HEALTH_PORT": "0",
        ]
    }

    static func secureTopics(on chain: SecureKafka) throws -> WorkerConfiguration.Topics {
        let topics = IntegrationEnvironment.uniqueTopics()
        try chain.createTopics(topics.all)
        return topics
    }

    @Test(
        .enabled(if: SecureKafka.isPossible, "needs root, the broker and stunnel (scripts/dev-env install)"),
        arguments: managedListeners)
    func theWorkerAndTheClientLibraryUseAManagedStyleBroker(listener: SecureKafka.Listener) async throws {
        let chain = try await Blocking.run { try SecureKafka.start(listener) }
        defer { chain.stop() }
        let topics = try Self.secureTopics(on: chain)
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let (keyPath, _) = try TestKeys.temporaryKeyFile()
        defer { try? FileManager.default.removeItem(atPath: keyPath) }
        let propertiesFile = try chain.propertiesFile(chain.properties())
        let (process, output, _) = try launch(
            ["run"],
            environment: workerEnvironment(
                chain, properties: propertiesFile, topics: topics, databaseURL: databaseURL, keyPath: keyPath))
        let logs = LogCollector(output)
        defer { process.terminate() }
        let assigned = await logs.value(of: "msg", inLineWith: "Partitions assigned", timeout: .seconds(60))
        let early = await logs.all()
        #expect(assigned != nil, "the worker joins its group over \(listener): \(early)")

        // The gateway library over the same listener, with the same properties.
        var configuration = AuthClient.Configuration(brokers: [chain.bootstrap])
        configuration.kafkaProperties = chain.properties()
        configuration.requestsTopic = topics.requests
        configuration.resultsTopic = topics.results
        configuration.timeout = .seconds(30)
        let client = try await AuthClient.connect(configuration, logger: IntegrationEnvironment.quietLogger)
        let signedIn = try await client.login(LoginRequestData(method: "guest"))
        await client.close()
        #expect(signedIn.isOK, "\(String(describing: signedIn.error))")
        let user = try #require(signedIn.user?.id)

        // The outbox relay publishes the user's creation over it too.
        let events = try TopicReader(topic: topics.events, brokers: chain.bootstrap, properties: chain.properties())
        let created = try await events.waitUntil {
            $0.contains { $0.key.map { String(decoding: $0, as: UTF8.self) } == user }
        }
        #expect(created.contains { String(decoding: $0.value, as: UTF8.self).contains("auth.user.created") })

        if case .sasl(let mechanism) = listener {
            let gate = try String(contentsOfFile: chain.gateLog, encoding: .utf8)
            #expect(gate.contains("authenticated \(SecureKafka.username) with \(mechanism)"), "\(gate)")
            #expect(!gate.contains("refused"), "every connection authenticated: \(gate)")
        }
        let lines = await logs.all()
        #expect(!lines.contains(SecureKafka.password), "the SASL password is never logged")
    }

    /// What an operator gets wrong, each named in the log as an error, the worker not ready and
    /// nothing consumed: a wrong SASL password, a CA that did not issue the broker's certificate,
    /// mutual TLS without the client's certificate.
    @Test(.enabled(if: SecureKafka.isPossible, "needs root, the broker and stunnel (scripts/dev-env install)"))
    func aManagedBrokerThatRefusesTheWorkerIsNamed() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let (keyPath, _) = try TestKeys.temporaryKeyFile()
        defer { try? FileManager.default.removeItem(atPath: keyPath) }
        let scram = try await Blocking.run { try SecureKafka.start(.sasl("SCRAM-SHA-512")) }
        defer { scram.stop() }
        let mutual = try await Blocking.run { try SecureKafka.start(.mutualTLS) }
        defer { mutual.stop() }
        let otherCA = try TestCertificateAuthority(directory: scram.directory + "/other-ca", name: "another CA")
        var withoutCertificate = mutual.properties()
        withoutCertificate["ssl.certificate.location"] = nil
        withoutCertificate["ssl.key.location"] = nil
        let cases: [(String, SecureKafka, [String: String], [String])] = [
            (
                "a wrong SASL password", scram, scram.properties(password: "not the password"),
                ["SASL", "invalid credentials"]
            ),
            (
                "another CA", scram, scram.properties(caFile: otherCA.certificate),
                ["SSL handshake failed", "certificate verify failed"]
            ),
            ("no client certificate", mutual, withoutCertificate, ["SSL"]),
        ]
        for (name, chain, properties, reasons) in cases {
            let topics = try Self.secureTopics(on: chain)
            let file = try chain.propertiesFile(properties, name: "case.properties")
            let (process, output, _) = try launch(
                ["run"],
                environment: workerEnvironment(
                    chain, properties: file, topics: topics, databaseURL: databaseURL, keyPath: keyPath))
            let logs = LogCollector(output)
            let port = try #require(await logs.value(of: "http.port", inLineWith: "Health endpoint listening"))
            let reason = await logs.value(of: "msg", inLineWith: reasons[0], timeout: .seconds(30))
            let ready = try await readinessOnceRefused(port: port)
            process.terminate()
            await process.exited()
            let lines = await logs.all().split(separator: "\n")
            let failure = lines.first { line in reasons.allSatisfy { line.contains($0) } }
            #expect(reason != nil && failure != nil, "\(name): the reason is logged: \(lines.suffix(5))")
            #expect(failure?.contains("\"level\":\"error\"") == true, "\(name): as an error: \(failure ?? "none")")
            #expect(ready == 503, "\(name): not ready while the broker refuses the worker")
            #expect(!lines.contains { $0.contains("not the password") }, "\(name): the password is not logged")
        }
    }
}

extension ProcessIntegrationTests {
    /// The Python gateway example (confluent-kafka, its own librdkafka) through SASL_SSL with
    /// SCRAM-SHA-512, from the same properties file the worker reads.
    @Test(
        .requiresIndependentJOSE,
        .enabled(if: SecureKafka.isPossible, "needs root, the broker and stunnel (scripts/dev-env install)"))
    func thePythonExampleUsesAManagedStyleBroker() async throws {
        let chain = try await Blocking.run { try SecureKafka.start(.sasl("SCRAM-SHA-512")) }
        defer { chain.stop() }
        let topics = try Self.secureTopics(on: chain)
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let (keyPath, _) = try TestKeys.temporaryKeyFile(.es256)
        defer { try? FileManager.default.removeItem(atPath: keyPath) }
        let propertiesFile = try chain.propertiesFile(chain.properties())
        var environment = workerEnvironment(
            chain, properties: propertiesFile, topics: topics, databaseURL: databaseURL, keyPath: keyPath)
        environment["AUTH_HEALTH_ADDRESS"] = "127.0.0.1"
        let (process, output, _) = try launch(["run"], environment: environment)
        let logs = LogCollector(output)
        defer { process.terminate() }
        let port = try #require(await logs.value(of: "http.port", inLineWith: "Health endpoint listening"))
        _ = await logs.value(of: "msg", inLineWith: "Partitions assigned", timeout: .seconds(60))
        let example = try await Subprocess.run(
            ["python3", DevEnvironmentTests.root.appendingPathComponent("examples/python-gateway/gateway.py").path],
            environment: ProcessInfo.processInfo.environment.merging([
                "AUTH_KAFKA_BROKERS": chain.bootstrap, "AUTH_KAFKA_PROPERTIES_FILE": propertiesFile,
                "AUTH_WORKER_URL": "http://127.0.0.1:\(port)", "AUTH_TOPIC_REQUESTS": topics.requests,
                "AUTH_TOPIC_RESULTS": topics.results,
            ]) { $1 })
        #expect(example.status == 0, "\(example.output)")
        let steps = example.output.split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
        #expect(
            steps.map { $0["step"] as? String } == ["login", "verify", "introspect", "logout"], "\(example.output)")
        let gate = try String(contentsOfFile: chain.gateLog, encoding: .utf8)
        #expect(!gate.contains("refused"), "\(gate)")
    }
}

/// The property files the operations guide offers for managed services (`deploy/kafka/`), each
/// against the listener it is for: its protocol, mechanism and other settings as written, the
/// account's values and the CA (a public one in production) the test's.
@Suite(.requiresServices, .serialized, .timeLimit(.minutes(3))) struct ManagedKafkaPropertyFileTests {
    static var files: [String] {
        let folder = DevEnvironmentTests.root.appendingPathComponent("deploy/kafka").path
        return ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [])
            .filter { $0.hasSuffix(".properties") }.sorted().map { folder + "/" + $0 }
    }

    @Test func everyServiceHasAFile() {
        let names = Self.files.map { URL(fileURLWithPath: $0).lastPathComponent }
        #expect(
            names == [
                "aiven-mtls.properties", "aiven-sasl.properties", "confluent-cloud.properties",
                "msk-mtls.properties", "msk-sasl-scram.properties", "redpanda-cloud.properties",
            ])
    }

    @Test(
        .enabled(if: SecureKafka.isPossible, "needs root, the broker and stunnel (scripts/dev-env install)"),
        arguments: files)
    func aServicesPropertyFileConnects(path: String) async throws {
        var properties = try KafkaSettings.readProperties(path: path)
        let listener: SecureKafka.Listener
        switch properties["security.protocol"] {
        case "SASL_SSL":
            listener = .sasl(try #require(properties["sasl.mechanism"], "\(path): a mechanism"))
        case "SSL":
            #expect(properties["ssl.certificate.location"] != nil && properties["ssl.key.location"] != nil)
            listener = .mutualTLS
        default:
            Issue.record("\(path): TLS, with SASL or a client certificate")
            return
        }
        let chain = try await Blocking.run { try SecureKafka.start(listener) }
        defer { chain.stop() }
        // The account's own values in place of the file's.
        for (key, value) in chain.properties() where properties[key] != nil || key == "ssl.ca.location" {
            properties[key] = value
        }
        #expect(properties.count == chain.properties().count, "\(path): nothing the listener does not need")
        let topic = "managed.\(IntegrationEnvironment.uniqueName("t"))"
        try chain.createTopics([topic], partitions: 1)
        var kafka = KafkaConfiguration(bootstrapServers: [chain.bootstrap])
        kafka.properties = properties
        let producer = try KafkaProducer(
            configuration: KafkaProducerConfiguration(kafka: kafka), logger: IntegrationEnvironment.quietLogger)
        let report = try await producer.send(ProducerRecord(topic: topic, key: Array("k".utf8), value: Array("v".utf8)))
        await producer.shutdown()
        #expect(report.offset == 0)
        let reader = try TopicReader(topic: topic, brokers: chain.bootstrap, properties: properties)
        let read = try await reader.waitUntil { !$0.isEmpty }
        #expect(read.map { String(decoding: $0.value, as: UTF8.self) } == ["v"], "\(path)")
    }
}
