import AuthCrypto
import Foundation
import Testing

@testable import TestSupport

extension Trait where Self == ConditionTrait {
    /// Chromium, its driver, Selenium and schemathesis (`scripts/dev-env` installs them).
    static var requiresBrowser: Self {
        .enabled(
            if: ConsoleBrowserTests.browserIsAvailable || IntegrationEnvironment.isRequired,
            "chromium, chromium-driver and python3 with selenium and schemathesis are not installed")
    }
}

/// The admin console as a support agent and an admin use it: the real worker (`auth-worker run`)
/// and console (`auth-worker admin`) processes, users made through Kafka, Chromium driven by
/// Selenium (`Tests/Tools/console-browser.py`), then the console's API run against its OpenAPI
/// document by schemathesis, signed in. A second tenant's support agent sees that tenant's users
/// only.
@Suite(.requiresServices, .requiresBrowser, .serialized, .timeLimit(.minutes(10))) struct ConsoleBrowserTests {
    static var browserIsAvailable: Bool {
        FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium")
            && FileManager.default.isExecutableFile(atPath: "/usr/bin/chromedriver")
            && IndependentJOSE.canImport("selenium, schemathesis, pyotp")
    }

    @Test func aSupportAgentHelpsAUserWhoLostTheirPhoneInChromium() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        let (signingKey, _) = try TestKeys.temporaryKeyFile(.es256)
        let resultsKey = FileManager.default.temporaryDirectory.appendingPathComponent("results-\(UUID()).key").path
        try Hex.encode(try SecureRandom.bytes(32)).write(toFile: resultsKey, atomically: true, encoding: .utf8)
        // A second tenant, acme, with the default tenant's settings: its users are another
        // support agent's.
        let tenantsFile = FileManager.default.temporaryDirectory.appendingPathComponent("tenants-\(UUID()).json").path
        try #"{"tenants": {"acme": {}}}"#.write(toFile: tenantsFile, atomically: true, encoding: .utf8)
        defer {
            for path in [signingKey, resultsKey, tenantsFile] { try? FileManager.default.removeItem(atPath: path) }
        }
        let brokers = try #require(IntegrationEnvironment.kafkaBrokers)
        let environment = [
            "AUTH_KAFKA_BROKERS": brokers, "AUTH_DATABASE_URL": databaseURL,
            "AUTH_KAFKA_GROUP": IntegrationEnvironment.uniqueName("group"), "AUTH_TOPIC_REQUESTS": topics.requests,
            "AUTH_TOPIC_RESULTS": topics.results, "AUTH_TOPIC_EVENTS": topics.events,
            "AUTH_TOPIC_NOTIFICATIONS": topics.notifications, "AUTH_TOPIC_DLQ": topics.deadLetters,
            "AUTH_SIGNING_KEYS": signingKey, "AUTH_RESULTS_KEY_FILE": resultsKey,
            "AUTH_KAFKA_SESSION_TIMEOUT_MS": "6000", "AUTH_HEALTH_PORT": "0", "AUTH_HEALTH_ADDRESS": "127.0.0.1",
            "AUTH_KAFKA_FETCH_WAIT_MS": "5", "AUTH_REQUIRE_REPLY_KEY": "true", "AUTH_CONSOLE_PORT": "0",
            "AUTH_ARGON2_MEMORY_KIB": "8192", "AUTH_TENANTS_FILE": tenantsFile,
            "AUTH_ARGON2_ITERATIONS": "2",
        ]
        let processes = ProcessIntegrationTests()
        let (worker, workerOutput, _) = try processes.launch(["run"], environment: environment)
        let (console, consoleOutput, _) = try processes.launch(["admin"], environment: environment)
        defer {
            for process in [worker, console] {
                process.terminate()
                process.waitUntilExit()
            }
        }
        let workerLogs = LogCollector(workerOutput)
        let consoleLogs = LogCollector(consoleOutput)
        _ = await workerLogs.value(of: "msg", inLineWith: "Partitions assigned")
        let port = try #require(await consoleLogs.value(of: "http.port", inLineWith: "Admin console listening"))
        #expect(
            await consoleLogs.value(of: "msg", inLineWith: "plain HTTP on loopback") != nil,
            "plain HTTP is said loudly")

        let screenshots = ProcessInfo.processInfo.environment["AUTH_CONSOLE_SCREENSHOTS"]
        let script = try await Subprocess.run(
            ["python3", ProjectPaths.root.appendingPathComponent("Tests/Tools/console-browser.py").path]
                + (screenshots.map { ["--screenshots", $0] } ?? []),
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 }.merging([
                "AUTH_CONSOLE_URL": "http://localhost:\(port)",
                "AUTH_WORKER_BINARY": try #require(ProcessIntegrationTests.binary).path,
            ]) { $1 })
        let steps = script.output.split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
        // The whole report (schemathesis's runs are long) beside the test's temporary files.
        let report = FileManager.default.temporaryDirectory.appendingPathComponent("console-browser.log")
        try? script.output.write(to: report, atomically: true, encoding: .utf8)
        #expect(script.status == 0, "see \(report.path): \(script.output.suffix(3000))")
        #expect(
            steps.map { $0["step"] as? String }
                == [
                    "accounts", "signed_in", "session_ended", "tenant_boundary", "disabled_and_enabled", "deleted",
                    "schemathesis",
                ],
            "\(script.output)")
    }
}
