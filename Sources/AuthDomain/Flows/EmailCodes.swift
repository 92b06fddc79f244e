import AuthCrypto
import Foundation
import JOSE
import Messages
import Passwords

/// What a one-time code is for. Each purpose has its own codes, limits and event.
enum CodePurpose: String, Sendable, CaseIterable {
    case verifyEmail = "verify_email"
    case passwordReset = "password_reset"
    case signIn = "email_sign_in"
}

/// The keys of e-mail codes: the mail service's public key (codes leave the worker sealed to it)
/// and the key codes are stored under (an HMAC, derived from the results key).
struct CodeKeys: Sendable {
    let mail: [UInt8]
    let hmac: [UInt8]

    /// Nil unless both keys are configured.
    init?(configuration: WorkerConfiguration) {
        guard let mail = configuration.emailCodes.mailKey, let results = configuration.resultsKey else { return nil }
        self.mail = mail
        hmac = HMACSHA256.mac(key: results, message: Array("auth-worker one-time codes".utf8))
    }

    /// The HMAC a code is stored as: bound to its purpose and address, so a code for one cannot
    /// be checked against another's row.
    func hmac(code: String, purpose: CodePurpose, email: String) -> [UInt8] {
        HMACSHA256.mac(key: hmac, message: Array("\(purpose.rawValue)\u{0}\(email)\u{0}\(code)".utf8))
    }
}

extension LoginFlows {
    /// The code keys, or `unsupported_method` when this worker sends no codes.
    func codeKeys() throws -> CodeKeys {
        guard let emailCodeKeys else {
            throw LoginError(
                .unsupportedMethod,
                "e-mail codes are not enabled on this worker (AUTH_MAIL_KEY and AUTH_RESULTS_KEY_FILE)")
        }
        return emailCodeKeys
    }

    /// A new code and link token for `purpose`, sealed to the mail service: made before the
    /// write, stored (as an HMAC) by it.
    func pendingCode(_ purpose: CodePurpose, keys: CodeKeys, at now: Date) throws -> PendingCode {
        let code = try Self.sixDigits()
        let linkToken = "lt_" + (try identifiers.secret(characters: 43))
        let sealed = try JWE.sealECDHES(
            MessageCoding.encode(EmailCodeSecret(code: code, linkToken: linkToken)), to: keys.mail)
        return PendingCode(
            id: try identifiers.uuid(), purpose: purpose, code: code, linkHash: SHA256.hash(linkToken), sealed: sealed,
            keys: keys, createdAt: now, expiresAt: now + configuration.emailCodes.lifetime)
    }

    /// Six decimal digits, uniformly: 32 random bits, drawn again in the rare case they fall in
    /// the last, incomplete run of a million.
    static func sixDigits() throws -> String {
        while true {
            let bytes = try SecureRandom.bytes(4)
            let value = bytes.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            guard value < 4_294_000_000 else { continue }
            let digits = String(value % 1_000_000)
            return String(repeating: "0", count: 6 - digits.count) + digits
        }
    }

    /// The code (with its address) or link token a request brings back.
    func presentedCode(_ request: LoginRequest, purpose: CodePurpose, keys: CodeKeys) throws -> PresentedCode {
        let data = request.data
        if let link = data.linkToken {
            return PresentedCode(
                form: .link(hash: SHA256.hash(link)), purpose: purpose, keys: keys,
                maxAttempts: configuration.emailCodes.maxAttempts)
        }
        guard let email = EmailAddress.normalize(data.email ?? "") else {
            throw LoginError(.malformedRequest, "not a valid e-mail address", field: "data.email")
        }
        return PresentedCode(
            form: .code(email: email, code: data.code ?? ""), purpose: purpose, keys: keys,
            maxAttempts: configuration.emailCodes.maxAttempts)
    }

    // MARK: - E-mail verification

