import AuthCrypto
import Foundation
import JOSE
import JOSEFixtures
import Messages
import PGStore
import Passwords
import ServiceKit
import Testing

@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// Two tenants in one database, each request written as the pipeline writes it (`FlowHarness`):
/// the default tenant's and `acme`'s, the same providers and settings (each tenant's own come
/// with its configuration). The same identity, address or request id in both is two of each; a
/// token, code or session of one is unknown to the other and is left as it was.
@Suite(.requiresDatabase) struct TenantIsolationTests {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
    let logs = InMemoryLogHandler()
    let passwords: PasswordService
    let mailKey: [UInt8]
    let resultsKey: [UInt8]

    init() throws {
        passwords = try PasswordService(parameters: fastArgon2, threads: 2)
        mailKey = try X25519.generateKeyPair().publicKey
        resultsKey = try SecureRandom.bytes(32)
    }

    /// The default tenant's harness and `acme`'s, on one database.
    func tenants() async throws -> (main: FlowHarness, acme: FlowHarness) {
        let main = try await harness(tenant: TenantScope.defaultName, databaseURL: nil)
        return (main, try await harness(tenant: "acme", databaseURL: main.databaseURL))
    }

    func harness(
        tenant: String, databaseURL: String?, configure: @escaping (inout WorkerConfiguration) -> Void = { _ in }
    ) async throws -> FlowHarness {
        let logger = Logger(label: "test", level: .debug, handler: logs)
        let keys = KeySetCache(
            fixed: try JWKSet(json: TestSigner.keySet([Signers.rsa2048])), clock: clock, logger: logger)
        let apple = IdentityProvider(
            configuration: .apple(audiences: ["com.example.app"], keysURL: URL(fileURLWithPath: "/unused")),
            keySet: keys, clock: clock)
        return try await FlowHarness(
            clock: clock, providers: IdentityProviders([apple]), passwords: passwords, logger: logger,
            databaseURL: databaseURL, tenant: tenant
        ) { [mailKey, resultsKey] config in
            config.accounts.throttle.threshold = 3
            config.accounts.throttle.baseDelay = 60
            config.resultsKey = resultsKey
            config.emailCodes.mailKey = mailKey
            config.emailCodes.signUp = true
            config.passkeys.rpID = "example.com"
            config.passkeys.rpName = "Example"
            configure(&config)
        }
    }

    func request(_ method: LoginMethod, id: String = UUID().uuidString, _ fill: (inout LoginRequestData) -> Void)
        -> LoginRequest
    {
        var data = LoginRequestData(method: method.rawValue)
        fill(&data)
        return LoginRequest(id: id, source: "/test", time: nil, traceparent: nil, method: method, data: data)
    }

    func apple(_ sub: String, id: String = UUID().uuidString) -> LoginRequest {
        let token = Signers.rsa2048.token(
            [
                "iss": "https://appleid.apple.com", "aud": "com.example.app", "sub": sub, "iat": 1_795_953_590,
                "exp": 1_795_953_600 + 600, "email": "same@example.com", "email_verified": "true",
            ], algorithm: .rs256)
        return request(.apple, id: id) { $0.identityToken = token }
    }

    func signedIn(_ harness: FlowHarness, _ request: LoginRequest) async throws -> LoginResultData {
        let outcome = try #require(try await harness.handle(request))
        #expect(outcome.result.status == "ok", "\(String(describing: outcome.result.error))")
        return outcome.result
    }

