import AuthCrypto
import Foundation
import Messages
import PGStore
import Passwords
import ServiceKit
import Testing

@testable import AdminConsole
@testable import AuthDomain
@testable import AuthStore
@testable import TestSupport

/// The console against its own PostgreSQL database, with the login flows of a `FlowHarness` for
/// making users as a gateway would (through the same flows the worker runs), a manual clock, and
/// TOTP codes made by an independent implementation (PyPI `pyotp`).
final class ConsoleTestBed: @unchecked Sendable {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
    let harness: FlowHarness
    /// The harnesses of the tenants besides the default one, on the same database, by name.
    let tenants: [String: FlowHarness]
    let console: AdminConsole
    let logs = InMemoryLogHandler()
    let mail: (privateKey: [UInt8], publicKey: [UInt8])

    /// - Parameter tenants: tenants served besides the default one, each with the same settings.
    init(tenants names: [String] = [], configure: @escaping (inout WorkerConfiguration) -> Void = { _ in })
        async throws
    {
        let passwords = try PasswordService(parameters: fastArgon2, threads: 2)
        let resultsKey = try SecureRandom.bytes(32)
        let mail = try X25519.generateKeyPair()
        self.mail = mail
        let settings = { (config: inout WorkerConfiguration) in
            config.resultsKey = resultsKey
            config.mfa.issuer = "Example App"
            config.emailCodes.mailKey = mail.publicKey
            configure(&config)
        }
        harness = try await FlowHarness(clock: clock, passwords: passwords, configure: settings)
        var tenants: [String: FlowHarness] = [:]
        for name in names {
            tenants[name] = try await FlowHarness(
                clock: clock, passwords: passwords, databaseURL: harness.databaseURL, tenant: name,
                configure: settings)
        }
        self.tenants = tenants
        console = AdminConsole(
            configuration: harness.configuration, store: harness.store, flows: harness.flows,
            tenantFlows: tenants.mapValues(\.flows), clock: clock,
            logger: Logger(label: "console", level: .debug, handler: logs))
    }

    /// A member signed up through the flows; their session's tokens.
    struct Member {
        var id: UUID
        var email: String
        var password: String
        var accessToken: String
        var refreshToken: String
        /// The authenticator's `otpauth://` URI, once a factor is enrolled.
        var totpURI: String?
    }