    /// `send_verification`: a new code for the address of the account the access token signs in to.
    func prepareSendVerification(_ request: LoginRequest) throws -> any PreparedWrite {
        let keys = try codeKeys()
        let now = clock.now()
        return SendVerification(
            requestID: request.id,
            token: try presentedToken(
                request.data.accessToken ?? "", field: "data.access_token", allowExpired: false, at: now),
            code: try pendingCode(.verifyEmail, keys: keys, at: now), limit: configuration.emailCodes.sendLimit,
            events: events(for: request, at: now), now: now)
    }

    /// `verify_email`: the code (with the address) or the link token marks the address verified.
    /// An address never verified before needs the registrant's proof beside the code (the
    /// account's `access_token`, or its `password`): the mailbox's owner, if someone else
    /// registered it, cannot confirm that account by clicking a link; they sign in by code
    /// instead, which claims it (`MailboxProof`).
    func prepareVerifyEmail(_ request: LoginRequest) async throws -> any PreparedWrite {
        let keys = try codeKeys()
        let now = clock.now()
        let presented = try presentedCode(request, purpose: .verifyEmail, keys: keys)
        var registrant: VerifyEmail.Registrant?
        if let token = request.data.accessToken {
            registrant = .session(try presentedToken(token, field: "data.access_token", allowExpired: false, at: now))
        } else if let password = request.data.password {
            var email: String?
            switch presented.form {
            case .code(let address, _): email = address
            case .link: email = EmailAddress.normalize(request.data.email ?? "")
            }
            guard let email else {
                throw LoginError(
                    .malformedRequest, "the account's e-mail address goes with its password", field: "data.email")
            }
            let verifiedHash = try await verifiedPassword(password, email: email, at: now)
            registrant = .password(email: email, verifiedHash: verifiedHash)
        }
        return VerifyEmail(
            requestID: request.id, presented: presented, registrant: registrant, events: events(for: request, at: now),
            now: now)
    }

    /// Checks an account's current password as a login does (counted, throttled, the same work
    /// for an unknown address) and returns the hash it matched.
    /// - Throws: `too_many_attempts`; `invalid_credentials` naming `data.password`.
    func verifiedPassword(_ password: String, email: String, at now: Date) async throws -> String {
        let passwords = try passwordService()
        let throttleKey = "password:" + email
        let attempt = try await attempts.reservePasswordAttempt(
            key: throttleKey, email: email, at: now, policy: configuration.accounts.throttle)
        guard attempt.allowed else { throw LoginError.tooManyAttempts(until: attempt.lockedUntil ?? now, now: now) }
        let verification = try await passwords.verify(password, against: attempt.credential?.passwordHash)
        guard let credential = attempt.credential, verification.matches else {
            throw LoginError(.invalidCredentials, "the password is wrong", field: "data.password")
        }
        return credential.passwordHash
    }

    // MARK: - Password reset

    /// `password_reset_request`: answered `ok` whether or not the address has an account; when it
    /// has, a code goes to the mail service.
    func preparePasswordResetRequest(_ request: LoginRequest) throws -> any PreparedWrite {
        let keys = try codeKeys()
        _ = try passwordService()
        guard let email = EmailAddress.normalize(request.data.email ?? "") else {
            throw LoginError(.malformedRequest, "not a valid e-mail address", field: "data.email")
        }
        let now = clock.now()
        return PasswordResetRequest(
            requestID: request.id, email: email, code: try pendingCode(.passwordReset, keys: keys, at: now),
            limit: configuration.emailCodes.sendLimit, events: events(for: request, at: now), now: now)
    }

