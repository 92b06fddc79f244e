import AuthCrypto
import Foundation
import JOSE
import JOSEFixtures
import Messages
import PGStore
import Passwords
import ServiceKit
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// The attacks of the third round's security review, each as it was made against the running
/// worker, through the flows and PostgreSQL: every test here failed on the code it reviewed.
@Suite(.requiresDatabase, .requiresIndependentJOSE) struct SecurityReviewTests {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
    let logs = InMemoryLogHandler()
    let passwords: PasswordService
    let keyPath: String
    let mail: (privateKey: [UInt8], publicKey: [UInt8])

    init() throws {
        passwords = try PasswordService(parameters: fastArgon2, threads: 2)
        keyPath = try TestKeys.temporaryKeyFile().path
        mail = try X25519.generateKeyPair()
    }

    func service(configure: (inout WorkerConfiguration) -> Void = { _ in }) async throws -> FlowHarness {
        let logger = Logger(label: "test", level: .debug, handler: logs)
        let keys = KeySetCache(
            fixed: try JWKSet(json: TestSigner.keySet([Signers.rsa2048])), clock: clock, logger: logger)
        let apple = IdentityProvider(
            configuration: .apple(audiences: ["com.example.app"], keysURL: URL(fileURLWithPath: "/unused")),
            keySet: keys, clock: clock)
        let resultsKey = try SecureRandom.bytes(32)
        return try await FlowHarness(
            clock: clock, providers: IdentityProviders([apple]), passwords: passwords, logger: logger
        ) { [keyPath, mail] config in
            config.accessTokenFormat = .jwt
            config.signingKeyPaths = [keyPath]
            config.resultsKey = resultsKey
            config.emailCodes.mailKey = mail.publicKey
            config.mfa.issuer = "Example App"
            configure(&config)
        }
    }

    // MARK: - Helpers

    func handle(_ harness: FlowHarness, _ method: LoginMethod, _ fill: (inout LoginRequestData) -> Void) async throws
        -> FlowHarness.Outcome
    {
        try #require(try await harness.handle(makeRequest(method, fill)))
    }

    /// The error a request is answered with, thrown (nothing written) or answered (a counted guess).
    func refusal(_ harness: FlowHarness, _ method: LoginMethod, _ fill: (inout LoginRequestData) -> Void) async throws
        -> ErrorPayload
    {
        do {
            let outcome = try await harness.handle(makeRequest(method, fill))
            if let error = outcome?.result.error { return error }
            Issue.record("expected a refusal, got \(String(describing: outcome?.result.status))")
        } catch let error as LoginError {
            return error.payload
        }
        return LoginError(.internalError, "none").payload
    }

