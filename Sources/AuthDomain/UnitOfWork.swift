import Foundation

/// What one batch's flows read and write, inside the batch's one database transaction.
///
/// A flow's write step calls these synchronously, top to bottom: read what it must decide on,
/// then write. Rows read here stay locked until the batch commits, so a decision holds for the
/// writes it leads to, across replicas. Writes are collected and sent with the rest of the
/// batch; reads see every write of the requests before them in the batch, but not the request's
/// own: a flow reads a row before it writes it, and writes it once.
///
/// A flow that throws (a refusal) leaves none of its writes behind.
public protocol UnitOfWork: AnyObject, UserStorage, SessionStorage, CodeStorage, FactorStorage, PasskeyStorage,
    RequestStorage
{}

/// Users and their identities: the accounts, how each signs in, and what the console role of one is. A role of `UnitOfWork`.
public protocol UserStorage {
    /// The identity keyed by (provider, subject).
    func identity(provider: String, subject: String) throws -> IdentityRecord?
    /// Every identity of a user.
    func identities(userID: UUID) throws -> [IdentityRecord]
    /// A user with its providers.
    func user(id: UUID) throws -> StoredUser?
    /// Full accounts (not guests) whose verified, non-relay e-mail is `email`, at most two.
    func usersWithVerifiedEmail(_ email: String) throws -> [UUID]
    /// Everything else stored about a user, for the export (sessions come from `sessionDetails`).
    func accountRecords(userID: UUID) throws -> AccountRecords
    /// Inserts a user with the first of `handles` no other user has; returns it as stored.
    func insertUser(_ user: NewUser, handles: [String]) throws -> StoredUser
    func insertIdentity(_ identity: NewIdentity, userID: UUID, at date: Date) throws
    /// Removes an identity: that way of signing in no longer reaches its user.
    func deleteIdentity(provider: String, subject: String) throws
    /// Stores what an identity proves now (e-mail, verification, a replacement password hash) and
    /// when it was last used.
    func updateIdentity(_ identity: IdentityRecord, lastLoginAt: Date) throws
    /// Stores a user's changed profile (name, e-mail, guest status).
    func updateUser(_ user: StoredUser, upgradedAt: Date?, at date: Date) throws
    /// Deletes users with their identities, sessions and tokens.
    func deleteUsers(_ ids: [UUID]) throws
    /// Records the relay e-mail status Apple reported for an identity.
    func setEmailStatus(provider: String, subject: String, status: String) throws
    /// Disables the user (`at` a date) or enables it again (nil).
    func setUserDisabled(_ id: UUID, at date: Date?) throws
    /// The user's admin console role, if an operator granted one.
    func consoleRole(userID: UUID) throws -> String?
    /// Takes the user's console role away.
    func deleteConsoleRole(userID: UUID) throws
    /// Ends the user's console sessions.
    func deleteConsoleSessions(userID: UUID) throws
}

/// Sessions with their refresh and access tokens. A role of `UnitOfWork`.
public protocol SessionStorage {
    /// The refresh token with this SHA-256, with its session.
    func refreshToken(hash: [UInt8]) throws -> RefreshTokenRecord?
    /// A session by id (JWT access tokens name theirs in `sid`).
    func session(id: UUID) throws -> SessionRecord?
    /// The session an opaque access token (by its SHA-256) belongs to, with the token's own expiry.
    func accessToken(hash: [UInt8]) throws -> AccessTokenRecord?
    /// The user's sessions that are neither revoked nor expired at `date`.
    func liveSessions(userID: UUID, at date: Date) throws -> [UUID]
    /// The user's sessions, with their devices and when each was last refreshed; `live` only those
    /// neither revoked nor expired at `date`.
    func sessionDetails(userID: UUID, live: Bool, at date: Date) throws -> [SessionDetails]
    /// Inserts a session with its first access and refresh tokens (hashes only).
    func insertSession(_ session: NewSession, userID: UUID) throws
    /// Marks a refresh token used, keeping its successor sealed for the grace interval, and
    /// inserts the successor and the new access token.
    func rotate(_ rotation: TokenRotation) throws
    /// Records that an opaque access token was presented.
    func recordAccessTokenUse(tokenID: UUID, at date: Date) throws
    /// Ends sessions.
    func revokeSessions(_ ids: [UUID], reason: String, at date: Date) throws
}

/// One-time codes sent by e-mail. A role of `UnitOfWork`.
public protocol CodeStorage {
    /// The newest unused one-time code sent to an address (normalised) for a purpose.
    func liveCode(email: String, purpose: String) throws -> OneTimeCodeRecord?
    /// A one-time code by the SHA-256 of its link token, used or not.
    func code(linkHash: [UInt8]) throws -> OneTimeCodeRecord?
    /// Stores a new one-time code; the user's earlier unused codes for the purpose stop working.
    func insertCode(_ code: NewOneTimeCode) throws
    /// Counts a wrong guess of a code.
    func recordCodeAttempt(id: UUID) throws
    /// Marks a code used: it never works again.
    func useCode(id: UUID, at date: Date) throws
    /// Marks every unused code of the user's for these purposes used: what they protected changed.
    func voidCodes(userID: UUID, purposes: [String], at date: Date) throws
}