    /// - Parameter tenant: whose account (the default tenant's without one).
    func register(
        _ email: String, name: String? = nil, password: String = "correct horse battery", tenant: String? = nil
    ) async throws -> Member {
        let harness = try tenant.map { try #require(tenants[$0]) } ?? harness
        let outcome = try #require(
            try await harness.handle(
                makeRequest(.register) {
                    $0.email = email
                    $0.password = password
                    $0.name = name
                    $0.device = .init(name: "Laptop", platform: "web")
                }))
        let session = try #require(outcome.result.session, "\(outcome.result)")
        let userID = try #require(outcome.result.user?.id)
        let id = try #require(UUID(uuidString: userID))
        return Member(
            id: id, email: email, password: password, accessToken: session.accessToken,
            refreshToken: try #require(session.refreshToken))
    }

    /// Signs a member in again from another device: that session's tokens.
    func signIn(_ member: Member, device: String) async throws -> (sessionID: UUID, refreshToken: String) {
        let outcome = try #require(
            try await harness.handle(
                makeRequest(.password) {
                    $0.email = member.email
                    $0.password = member.password
                    $0.device = .init(name: device, platform: "ios")
                }))
        let session = try #require(outcome.result.session, "\(outcome.result)")
        let rows = try await harness.query(
            "SELECT id FROM sessions WHERE user_id = \(member.id) AND device_name = \(device) ORDER BY created_at DESC")
        return (try #require(rows.first).decode("id"), try #require(session.refreshToken))
    }

    /// Enrolls and verifies a TOTP factor for `member`.
    func enrollFactor(_ member: inout Member) async throws {
        let token = member.accessToken
        let enrolment = try await harness.handle(makeRequest(.mfaEnroll) { $0.accessToken = token })
        let uri = try #require(enrolment?.result.mfa?.otpauthURI)
        let code = try await totp(uri)
        let verified = try await harness.handle(
            makeRequest(.mfaVerify) {
                $0.accessToken = token
                $0.code = code
            })
        #expect(verified?.result.error == nil)
        member.totpURI = uri
        // The code just used is spent: the next sign-in needs the next step's.
        clock.advance(by: 30)
    }

    /// A member (of the default tenant, as every console user) with a factor and a console role
    /// serving `tenant`'s users (ignored for an operator).
    func staff(
        _ email: String, role: AccountAdministration.Role, tenant: String = TenantScope.defaultName
    ) async throws -> Member {
        var member = try await register(email)
        try await enrollFactor(&member)
        // Console roles go only to proven addresses: this member proved theirs.
        _ = try await harness.query(
            "UPDATE identities SET email_verified = true WHERE provider = 'password' AND subject = lower(\(email))")
        let granted = try await harness.store.grantAdminRole(
            email: email, role: role, tenant: tenant, by: "operator", at: clock.now())
        #expect(granted == .granted(member.id))
        return member
    }

    /// The code an authenticator app shows now for `uri` (pyotp).
    func totp(_ uri: String) async throws -> String {
        try await Subprocess.run([
            "python3", "-c", "import pyotp, sys; print(pyotp.parse_uri(sys.argv[1]).at(int(sys.argv[2])))", uri,
            String(Int64(clock.now().timeIntervalSince1970)),
        ]).output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Refreshes a session through the flows: its error code, or nil when it worked.
    func refreshError(_ refreshToken: String, tenant: String? = nil) async throws -> String? {
        let harness = try tenant.map { try #require(tenants[$0]) } ?? harness
        do {
            let outcome = try await harness.handle(makeRequest(.refresh) { $0.refreshToken = refreshToken })
            return outcome?.result.error?.code.rawValue
        } catch let error as LoginError {
            return error.code.rawValue
        }
    }

    /// A password sign-in's error code through the flows, or nil when it worked.
    func passwordError(_ member: Member, tenant: String? = nil) async throws -> String? {
        let harness = try tenant.map { try #require(tenants[$0]) } ?? harness
        do {
            let outcome = try await harness.handle(
                makeRequest(.password) {
                    $0.email = member.email
                    $0.password = member.password
                })
            return outcome?.result.error?.code.rawValue
        } catch let error as LoginError {
            return error.code.rawValue
        }
    }

    func browser() -> ConsoleBrowser { ConsoleBrowser(bed: self) }

    /// The CloudEvents of one type waiting in the outbox, in order.
    func events(type: String) async throws -> [[String: Any]] {
        try await harness.query("SELECT payload FROM outbox ORDER BY seq").compactMap { row in
            let bytes = try row.decode("payload", as: PGBytes.self).bytes
            guard let event = try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any] else { return nil }
            return event["type"] as? String == type ? event : nil
        }
    }
}

/// A browser's part in the console's exchanges: it keeps cookies (as a browser does for a secure
/// site: every `Set-Cookie` the console sends is `Secure; HttpOnly; SameSite=Strict`) and sends
/// forms; no redirect is followed unless asked.
final class ConsoleBrowser: @unchecked Sendable {
    let bed: ConsoleTestBed
    var cookies: [String: String] = [:]
    var client = "203.0.113.9"

    init(bed: ConsoleTestBed) { self.bed = bed }

    struct Page {
        var status: Int
        var headers: [(String, String)]
        var text: String

        var location: String? { headers.first { $0.0 == "Location" }?.1 }
        /// The first form's CSRF token.
        var csrf: String? {
            guard let range = text.range(of: #"name="csrf" value="([^"]*)""#, options: .regularExpression) else {
                return nil
            }
            return String(text[range].dropFirst(#"name="csrf" value=""#.count).dropLast())
        }
        var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] }
    }

    func send(
        _ method: String, _ target: String, form: [String: String]? = nil, body: String? = nil,
        headers: [String: String] = [:]
    ) async -> Page {
        var components = URLComponents(string: "http://console" + target)
        let path = components?.percentEncodedPath ?? target
        var query: [String: String] = [:]
        for item in components?.queryItems ?? [] where query[item.name] == nil { query[item.name] = item.value ?? "" }
        components = nil
        var allHeaders = headers.reduce(into: [String: String]()) { $0[$1.key.lowercased()] = $1.value }
        if !cookies.isEmpty {
            allHeaders["cookie"] = cookies.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(
                separator: "; ")
        }
        var bytes: [UInt8] = []
        if let form {
            allHeaders["content-type"] = "application/x-www-form-urlencoded"
            bytes = Array(
                form.map { "\(Self.encode($0.key))=\(Self.encode($0.value))" }.joined(separator: "&").utf8)
        } else if let body {
            bytes = Array(body.utf8)
        }
        let answer = await bed.console.handle(
            HTTPRequest(
                method: method, path: path.removingPercentEncoding ?? path, query: query, headers: allHeaders,
                body: bytes, client: client))
        for (name, value) in answer.headers where name == "Set-Cookie" {
            let pair = value.split(separator: ";")[0]
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let cookie = String(parts[0])
            if value.contains("Max-Age=0") {
                cookies[cookie] = nil
            } else {
                cookies[cookie] = parts.count > 1 ? String(parts[1]) : ""
            }
        }
        return Page(status: answer.status, headers: answer.headers, text: String(decoding: answer.body, as: UTF8.self))
    }

    static func encode(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
    }

    /// Signs in with the password and the authenticator's code: the last page.
    @discardableResult
    func signIn(_ member: ConsoleTestBed.Member, password: String? = nil, code: String? = nil) async throws -> Page {
        let form = await send("GET", "/admin/sign-in")
        let csrf = try #require(form.csrf)
        let first = await send(
            "POST", "/admin/sign-in",
            form: ["csrf": csrf, "email": member.email, "password": password ?? member.password])
        guard first.status == 303, first.location == "/admin/sign-in/code" else { return first }
        let codeForm = await send("GET", "/admin/sign-in/code")
        let totp: String
        if let code {
            totp = code
        } else {
            totp = try await bed.totp(try #require(member.totpURI))
        }
        return await send("POST", "/admin/sign-in/code", form: ["csrf": try #require(codeForm.csrf), "code": totp])
    }

    /// The CSRF token the API hands a signed-in console user.
    func apiToken() async throws -> String {
        let me = await send("GET", "/admin/api/me")
        return try #require(me.json?["csrf_token"] as? String)
    }
}
