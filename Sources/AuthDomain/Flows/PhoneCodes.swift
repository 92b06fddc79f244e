import AuthCrypto
import Foundation
import JOSE
import Messages

/// `phone_code_request` and `phone_code`: a number proven by a texted code signs in (creating
/// the account with `AUTH_PHONE_CODE_SIGNUP`), or, with an `access_token`, becomes the signed-in
/// account's number (a guest keeps its id and becomes a member).
///
/// A text costs money, so every request for one is counted before anything else, against the
/// number, its block of a thousand numbers, the client, the IP address, the country and the
/// day's budget (`SMSLimits`): counted alike whether the number has an account or not, so the
/// answers never tell.
extension LoginFlows {
    /// The texted codes' keys, or `unsupported_method` when this worker texts no codes.
    func phoneKeys() throws -> CodeKeys {
        guard let phoneCodeKeys else {
            throw LoginError(
                .unsupportedMethod,
                "phone codes are not enabled on this worker (AUTH_SMS_KEY and AUTH_RESULTS_KEY_FILE)")
        }
        return phoneCodeKeys
    }

    /// The request's number, in a country this worker texts.
    /// - Throws: `malformed_request` naming `data.phone`.
    func phoneNumber(_ request: LoginRequest) throws -> PhoneNumber {
        let number: PhoneNumber
        do {
            number = try PhoneNumber(e164: request.data.phone ?? "")
        } catch {
            throw LoginError(.malformedRequest, "not a phone number in E.164 form", field: "data.phone")
        }
        if let countries = configuration.phoneCodes.countries, !countries.contains(number.callingCode) {
            throw LoginError(
                .malformedRequest, "this service does not text numbers of country calling code +\(number.callingCode)",
                field: "data.phone")
        }
        return number
    }

    /// `phone_code_request`: counted against every limit, then a code for the number's account
    /// (or, with `AUTH_PHONE_CODE_SIGNUP`, for a number without one), or for the signed-in
    /// account the number is to become that of. Answered `accepted` either way.
    func preparePhoneCodeRequest(_ request: LoginRequest) async throws -> any PreparedWrite {
        let keys = try phoneKeys()
        let number = try phoneNumber(request)
        let now = clock.now()
        let account = try await phoneAccount(request, at: now)
        try await SMSLimits(configuration.phoneCodes).reserve(for: request, number: number, in: attempts, at: now)
        let code = try pendingTextedCode(account == nil ? .phoneSignIn : .verifyPhone, to: number, keys: keys, at: now)
        return PhoneCodeRequest(
            requestID: request.id, number: number.e164, account: account, code: code,
            signUp: configuration.phoneCodes.signUp, locale: request.data.locale,
            events: events(for: request, at: now), now: now)
    }

    /// `phone_code`: the texted code signs in (or makes the number the signed-in account's).
    func preparePhoneCode(_ request: LoginRequest) async throws -> any PreparedWrite {
        let keys = try phoneKeys()
        let number = try phoneNumber(request)
        let now = clock.now()
        let account = try await phoneAccount(request, at: now)
        let presented = PresentedCode(
            form: .code(destination: number.e164, code: request.data.code ?? ""),
            purpose: account == nil ? .phoneSignIn : .verifyPhone, keys: keys,
            maxAttempts: configuration.phoneCodes.maxAttempts)
        return PhoneCodeSignIn(
            requestID: request.id, number: number.e164, presented: presented, account: account,
            newUserID: try identifiers.uuid(), handles: try handleCandidates(name: nil, isGuest: false),
            pending: try pendingSession(at: now, isGuest: false), device: request.data.device, mfa: mfaGate(),
            events: events(for: request, at: now), now: now)
    }