    /// `password_reset`: the code (or link token) and a new password set the password, end every
    /// session of the user and answer a new one.
    func preparePasswordReset(_ request: LoginRequest) async throws -> any PreparedWrite {
        let keys = try codeKeys()
        let passwords = try passwordService()
        let presented = try presentedCode(request, purpose: .passwordReset, keys: keys)
        let newPassword = request.data.newPassword ?? ""
        var email: String?
        if case .code(let address, _) = presented.form { email = address }
        let check = NewPasswordCheck(password: newPassword, policy: passwords.policy, field: "data.new_password")
        try check.check(email: email)
        let now = clock.now()
        // Each attempt costs a password hash: counted per address (per client for link tokens,
        // which cannot be guessed) before the hash is made.
        let limit = configuration.emailCodes.resetLimit
        if limit.count > 0 {
            let bucket =
                "password_reset:"
                + (email ?? "link:" + ((request.data.clientID ?? request.partitionKey).flatMap(\.nilIfEmpty) ?? "-"))
            let grant = try await attempts.reserveRateLimits(
                [RateLimitReservation(bucket: bucket, limit: limit, wanted: 1)], at: now)
            if let grant = grant.first, grant.granted < 1 {
                throw LoginError.tooManyAttempts(
                    until: grant.windowEnd, now: now, message: "too many password resets for this address")
            }
        }
        return PasswordReset(
            requestID: request.id, presented: presented, newPassword: check,
            newHash: try await passwords.hash(newPassword),
            pending: try pendingSession(at: now, isGuest: false), device: request.data.device, mfa: mfaGate(),
            events: events(for: request, at: now), now: now)
    }

    // MARK: - Password change

    /// `change_password`: the current password (counted and verified as a login's) and a new one;
    /// the user's other sessions end unless configured otherwise, this one stays.
    func prepareChangePassword(_ request: LoginRequest) async throws -> any PreparedWrite {
        let passwords = try passwordService()
        let data = request.data
        let now = clock.now()
        let token = try presentedToken(data.accessToken ?? "", field: "data.access_token", allowExpired: false, at: now)
        var sessionID: UUID?
        var tokenHash: [UInt8]?
        switch token {
        case .jwt(let claims): sessionID = claims.sessionID
        case .opaque(let hash): tokenHash = hash
        }
        let wrong = LoginError(.invalidCredentials, "the current password is wrong", field: "data.password")
        guard let email = try await attempts.passwordEmail(sessionID: sessionID, accessTokenHash: tokenHash) else {
            throw LoginError(.invalidCredentials, "this account has no password to change", field: "data.password")
        }
        let throttleKey = "password:" + email
        let attempt = try await attempts.reservePasswordAttempt(
            key: throttleKey, email: email, at: now, policy: configuration.accounts.throttle)
        guard attempt.allowed else { throw LoginError.tooManyAttempts(until: attempt.lockedUntil ?? now, now: now) }
        let verification = try await passwords.verify(data.password ?? "", against: attempt.credential?.passwordHash)
        guard let credential = attempt.credential, verification.matches else { throw wrong }
        let newPassword = data.newPassword ?? ""
        do {
            try passwords.policy.check(newPassword, email: email)
        } catch let weakness as PasswordPolicy.Weakness {
            throw LoginError(.weakPassword, "the password \(weakness.reason)", field: "data.new_password")
        }
        return ChangePassword(
            requestID: request.id, token: token, email: email, verifiedHash: credential.passwordHash,
            newHash: try await passwords.hash(newPassword), throttleKey: throttleKey,
            endOtherSessions: configuration.emailCodes.changeEndsOtherSessions, events: events(for: request, at: now),
            now: now)
    }
}

// MARK: - Codes made and checked

/// A code made before the write: the secrets only in `sealed`, for the mail service.
struct PendingCode: Sendable {
    let id: UUID
    let purpose: CodePurpose
    let code: String
    let linkHash: [UInt8]
    /// `{"code","link_token"}` sealed to the mail service's key.
    let sealed: String
    let keys: CodeKeys
    let createdAt: Date
    let expiresAt: Date

    /// Stores the code (earlier ones for the purpose stop working) and announces it to the mail
    /// service.
    /// - Parameter userID: nil for a sign-up code (`email_sign_in` to an address with no account).
    func issue(to userID: UUID?, email: String, in unit: any UnitOfWork, events: EventFactory) throws {
        try unit.insertCode(
            NewOneTimeCode(
                id: id, userID: userID, purpose: purpose.rawValue, email: email,
                codeHMAC: keys.hmac(code: code, purpose: purpose, email: email), linkHash: linkHash,
                createdAt: createdAt, expiresAt: expiresAt))
        try unit.appendEvent(
            try events.codeRequested(
                purpose: purpose, user: userID, email: email, sealedSecret: sealed, expiresAt: expiresAt))
    }

