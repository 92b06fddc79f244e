import Foundation
import Messages
import Testing

@testable import AdminConsole
@testable import AuthDomain
@testable import AuthStore
@testable import TestSupport

/// The console's tenant boundary, by page and by API: a role serves one tenant's users and never
/// shows or touches another's (the same address in both tenants, ids of the other tenant's
/// users, the search's `tenant` parameter); an operator serves every tenant's, each action run as
/// the user's tenant's.
@Suite(.requiresDatabase, .requiresIndependentJOSE) struct ConsoleTenantTests {
    /// The default tenant and `acme`, each with a Lena at the same address.
    func twoLenas() async throws -> (bed: ConsoleTestBed, main: ConsoleTestBed.Member, acme: ConsoleTestBed.Member) {
        let bed = try await ConsoleTestBed(tenants: ["acme"])
        let main = try await bed.register("lena@example.com", name: "Lena Main")
        let acme = try await bed.register("lena@example.com", name: "Lena Acme", tenant: "acme")
        #expect(main.id != acme.id)
        return (bed, main, acme)
    }

    func ids(_ page: ConsoleBrowser.Page) -> [String] {
        ((page.json?["users"] as? [[String: Any]]) ?? []).compactMap { $0["id"] as? String }
    }

    @Test func aSupportAgentOfOneTenantNeverSeesNorActsOnAnothersUsers() async throws {
        let (bed, main, acme) = try await twoLenas()
        let agent = try await bed.staff("agent@example.com", role: .support, tenant: "acme")
        let browser = bed.browser()
        let signedIn = try await browser.signIn(agent)
        #expect(signedIn.status == 303, "\(signedIn.text)")
        let me = await browser.send("GET", "/admin/api/me")
        #expect(me.json?["role"] as? String == "support" && me.json?["tenant"] as? String == "acme")
        let (mainID, acmeID) = (main.id.lowercasedString, acme.id.lowercasedString)

        // The search: acme's Lena only, by address, by id, and in the whole list.
        let page = await browser.send("GET", "/admin/users?q=lena%40example.com")
        #expect(page.status == 200)
        #expect(page.text.contains("/admin/users/\(acmeID)") && !page.text.contains(mainID))
        #expect(page.text.contains("support @ acme"))
        #expect(ids(await browser.send("GET", "/admin/api/users?q=lena%40example.com")) == [acmeID])
        #expect(ids(await browser.send("GET", "/admin/api/users?q=\(mainID)")).isEmpty)
        #expect(ids(await browser.send("GET", "/admin/api/users")) == [acmeID], "the agent is the default tenant's")
        // Asking for another tenant's users is refused, not answered with them.
        for target in ["/admin/api/users?tenant=default", "/admin/api/users?q=lena&tenant=default"] {
            let refused = await browser.send("GET", target)
            #expect(refused.status == 403 && refused.json?["error"] as? String == "forbidden", "\(target)")
            #expect(!refused.text.contains(mainID))
        }
        #expect(await browser.send("GET", "/admin/users?tenant=default").status == 403)
        #expect(await browser.send("GET", "/admin/api/users?tenant=acme").status == 200)

        // The default tenant's Lena by id: no such user, by page and by API, and nothing done.
        #expect(await browser.send("GET", "/admin/users/\(mainID)").status == 404)
        let details = await browser.send("GET", "/admin/api/users/\(mainID)")
        #expect(details.status == 404 && details.json?["error"] as? String == "unknown_user")
        #expect(!details.text.contains("Lena Main"))
        let token = try await browser.apiToken()
        // Signing up sent each Lena (and the agent) a verification code already.
        let codesSent = try await bed.events(type: "auth.email.verification_requested").count
        let codesKept = try await bed.harness.count("one_time_codes", where: "tenant = 'default'")
        for action in ["sessions/end", "verification"] {
            let refused = await browser.send(
                "POST", "/admin/api/users/\(mainID)/\(action)", headers: ["X-CSRF-Token": token])
            #expect(refused.status == 404, "\(action): \(refused.text)")
        }
        let form = await browser.send(
            "POST", "/admin/users/\(mainID)/sessions/end", form: ["csrf": try #require(page.csrf)])
        #expect(form.status == 404)
        #expect(try await bed.refreshError(main.refreshToken) == nil, "the default tenant's Lena is still signed in")
        #expect(try await bed.events(type: "auth.session.revoked").isEmpty)
        #expect(try await bed.events(type: "auth.email.verification_requested").count == codesSent)
        #expect(try await bed.harness.count("one_time_codes", where: "tenant = 'default'") == codesKept)

        // Acme's Lena: shown with her tenant, and the agent's actions are acme's.
        let acmePage = await browser.send("GET", "/admin/users/\(acmeID)")
        #expect(acmePage.status == 200 && acmePage.text.contains("Lena Acme"))
        #expect(acmePage.text.contains(#"<dd id="tenant">acme</dd>"#))
        let acmeDetails = await browser.send("GET", "/admin/api/users/\(acmeID)")
        #expect((acmeDetails.json?["user"] as? [String: Any])?["tenant"] as? String == "acme")
        let ended = await browser.send(
            "POST", "/admin/api/users/\(acmeID)/sessions/end", headers: ["X-CSRF-Token": token])
        #expect(ended.status == 200 && ended.json?["sessions_ended"] as? Int == 1, "\(ended.text)")
        #expect(try await bed.refreshError(acme.refreshToken, tenant: "acme") != nil)
        #expect(try await bed.refreshError(main.refreshToken) == nil)
        let sent = await browser.send(
            "POST", "/admin/api/users/\(acmeID)/verification", headers: ["X-CSRF-Token": token])
        #expect(sent.status == 200 && sent.json?["sent"] as? Bool == true, "\(sent.text)")
        let revoked = try await bed.events(type: "auth.session.revoked")
        let resent = try await bed.events(type: "auth.email.verification_requested").dropFirst(codesSent)
        for events in [revoked[...], resent] {
            #expect(events.count == 1)
            #expect(events.first?["tenant"] as? String == "acme", "names acme")
            #expect((events.first?["data"] as? [String: Any])?["user_id"] as? String == acmeID)
        }
        #expect(try await bed.harness.count("one_time_codes", where: "tenant = 'default'") == codesKept)
        let audit = try await bed.harness.query(
            "SELECT tenant, actor FROM audit_log WHERE user_id = \(acme.id) AND action LIKE 'operator.%'")
        #expect(audit.count == 2)
        #expect(try audit.allSatisfy { try $0.decode("tenant", as: String.self) == "acme" })
    }

    @Test func aDefaultTenantsAdminDoesNotReachAnotherTenant() async throws {
        let (bed, main, acme) = try await twoLenas()
        let admin = try await bed.staff("admin@example.com", role: .admin)
        let browser = bed.browser()
        try await browser.signIn(admin)
        let me = await browser.send("GET", "/admin/api/me")
        #expect(me.json?["tenant"] as? String == "default")
        let (mainID, acmeID) = (main.id.lowercasedString, acme.id.lowercasedString)
        #expect(ids(await browser.send("GET", "/admin/api/users?q=lena%40example.com")) == [mainID])
        #expect(await browser.send("GET", "/admin/api/users?tenant=acme").status == 403)
        #expect(await browser.send("GET", "/admin/api/users/\(acmeID)").status == 404)
        let token = try await browser.apiToken()
        for action in ["disable", "factor/remove", "passkeys/remove", "sessions/end"] {
            let refused = await browser.send(
                "POST", "/admin/api/users/\(acmeID)/\(action)", headers: ["X-CSRF-Token": token])
            #expect(refused.status == 404, "\(action)")
        }
        let deletion = await browser.send(
            "POST", "/admin/api/users/\(acmeID)/delete", body: #"{"confirm": "x"}"#, headers: ["X-CSRF-Token": token])
        #expect(deletion.status == 404)
        #expect(try await bed.passwordError(acme, tenant: "acme") == nil, "acme's Lena is neither disabled nor gone")
        #expect(try await bed.refreshError(acme.refreshToken, tenant: "acme") == nil)
        for type in ["auth.session.revoked", "auth.user.deleted", "auth.mfa.disabled", "auth.passkey.removed"] {
            #expect(try await bed.events(type: type).isEmpty, "\(type)")
        }
        let audit = try await bed.harness.query("SELECT action FROM audit_log WHERE user_id = \(acme.id)")
        #expect(try audit.allSatisfy { !(try $0.decode("action", as: String.self)).hasPrefix("operator.") })
    }

    @Test func anOperatorServesEveryTenantEachActionAsTheUsersTenants() async throws {
        let (bed, main, acme) = try await twoLenas()
        let staff = try await bed.staff("ops@example.com", role: .operator)
        let browser = bed.browser()
        try await browser.signIn(staff)
        let me = await browser.send("GET", "/admin/api/me")
        #expect(me.json?["role"] as? String == "operator" && me.json?["tenant"] == nil, "\(me.text)")
        let (mainID, acmeID) = (main.id.lowercasedString, acme.id.lowercasedString)

        // The search is one tenant's at a time: the default tenant's without `tenant`.
        #expect(ids(await browser.send("GET", "/admin/api/users?q=lena%40example.com")) == [mainID])
        #expect(ids(await browser.send("GET", "/admin/api/users?q=lena%40example.com&tenant=acme")) == [acmeID])
        #expect(ids(await browser.send("GET", "/admin/api/users?tenant=nobody")).isEmpty)
        #expect(await browser.send("GET", "/admin/api/users?tenant=Acme").status == 400)
        let page = await browser.send("GET", "/admin/users?q=lena&tenant=acme")
        #expect(page.text.contains(#"name="tenant" id="tenant" value="acme""#))
        #expect(page.text.contains("/admin/users/\(acmeID)") && !page.text.contains(mainID))
        #expect(page.text.contains("operator (every tenant)"))

        // Each user by id, whichever the tenant; an action is the user's tenant's.
        #expect(await browser.send("GET", "/admin/users/\(mainID)").status == 200)
        let acmePage = await browser.send("GET", "/admin/users/\(acmeID)")
        #expect(acmePage.status == 200 && acmePage.text.contains("id=\"disable\""), "an operator is an admin")
        let disabled = await browser.send(
            "POST", "/admin/users/\(acmeID)/disable", form: ["csrf": try #require(acmePage.csrf)])
        #expect(disabled.status == 303 && disabled.location?.hasSuffix("?done=disabled") == true, "\(disabled.text)")
        #expect(try await bed.passwordError(acme, tenant: "acme") == "account_disabled")
        #expect(try await bed.passwordError(main) == nil, "the default tenant's Lena is another account")
        let revoked = try await bed.events(type: "auth.session.revoked")
        #expect(revoked.count == 1 && revoked.first?["tenant"] as? String == "acme")

        let token = try await browser.apiToken()
        let handle = try await handle(bed, acme.id)
        let deletion = await browser.send(
            "POST", "/admin/api/users/\(acmeID)/delete", body: #"{"confirm": "\#(handle)"}"#,
            headers: ["X-CSRF-Token": token])
        #expect(deletion.status == 200 && deletion.json?["deleted"] as? Bool == true, "\(deletion.text)")
        let deleted = try await bed.events(type: "auth.user.deleted")
        #expect(deleted.count == 1 && deleted.first?["tenant"] as? String == "acme")
        #expect((deleted.first?["data"] as? [String: Any])?["user_id"] as? String == acmeID)
        #expect(try await bed.harness.count("users", where: "id = '\(mainID)'") == 1)
    }

    func handle(_ bed: ConsoleTestBed, _ id: UUID) async throws -> String {
        let handle = try await bed.harness.query("SELECT handle FROM users WHERE id = \(id)")
        return try #require(handle.first).decode("handle")
    }

    @Test func anOperatorRoleNamesNoTenantAndAOneTenantRoleNamesOne() async throws {
        let bed = try await ConsoleTestBed(tenants: ["acme"])
        let ops = try await bed.staff("ops@example.com", role: .operator, tenant: "acme")
        _ = try await bed.staff("agent@example.com", role: .support, tenant: "acme")
        let grants = try await bed.harness.store.adminGrants()
        #expect(grants.map(\.email) == ["agent@example.com", "ops@example.com"])
        #expect(grants.map(\.tenant) == ["acme", nil], "an operator's grant names no tenant")
        // The table's check keeps it so, whatever wrote the row.
        await #expect(throws: (any Error).self) {
            _ = try await bed.harness.query("UPDATE admin_roles SET tenant = 'acme' WHERE user_id = \(ops.id)")
        }
        await #expect(throws: (any Error).self) {
            _ = try await bed.harness.query("UPDATE admin_roles SET tenant = NULL WHERE role = 'support'")
        }
        let audit = try await bed.harness.query(
            "SELECT outcome FROM audit_log WHERE action = 'operator.admin_grant' ORDER BY id")
        #expect(try audit.map { try $0.decode("outcome", as: String.self) } == ["operator", "support@acme"])
    }
}
