import AuthCrypto
import Foundation
import JOSE
import Messages
import PGStore
import ServiceKit

/// Apple's server-to-server notifications, forwarded by the gateway as received (`{"payload": "<JWT>"}`
/// in the `data` of an `auth.provider.notification` CloudEvent).
///
/// The JWT is verified with Apple's keys and the app's audience; its `events` claim (itself a JSON
/// string) says what happened: `consent-revoked` ends the identity's sessions, `account-delete`
/// (and `account-deleted`) deletes the user, `email-disabled` / `email-enabled` record the relay
/// address's status. Each notification acts once (keyed by the token's hash).
public struct AppleNotificationHandler: Sendable {
    struct Body: Codable, Sendable {
        var payload: String
    }

    /// What one notification asks for.
    public struct Notification: Sendable, Equatable {
        public var type: String
        public var subject: String
        public var email: String?
    }

    /// Why a notification was not acted on; logged, never answered (nobody waits for an answer).
    public struct Refusal: Error, CustomStringConvertible {
        public var description: String
    }

    private let provider: IdentityProvider?
    private let pool: PGPool
    private let configuration: WorkerConfiguration
    private let clock: any WorkerClock
    private let logger: Logger

    public init(
        provider: IdentityProvider?, pool: PGPool, configuration: WorkerConfiguration, clock: any WorkerClock,
        logger: Logger
    ) {
        self.provider = provider
        self.pool = pool
        self.configuration = configuration
        self.clock = clock
        self.logger = logger
    }

    /// Verifies and applies a notification.
    /// - Returns: the events written (to publish).
    /// - Throws: `Refusal` for what can never be applied; transient errors for retries.
    public func handle(_ value: [UInt8]) async throws -> [OutboxEvent] {
        guard let provider else { throw Refusal(description: "Sign in with Apple is not enabled") }
        let body: Body
        do {
            body = try MessageCoding.decode(CloudEvent<Body>.self, from: value).data
        } catch {
            throw Refusal(description: "not an auth.provider.notification with a payload")
        }
        let notification = try await verify(body.payload, provider: provider)
        let key = "apple-notification:" + Hex.encode(SHA256.hash(body.payload))
        let now = clock.now()
        let events = try await apply(notification, key: key, now: now)
        logger.info(
            "Apple notification applied",
            metadata: ["apple.event": notification.type, LogKey.count: String(events.count)])
        return events
    }

    func verify(_ token: String, provider: IdentityProvider) async throws -> Notification {
        var policy = provider.configuration.claimsPolicy
        policy.requireSubject = false
        let claims: IDTokenClaims
        do {
            let jws = try CompactJWS(token)
            let keys = try await provider.keySet.keys(forKeyID: jws.header.kid)
            claims = try JWSVerifier.verifyIDToken(
                jws, keys: keys, allowed: provider.configuration.algorithms, policy: policy, now: clock.now(),
                nonce: nil)
        } catch let error as JOSEError where error.code == .keySetUnavailable {
            throw error
        } catch let error as JOSEError {
            throw Refusal(description: "the notification's token is not Apple's: \(error)")
        }
        guard let text = claims.events, let members = try? JSONReader.object(Array(text.utf8)),
            case .string(let type)? = members["type"], case .string(let subject)? = members["sub"]
        else { throw Refusal(description: "the notification has no usable events claim") }
        var email: String?
        if case .string(let value)? = members["email"] { email = value.lowercased() }
        return Notification(type: type, subject: subject, email: email)
    }

    func apply(_ notification: Notification, key: String, now: Date) async throws -> [OutboxEvent] {
        let configuration = configuration
        let clock = clock
        return try await pool.withTransaction { connection in
            guard
                try PostgresAuthStore.recordRequest(
                    connection, id: key, method: "apple_notification", userID: nil, sessionID: nil, at: now,
                    expiresAt: now + configuration.sessions.idempotencyLifetime)
            else { return [] }
            let owners = try connection.query(
                "SELECT user_id FROM identities WHERE provider = 'apple' AND subject = \(notification.subject)"
            ).map { try $0.decode("user_id", as: UUID.self) }
            guard let userID = owners.first else { return [] }
            let identifiers = Identifiers(clock: clock)
            switch notification.type {
            case "consent-revoked":
                let sessions = try connection.query(
                    """
                    UPDATE sessions SET revoked_at = \(now), revoked_reason = 'consent_revoked'
                    WHERE user_id = \(userID) AND revoked_at IS NULL AND expires_at > \(now) RETURNING id
                    """
                ).map { try $0.decode("id", as: UUID.self) }
                let events = try sessions.map { session in
                    try OutboxEvent.make(
                        type: UserEventType.sessionRevoked,
                        data: SessionRevokedData(
                            userId: userID.lowercasedString, sessionId: session.lowercasedString,
                            reason: "consent_revoked"),
                        key: userID.lowercasedString, traceparent: nil, identifiers: identifiers,
                        configuration: configuration, now: now)
                }
                try PostgresAuthStore.insertOutbox(connection, events)
                return events
            case "account-delete", "account-deleted":
                return try AccountOperations(configuration: configuration, clock: clock).delete(
                    [userID], reason: "apple_account_deleted", revokeSessions: true, connection: connection
                ).events
            case "email-disabled", "email-enabled":
                try connection.query(
                    """
                    UPDATE identities SET email_status = \(notification.type == "email-enabled" ? "enabled" : "disabled")
                    WHERE provider = 'apple' AND subject = \(notification.subject)
                    """)
                return []
            default:
                return []
            }
        }
    }
}
