import AuthCrypto
import AuthDomain
import AuthStore
import Foundation
import Messages
import ServiceKit

/// The admin console: server-rendered pages under `/admin/` that work without JavaScript, and the
/// JSON API under `/admin/api/` they are built on (`contract/admin-api.yaml`), for support staff
/// and operators.
///
/// Signing in is the service's own password flow (Argon2id, the per-address throttle, the audit
/// trail) followed by the account's TOTP through `mfa_challenge`: the console adds no way in of
/// its own. An account without a second factor, or without a role an operator granted
/// (`auth-worker admins grant`), gets no console session. Every action goes through the same
/// store code as the CLI, emits the same events and records the acting console user.
public final class AdminConsole: Sendable {
    public static let sessionCookie = "__Host-console"
    static let signInCookie = "__Host-console-signin"
    static let factorCookie = "__Host-console-mfa"

    let configuration: WorkerConfiguration
    let settings: ConsoleSettings
    let store: PostgresStore
    let flows: LoginFlows
    /// The flows of the tenants besides the default one (`AUTH_TENANTS_FILE`), for what an action
    /// sends in a tenant's name (a verification code with its mail keys).
    let tenantFlows: [String: LoginFlows]
    let clock: any WorkerClock
    let logger: Logger
    let pageSize = 20

    /// - Parameter flows: the default tenant's, whose accounts sign in to the console.
    public init(
        configuration: WorkerConfiguration, settings: ConsoleSettings = ConsoleSettings(), store: PostgresStore,
        flows: LoginFlows, tenantFlows: [String: LoginFlows] = [:], clock: any WorkerClock, logger: Logger
    ) {
        self.configuration = configuration
        self.settings = settings
        self.store = store
        self.flows = flows
        self.tenantFlows = tenantFlows
        self.clock = clock
        self.logger = logger
    }

    /// Answers one request; never throws: a failure inside is logged and answered 500 or 503.
    public func handle(_ request: HTTPRequest) async -> HTTPAnswer {
        var answer: HTTPAnswer
        do {
            answer = try await route(request)
        } catch let error as ConsoleRefusal {
            answer = refusalAnswer(error, api: request.path.hasPrefix("/admin/api/"))
        } catch {
            logger.error(
                "Console request failed", metadata: ["http.path": request.path, "error": String(describing: error)])
            answer = refusalAnswer(
                ConsoleRefusal(503, "unavailable", "the service cannot answer now; try again shortly"),
                api: request.path.hasPrefix("/admin/api/"))
        }
        answer.headers += Self.securityHeaders
        return answer
    }

    /// Sent with every answer: no script at all, no framing, no sniffing, no referrer, no caching.
    static let securityHeaders: [(String, String)] = [
        (
            "Content-Security-Policy",
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
                + "base-uri 'none'"
        ),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Frame-Options", "DENY"),
        ("Cross-Origin-Opener-Policy", "same-origin"),
        ("Cache-Control", "no-store"),
    ]

    // MARK: - Routing

    private func route(_ request: HTTPRequest) async throws -> HTTPAnswer {
        let parts = request.path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        // The probes' door: the process answers (it reads nothing, so a slow database does not
        // take the console out of its Service).
        if parts == ["healthz"] && request.method == "GET" {
            return HTTPAnswer(status: 200, headers: [("Content-Type", "text/plain")], body: Array("ok\n".utf8))
        }
        guard parts.first == "admin" else { throw ConsoleRefusal.notFound }
        let rest = Array(parts.dropFirst())
        switch (request.method, rest) {
        case ("GET", []): return redirect("/admin/users")
        case ("GET", ["static", "console.css"]):
            return HTTPAnswer(
                status: 200, headers: [("Content-Type", "text/css; charset=utf-8")], body: Array(Pages.stylesheet.utf8))
        case ("GET", ["sign-in"]): return try await signInPage(request)
        case ("POST", ["sign-in"]): return try await signInWithPassword(request)
        case ("GET", ["sign-in", "code"]): return codePage(request, error: nil)
        case ("POST", ["sign-in", "code"]): return try await signInWithCode(request)
        case ("POST", ["sign-out"]): return try await signOut(request)
        case (_, let path) where path.first == "api":
            return try await api(request, Array(path.dropFirst()))
        case ("GET", ["users"]): return try await searchPage(request)
        case ("GET", let path) where path.count == 2 && path[0] == "users":
            return try await userPage(request, id: path[1])
        case ("POST", let path) where path.count >= 3 && path[0] == "users":
            return try await pageAction(request, id: path[1], action: Array(path.dropFirst(2)))
        case ("GET", _), ("POST", _): throw ConsoleRefusal.notFound
        default:
            var answer = Pages.html(
                status: 405, Pages.problem(ConsoleRefusal(405, "method_not_allowed", "this method is not allowed here"))
            )
            answer.headers.append(("Allow", "GET, POST"))
            return answer
        }
    }