    /// The bucket that limits the codes sent to one account for the purpose.
    static func bucket(_ purpose: CodePurpose, userID: UUID) -> String {
        "code:\(purpose.rawValue):\(userID.lowercasedString)"
    }
}

/// A code or link token brought back, checked inside the write.
struct PresentedCode: Sendable {
    enum Form: Sendable {
        case code(email: String, code: String)
        case link(hash: [UInt8])
    }

    let form: Form
    let purpose: CodePurpose
    let keys: CodeKeys
    let maxAttempts: Int

    /// What checking found.
    enum Check {
        /// The code is right and live: the caller marks it used.
        case valid(OneTimeCodeRecord)
        /// A wrong guess, counted: answered with this error, the count kept.
        case wrongGuess(LoginError)
    }

    /// The one refusal for a code that does not work: the same code, message and field whether
    /// the address has an account, a live code, an expired one or none, so a wrong guess tells
    /// nothing about the address.
    var refusal: LoginError {
        let field: String
        switch form {
        case .code: field = "data.code"
        case .link: field = "data.link_token"
        }
        return LoginError(
            .invalidCode, "the code is wrong, expired or used; ask for a new one if it keeps failing", field: field)
    }

    /// Finds and checks the code. Wrong guesses are counted against the code (the caller answers
    /// them without throwing, so the count is written); after `maxAttempts` the code is spent, its
    /// link token too.
    /// - Throws: `invalid_code` for an unknown, used, spent or wrong code; `code_expired` only to
    ///   whoever shows the expired code itself (or its link), who learns nothing new from it.
    func check(in unit: any UnitOfWork, at now: Date) throws -> Check {
        switch form {
        case .link(let hash):
            guard let record = try unit.code(linkHash: hash), record.purpose == purpose.rawValue,
                record.usedAt == nil, record.attempts < maxAttempts
            else { throw refusal }
            guard record.expiresAt > now else { throw expired }
            return .valid(record)
        case .code(let email, let code):
            guard let record = try unit.liveCode(email: email, purpose: purpose.rawValue) else { throw refusal }
            let matches = ConstantTime.equals(
                keys.hmac(code: code, purpose: purpose, email: record.email), record.codeHMAC)
            guard record.expiresAt > now else { throw matches ? expired : refusal }
            guard record.attempts < maxAttempts else { throw refusal }
            guard matches else {
                try unit.recordCodeAttempt(id: record.id)
                return .wrongGuess(refusal)
            }
            return .valid(record)
        }
    }

    private var expired: LoginError { LoginError(.codeExpired, "the code has expired; ask for a new one") }

    /// What spending a code came to.
    enum Spent {
        /// The code was right and is used up now.
        case spent(OneTimeCodeRecord)
        /// A wrong guess: the answer to give, its count kept.
        case refused(FlowAnswer)
    }

    /// Checks the code and, when it is right, uses it up: the one way a flow takes a code.
    /// - Throws: as `check`.
    func spend(in unit: any UnitOfWork, at now: Date, requestID: String) throws -> Spent {
        switch try check(in: unit, at: now) {
        case .wrongGuess(let error):
            return .refused(.refused(error, requestID: requestID, userID: nil))
        case .valid(let record):
            try unit.useCode(id: record.id, at: now)
            return .spent(record)
        }
    }
}

// MARK: - The writes

