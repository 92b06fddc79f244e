import AuthCrypto
import Foundation
import JOSE
import Messages
import ServiceKit

/// What the worker publishes for one request.
public struct LoginOutcome: Sendable {
    /// The result for the gateway.
    public var result: LoginResultData
    /// Events already written to the outbox, to publish now.
    public var events: [OutboxEvent]

    public init(result: LoginResultData, events: [OutboxEvent]) {
        self.result = result
        self.events = events
    }
}

/// The login flows: turns a validated request into an outcome, through an `AuthStore`.
///
/// Definite refusals are thrown as `LoginError`; anything else that is thrown (a database that is
/// down) is for the caller to retry.
public struct LoginService: Sendable {
    let configuration: WorkerConfiguration
    let store: any AuthStore
    let accessTokens: any AccessTokenIssuer
    let providers: IdentityProviders
    let passwords: PasswordService?
    let clock: any WorkerClock
    let identifiers: Identifiers
    let logger: Logger

    public init(
        configuration: WorkerConfiguration, store: any AuthStore, accessTokens: any AccessTokenIssuer,
        providers: IdentityProviders = IdentityProviders([]), passwords: PasswordService? = nil,
        clock: any WorkerClock, identifiers: Identifiers, logger: Logger
    ) {
        self.configuration = configuration
        self.store = store
        self.accessTokens = accessTokens
        self.providers = providers
        self.passwords = passwords
        self.clock = clock
        self.identifiers = identifiers
        self.logger = logger
    }

    /// Handles one request.
    /// - Returns: the outcome, or nil when the request id was already processed.
    /// - Throws: `LoginError` for a definite refusal; other errors are transient.
    public func handle(_ request: LoginRequest) async throws -> LoginOutcome? {
        let replyKey = try replyKey(request)
        guard var outcome = try await dispatch(request) else { return nil }
        // Results built inside a write are sealed there; this covers the rest (a refresh replay).
        if let replyKey, let session = outcome.result.session {
            outcome.result.sealedSession = try JWE.sealECDHES(try MessageCoding.encode(session), to: replyKey)
            outcome.result.session = nil
        }
        return outcome
    }

    private func dispatch(_ request: LoginRequest) async throws -> LoginOutcome? {
        switch request.method {
        case .guest:
            return try await guest(request)
        case .apple, .google, .oidc:
            return try await providerSignIn(request)
        case .register:
            return try await register(request)
        case .password:
            return try await passwordLogin(request)
        case .refresh:
            return try await refresh(request)
        case .logout:
            return try await logout(request)
        }
    }

    // MARK: - Guest

    private func guest(_ request: LoginRequest) async throws -> LoginOutcome? {
        let now = clock.now()
        try await checkGuestRateLimit(request, now: now)
        let userID = try identifiers.uuid()
        let user = NewUser(
            id: userID, name: nil, email: nil, emailVerified: false, isPrivateEmail: false, isGuest: true,
            createdAt: now)
        let handles = try (0..<3).map { _ in try identifiers.handle(name: nil, isGuest: true) }
        let pending = try PendingSession(identifiers: identifiers, configuration: configuration, now: now)
        let accessToken = try pending.accessToken(accessTokens: accessTokens, userID: userID, isGuest: true)
        var session = pending.session(provider: "guest", device: request.data.device, isGuest: true)
        session.accessTokenHash = SHA256.hash(accessToken)
        let box = BuiltResult()
        var plan = NewAccount(
            requestID: request.id, method: request.method.rawValue, user: user, handleCandidates: handles,
            identity: nil, session: session,
            idempotencyExpiresAt: now + configuration.sessions.idempotencyLifetime
        ) { [identifiers, configuration] stored in
            let data = UserCreatedData(
                userId: stored.id.lowercasedString, handle: stored.handle, name: stored.name, email: stored.email,
                emailVerified: stored.emailVerified, isPrivateEmail: stored.isPrivateEmail, isGuest: true,
                provider: "guest", createdAt: Timestamp.format(stored.createdAt))
            return [
                try Self.event(
                    type: UserEventType.created, data: data, key: stored.id.lowercasedString, request: request,
                    identifiers: identifiers, configuration: configuration, now: now)
            ]
        }
        let build: @Sendable (StoredUser, KeepDetails) throws -> LoginResultData = { stored, _ in
            .ok(
                requestID: request.id, user: Self.payload(stored), newUser: true,
                session: pending.payload(accessToken: accessToken, isGuest: true))
        }
        plan.keep = try keeper(for: request, box: box, build: build)
        switch try await store.createAccount(plan) {
        case .duplicate:
            return nil
        case .created(let stored, let events):
            logger.info(
                "Guest created",
                metadata: [
                    LogKey.requestID: request.id, LogKey.userID: stored.id.lowercasedString, LogKey.method: "guest",
                ])
            return LoginOutcome(result: try box.result ?? build(stored, .account), events: events)
        }
    }