    @Test func theSameAppleUserInTwoTenantsIsTwoAccounts() async throws {
        let (main, acme) = try await tenants()
        let first = try await signedIn(main, apple("001.same"))
        let other = try await signedIn(acme, apple("001.same"))
        #expect(first.newUser == true && other.newUser == true)
        let firstUser = try #require(first.user?.id)
        let otherUser = try #require(other.user?.id)
        #expect(firstUser != otherUser)
        // Each signs in again to its own.
        #expect(try await signedIn(acme, apple("001.same")).user?.id == otherUser)
        #expect(try await signedIn(main, apple("001.same")).user?.id == firstUser)
        #expect(try await main.count("users", where: "tenant = 'acme'") == 1)
        #expect(try await main.count("users", where: "tenant = 'default'") == 1)
        #expect(try await main.count("identities", where: "subject = '001.same' AND tenant = 'acme'") == 1)
        // Each tenant's events name its own user only.
        let acmeEvents = try #require(try await acme.handle(apple("002.acme-only")))
        #expect(!acmeEvents.events.isEmpty)
        let payloads = acmeEvents.events.map { String(decoding: $0.payload, as: UTF8.self) }
        #expect(!payloads.contains { $0.contains(firstUser) })
        // Each names its tenant; the default tenant's name none, as before tenants.
        for event in acmeEvents.events {
            let envelope = try JSONSerialization.jsonObject(with: Data(event.payload)) as? [String: Any]
            #expect(envelope?["tenant"] as? String == "acme")
        }
        let mainEvents = try #require(try await main.handle(apple("002.main-only"))).events
        #expect(!mainEvents.isEmpty)
        for event in mainEvents {
            let envelope = try JSONSerialization.jsonObject(with: Data(event.payload)) as? [String: Any]
            #expect(envelope?["tenant"] == nil)
        }
    }

