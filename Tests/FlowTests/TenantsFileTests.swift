import Foundation
import ServiceKit
import Testing

@testable import AuthDomain

/// The tenants file: each tenant's settings by the variables' names, checked as the deployment's
/// are, every mistake on a line of its own.
@Suite struct TenantsFileTests {
    @Test func eachTenantIsTheDeploymentsSettingsWithItsOwnInPlace() throws {
        let file = try TenantsFile.parse(
            Array(
                """
                {"tenants": {
                  "acme": {"AUTH_APPLE_AUDIENCES": "com.acme.app", "AUTH_TOKEN_ISSUER": "https://auth.acme.example",
                           "AUTH_SESSION_TTL_SECONDS": 86400, "AUTH_EMAIL_CODE_SIGNUP": true},
                  "globex-2": {"AUTH_WEBAUTHN_RP_ID": "globex.example", "AUTH_WEBAUTHN_ORIGINS": "https://globex.example"}
                }}
                """.utf8))
        #expect(file.tenants.keys.sorted() == ["acme", "globex-2"])
        let deployment = [
            "AUTH_APPLE_AUDIENCES": "com.example.app", "AUTH_TOKEN_ISSUER": "https://auth.example.com",
            "AUTH_GOOGLE_AUDIENCES": "google-client",
        ]
        let configurations = try file.configurations(environment: deployment)
        let acme = try #require(configurations["acme"])
        #expect(acme.appleAudiences == ["com.acme.app"])
        #expect(acme.tokenIssuer == "https://auth.acme.example")
        #expect(acme.googleAudiences == ["google-client"], "what a tenant does not set is the deployment's")
        #expect(acme.sessions.sessionLifetime == 86400)
        let globex = try #require(configurations["globex-2"])
        #expect(globex.appleAudiences == ["com.example.app"])
        #expect(globex.passkeys.rpID == "globex.example")
    }

    @Test func everyMistakeIsALineNamingTheTenantAndTheVariable() {
        let text = """
            {"tenant": {}, "tenants": {
              "Acme": {},
              "default": {"AUTH_APPLE_AUDIENCES": "x"},
              "shop": {"AUTH_DATABASE_URL": "postgres://elsewhere", "AUTH_NOT_A_THING": "1",
                       "AUTH_BATCH_MAX": "10", "AUTH_APPLE_AUDIENCES": ["a", "b"]},
              "list": []
            }}
            """
        #expect(throws: TenantsFile.Mistakes.self) { try TenantsFile.parse(Array(text.utf8)) }
        do {
            _ = try TenantsFile.parse(Array(text.utf8))
        } catch {
            #expect(
                error.lines == [
                    "the tenants file has \"tenant\": only \"tenants\" is read",
                    "tenant \"Acme\": a name is 1 to 32 of a-z, 0-9 and -",
                    "tenant default: the default tenant is the deployment's own settings; name another",
                    "tenant list: must be an object of settings by variable name",
                    "tenant shop: AUTH_APPLE_AUDIENCES must be a string, a whole number or true/false",
                    "tenant shop: AUTH_BATCH_MAX is the deployment's, not a tenant's (Processing)",
                    "tenant shop: AUTH_DATABASE_URL is the deployment's, not a tenant's (PostgreSQL)",
                    "tenant shop: AUTH_NOT_A_THING is not a setting",
                ])
        }
        for bad in ["", "[]", "{}", #"{"tenants": []}"#] {
            #expect(throws: TenantsFile.Mistakes.self, "\(bad)") { try TenantsFile.parse(Array(bad.utf8)) }
        }
    }

    @Test func aTenantsSettingThatDoesNotReadIsNamedWithItsTenant() throws {
        let file = try TenantsFile.parse(
            Array(#"{"tenants": {"acme": {"AUTH_SESSION_TTL_SECONDS": "soon"}, "ok": {}}}"#.utf8))
        do {
            _ = try file.configurations(environment: [:])
            Issue.record("expected the tenant's setting refused")
        } catch {
            #expect(error.lines.count == 1)
            #expect(error.lines.first?.hasPrefix("tenant acme: AUTH_SESSION_TTL_SECONDS") == true, "\(error)")
        }
    }

    @Test func theSettingsATenantMaySetAreDeclaredAndNoneIsTheDeployments() {
        let declared = Set(Setting.domain.map(\.name))
        #expect(TenantsFile.perTenant.isSubset(of: declared))
        let deploymentWide = Setting.domain.filter {
            [.kafka, .database, .processing, .operations, .console].contains($0.section)
        }
        #expect(deploymentWide.allSatisfy { !TenantsFile.perTenant.contains($0.name) })
    }

    @Test func appleTokenExchangeIsTheDefaultTenantsAlone() throws {
        let deployment = [
            "AUTH_APPLE_AUDIENCES": "com.example.app", "AUTH_APPLE_TEAM_ID": "TEAM123456",
            "AUTH_APPLE_KEY_ID": "KEY1234567", "AUTH_APPLE_PRIVATE_KEY_FILE": "/secrets/apple.p8",
        ]
        #expect(try WorkerConfiguration.fromEnvironment(deployment).appleTokens.isEnabled)
        let file = try TenantsFile.parse(
            Array(#"{"tenants": {"acme": {"AUTH_APPLE_AUDIENCES": "com.acme.app"}}}"#.utf8))
        let acme = try #require(try file.configurations(environment: deployment)["acme"])
        #expect(acme.appleAudiences == ["com.acme.app"])
        #expect(!acme.appleTokens.isEnabled, "a tenant neither sets nor inherits Apple's token exchange")
        do {
            _ = try TenantsFile.parse(Array(#"{"tenants": {"acme": {"AUTH_APPLE_TEAM_ID": "OTHER"}}}"#.utf8))
            Issue.record("expected AUTH_APPLE_TEAM_ID refused in a tenant")
        } catch {
            #expect(error.lines.first?.hasPrefix("tenant acme: AUTH_APPLE_TEAM_ID is the deployment's") == true)
        }
    }

    @Test func aFileAtAPathIsReadWithEveryMistakeForItsVariable() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("tenants-\(UUID()).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(throws: ConfigurationError(variable: "AUTH_TENANTS_FILE", reason: "")) {
            try TenantsFile.configurations(path: path, environment: [:])
        }
        try #"{"tenants": {"a": {"AUTH_BATCH_MAX": "1"}, "b": {"AUTH_NOPE": "1"}}}"#.write(
            toFile: path, atomically: true, encoding: .utf8)
        do {
            _ = try TenantsFile.configurations(path: path, environment: [:])
            Issue.record("expected the file refused")
        } catch {
            #expect(error.variable == "AUTH_TENANTS_FILE")
            #expect(error.reason.contains("tenant a: AUTH_BATCH_MAX is the deployment's, not a tenant's (Processing)"))
            #expect(error.reason.contains("tenant b: AUTH_NOPE is not a setting"))
        }
        try #"{"tenants": {"a": {"AUTH_SESSION_TTL_SECONDS": 60}}}"#.write(
            toFile: path, atomically: true, encoding: .utf8)
        #expect(try TenantsFile.configurations(path: path, environment: [:])["a"]?.sessions.sessionLifetime == 60)
    }
}
