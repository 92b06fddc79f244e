import AuthStore
import Foundation
import Messages

/// The console's HTML: plain forms and tables, no script, one stylesheet. Every value that came
/// from a user or a provider (names, handles, addresses, device names, subjects) goes through
/// `escape`; nothing is written into an attribute or the page unescaped.
enum Pages {
    /// `&`, `<`, `>`, `"` and `'` as entities: safe in text and in quoted attributes.
    static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.unicodeScalars.append(character)
            }
        }
        return out
    }

    /// A query-string component, percent-encoded.
    static func component(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
    }

    static func html(status: Int, _ body: String, headers: [(String, String)] = []) -> HTTPAnswer {
        HTTPAnswer(
            status: status, headers: [("Content-Type", "text/html; charset=utf-8")] + headers, body: Array(body.utf8))
    }

    static func layout(title: String, session: PostgresStore.ConsoleSession?, csrf: String, _ content: String)
        -> String
    {
        var bar = ""
        if let session {
            bar = """
                <nav><a href="/admin/users">Users</a>
                <span class="who">\(escape(session.email)) · \(escape(roleText(session)))</span>
                <form method="post" action="/admin/sign-out" class="inline">
                <input type="hidden" name="csrf" value="\(escape(csrf))">
                <button type="submit" id="sign-out">Sign out</button></form></nav>
                """
        }
        return """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>\(escape(title)) · Auth console</title>
            <link rel="stylesheet" href="/admin/static/console.css"></head>
            <body><header><strong>Auth console</strong>\(bar)</header><main>
            \(content)
            </main></body></html>
            """
    }

    /// The role as the bar shows it: `support`, `admin` (the default tenant's), `support @ acme`,
    /// `operator (every tenant)`.
    static func roleText(_ session: PostgresStore.ConsoleSession) -> String {
        guard let tenant = session.tenant else { return session.role.rawValue + " (every tenant)" }
        return tenant == Tenant.defaultName ? session.role.rawValue : session.role.rawValue + " @ " + tenant
    }

    static func signIn(csrf: String, email: String, error: String?) -> String {
        layout(
            title: "Sign in", session: nil, csrf: "",
            """
            <h1>Sign in</h1>
            \(error.map { "<p class=\"error\" role=\"alert\">\(escape($0))</p>" } ?? "")
            <form method="post" action="/admin/sign-in" class="card">
            <input type="hidden" name="csrf" value="\(escape(csrf))">
            <label>E-mail address <input type="email" name="email" id="email" autocomplete="username" required
             value="\(escape(email))"></label>
            <label>Password <input type="password" name="password" id="password" autocomplete="current-password"
             required></label>
            <button type="submit" id="sign-in">Continue</button>
            </form>
            <p class="hint">Console access is granted by an operator (<code>auth-worker admins grant</code>) to an
            account with a password and an authenticator app.</p>
            """)
    }

    static func code(csrf: String, error: String?) -> String {
        layout(
            title: "Second factor", session: nil, csrf: "",
            """
            <h1>Second factor</h1>
            \(error.map { "<p class=\"error\" role=\"alert\">\(escape($0))</p>" } ?? "")
            <form method="post" action="/admin/sign-in/code" class="card">
            <input type="hidden" name="csrf" value="\(escape(csrf))">
            <label>Code from your authenticator app <input type="text" name="code" id="code" inputmode="numeric"
             autocomplete="one-time-code" pattern="[0-9]{6}" maxlength="6" required autofocus></label>
            <button type="submit" id="verify">Sign in</button>
            </form>
            """)
    }

    static func problem(_ refusal: ConsoleRefusal) -> String {
        layout(
            title: "Refused", session: nil, csrf: "",
            """
            <h1>\(refusal.status == 404 ? "Not found" : "Refused")</h1>
            <p class="error" role="alert">\(escape(refusal.message))</p>
            <p><a href="/admin/users">Back to the users</a></p>
            """)
    }

    static func date(_ date: Date?) -> String {
        guard let date else { return "—" }
        let stamp = Timestamp.format(date)
        // 2026-12-02T16:18:37Z → 2026-12-02 16:18 UTC
        let shown = String(stamp.prefix(16)).replacingOccurrences(of: "T", with: " ")
        return "<time datetime=\"\(stamp)\">\(shown) UTC</time>"
    }

    static func search(
        session: PostgresStore.ConsoleSession, csrf: String, query: String, tenant: String, page: Int,
        users: [PostgresStore.UserSummary],
        more: Bool
    ) -> String {
        var rows = ""
        for user in users {
            var flags: [String] = []
            if user.isGuest { flags.append("guest") }
            if user.disabled { flags.append("<span class=\"bad\">disabled</span>") }
            if user.email != nil && !user.emailVerified { flags.append("unverified") }
            rows += """
                <tr><td><a href="/admin/users/\(user.id.lowercasedString)">\(escape(user.handle))</a></td>
                <td>\(escape(user.name ?? ""))</td><td>\(escape(user.email ?? ""))</td>
                <td>\(escape(user.phone ?? ""))</td><td>\(flags.joined(separator: ", "))</td><td>\(date(user.createdAt))</td></tr>

                """
        }
        var pager = ""
        var q = component(query)
        // An operator chooses the tenant searched; a role for one tenant searches that one.
        var tenantField = ""
        if session.tenant == nil {
            q += "&amp;tenant=" + component(tenant)
            tenantField = """
                <label>Tenant <input type="text" name="tenant" id="tenant" value="\(escape(tenant))" maxlength="32"
                 pattern="[a-z0-9-]{1,32}" required></label>
                """
        }
        if page > 0 { pager += "<a href=\"/admin/users?q=\(q)&amp;page=\(page - 1)\" rel=\"prev\">Previous</a> " }
        if more { pager += "<a href=\"/admin/users?q=\(q)&amp;page=\(page + 1)\" rel=\"next\" id=\"next\">Next</a>" }
        return layout(
            title: "Users", session: session, csrf: csrf,
            """
            <h1>Users\(tenant == Tenant.defaultName ? "" : " of " + escape(tenant))</h1>
            <form method="get" action="/admin/users" class="search">
            \(tenantField)<input type="search" name="q" id="q" value="\(escape(query))" maxlength="200"
             placeholder="e-mail, handle, user id or provider subject">
            <button type="submit" id="search">Search</button></form>
            <table id="users"><thead><tr><th>Handle</th><th>Name</th><th>E-mail</th><th>Phone</th><th></th><th>Created</th></tr></thead>
            <tbody>
            \(rows.isEmpty ? "<tr><td colspan=\"5\">No user matches.</td></tr>" : rows)</tbody></table>
            <p class="pager">\(pager)</p>
            """)
    }

    /// The page's notices after an action, by the key in `?done=` (no text from the URL is shown).
    static let notices: [String: String] = [
        "session_ended": "The session ended: its refresh token is refused from now on.",
        "session_already_ended": "That session had already ended.",
        "sessions_ended": "Every live session of this account ended.",
        "disabled": "The account is disabled and its sessions ended.",
        "already_disabled": "The account already was disabled.",
        "enabled": "The account is enabled again.",
        "already_enabled": "The account already was enabled.",
        "factor_removed": "The second factor was removed.",
        "no_factor": "There was no second factor.",
        "passkeys_removed": "The passkey was removed: it signs nobody in from now on.",
        "no_passkeys": "There was no such passkey.",
        "code_sent": "A verification code is on its way to the account's address.",
        "already_verified": "The address is verified already.",
    ]

    static func button(_ action: String, user: String, csrf: String, label: String, id: String, danger: Bool = false)
        -> String
    {
        """
        <form method="post" action="/admin/users/\(user)/\(action)" class="inline">
        <input type="hidden" name="csrf" value="\(escape(csrf))">
        <button type="submit" id="\(id)"\(danger ? " class=\"danger\"" : "")>\(escape(label))</button></form>
        """
    }

    /// Who is looking at whose page, and so what the page offers.
    struct Viewing {
        let session: PostgresStore.ConsoleSession
        let csrf: String
        let details: PostgresStore.UserDetails
        var id: String { details.user.id.lowercasedString }
        var own: Bool { details.user.id == session.userID }
        /// A console user's account is the operator CLI's to act on, not another console user's.
        var consoleUser: Bool { details.consoleRole != nil && !own }
        var admin: Bool { session.role.mayChangeAccounts && !own && !consoleUser }
    }

    static func user(
        session: PostgresStore.ConsoleSession, csrf: String, details: PostgresStore.UserDetails, notice: String?
    ) -> String {
        let viewing = Viewing(session: session, csrf: csrf, details: details)
        let user = details.user
        let id = viewing.id
        let own = viewing.own
        let admin = viewing.admin
        let actions = actions(viewing)
        let identities = identityRows(details)
        let sessions = sessionRows(viewing)
        let passkeys = passkeyRows(viewing)
        let audit = auditRows(details)
        let factor =
            details.factor.map { factor in
                "Authenticator app (TOTP), \(factor.enabled ? "active" : "enrolling"), since \(date(factor.createdAt)); "
                    + "\(factor.recoveryCodesLeft) recovery code(s) left"
            } ?? "None"
        let deletion =
            admin
            ? """
            <h2>Delete the account</h2>
            <form method="post" action="/admin/users/\(id)/delete" class="card danger-zone">
            <input type="hidden" name="csrf" value="\(escape(csrf))">
            <label>Type the handle <code>\(escape(user.handle))</code> to confirm
            <input type="text" name="confirm" id="confirm" autocomplete="off" required></label>
            <button type="submit" id="delete" class="danger">Delete for good</button></form>
            """ : ""
        return layout(
            title: user.handle, session: session, csrf: csrf,
            """
            <h1>\(escape(user.name ?? user.handle))</h1>
            \(notice.map { "<p class=\"notice\" role=\"status\" id=\"notice\">\(escape($0))</p>" } ?? "")
            <dl class="profile">
            <dt>Handle</dt><dd id="handle">\(escape(user.handle))</dd>
            <dt>User id</dt><dd class="mono">\(id)</dd>
            <dt>Tenant</dt><dd id="tenant">\(escape(user.tenant))</dd>
            <dt>E-mail</dt><dd>\(escape(user.email ?? "—"))\(user.emailVerified ? " (verified)" : user.email == nil ? "" : " (not verified)")</dd>
            <dt>Phone</dt><dd id="phone">\(escape(user.phone ?? "—"))</dd>
            <dt>Kind</dt><dd>\(user.isGuest ? "guest" : "member")</dd>
            <dt>State</dt><dd id="state">\(user.disabled ? "<span class=\"bad\">disabled</span>" : "active")</dd>
            <dt>Created</dt><dd>\(date(user.createdAt))</dd>
            <dt>Second factor</dt><dd>\(factor)</dd>
            \(details.consoleRole.map { "<dt>Console role</dt><dd>\(escape($0))</dd>" } ?? "")
            </dl>
            \(own ? "<p class=\"hint\">This is your own account: the console does not act on it.</p>" : "")
            <div class="actions">\(actions)</div>
            <h2>Sign-in methods</h2>
            <table id="identities"><thead><tr><th>Provider</th><th>Subject</th><th>E-mail</th><th></th><th>Last sign-in</th></tr></thead>
            <tbody>\(identities.isEmpty ? "<tr><td colspan=\"5\">None (a guest).</td></tr>" : identities)</tbody></table>
            <h2>Sessions</h2>
            <table id="sessions"><thead><tr><th>Device</th><th>Signed in with</th><th>Started</th><th>Expires</th><th></th></tr></thead>
            <tbody>\(sessions.isEmpty ? "<tr><td colspan=\"5\">No sessions.</td></tr>" : sessions)</tbody></table>
            <h2>Passkeys</h2>
            <table id="passkeys"><thead><tr><th>Name</th><th>Kind</th><th>Added</th><th>Last used</th><th></th></tr></thead>
            <tbody>\(passkeys.isEmpty ? "<tr><td colspan=\"4\">No passkeys.</td></tr>" : passkeys)</tbody></table>
            <h2>Audit trail</h2>
            <table id="audit"><thead><tr><th>When</th><th>What</th><th>Outcome</th><th>Who</th><th>Device</th><th>IP</th></tr></thead>
            <tbody>\(audit.isEmpty ? "<tr><td colspan=\"6\">Nothing recorded.</td></tr>" : audit)</tbody></table>
            \(deletion)
            """)
    }

    /// The account's action buttons (or why there are none).
    static func actions(_ viewing: Viewing) -> String {
        let user = viewing.details.user
        let details = viewing.details
        let (id, csrf, own, consoleUser, admin) = (
            viewing.id, viewing.csrf, viewing.own, viewing.consoleUser, viewing.admin
        )
        var actions = ""
        if consoleUser {
            actions += """
                <p class="note" id="console-user">This account uses the console: console users are managed \
                with the operator CLI (<code>auth-worker users</code>, <code>auth-worker admins</code>).</p>
                """
        } else if !own {
            actions += button("sessions/end", user: id, csrf: csrf, label: "End all sessions", id: "end-all")
            if user.email != nil && !user.emailVerified && !user.isGuest {
                actions += button(
                    "verification", user: id, csrf: csrf, label: "Resend verification", id: "resend-verification")
            }
        }
        if admin {
            actions +=
                user.disabled
                ? button("enable", user: id, csrf: csrf, label: "Enable account", id: "enable")
                : button("disable", user: id, csrf: csrf, label: "Disable account", id: "disable", danger: true)
            if details.factor != nil {
                actions += button(
                    "factor/remove", user: id, csrf: csrf, label: "Remove second factor", id: "remove-factor",
                    danger: true)
            }
            if !details.passkeys.isEmpty {
                actions += button(
                    "passkeys/remove", user: id, csrf: csrf, label: "Remove every passkey", id: "remove-passkeys",
                    danger: true)
            }
        }
        return actions
    }

    static func identityRows(_ details: PostgresStore.UserDetails) -> String {
        var identities = ""
        for identity in details.identities {
            identities += """
                <tr><td>\(escape(identity.provider))</td><td class="mono">\(escape(identity.subject))</td>
                <td>\(escape(identity.email ?? ""))\(identity.emailVerified ? " ✓" : "")</td>
                <td>\(identity.hasPassword ? "password" : "")</td><td>\(date(identity.lastLoginAt))</td></tr>

                """
        }
        return identities
    }

    static func sessionRows(_ viewing: Viewing) -> String {
        let (details, id, csrf, own, consoleUser) = (
            viewing.details, viewing.id, viewing.csrf, viewing.own, viewing.consoleUser
        )
        var sessions = ""
        for item in details.sessions {
            let device = [item.deviceName, item.devicePlatform].compactMap { $0 }.map(escape).joined(separator: " · ")
            let state =
                item.live
                ? (own || consoleUser
                    ? "live"
                    : button(
                        "sessions/\(item.id.lowercasedString)/end", user: id, csrf: csrf, label: "End",
                        id: "end-\(item.id.lowercasedString)"))
                : item.revokedAt != nil ? "ended (\(escape(item.revokedReason ?? "")))" : "expired"
            sessions += """
                <tr><td>\(device.isEmpty ? "—" : device)</td><td>\(escape(item.provider))</td>
                <td>\(date(item.createdAt))</td><td>\(date(item.expiresAt))</td><td>\(state)</td></tr>

                """
        }
        return sessions
    }

    static func passkeyRows(_ viewing: Viewing) -> String {
        let (details, id, csrf, admin) = (viewing.details, viewing.id, viewing.csrf, viewing.admin)
        var passkeys = ""
        for key in details.passkeys {
            let remove =
                admin
                ? button(
                    "passkeys/\(key.id.lowercasedString)/remove", user: id, csrf: csrf, label: "Remove",
                    id: "remove-passkey-\(key.id.lowercasedString)", danger: true) : ""
            passkeys += """
                <tr><td>\(escape(key.name))</td><td>\(key.backedUp ? "synced" : "device-bound")</td>
                <td>\(date(key.createdAt))</td><td>\(date(key.lastUsedAt))</td><td>\(remove)</td></tr>

                """
        }
        return passkeys
    }

    static func auditRows(_ details: PostgresStore.UserDetails) -> String {
        var audit = ""
        for line in details.audit {
            audit += """
                <tr><td>\(date(line.at))</td><td>\(escape(line.action))</td><td>\(escape(line.outcome))</td>
                <td>\(escape(line.actor))</td><td>\(escape(line.deviceName ?? ""))</td><td>\(escape(line.ip ?? ""))</td></tr>

                """
        }
        return audit
    }

    static let stylesheet = """
        :root { color-scheme: light; --ink: #1d2330; --muted: #5b6475; --line: #d9dde5; --accent: #2453d4; --bad: #b42318; }
        * { box-sizing: border-box; }
        body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink); background: #f6f7f9; }
        header { display: flex; align-items: center; gap: 2rem; padding: .7rem 1.5rem; background: #fff; border-bottom: 1px solid var(--line); }
        nav { display: flex; align-items: center; gap: 1rem; flex: 1; }
        nav .who { margin-left: auto; color: var(--muted); }
        main { max-width: 1100px; margin: 1.5rem auto; padding: 0 1.5rem; }
        h1 { font-size: 1.5rem; margin: .2rem 0 1rem; } h2 { font-size: 1.1rem; margin: 1.8rem 0 .6rem; }
        a { color: var(--accent); }
        table { width: 100%; border-collapse: collapse; background: #fff; border: 1px solid var(--line); }
        th, td { text-align: left; padding: .45rem .6rem; border-bottom: 1px solid var(--line); vertical-align: top; }
        th { font-weight: 600; color: var(--muted); font-size: .85rem; }
        .mono, code { font-family: ui-monospace, "SFMono-Regular", Menlo, monospace; font-size: .85em; word-break: break-all; }
        .card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 1.2rem; max-width: 420px; display: grid; gap: .9rem; }
        label { display: grid; gap: .3rem; font-weight: 500; }
        input { font: inherit; padding: .45rem .55rem; border: 1px solid #b8bfcc; border-radius: 6px; }
        button { font: inherit; padding: .4rem .9rem; border-radius: 6px; border: 1px solid var(--accent); background: var(--accent); color: #fff; cursor: pointer; }
        button.danger { background: #fff; color: var(--bad); border-color: var(--bad); }
        nav button { background: #fff; color: var(--accent); }
        form.inline { display: inline; }
        .search { display: flex; gap: .5rem; margin-bottom: 1rem; } .search input { flex: 1; }
        .actions { display: flex; gap: .5rem; flex-wrap: wrap; margin: 1rem 0; }
        dl.profile { display: grid; grid-template-columns: 10rem 1fr; gap: .3rem 1rem; background: #fff; border: 1px solid var(--line); padding: 1rem; margin: 0; }
        dt { color: var(--muted); } dd { margin: 0; }
        .error { color: var(--bad); font-weight: 500; } .bad { color: var(--bad); font-weight: 600; }
        .notice { background: #e8f3ea; border: 1px solid #9fd0aa; padding: .6rem .8rem; border-radius: 6px; }
        .hint { color: var(--muted); font-size: .9rem; }
        .danger-zone { border-color: #f1b8b3; }
        .pager { display: flex; gap: 1rem; }
        """
}