    /// The signed-in account a request with an `access_token` acts for, with the proof of a
    /// recent sign-in a member needs (`Reauthentication`: the session's age, or the account's
    /// `password` in the request, checked here); nil without a token.
    /// - Throws: `invalid_token`; `invalid_credentials` for a wrong password.
    func phoneAccount(_ request: LoginRequest, at now: Date) async throws -> PhoneAccount? {
        guard let text = request.data.accessToken else { return nil }
        let token = try presentedToken(text, field: "data.access_token", allowExpired: false, at: now)
        return PhoneAccount(token: token, reauthentication: try await reauthentication(request, token: token, at: now))
    }

    /// A new six-digit code for `number`, sealed to the SMS service: made before the write,
    /// stored (as an HMAC) by it.
    func pendingTextedCode(_ purpose: CodePurpose, to number: PhoneNumber, keys: CodeKeys, at now: Date) throws
        -> PendingTextedCode
    {
        let code = try Self.sixDigits()
        let sealed = try JWE.sealECDHES(MessageCoding.encode(PhoneCodeSecret(code: code)), to: keys.recipient)
        return PendingTextedCode(
            id: try identifiers.uuid(), purpose: purpose, number: number.e164,
            codeHMAC: keys.hmac(code: code, purpose: purpose, email: number.e164), sealed: sealed, createdAt: now,
            expiresAt: now + configuration.phoneCodes.lifetime)
    }
}

/// The signed-in account a phone request acts for (`LoginFlows.phoneAccount`).
struct PhoneAccount: Sendable {
    let token: PresentedAccessToken
    let reauthentication: Reauthentication

    /// What a request about `number` reads: the number's identity, and the account's session.
    static func prefetch(number: String, account: PhoneAccount?) -> Prefetch {
        var prefetch = Prefetch()
        if let account {
            prefetch.merge(account.token.prefetch)
            prefetch.merge(account.reauthentication.prefetch)
        }
        prefetch.identities.append(IdentityKey(provider: "phone", subject: number))
        return prefetch
    }

    /// The live session and its user, and whether a member's change is refused for want of a
    /// recent sign-in (a number is a way into the account; a guest needs none, it has nothing to lose).
    /// - Throws: `invalid_token`.
    func signedIn(in unit: any UnitOfWork, at now: Date) throws -> (
        session: SessionRecord, user: StoredUser, stale: Bool
    ) {
        let (session, user) = try AuthDomain.signedIn(token, in: unit, at: now)
        let stale = try !user.isGuest && !reauthentication.holds(for: session, in: unit, at: now)
        return (session, user, stale)
    }
}

/// The limits on texting, in the order they are counted: the narrowest first, so a number
/// hammered on its own stops at its own limit without using up its country's or the day's.
/// Each is shared by every replica (`rate_limits`), and each refusal is `too_many_attempts`
/// with `retry_after`. A count of 0 turns a limit off.
struct SMSLimits {
    let phone: WorkerConfiguration.PhoneCodes

    init(_ phone: WorkerConfiguration.PhoneCodes) {
        self.phone = phone
    }

    /// The reservations a request for a text to `number` takes, each with the refusal's message.
    func reservations(for request: LoginRequest, number: PhoneNumber) -> [(RateLimitReservation, String)] {
        var taken: [(RateLimitReservation, String)] = []
        func add(_ bucket: String, _ limit: WorkerConfiguration.RateLimit, _ message: String) {
            guard limit.count > 0 else { return }
            taken.append((RateLimitReservation(bucket: bucket, limit: limit, wanted: 1), message))
        }
        add("sms:number:" + number.e164, phone.perNumber, "too many codes were texted to this number; try again later")
        add("sms:block:" + number.block, phone.perPrefix, "too many codes were texted to numbers like this one")
        if let client = (request.data.clientID ?? request.partitionKey).flatMap(\.nilIfEmpty) {
            add("sms:client:" + client, phone.perClient, "too many codes were asked for by this client")
        }
        if let ip = request.data.context?.ip?.nilIfEmpty {
            add("sms:ip:" + ip, phone.perIP, "too many codes were asked for from this address")
        }
        add(
            "sms:country:\(number.callingCode)", phone.perCountry,
            "too many codes were texted to this country right now; try again later")
        add("sms:day", phone.dailyBudget, "the service has texted as many codes as it may today; try again later")
        return taken
    }

