import AuthCrypto
import Foundation
import Messages
import PGStore
import ServiceKit
import Testing

@testable import AdminConsole
@testable import AuthDomain
@testable import AuthStore
@testable import TestSupport

/// The admin console's pages and API against PostgreSQL, through `AdminConsole.handle` (the
/// HTTP server's part is `ConsoleHTTPTests`; a real browser's, `ConsoleBrowserTests`).
@Suite(.requiresDatabase, .requiresIndependentJOSE) struct AdminConsoleTests {
    @Test func aSupportAgentEndsALostPhonesSessionAndItsRefreshTokenIsRefused() async throws {
        let bed = try await ConsoleTestBed()
        let agent = try await bed.staff("agent@example.com", role: .support)
        let user = try await bed.register("lena@example.com", name: "Lena Park")
        let phone = try await bed.signIn(user, device: "Lena's iPhone")
        let browser = bed.browser()
        let signedIn = try await browser.signIn(agent)
        #expect(signedIn.status == 303 && signedIn.location == "/admin/users", "\(signedIn.text)")
        let cookie = try #require(browser.cookies[AdminConsole.sessionCookie])
        #expect(cookie.count == 43, "32 random bytes, base64url")
        let stored = try await bed.harness.query("SELECT id_hash FROM console_sessions")
        #expect(
            try stored.map { try $0.decode("id_hash", as: PGBytes.self).bytes } == [
                SHA256.hash(Base64URL.decode(cookie)!)
            ],
            "stored by its SHA-256 only")

        let search = await browser.send("GET", "/admin/users?q=lena%40example.com")
        #expect(search.status == 200)
        #expect(search.text.contains("/admin/users/\(user.id.lowercasedString)"))
        #expect(!search.text.contains("/admin/users/\(agent.id.lowercasedString)"), "only the match")

