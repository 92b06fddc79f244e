import Foundation
import Synchronization
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// The CLI as an operator meets it, without starting anything: per-command help, refusals with
/// the usage line and exit 2, and `config check`.
@Suite struct CommandLineTests {
    final class Captured: Sendable {
        let out = Mutex("")
        let err = Mutex("")
    }

    func run(_ arguments: [String], environment: [String: String] = [:]) async -> (Int32, String, String) {
        let captured = Captured()
        let cli = CommandLineInterface(
            environment: environment, output: { text in captured.out.withLock { $0 += text + "\n" } },
            errorOutput: { text in captured.err.withLock { $0 += text + "\n" } })
        let status = await cli.run(arguments)
        return (status, captured.out.withLock { $0 }, captured.err.withLock { $0 })
    }

    @Test func everyCommandHasItsOwnHelp() async {
        for command in CommandLineInterface.commands {
            let (status, out, _) = await run(command.words + ["--help"])
            #expect(status == 0, "\(command.words)")
            #expect(out.hasPrefix("usage: auth-worker " + command.words.joined(separator: " ")), "\(out)")
            #expect(out.contains(command.summary))
        }
    }

    @Test(arguments: [
        ["run", "--bogus"], ["run", "extra"], ["migrate", "--force"], ["migrate", "--status", "--dry-run"],
        ["version", "extra"], ["keys", "generate"], ["keys", "generate", "a.pem", "--size", "4096"],
        ["users", "show"], ["config", "check", "--strict"], ["guests", "purge", "--older-than"],
        ["token", "verify", "--provider", "apple"], ["request", "guest", "--count", "3"],
        ["topics", "create", "--partitions", "0"], ["topics", "create", "extra"],
    ])
    func whatACommandDoesNotTakeIsRefusedWithItsUsage(arguments: [String]) async {
        let (status, _, err) = await run(arguments)
        #expect(status == 2)
        #expect(err.contains("usage: auth-worker \(arguments[0])"), "\(err)")
    }

    @Test func unknownCommandsAreRefused() async {
        for arguments in [["frobnicate"], ["keys", "rotate"], ["config"]] {
            let (status, _, err) = await run(arguments)
            #expect(status == 2, "\(arguments)")
            #expect(err.contains("unknown command") && err.contains("usage: auth-worker <command>"))
        }
    }

    @Test func commandsThatConnectNeedTheirEndpointSet() async {
        let (status, _, err) = await run(["users", "show", "someone@example.com"])
        #expect(status == 1)
        #expect(err.contains("AUTH_DATABASE_URL is not set"))
        let (requestStatus, _, requestErr) = await run(["request", "guest"], environment: ["AUTH_KAFKA_BROKERS": ""])
        #expect(requestStatus == 1)
        #expect(requestErr.contains("AUTH_KAFKA_BROKERS is not set"))
    }

    @Test func configCheckValidatesEverythingWithoutConnecting() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("config-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let key = directory.appendingPathComponent("signing.pem").path
        #expect(await run(["keys", "generate", key]).0 == 0)
        // Endpoints nobody listens on: nothing is contacted.
        let environment = [
            "AUTH_KAFKA_BROKERS": "127.0.0.1:1", "AUTH_DATABASE_URL": "postgres://auth:hunter2@127.0.0.1:1/auth",
            "AUTH_SIGNING_KEYS": key, "AUTH_APPLE_AUDIENCES": "com.example.app",
        ]
        let (status, out, err) = await run(["config", "check"], environment: environment)
        #expect(status == 0, "\(err)")
        #expect(out.contains("configuration is valid") && out.contains("identity providers: apple"))
        #expect(out.contains("127.0.0.1:1/auth") && !out.contains("hunter2"), "where the database is, not its password")

        let typo = directory.appendingPathComponent("oidc.json").path
        try
            #"[{"name": "acme", "issuer": "https://id.acme.test", "jwks_uri": "https://id.acme.test/keys", "audiences": ["x"], "algoritms": ["RS256"]}]"#
            .write(toFile: typo, atomically: true, encoding: .utf8)
        let properties = directory.appendingPathComponent("kafka.properties").path
        try "sasl.mechanism=PLAIN\nnot.a.property=1\n".write(toFile: properties, atomically: true, encoding: .utf8)
        for (variable, value, expected) in [
            ("AUTH_OIDC_PROVIDERS", typo, "[0].algoritms is not a known field"),
            ("AUTH_KAFKA_PROPERTIES_FILE", properties, "not.a.property"),
            ("AUTH_SIGNING_KEYS", directory.appendingPathComponent("missing.pem").path, "cannot read"),
            ("AUTH_DB_POOL_SIZE", "0", "AUTH_DB_POOL_SIZE"),
            ("AUTH_KAFKA_BROKERS", "", "AUTH_KAFKA_BROKERS is not set"),
            ("AUTH_DATABASE_URL", "", "AUTH_DATABASE_URL is not set"),
        ] {
            let (failed, _, message) = await run(
                ["config", "check"], environment: environment.merging([variable: value]) { $1 })
            #expect(failed == 1, "\(variable)")
            #expect(message.contains(variable) && message.contains(expected), "\(message)")
        }
    }

    /// `topics create` makes the configured topics that are missing, on the real broker, and is
    /// harmless run again.
    @Test(.requiresServices) func topicsCreateMakesTheMissingTopicsAndCanRunAgain() async throws {
        let brokers = try #require(IntegrationEnvironment.kafkaBrokers)
        let suffix = IntegrationEnvironment.uniqueName("cli")
        let environment = [
            "AUTH_KAFKA_BROKERS": brokers, "AUTH_TOPIC_REQUESTS": "requests.\(suffix)",
            "AUTH_TOPIC_RESULTS": "results.\(suffix)", "AUTH_TOPIC_EVENTS": "events.\(suffix)",
            "AUTH_TOPIC_NOTIFICATIONS": "notifications.\(suffix)", "AUTH_TOPIC_DLQ": "dlq.\(suffix)",
        ]
        for _ in 0..<2 {
            let (status, out, err) = await run(["topics", "create", "--partitions", "2"], environment: environment)
            #expect(status == 0, "\(err)")
            #expect(out.split(separator: "\n").count == 5, "\(out)")
            #expect(out.contains("requests.\(suffix): present") && !out.contains("missing"), "\(out)")
        }
    }
}