    /// Takes one text from every limit, or refuses at the first that has none left (the ones
    /// before it keep the use: a refused request was still a request).
    /// - Throws: `too_many_attempts` with `retry_after`.
    func reserve(for request: LoginRequest, number: PhoneNumber, in attempts: any PasswordAttempts, at now: Date)
        async throws
    {
        let taken = reservations(for: request, number: number)
        let grants = try await attempts.reserveRateLimits(taken.map(\.0), at: now)
        for ((_, message), grant) in zip(taken, grants) where grant.granted < 1 {
            throw LoginError.tooManyAttempts(until: grant.windowEnd, now: now, message: message)
        }
    }
}

/// A texted code made before the write: the code itself only in `sealed`, for the SMS service.
struct PendingTextedCode: Sendable {
    let id: UUID
    let purpose: CodePurpose
    let number: String
    let codeHMAC: [UInt8]
    /// `{"code"}` sealed to the SMS service's key.
    let sealed: String
    let createdAt: Date
    let expiresAt: Date

    /// Stores the code (earlier ones to the number for the purpose stop working) and announces
    /// it to the SMS service.
    func issue(to userID: UUID?, locale: String?, in unit: any UnitOfWork, events: EventFactory) throws {
        // A texted code has no link: random bytes, the hash of nothing anybody holds, fill the column.
        try unit.insertCode(
            NewOneTimeCode(
                id: id, userID: userID, purpose: purpose.rawValue, email: number, codeHMAC: codeHMAC,
                linkHash: try SecureRandom.bytes(32), createdAt: createdAt, expiresAt: expiresAt))
        try unit.appendEvent(
            try events.phoneCodeRequested(
                purpose: purpose, user: userID, phone: number, sealedSecret: sealed, expiresAt: expiresAt,
                locale: locale))
    }
}

/// `phone_code_request`, ready to write.
struct PhoneCodeRequest: PreparedWrite {
    let requestID: String
    let number: String
    /// The signed-in account, when the number is to become its.
    let account: PhoneAccount?
    let code: PendingTextedCode
    let signUp: Bool
    let locale: String?
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch { PhoneAccount.prefetch(number: number, account: account) }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        guard let account else {
            let answer = FlowAnswer(result: .accepted(requestID: requestID, user: nil), userID: nil, sessionID: nil)
            let owner = try unit.identity(provider: "phone", subject: number)?.userID
            // Without an account (and sign-up by phone off) nothing is sent, and the answer is the same.
            guard owner != nil || signUp else { return answer }
            try code.issue(to: owner, locale: locale, in: unit, events: events)
            return answer
        }
        // A way into a full account is a change to how it signs in: refused before a text is paid for.
        let (session, user, stale) = try account.signedIn(in: unit, at: now)
        if stale {
            return .refused(Reauthentication.refusal(field: "data.access_token"), requestID: requestID, userID: user.id)
        }
        // The account's number already: there is nothing to prove.
        if user.phone != number { try code.issue(to: user.id, locale: locale, in: unit, events: events) }
        return FlowAnswer(
            result: .accepted(requestID: requestID, user: user.payload), userID: user.id, sessionID: session.id)
    }
}

