import Foundation
import Kafka

/// What the login flows need from storage. PostgreSQL in production; in memory for unit tests.
public protocol AuthStore: Sendable {
    /// Atomically records the request, creates the user, its identity (if any), the session and its
    /// tokens, and writes the events to the outbox.
    ///
    /// The first handle candidate not taken is used.
    /// - Returns: `.duplicate` when the request id was already processed (nothing is written).
    func createAccount(_ plan: NewAccount) async throws -> AccountWrite

    /// Atomically records the request and signs in with an identity: finds the identity's user
    /// (updating what the request proves), or attaches the identity to `linkTo`, or creates the
    /// user, as `mode` allows; then creates the session and writes the events.
    func signIn(_ plan: SignInPlan) async throws -> SignInWrite

    /// The password credential of a normalised e-mail address, if one is registered.
    func passwordCredential(email: String) async throws -> PasswordCredential?

    /// What a password login needs first: the account's throttle state and its credential (nil
    /// for an unknown or implausible e-mail), in one round trip where the store can.
    func passwordLogin(email: String?, throttleKey: String) async throws -> (
        credential: PasswordCredential?, throttle: ThrottleState?
    )

    /// The throttle state of an account key.
    func throttle(key: String) async throws -> ThrottleState?

    /// Counts a failed attempt and applies `policy`; returns the new state. Shared by all replicas.
    func recordFailedAttempt(key: String, at date: Date, policy: ThrottlePolicy) async throws -> ThrottleState

    /// Counts one use of a rate-limited action; returns the count in the current window.
    func countRateLimited(bucket: String, at date: Date, window: TimeInterval) async throws -> Int

    /// The session an opaque access token (by its SHA-256) belongs to.
    func accessToken(hash: [UInt8]) async throws -> AccessTokenRecord?

    /// The session with this id (for JWT access tokens), as an access-token record with its expiry.
    func session(id: UUID) async throws -> AccessTokenRecord?

    /// Rotates a refresh token, replays its successor within the grace interval, or ends the
    /// session family on a later reuse; one transaction.
    func refresh(_ plan: RefreshPlan) async throws -> RefreshWrite

    /// Ends one session, or every live session of its user; writes the plan's events.
    func logout(_ plan: LogoutPlan) async throws -> LogoutWrite

    /// The sealed answer of a processed request, if one was kept (and not yet expired).
    func storedResult(requestID: String) async throws -> [UInt8]?

    /// Forgets processed requests past their expiry; returns how many.
    func purgeExpiredRequests(before date: Date) async throws -> Int

    /// Marks outbox events as published.
    func markPublished(_ eventIDs: [UUID], at date: Date) async throws

    /// Events left unpublished (oldest first), for the relay that runs after a crash.
    func unpublishedEvents(olderThan date: Date, limit: Int) async throws -> [OutboxEvent]
}

/// What a write did, for building the result it answers with.
public enum KeepDetails: Sendable {
    case account
    case signIn(SignInKind, accessToken: String)
    case refresh(IssuedTokens)
    case logout(revoked: [UUID])
}

/// Builds the answer inside the write's transaction and returns it sealed (or nil to keep
/// nothing): the store keeps it with the request id in the same commit, so a redelivered request
/// always finds the answer its effects belong to.
public typealias ResultKeeper = @Sendable (StoredUser, KeepDetails) throws -> [UInt8]?

/// Everything a new account needs, decided by the flow before the write.
public struct NewAccount: Sendable {
    /// Builds and seals the answer inside the transaction. Default: none.
    public var keep: ResultKeeper?
    public var requestID: String
    public var method: String
    public var user: NewUser
    /// Handles to try in order; the flow generates a few so a collision costs no round trip to it.
    public var handleCandidates: [String]
    public var identity: NewIdentity?
    public var session: NewSession
    /// Until when the request id is remembered.
    public var idempotencyExpiresAt: Date
    /// Builds the events once the user (and its handle) is final.
    public var events: @Sendable (StoredUser) throws -> [OutboxEvent]