/// `send_verification`, ready to write.
struct SendVerification: PreparedWrite {
    let requestID: String
    let token: PresentedAccessToken
    let code: PendingCode
    let limit: WorkerConfiguration.RateLimit
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch { token.prefetch }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let session = try token.session(in: unit, at: now, allowExpired: false, field: "data.access_token")
        guard let user = try unit.user(id: session.userID) else {
            throw PresentedAccessToken.invalid(field: "data.access_token")
        }
        _ = try Self.send(code, to: user, limit: limit, unit: unit, events: events, at: now, field: "data.access_token")
        return FlowAnswer(
            result: .accepted(requestID: requestID, user: user.payload), userID: user.id, sessionID: session.id)
    }

    /// Sends `user` a code for their address unless it is verified already, within the account's
    /// limit: the request's door and the console's (support resending it) are the same code.
    /// - Returns: whether a code was sent (false: verified already).
    static func send(
        _ code: PendingCode, to user: StoredUser, limit: WorkerConfiguration.RateLimit, unit: any UnitOfWork,
        events: EventFactory, at now: Date, field: String
    ) throws -> Bool {
        guard !user.isGuest, let address = user.email, let email = EmailAddress.normalize(address) else {
            throw LoginError(.malformedRequest, "this account has no e-mail address to verify", field: field)
        }
        guard !user.emailVerified else { return false }
        let bucket = PendingCode.bucket(.verifyEmail, userID: user.id)
        if limit.count > 0 {
            guard try unit.rateLimitUsage(bucket: bucket, at: now, window: limit.window) < limit.count else {
                throw LoginError.tooManyAttempts(
                    until: now + limit.window, now: now, message: "too many codes sent to this account; try later")
            }
            try unit.recordRateLimitedUse(bucket: bucket, at: now, window: limit.window)
        }
        try code.issue(to: user.id, email: email, in: unit, events: events)
        return true
    }
}

/// `verify_email`, ready to write.
struct VerifyEmail: PreparedWrite {
    /// Who shows, beside the code, that they are the account's registrant too.
    enum Registrant: Sendable {
        /// An access token of the account's.
        case session(PresentedAccessToken)
        /// The account's password, checked before the write against this hash.
        case password(email: String, verifiedHash: String)
    }

    let requestID: String
    let presented: PresentedCode
    let registrant: Registrant?
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch {
        var prefetch = Prefetch()
        switch registrant {
        case .session(let token): prefetch = token.prefetch
        case .password(let email, _): prefetch.identities = [IdentityKey(provider: "password", subject: email)]
        case nil: break
        }
        return prefetch
    }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let record: OneTimeCodeRecord
        switch try presented.spend(in: unit, at: now, requestID: requestID) {
        case .refused(let answer): return answer
        case .spent(let found): record = found
        }
        let reach = try MailboxProof.reach(record.email, in: unit, detaching: events)
        guard let userID = record.userID, var user = MailboxProof.user(reach), user.id == userID else {
            throw presented.refusal
        }
        var keptSession: UUID?
        if case .unproven = reach {
            // Whoever clicks the link may not be who registered: the registrant proves they hold
            // the mailbox too, or nothing changes (the code stays good for them).
            guard let kept = try registrantSession(of: user, in: unit) else {
                throw LoginError(
                    .reauthenticationRequired,
                    "send the account's access_token or password with the code: whoever registered the address verifies it",
                    field: "data.password")
            }
            keptSession = kept
        }
        if var identity = try unit.identity(provider: "password", subject: record.email), identity.userID == user.id,
            !identity.emailVerified
        {
            identity.emailVerified = true
            try unit.updateIdentity(identity, lastLoginAt: now)
        }
        try unit.markVerified(email: record.email, user: &user, at: now)
        try unit.appendEvent(try events.emailVerified(user: user.id, email: record.email))
        return FlowAnswer(
            result: .accepted(requestID: requestID, user: user.payload), userID: user.id, sessionID: keptSession)
    }

    /// The registrant's proof, when it holds for `user`: the session that stays (nil for a
    /// password, which keeps every session, and for no proof or another account's).
    /// - Returns: nil when there is no proof for this account; `.some(nil)` for a password.
    private func registrantSession(of user: StoredUser, in unit: any UnitOfWork) throws -> UUID?? {
        switch registrant {
        case .session(let token):
            let session = try token.session(in: unit, at: now, allowExpired: false, field: "data.access_token")
            return session.userID == user.id ? .some(session.id) : nil
        case .password(let email, let verifiedHash):
            guard let identity = try unit.identity(provider: "password", subject: email), identity.userID == user.id,
                identity.passwordHash == verifiedHash
            else { return nil }
            return .some(nil)
        case nil:
            return nil
        }
    }
}

