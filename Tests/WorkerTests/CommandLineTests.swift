import Foundation
import Messages
import Passwords
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
        ["topics", "create", "--partitions", "0"], ["topics", "create", "extra"], ["users", "disable"],
        ["admins", "grant", "ada@example.com"], ["admins", "grant", "ada@example.com", "--role", "root"],
        ["admins", "list", "extra"], ["users", "show", "ada@example.com", "--tenant", "Acme"],
        ["admins", "grant", "ada@example.com", "--role", "operator", "--tenant", "acme"],
        ["guests", "purge", "--older-than", "30d", "--tenant", ""],
        ["admins", "revoke", "a@example.com", "--tenant", "x"],
    ])
    func whatACommandDoesNotTakeIsRefusedWithItsUsage(arguments: [String]) async {
        let (status, _, err) = await run(arguments)
        #expect(status == 2)
        #expect(err.contains("usage: auth-worker \(arguments[0])"), "\(err)")
    }

    /// `users disable|enable` and `admins grant|list|revoke` against a database, as an operator
    /// runs them.
    @Test(.requiresDatabase) func operatorsDisableUsersAndGrantConsoleRoles() async throws {
        let harness = try await FlowHarness(
            clock: SystemClock(), passwords: try PasswordService(parameters: fastArgon2, threads: 1))
        var register = LoginRequestData(method: "register")
        register.email = "ada@example.com"
        register.password = "correct horse battery"
        let registered = try #require(
            try await harness.handle(
                LoginRequest(
                    id: UUID().uuidString, source: "/t", time: nil, traceparent: nil, method: .register,
                    data: register)))
        let userID = try #require(registered.result.user?.id)
        let environment = [
            "AUTH_DATABASE_URL": harness.databaseURL,
            "AUTH_KAFKA_BROKERS": IntegrationEnvironment.kafkaBrokers ?? "127.0.0.1:1",
        ]
        let (disabled, out, err) = await run(["users", "disable", "ada@example.com"], environment: environment)
        #expect(disabled == 0, "\(err)")
        #expect(out.contains("disabled user \(userID); ended 1 session(s)"))
        let (again, repeated, _) = await run(["users", "disable", userID], environment: environment)
        #expect(again == 0 && repeated.contains("was disabled already"))
        #expect(try await harness.count("users", where: "disabled_at IS NOT NULL") == 1)
        let (enabled, _, _) = await run(["users", "enable", userID], environment: environment)
        #expect(enabled == 0)
        #expect(try await harness.count("users", where: "disabled_at IS NOT NULL") == 0)
        let (missing, _, missingErr) = await run(["users", "disable", "nobody@example.com"], environment: environment)
        #expect(missing == 1 && missingErr.contains("no user"))

        // The chores on one user: found by address, acted on, said; a user nobody has, exit 1.
        let (ended, endedOut, _) = await run(["users", "end-sessions", "ada@example.com"], environment: environment)
        #expect(ended == 0 && endedOut.contains("ended 0 session(s) of user \(userID)"), "\(endedOut)")
        let (badSession, _, _) = await run(
            ["users", "end-sessions", "ada@example.com", "not-a-session"], environment: environment)
        #expect(badSession == 2)
        let (factor, factorOut, _) = await run(["users", "remove-factor", userID], environment: environment)
        #expect(factor == 0 && factorOut.contains("has no second factor"))
        let (passkeys, passkeysOut, _) = await run(
            ["users", "remove-passkeys", "ada@example.com"], environment: environment)
        #expect(passkeys == 0 && passkeysOut.contains("removed 0 passkey(s) of user \(userID)"), "\(passkeysOut)")
        let (nobody, _, nobodyErr) = await run(
            ["users", "remove-passkeys", "nobody@example.com"], environment: environment)
        #expect(nobody == 1 && nobodyErr.contains("no user nobody@example.com"))

        let (unproven, _, unprovenErr) = await run(
            ["admins", "grant", "ada@example.com", "--role", "support"], environment: environment)
        #expect(unproven == 1 && unprovenErr.contains("was never verified"), "\(unprovenErr)")
        _ = try await harness.query(
            "UPDATE identities SET email_verified = true WHERE provider = 'password' AND subject = 'ada@example.com'")
        let (granted, grantOut, _) = await run(
            ["admins", "grant", "ada@example.com", "--role", "support"], environment: environment)
        #expect(granted == 0 && grantOut.contains("as support"))
        let (listed, list, _) = await run(["admins", "list"], environment: environment)
        #expect(listed == 0 && list.contains("\"role\":\"support\"") && list.contains(userID))
        #expect(list.contains("\"email_verified\":true"), "\(list)")
        let (revoked, _, _) = await run(["admins", "revoke", "ada@example.com"], environment: environment)
        #expect(revoked == 0)
        let (none, _, noneErr) = await run(["admins", "revoke", "ada@example.com"], environment: environment)
        #expect(none == 1 && noneErr.contains("has no console role"))
        let (stranger, _, strangerErr) = await run(
            ["admins", "grant", "eve@example.com", "--role", "admin"], environment: environment)
        #expect(stranger == 1 && strangerErr.contains("no account signs in with a password"))
    }

    /// Every account command with `--tenant` reads and acts on that tenant's users only: the same
    /// address in two tenants is two users, each found, changed and deleted apart.
    @Test(.requiresDatabase) func operatorsActOnATenantsUsersWithTenant() async throws {
        let passwords = try PasswordService(parameters: fastArgon2, threads: 1)
        let main = try await FlowHarness(clock: SystemClock(), passwords: passwords)
        let acme = try await FlowHarness(
            clock: SystemClock(), passwords: passwords, databaseURL: main.databaseURL, tenant: "acme")
        func request(_ method: LoginMethod, _ fill: (inout LoginRequestData) -> Void) -> LoginRequest {
            var data = LoginRequestData(method: method.rawValue)
            fill(&data)
            return LoginRequest(
                id: UUID().uuidString, source: "/t", time: nil, traceparent: nil, method: method, data: data)
        }
        var ids: [String] = []
        for harness in [main, acme] {
            let outcome = try await harness.handle(
                request(.register) {
                    $0.email = "ada@example.com"
                    $0.password = "correct horse battery"
                })
            ids.append(try #require(outcome?.result.user?.id))
            _ = try await harness.handle(request(.guest) { _ in })
        }
        let (mainID, acmeID) = (ids[0], ids[1])
        let environment = [
            "AUTH_DATABASE_URL": main.databaseURL,
            "AUTH_KAFKA_BROKERS": IntegrationEnvironment.kafkaBrokers ?? "127.0.0.1:1",
        ]
        let (shown, shownOut, _) = await run(
            ["users", "show", "ada@example.com", "--tenant", "acme"], environment: environment)
        #expect(shown == 0 && shownOut.contains(acmeID) && !shownOut.contains(mainID), "\(shownOut)")
        let (_, defaultOut, _) = await run(["users", "show", "ada@example.com"], environment: environment)
        #expect(defaultOut.contains(mainID) && !defaultOut.contains(acmeID))
        #expect(await run(["users", "show", acmeID], environment: environment).0 == 1, "another tenant's id: no user")

        let (disabled, disabledOut, err) = await run(
            ["users", "disable", "ada@example.com", "--tenant", "acme"], environment: environment)
        #expect(disabled == 0 && disabledOut.contains("disabled user \(acmeID)"), "\(err)")
        #expect(try await main.count("users", where: "disabled_at IS NOT NULL") == 1)
        #expect(try await main.count("users", where: "disabled_at IS NOT NULL AND tenant = 'acme'") == 1)
        let (_, trail, _) = await run(
            ["users", "audit", "ada@example.com", "--tenant", "acme"], environment: environment)
        #expect(trail.contains("operator.account_disable"))
        let (_, mainTrail, _) = await run(["users", "audit", "ada@example.com"], environment: environment)
        #expect(!mainTrail.contains("operator.account_disable") && mainTrail.contains("register"), "\(mainTrail)")
        // Its events went to the broker; what stays is its sessions' state.
        #expect(try await main.count("sessions", where: "revoked_at IS NOT NULL AND user_id = '\(acmeID)'") == 1)
        #expect(try await main.count("sessions", where: "revoked_at IS NULL AND user_id = '\(mainID)'") == 1)

        for command in [["users", "end-sessions"], ["users", "remove-factor"], ["users", "remove-passkeys"]] {
            let (status, out, _) = await run(command + [acmeID], environment: environment)
            #expect(status == 1, "\(command) \(out)")
            let (inAcme, _, _) = await run(command + [acmeID, "--tenant", "acme"], environment: environment)
            #expect(inAcme == 0, "\(command)")
        }
        #expect(await run(["users", "delete", acmeID], environment: environment).0 == 1)
        let (deleted, deletedOut, _) = await run(
            ["users", "delete", acmeID, "--tenant", "acme"], environment: environment)
        #expect(deleted == 0 && deletedOut.contains("deleted user \(acmeID)"))
        #expect(try await main.count("users", where: "id = '\(mainID)'") == 1)

        try await Task.sleep(for: .milliseconds(1100))
        let (purged, purgedOut, _) = await run(
            ["guests", "purge", "--older-than", "1s", "--tenant", "acme"], environment: environment)
        #expect(purged == 0 && purgedOut.contains("purged 1 guest(s)"), "\(purgedOut)")
        #expect(
            try await main.count("users", where: "is_guest AND tenant = 'default'") == 1, "the default tenant's stays")
        #expect(try await main.count("users", where: "is_guest AND tenant = 'acme'") == 0)

        // Console roles: each names the tenant it serves; an operator's none.
        _ = try await main.query("UPDATE identities SET email_verified = true WHERE provider = 'password'")
        let (granted, grantOut, _) = await run(
            ["admins", "grant", "ada@example.com", "--role", "support", "--tenant", "acme"], environment: environment)
        #expect(granted == 0 && grantOut.contains("as support for the users of tenant acme"), "\(grantOut)")
        let (_, list, _) = await run(["admins", "list"], environment: environment)
        #expect(list.contains(#""role":"support""#) && list.contains(#""tenant":"acme""#) && list.contains(mainID))
        let (operatorGranted, operatorOut, _) = await run(
            ["admins", "grant", "ada@example.com", "--role", "operator"], environment: environment)
        #expect(operatorGranted == 0 && operatorOut.contains("as operator for every tenant's users"))
        let (_, operatorList, _) = await run(["admins", "list"], environment: environment)
        #expect(operatorList.contains(#""role":"operator""#) && !operatorList.contains("tenant"), "\(operatorList)")
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

        // An OAuth 2.0 entry is listed as one; an entry that cannot work names its field, and an
        // unreadable client secret file stops the check.
        let secret = directory.appendingPathComponent("github-secret").path
        try "github-client-secret-value".write(toFile: secret, atomically: true, encoding: .utf8)
        let oauth = directory.appendingPathComponent("providers.json").path
        try
            #"[{"type": "oauth2", "name": "github", "token_endpoint": "https://github.com/login/oauth/access_token", "userinfo_endpoint": "https://api.github.com/user", "client_id": "Iv1.x", "client_secret_file": "\#(secret)", "claims": {"subject": "id"}, "redirect_uris": ["com.example.app://oauth"]}]"#
            .write(toFile: oauth, atomically: true, encoding: .utf8)
        let listed = await run(
            ["config", "check"], environment: environment.merging(["AUTH_OIDC_PROVIDERS": oauth]) { $1 })
        #expect(listed.0 == 0, "\(listed.2)")
        #expect(listed.1.contains("identity providers: apple, github (oauth2)"), "\(listed.1)")
        #expect(!listed.1.contains("github-client-secret-value") && !listed.2.contains("github-client-secret-value"))
        let plainHTTP = directory.appendingPathComponent("plain.json").path
        try
            #"[{"type": "oauth2", "name": "github", "token_endpoint": "http://github.example/token", "userinfo_endpoint": "https://api.github.com/user", "client_id": "Iv1.x", "client_secret_file": "\#(secret)", "claims": {"subject": "id", "picture": "avatar_url"}, "redirect_uris": ["com.example.app://oauth"]}]"#
            .write(toFile: plainHTTP, atomically: true, encoding: .utf8)
        let refused = await run(
            ["config", "check"], environment: environment.merging(["AUTH_OIDC_PROVIDERS": plainHTTP]) { $1 })
        #expect(refused.0 == 1)
        #expect(refused.2.contains("[0].claims.picture is not a known claim"), "\(refused.2)")

        // The tenants file: its tenants listed; a mistake named with its tenant and variable.
        let tenants = directory.appendingPathComponent("tenants.json").path
        try #"{"tenants": {"acme": {"AUTH_APPLE_AUDIENCES": "com.acme.app"}}}"#.write(
            toFile: tenants, atomically: true, encoding: .utf8)
        let served = await run(
            ["config", "check"], environment: environment.merging(["AUTH_TENANTS_FILE": tenants]) { $1 })
        #expect(served.0 == 0, "\(served.2)")
        #expect(served.1.contains("tenants: default, acme"), "\(served.1)")
        try #"{"tenants": {"acme": {"AUTH_KAFKA_BROKERS": "elsewhere:9092"}}}"#.write(
            toFile: tenants, atomically: true, encoding: .utf8)
        let mistaken = await run(
            ["config", "check"], environment: environment.merging(["AUTH_TENANTS_FILE": tenants]) { $1 })
        #expect(mistaken.0 == 1)
        #expect(mistaken.2.contains("AUTH_TENANTS_FILE"), "\(mistaken.2)")
        #expect(mistaken.2.contains("tenant acme: AUTH_KAFKA_BROKERS"), "\(mistaken.2)")

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
