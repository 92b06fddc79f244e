import AuthCrypto
import Foundation
import JOSE
import Messages
import Passwords
import ServiceKit
import Testing

@testable import AuthDomain
@testable import AuthStore
@testable import TestSupport

/// Phone numbers against PostgreSQL: the code is taken from the `auth.phone.code_requested` event
/// the SMS service would consume, opened with the SMS service's private key.
@Suite(.requiresDatabase) struct PhoneCodeFlowTests {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
    let sms: (privateKey: [UInt8], publicKey: [UInt8])
    let mail: (privateKey: [UInt8], publicKey: [UInt8])
    let number = "+14155550100"

    init() throws {
        sms = try X25519.generateKeyPair()
        mail = try X25519.generateKeyPair()
    }

    func service(signUp: Bool = true, configure: (inout WorkerConfiguration) -> Void = { _ in }) async throws
        -> FlowHarness
    {
        let resultsKey = try SecureRandom.bytes(32)
        let passwords = try PasswordService(parameters: fastArgon2, threads: 2)
        return try await FlowHarness(clock: clock, passwords: passwords) { [sms, mail] config in
            config.resultsKey = resultsKey
            config.phoneCodes.smsKey = sms.publicKey
            config.phoneCodes.signUp = signUp
            config.emailCodes.mailKey = mail.publicKey
            configure(&config)
        }
    }

    func handle(_ harness: FlowHarness, _ method: LoginMethod, _ fill: (inout LoginRequestData) -> Void) async throws
        -> FlowHarness.Outcome
    {
        try #require(try await harness.handle(makeRequest(method, fill)))
    }

    /// The answer, or the refusal thrown before the write, as a result's error.
    func answer(_ harness: FlowHarness, _ method: LoginMethod, _ fill: (inout LoginRequestData) -> Void) async throws
        -> (result: LoginResultData?, error: LoginError?)
    {
        do {
            let outcome = try await harness.handle(makeRequest(method, fill))
            if let error = outcome?.result.error {
                var refusal = LoginError(error.code, error.message)
                refusal.field = error.field
                refusal.retryAfterSeconds = error.retryAfterSeconds
                return (outcome?.result, refusal)
            }
            return (outcome?.result, nil)
        } catch let error as LoginError {
            return (nil, error)
        }
    }

    /// The texted code events among `events`, opened as the SMS service does.
    func texts(in events: [OutboxEvent]) throws -> [(data: PhoneCodeRequestedData, code: String)] {
        try events.compactMap { event in
            guard
                let envelope = try? MessageCoding.decode(CloudEvent<PhoneCodeRequestedData>.self, from: event.payload),
                envelope.type == UserEventType.phoneCodeRequested
            else { return nil }
            let opened = try JWE.openECDHES(envelope.data.sealedSecret, privateKey: sms.privateKey)
            return (envelope.data, try MessageCoding.decode(PhoneCodeSecret.self, from: opened.plaintext).code)
        }
    }