    @Test func aTenantsTokensAreUnknownToAnotherAndLeftAsTheyWere() async throws {
        let (main, acme) = try await tenants()
        let session = try #require(try await signedIn(main, apple("001.tokens")).session)
        await #expect(throws: LoginError(.invalidRefreshToken, "")) {
            try await acme.handle(request(.refresh) { $0.refreshToken = session.refreshToken })
        }
        let introspection = try #require(
            try await acme.handle(request(.introspect) { $0.accessToken = session.accessToken }))
        #expect(introspection.result.introspection?.active == false)
        _ = try? await acme.handle(request(.logout) { $0.accessToken = session.accessToken })
        await #expect(throws: LoginError(.invalidToken, "")) {
            try await acme.handle(request(.apple) { $0.linkTo = session.accessToken })
        }
        // The default tenant's session was not touched: its token was not rotated, not revoked.
        #expect(try await main.count("sessions", where: "revoked_at IS NOT NULL") == 0)
        #expect(try await main.count("refresh_tokens", where: "used_at IS NOT NULL") == 0)
        let refreshed = try await signedIn(main, request(.refresh) { $0.refreshToken = session.refreshToken })
        #expect(refreshed.session?.refreshToken != nil)
        let live = try #require(try await main.handle(request(.introspect) { $0.accessToken = session.accessToken }))
        #expect(live.result.introspection?.active == true)
    }

    /// Every method that acts on a session by its access token, given the default tenant's at
    /// acme: answered as a token acme never issued is (`invalid_token`; the two that ask for the
    /// password too say `invalid_credentials` either way), and the default tenant's account,
    /// sessions, factor, passkeys, events and audit trail are as they were.
    @Test func everyMethodGivenAnotherTenantsAccessTokenIsRefusedAndLeavesNothingBehind() async throws {
        let (main, acme) = try await tenants()
        let registered = try await signedIn(
            main,
            request(.register) {
                $0.email = "tokens@example.com"
                $0.password = "correct horse battery"
            })
        let session = try #require(registered.session)
        let sessionID = try #require(
            try await main.query("SELECT id FROM sessions").first?.decode("id", as: UUID.self))
        let counts = { (harness: FlowHarness) in
            [
                try await harness.count("users", where: "true"),
                try await harness.count("sessions", where: "revoked_at IS NULL"),
                try await harness.count("refresh_tokens", where: "used_at IS NULL"),
                try await harness.count("mfa_factors", where: "true"),
                try await harness.count("passkeys", where: "true"), try await harness.count("outbox", where: "true"),
                try await harness.count("one_time_codes", where: "true"),
                try await harness.count("audit_log", where: "user_id IS NOT NULL"),
                try await harness.count("webauthn_challenges", where: "true"),
            ]
        }
        let before = try await counts(main)
        let passkey = UUID().uuidString.lowercased()
        // An export's answer is sealed to the gateway's key.
        let replyKey = Base64URL.encode(try X25519.generateKeyPair().publicKey)
        let methods: [(LoginMethod, (inout LoginRequestData) -> Void)] = [
            (.logout, { _ in }), (.sendVerification, { _ in }),
            (
                .changePassword,
                {
                    $0.password = "correct horse battery"
                    $0.newPassword = "another horse battery staple"
                }
            ),
            (.mfaEnroll, { _ in }), (.mfaVerify, { $0.code = "123456" }), (.mfaRemove, { $0.code = "123456" }),
            (.sessionsList, { _ in }), (.sessionRevoke, { $0.sessionID = sessionID.uuidString.lowercased() }),
            (.accountExport, { $0.replyKey = replyKey }), (.accountDelete, { $0.password = "correct horse battery" }),
            (.passkeyRegisterOptions, { _ in }), (.passkeyList, { _ in }),
            (
                .passkeyRename,
                {
                    $0.passkeyID = passkey
                    $0.name = "Renamed"
                }
            ),
            (.passkeyRemove, { $0.passkeyID = passkey }),
        ]
        func answer(_ method: LoginMethod, token: String, _ fill: (inout LoginRequestData) -> Void) async throws
            -> String
        {
            do {
                let outcome = try await acme.handle(
                    request(method) {
                        $0.accessToken = token
                        fill(&$0)
                    })
                return outcome?.result.error?.code.rawValue ?? "ok"
            } catch let error as LoginError {
                return error.code.rawValue
            }
        }
        // A token of the same shape that acme never issued.
        let forged = String(session.accessToken.dropLast(4)) + (session.accessToken.hasSuffix("AAAA") ? "BBBB" : "AAAA")
        for (method, fill) in methods {
            let crossed = try await answer(method, token: session.accessToken, fill)
            let unknown = try await answer(method, token: forged, fill)
            #expect(crossed == unknown, "\(method): \(crossed), an unknown token: \(unknown)")
            #expect(["invalid_token", "invalid_credentials"].contains(crossed), "\(method): \(crossed)")
        }
        let after = try await counts(main)
        #expect(after == before, "nothing written anywhere: \(before) → \(after)")
        // And the token is as good as before at its own tenant.
        let live = try #require(try await main.handle(request(.introspect) { $0.accessToken = session.accessToken }))
        #expect(live.result.introspection?.active == true)
    }

    /// Each tenant's password rules are its own: acme's context words refuse a password built on
    /// its brand at acme, and the default tenant takes it.
    @Test func aTenantsPasswordContextWordsAreItsOwn() async throws {
        let main = try await harness(tenant: TenantScope.defaultName, databaseURL: nil)
        let acme = try await harness(tenant: "acme", databaseURL: main.databaseURL) {
            $0.accounts.passwordContextWords = ["Acmecorp"]
        }
        func register(_ password: String) -> LoginRequest {
            request(.register) {
                $0.email = "pat@example.com"
                $0.password = password
            }
        }
        await #expect(throws: LoginError(.weakPassword, "")) { try await acme.handle(register("Acmecorp2026!")) }
        #expect(try await signedIn(main, register("Acmecorp2026!")).user != nil)
        #expect(try await signedIn(acme, register("acmecorp is my favourite")).user != nil)
    }

    @Test func aRequestIDIsEachTenantsOwn() async throws {
        let (main, acme) = try await tenants()
        let first = try await signedIn(main, request(.guest, id: "shared-id") { _ in })
        let other = try await signedIn(acme, request(.guest, id: "shared-id") { _ in })
        #expect(first.user?.id != other.user?.id, "the second is a new request of its tenant, not a replay")
        #expect(try await main.count("processed_requests", where: "request_id = 'shared-id'") == 2)
        // Each is a replay within its own tenant.
        #expect(try await acme.handle(request(.guest, id: "shared-id") { _ in }) == nil)
        #expect(try await main.handle(request(.guest, id: "shared-id") { _ in }) == nil)
    }

    @Test func anAddressAndItsPasswordAreEachTenantsOwn() async throws {
        let (main, acme) = try await tenants()
        let register = { (password: String) in
            self.request(.register) {
                $0.email = "ada@example.com"
                $0.password = password
            }
        }
        let login = { (password: String) in
            self.request(.password) {
                $0.email = "ada@example.com"
                $0.password = password
            }
        }
        let mainUser = try await signedIn(main, register("correct horse battery")).user?.id
        let acmeUser = try await signedIn(acme, register("other staple tenant")).user?.id
        #expect(mainUser != nil && acmeUser != nil && mainUser != acmeUser)
        #expect(try await signedIn(acme, login("other staple tenant")).user?.id == acmeUser)
        #expect(try await signedIn(main, login("correct horse battery")).user?.id == mainUser)
        // One tenant's password does not open the other's account, and its failures lock only its own.
        for _ in 0..<3 {
            await #expect(throws: LoginError(.invalidCredentials, "")) {
                try await acme.handle(login("correct horse battery"))
            }
        }
        await #expect(throws: LoginError(.tooManyAttempts, "")) { try await acme.handle(login("other staple tenant")) }
        #expect(try await signedIn(main, login("correct horse battery")).user?.id == mainUser)
        #expect(try await main.count("login_throttle", where: "account_key = '@acme/password:ada@example.com'") == 1)
    }

    @Test func anEmailCodeIsEachTenantsOwn() async throws {
        let (main, acme) = try await tenants()
        let ask = request(.emailCodeRequest) { $0.email = "grace@example.com" }
        _ = try #require(try await main.handle(ask))
        let stored = try #require(
            try await main.query("SELECT tenant FROM one_time_codes WHERE email = 'grace@example.com'").first)
        #expect(try stored.decode("tenant", as: String.self) == "default")
        // The code sent for the default tenant is no live code of acme's: any code is refused there.
        await #expect(throws: LoginError.self) {
            try await acme.handle(
                request(.emailCode) {
                    $0.email = "grace@example.com"
                    $0.code = "000000"
                })
        }
        #expect(try await main.count("one_time_codes", where: "attempts > 0") == 0, "acme's guess counted nothing")
    }

    /// What the console and the operator's commands read is one tenant's: another tenant's users
    /// are neither listed, found, shown nor purged there.
    @Test func theConsoleAndTheOperatorsCommandsSeeOneTenantAtATime() async throws {
        let (main, acme) = try await tenants()
        let acmeUser = try #require(try await signedIn(acme, apple("001.console")).user?.id)
        let mainUser = try #require(try await signedIn(main, apple("001.console")).user?.id)
        let acmeGuest = try #require(try await signedIn(acme, request(.guest) { _ in }).user?.id)
        let ids = { (users: [PostgresStore.UserSummary]) in users.map { $0.id.lowercasedString } }
        let store = main.store
        let listed = ids(try await store.searchUsers("", tenant: "default", offset: 0, limit: 50).users)
        #expect(listed.contains(mainUser) && !listed.contains(acmeUser) && !listed.contains(acmeGuest))
        for query in [acmeUser, "same", "same@example.com", "001.console"] {
            let found = ids(try await store.searchUsers(query, tenant: "default", offset: 0, limit: 50).users)
            #expect(!found.contains(acmeUser), "\(query)")
        }
        #expect(
            ids(try await store.searchUsers("001.console", tenant: "default", offset: 0, limit: 50).users) == [mainUser]
        )
        #expect(
            try await store.userDetails(try #require(UUID(uuidString: acmeUser)), tenant: "default", at: clock.now())
                == nil)
        #expect(try await store.userReport(acmeUser, tenant: "default") == nil)
        #expect(try await store.userReport("same@example.com", tenant: "default")?.userID?.lowercasedString == mainUser)
        clock.advance(by: 86_400)
        #expect(
            try await store.staleGuests(createdBefore: clock.now(), limit: 10, tenant: "default").isEmpty,
            "acme's guest is acme's")
        // And acme's, asked as acme's.
        #expect(
            ids(try await store.searchUsers("001.console", tenant: "acme", offset: 0, limit: 50).users) == [acmeUser])
        #expect(try await store.userReport(acmeUser, tenant: "acme")?.userID?.lowercasedString == acmeUser)
        #expect(try await store.userReport(mainUser, tenant: "acme") == nil)
        let guests = try await store.staleGuests(createdBefore: clock.now(), limit: 10, tenant: "acme")
        #expect(guests.map(\.lowercasedString) == [acmeGuest])
        // An operator (no tenant) finds either by id; its page names the tenant.
        let acmeID = try #require(UUID(uuidString: acmeUser))
        #expect(try await store.userDetails(acmeID, tenant: nil, at: clock.now())?.user.tenant == "acme")
        #expect(try await store.tenant(ofUser: acmeID, within: nil) == "acme")
        #expect(try await store.tenant(ofUser: acmeID, within: "default") == nil)
    }
}