    public init(
        requestID: String, method: String, user: NewUser, handleCandidates: [String], identity: NewIdentity?,
        session: NewSession, idempotencyExpiresAt: Date,
        events: @escaping @Sendable (StoredUser) throws -> [OutboxEvent]
    ) {
        self.requestID = requestID
        self.method = method
        self.user = user
        self.handleCandidates = handleCandidates
        self.identity = identity
        self.session = session
        self.idempotencyExpiresAt = idempotencyExpiresAt
        self.events = events
    }
}

/// The outcome of `createAccount`.
public enum AccountWrite: Sendable, Equatable {
    case created(StoredUser, events: [OutboxEvent])
    case duplicate
}

/// How a sign-in may treat the identity it names.
public enum SignInMode: Sendable, Equatable {
    /// Find the identity's user, or create one (provider logins).
    case findOrCreate
    /// The identity must already exist (password logins).
    case findOnly
    /// The identity must not exist yet (registration): an existing one is `identityTaken`.
    case createOnly
}

/// What happened to the account in a sign-in, for the events and the result.
public enum SignInKind: Sendable, Equatable {
    /// An existing identity signed in.
    case existing
    /// A new user was created with the identity.
    case created
    /// A guest user got the identity and became a full account.
    case upgraded
    /// The identity was added to an existing full account.
    case linked
}

/// A sign-in with an identity (provider, password or registration), decided by the flow before the write.
public struct SignInPlan: Sendable {
    /// Builds and seals the answer inside the transaction. Default: none.
    public var keep: ResultKeeper?
    public var requestID: String
    public var method: String
    public var mode: SignInMode
    /// The identity as the request proves it now.
    public var identity: NewIdentity
    /// A name for the user: set on a new user, and on an existing one that has none.
    public var name: String?
    /// The user to create if the identity is new and not linked.
    public var newUser: NewUser
    public var handleCandidates: [String]
    /// Attach a new identity to this user (a signed-in account, typically a guest) instead of creating one.
    public var linkTo: UUID?
    /// Attach a new identity to the one existing full account with the same verified, non-relay e-mail.
    public var linkByVerifiedEmail = false
    /// Password logins: the throttle row to clear on success.
    public var resetThrottleKey: String?
    /// Password logins: a fresh hash to store (the old one was outdated).
    public var replacementPasswordHash: String?
    public var session: NewSession
    public var now: Date
    public var idempotencyExpiresAt: Date
    /// Makes the access token once the user id is final (a JWT names its user); the store records
    /// its SHA-256 in `session.accessTokenHash` and returns the token.
    public var issueAccessToken: @Sendable (UUID) throws -> String
    /// The events to write with the change, once the user and what happened are final.
    public var events: @Sendable (StoredUser, SignInKind) throws -> [OutboxEvent]

    public init(
        requestID: String, method: String, mode: SignInMode, identity: NewIdentity, name: String?, newUser: NewUser,
        handleCandidates: [String], session: NewSession, now: Date, idempotencyExpiresAt: Date,
        issueAccessToken: @escaping @Sendable (UUID) throws -> String,
        events: @escaping @Sendable (StoredUser, SignInKind) throws -> [OutboxEvent]
    ) {
        self.requestID = requestID
        self.method = method
        self.mode = mode
        self.identity = identity
        self.name = name
        self.newUser = newUser
        self.handleCandidates = handleCandidates
        self.session = session
        self.now = now
        self.idempotencyExpiresAt = idempotencyExpiresAt
        self.issueAccessToken = issueAccessToken
        self.events = events
    }
}

/// The outcome of `signIn`.
public enum SignInWrite: Sendable, Equatable {
    /// `accessToken` is the token `issueAccessToken` made: shown once to the client, never stored.
    case signedIn(StoredUser, kind: SignInKind, events: [OutboxEvent], accessToken: String)
    /// The request id was already processed; nothing was written.
    case duplicate
    /// `createOnly`: the identity exists already. Nothing was written.
    case identityTaken
    /// `findOnly`: the identity does not exist (any more). Nothing was written.
    case identityMissing
    /// `linkTo`: the identity belongs to another account, or the target is gone. Nothing was written.
    case linkConflict
}

