import Foundation
import Messages
import Passwords

/// What proving the mailbox of an address reaches: the rule every flow that signs in (or
/// verifies) by a code sent to an address follows, so an account registered by somebody else
/// with that address is never handed to its rightful owner with the other party still inside.
///
/// - An account already proven for the address (its e-mail identity, a verified password
///   identity, or a user address verified by a provider) is simply reached.
/// - An account whose own address is the one proven and was never verified is **claimed**: the
///   prover becomes its owner, and everything an unproven party may have set up ends in the same
///   transaction (`claim`).
/// - An account that merely carries the address as an unverified extra password identity, while
///   its own address is another, is **not merged**: that identity is taken off it (it never
///   proved the address), and the address counts as having no account.
enum MailboxProof {
    /// The account a proof of `email`'s mailbox reaches, if any.
    enum Reach {
        /// An account already proven for the address.
        case proven(StoredUser)
        /// An account whose address was never verified: to be claimed.
        case unproven(StoredUser)
    }

    /// Finds the account a proof of `email` reaches.
    /// - Parameter detaching: the events to announce with when an unproven extra identity is
    ///   taken off the account it sits on (`auth.identity.unlinked`, reason `address_unproven`);
    ///   nil only looks (before the mailbox is proven: sending a code).
    static func reach(_ email: String, in unit: any UnitOfWork, detaching events: EventFactory?) throws -> Reach? {
        if let proof = try unit.identity(provider: "email", subject: email), let user = try unit.user(id: proof.userID)
        {
            return .proven(user)
        }
        guard let password = try unit.identity(provider: "password", subject: email),
            let user = try unit.user(id: password.userID)
        else { return nil }
        if password.emailVerified { return .proven(user) }
        if isOwnAddress(email, of: user) { return user.emailVerified ? .proven(user) : .unproven(user) }
        guard let events else { return nil }
        try unit.deleteIdentity(provider: "password", subject: email)
        try unit.appendEvent(
            try events.identityUnlinked(user: user.id, provider: "password", subject: email, reason: "address_unproven")
        )
        return nil
    }

    /// The account's user, whichever way it was reached.
    static func user(_ reach: Reach?) -> StoredUser? {
        switch reach {
        case .proven(let user), .unproven(let user): user
        case nil: nil
        }
    }

    /// Whether `email` is the user's own address.
    static func isOwnAddress(_ email: String, of user: StoredUser) -> Bool {
        user.email.flatMap(EmailAddress.normalize) == email
    }

    /// The owner of `email`'s mailbox takes over `user`, whose address was never verified: every
    /// way into the account (`AccountAccess`, walked whole) that does not itself prove this
    /// address ends in this transaction. Sessions end (`auth.session.revoked`, reason
    /// `account_claimed`), the password set before verification is dropped (or replaced by
    /// `newPasswordHash`), other identities are taken off (`auth.identity.unlinked`), passkeys are
    /// removed (`auth.passkey.removed`), the second factor too, pending codes and ceremony
    /// challenges are voided, and a console role and its sessions end. The address is then verified.
    /// - Parameters:
    ///   - keepingSession: a session of the prover's own (`verify_email` with the registrant's
    ///     access token): it stays.
    /// - Returns: the user as it is now.
    static func claim(
        _ user: StoredUser, email: String, newPasswordHash: String? = nil, keepingSession: UUID? = nil,
        in unit: any UnitOfWork, events: EventFactory, at now: Date
    ) throws -> StoredUser {
        var claimed = user
        for access in AccountAccess.allCases {
            switch access {
            case .identities:
                claimed.providers = try claimIdentities(
                    of: user.id, email: email, newPasswordHash: newPasswordHash, in: unit, events: events, at: now)
                // The number was proven by whoever held the account: its identity went with the rest.
                if !claimed.providers.contains("phone") { claimed.phone = nil }
            case .passkeys:
                for passkey in try unit.passkeys(userID: user.id) {
                    try unit.deletePasskey(id: passkey.id)
                    try unit.appendEvent(
                        try events.passkeyRemoved(user: user.id, passkey: passkey, reason: "account_claimed"))
                }
                try unit.deletePasskeyHandle(userID: user.id)
            case .secondFactor:
                if try unit.mfaFactor(userID: user.id) != nil {
                    try unit.deleteFactor(userID: user.id)
                    try unit.appendEvent(try events.mfaChanged(user: user.id, enabled: false))
                }
            case .sessions:
                let ending = try unit.liveSessions(userID: user.id, at: now).filter { $0 != keepingSession }
                try unit.revokeSessions(ending, reason: "account_claimed", at: now)
                for id in ending {
                    try unit.appendEvent(
                        try events.sessionRevoked(user: user.id, session: id, reason: "account_claimed"))
                }
            case .pendingCodes:
                try unit.voidCodes(userID: user.id, purposes: CodePurpose.allCases.map(\.rawValue), at: now)
            case .passkeyChallenges:
                try unit.deletePasskeyChallenges(userID: user.id)
            case .consoleRole:
                // Granted to whoever held the account before its address was proven.
                if let role = try unit.consoleRole(userID: user.id) {
                    try unit.deleteConsoleRole(userID: user.id)
                    try unit.recordAudit(
                        AuditEntry(
                            at: now, userID: user.id, action: "account.console_role_removed", outcome: role,
                            actor: "account_claimed"))
                }
            case .consoleSessions:
                try unit.deleteConsoleSessions(userID: user.id)
            }
        }
        claimed.email = email
        claimed.emailVerified = true
        claimed.isPrivateEmail = false
        try unit.updateUser(claimed, upgradedAt: nil, at: now)
        try unit.appendEvent(try events.emailVerified(user: user.id, email: email))
        return claimed
    }

    /// The claim's identities: the password identity of `email` is proven (its password dropped
    /// or replaced), identities that prove the same address stay, every other is taken off.
    /// - Returns: the providers the account signs in with now.
    private static func claimIdentities(
        of userID: UUID, email: String, newPasswordHash: String?, in unit: any UnitOfWork, events: EventFactory,
        at now: Date
    ) throws -> [String] {
        var providers: [String] = []
        for identity in try unit.identities(userID: userID) {
            if identity.provider == "password", identity.subject == email {
                var proven = identity
                proven.passwordHash = newPasswordHash
                proven.emailVerified = true
                try unit.updateIdentity(proven, lastLoginAt: now)
            } else if identity.provider == "email" && identity.subject == email
                || identity.provider != "password" && identity.emailVerified
                    && identity.email.flatMap(EmailAddress.normalize) == email
            {
                // It proves the same address: its holder is the mailbox's owner too.
            } else {
                try unit.deleteIdentity(provider: identity.provider, subject: identity.subject)
                try unit.appendEvent(
                    try events.identityUnlinked(
                        user: userID, provider: identity.provider, subject: identity.subject,
                        reason: "account_claimed"))
                continue
            }
            // A password identity without a password (dropped) is no way in until one is set.
            let usable = identity.provider != "password" || identity.subject != email || newPasswordHash != nil
            if usable, !providers.contains(identity.provider) { providers.append(identity.provider) }
        }
        return providers
    }
}
