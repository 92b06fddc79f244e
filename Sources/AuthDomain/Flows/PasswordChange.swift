import AuthCrypto
import Foundation
import JOSE
import Messages
import Passwords

/// `change_password`: a known password changed with the current one.
extension LoginFlows {
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
            try passwordPolicy.check(newPassword, email: email)
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

// MARK: - Handlers (registered in `LoginMethod.handler`)

extension MethodHandler {
    static let changePassword = MethodHandler(
        audited: true, .waits { try await $0.prepareChangePassword($1) }, reads: .always)
}
