import AuthCrypto
import Foundation
import JOSE
import Messages
import Passwords

/// `send_verification` and `verify_email`: an address proven with a code or a link.
extension LoginFlows {
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
}

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

// MARK: - Handlers (registered in `LoginMethod.handler`)

extension MethodHandler {
    static let sendVerification = MethodHandler(audited: false, .atOnce { try $0.prepareSendVerification($1) })
    static let verifyEmail = MethodHandler(
        audited: true, .waits { try await $0.prepareVerifyEmail($1) }, reads: .withPassword)
}
