import AuthDomain
import AuthStore
import Foundation
import Messages

/// What a console user can do to an account, the same from a page's form and from the API.
enum ConsoleAction: Sendable, Equatable {
    case endSession(UUID)
    case endSessions
    case disable
    case enable
    case removeFactor
    /// One passkey (its id), or all of them (nil).
    case removePasskeys(UUID?)
    case resendVerification
    /// `confirm`: the account's handle, typed.
    case delete(confirm: String)

    /// `support` reads and ends sessions (and resends a verification code); `admin` does the rest too.
    var needsAdmin: Bool {
        switch self {
        case .endSession, .endSessions, .resendVerification: false
        case .disable, .enable, .removeFactor, .removePasskeys, .delete: true
        }
    }

    /// The action a path names (`sessions/<id>/end`, `sessions/end`, `disable`, `enable`,
    /// `factor/remove`, `passkeys/remove`, `passkeys/<id>/remove`, `verification`, `delete`),
    /// with the fields it needs.
    init?(path: [String], fields: [String: String]) {
        switch path {
        case ["sessions", "end"]: self = .endSessions
        case let p where p.count == 3 && p[0] == "sessions" && p[2] == "end":
            guard let session = UUID(uuidString: p[1]) else { return nil }
            self = .endSession(session)
        case ["disable"]: self = .disable
        case ["enable"]: self = .enable
        case ["factor", "remove"]: self = .removeFactor
        case ["passkeys", "remove"]: self = .removePasskeys(nil)
        case let p where p.count == 3 && p[0] == "passkeys" && p[2] == "remove":
            guard let passkey = UUID(uuidString: p[1]) else { return nil }
            self = .removePasskeys(passkey)
        case ["verification"]: self = .resendVerification
        case ["delete"]: self = .delete(confirm: fields["confirm"] ?? "")
        default: return nil
        }
    }
}

/// What an action did: for the API's JSON and the page's notice.
struct ConsoleActionOutcome: Encodable, Sendable {
    var sessionsEnded: Int?
    var changed: Bool?
    var removed: Bool?
    var sent: Bool?
    var deleted: Bool?
    var passkeysRemoved: Int?
    /// The page's notice, a key of `Pages.notices` (not in the JSON).
    var notice: String

    enum CodingKeys: String, CodingKey {
        case changed, removed, sent, deleted
        case sessionsEnded = "sessions_ended"
        case passkeysRemoved = "passkeys_removed"
    }
}

extension AdminConsole {
    /// Performs `action` on user `id` for `session`'s holder, after the role, tenant and
    /// own-account checks. A user of a tenant the role does not serve is no such user; the action
    /// runs as the user's tenant's (its unit of work finds that tenant's rows only, its events
    /// name it).
    func perform(_ action: ConsoleAction, on id: UUID, by session: PostgresStore.ConsoleSession) async throws
        -> ConsoleActionOutcome
    {
        if action.needsAdmin && !session.role.mayChangeAccounts { throw ConsoleRefusal.adminsOnly }
        guard let tenant = try await store.tenant(ofUser: id, within: session.tenant) else {
            throw ConsoleRefusal.noSuchUser
        }
        guard id != session.userID else { throw ConsoleRefusal.ownAccount }
        // Console users are not each other's to act on: a support agent could sign an admin out
        // again and again, an admin disable another. The operator's CLI manages them.
        guard try await store.consoleRole(of: id) == nil else { throw ConsoleRefusal.consoleUser }
        let actor = Self.actor(session)
        switch action {
        case .endSession(let sessionID):
            guard
                let ended = try await AccountAdministration.endSessions(
                    id, only: sessionID, actor: actor, store: store, configuration: configuration, clock: clock,
                    tenant: tenant)
            else { throw ConsoleRefusal.noSuchUser }
            return ConsoleActionOutcome(
                sessionsEnded: ended, notice: ended == 0 ? "session_already_ended" : "session_ended")
        case .endSessions:
            guard
                let ended = try await AccountAdministration.endSessions(
                    id, only: nil, actor: actor, store: store, configuration: configuration, clock: clock,
                    tenant: tenant)
            else { throw ConsoleRefusal.noSuchUser }
            return ConsoleActionOutcome(sessionsEnded: ended, notice: "sessions_ended")
        case .disable, .enable:
            let disable = action == .disable
            guard
                let change = try await AccountAdministration.setDisabled(
                    id, disabled: disable, actor: actor, store: store, configuration: configuration, clock: clock,
                    tenant: tenant)
            else { throw ConsoleRefusal.noSuchUser }
            return ConsoleActionOutcome(
                sessionsEnded: change.sessionsEnded, changed: change.changed,
                notice: !change.changed
                    ? (disable ? "already_disabled" : "already_enabled") : (disable ? "disabled" : "enabled"))
        case .removeFactor:
            guard
                let removed = try await AccountAdministration.removeFactor(
                    id, actor: actor, store: store, configuration: configuration, clock: clock,
                    tenant: tenant)
            else { throw ConsoleRefusal.noSuchUser }
            return ConsoleActionOutcome(
                removed: removed, notice: removed ? "factor_removed" : "no_factor")
        case .removePasskeys(let only):
            guard
                let removed = try await AccountAdministration.removePasskeys(
                    id, only: only, actor: actor, store: store, configuration: configuration, clock: clock,
                    tenant: tenant)
            else { throw ConsoleRefusal.noSuchUser }
            return ConsoleActionOutcome(
                removed: removed > 0, passkeysRemoved: removed, notice: removed > 0 ? "passkeys_removed" : "no_passkeys"
            )
        case .resendVerification:
            return try await resendVerification(id, actor: actor, tenant: tenant)
        case .delete(let confirm):
            guard let details = try await store.userDetails(id, tenant: tenant, at: clock.now()) else {
                throw ConsoleRefusal.noSuchUser
            }
            guard confirm == details.user.handle else {
                throw ConsoleRefusal(
                    422, "confirmation_mismatch", "type the account's handle exactly to confirm the deletion")
            }
            guard
                try await AccountDeletion.deleteUser(
                    id, reason: "admin", actor: actor, store: store, configuration: configuration, clock: clock,
                    tenant: tenant) != nil
            else { throw ConsoleRefusal.noSuchUser }
            return ConsoleActionOutcome(deleted: true, notice: "deleted")
        }
    }