extension AuthStore {
    public func passwordLogin(email: String?, throttleKey: String) async throws -> (
        credential: PasswordCredential?, throttle: ThrottleState?
    ) {
        let throttle = try await self.throttle(key: throttleKey)
        guard let email else { return (nil, throttle) }
        return (try await passwordCredential(email: email), throttle)
    }
}

/// What a refresh needs to know about the token's session to issue the next tokens.
public struct RefreshContext: Sendable, Equatable {
    public var userID: UUID
    public var sessionID: UUID
    public var isGuest: Bool
    public var abilities: [String]
    public var deviceName: String?
    public var sessionExpiresAt: Date
}

/// The next access and refresh tokens, ready to store (hashes) and to return (the payload).
public struct IssuedTokens: Sendable, Equatable {
    public var accessTokenID: UUID
    public var accessTokenHash: [UInt8]
    public var accessTokenExpiresAt: Date
    public var refreshTokenID: UUID
    public var refreshTokenHash: [UInt8]
    public var refreshTokenExpiresAt: Date
    /// The tokens for the client; never stored as such.
    public var payload: SessionPayloadSecrets
    /// The payload encrypted under a key derived from the parent refresh token.
    public var sealedForReplay: [UInt8]

    public init(
        accessTokenID: UUID, accessTokenHash: [UInt8], accessTokenExpiresAt: Date, refreshTokenID: UUID,
        refreshTokenHash: [UInt8], refreshTokenExpiresAt: Date, payload: SessionPayloadSecrets, sealedForReplay: [UInt8]
    ) {
        self.accessTokenID = accessTokenID
        self.accessTokenHash = accessTokenHash
        self.accessTokenExpiresAt = accessTokenExpiresAt
        self.refreshTokenID = refreshTokenID
        self.refreshTokenHash = refreshTokenHash
        self.refreshTokenExpiresAt = refreshTokenExpiresAt
        self.payload = payload
        self.sealedForReplay = sealedForReplay
    }
}

/// A session payload (the tokens a client receives), kept opaque to descriptions.
public struct SessionPayloadSecrets: Sendable, Equatable, CustomStringConvertible {
    public var json: [UInt8]
    public init(json: [UInt8]) { self.json = json }
    public var description: String { "SessionPayloadSecrets(<redacted>)" }
}

/// A refresh, decided by the flow before the write.
public struct RefreshPlan: Sendable {
    /// Builds and seals the answer inside the transaction. Default: none.
    public var keep: ResultKeeper?
    public var requestID: String
    public var tokenHash: [UInt8]
    public var now: Date
    /// A reuse this soon after the rotation replays the successor instead of failing.
    public var grace: TimeInterval
    public var idempotencyExpiresAt: Date
    /// Makes the next tokens once the session is known.
    public var issue: @Sendable (RefreshContext) throws -> IssuedTokens
    /// The events of a reuse detection (the session family ends).
    public var reuseEvents: @Sendable (RefreshContext) throws -> [OutboxEvent]

    public init(
        requestID: String, tokenHash: [UInt8], now: Date, grace: TimeInterval, idempotencyExpiresAt: Date,
        issue: @escaping @Sendable (RefreshContext) throws -> IssuedTokens,
        reuseEvents: @escaping @Sendable (RefreshContext) throws -> [OutboxEvent]
    ) {
        self.requestID = requestID
        self.tokenHash = tokenHash
        self.now = now
        self.grace = grace
        self.idempotencyExpiresAt = idempotencyExpiresAt
        self.issue = issue
        self.reuseEvents = reuseEvents
    }
}