/// `password_reset_request`, ready to write. Its answer is the same whether or not the address
/// has an account, or its codes are used up.
struct PasswordResetRequest: PreparedWrite {
    let requestID: String
    let email: String
    let code: PendingCode
    let limit: WorkerConfiguration.RateLimit
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch {
        var prefetch = Prefetch()
        prefetch.identities = [IdentityKey(provider: "password", subject: email)]
        return prefetch
    }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let answer = FlowAnswer(result: .accepted(requestID: requestID, user: nil), userID: nil, sessionID: nil)
        // Only to an account the address reaches (not an unproven extra address of another's).
        guard let identity = try unit.identity(provider: "password", subject: email),
            let user = MailboxProof.user(try MailboxProof.reach(email, in: unit, detaching: nil)),
            user.id == identity.userID
        else { return answer }
        let bucket = PendingCode.bucket(.passwordReset, userID: identity.userID)
        if limit.count > 0 {
            // Over the limit, nothing is sent, and the answer does not say so.
            guard try unit.rateLimitUsage(bucket: bucket, at: now, window: limit.window) < limit.count else {
                return answer
            }
            try unit.recordRateLimitedUse(bucket: bucket, at: now, window: limit.window)
        }
        try code.issue(to: identity.userID, email: email, in: unit, events: events)
        return FlowAnswer(result: answer.result, userID: identity.userID, sessionID: nil)
    }
}

/// `password_reset`, ready to write.
struct PasswordReset: PreparedWrite {
    let requestID: String
    let presented: PresentedCode
    let newPassword: NewPasswordCheck
    let newHash: String
    let pending: PendingSession
    let device: LoginRequestData.Device?
    let mfa: MFAGate?
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch { Prefetch() }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let record: OneTimeCodeRecord
        switch try presented.spend(in: unit, at: now, requestID: requestID) {
        case .refused(let answer): return answer
        case .spent(let found): record = found
        }
        // A link token names no address before the write: the new password is checked against it here.
        try newPassword.check(email: record.email)
        let reach = try MailboxProof.reach(record.email, in: unit, detaching: events)
        guard var identity = try unit.identity(provider: "password", subject: record.email),
            identity.userID == record.userID, var user = MailboxProof.user(reach), user.id == identity.userID
        else { throw presented.refusal }
        try unit.resetThrottle(key: "password:" + record.email)
        try unit.appendEvent(try events.passwordChanged(user: user.id, reason: "reset"))
        // Codes sent before the reset protect what it replaced.
        try unit.voidCodes(
            userID: user.id, purposes: [CodePurpose.passwordReset.rawValue, CodePurpose.signIn.rawValue], at: now)
        if case .unproven = reach {
            // The mailbox's owner takes over an account someone else may have registered.
            user = try MailboxProof.claim(
                user, email: record.email, newPasswordHash: newHash, in: unit, events: events, at: now)
            return try pending.open(
                for: user, provider: "password", device: device, newUser: false, requestID: requestID, in: unit)
        }
        // Receiving the code proves the mailbox: the address is verified too. (One update: a
        // flow's reads do not see its own writes.)
        let newlyVerified = !identity.emailVerified
        identity.passwordHash = newHash
        identity.emailVerified = true
        try unit.updateIdentity(identity, lastLoginAt: now)
        try unit.markVerified(email: record.email, user: &user, at: now)
        let ending = try unit.liveSessions(userID: user.id, at: now)
        try unit.revokeSessions(ending, reason: "password_reset", at: now)
        for id in ending {
            try unit.appendEvent(try events.sessionRevoked(user: user.id, session: id, reason: "password_reset"))
        }
        if newlyVerified { try unit.appendEvent(try events.emailVerified(user: user.id, email: record.email)) }
        // The mailbox and a new password are one factor: an account with a second one still
        // needs it for the new session.
        if let mfa,
            let stop = try mfa.answer(
                requestID: requestID, user: user.id, provider: "password", device: device, in: unit, at: now)
        {
            return stop
        }
        return try pending.open(
            for: user, provider: "password", device: device, newUser: false, requestID: requestID, in: unit)
    }
}