    // MARK: - Sessions

    /// A session whose ids and refresh token are decided before the write, and whose access token
    /// is made during it, once the user id is final (a sign-in may find an existing user, and a JWT
    /// names its user). The store records the access token's SHA-256 when it makes it.
    struct PendingSession: Sendable {
        let sessionID: UUID
        let accessID: UUID
        let refreshID: UUID
        let refreshToken: String
        let now: Date
        let accessExpiry: Date
        let refreshExpiry: Date
        let sessionExpiry: Date
        let abilitiesGuest: [String]
        let abilitiesMember: [String]

        init(identifiers: Identifiers, configuration: WorkerConfiguration, now: Date) throws {
            let lifetimes = configuration.sessions
            sessionID = try identifiers.uuid()
            accessID = try identifiers.uuid()
            refreshID = try identifiers.uuid()
            refreshToken = "rt_" + (try identifiers.secret(characters: 48))
            self.now = now
            sessionExpiry = now + lifetimes.sessionLifetime
            accessExpiry = min(now + lifetimes.accessTokenLifetime, sessionExpiry)
            refreshExpiry = min(now + lifetimes.refreshTokenLifetime, sessionExpiry)
            abilitiesGuest = lifetimes.guestAbilities
            abilitiesMember = lifetimes.memberAbilities
        }

        func session(provider: String, device: LoginRequestData.Device?, isGuest: Bool) -> NewSession {
            let abilities = isGuest ? abilitiesGuest : abilitiesMember
            return NewSession(
                id: sessionID, provider: provider, deviceName: device?.name, devicePlatform: device?.platform,
                abilities: abilities, createdAt: now, expiresAt: sessionExpiry, accessTokenID: accessID,
                accessTokenHash: [], accessTokenExpiresAt: accessExpiry,
                refreshTokenID: refreshID, refreshTokenHash: SHA256.hash(refreshToken),
                refreshTokenExpiresAt: refreshExpiry)
        }

        func accessToken(accessTokens: any AccessTokenIssuer, userID: UUID, isGuest: Bool) throws -> String {
            try accessTokens.issue(
                AccessTokenClaims(
                    tokenID: accessID, userID: userID, sessionID: sessionID,
                    abilities: isGuest ? abilitiesGuest : abilitiesMember, isGuest: isGuest, issuedAt: now,
                    expiresAt: accessExpiry))
        }

        func payload(accessToken: String, isGuest: Bool) -> SessionPayload {
            SessionPayload(
                accessToken: accessToken, expiresAt: Timestamp.format(accessExpiry), refreshToken: refreshToken,
                refreshExpiresAt: Timestamp.format(refreshExpiry), abilities: isGuest ? abilitiesGuest : abilitiesMember
            )
        }
    }

    // MARK: - Payloads

    static func payload(_ user: StoredUser) -> UserPayload {
        UserPayload(
            id: user.id.lowercasedString, handle: user.handle, name: user.name, email: user.email,
            emailVerified: user.emailVerified, isPrivateEmail: user.isPrivateEmail, isGuest: user.isGuest,
            providers: user.providers, createdAt: Timestamp.format(user.createdAt))
    }

    static func event<Payload: Codable & Sendable>(
        type: String, data: Payload, key: String, request: LoginRequest, identifiers: Identifiers,
        configuration: WorkerConfiguration, now: Date
    ) throws -> OutboxEvent {
        try OutboxEvent.make(
            type: type, data: data, key: key, traceparent: request.traceparent, identifiers: identifiers,
            configuration: configuration, now: now)
    }
}

extension OutboxEvent {
    /// A lifecycle event for the events topic, as a CloudEvent with a fresh (UUIDv7) id.
    static func make<Payload: Codable & Sendable>(
        type: String, data: Payload, key: String, traceparent: String?, identifiers: Identifiers,
        configuration: WorkerConfiguration, now: Date
    ) throws -> OutboxEvent {
        let id = try identifiers.uuid()
        let envelope = CloudEvent(
            id: id.lowercasedString, source: configuration.eventSource, type: type, time: now, traceparent: traceparent,
            data: data)
        return OutboxEvent(
            id: id, topic: configuration.topics.events, key: key, payload: try MessageCoding.encode(envelope),
            createdAt: now)
    }
}

extension UUID {
    /// The canonical lower-case form used on the wire.
    public var lowercasedString: String { uuidString.lowercased() }
}