    /// Resends the account's verification code, each refusal said as the console says it.
    private func resendVerification(_ id: UUID, actor: String, tenant: String) async throws -> ConsoleActionOutcome {
        guard let flows = tenant == Tenant.defaultName ? flows : tenantFlows[tenant] else {
            throw ConsoleRefusal(
                409, "codes_not_enabled",
                "this console does not know tenant \"\(tenant)\"'s settings: restart it after adding the tenant")
        }
        let sent: Bool?
        do {
            sent = try await AccountAdministration.resendVerification(
                id, actor: actor, flows: flows, store: store, tenant: tenant)
        } catch let error as LoginError {
            switch error.code.rawValue {
            case "too_many_attempts":
                throw ConsoleRefusal(
                    429, "too_many_attempts", "too many codes were sent to this account; try later")
            case "unsupported_method":
                throw ConsoleRefusal(409, "codes_not_enabled", "e-mail codes are not enabled on this service")
            default:
                throw ConsoleRefusal(409, "no_address", "this account has no e-mail address to verify")
            }
        }
        guard let sent else { throw ConsoleRefusal.noSuchUser }
        return ConsoleActionOutcome(
            sent: sent, notice: sent ? "code_sent" : "already_verified")
    }

    // MARK: - The JSON API

    /// The one method each API route answers (nil: no such route).
    static func apiMethod(_ path: [String]) -> String? {
        switch path {
        case ["me"], ["users"]: "GET"
        case let p where p.count == 2 && p[0] == "users": "GET"
        case ["sign-out"]: "POST"
        case let p
        where p.count >= 3 && p[0] == "users" && ConsoleAction(path: Array(p.dropFirst(2)), fields: [:]) != nil:
            "POST"
        default: nil
        }
    }