    func types(_ events: [OutboxEvent]) -> [String] {
        events.compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.payload)) as? [String: Any])??["type"] as? String
        }
    }

    /// Asks for a code to `phone` and returns it.
    func code(
        _ harness: FlowHarness, to phone: String, token: String? = nil,
        _ fill: (inout LoginRequestData) -> Void = { _ in }
    ) async throws -> String {
        let asked = try await handle(harness, .phoneCodeRequest) {
            $0.phone = phone
            $0.accessToken = token
            fill(&$0)
        }
        #expect(asked.result.status == "ok")
        return try #require(try texts(in: asked.events).first).code
    }

    func signIn(_ harness: FlowHarness, _ phone: String, code: String, token: String? = nil) async throws
        -> FlowHarness.Outcome
    {
        try await handle(harness, .phoneCode) {
            $0.phone = phone
            $0.code = code
            $0.accessToken = token
        }
    }

    // MARK: - Signing in

    @Test func aTextedCodeSignsUpOnceAndSignsInAfter() async throws {
        let harness = try await service()
        let asked = try await handle(harness, .phoneCodeRequest) {
            $0.phone = number
            $0.locale = "en-US"
        }
        #expect(asked.result.status == "ok")
        #expect(asked.result.user == nil)
        let text = try #require(try texts(in: asked.events).first)
        #expect(text.data.phone == number)
        #expect(text.data.purpose == "phone_sign_in")
        #expect(text.data.userId == nil)
        #expect(text.data.locale == "en-US")
        #expect(text.data.expiresAt == Timestamp.format(clock.now() + 300))
        #expect(text.code.count == 6 && text.code.allSatisfy(\.isNumber))
        // Only sealed: the event's JSON names no code.
        let json = String(decoding: try #require(asked.events.first).payload, as: UTF8.self)
        #expect(!json.contains("\"code\"") && !json.contains(text.code + "\""))
        #expect(try await harness.count("one_time_codes", where: "code_hmac <> '\\x'::bytea") == 1)

        let signedUp = try await signIn(harness, number, code: text.code)
        #expect(signedUp.result.status == "ok")
        #expect(signedUp.result.newUser == true)
        let user = try #require(signedUp.result.user)
        #expect(user.phone == number && user.phoneVerified == true)
        #expect(user.providers == ["phone"])
        #expect(user.email == nil && user.isGuest == false)
        #expect(types(signedUp.events) == [UserEventType.created])
        let created = try MessageCoding.decode(
            CloudEvent<UserCreatedData>.self, from: try #require(signedUp.events.first).payload)
        #expect(created.data.phone == number && created.data.provider == "phone")

        // Used up: the same code again is refused.
        let again = try await answer(harness, .phoneCode) {
            $0.phone = number
            $0.code = text.code
        }
        #expect(again.error?.code == .invalidCode)

        // The number's account now: a new code signs in to it, no new account.
        clock.advance(by: 60)
        let second = try await code(harness, to: number)
        let signedIn = try await signIn(harness, number, code: second)
        #expect(signedIn.result.status == "ok" && signedIn.result.newUser == false)
        #expect(signedIn.result.user?.id == user.id)
        #expect(try await harness.count("users") == 1)
        #expect(try await harness.count("identities", where: "provider = 'phone'") == 1)
        // In the audit trail (sign-ins and the refused replay; asking for a code is not a sign-in).
        #expect(try await harness.count("audit_log", where: "action = 'phone_code' AND outcome = 'ok'") == 2)
        #expect(try await harness.count("audit_log", where: "action = 'phone_code' AND outcome = 'invalid_code'") == 1)
        #expect(try await harness.count("audit_log", where: "action = 'phone_code_request'") == 0)
        // In the account's export: the number on the user, its identity and the codes texted.
        let gateway = try X25519.generateKeyPair()
        let exported = try await handle(harness, .accountExport) {
            $0.accessToken = signedIn.result.session?.accessToken
            $0.replyKey = Base64URL.encode(gateway.publicKey)
        }
        let sealed = try #require(exported.result.sealedExport)
        let export = try MessageCoding.decode(
            AccountExportPayload.self, from: try JWE.openECDHES(sealed, privateKey: gateway.privateKey).plaintext)
        #expect(export.user.phone == number)
        #expect(export.identities.map(\.provider) == ["phone"] && export.identities.first?.subject == number)
        // The sign-up's code was sent before the account existed, to nobody's: only the second is its.
        #expect(export.oneTimeCodes.map(\.purpose) == ["phone_sign_in"])
        #expect(export.oneTimeCodes.first?.email == number)
    }

    @Test func withoutSignUpANumberWithNoAccountIsAnsweredAlikeAndTextedNothing() async throws {
        let open = try await service(signUp: true)
        let code = try await code(open, to: number)
        _ = try await signIn(open, number, code: code)
        // A second worker on the same database, sign-up by phone off.
        let closed = try await FlowHarness(clock: clock, databaseURL: open.databaseURL) { [sms] config in
            config.resultsKey = open.configuration.resultsKey
            config.phoneCodes.smsKey = sms.publicKey
        }
        let known = try await handle(closed, .phoneCodeRequest) { $0.phone = number }
        let unknown = try await handle(closed, .phoneCodeRequest) { $0.phone = "+14155550101" }
        #expect(known.result.status == "ok" && unknown.result.status == "ok")
        #expect(known.result.user == nil && unknown.result.user == nil)
        #expect(try texts(in: known.events).count == 1)
        #expect(unknown.events.isEmpty)
        // A made-up code for the number with no account: the refusal a wrong code gets.
        let guessed = try await answer(closed, .phoneCode) {
            $0.phone = "+14155550101"
            $0.code = "123456"
        }
        #expect(guessed.error?.code == .invalidCode)
        #expect(guessed.error?.field == "data.code")
        #expect(try await closed.count("users") == 1)
    }

    @Test func wrongGuessesSpendTheCodeAndANewerCodeVoidsTheOlder() async throws {
        let harness = try await service()
        let first = try await code(harness, to: number)
        let wrong = first == "000000" ? "000001" : "000000"
        for _ in 0..<3 {
            let refused = try await answer(harness, .phoneCode) {
                $0.phone = number
                $0.code = wrong
            }
            #expect(refused.error?.code == .invalidCode)
        }
        // Three wrong guesses (the default): the right code no longer works.
        let spent = try await answer(harness, .phoneCode) {
            $0.phone = number
            $0.code = first
        }
        #expect(spent.error?.code == .invalidCode)

        let older = try await code(harness, to: number)
        let newer = try await code(harness, to: number)
        if older != newer {
            let voided = try await answer(harness, .phoneCode) {
                $0.phone = number
                $0.code = older
            }
            #expect(voided.error?.code == .invalidCode)
        }
        #expect(try await signIn(harness, number, code: newer).result.status == "ok")
        #expect(try await harness.count("users") == 1)
    }

    @Test func anExpiredCodeIsRefusedAsExpiredAndWritesNothing() async throws {
        let harness = try await service()
        let code = try await code(harness, to: number)
        clock.advance(by: 301)
        let late = try await answer(harness, .phoneCode) {
            $0.phone = number
            $0.code = code
        }
        #expect(late.error?.code == .codeExpired)
        #expect(try await harness.count("users") == 0)
        #expect(try await harness.count("sessions") == 0)
    }

    @Test func aSecondFactorStillStopsAPhoneSignIn() async throws {
        let harness = try await service()
        let first = try await signIn(harness, number, code: try await code(harness, to: number))
        let token = try #require(first.result.session?.accessToken)
        let enrolment = try await handle(harness, .mfaEnroll) { $0.accessToken = token }
        let uri = try #require(enrolment.result.mfa?.otpauthURI)
        let outcome = try await Subprocess.run([
            "python3", "-c", "import pyotp, sys; print(pyotp.parse_uri(sys.argv[1]).at(int(sys.argv[2])))", uri,
            String(Int64(clock.now().timeIntervalSince1970)),
        ])
        let appCode = outcome.output.trimmingCharacters(in: .whitespacesAndNewlines)
        let verified = try await handle(harness, .mfaVerify) {
            $0.accessToken = token
            $0.code = appCode
        }
        #expect(verified.result.status == "ok" || verified.result.status == "ok")
        clock.advance(by: 60)
        let stopped = try await answer(harness, .phoneCode) {
            $0.phone = number
            $0.code = "x"
        }
        #expect(stopped.error?.code == .invalidCode)
        let code = try await code(harness, to: number)
        let gated = try await answer(harness, .phoneCode) {
            $0.phone = number
            $0.code = code
        }
        #expect(gated.error?.code == .mfaRequired)
    }

    // MARK: - Refusals before anything is sent

    @Test func phoneCodesAreOffWithoutTheSMSKey() async throws {
        let harness = try await service { $0.phoneCodes.smsKey = nil }
        let off = try await answer(harness, .phoneCodeRequest) { $0.phone = number }
        #expect(off.error?.code == .unsupportedMethod)
        let offToo = try await answer(harness, .phoneCode) {
            $0.phone = number
            $0.code = "123456"
        }
        #expect(offToo.error?.code == .unsupportedMethod)
    }

    @Test func aNumberOutsideTheAllowedCountriesOrNotANumberIsRefusedNamingThePhone() async throws {
        let harness = try await service { $0.phoneCodes.countries = [1, 82] }
        let uk = try await answer(harness, .phoneCodeRequest) { $0.phone = "+447700900123" }
        #expect(uk.error?.code == .malformedRequest)
        #expect(uk.error?.field == "data.phone")
        #expect(uk.error?.message.contains("+44") == true)
        let garbage = try await answer(harness, .phoneCodeRequest) { $0.phone = "0415 555 0100" }
        #expect(garbage.error?.code == .malformedRequest)
        #expect(garbage.error?.field == "data.phone")
        #expect(try await harness.count("one_time_codes") == 0)
        #expect(try await harness.count("rate_limits") == 0, "refused before any limit was counted")
        // Korea is allowed: texted.
        _ = try await code(harness, to: "+821012345678")
    }

    // MARK: - Pumping

    @Test func everyLimitRefusesWithRetryAfterAndCountsNumbersWithAndWithoutAccountsAlike() async throws {
        let harness = try await service(signUp: false) {
            $0.phoneCodes.perNumber = .init(count: 2, window: 3600)
        }
        // An account for `number` (made through a second worker that signs up).
        let maker = try await FlowHarness(clock: clock, databaseURL: harness.databaseURL) { [sms] config in
            config.resultsKey = harness.configuration.resultsKey
            config.phoneCodes.smsKey = sms.publicKey
            config.phoneCodes.signUp = true
            config.phoneCodes.perNumber = .init(count: 0, window: 60)
        }
        _ = try await signIn(maker, number, code: try await code(maker, to: number))

        var answers: [String: [String]] = [:]
        for phone in [number, "+14155550777"] {
            for _ in 0..<3 {
                let asked = try await answer(harness, .phoneCodeRequest) { $0.phone = phone }
                answers[phone, default: []].append(asked.error?.code.rawValue ?? asked.result?.status ?? "-")
                if let error = asked.error {
                    #expect(error.code == .tooManyAttempts)
                    #expect(error.retryAfterSeconds == 3600)
                    #expect(error.message.contains("this number"))
                }
            }
        }
        #expect(answers[number] == ["ok", "ok", "too_many_attempts"])
        #expect(answers[number] == answers["+14155550777"], "the same answers whether the number has an account")
    }

    @Test func theBlockClientIPCountryAndDailyLimitsEachStopTexts() async throws {
        struct Case {
            let name: String
            let configure: (inout WorkerConfiguration.PhoneCodes) -> Void
            let fill: (Int, inout LoginRequestData) -> Void
            let message: String
        }
        let cases = [
            Case(
                name: "block", configure: { $0.perPrefix = .init(count: 2, window: 600) },
                fill: { i, data in data.phone = "+1415555010\(i)" }, message: "numbers like this one"),
            Case(
                name: "client", configure: { $0.perClient = .init(count: 2, window: 600) },
                fill: { i, data in
                    data.phone = "+1415555\(1000 + i * 1000)"
                    data.clientID = "install-1"
                }, message: "this client"),
            Case(
                name: "ip", configure: { $0.perIP = .init(count: 2, window: 600) },
                fill: { i, data in
                    data.phone = "+1415555\(1000 + i * 1000)"
                    data.clientID = "install-\(i)"
                    data.context = .init(ip: "203.0.113.9", userAgent: nil)
                }, message: "this address"),
            Case(
                name: "country", configure: { $0.perCountry = .init(count: 2, window: 600) },
                fill: { i, data in
                    data.phone = "+1415555\(1000 + i * 1000)"
                    data.clientID = "install-\(i)"
                }, message: "this country"),
            Case(
                name: "day", configure: { $0.dailyBudget = .init(count: 2, window: 86_400) },
                fill: { i, data in
                    data.phone = i == 1 ? "+447700900123" : "+1415555\(1000 + i * 1000)"
                    data.clientID = "install-\(i)"
                }, message: "today"),
        ]
        for limit in cases {
            let harness = try await service { limit.configure(&$0.phoneCodes) }
            var outcomes: [String] = []
            for i in 0..<3 {
                let asked = try await answer(harness, .phoneCodeRequest) { limit.fill(i, &$0) }
                outcomes.append(asked.error?.code.rawValue ?? asked.result?.status ?? "-")
                if let error = asked.error {
                    #expect(error.message.contains(limit.message), "\(limit.name): \(error.message)")
                    #expect((error.retryAfterSeconds ?? 0) > 0, "\(limit.name)")
                }
            }
            #expect(outcomes == ["ok", "ok", "too_many_attempts"], "\(limit.name)")
            #expect(try await harness.count("one_time_codes") == 2, "\(limit.name): nothing texted past the limit")
        }
    }

    // MARK: - A signed-in account's number

    @Test func aGuestProvesANumberAndBecomesAMemberWithTheSameID() async throws {
        let harness = try await service(signUp: false)
        let guest = try await handle(harness, .guest) { _ in }
        let token = try #require(guest.result.session?.accessToken)
        let guestID = try #require(guest.result.user?.id)
        let asked = try await handle(harness, .phoneCodeRequest) {
            $0.phone = number
            $0.accessToken = token
        }
        let text = try #require(try texts(in: asked.events).first)
        #expect(text.data.purpose == "verify_phone")
        #expect(text.data.userId == guestID)
        let proven = try await signIn(harness, number, code: text.code, token: token)
        #expect(proven.result.status == "ok")
        #expect(proven.result.user?.id == guestID)
        #expect(proven.result.user?.isGuest == false)
        #expect(proven.result.user?.phone == number)
        #expect(proven.result.newUser == false)
        #expect(proven.result.session?.accessToken != token, "a member's session, not the guest's")
        #expect(types(proven.events) == [UserEventType.phoneVerified, UserEventType.upgraded])
        // The number signs in to the same account from now on.
        let signedIn = try await signIn(harness, number, code: try await code(harness, to: number))
        #expect(signedIn.result.user?.id == guestID)
    }

    @Test func aMemberChangesItsNumberAndTheOldOneStopsSigningIn() async throws {
        let harness = try await service()
        let first = try await signIn(harness, number, code: try await code(harness, to: number))
        let token = try #require(first.result.session?.accessToken)
        let next = "+14155550199"
        let changed = try await signIn(
            harness, next, code: try await code(harness, to: next, token: token), token: token)
        #expect(changed.result.status == "ok")
        #expect(changed.result.user?.phone == next)
        #expect(changed.result.session == nil)
        let event = try MessageCoding.decode(
            CloudEvent<PhoneVerifiedData>.self, from: try #require(changed.events.first).payload)
        #expect(event.data.phone == next && event.data.previous == number)
        #expect(try await harness.count("identities", where: "provider = 'phone'") == 1)
        // The old number has no account now: with sign-up on, a code to it makes a new one.
        let old = try await signIn(harness, number, code: try await code(harness, to: number))
        #expect(old.result.newUser == true)
        #expect(old.result.user?.id != first.result.user?.id)
    }

    @Test func anotherAccountsNumberIsALinkConflictAndAnotherAccountsCodeIsInvalid() async throws {
        let harness = try await service()
        let owner = try await signIn(harness, number, code: try await code(harness, to: number))
        let other = try await signIn(harness, "+14155550111", code: try await code(harness, to: "+14155550111"))
        let otherToken = try #require(other.result.session?.accessToken)
        let ownerToken = try #require(owner.result.session?.accessToken)
        let taken = try await answer(harness, .phoneCode) {
            $0.phone = number
            $0.code = "-"
            $0.accessToken = otherToken
        }
        #expect(taken.error?.code == .invalidCode, "no code asked for: nothing to learn")
        let code = try await code(harness, to: number, token: otherToken)
        // The owner's token cannot spend a code sent for the other account.
        let stolen = try await answer(harness, .phoneCode) {
            $0.phone = number
            $0.code = code
            $0.accessToken = ownerToken
        }
        #expect(stolen.error?.code == .invalidCode)
        let conflict = try await answer(harness, .phoneCode) {
            $0.phone = number
            $0.code = code
            $0.accessToken = otherToken
        }
        #expect(conflict.error?.code == .linkConflict)
        #expect(conflict.error?.field == "data.phone")
        #expect(
            try await harness.query("SELECT phone FROM users ORDER BY created_at").map {
                try $0.decode("phone", as: String?.self)
            } == [number, "+14155550111"])
    }

    @Test func aMemberNeedsARecentSignInToChangeItsNumber() async throws {
        let harness = try await service()
        let first = try await signIn(harness, number, code: try await code(harness, to: number))
        let token = try #require(first.result.session?.accessToken)
        clock.advance(by: harness.configuration.accounts.reauthMaxAge + 1)
        let stale = try await answer(harness, .phoneCodeRequest) {
            $0.phone = "+14155550199"
            $0.accessToken = token
        }
        #expect(stale.error?.code == .reauthenticationRequired)
        #expect(try await harness.count("one_time_codes", where: "purpose = 'verify_phone'") == 0)
    }

    /// The refusal's advice holds: a member with a password sends it beside the stale session's
    /// token, as for the other changes to how an account signs in; a wrong one is refused.
    @Test func aStaleMembersPasswordStandsInForARecentSignIn() async throws {
        let harness = try await service()
        let registered = try await handle(harness, .register) {
            $0.email = "ada@example.com"
            $0.password = "correct horse battery"
        }
        let token = try #require(registered.result.session?.accessToken)
        clock.advance(by: harness.configuration.accounts.reauthMaxAge + 1)
        let next = "+14155550199"
        let wrong = try await answer(harness, .phoneCodeRequest) {
            $0.phone = next
            $0.accessToken = token
            $0.password = "not the password"
        }
        #expect(wrong.error?.code == .invalidCredentials && wrong.error?.field == "data.password")
        let code = try await code(harness, to: next, token: token) { $0.password = "correct horse battery" }
        let stale = try await answer(harness, .phoneCode) {
            $0.phone = next
            $0.code = code
            $0.accessToken = token
        }
        #expect(stale.error?.code == .reauthenticationRequired, "the code stays good")
        let proven = try await handle(harness, .phoneCode) {
            $0.phone = next
            $0.code = code
            $0.accessToken = token
            $0.password = "correct horse battery"
        }
        #expect(proven.result.status == "ok" && proven.result.user?.phone == next)
        #expect(proven.result.user?.id == registered.result.user?.id)
    }

    // MARK: - The pre-hijack

    @Test func provingTheMailboxTakesOffANumberTheRegistrantAdded() async throws {
        let harness = try await service(signUp: false)
        // Somebody registers the victim's address (never verified) and adds their own number.
        let registered = try await handle(harness, .register) {
            $0.email = "victim@example.com"
            $0.password = "correct horse battery"
        }
        let token = try #require(registered.result.session?.accessToken)
        let attacker = "+14155550666"
        let added = try await signIn(
            harness, attacker, code: try await code(harness, to: attacker, token: token), token: token)
        #expect(added.result.user?.phone == attacker)

        // The address's owner signs in by e-mail code: the account is claimed.
        let asked = try await handle(harness, .emailCodeRequest) { $0.email = "victim@example.com" }
        let sealed = try #require(
            asked.events.compactMap {
                try? MessageCoding.decode(CloudEvent<EmailCodeRequestedData>.self, from: $0.payload)
            }
            .first)
        let opened = try JWE.openECDHES(sealed.data.sealedSecret, privateKey: mail.privateKey)
        let mailed = try MessageCoding.decode(EmailCodeSecret.self, from: opened.plaintext)
        let claimed = try await handle(harness, .emailCode) {
            $0.email = "victim@example.com"
            $0.code = mailed.code
        }
        #expect(claimed.result.status == "ok")
        #expect(claimed.result.user?.phone == nil)
        #expect(claimed.result.user?.providers.contains("phone") == false)
        #expect(try await harness.count("identities", where: "provider = 'phone'") == 0)
        // The attacker's number reaches no account now (sign-up off: nothing is texted).
        let probe = try await handle(harness, .phoneCodeRequest) { $0.phone = attacker }
        #expect(probe.events.isEmpty)
    }
}