    // MARK: - Sessions

    /// The console session the request's cookie names, if it is good.
    func session(_ request: HTTPRequest) async throws -> PostgresStore.ConsoleSession? {
        guard let id = request.cookie(Self.sessionCookie).flatMap(Self.sessionID) else { return nil }
        let console = settings
        let hash = SHA256.hash(id)
        if let session = try await store.consoleSession(
            idHash: hash, at: clock.now(), absoluteLifetime: console.absoluteLifetime,
            idleLifetime: console.idleLifetime)
        {
            return session
        }
        // Timed out, its role taken, its account disabled: forgotten, and the login session
        // under it ended (nobody holds its tokens; it should not stay live in the account's list).
        if let stale = try await store.endConsoleSession(idHash: hash) {
            _ = try await AccountAdministration.endSessions(
                stale.userID, only: stale.sessionID, actor: "console", reason: "logout", store: store,
                configuration: configuration, clock: clock)
        }
        return nil
    }

    /// The session's raw id from the cookie's text: 32 bytes, base64url.
    static func sessionID(_ text: String) -> [UInt8]? {
        guard text.utf8.count == 43, let bytes = Base64URL.decode(text), bytes.count == 32 else { return nil }
        return bytes
    }

    /// The CSRF token bound to a session: a MAC of a fixed label under the session's secret id,
    /// so it is known only to whoever holds the cookie, and changes with every sign-in.
    static func csrfToken(sessionCookie: String) -> String? {
        sessionID(sessionCookie).map { Base64URL.encode(HMACSHA256.mac(key: $0, message: Array("console csrf".utf8))) }
    }

    /// Whether a state-changing request carries its session's CSRF token (form field `csrf` or
    /// header `X-CSRF-Token`), compared in constant time.
    func checkCSRF(_ request: HTTPRequest, presented: String?) throws {
        guard let cookie = request.cookie(Self.sessionCookie), let expected = Self.csrfToken(sessionCookie: cookie),
            let presented, ConstantTime.equals(Array(presented.utf8), Array(expected.utf8))
        else { throw ConsoleRefusal(403, "csrf", "the request's CSRF token is missing or wrong: reload the page") }
    }

    static func cookie(_ name: String, _ value: String, maxAge: Int?) -> (String, String) {
        var text = "\(name)=\(value); Path=/; Secure; HttpOnly; SameSite=Strict"
        if let maxAge { text += "; Max-Age=\(maxAge)" }
        return ("Set-Cookie", text)
    }

    static func clearCookie(_ name: String) -> (String, String) { cookie(name, "", maxAge: 0) }

    func redirect(_ location: String, headers: [(String, String)] = []) -> HTTPAnswer {
        HTTPAnswer(status: 303, headers: [("Location", location)] + headers)
    }

    /// The actor the audit trail records for a console user.
    static func actor(_ session: PostgresStore.ConsoleSession) -> String { AuditEntry.consoleActor(session.userID) }

    // MARK: - Sign-in

    /// Always the form, even to a browser that holds a session: one planted there (fixation)
    /// never carries its holder past the sign-in; signing in replaces it.
    private func signInPage(_ request: HTTPRequest) async throws -> HTTPAnswer {
        try freshSignInForm(error: nil, status: 200)
    }

    /// The sign-in form with a new double-submit token (the form has no session to bind one to).
    private func freshSignInForm(error: String?, status: Int, email: String = "") throws -> HTTPAnswer {
        let token = Base64URL.encode(try SecureRandom.bytes(32))
        return Pages.html(
            status: status, Pages.signIn(csrf: token, email: email, error: error),
            headers: [Self.cookie(Self.signInCookie, token, maxAge: 1800)])
    }