    func api(_ request: HTTPRequest, _ path: [String]) async throws -> HTTPAnswer {
        guard let allowed = Self.apiMethod(path) else { throw ConsoleRefusal.notFound }
        guard request.method == allowed || (allowed == "GET" && request.method == "HEAD") else {
            var answer = Self.json(
                status: 405, ["error": "method_not_allowed", "message": "this route answers \(allowed) only"])
            answer.headers.append(("Allow", allowed == "GET" ? "GET, HEAD" : allowed))
            return answer
        }
        guard let session = try await session(request) else { throw ConsoleRefusal.unauthenticated }
        switch (request.method == "HEAD" ? "GET" : request.method, path) {
        case ("GET", ["me"]):
            return Self.json(
                status: 200,
                Me(
                    userID: session.userID, email: session.email, role: session.role.rawValue, tenant: session.tenant,
                    csrfToken: request.cookie(Self.sessionCookie).flatMap(Self.csrfToken(sessionCookie:)) ?? ""))
        case ("GET", ["users"]):
            let (query, page) = try searchParameters(request)
            let tenant = try searchedTenant(request, session)
            let found = try await store.searchUsers(query, tenant: tenant, offset: page * pageSize, limit: pageSize)
            return Self.json(status: 200, UserPage(users: found.users, page: page, more: found.more))
        case ("GET", let p) where p.count == 2 && p[0] == "users":
            let id = try userID(p[1])
            guard let details = try await store.userDetails(id, tenant: session.tenant, at: clock.now()) else {
                throw ConsoleRefusal.noSuchUser
            }
            return Self.json(status: 200, details)
        case ("POST", ["sign-out"]):
            try checkCSRF(request, presented: request.headers["x-csrf-token"])
            try await endConsoleSession(request, session)
            return HTTPAnswer(status: 204, headers: [Self.clearCookie(Self.sessionCookie)])
        case ("POST", let p) where p.count >= 3 && p[0] == "users":
            try checkCSRF(request, presented: request.headers["x-csrf-token"])
            let id = try userID(p[1])
            var fields: [String: String] = [:]
            if !request.body.isEmpty {
                guard
                    let object = try? JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any]
                else { throw ConsoleRefusal(400, "malformed_request", "the body must be a JSON object") }
                if let confirm = object["confirm"] {
                    guard let text = confirm as? String else {
                        throw ConsoleRefusal(400, "malformed_request", "confirm must be a string")
                    }
                    fields["confirm"] = text
                }
            }
            guard let action = ConsoleAction(path: Array(p.dropFirst(2)), fields: fields) else {
                throw ConsoleRefusal.notFound
            }
            return Self.json(status: 200, try await perform(action, on: id, by: session))
        case ("GET", _), ("POST", _): throw ConsoleRefusal.notFound
        default: throw ConsoleRefusal(405, "method_not_allowed", "this method is not allowed here")
        }
    }

    func userID(_ text: String) throws -> UUID {
        guard let id = UUID(uuidString: text) else {
            throw ConsoleRefusal(400, "malformed_request", "a user id is a UUID")
        }
        return id
    }

    /// The tenant whose users a search lists: an operator's `tenant` parameter (the default
    /// tenant without one); the tenant a role for one tenant serves (a `tenant` naming another is
    /// refused, 403).
    func searchedTenant(_ request: HTTPRequest, _ session: PostgresStore.ConsoleSession) throws -> String {
        let asked = request.query["tenant"]
        if let asked, !Tenant.isValidName(asked) {
            throw ConsoleRefusal(400, "malformed_request", "tenant is a tenant's name: 1 to 32 of a-z, 0-9 and -")
        }
        guard let served = session.tenant else { return asked ?? Tenant.defaultName }
        if let asked, asked != served { throw ConsoleRefusal.otherTenant(served) }
        return served
    }

    /// `q` (at most 200 characters) and `page` (0 to 10,000) from the query.
    func searchParameters(_ request: HTTPRequest) throws -> (query: String, page: Int) {
        let query = request.query["q"] ?? ""
        guard query.count <= 200, !query.contains("\0") else {
            throw ConsoleRefusal(400, "malformed_request", "q is at most 200 characters")
        }
        var page = 0
        if let text = request.query["page"] {
            guard let number = Int(text), (0...10_000).contains(number) else {
                throw ConsoleRefusal(400, "malformed_request", "page is a whole number from 0 to 10000")
            }
            page = number
        }
        return (query, page)
    }

    struct Me: Encodable {
        @LowercaseUUID var userID: UUID
        var email: String
        var role: String
        /// The tenant the role serves; absent for an operator.
        var tenant: String?
        var csrfToken: String

        enum CodingKeys: String, CodingKey {
            case email, role, tenant
            case userID = "user_id"
            case csrfToken = "csrf_token"
        }
    }

    struct UserPage: Encodable {
        var users: [PostgresStore.UserSummary]
        var page: Int
        var more: Bool
    }

    // MARK: - The pages

    func searchPage(_ request: HTTPRequest) async throws -> HTTPAnswer {
        guard let session = try await session(request) else { throw ConsoleRefusal.unauthenticated }
        let (query, page) = try searchParameters(request)
        let tenant = try searchedTenant(request, session)
        let found = try await store.searchUsers(query, tenant: tenant, offset: page * pageSize, limit: pageSize)
        return Pages.html(
            status: 200,
            Pages.search(
                session: session, csrf: csrf(request), query: query, tenant: tenant, page: page, users: found.users,
                more: found.more))
    }

    func userPage(_ request: HTTPRequest, id text: String) async throws -> HTTPAnswer {
        guard let session = try await session(request) else { throw ConsoleRefusal.unauthenticated }
        let id = try userID(text)
        guard let details = try await store.userDetails(id, tenant: session.tenant, at: clock.now()) else {
            throw ConsoleRefusal.noSuchUser
        }
        let notice = request.query["done"].flatMap { Pages.notices[$0] }
        return Pages.html(
            status: 200, Pages.user(session: session, csrf: csrf(request), details: details, notice: notice))
    }

    func pageAction(_ request: HTTPRequest, id text: String, action path: [String]) async throws -> HTTPAnswer {
        guard let session = try await session(request) else { throw ConsoleRefusal.unauthenticated }
        let form = request.form
        try checkCSRF(request, presented: form["csrf"])
        let id = try userID(text)
        guard let action = ConsoleAction(path: path, fields: form) else { throw ConsoleRefusal.notFound }
        let outcome = try await perform(action, on: id, by: session)
        if case .delete = action { return redirect("/admin/users?deleted=1") }
        return redirect("/admin/users/\(id.lowercasedString)?done=" + outcome.notice)
    }

    func csrf(_ request: HTTPRequest) -> String {
        request.cookie(Self.sessionCookie).flatMap(Self.csrfToken(sessionCookie:)) ?? ""
    }
}