/// The second factor and its recovery codes. A role of `UnitOfWork`.
public protocol FactorStorage {
    /// The user's second factor, pending or active.
    func mfaFactor(userID: UUID) throws -> MFAFactorRecord?
    /// True when `hash` is one of the user's recovery codes and unused.
    func hasUnusedRecoveryCode(userID: UUID, hash: [UInt8]) throws -> Bool
    /// Stores a pending (not yet active) second factor, replacing a pending one.
    func savePendingFactor(userID: UUID, secretSealed: [UInt8], at date: Date) throws
    /// Activates the user's factor at `step` (its first code) and stores its recovery codes' hashes.
    func enableFactor(userID: UUID, step: Int64, recoveryHashes: [[UInt8]], at date: Date) throws
    /// Records the step of a code just accepted: it and every earlier step are refused from now.
    func recordFactorStep(userID: UUID, step: Int64) throws
    /// Marks a recovery code used.
    func useRecoveryCode(userID: UUID, hash: [UInt8], at date: Date) throws
    /// Removes the user's factor and recovery codes.
    func deleteFactor(userID: UUID) throws
}

/// Passkeys, their user handles, and the ceremonies' challenges. A role of `UnitOfWork`.
public protocol PasskeyStorage {
    /// The user's WebAuthn handle, when one was made.
    func passkeyHandle(userID: UUID) throws -> [UInt8]?
    /// The user a WebAuthn handle belongs to.
    func userID(passkeyHandle handle: [UInt8]) throws -> UUID?
    func insertPasskeyHandle(userID: UUID, handle: [UInt8]) throws
    /// A ceremony's challenge by its SHA-256, locked; nil once answered (or purged).
    func passkeyChallenge(hash: [UInt8]) throws -> PasskeyChallengeRecord?
    func insertPasskeyChallenge(_ challenge: PasskeyChallengeRecord, at date: Date) throws
    /// Answers a challenge: it cannot be used again.
    func consumePasskeyChallenge(hash: [UInt8]) throws
    /// The user's passkeys, oldest first.
    func passkeys(userID: UUID) throws -> [PasskeyRecord]
    /// A passkey by its credential id, locked.
    func passkey(credentialID: [UInt8]) throws -> PasskeyRecord?
    /// A passkey by its id, locked.
    func passkey(id: UUID) throws -> PasskeyRecord?
    func insertPasskey(_ passkey: PasskeyRecord) throws
    /// A sign-in's new counter, backup state and time.
    func recordPasskeyUse(id: UUID, signCount: UInt32, backedUp: Bool, at date: Date) throws
    func renamePasskey(id: UUID, name: String) throws
    func deletePasskey(id: UUID) throws
    /// Forgets the user's WebAuthn handle: a credential an authenticator still keeps under it
    /// names no account, and the next registration makes a new one.
    func deletePasskeyHandle(userID: UUID) throws
    /// Drops the user's unanswered ceremony challenges.
    func deletePasskeyChallenges(userID: UUID) throws
}

/// What a request leaves besides its effects: rate-limit counts, the outbox, the audit trail, Apple's jobs, the kept answer. A role of `UnitOfWork`.
public protocol RequestStorage {
    /// Uses of a rate-limited action in the window that contains `date`, before this request,
    /// and when that window ends.
    func rateLimitWindow(bucket: String, at date: Date, window: TimeInterval) throws -> RateLimitWindow
    /// True when a request id (or a notification's key) was recorded before this one.
    func isRecorded(requestID: String) throws -> Bool
    /// The Apple refresh token kept for an Apple subject.
    func appleToken(subject: String) throws -> AppleTokenRecord?
    /// Counts one use of a rate-limited action.
    func recordRateLimitedUse(bucket: String, at date: Date, window: TimeInterval) throws
    /// Forgets an account's failed password attempts.
    func resetThrottle(key: String) throws
    /// Writes an event to the outbox, to be published after the commit.
    func appendEvent(_ event: OutboxEvent) throws
    /// Adds a row to the audit trail.
    func recordAudit(_ entry: AuditEntry) throws
    /// Queues a job for Apple's REST API, due at once.
    func enqueueAppleJob(_ job: AppleJob) throws
    /// Forgets the Apple refresh token of a subject.
    func deleteAppleToken(subject: String) throws
    /// Records a processed request (or notification) with its sealed answer, so a redelivery is
    /// answered again and never acted on twice.
    func recordRequest(_ record: RequestRecord) throws
}
