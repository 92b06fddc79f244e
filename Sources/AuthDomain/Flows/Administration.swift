import Foundation
import Messages

/// What support staff and operators do to an account: disable it (its sessions end, its
/// sign-ins and refreshes answer `account_disabled`) and enable it again, and grant the roles of
/// the admin console. The CLI (and the console) call these, so every door does the same thing,
/// with the same events and audit rows naming who acted.
public enum AccountAdministration {
    /// The console's roles: `support` reads and ends sessions; `admin` also disables, removes
    /// factors and deletes.
    public enum Role: String, Sendable, CaseIterable {
        case support, admin
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
    /// - Parameter actor: who acted, for the audit trail (`operator`, or `admin:<email>`).
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
