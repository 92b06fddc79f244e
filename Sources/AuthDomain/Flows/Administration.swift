import Foundation
import Messages

/// What support staff and operators do to an account: disable it (its sessions end, its
/// sign-ins and refreshes answer `account_disabled`) and enable it again, and grant the roles of
/// the admin console. The CLI (and the console) call these, so every door does the same thing,
/// with the same events and audit rows naming who acted.
public enum AccountAdministration {
    /// The console's roles: `support` reads and ends sessions; `admin` also disables, removes
    /// factors and deletes; both for one tenant's users. `operator` is an admin of every tenant's.
    public enum Role: String, Sendable, CaseIterable {
        case support, admin, `operator`

        /// Whether the role serves every tenant's users, not one tenant's.
        public var isAcrossTenants: Bool { self == .operator }
        /// Whether the role may change accounts (disable, remove factors, delete), not only read them.
        public var mayChangeAccounts: Bool { self != .support }
    }

    /// What a disable or enable did.
    public struct Change: Sendable, Equatable {
        /// False when the account already was as asked.
        public var changed: Bool
        public var sessionsEnded: Int

        package init(changed: Bool, sessionsEnded: Int) {
            self.changed = changed
            self.sessionsEnded = sessionsEnded
        }
    }

    /// Disables (`disabled` true) or enables a user, in the caller's transaction.
    /// - Parameter actor: who acted, for the audit trail (`operator`, or `console:<user id>`).
    /// - Returns: nil when there is no such user.
    package static func setDisabled(
        _ id: UUID, disabled: Bool, actor: String, unit: any UnitOfWork, events: EventFactory
    ) throws -> Change? {
        guard let user = try unit.user(id: id) else { return nil }
        guard user.isDisabled != disabled else { return Change(changed: false, sessionsEnded: 0) }
        let now = events.now
        try unit.setUserDisabled(id, at: disabled ? now : nil)
        var ended = 0
        if disabled {
            let sessions = try unit.liveSessions(userID: id, at: now)
            try unit.revokeSessions(sessions, reason: "account_disabled", at: now)
            for session in sessions {
                try unit.appendEvent(try events.sessionRevoked(user: id, session: session, reason: "account_disabled"))
            }
            ended = sessions.count
        }
        try unit.recordAudit(
            AuditEntry(
                at: now, userID: id, action: disabled ? "operator.account_disable" : "operator.account_enable",
                outcome: "ok", actor: actor))
        return Change(changed: true, sessionsEnded: ended)
    }
}

extension AccountAdministration {
    /// Ends one of a user's live sessions (`only` given) or all of them, each announced as
    /// `auth.session.revoked` with `reason` (`admin`; `logout` for a console user's own sign-out):
    /// its refresh token is refused from then on.
    /// - Returns: how many ended; nil when there is no such user.
    package static func endSessions(
        _ id: UUID, only: UUID?, actor: String, reason: String = "admin", unit: any UnitOfWork, events: EventFactory
    ) throws -> Int? {
        guard try unit.user(id: id) != nil else { return nil }
        let now = events.now
        var sessions = try unit.liveSessions(userID: id, at: now)
        if let only { sessions = sessions.filter { $0 == only } }
        try unit.revokeSessions(sessions, reason: reason, at: now)
        for session in sessions {
            try unit.appendEvent(try events.sessionRevoked(user: id, session: session, reason: reason))
        }
        let action =
            reason == "logout" ? "console.sign_out" : only == nil ? "operator.sessions_end" : "operator.session_end"
        try unit.recordAudit(
            AuditEntry(
                at: now, userID: id, action: action, outcome: sessions.isEmpty ? "none" : "ok", actor: actor))
        return sessions.count
    }

    /// Removes a user's second factor (and its recovery codes), for one who lost it: announced as
    /// `auth.mfa.disabled`, as when the user removes it.
    /// - Returns: whether there was one; nil when there is no such user.
    package static func removeFactor(_ id: UUID, actor: String, unit: any UnitOfWork, events: EventFactory) throws
        -> Bool?
    {
        guard try unit.user(id: id) != nil else { return nil }
        guard try unit.mfaFactor(userID: id) != nil else { return false }
        try unit.deleteFactor(userID: id)
        try unit.appendEvent(try events.mfaChanged(user: id, enabled: false))
        try unit.recordAudit(
            AuditEntry(at: events.now, userID: id, action: "operator.mfa_remove", outcome: "ok", actor: actor))
        return true
    }
}

extension AccountAdministration {
    /// Removes a user's passkeys, one or all (a lost or stolen authenticator, or one the user does
    /// not recognise): each announced as `auth.passkey.removed` (reason `admin`). With all gone,
    /// the account's WebAuthn handle goes too.
    /// - Returns: how many were removed; nil when there is no such user.
    package static func removePasskeys(
        _ id: UUID, only: UUID?, actor: String, unit: any UnitOfWork, events: EventFactory
    ) throws -> Int? {
        guard try unit.user(id: id) != nil else { return nil }
        let all = try unit.passkeys(userID: id)
        let removing = only.map { only in all.filter { $0.id == only } } ?? all
        for passkey in removing {
            try unit.deletePasskey(id: passkey.id)
            try unit.appendEvent(try events.passkeyRemoved(user: id, passkey: passkey, reason: "admin"))
        }
        if removing.count == all.count { try unit.deletePasskeyHandle(userID: id) }
        try unit.recordAudit(
            AuditEntry(
                at: events.now, userID: id, action: "operator.passkeys_remove",
                outcome: removing.isEmpty ? "none" : "ok", actor: actor))
        return removing.count
    }
}

extension LoginFlows {
    /// Resends a user's address-verification code (support, for a user whose mail went astray):
    /// the same code, limit and `auth.email.verification_requested` event as `send_verification`.
    /// - Returns: a write answering whether a code was sent (false: verified already); its write
    ///   returns nil when there is no such user, and throws `LoginError` when the account has no
    ///   address, codes are not enabled or the limit is reached.
    package func verificationResend(
        userID: UUID, actor: String, tenant: String = Tenant.defaultName
    ) throws -> VerificationResend {
        let keys = try codeKeys()
        let now = clock.now()
        var events = EventFactory(configuration, identifiers: identifiers, now: now)
        if tenant != Tenant.defaultName { events.tenant = tenant }
        return VerificationResend(
            userID: userID, actor: actor, code: try pendingCode(.verifyEmail, keys: keys, at: now),
            limit: configuration.emailCodes.sendLimit, events: events, now: now)
    }
}

/// A resend of the verification code, ready to write in the caller's transaction.
package struct VerificationResend: Sendable {
    let userID: UUID
    let actor: String
    let code: PendingCode
    let limit: WorkerConfiguration.RateLimit
    let events: EventFactory
    let now: Date

    package func write(_ unit: any UnitOfWork) throws -> Bool? {
        guard let user = try unit.user(id: userID) else { return nil }
        let sent = try SendVerification.send(
            code, to: user, limit: limit, unit: unit, events: events, at: now, field: "user")
        try unit.recordAudit(
            AuditEntry(
                at: now, userID: userID, action: "operator.verification_resend", outcome: sent ? "ok" : "verified",
                actor: actor))
        return sent
    }
}