/// The outcome of `refresh`.
public enum RefreshWrite: Sendable, Equatable {
    /// New tokens were issued.
    case rotated(StoredUser, IssuedTokens)
    /// The token was rotated moments ago: here is its successor, sealed as stored.
    case replayed(StoredUser, sealed: [UInt8])
    /// The token was reused after the grace interval: its session is ended.
    case reused(events: [OutboxEvent])
    /// Unknown, expired, or its session ended.
    case invalid
    case duplicate
}

/// A logout, decided by the flow.
public struct LogoutPlan: Sendable {
    /// Builds and seals the answer inside the transaction. Default: none.
    public var keep: ResultKeeper?
    public var requestID: String
    public var sessionID: UUID
    /// Every live session of the session's user, not only this one.
    public var allSessions: Bool
    public var now: Date
    public var idempotencyExpiresAt: Date
    /// The `auth.session.revoked` event of each ended session.
    public var events: @Sendable (_ userID: UUID, _ sessionIDs: [UUID]) throws -> [OutboxEvent]

    public init(
        requestID: String, sessionID: UUID, allSessions: Bool, now: Date, idempotencyExpiresAt: Date,
        events: @escaping @Sendable (UUID, [UUID]) throws -> [OutboxEvent]
    ) {
        self.requestID = requestID
        self.sessionID = sessionID
        self.allSessions = allSessions
        self.now = now
        self.idempotencyExpiresAt = idempotencyExpiresAt
        self.events = events
    }
}

/// The outcome of `logout`.
public enum LogoutWrite: Sendable, Equatable {
    case loggedOut(StoredUser, revoked: [UUID], events: [OutboxEvent])
    case unknownSession
    case duplicate
}

/// A stored password credential.
public struct PasswordCredential: Sendable, Equatable {
    public var userID: UUID
    public var passwordHash: String

    public init(userID: UUID, passwordHash: String) {
        self.userID = userID
        self.passwordHash = passwordHash
    }
}

/// Failed password attempts of one account.
public struct ThrottleState: Sendable, Equatable {
    public var failures: Int
    public var lockedUntil: Date?

    public init(failures: Int, lockedUntil: Date?) {
        self.failures = failures
        self.lockedUntil = lockedUntil
    }
}

/// When failed password attempts lock an account, and for how long.
public struct ThrottlePolicy: Sendable, Equatable {
    /// Failures before the first lock. Env: `AUTH_LOGIN_MAX_FAILURES`. Default: 5.
    public var threshold = 5
    /// First lock; each further failure doubles it. Env: `AUTH_LOGIN_LOCK_SECONDS`. Default: 15 s.
    public var baseDelay: TimeInterval = 15
    /// Longest lock. Env: `AUTH_LOGIN_LOCK_MAX_SECONDS`. Default: 15 min.
    public var maximumDelay: TimeInterval = 900
    /// Failures older than this are forgotten. Default: 24 h.
    public var window: TimeInterval = 86400

    public init() {}

    /// The lock after `failures` failures, or nil below the threshold.
    public func lock(afterFailures failures: Int) -> TimeInterval? {
        guard failures >= threshold else { return nil }
        let exponent = min(failures - threshold, 30)
        return min(baseDelay * pow(2, Double(exponent)), maximumDelay)
    }
}

/// What an access token presented as `link_to` (or for logout) refers to.
public struct AccessTokenRecord: Sendable, Equatable {
    public var userID: UUID
    public var sessionID: UUID
    public var expiresAt: Date
    public var sessionRevoked: Bool
    public var isGuest: Bool

    public init(userID: UUID, sessionID: UUID, expiresAt: Date, sessionRevoked: Bool, isGuest: Bool) {
        self.userID = userID
        self.sessionID = sessionID
        self.expiresAt = expiresAt
        self.sessionRevoked = sessionRevoked
        self.isGuest = isGuest
    }
}

/// A user to insert.
public struct NewUser: Sendable, Equatable {
    public var id: UUID
    public var name: String?
    public var email: String?
    public var emailVerified: Bool
    public var isPrivateEmail: Bool
    public var isGuest: Bool
    public var createdAt: Date