    private func checkSignInToken(_ request: HTTPRequest, _ form: [String: String]) throws {
        guard let cookie = request.cookie(Self.signInCookie), let field = form["csrf"], !cookie.isEmpty,
            ConstantTime.equals(Array(cookie.utf8), Array(field.utf8))
        else { throw ConsoleRefusal(403, "csrf", "the sign-in form expired: reload the page and try again") }
    }

    private func signInWithPassword(_ request: HTTPRequest) async throws -> HTTPAnswer {
        let form = request.form
        try checkSignInToken(request, form)
        let email = String((form["email"] ?? "").prefix(320))
        var data = LoginRequestData(method: LoginMethod.password.rawValue)
        data.email = email
        data.password = String((form["password"] ?? "").prefix(1024))
        data.device = .init(name: "Admin console", platform: "web")
        data.context = .init(
            ip: request.client, userAgent: request.headers["user-agent"].map { String($0.prefix(256)) })
        let answer = try await store.answer(loginRequest(.password, data), flows: flows, clock: clock)
        if let error = answer.result.error {
            if error.code.rawValue == "mfa_required", let token = error.mfaToken {
                return redirect(
                    "/admin/sign-in/code",
                    headers: [Self.cookie(Self.factorCookie, token, maxAge: Int(configuration.mfa.challengeLifetime))])
            }
            logger.info("Console sign-in refused", metadata: ["auth.code": error.code.rawValue])
            return try freshSignInForm(
                error: Self.signInMessage(error), status: error.code.rawValue == "too_many_attempts" ? 429 : 401,
                email: email)
        }
        // Signed in with the password alone: the account has no second factor. Its session ends at once.
        if let user = answer.userID, let session = answer.sessionID {
            _ = try await AccountAdministration.endSessions(
                user, only: session, actor: "console", reason: "logout", store: store, configuration: configuration,
                clock: clock)
        }
        return try freshSignInForm(
            error: "The console needs a second factor: enroll an authenticator app for this account first.",
            status: 403, email: email)
    }

    private func codePage(_ request: HTTPRequest, error: String?) -> HTTPAnswer {
        guard request.cookie(Self.factorCookie) != nil, let csrf = request.cookie(Self.signInCookie) else {
            return redirect("/admin/sign-in")
        }
        return Pages.html(status: error == nil ? 200 : 401, Pages.code(csrf: csrf, error: error))
    }

    private func signInWithCode(_ request: HTTPRequest) async throws -> HTTPAnswer {
        let form = request.form
        try checkSignInToken(request, form)
        guard let token = request.cookie(Self.factorCookie) else { return redirect("/admin/sign-in") }
        var data = LoginRequestData(method: LoginMethod.mfaChallenge.rawValue)
        data.mfaToken = token
        data.code = String((form["code"] ?? "").filter(\.isNumber).prefix(6))
        data.context = .init(
            ip: request.client, userAgent: request.headers["user-agent"].map { String($0.prefix(256)) })
        let answer = try await store.answer(loginRequest(.mfaChallenge, data), flows: flows, clock: clock)
        if let error = answer.result.error {
            logger.info("Console second factor refused", metadata: ["auth.code": error.code.rawValue])
            if ["token_expired", "invalid_token"].contains(error.code.rawValue) {
                let fresh = try freshSignInForm(error: "The sign-in took too long: start again.", status: 401)
                return HTTPAnswer(
                    status: fresh.status, headers: fresh.headers + [Self.clearCookie(Self.factorCookie)],
                    body: fresh.body)
            }
            return codePage(request, error: Self.signInMessage(error))
        }
        guard let user = answer.userID, let session = answer.sessionID else {
            throw ConsoleRefusal(503, "unavailable", "the sign-in did not finish; try again")
        }
        // A new id at every sign-in: one planted in the browser before (fixation) is dropped.
        if let planted = request.cookie(Self.sessionCookie).flatMap(Self.sessionID) {
            _ = try await store.endConsoleSession(idHash: SHA256.hash(planted))
        }
        let id = try SecureRandom.bytes(32)
        let console = settings
        guard
            let role = try await store.openConsoleSession(
                idHash: SHA256.hash(id), userID: user, sessionID: session, client: request.client, at: clock.now(),
                absoluteLifetime: console.absoluteLifetime, idleLifetime: console.idleLifetime)
        else {
            _ = try await AccountAdministration.endSessions(
                user, only: session, actor: "console", reason: "logout", store: store, configuration: configuration,
                clock: clock)
            logger.warning("Console sign-in by an account without a role", metadata: ["user.id": user.lowercasedString])
            let fresh = try freshSignInForm(error: "This account may not use the console.", status: 403)
            return HTTPAnswer(
                status: 403, headers: fresh.headers + [Self.clearCookie(Self.factorCookie)], body: fresh.body)
        }
        logger.info("Console sign-in", metadata: ["user.id": user.lowercasedString, "console.role": role.rawValue])
        return redirect(
            "/admin/users",
            headers: [
                Self.cookie(Self.sessionCookie, Base64URL.encode(id), maxAge: nil), Self.clearCookie(Self.factorCookie),
                Self.clearCookie(Self.signInCookie),
            ])
    }

