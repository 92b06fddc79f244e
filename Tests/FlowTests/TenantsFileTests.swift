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
}
