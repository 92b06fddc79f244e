import Foundation

/// Every way into an account, in one list: what a mailbox claim ends (`MailboxProof.claim`), what
/// a deletion removes (each table's rows go with the user, `ON DELETE CASCADE`), and what the
/// account's export shows (`AccountExport`). Each consumer switches over every case, so a new
/// case is handled everywhere or the build fails; and `AccountAccessTests` reads the schema: a
/// table that references `users` (or a session) without joining a case here fails it.
public enum AccountAccess: CaseIterable, Sendable {
    /// Sessions, with their refresh and access tokens.
    case sessions
    /// Password, e-mail, phone and provider identities, with the password hashes (and the
    /// user's `phone`, which is its phone identity's number).
    case identities
    /// Passkeys, and the user handle authenticators keep for the account.
    case passkeys
    /// The TOTP factor and its recovery codes.
    case secondFactor
    /// One-time codes sent by e-mail (verification, reset, sign-in) or texted.
    case pendingCodes
    /// Passkey ceremonies' challenges not answered yet.
    case passkeyChallenges
    /// The admin console role an operator granted.
    case consoleRole
    /// The admin console's sign-in sessions.
    case consoleSessions

    /// The tables that hold it.
    public var tables: [String] {
        switch self {
        case .identities: ["identities"]
        case .passkeys: ["passkeys", "passkey_users"]
        case .secondFactor: ["mfa_factors", "mfa_recovery_codes"]
        case .sessions: ["sessions", "refresh_tokens", "access_tokens"]
        case .pendingCodes: ["one_time_codes"]
        case .passkeyChallenges: ["webauthn_challenges"]
        case .consoleRole: ["admin_roles"]
        case .consoleSessions: ["console_sessions"]
        }
    }

    /// Every table that holds a way in.
    public static var allTables: [String] { allCases.flatMap(\.tables) }
}