    private func signOut(_ request: HTTPRequest) async throws -> HTTPAnswer {
        if let session = try await session(request) {
            try checkCSRF(request, presented: request.form["csrf"] ?? request.headers["x-csrf-token"])
            try await endConsoleSession(request, session)
        }
        return redirect("/admin/sign-in", headers: [Self.clearCookie(Self.sessionCookie)])
    }

    func endConsoleSession(_ request: HTTPRequest, _ session: PostgresStore.ConsoleSession) async throws {
        guard let id = request.cookie(Self.sessionCookie).flatMap(Self.sessionID) else { return }
        _ = try await store.endConsoleSession(idHash: SHA256.hash(id))
        _ = try await AccountAdministration.endSessions(
            session.userID, only: session.sessionID, actor: Self.actor(session), reason: "logout", store: store,
            configuration: configuration, clock: clock)
    }

    func loginRequest(_ method: LoginMethod, _ data: LoginRequestData) throws -> LoginRequest {
        LoginRequest(
            id: "console-" + UUID().uuidString.lowercased(), source: "/auth-worker/admin-console",
            time: clock.now(), traceparent: nil, method: method, data: data)
    }

    static func signInMessage(_ error: ErrorPayload) -> String {
        switch error.code.rawValue {
        case "invalid_credentials": "Wrong e-mail address or password."
        case "too_many_attempts":
            "Too many attempts. Try again in \(error.retryAfterSeconds.map { "\($0) seconds" } ?? "a while")."
        case "account_disabled": "This account is disabled."
        case "invalid_code": "That code is not right. Try the current one from your authenticator app."
        case "unsupported_method": "Password sign-in is not enabled on this service."
        default: "The sign-in was refused (\(error.code.rawValue))."
        }
    }
}

/// A refusal answered with a status: a page or `{"error": code, "message": …}`.
struct ConsoleRefusal: Error {
    var status: Int
    var code: String
    var message: String

    init(_ status: Int, _ code: String, _ message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    static let notFound = ConsoleRefusal(404, "not_found", "there is nothing here")
    static let unauthenticated = ConsoleRefusal(401, "unauthenticated", "sign in to the console first")
    static let adminsOnly = ConsoleRefusal(403, "forbidden", "only console admins may do this")
    static func otherTenant(_ served: String) -> ConsoleRefusal {
        ConsoleRefusal(403, "forbidden", "your console role serves the users of tenant \"\(served)\" only")
    }
    static let ownAccount = ConsoleRefusal(
        409, "own_account", "the console does not act on your own account; use the app or another admin")
    static let noSuchUser = ConsoleRefusal(404, "unknown_user", "there is no such user")
    static let consoleUser = ConsoleRefusal(
        403, "console_user",
        "this account uses the console: console users are managed with the operator CLI (auth-worker users, admins)")
}

extension AdminConsole {
    func refusalAnswer(_ refusal: ConsoleRefusal, api: Bool) -> HTTPAnswer {
        if api {
            return Self.json(status: refusal.status, ["error": refusal.code, "message": refusal.message])
        }
        if refusal.status == 401 { return redirect("/admin/sign-in") }
        return Pages.html(status: refusal.status, Pages.problem(refusal))
    }

    static func json(status: Int, _ value: some Encodable) -> HTTPAnswer {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(Timestamp.format(date))
        }
        let body = (try? encoder.encode(value)).map(Array.init) ?? Array("{}".utf8)
        return HTTPAnswer(status: status, headers: [("Content-Type", "application/json")], body: body)
    }
}
