import AuthCrypto
import Foundation
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
    private let configuration: WorkerConfiguration
    private let store: any AuthStore
    private let accessTokens: any AccessTokenIssuer
    private let clock: any WorkerClock
    private let identifiers: Identifiers
    private let logger: Logger

    public init(
        configuration: WorkerConfiguration, store: any AuthStore, accessTokens: any AccessTokenIssuer,
        clock: any WorkerClock, identifiers: Identifiers, logger: Logger
    ) {
        self.configuration = configuration
        self.store = store
        self.accessTokens = accessTokens
        self.clock = clock
        self.identifiers = identifiers
        self.logger = logger
    }

    /// Handles one request.
    /// - Returns: the outcome, or nil when the request id was already processed.
    /// - Throws: `LoginError` for a definite refusal; other errors are transient.
    public func handle(_ request: LoginRequest) async throws -> LoginOutcome? {
        switch request.method {
        case .guest:
            return try await guest(request)
        case .apple, .google, .oidc, .password, .register, .refresh, .logout:
            throw LoginError(
                .unsupportedMethod, "method \(request.method.rawValue) is not enabled on this worker",
                field: "data.method")
        }
    }

    // MARK: - Guest

    private func guest(_ request: LoginRequest) async throws -> LoginOutcome? {
        let now = clock.now()
        let userID = try identifiers.uuid()
        let user = NewUser(
            id: userID, name: nil, email: nil, emailVerified: false, isPrivateEmail: false, isGuest: true,
            createdAt: now)
        let handles = try (0..<3).map { _ in try identifiers.handle(name: nil, isGuest: true) }
        let issued = try issueSession(
            userID: userID, provider: "guest", isGuest: true, device: request.data.device, now: now)
        let plan = NewAccount(
            requestID: request.id, method: request.method.rawValue, user: user, handleCandidates: handles,
            identity: nil, session: issued.session,
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
        switch try await store.createAccount(plan) {
        case .duplicate:
            return nil
        case .created(let stored, let events):
            logger.info(
                "Guest created",
                metadata: [
                    LogKey.requestID: request.id, LogKey.userID: stored.id.lowercasedString, LogKey.method: "guest",
                ])
            return LoginOutcome(
                result: .ok(
                    requestID: request.id, user: Self.payload(stored), newUser: true, session: issued.payload),
                events: events)
        }
    }

    // MARK: - Sessions

    private struct IssuedSession {
        var session: NewSession
        var payload: SessionPayload
    }

    private func issueSession(
        userID: UUID, provider: String, isGuest: Bool, device: LoginRequestData.Device?, now: Date
    ) throws -> IssuedSession {
        let lifetimes = configuration.sessions
        let abilities = isGuest ? lifetimes.guestAbilities : lifetimes.memberAbilities
        let sessionID = try identifiers.uuid()
        let accessID = try identifiers.uuid()
        let sessionExpiry = now + lifetimes.sessionLifetime
        let accessExpiry = min(now + lifetimes.accessTokenLifetime, sessionExpiry)
        let refreshExpiry = min(now + lifetimes.refreshTokenLifetime, sessionExpiry)
        let accessToken = try accessTokens.issue(
            AccessTokenClaims(
                tokenID: accessID, userID: userID, sessionID: sessionID, abilities: abilities, isGuest: isGuest,
                issuedAt: now, expiresAt: accessExpiry))
        let refreshToken = "rt_" + (try identifiers.secret(characters: 48))
        let session = NewSession(
            id: sessionID, provider: provider, deviceName: device?.name, devicePlatform: device?.platform,
            abilities: abilities, createdAt: now, expiresAt: sessionExpiry, accessTokenID: accessID,
            accessTokenHash: SHA256.hash(accessToken), accessTokenExpiresAt: accessExpiry,
            refreshTokenID: try identifiers.uuid(), refreshTokenHash: SHA256.hash(refreshToken),
            refreshTokenExpiresAt: refreshExpiry)
        let payload = SessionPayload(
            accessToken: accessToken, expiresAt: Timestamp.format(accessExpiry), refreshToken: refreshToken,
            refreshExpiresAt: Timestamp.format(refreshExpiry), abilities: abilities)
        return IssuedSession(session: session, payload: payload)
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
        let id = try identifiers.uuid()
        let envelope = CloudEvent(
            id: id.lowercasedString, source: configuration.eventSource, type: type, time: now,
            traceparent: request.traceparent, data: data)
        return OutboxEvent(
            id: id, topic: configuration.topics.events, key: key, payload: try MessageCoding.encode(envelope),
            createdAt: now)
    }
}

extension UUID {
    /// The canonical lower-case form used on the wire.
    public var lowercasedString: String { uuidString.lowercased() }
}