/// A new password's strength check, made again in the write once the address is known (a link
/// token names none before).
struct NewPasswordCheck: Sendable {
    let password: String
    let policy: PasswordPolicy
    let field: String

    /// - Throws: `weak_password` naming the field.
    func check(email: String?) throws {
        do {
            try policy.check(password, email: email)
        } catch let weakness as PasswordPolicy.Weakness {
            throw LoginError(.weakPassword, "the password \(weakness.reason)", field: field)
        }
    }
}

/// `change_password`, ready to write.
struct ChangePassword: PreparedWrite {
    let requestID: String
    let token: PresentedAccessToken
    let email: String
    /// The hash the current password was verified against: if it changed since, so did the
    /// password, and this change is refused.
    let verifiedHash: String
    let newHash: String
    let throttleKey: String
    let endOtherSessions: Bool
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch {
        var prefetch = token.prefetch
        prefetch.identities = [IdentityKey(provider: "password", subject: email)]
        return prefetch
    }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let session = try token.session(in: unit, at: now, allowExpired: false, field: "data.access_token")
        guard var identity = try unit.identity(provider: "password", subject: email),
            identity.userID == session.userID, identity.passwordHash == verifiedHash,
            let user = try unit.user(id: session.userID)
        else {
            throw LoginError(
                .invalidCredentials, "the password was changed meanwhile; sign in again", field: "data.password")
        }
        identity.passwordHash = newHash
        try unit.updateIdentity(identity, lastLoginAt: now)
        try unit.resetThrottle(key: throttleKey)
        if endOtherSessions {
            let ending = try unit.liveSessions(userID: user.id, at: now).filter { $0 != session.id }
            try unit.revokeSessions(ending, reason: "password_changed", at: now)
            for id in ending {
                try unit.appendEvent(try events.sessionRevoked(user: user.id, session: id, reason: "password_changed"))
            }
        }
        try unit.appendEvent(try events.passwordChanged(user: user.id, reason: "change"))
        // A reset or sign-in code sent before the change would undo it.
        try unit.voidCodes(
            userID: user.id, purposes: [CodePurpose.passwordReset.rawValue, CodePurpose.signIn.rawValue], at: now)
        return FlowAnswer(
            result: .accepted(requestID: requestID, user: user.payload), userID: user.id, sessionID: session.id)
    }
}

extension UnitOfWork {
    /// Marks `email` verified on the user, when it is the user's address.
    func markVerified(email: String, user: inout StoredUser, at now: Date) throws {
        if let current = user.email, EmailAddress.normalize(current) == email, !user.emailVerified {
            user.emailVerified = true
            try updateUser(user, upgradedAt: nil, at: now)
        }
    }
}

// MARK: - Signing in with a code

extension LoginFlows {
    /// `email_code_request`: a sign-in code for an address's account (or, with
    /// `AUTH_EMAIL_CODE_SIGNUP`, for an address with none); answered the same either way.
    func prepareEmailCodeRequest(_ request: LoginRequest) throws -> any PreparedWrite {
        let keys = try codeKeys()
        guard let email = EmailAddress.normalize(request.data.email ?? "") else {
            throw LoginError(.malformedRequest, "not a valid e-mail address", field: "data.email")
        }
        let now = clock.now()
        return EmailCodeRequest(
            requestID: request.id, email: email, code: try pendingCode(.signIn, keys: keys, at: now),
            limit: configuration.emailCodes.sendLimit, signUp: configuration.emailCodes.signUp,
            events: events(for: request, at: now), now: now)
    }

    /// `email_code`: the code (with the address) or link token signs in, creating the account when
    /// the code was sent to an address without one.
    func prepareEmailCodeSignIn(_ request: LoginRequest) throws -> any PreparedWrite {
        let keys = try codeKeys()
        let now = clock.now()
        let name = (request.data.email ?? "").split(separator: "@").first.map(String.init) ?? "user"
        return EmailCodeSignIn(
            requestID: request.id, presented: try presentedCode(request, purpose: .signIn, keys: keys),
            newUserID: try identifiers.uuid(), handles: try handleCandidates(name: name, isGuest: false),
            pending: try pendingSession(at: now, isGuest: false), device: request.data.device, mfa: mfaGate(),
            events: events(for: request, at: now), now: now)
    }
}