/// `phone_code`, ready to write.
struct PhoneCodeSignIn: PreparedWrite {
    let requestID: String
    let number: String
    let presented: PresentedCode
    let account: PhoneAccount?
    let newUserID: UUID
    let handles: [String]
    let pending: PendingSession
    let device: LoginRequestData.Device?
    let mfa: MFAGate?
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch { PhoneAccount.prefetch(number: number, account: account) }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        if let account { return try verify(account, in: unit) }
        let record: OneTimeCodeRecord
        switch try presented.spend(in: unit, at: now, requestID: requestID) {
        case .refused(let answer): return answer
        case .spent(let found): record = found
        }
        if let identity = try unit.identity(provider: "phone", subject: number),
            let user = try unit.user(id: identity.userID)
        {
            // A code asked for before the number moved to another account does not open that one.
            if let owner = record.userID, owner != user.id { throw presented.refusal }
            try unit.updateIdentity(identity, lastLoginAt: now)
            if let mfa,
                let stop = try mfa.answer(
                    requestID: requestID, user: user.id, provider: "phone", device: device, in: unit, at: now)
            {
                return stop
            }
            return try pending.open(
                for: user, provider: "phone", device: device, newUser: false, requestID: requestID, in: unit)
        }
        // The number's account was deleted, or the number moved, since the code was sent.
        guard record.userID == nil else { throw presented.refusal }
        var user = try unit.insertUser(
            NewUser(
                id: newUserID, name: nil, email: nil, emailVerified: false, isPrivateEmail: false, isGuest: false,
                createdAt: now, phone: number),
            handles: handles)
        try unit.insertIdentity(Self.identity(number), userID: user.id, at: now)
        user.providers = ["phone"]
        try unit.appendEvent(try events.userCreated(user, provider: "phone"))
        return try pending.open(
            for: user, provider: "phone", device: device, newUser: true, requestID: requestID, in: unit)
    }

    /// With an access token: the number becomes the signed-in account's, in place of any other it
    /// had. A guest becomes a member (the same id) and gets a member's session.
    private func verify(_ account: PhoneAccount, in unit: any UnitOfWork) throws -> FlowAnswer {
        let (session, stored, stale) = try account.signedIn(in: unit, at: now)
        if stale {
            return .refused(
                Reauthentication.refusal(field: "data.access_token"), requestID: requestID, userID: stored.id)
        }
        let record: OneTimeCodeRecord
        switch try presented.spend(in: unit, at: now, requestID: requestID) {
        case .refused(let answer): return answer
        case .spent(let found): record = found
        }
        // A code is the account's it was sent for: another account's token cannot spend it.
        guard record.userID == stored.id else { throw presented.refusal }
        var user = stored
        if let holder = try unit.identity(provider: "phone", subject: number), holder.userID != user.id {
            throw LoginError(
                .linkConflict, "this number belongs to another account; sign in with it, or remove it there first",
                field: "data.phone")
        }
        if user.phone != number {
            let previous = user.phone
            if let previous { try unit.deleteIdentity(provider: "phone", subject: previous) }
            try unit.insertIdentity(Self.identity(number), userID: user.id, at: now)
            user.phone = number
            if !user.providers.contains("phone") { user.providers.append("phone") }
            try unit.appendEvent(try events.phoneVerified(user: user.id, phone: number, previous: previous))
        }
        guard user.isGuest else {
            try unit.updateUser(user, upgradedAt: nil, at: now)
            return FlowAnswer(
                result: .accepted(requestID: requestID, user: user.payload), userID: user.id, sessionID: session.id)
        }
        user.isGuest = false
        try unit.updateUser(user, upgradedAt: now, at: now)
        try unit.appendEvent(try events.userUpgraded(user, provider: "phone"))
        return try pending.open(
            for: user, provider: "phone", device: device, newUser: false, requestID: requestID, in: unit)
    }

    /// The identity a proven number signs in with.
    static func identity(_ number: String) -> NewIdentity {
        NewIdentity(
            provider: "phone", subject: number, email: nil, emailVerified: false, isPrivateEmail: false,
            passwordHash: nil)
    }
}

// MARK: - Handlers (registered in `LoginMethod.handler`)

extension MethodHandler {
    /// Waits for the limits' reservation (a round trip to PostgreSQL) before the write, and for
    /// a member's password when one comes with an `access_token`.
    static let phoneCodeRequest = MethodHandler(
        audited: false, .waits { try await $0.preparePhoneCodeRequest($1) }, reads: .withPassword)
    /// Waits for a member's password when one comes with an `access_token`.
    static let phoneCode = MethodHandler(
        audited: true, .waits { try await $0.preparePhoneCode($1) }, reads: .withPassword)
}