    /// The code and link token of the one code event of `type` among `events`, as the mail service opens them.
    func codeSecret(_ events: [OutboxEvent], _ type: String) throws -> EmailCodeSecret {
        let event = try #require(
            events.first {
                (try? MessageCoding.decode(CloudEvent<EmailCodeRequestedData>.self, from: $0.payload))?.type == type
            })
        let data = try MessageCoding.decode(CloudEvent<EmailCodeRequestedData>.self, from: event.payload).data
        return try MessageCoding.decode(
            EmailCodeSecret.self, from: try JWE.openECDHES(data.sealedSecret, privateKey: mail.privateKey).plaintext)
    }

    func types(_ events: [OutboxEvent]) -> [String] {
        events.compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.payload)) as? [String: Any])??["type"] as? String
        }
    }

    /// The reasons of the `auth.session.revoked` events among `events`.
    func revocations(_ events: [OutboxEvent]) -> [String] {
        events.compactMap {
            (try? MessageCoding.decode(CloudEvent<SessionRevokedData>.self, from: $0.payload))?.data.reason
        }
    }

    /// pyotp's code for `uri` at `date`, as an authenticator app makes it.
    func appCode(uri: String, at date: Date) async throws -> String {
        let outcome = try await Subprocess.run([
            "python3", "-c",
            "import pyotp, sys; print(pyotp.parse_uri(sys.argv[1]).at(int(sys.argv[2])))", uri,
            String(Int64(date.timeIntervalSince1970)),
        ])
        #expect(outcome.status == 0, "\(outcome.output)")
        return outcome.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Registers `email` with `password`: the registration's outcome.
    func register(_ harness: FlowHarness, _ email: String, _ password: String) async throws -> FlowHarness.Outcome {
        try await handle(harness, .register) {
            $0.email = email
            $0.password = password
        }
    }

    /// Enrols and activates a TOTP factor with a fresh session's token: the URI the app scanned.
    func enrol(_ harness: FlowHarness, token: String) async throws -> String {
        let enrolment = try await handle(harness, .mfaEnroll) { $0.accessToken = token }
        let uri = try #require(enrolment.result.mfa?.otpauthURI)
        let code = try await appCode(uri: uri, at: clock.now())
        let verified = try await handle(harness, .mfaVerify) {
            $0.accessToken = token
            $0.code = code
        }
        #expect(verified.result.mfa?.recoveryCodes?.count == 10)
        clock.advance(by: 30)
        return uri
    }

    func passwordLogin(_ harness: FlowHarness, _ email: String, _ password: String) async throws -> ErrorPayload? {
        do {
            return try await harness.handle(
                makeRequest(.password) {
                    $0.email = email
                    $0.password = password
                })?.result.error
        } catch let error as LoginError {
            return error.payload
        }
    }

    // MARK: - 1. Pre-registration takeover

    /// An attacker registers the victim's address with a password of their own, keeps the session
    /// and even adds a second factor. The owner signs in with an e-mail code: the same user id,
    /// but every way the attacker had in is gone.
    @Test func aCodeSignInClaimsAnAccountSomebodyElseRegistered() async throws {
        let harness = try await service()
        let attacker = try await register(harness, "victim@example.com", "attacker's own password")
        let attackerSession = try #require(attacker.result.session)
        _ = try await enrol(harness, token: attackerSession.accessToken)

        let requested = try await handle(harness, .emailCodeRequest) { $0.email = "victim@example.com" }
        let code = try codeSecret(requested.events, UserEventType.signInRequested).code
        let owner = try await handle(harness, .emailCode) {
            $0.email = "victim@example.com"
            $0.code = code
        }
        #expect(owner.result.status == "ok", "the attacker's factor is no gate for the mailbox's owner")
        #expect(owner.result.session != nil)
        #expect(owner.result.user?.id == attacker.result.user?.id, "the same account, claimed")
        #expect(owner.result.user?.providers == ["email"], "the unproven password is no way in")
        #expect(revocations(owner.events) == ["account_claimed"])
        #expect(types(owner.events).contains(UserEventType.mfaDisabled))
        #expect(try await harness.count("mfa_factors") == 0)

        let refresh = try await refusal(harness, .refresh) { $0.refreshToken = attackerSession.refreshToken }
        #expect(refresh.code == .invalidRefreshToken, "the attacker's session ended")
        let login = try await passwordLogin(harness, "victim@example.com", "attacker's own password")
        #expect(login?.code == .invalidCredentials, "the attacker's password was dropped")
        let introspected = try await handle(harness, .introspect) { $0.accessToken = attackerSession.accessToken }
        #expect(introspected.result.introspection?.active == false)
    }

    /// Clicking a verification link is no sign-in: without the registrant's proof beside it
    /// (their access token or password) a never-verified account is not confirmed, and the code
    /// stays good for its registrant.
    @Test func aClickedLinkDoesNotConfirmSomebodyElsesRegistration() async throws {
        let harness = try await service()
        let registered = try await register(harness, "clicker@example.com", "registrant's password")
        let link = try codeSecret(registered.events, UserEventType.verificationRequested).linkToken
        let clicked = try await refusal(harness, .verifyEmail) { $0.linkToken = link }
        #expect(clicked.code == .reauthenticationRequired)
        #expect(clicked.field == "data.password")
        #expect(try await harness.count("users", where: "email_verified") == 0)
        let wrong = try await refusal(harness, .verifyEmail) {
            $0.linkToken = link
            $0.email = "clicker@example.com"
            $0.password = "somebody's guess"
        }
        #expect(wrong.code == .invalidCredentials)
        let noAddress = try await refusal(harness, .verifyEmail) {
            $0.linkToken = link
            $0.password = "registrant's password"
        }
        #expect(noAddress.code == .malformedRequest && noAddress.field == "data.email")
        let verified = try await handle(harness, .verifyEmail) {
            $0.linkToken = link
            $0.email = "clicker@example.com"
            $0.password = "registrant's password"
        }
        #expect(verified.result.user?.emailVerified == true)
        #expect(revocations(verified.events).isEmpty, "the registrant keeps their sessions")
        #expect(try await passwordLogin(harness, "clicker@example.com", "registrant's password") == nil)
    }

    @Test func aPasswordResetClaimsANeverVerifiedAccount() async throws {
        let harness = try await service()
        let attacker = try await register(harness, "reset@example.com", "attacker's own password")
        _ = try await enrol(harness, token: try #require(attacker.result.session?.accessToken))
        let requested = try await handle(harness, .passwordResetRequest) { $0.email = "reset@example.com" }
        let code = try codeSecret(requested.events, UserEventType.passwordResetRequested).code
        let reset = try await handle(harness, .passwordReset) {
            $0.email = "reset@example.com"
            $0.code = code
            $0.newPassword = "the owner's new password"
        }
        #expect(reset.result.session != nil, "no factor of the attacker's stops the owner")
        #expect(reset.result.user?.id == attacker.result.user?.id)
        #expect(revocations(reset.events) == ["account_claimed"])
        #expect(try await harness.count("mfa_factors") == 0)
        #expect(
            try await passwordLogin(harness, "reset@example.com", "attacker's own password")?.code
                == .invalidCredentials)
        #expect(try await passwordLogin(harness, "reset@example.com", "the owner's new password") == nil)
    }

    /// An address added without proof to an account that is somebody else's (its own address is
    /// another): the mailbox's owner does not enter that account; the unproven identity is taken
    /// off it instead, and the owner gets an account of their own.
    @Test func anUnprovenExtraAddressIsTakenOffInsteadOfMerged() async throws {
        let harness = try await service { $0.emailCodes.signUp = true }
        let attacker = try await handle(harness, .apple) {
            $0.identityToken = Signers.rsa2048.token(
                [
                    "iss": "https://appleid.apple.com", "aud": "com.example.app", "sub": "attacker.apple",
                    "iat": 1_795_953_590, "exp": 1_795_953_600 + 600, "email": "attacker@example.net",
                    "email_verified": "true",
                ], algorithm: .rs256)
        }
        let linked = try await handle(harness, .register) {
            $0.email = "extra@example.com"
            $0.password = "attacker's own password"
            $0.linkTo = attacker.result.session?.accessToken
        }
        #expect(linked.result.user?.id == attacker.result.user?.id)

        let requested = try await handle(harness, .emailCodeRequest) { $0.email = "extra@example.com" }
        let sent = try MessageCoding.decode(
            CloudEvent<EmailCodeRequestedData>.self, from: try #require(requested.events.first).payload)
        #expect(sent.data.userId == nil, "the attacker's account is not the address's")
        let code = try codeSecret(requested.events, UserEventType.signInRequested).code
        let owner = try await handle(harness, .emailCode) {
            $0.email = "extra@example.com"
            $0.code = code
        }
        #expect(owner.result.newUser == true)
        #expect(owner.result.user?.id != attacker.result.user?.id)
        #expect(types(owner.events).contains(UserEventType.identityUnlinked))
        #expect(
            try await passwordLogin(harness, "extra@example.com", "attacker's own password")?.code
                == .invalidCredentials)
    }

    // MARK: - 2. The second factor on auto-linking

    @Test func aNewlyLinkedIdentityStillMeetsTheSecondFactor() async throws {
        let harness = try await service { $0.accounts.linkByVerifiedEmail = true }
        let member = try await register(harness, "ada@example.com", "correct horse battery")
        let token = try #require(member.result.session?.accessToken)
        let link = try codeSecret(member.events, UserEventType.verificationRequested).linkToken
        _ = try await handle(harness, .verifyEmail) {
            $0.linkToken = link
            $0.accessToken = token
        }
        let uri = try await enrol(harness, token: token)
        let apple = try await handle(harness, .apple) {
            $0.identityToken = Signers.rsa2048.token(
                [
                    "iss": "https://appleid.apple.com", "aud": "com.example.app", "sub": "new.apple.subject",
                    "iat": 1_795_953_590, "exp": 1_795_953_600 + 600, "email": "ada@example.com",
                    "email_verified": "true",
                ], algorithm: .rs256)
        }
        #expect(apple.result.error?.code == .mfaRequired, "not a full session without the factor")
        #expect(apple.result.session == nil)
        #expect(types(apple.events) == [UserEventType.identityLinked])
        let ticket = try #require(apple.result.error?.mfaToken)
        let code = try await appCode(uri: uri, at: clock.now())
        let finished = try await handle(harness, .mfaChallenge) {
            $0.mfaToken = ticket
            $0.code = code
        }
        #expect(finished.result.user?.id == member.result.user?.id)
        #expect(finished.result.session != nil)
    }

    // MARK: - 5. Enumeration through code answers

    @Test(arguments: [LoginMethod.passwordReset, .emailCode])
    func wrongCodesAreAnsweredAlikeForEveryAddress(method: LoginMethod) async throws {
        let harness = try await service()
        _ = try await register(harness, "known@example.com", "correct horse battery")
        let request: LoginMethod = method == .passwordReset ? .passwordResetRequest : .emailCodeRequest
        _ = try await handle(harness, request) { $0.email = "known@example.com" }
        func guess(_ email: String) async throws -> ErrorPayload {
            try await refusal(harness, method) {
                $0.email = email
                $0.code = "000001"
                $0.newPassword = method == .passwordReset ? "a brand new secret" : nil
            }
        }
        let known = try await guess("known@example.com")
        let unknown = try await guess("unknown@example.com")
        #expect(known.code == .invalidCode)
        #expect(known == unknown, "the same code, message and field whether or not a live code exists")
        // Spent by guesses: still the same answer.
        for _ in 0..<5 { _ = try await guess("known@example.com") }
        #expect(try await guess("known@example.com") == unknown)
        // Expired: said only to whoever shows the code itself.
        clock.advance(by: 901)
        #expect(try await guess("known@example.com") == unknown)
    }

    // MARK: - 7. mfa_token sealed and single-use

    @Test func anMFATokenIsSealedToTheReplyKeyAndFinishesOneSignIn() async throws {
        let harness = try await service()
        let member = try await register(harness, "one@example.com", "correct horse battery")
        let uri = try await enrol(harness, token: try #require(member.result.session?.accessToken))
        let gateway = try X25519.generateKeyPair()
        let stopped = try await handle(harness, .password) {
            $0.email = "one@example.com"
            $0.password = "correct horse battery"
            $0.replyKey = Base64URL.encode(gateway.publicKey)
        }
        let error = try #require(stopped.result.error)
        #expect(error.code == .mfaRequired)
        #expect(error.mfaToken == nil, "never in clear on the results topic")
        let sealed = try #require(error.sealedMFAToken)
        let ticket = String(
            decoding: try JWE.openECDHES(sealed, privateKey: gateway.privateKey).plaintext, as: UTF8.self)
        #expect(ticket.hasPrefix("mt_"))
        // The sealed token opens with any JOSE library (jwcrypto here).
        let script = """
            import sys
            from jwcrypto import jwk, jwe
            d, x, token = sys.stdin.read().split()
            obj = jwe.JWE()
            obj.deserialize(token, key=jwk.JWK(kty='OKP', crv='X25519', d=d, x=x))
            print(obj.payload.decode())
            """
        let input = [Base64URL.encode(gateway.privateKey), Base64URL.encode(gateway.publicKey), sealed]
        #expect(try await IndependentJOSE.run(script, input: input.joined(separator: " ")) == ticket)
        let code = try await appCode(uri: uri, at: clock.now())
        let first = try await handle(harness, .mfaChallenge) {
            $0.mfaToken = ticket
            $0.code = code
        }
        #expect(first.result.session != nil)
        clock.advance(by: 30)
        let again = try await refusal(harness, .mfaChallenge) {
            $0.mfaToken = ticket
            $0.recoveryCode = "aaaa-bbbb-cccc"
        }
        #expect(again.code == .invalidToken, "one mfa_token, one session")
        #expect(try await harness.count("sessions", where: "revoked_at IS NULL") == 2)
    }

    // MARK: - 8. Wrong TOTP codes escalate

    @Test func wrongFactorCodesLockForLongerEachTimeAndSaySo() async throws {
        let harness = try await service()
        let member = try await register(harness, "lock@example.com", "correct horse battery")
        _ = try await enrol(harness, token: try #require(member.result.session?.accessToken))
        var expectedLocks: [(lockouts: Int, wait: Int64)] = []
        for round in 1...3 {
            let ticket = try #require(
                try await handle(harness, .password) {
                    $0.email = "lock@example.com"
                    $0.password = "correct horse battery"
                }.result.error?.mfaToken)
            var events: [OutboxEvent] = []
            for guess in 0..<5 {
                let outcome = try #require(
                    try await harness.handle(
                        makeRequest(.mfaChallenge) {
                            $0.mfaToken = ticket
                            $0.code = String(format: "%06d", 100_000 + round * 10 + guess)
                        }))
                #expect(outcome.result.error?.code == .invalidCode)
                events += outcome.events
            }
            let locked = try #require(
                events.compactMap { try? MessageCoding.decode(CloudEvent<MFALockedData>.self, from: $0.payload) }
                    .first { $0.type == UserEventType.mfaLocked })
            let limited = try await refusal(harness, .mfaChallenge) {
                $0.mfaToken = ticket
                $0.code = "999999"
            }
            #expect(limited.code == .tooManyAttempts)
            let wait = try #require(limited.retryAfterSeconds)
            #expect(limited.retryAfter == locked.data.lockedUntil, "retry_after is the lock's real end")
            expectedLocks.append((locked.data.lockouts, wait))
            clock.advance(by: TimeInterval(wait) + 1)
        }
        #expect(expectedLocks.map(\.lockouts) == [1, 2, 3])
        #expect(expectedLocks.map(\.wait) == [600, 1200, 2400], "each lock in a day doubles the wait")
    }

    // MARK: - 9. Re-authentication

    @Test func enrollingAFactorNeedsARecentSignInOrThePassword() async throws {
        let harness = try await service()
        let member = try await register(harness, "re@example.com", "correct horse battery")
        let token = try #require(member.result.session?.accessToken)
        clock.advance(by: 301)
        let stale = try await refusal(harness, .mfaEnroll) { $0.accessToken = token }
        #expect(stale.code == .reauthenticationRequired)
        #expect(try await harness.count("mfa_factors") == 0)
        let wrong = try await refusal(harness, .mfaEnroll) {
            $0.accessToken = token
            $0.password = "a stolen token's guess"
        }
        #expect(wrong.code == .invalidCredentials)
        let enrolled = try await handle(harness, .mfaEnroll) {
            $0.accessToken = token
            $0.password = "correct horse battery"
        }
        let uri = try #require(enrolled.result.mfa?.otpauthURI)
        // Finished soon after the re-authenticated enrolment: nothing more asked.
        clock.advance(by: 60)
        let code = try await appCode(uri: uri, at: clock.now())
        let verified = try await handle(harness, .mfaVerify) {
            $0.accessToken = token
            $0.code = code
        }
        #expect(verified.result.mfa?.recoveryCodes?.count == 10)
    }

    @Test func aPendingFactorLeftTooLongNeedsTheSignInAgain() async throws {
        let harness = try await service()
        let member = try await register(harness, "late@example.com", "correct horse battery")
        let token = try #require(member.result.session?.accessToken)
        let enrolled = try await handle(harness, .mfaEnroll) { $0.accessToken = token }
        let uri = try #require(enrolled.result.mfa?.otpauthURI)
        clock.advance(by: 400)
        let stale = try await refusal(harness, .mfaVerify) {
            $0.accessToken = token
            $0.code = "123456"
        }
        #expect(stale.code == .reauthenticationRequired)
        let code = try await appCode(uri: uri, at: clock.now())
        let verified = try await handle(harness, .mfaVerify) {
            $0.accessToken = token
            $0.code = code
            $0.password = "correct horse battery"
        }
        #expect(verified.result.mfa?.recoveryCodes?.count == 10)
    }

    @Test func linkingToAFullAccountNeedsARecentSignInButAGuestDoesNot() async throws {
        let harness = try await service()
        let member = try await register(harness, "full@example.com", "correct horse battery")
        let guest = try await handle(harness, .guest) { $0.clientID = "install-1" }
        clock.advance(by: 301)
        let stale = try await refusal(harness, .register) {
            $0.email = "second@example.com"
            $0.password = "another long password"
            $0.linkTo = member.result.session?.accessToken
        }
        #expect(stale.code == .reauthenticationRequired)
        #expect(stale.field == "data.link_to")
        let upgraded = try await handle(harness, .register) {
            $0.email = "guest@example.com"
            $0.password = "another long password"
            $0.linkTo = guest.result.session?.accessToken
        }
        #expect(upgraded.result.user?.id == guest.result.user?.id, "a guest's token is all a guest has")
    }

    // MARK: - 10. Codes outliving what they protect

    @Test func aChangedPasswordVoidsEarlierResetAndSignInCodes() async throws {
        let harness = try await service()
        let member = try await register(harness, "void@example.com", "correct horse battery")
        let token = try #require(member.result.session?.accessToken)
        _ = try await handle(harness, .verifyEmail) {
            $0.linkToken = try? codeSecret(member.events, UserEventType.verificationRequested).linkToken
            $0.accessToken = token
        }
        let reset = try codeSecret(
            try await handle(harness, .passwordResetRequest) { $0.email = "void@example.com" }.events,
            UserEventType.passwordResetRequested)
        let signIn = try codeSecret(
            try await handle(harness, .emailCodeRequest) { $0.email = "void@example.com" }.events,
            UserEventType.signInRequested)
        _ = try await handle(harness, .changePassword) {
            $0.accessToken = token
            $0.password = "correct horse battery"
            $0.newPassword = "a changed password"
        }
        let staleReset = try await refusal(harness, .passwordReset) {
            $0.linkToken = reset.linkToken
            $0.newPassword = "an attacker's password"
        }
        #expect(staleReset.code == .invalidCode)
        let staleSignIn = try await refusal(harness, .emailCode) { $0.linkToken = signIn.linkToken }
        #expect(staleSignIn.code == .invalidCode)
    }

    @Test func aResetVoidsEarlierSignInCodes() async throws {
        let harness = try await service()
        _ = try await register(harness, "voids@example.com", "correct horse battery")
        let signIn = try codeSecret(
            try await handle(harness, .emailCodeRequest) { $0.email = "voids@example.com" }.events,
            UserEventType.signInRequested)
        let reset = try codeSecret(
            try await handle(harness, .passwordResetRequest) { $0.email = "voids@example.com" }.events,
            UserEventType.passwordResetRequested)
        _ = try await handle(harness, .passwordReset) {
            $0.linkToken = reset.linkToken
            $0.newPassword = "the owner's new password"
        }
        let stale = try await refusal(harness, .emailCode) { $0.linkToken = signIn.linkToken }
        #expect(stale.code == .invalidCode)
    }

    @Test func theLinkOfACodeSpentByGuessesIsSpentToo() async throws {
        let harness = try await service()
        let member = try await register(harness, "spent@example.com", "correct horse battery")
        let secret = try codeSecret(member.events, UserEventType.verificationRequested)
        for guess in 0..<5 {
            let wrong = try await refusal(harness, .verifyEmail) {
                $0.email = "spent@example.com"
                $0.code = String(format: "%06d", (Int(secret.code) ?? 0) + 1 + guess)
            }
            #expect(wrong.code == .invalidCode)
        }
        let link = try await refusal(harness, .verifyEmail) {
            $0.linkToken = secret.linkToken
            $0.accessToken = member.result.session?.accessToken
        }
        #expect(link.code == .invalidCode)
        #expect(try await harness.count("users", where: "email_verified") == 0)
    }

    // MARK: - 11. Small ones

    @Test func aResetByLinkChecksTheNewPasswordAgainstTheAddress() async throws {
        let harness = try await service()
        _ = try await register(harness, "margaret.hamilton@example.com", "correct horse battery")
        let reset = try codeSecret(
            try await handle(harness, .passwordResetRequest) { $0.email = "margaret.hamilton@example.com" }.events,
            UserEventType.passwordResetRequested)
        let weak = try await refusal(harness, .passwordReset) {
            $0.linkToken = reset.linkToken
            $0.newPassword = "margaret.hamilton@example.com"
        }
        #expect(weak.code == .weakPassword)
        #expect(weak.field == "data.new_password")
    }

    @Test(arguments: [" ", "\n", "\t"])
    func introspectionRefusesATokenWithWhitespace(padding: String) async throws {
        let harness = try await service()
        let guest = try await handle(harness, .guest) { $0.clientID = "install-2" }
        let token = try #require(guest.result.session?.accessToken)
        let exact = try await handle(harness, .introspect) { $0.accessToken = token }
        #expect(exact.result.introspection?.active == true)
        for padded in [token + padding, padding + token] {
            let answer = try await handle(harness, .introspect) { $0.accessToken = padded }
            #expect(answer.result.introspection?.active == false)
        }
    }

    @Test func aUserListsEachProviderOnce() async throws {
        let harness = try await service()
        let guest = try await handle(harness, .guest) { $0.clientID = "install-3" }
        let token = try #require(guest.result.session?.accessToken)
        _ = try await handle(harness, .register) {
            $0.email = "first@example.com"
            $0.password = "correct horse battery"
            $0.linkTo = token
        }
        let second = try await handle(harness, .register) {
            $0.email = "second@example.com"
            $0.password = "correct horse battery"
            $0.linkTo = token
        }
        #expect(second.result.user?.providers == ["password"])
    }
}