/// `email_code_request`, ready to write.
struct EmailCodeRequest: PreparedWrite {
    let requestID: String
    let email: String
    let code: PendingCode
    let limit: WorkerConfiguration.RateLimit
    let signUp: Bool
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch {
        var prefetch = Prefetch()
        prefetch.identities = [
            IdentityKey(provider: "email", subject: email), IdentityKey(provider: "password", subject: email),
        ]
        return prefetch
    }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let answer = FlowAnswer(result: .accepted(requestID: requestID, user: nil), userID: nil, sessionID: nil)
        let owner = MailboxProof.user(try MailboxProof.reach(email, in: unit, detaching: nil))?.id
        guard owner != nil || signUp else { return answer }
        let bucket = owner.map { PendingCode.bucket(.signIn, userID: $0) } ?? "code:email_sign_in:" + email
        if limit.count > 0 {
            guard try unit.rateLimitUsage(bucket: bucket, at: now, window: limit.window) < limit.count else {
                return answer
            }
            try unit.recordRateLimitedUse(bucket: bucket, at: now, window: limit.window)
        }
        try code.issue(to: owner, email: email, in: unit, events: events)
        return answer
    }
}

/// `email_code`, ready to write.
struct EmailCodeSignIn: PreparedWrite {
    let requestID: String
    let presented: PresentedCode
    let newUserID: UUID
    let handles: [String]
    let pending: PendingSession
    let device: LoginRequestData.Device?
    let mfa: MFAGate?
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch { Prefetch() }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let record: OneTimeCodeRecord
        switch try presented.spend(in: unit, at: now, requestID: requestID) {
        case .refused(let answer): return answer
        case .spent(let found): record = found
        }
        let email = record.email
        let proof = NewIdentity(
            provider: "email", subject: email, email: email, emailVerified: true, isPrivateEmail: false,
            passwordHash: nil)
        var user: StoredUser
        var created = false
        // The account the address reaches now: the one the code was sent for, or (a sign-up
        // code) one made since; else a new one for a sign-up code.
        let reach = try MailboxProof.reach(email, in: unit, detaching: events)
        if let existing = MailboxProof.user(reach) {
            if let owner = record.userID, owner != existing.id { throw presented.refusal }
            user = existing
            if case .unproven = reach {
                // Somebody registered this address without proving it: its owner takes the
                // account over, and nothing the other party set up survives.
                user = try MailboxProof.claim(existing, email: email, in: unit, events: events, at: now)
            } else {
                if var password = try unit.identity(provider: "password", subject: email),
                    password.userID == existing.id, !password.emailVerified
                {
                    password.emailVerified = true
                    try unit.updateIdentity(password, lastLoginAt: now)
                }
                try unit.markVerified(email: email, user: &user, at: now)
            }
            if try unit.identity(provider: "email", subject: email) == nil {
                try unit.insertIdentity(proof, userID: user.id, at: now)
                if !user.providers.contains("email") { user.providers.append("email") }
            }
            // A claimed account's factor was the other party's, and is gone (a flow's reads do
            // not see its own writes: the gate is not asked).
            if case .proven = reach, let mfa,
                let stop = try mfa.answer(
                    requestID: requestID, user: user.id, provider: "email", device: device, in: unit, at: now)
            {
                return stop
            }
        } else if record.userID == nil {
            user = try unit.insertUser(
                NewUser(
                    id: newUserID, name: String(email.split(separator: "@").first ?? "user"), email: email,
                    emailVerified: true, isPrivateEmail: false, isGuest: false, createdAt: now),
                handles: handles)
            try unit.insertIdentity(proof, userID: user.id, at: now)
            user.providers = ["email"]
            try unit.appendEvent(try events.userCreated(user, provider: "email"))
            created = true
        } else {
            throw presented.refusal
        }
        return try pending.open(
            for: user, provider: "email", device: device, newUser: created, requestID: requestID, in: unit)
    }
}
