import AuthCrypto
import Foundation
import JOSE
import Messages
import Passwords

/// `password_reset_request` and `password_reset`: a forgotten password reset with a code.
extension LoginFlows {
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
        let check = NewPasswordCheck(password: newPassword, policy: passwordPolicy, field: "data.new_password")
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
}

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

// MARK: - Handlers (registered in `LoginMethod.handler`)

extension MethodHandler {
    static let passwordResetRequest = MethodHandler(audited: false, .atOnce { try $0.preparePasswordResetRequest($1) })
    static let passwordReset = MethodHandler(audited: true, .waits { try await $0.preparePasswordReset($1) })
}