        let page = await browser.send("GET", "/admin/users/\(user.id.lowercasedString)")
        #expect(page.status == 200)
        #expect(page.text.contains("Lena&#39;s iPhone") && page.text.contains("Laptop"))
        #expect(!page.text.contains("id=\"disable\""), "support sees no admin action")
        let ended = await browser.send(
            "POST", "/admin/users/\(user.id.lowercasedString)/sessions/\(phone.sessionID.lowercasedString)/end",
            form: ["csrf": try #require(page.csrf)])
        #expect(ended.status == 303 && ended.location?.hasSuffix("?done=session_ended") == true)
        let after = await browser.send("GET", try #require(ended.location))
        #expect(after.text.contains("The session ended"))

        #expect(try await bed.refreshError(phone.refreshToken) != nil, "the lost phone's refresh token is refused")
        #expect(try await bed.refreshError(user.refreshToken) == nil, "the laptop's session goes on")
        let events = try await bed.events(type: "auth.session.revoked")
        #expect(events.count == 1)
        let data = try #require(events.first?["data"] as? [String: Any])
        #expect(
            data["session_id"] as? String == phone.sessionID.lowercasedString && data["reason"] as? String == "admin")
        let audit = try await bed.harness.query(
            "SELECT actor FROM audit_log WHERE user_id = \(user.id) AND action = 'operator.session_end'")
        // The agent by their account's id: their sign-in address is half of their console credential.
        #expect(try audit.map { try $0.decode("actor", as: String.self) } == ["console:\(agent.id.lowercasedString)"])
    }

    @Test func anAdminDisablesEnablesRemovesTheFactorAndDeletes() async throws {
        let bed = try await ConsoleTestBed()
        let admin = try await bed.staff("admin@example.com", role: .admin)
        var user = try await bed.register("sam@example.com")
        try await bed.enrollFactor(&user)
        let browser = bed.browser()
        try await browser.signIn(admin)
        let path = "/admin/users/\(user.id.lowercasedString)"
        var page = await browser.send("GET", path)
        var csrf = try #require(page.csrf)

        let disabled = await browser.send("POST", path + "/disable", form: ["csrf": csrf])
        #expect(disabled.location == path + "?done=disabled")
        #expect(try await bed.passwordError(user) == "account_disabled")
        #expect(try await bed.refreshError(user.refreshToken) != nil, "its sessions ended")
        page = await browser.send("GET", path)
        #expect(page.text.contains("id=\"enable\""))
        csrf = try #require(page.csrf)
        _ = await browser.send("POST", path + "/enable", form: ["csrf": csrf])
        #expect(try await bed.passwordError(user) == "mfa_required", "enabled: the password works, the factor asked")

        let removed = await browser.send("POST", path + "/factor/remove", form: ["csrf": csrf])
        #expect(removed.location == path + "?done=factor_removed")
        #expect(try await bed.passwordError(user) == nil, "no factor asked any more")
        #expect(try await bed.events(type: "auth.mfa.disabled").count == 1)

        let handle = try #require(try await bed.harness.query("SELECT handle FROM users WHERE id = \(user.id)").first)
            .decode("handle", as: String.self)
        let mistyped = await browser.send("POST", path + "/delete", form: ["csrf": csrf, "confirm": handle + "x"])
        #expect(mistyped.status == 422)
        #expect(try await bed.harness.count("users", where: "id = '\(user.id)'") == 1)
        let deleted = await browser.send("POST", path + "/delete", form: ["csrf": csrf, "confirm": handle])
        #expect(deleted.status == 303)
        #expect(try await bed.harness.count("users", where: "id = '\(user.id)'") == 0)
        let deletions = try await bed.events(type: "auth.user.deleted")
        #expect(deletions.count == 1 && (deletions.first?["data"] as? [String: Any])?["reason"] as? String == "admin")
        let trail = try await bed.harness.query(
            "SELECT actor FROM audit_log WHERE user_id = \(user.id) AND action = 'user_deleted'")
        #expect(try trail.map { try $0.decode("actor", as: String.self) } == ["console:\(admin.id.lowercasedString)"])
        #expect(await browser.send("GET", path).status == 404)
    }

    @Test func supportMayNotTakeAnAdminsActions() async throws {
        let bed = try await ConsoleTestBed()
        let agent = try await bed.staff("agent@example.com", role: .support)
        let user = try await bed.register("kim@example.com")
        let browser = bed.browser()
        try await browser.signIn(agent)
        let path = "/admin/users/\(user.id.lowercasedString)"
        let csrf = try #require(await browser.send("GET", path).csrf)
        for action in ["disable", "enable", "factor/remove", "delete"] {
            let page = await browser.send("POST", "\(path)/\(action)", form: ["csrf": csrf, "confirm": "x"])
            #expect(page.status == 403, "\(action)")
        }
        let token = try await browser.apiToken()
        for action in ["disable", "enable", "factor/remove", "delete"] {
            let answer = await browser.send(
                "POST", "/admin/api/users/\(user.id.lowercasedString)/\(action)", body: "{}",
                headers: ["X-CSRF-Token": token])
            #expect(answer.status == 403 && answer.json?["error"] as? String == "forbidden", "\(action)")
        }
        #expect(try await bed.passwordError(user) == nil, "nothing changed")
    }

    /// Console users are not each other's to act on: a support agent cannot sign an admin out of
    /// the console (again and again), nor an admin disable, strip or delete another admin. The
    /// operator's CLI manages console users; the page says so and offers no action.
    @Test(arguments: [AccountAdministration.Role.support, .admin])
    func noConsoleUserActsOnAnother(role: AccountAdministration.Role) async throws {
        let bed = try await ConsoleTestBed()
        let actor = try await bed.staff("actor@example.com", role: role)
        let target = try await bed.staff("target@example.com", role: .admin)
        let targetBrowser = bed.browser()
        try await targetBrowser.signIn(target)
        #expect(await targetBrowser.send("GET", "/admin/api/me").status == 200)

        let browser = bed.browser()
        try await browser.signIn(actor)
        let path = "/admin/users/\(target.id.lowercasedString)"
        let page = await browser.send("GET", path)
        #expect(page.status == 200 && page.text.contains("id=\"console-user\""))
        #expect(!page.text.contains("id=\"end-all\"") && !page.text.contains("id=\"disable\""))
        let csrf = try #require(page.csrf)
        let token = try await browser.apiToken()
        for action in [
            "sessions/end", "disable", "enable", "factor/remove", "passkeys/remove", "verification", "delete",
        ] {
            let form = await browser.send("POST", "\(path)/\(action)", form: ["csrf": csrf, "confirm": "x"])
            #expect(form.status == 403, "\(action) by \(role)")
            let answer = await browser.send(
                "POST", "/admin/api/users/\(target.id.lowercasedString)/\(action)", body: "{}",
                headers: ["X-CSRF-Token": token])
            #expect(answer.status == 403, "\(action) by \(role)")
            if role == .admin || ["sessions/end", "verification"].contains(action) {
                #expect(answer.json?["error"] as? String == "console_user", "\(action) by \(role)")
            }
        }
        #expect(await targetBrowser.send("GET", "/admin/api/me").status == 200, "still signed in")
        #expect(try await bed.harness.count("users", where: "disabled_at IS NOT NULL") == 0)
    }

    /// The JSON API writes ids as the Kafka contract does: lower case (RFC 9562).
    @Test func theAPIWritesIDsInLowerCase() async throws {
        let bed = try await ConsoleTestBed()
        let agent = try await bed.staff("agent@example.com", role: .support)
        let user = try await bed.register("case@example.com")
        _ = try await bed.signIn(user, device: "Phone")
        let browser = bed.browser()
        try await browser.signIn(agent)
        let me = await browser.send("GET", "/admin/api/me")
        #expect(me.json?["user_id"] as? String == agent.id.lowercasedString)
        let details = await browser.send("GET", "/admin/api/users/\(user.id.lowercasedString)")
        #expect(details.status == 200)
        #expect(!details.text.contains(user.id.uuidString), "no upper-case id: \(details.text)")
        #expect(details.text.contains(user.id.lowercasedString))
        let sessions = (details.json?["sessions"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
        #expect(!sessions.isEmpty && sessions.allSatisfy { $0 == $0.lowercased() }, "\(sessions)")
    }

    @Test func everyRouteWithoutASessionIsRefused() async throws {
        let bed = try await ConsoleTestBed()
        let user = try await bed.register("nia@example.com")
        let id = user.id.lowercasedString
        let browser = bed.browser()
        for path in ["/admin/users", "/admin/users?q=nia", "/admin/users/\(id)", "/admin"] {
            let page = await browser.send("GET", path)
            #expect(page.status == 303, "\(path)")
            #expect(["/admin/sign-in", "/admin/users"].contains(page.location ?? ""), "\(path)")
        }
        for path in ["/admin/users/\(id)/sessions/end", "/admin/users/\(id)/disable", "/admin/users/\(id)/delete"] {
            let page = await browser.send("POST", path, form: ["csrf": "x"])
            #expect(page.status == 303 && page.location == "/admin/sign-in", "\(path)")
        }
        for (method, path) in [
            ("GET", "/admin/api/me"), ("GET", "/admin/api/users"), ("GET", "/admin/api/users/\(id)"),
            ("POST", "/admin/api/users/\(id)/sessions/end"), ("POST", "/admin/api/users/\(id)/disable"),
            ("POST", "/admin/api/users/\(id)/delete"), ("POST", "/admin/api/sign-out"),
        ] {
            let answer = await browser.send(method, path)
            #expect(answer.status == 401, "\(method) \(path)")
            #expect(answer.json?["error"] as? String == "unauthenticated")
        }
        // A cookie of the right shape that names nothing is no session either.
        browser.cookies[AdminConsole.sessionCookie] = Base64URL.encode(try SecureRandom.bytes(32))
        #expect(await browser.send("GET", "/admin/api/me").status == 401)
        #expect(try await bed.passwordError(user) == nil)
    }

    @Test func aStateChangeWithoutItsSessionsCSRFTokenIsRefused() async throws {
        let bed = try await ConsoleTestBed()
        let admin = try await bed.staff("admin@example.com", role: .admin)
        let other = try await bed.staff("other@example.com", role: .admin)
        let user = try await bed.register("ola@example.com")
        let path = "/admin/users/\(user.id.lowercasedString)"
        let browser = bed.browser()
        try await browser.signIn(admin)
        let elsewhere = bed.browser()
        try await elsewhere.signIn(other)
        let othersToken = try #require(await elsewhere.send("GET", path).csrf)
        let ownToken = try #require(await browser.send("GET", path).csrf)
        #expect(othersToken != ownToken, "bound to the session")
        for form in [[:], ["csrf": ""], ["csrf": "forged"], ["csrf": othersToken]] {
            #expect(await browser.send("POST", path + "/disable", form: form).status == 403, "\(form)")
        }
        for headers in [[:], ["X-CSRF-Token": "forged"], ["X-CSRF-Token": othersToken]] {
            let answer = await browser.send(
                "POST", "/admin/api/users/\(user.id.lowercasedString)/disable", headers: headers)
            #expect(answer.status == 403 && answer.json?["error"] as? String == "csrf", "\(headers)")
        }
        #expect(await browser.send("POST", "/admin/sign-out", form: [:]).status == 403)
        #expect(try await bed.passwordError(user) == nil, "still enabled")
        let api = await browser.send(
            "POST", "/admin/api/users/\(user.id.lowercasedString)/disable", headers: ["X-CSRF-Token": ownToken])
        #expect(api.status == 200 && api.json?["changed"] as? Bool == true)
        #expect(try await bed.passwordError(user) == "account_disabled")
    }

    @Test func sessionsEndWhenIdleWhenOldAndAtSignOut() async throws {
        let bed = try await ConsoleTestBed()
        let agent = try await bed.staff("agent@example.com", role: .support)
        let browser = bed.browser()
        try await browser.signIn(agent)
        #expect(await browser.send("GET", "/admin/api/me").status == 200)
        bed.clock.advance(by: 14 * 60)
        #expect(await browser.send("GET", "/admin/api/me").status == 200, "used within 15 minutes")
        bed.clock.advance(by: 15 * 60 + 1)
        #expect(await browser.send("GET", "/admin/api/me").status == 401, "idle past 15 minutes")
        #expect(await browser.send("GET", "/admin/users").location == "/admin/sign-in")

        // Used every ten minutes, it still ends at eight hours.
        bed.clock.advance(by: 30)
        let again = bed.browser()
        try await again.signIn(agent)
        for _ in 0..<47 {
            bed.clock.advance(by: 10 * 60)
            #expect(await again.send("GET", "/admin/api/me").status == 200)
        }
        bed.clock.advance(by: 10 * 60 + 1)
        #expect(await again.send("GET", "/admin/api/me").status == 401, "eight hours after sign-in")

        // Sign-out ends the console session and the login session under it.
        bed.clock.advance(by: 30)
        let third = bed.browser()
        try await third.signIn(agent)
        let cookie = try #require(third.cookies[AdminConsole.sessionCookie])
        let csrf = try #require(await third.send("GET", "/admin/users").csrf)
        let out = await third.send("POST", "/admin/sign-out", form: ["csrf": csrf])
        #expect(out.status == 303 && third.cookies[AdminConsole.sessionCookie] == nil)
        third.cookies[AdminConsole.sessionCookie] = cookie
        #expect(await third.send("GET", "/admin/api/me").status == 401, "the old cookie names nothing")
        let live = try await bed.harness.count(
            "sessions", where: "user_id = '\(agent.id)' AND device_name = 'Admin console' AND revoked_at IS NULL")
        #expect(live == 0)
    }

    @Test func aSessionIDPlantedBeforeSignInIsNeverTheOneUsed() async throws {
        let bed = try await ConsoleTestBed()
        let attacker = try await bed.staff("mallory@example.com", role: .support)
        let victim = try await bed.staff("victim@example.com", role: .admin)
        // The attacker's own good session id, planted in the victim's browser.
        let attackers = bed.browser()
        try await attackers.signIn(attacker)
        let planted = try #require(attackers.cookies[AdminConsole.sessionCookie])
        let browser = bed.browser()
        browser.cookies[AdminConsole.sessionCookie] = planted
        let signedIn = try await browser.signIn(victim)
        #expect(signedIn.status == 303)
        let issued = try #require(browser.cookies[AdminConsole.sessionCookie])
        #expect(issued != planted, "a new id at sign-in")
        let me = await browser.send("GET", "/admin/api/me")
        #expect(me.json?["email"] as? String == "victim@example.com")
        #expect(await attackers.send("GET", "/admin/api/me").status == 401, "the planted id was ended, not adopted")
        // An id the attacker made up is not adopted either.
        let made = Base64URL.encode(try SecureRandom.bytes(32))
        let third = bed.browser()
        third.cookies[AdminConsole.sessionCookie] = made
        bed.clock.advance(by: 30)
        try await third.signIn(victim)
        #expect(third.cookies[AdminConsole.sessionCookie] != made)
    }

    @Test func aBurstOfWrongPasswordsIsThrottledLikeAnyLogin() async throws {
        let bed = try await ConsoleTestBed()
        let agent = try await bed.staff("agent@example.com", role: .support)
        let browser = bed.browser()
        var statuses: [Int] = []
        for _ in 0..<12 {
            let page = try await browser.signIn(agent, password: "not the password")
            statuses.append(page.status)
        }
        #expect(statuses.prefix(3).allSatisfy { $0 == 401 }, "\(statuses)")
        #expect(statuses.last == 429, "\(statuses)")
        let last = try await browser.signIn(agent)
        #expect(last.status == 429, "the right password waits too")
        #expect(last.text.contains("Too many attempts"))
        let refused = try await bed.harness.count(
            "audit_log", where: "user_id = '\(agent.id)' AND outcome = 'invalid_credentials'")
        #expect(refused >= 3, "recorded in the account's trail")
        #expect(!bed.logs.lines.joined().contains("not the password"), "never logged")
    }

    @Test func aWrongCodeAnAccountWithoutAFactorOrWithoutARoleGetNoSession() async throws {
        let bed = try await ConsoleTestBed()
        let agent = try await bed.staff("agent@example.com", role: .support)
        let browser = bed.browser()
        let wrong = try await browser.signIn(agent, code: "000000")
        #expect(wrong.status == 401 && wrong.text.contains("code is not right"))
        #expect(browser.cookies[AdminConsole.sessionCookie] == nil)

        let plain = try await bed.register("plain@example.com")
        _ = try await bed.harness.store.grantAdminRole(
            email: plain.email, role: .admin, by: "operator", at: bed.clock.now())
        let noFactor = try await bed.browser().signIn(plain)
        #expect(noFactor.status == 403 && noFactor.text.contains("second factor"))
        let opened = try await bed.harness.count(
            "sessions", where: "user_id = '\(plain.id)' AND device_name = 'Admin console' AND revoked_at IS NULL")
        #expect(opened == 0, "the password's session ended at once")

        var member = try await bed.register("member@example.com")
        try await bed.enrollFactor(&member)
        let outsider = bed.browser()
        let noRole = try await outsider.signIn(member)
        #expect(noRole.status == 403 && noRole.text.contains("may not use the console"))
        #expect(outsider.cookies[AdminConsole.sessionCookie] == nil)

        // A role taken away, or the account disabled, ends the console session at its next request.
        let signedIn = bed.browser()
        try await signedIn.signIn(agent)
        #expect(await signedIn.send("GET", "/admin/api/me").status == 200)
        _ = try await bed.harness.store.revokeAdminRole(email: agent.email, by: "operator", at: bed.clock.now())
        #expect(await signedIn.send("GET", "/admin/api/me").status == 401)
    }

    @Test func whatUsersWroteIsShownEscaped() async throws {
        let bed = try await ConsoleTestBed()
        let agent = try await bed.staff("agent@example.com", role: .support)
        let script = "<script>alert('x')</script>\"><img src=x onerror=alert(1)>"
        let user = try await bed.register("xss@example.com", name: script)
        _ = try await bed.signIn(user, device: "<b>phone</b>")
        let browser = bed.browser()
        try await browser.signIn(agent)
        for path in ["/admin/users?q=xss", "/admin/users/\(user.id.lowercasedString)"] {
            let page = await browser.send("GET", path)
            #expect(page.status == 200)
            #expect(!page.text.contains("<script>") && !page.text.contains("<img") && !page.text.contains("<b>"))
            #expect(page.text.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&quot;&gt;&lt;img"), "\(path)")
        }
        let search = await browser.send("GET", "/admin/users?q=%3Cscript%3E")
        #expect(search.text.contains("value=\"&lt;script&gt;\""), "the query echoed escaped")
        let headers = await browser.send("GET", "/admin/users").headers
        let policy = try #require(headers.first { $0.0 == "Content-Security-Policy" }?.1)
        #expect(policy.contains("default-src 'none'") && policy.contains("frame-ancestors 'none'"))
        #expect(!policy.contains("script-src"), "no script at all")
        #expect(headers.contains { $0 == ("X-Content-Type-Options", "nosniff") })
        #expect(headers.contains { $0 == ("Referrer-Policy", "no-referrer") })
        let cookie = try #require(
            await bed.browser().send("GET", "/admin/sign-in").headers.first { $0.0 == "Set-Cookie" }?.1)
        #expect(cookie.hasPrefix("__Host-") && cookie.contains("Secure") && cookie.contains("HttpOnly"))
        #expect(cookie.contains("SameSite=Strict") && cookie.contains("Path=/") && !cookie.contains("Domain"))
    }

    @Test func theAPISearchesPagesAndDescribesAUser() async throws {
        let bed = try await ConsoleTestBed()
        let agent = try await bed.staff("agent@example.com", role: .support)
        for index in 0..<25 {
            _ = try await bed.register("user\(index)@example.com")
            bed.clock.advance(by: 1)
        }
        let browser = bed.browser()
        try await browser.signIn(agent)
        let first = await browser.send("GET", "/admin/api/users?q=user")
        let users = try #require(first.json?["users"] as? [[String: Any]])
        #expect(users.count == 20 && first.json?["more"] as? Bool == true)
        let second = await browser.send("GET", "/admin/api/users?q=user&page=1")
        #expect((second.json?["users"] as? [[String: Any]])?.count == 5 && second.json?["more"] as? Bool == false)
        #expect(await browser.send("GET", "/admin/api/users?page=-1").status == 400)
        #expect(await browser.send("GET", "/admin/api/users?page=x").status == 400)
        #expect(await browser.send("GET", "/admin/api/users/not-a-uuid").status == 400)
        #expect(await browser.send("GET", "/admin/api/users/\(UUID().uuidString)").status == 404)
        let percent = await browser.send("GET", "/admin/api/users?q=%25")
        #expect((percent.json?["users"] as? [[String: Any]])?.isEmpty == true, "LIKE's characters are literal")

        let id = try #require(users.first?["id"] as? String)
        let details = await browser.send("GET", "/admin/api/users/\(id)")
        #expect(details.status == 200)
        let json = try #require(details.json)
        #expect((json["identities"] as? [[String: Any]])?.first?["provider"] as? String == "password")
        #expect((json["sessions"] as? [[String: Any]])?.first?["device_name"] as? String == "Laptop")
        #expect(!details.text.contains("password_hash") && !details.text.contains("$argon2"))
        // By provider subject and by id.
        let bySubject = await browser.send("GET", "/admin/api/users?q=user3%40example.com")
        #expect((bySubject.json?["users"] as? [[String: Any]])?.count == 1)
        let byID = await browser.send("GET", "/admin/api/users?q=\(id)")
        #expect((byID.json?["users"] as? [[String: Any]])?.first?["id"] as? String == id)
        // Support resends a verification code: the same event as send_verification.
        let token = try await browser.apiToken()
        let codesBefore = try await bed.events(type: "auth.email.verification_requested").count
        let sent = await browser.send(
            "POST", "/admin/api/users/\(id)/verification", headers: ["X-CSRF-Token": token])
        #expect(sent.status == 200 && sent.json?["sent"] as? Bool == true, "\(sent.text)")
        #expect(try await bed.events(type: "auth.email.verification_requested").count == codesBefore + 1)
        // Never on one's own account.
        let own = await browser.send(
            "POST", "/admin/api/users/\(agent.id.lowercasedString)/sessions/end", headers: ["X-CSRF-Token": token])
        #expect(own.status == 409)
    }

    @Test func formsDecodeAsBrowsersSendThem() {
        let fields = HTTPRequest.decodeForm(Array("a=1&b=x+y%21&c=%E2%9C%93&a=2&d&e=%zz&f=%4".utf8))
        #expect(fields["a"] == "1" && fields["b"] == "x y!" && fields["c"] == "✓")
        #expect(fields["d"] == "" && fields["e"] == "%zz" && fields["f"] == "%4")
        let request = HTTPRequest(
            method: "GET", path: "/", headers: ["cookie": "a=1; __Host-console=abc; b=2"])
        #expect(request.cookie("__Host-console") == "abc" && request.cookie("missing") == nil)
        #expect(Pages.escape("<a href='x'>&\"</a>") == "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;")
    }
}
