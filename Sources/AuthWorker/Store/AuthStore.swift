import Foundation

/// What the login flows need from storage. PostgreSQL in production; in memory for unit tests.
public protocol AuthStore: Sendable {
    /// Atomically records the request, creates the user, its identity (if any), the session and its
    /// tokens, and writes the events to the outbox.
    ///
    /// The first handle candidate not taken is used.
    /// - Returns: `.duplicate` when the request id was already processed (nothing is written).
    func createAccount(_ plan: NewAccount) async throws -> AccountWrite

    /// Atomically records the request and signs in with a provider identity: finds the identity's
    /// user (updating what the token says) or creates user and identity, then creates the session.
    /// - Returns: `.duplicate` when the request id was already processed (nothing is written).
    func signIn(_ plan: ProviderSignIn) async throws -> SignInWrite

    /// Marks outbox events as published.
    func markPublished(_ eventIDs: [UUID], at date: Date) async throws

    /// Events left unpublished (oldest first), for the relay that runs after a crash.
    func unpublishedEvents(olderThan date: Date, limit: Int) async throws -> [OutboxEvent]
}

/// Everything a new account needs, decided by the flow before the write.
public struct NewAccount: Sendable {
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

/// A provider sign-in, decided by the flow before the write.
public struct ProviderSignIn: Sendable {
    public var requestID: String
    public var method: String
    /// The identity as the token describes it now.
    public var identity: NewIdentity
    /// A name for the user: set on a new user, and on an existing one that has none.
    public var name: String?
    /// The user to create if the identity is new.
    public var newUser: NewUser
    public var handleCandidates: [String]
    public var session: NewSession
    public var now: Date
    public var idempotencyExpiresAt: Date
    /// Events for a newly created user, built once the user is final.
    public var eventsForNewUser: @Sendable (StoredUser) throws -> [OutboxEvent]
    /// Makes the access token once the user id is final (a JWT names its user); the store records
    /// its SHA-256 in `session.accessTokenHash` and returns the token.
    public var issueAccessToken: @Sendable (UUID) throws -> String

    public init(
        requestID: String, method: String, identity: NewIdentity, name: String?, newUser: NewUser,
        handleCandidates: [String], session: NewSession, now: Date, idempotencyExpiresAt: Date,
        issueAccessToken: @escaping @Sendable (UUID) throws -> String,
        eventsForNewUser: @escaping @Sendable (StoredUser) throws -> [OutboxEvent]
    ) {
        self.issueAccessToken = issueAccessToken
        self.requestID = requestID
        self.method = method
        self.identity = identity
        self.name = name
        self.newUser = newUser
        self.handleCandidates = handleCandidates
        self.session = session
        self.now = now
        self.idempotencyExpiresAt = idempotencyExpiresAt
        self.eventsForNewUser = eventsForNewUser
    }
}

/// The outcome of `signIn`.
public enum SignInWrite: Sendable, Equatable {
    /// `accessToken` is the token `issueAccessToken` made: shown once to the client, never stored.
    case signedIn(StoredUser, created: Bool, events: [OutboxEvent], accessToken: String)
    case duplicate
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