    public init(
        id: UUID, name: String?, email: String?, emailVerified: Bool, isPrivateEmail: Bool, isGuest: Bool,
        createdAt: Date
    ) {
        self.id = id
        self.name = name
        self.email = email
        self.emailVerified = emailVerified
        self.isPrivateEmail = isPrivateEmail
        self.isGuest = isGuest
        self.createdAt = createdAt
    }
}

/// A user as stored.
public struct StoredUser: Sendable, Equatable {
    public var id: UUID
    public var handle: String
    public var name: String?
    public var email: String?
    public var emailVerified: Bool
    public var isPrivateEmail: Bool
    public var isGuest: Bool
    public var providers: [String]
    public var createdAt: Date

    public init(
        id: UUID, handle: String, name: String?, email: String?, emailVerified: Bool, isPrivateEmail: Bool,
        isGuest: Bool, providers: [String], createdAt: Date
    ) {
        self.id = id
        self.handle = handle
        self.name = name
        self.email = email
        self.emailVerified = emailVerified
        self.isPrivateEmail = isPrivateEmail
        self.isGuest = isGuest
        self.providers = providers
        self.createdAt = createdAt
    }
}

/// A way of signing in, keyed by (provider, subject).
public struct NewIdentity: Sendable, Equatable {
    public var provider: String
    public var subject: String
    public var email: String?
    public var emailVerified: Bool
    public var isPrivateEmail: Bool
    public var passwordHash: String?

    public init(
        provider: String, subject: String, email: String?, emailVerified: Bool, isPrivateEmail: Bool,
        passwordHash: String?
    ) {
        self.provider = provider
        self.subject = subject
        self.email = email
        self.emailVerified = emailVerified
        self.isPrivateEmail = isPrivateEmail
        self.passwordHash = passwordHash
    }
}

/// A session and its first tokens. Tokens appear only as SHA-256 hashes.
public struct NewSession: Sendable, Equatable {
    public var id: UUID
    public var provider: String
    public var deviceName: String?
    public var devicePlatform: String?
    public var abilities: [String]
    public var createdAt: Date
    public var expiresAt: Date
    public var accessTokenID: UUID
    public var accessTokenHash: [UInt8]
    public var accessTokenExpiresAt: Date
    public var refreshTokenID: UUID
    public var refreshTokenHash: [UInt8]
    public var refreshTokenExpiresAt: Date

    public init(
        id: UUID, provider: String, deviceName: String?, devicePlatform: String?, abilities: [String], createdAt: Date,
        expiresAt: Date, accessTokenID: UUID, accessTokenHash: [UInt8], accessTokenExpiresAt: Date,
        refreshTokenID: UUID, refreshTokenHash: [UInt8], refreshTokenExpiresAt: Date
    ) {
        self.id = id
        self.provider = provider
        self.deviceName = deviceName
        self.devicePlatform = devicePlatform
        self.abilities = abilities
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.accessTokenID = accessTokenID
        self.accessTokenHash = accessTokenHash
        self.accessTokenExpiresAt = accessTokenExpiresAt
        self.refreshTokenID = refreshTokenID
        self.refreshTokenHash = refreshTokenHash
        self.refreshTokenExpiresAt = refreshTokenExpiresAt
    }
}

/// An event to publish, as written to the outbox.
public struct OutboxEvent: Sendable, Equatable {
    public var id: UUID
    public var topic: String
    public var key: String
    /// The CloudEvent JSON.
    public var payload: [UInt8]
    public var createdAt: Date

    public init(id: UUID, topic: String, key: String, payload: [UInt8], createdAt: Date) {
        self.id = id
        self.topic = topic
        self.key = key
        self.payload = payload
        self.createdAt = createdAt
    }
}

extension OutboxEvent {
    /// The Kafka record that publishes this event.
    public var record: ProducerRecord {
        ProducerRecord(
            topic: topic, key: Array(key.utf8), value: payload,
            headers: [KafkaHeader(key: "content-type", string: "application/cloudevents+json")])
    }
}
