import AuthCrypto
import Foundation
import JOSE
import Messages
import Passwords
import ServiceKit
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// E-mail verification, password reset and change, against PostgreSQL: the code is taken from
/// the event the mail service would consume, opened with the mail service's private key.
@Suite(.requiresDatabase) struct EmailCodeFlowTests {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
    let logs = InMemoryLogHandler()
    let passwords: PasswordService
    let mail: (privateKey: [UInt8], publicKey: [UInt8])

    init() throws {
        passwords = try PasswordService(parameters: fastArgon2, threads: 2)
        mail = try X25519.generateKeyPair()
    }

    func service(codes: Bool = true, configure: (inout WorkerConfiguration) -> Void = { _ in }) async throws
        -> FlowHarness
    {
        let logger = Logger(label: "test", level: .debug, handler: logs)
        let resultsKey = try SecureRandom.bytes(32)
        return try await FlowHarness(clock: clock, passwords: passwords, logger: logger) { [mail] config in
            config.resultsKey = resultsKey
            if codes { config.emailCodes.mailKey = mail.publicKey }
            configure(&config)
        }
    }

    /// The code and link token of the one code event among `events`, opened as the mail service does.
    func secret(in events: [OutboxEvent], type: String) throws -> (
        data: EmailCodeRequestedData, secret: EmailCodeSecret
    ) {
        let matching = events.filter {
            (try? JSONSerialization.jsonObject(with: Data($0.payload)) as? [String: Any])??["type"] as? String == type
        }
        #expect(matching.count == 1, "one \(type) event")
        let event = try MessageCoding.decode(
            CloudEvent<EmailCodeRequestedData>.self, from: try #require(matching.first).payload)
        let opened = try JWE.openECDHES(event.data.sealedSecret, privateKey: mail.privateKey)
        return (event.data, try MessageCoding.decode(EmailCodeSecret.self, from: opened.plaintext))
    }

    func types(_ events: [OutboxEvent]) -> [String] {
        events.compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.payload)) as? [String: Any])??["type"] as? String
        }
    }

    func register(_ harness: FlowHarness, _ email: String, _ password: String = "correct horse battery")
        async throws -> FlowHarness.Outcome
    {
        try #require(
            try await harness.handle(
                makeRequest(.register) {
                    $0.email = email
                    $0.password = password
                }))
    }

    /// `verify_email`, with the registrant's proof (`token` or `password`) a never-verified
    /// address needs.
    func verify(
        _ harness: FlowHarness, email: String? = nil, code: String? = nil, link: String? = nil, token: String? = nil,
        password: String? = nil
    ) async throws -> LoginResultData {
        try #require(
            try await harness.handle(
                makeRequest(.verifyEmail) {
                    $0.email = email
                    $0.code = code
                    $0.linkToken = link
                    $0.accessToken = token
                    $0.password = password
                })
        ).result
    }

    func refusal(_ harness: FlowHarness, _ request: LoginRequest) async throws -> LoginError {
        do {
            let outcome = try await harness.handle(request)
            if let error = outcome?.result.error { return LoginError(error.code, error.message) }
            Issue.record("expected a refusal, got \(String(describing: outcome?.result.status))")
            return LoginError(.internalError, "none")
        } catch let error as LoginError {
            return error
        }
    }

    // MARK: - Verification

    @Test func registrationSendsACodeThatVerifiesTheAddressOnce() async throws {
        let harness = try await service()
        let registered = try await register(harness, "Ada@Example.com")
        #expect(registered.result.user?.emailVerified == false)
        let (data, secret) = try secret(in: registered.events, type: UserEventType.verificationRequested)
        #expect(data.email == "ada@example.com")
        #expect(data.purpose == "verify_email")
        #expect(data.userId == registered.result.user?.id)
        #expect(secret.code.count == 6 && secret.code.allSatisfy(\.isNumber))
        #expect(data.expiresAt == Timestamp.format(clock.now() + 900))
        // Only sealed: the event's JSON names no code, and never the link token.
        let json = String(decoding: try #require(registered.events.last).payload, as: UTF8.self)
        #expect(!json.contains(secret.linkToken) && !json.contains("\"code\""))

        let verified = try await verify(
            harness, email: "ada@example.com", code: secret.code, token: registered.result.session?.accessToken)
        #expect(verified.status == "ok")
        #expect(verified.user?.emailVerified == true)
        #expect(verified.session == nil)
        #expect(try await harness.count("identities", where: "email_verified") == 1)
        #expect(try await harness.count("users", where: "email_verified") == 1)
        #expect(
            try await harness.count("outbox", where: "convert_from(payload, 'UTF8') LIKE '%auth.user.email_verified%'")
                >= 1)

        let again = try await refusal(
            harness,
            makeRequest(.verifyEmail) {
                $0.email = "ada@example.com"
                $0.code = secret.code
            })
        #expect(again.code == .invalidCode, "single use")
    }

    @Test func theLinkTokenVerifiesAndANewerCodeReplacesTheOld() async throws {
        let harness = try await service()
        let registered = try await register(harness, "grace@example.com")
        let first = try secret(in: registered.events, type: UserEventType.verificationRequested).secret
        let token = try #require(registered.result.session?.accessToken)
        let resent = try #require(
            try await harness.handle(makeRequest(.sendVerification) { $0.accessToken = token }))
        #expect(resent.result.status == "ok")
        let second = try secret(in: resent.events, type: UserEventType.verificationRequested).secret
        #expect(second.code != first.code || second.linkToken != first.linkToken)

        let old = try await refusal(harness, makeRequest(.verifyEmail) { $0.linkToken = first.linkToken })
        #expect(old.code == .invalidCode, "the first code stopped working when the second was sent")
        let verified = try await verify(harness, link: second.linkToken, token: token)
        #expect(verified.user?.emailVerified == true)
        // Verified already: nothing more is sent.
        let after = try #require(try await harness.handle(makeRequest(.sendVerification) { $0.accessToken = token }))
        #expect(after.result.status == "ok" && after.events.isEmpty)
    }

    /// Guessing: each wrong code is counted against the code in the database; after five the
    /// code is spent, and even the right one is refused. A guess succeeds with odds of 5 in a
    /// million per code sent, and codes sent are limited per account.
    @Test func wrongGuessesSpendTheCode() async throws {
        let harness = try await service()
        let registered = try await register(harness, "lin@example.com")
        let code = try secret(in: registered.events, type: UserEventType.verificationRequested).secret.code
        let wrong = (0..<5).map { String(format: "%06d", ((Int(code) ?? 0) + 1 + $0 * 7919) % 1_000_000) }
        #expect(!wrong.contains(code))
        for (index, guess) in wrong.enumerated() {
            let result = try await verify(harness, email: "lin@example.com", code: guess)
            #expect(result.status == "error")
            #expect(result.error?.code == .invalidCode)
            #expect(result.error?.field == "data.code")
            #expect(try await harness.count("one_time_codes", where: "attempts = \(index + 1)") == 1, "counted")
        }
        let spent = try await refusal(
            harness,
            makeRequest(.verifyEmail) {
                $0.email = "lin@example.com"
                $0.code = code
            })
        #expect(spent.code == .invalidCode)
        #expect(try await harness.count("users", where: "email_verified") == 0)
    }

    @Test func anExpiredCodeSaysSo() async throws {
        let harness = try await service()
        let registered = try await register(harness, "mae@example.com")
        let code = try secret(in: registered.events, type: UserEventType.verificationRequested).secret.code
        clock.advance(by: 901)
        let expired = try await refusal(
            harness,
            makeRequest(.verifyEmail) {
                $0.email = "mae@example.com"
                $0.code = code
            })
        #expect(expired.code == .codeExpired)
    }

    @Test func codesSentPerAccountAreLimited() async throws {
        let harness = try await service { $0.emailCodes.sendLimit = .init(count: 2, window: 3600) }
        let registered = try await register(harness, "kim@example.com")
        let token = try #require(registered.result.session?.accessToken)
        for _ in 0..<2 {
            let sent = try #require(try await harness.handle(makeRequest(.sendVerification) { $0.accessToken = token }))
            #expect(sent.events.count == 1)
        }
        let refused = try await refusal(harness, makeRequest(.sendVerification) { $0.accessToken = token })
        #expect(refused.code == .tooManyAttempts)
        #expect(refused.retryAfterSeconds == 3600)
    }

    @Test func withoutTheMailKeyTheMethodsAreOff() async throws {
        let harness = try await service(codes: false)
        let registered = try await register(harness, "off@example.com")
        #expect(types(registered.events) == [UserEventType.created], "no code sent")
        let refused = try await refusal(harness, makeRequest(.passwordResetRequest) { $0.email = "off@example.com" })
        #expect(refused.code == .unsupportedMethod)
    }

    // MARK: - Password reset

    @Test func aResetRequestAnswersTheSameWhetherOrNotTheAccountExists() async throws {
        let harness = try await service()
        _ = try await register(harness, "sam@example.com")
        let known = try #require(
            try await harness.handle(makeRequest(.passwordResetRequest, id: "r1") { $0.email = "sam@example.com" }))
        let unknown = try #require(
            try await harness.handle(makeRequest(.passwordResetRequest, id: "r2") { $0.email = "nobody@example.com" }))
        var knownResult = known.result
        knownResult.requestId = "r"
        var unknownResult = unknown.result
        unknownResult.requestId = "r"
        #expect(knownResult == unknownResult)
        #expect(knownResult.user == nil && knownResult.status == "ok")
        #expect(types(known.events) == [UserEventType.passwordResetRequested])
        #expect(unknown.events.isEmpty)
    }

    @Test func aResetSetsThePasswordEndsEverySessionAndSignsIn() async throws {
        let harness = try await service()
        let registered = try await register(harness, "joy@example.com", "old password here")
        // A verified account: the reset keeps it as it is but for the password and sessions.
        let verification = try secret(in: registered.events, type: UserEventType.verificationRequested).secret
        _ = try await verify(harness, link: verification.linkToken, token: registered.result.session?.accessToken)
        let otherDevice = try #require(
            try await harness.handle(
                makeRequest(.password) {
                    $0.email = "joy@example.com"
                    $0.password = "old password here"
                }))
        #expect(otherDevice.result.status == "ok")
        let requested = try #require(
            try await harness.handle(makeRequest(.passwordResetRequest) { $0.email = "joy@example.com" }))
        let code = try secret(in: requested.events, type: UserEventType.passwordResetRequested).secret.code

        let weak = try await refusal(
            harness,
            makeRequest(.passwordReset) {
                $0.email = "joy@example.com"
                $0.code = code
                $0.newPassword = "password"
            })
        #expect(weak.code == .weakPassword)

        let reset = try #require(
            try await harness.handle(
                makeRequest(.passwordReset) {
                    $0.email = "joy@example.com"
                    $0.code = code
                    $0.newPassword = "a brand new secret"
                }))
        #expect(reset.result.status == "ok")
        #expect(reset.result.session != nil)
        #expect(reset.result.user?.emailVerified == true, "the code proved the mailbox")
        let revoked = reset.events.filter {
            (try? MessageCoding.decode(CloudEvent<SessionRevokedData>.self, from: $0.payload))?.data.reason
                == "password_reset"
        }
        #expect(revoked.count == 2, "both earlier sessions ended")
        #expect(types(reset.events).contains(UserEventType.passwordChanged))
        #expect(try await harness.count("sessions", where: "revoked_at IS NULL") == 1)
        #expect(registered.result.session != nil)

        let old = try await refusal(
            harness,
            makeRequest(.password) {
                $0.email = "joy@example.com"
                $0.password = "old password here"
            })
        #expect(old.code == .invalidCredentials)
        let new = try #require(
            try await harness.handle(
                makeRequest(.password) {
                    $0.email = "joy@example.com"
                    $0.password = "a brand new secret"
                }))
        #expect(new.result.status == "ok")
        let reused = try await refusal(
            harness,
            makeRequest(.passwordReset) {
                $0.email = "joy@example.com"
                $0.code = code
                $0.newPassword = "another new secret"
            })
        #expect(reused.code == .invalidCode)
    }

    // MARK: - Password change

    @Test func aChangeNeedsTheCurrentPasswordAndEndsTheOtherSessions() async throws {
        let harness = try await service()
        let registered = try await register(harness, "eve@example.com", "first secret words")
        let token = try #require(registered.result.session?.accessToken)
        _ = try await harness.handle(
            makeRequest(.password) {
                $0.email = "eve@example.com"
                $0.password = "first secret words"
            })
        let wrong = try await refusal(
            harness,
            makeRequest(.changePassword) {
                $0.accessToken = token
                $0.password = "not the password"
                $0.newPassword = "second secret words"
            })
        #expect(wrong.code == .invalidCredentials)

        let changed = try #require(
            try await harness.handle(
                makeRequest(.changePassword) {
                    $0.accessToken = token
                    $0.password = "first secret words"
                    $0.newPassword = "second secret words"
                }))
        #expect(changed.result.status == "ok")
        #expect(changed.result.session == nil, "this session stays; nothing new is issued")
        #expect(types(changed.events).filter { $0 == UserEventType.sessionRevoked }.count == 1)
        #expect(types(changed.events).contains(UserEventType.passwordChanged))
        #expect(try await harness.count("sessions", where: "revoked_at IS NULL") == 1, "only this one is live")
        let introspected = try #require(
            try await harness.handle(makeRequest(.introspect) { $0.accessToken = token }))
        #expect(introspected.result.introspection?.active == true)
        let new = try #require(
            try await harness.handle(
                makeRequest(.password) {
                    $0.email = "eve@example.com"
                    $0.password = "second secret words"
                }))
        #expect(new.result.status == "ok")
    }

    @Test func aChangeCanKeepTheOtherSessions() async throws {
        let harness = try await service { $0.emailCodes.changeEndsOtherSessions = false }
        let registered = try await register(harness, "ivy@example.com", "first secret words")
        _ = try await harness.handle(
            makeRequest(.password) {
                $0.email = "ivy@example.com"
                $0.password = "first secret words"
            })
        let changed = try #require(
            try await harness.handle(
                makeRequest(.changePassword) {
                    $0.accessToken = registered.result.session?.accessToken
                    $0.password = "first secret words"
                    $0.newPassword = "second secret words"
                }))
        #expect(types(changed.events) == [UserEventType.passwordChanged])
        #expect(try await harness.count("sessions", where: "revoked_at IS NULL") == 2)
    }

    // MARK: - Signing in with a code

    @Test func aCodeSignsInAnExistingAccountAndProvesItsAddress() async throws {
        let harness = try await service()
        let registered = try await register(harness, "bo@example.com")
        let verification = try secret(in: registered.events, type: UserEventType.verificationRequested).secret
        _ = try await verify(harness, link: verification.linkToken, token: registered.result.session?.accessToken)
        let requested = try #require(
            try await harness.handle(makeRequest(.emailCodeRequest) { $0.email = "bo@example.com" }))
        #expect(requested.result.status == "ok" && requested.result.user == nil)
        let (data, secret) = try secret(in: requested.events, type: UserEventType.signInRequested)
        #expect(data.userId == registered.result.user?.id)
        #expect(requested.events.first?.key == registered.result.user?.id)
        let signedIn = try #require(
            try await harness.handle(
                makeRequest(.emailCode) {
                    $0.email = "bo@example.com"
                    $0.code = secret.code
                }))
        #expect(signedIn.result.session != nil)
        #expect(signedIn.result.newUser == false)
        #expect(signedIn.result.user?.id == registered.result.user?.id)
        #expect(signedIn.result.user?.emailVerified == true)
        #expect(Set(signedIn.result.user?.providers ?? []) == ["password", "email"])
    }

    @Test func aCodeCreatesAnAccountOnlyWhenSignUpIsAllowed() async throws {
        let closed = try await service()
        let unknown = try #require(
            try await closed.handle(makeRequest(.emailCodeRequest) { $0.email = "new@example.com" }))
        #expect(unknown.result.status == "ok" && unknown.events.isEmpty, "the same answer, nothing sent")

        let open = try await service { $0.emailCodes.signUp = true }
        let requested = try #require(
            try await open.handle(makeRequest(.emailCodeRequest) { $0.email = "new@example.com" }))
        let (data, secret) = try secret(in: requested.events, type: UserEventType.signInRequested)
        #expect(data.userId == nil, "no account yet")
        #expect(requested.events.first?.key == "new@example.com")
        let created = try #require(
            try await open.handle(makeRequest(.emailCode) { $0.linkToken = secret.linkToken }))
        #expect(created.result.newUser == true)
        #expect(created.result.session != nil)
        #expect(created.result.user?.emailVerified == true)
        #expect(types(created.events) == [UserEventType.created])
        #expect(try await open.count("users") == 1)
    }

    @Test func aWorkerThatRequiresVerifiedAddressesWithholdsSessionsUntilVerified() async throws {
        let harness = try await service { $0.accounts.requireVerifiedEmail = true }
        let registered = try await register(harness, "vi@example.com")
        #expect(registered.result.status == "ok")
        #expect(registered.result.session == nil, "no session before the address is proven")
        #expect(registered.result.newUser == true)
        #expect(Set(types(registered.events)) == [UserEventType.created, UserEventType.verificationRequested])
        let code = try secret(in: registered.events, type: UserEventType.verificationRequested).secret.code
        let login = makeRequest(.password) {
            $0.email = "vi@example.com"
            $0.password = "correct horse battery"
        }
        let refused = try #require(try await harness.handle(login))
        #expect(refused.result.error?.code == .emailNotVerified)
        let wrongPassword = try await refusal(
            harness,
            makeRequest(.password) {
                $0.email = "vi@example.com"
                $0.password = "wrong horse battery"
            })
        #expect(wrongPassword.code == .invalidCredentials, "the password is checked first: nothing else leaks")
        _ = try await verify(harness, email: "vi@example.com", code: code, password: "correct horse battery")
        let accepted = try #require(
            try await harness.handle(
                makeRequest(.password) {
                    $0.email = "vi@example.com"
                    $0.password = "correct horse battery"
                }))
        #expect(accepted.result.session != nil)
    }

    // MARK: - Secrets

    /// Neither the code nor the link token is in PostgreSQL in clear (codes as HMACs, link tokens
    /// as SHA-256, events with the secret sealed) or in any log line.
    @Test func noCodeOrLinkTokenIsStoredOrLogged() async throws {
        let harness = try await service()
        let registered = try await register(harness, "zoe@example.com")
        let secret = try secret(in: registered.events, type: UserEventType.verificationRequested).secret
        _ = try await verify(
            harness, email: "zoe@example.com", code: secret.code, token: registered.result.session?.accessToken)
        let dump = try await harness.query(
            """
            SELECT (SELECT string_agg(t::text, ' ') FROM one_time_codes t) AS codes,
                   (SELECT string_agg(convert_from(payload, 'UTF8'), ' ') FROM outbox) AS events,
                   (SELECT string_agg(t::text, ' ') FROM processed_requests t) AS requests
            """)
        let text = try [dump.first?.decode("codes", as: String?.self), dump.first?.decode("events", as: String?.self)]
            .compactMap { $0 }.joined(separator: " ")
        #expect(!text.isEmpty)
        #expect(!text.contains(secret.linkToken))
        #expect(!text.contains("\"code\":\"\(secret.code)\""))
        #expect(!logs.lines.contains { $0.contains(secret.linkToken) || $0.contains(secret.code) })
        #expect(!makeRequest(.verifyEmail) { $0.code = secret.code }.data.description.contains(secret.code))
    }
}
