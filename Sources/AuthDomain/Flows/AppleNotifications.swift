import AuthCrypto
import Foundation
import JOSE
import Messages
import StrictJSON

/// Apple's server-to-server notifications, forwarded by the gateway as received (`{"payload": "<JWT>"}`
/// in the `data` of an `auth.provider.notification` CloudEvent).
///
/// The JWT is verified with Apple's keys and the app's audience; its `events` claim (itself a JSON
/// string) says what happened: `consent-revoked` ends the identity's sessions, `account-delete`
/// (and `account-deleted`) deletes the user, `email-disabled` / `email-enabled` record the relay
/// address's status. Each notification acts once, keyed by its verified content.
///
/// A notification for a tenant's app names the tenant in the envelope's `tenant` attribute, as a
/// request does (the gateway knows which app's endpoint Apple called): it is verified with that
/// tenant's Apple audiences and acts on that tenant's users only.
public struct AppleNotificationFlow: Sendable {
    /// Why a notification can never be applied; it goes to the dead-letter topic.
    public struct Refusal: Error, CustomStringConvertible {
        public var description: String
    }

    /// A notification as the gateway forwarded it: the tenant it names and Apple's token.
    public struct Envelope: Sendable {
        /// The tenant named, nil for the default one.
        public var tenant: String?
        var payload: String
    }

    private let provider: IdentityProvider?
    private let configuration: WorkerConfiguration
    private let clock: any WorkerClock
    private let identifiers: Identifiers
    /// The tenant whose notifications this flow verifies and applies.
    private let tenant: String

    /// - Parameters:
    ///   - provider: `tenant`'s Sign in with Apple (its audiences); nil when it has none.
    ///   - configuration: `tenant`'s.
    public init(
        provider: IdentityProvider?, configuration: WorkerConfiguration, clock: any WorkerClock,
        tenant: String = Tenant.defaultName
    ) {
        self.provider = provider
        self.configuration = configuration
        self.clock = clock
        self.identifiers = Identifiers(clock: clock)
        self.tenant = tenant
    }

    /// Reads a notification's envelope.
    /// - Throws: `Refusal` when it is not an `auth.provider.notification` with a payload, or names
    ///   no valid tenant.
    public static func envelope(_ value: [UInt8]) throws -> Envelope {
        let event: CloudEvent<ProviderNotificationData>
        do {
            event = try MessageCoding.decode(CloudEvent<ProviderNotificationData>.self, from: value)
        } catch {
            throw Refusal(description: "not an auth.provider.notification with a payload")
        }
        if let tenant = event.tenant, !Tenant.isValidName(tenant) {
            throw Refusal(description: "the notification's tenant is not a tenant's name")
        }
        return Envelope(tenant: event.tenant == Tenant.defaultName ? nil : event.tenant, payload: event.data.payload)
    }

    /// Verifies a notification of this flow's tenant and says what it asks for.
    /// - Throws: `Refusal` for what can never be applied; `JOSEError.keySetUnavailable` while
    ///   Apple's keys cannot be fetched (try again later).
    public func prepare(_ value: [UInt8]) async throws -> AppleNotification {
        try await prepare(try Self.envelope(value))
    }

    /// Verifies a notification read from its envelope (`envelope(_:)`).
    public func prepare(_ body: Envelope) async throws -> AppleNotification {
        guard let provider else { throw Refusal(description: "Sign in with Apple is not enabled") }
        var policy = provider.configuration.claimsPolicy
        policy.requireSubject = false
        let claims: IDTokenClaims
        do {
            let jws = try CompactJWS(body.payload)
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
        // Keyed by what was verified, not by the bytes that carried it: a resent copy with other
        // whitespace around the token is the same notification.
        var jti = ""
        if case .string(let value)? = claims.members["jti"] { jti = value }
        let digest = SHA256.hash(Array("\(jti)\u{0}\(claims.issuedAt ?? 0)\u{0}\(text)".utf8))
        let now = clock.now()
        var events = EventFactory(configuration, identifiers: identifiers, now: now)
        if tenant != Tenant.defaultName { events.tenant = tenant }
        return AppleNotification(
            key: "apple-notification:" + Hex.encode(digest), type: type, subject: subject, email: email,
            tenant: tenant, events: events, rememberedUntil: now + configuration.sessions.idempotencyLifetime, now: now)
    }
}

/// A verified Apple notification, ready to apply.
public struct AppleNotification: Sendable, Equatable {
    /// What the notification is remembered by, so it acts once.
    public let key: String
    public let type: String
    /// The Apple user (`sub`) it concerns.
    public let subject: String
    public let email: String?
    /// The tenant whose users it concerns.
    public let tenant: String
    let events: EventFactory
    let rememberedUntil: Date
    let now: Date

    public static func == (lhs: AppleNotification, rhs: AppleNotification) -> Bool {
        lhs.key == rhs.key && lhs.type == rhs.type && lhs.subject == rhs.subject && lhs.email == rhs.email
            && lhs.tenant == rhs.tenant
    }

    package var prefetch: Prefetch {
        var prefetch = Prefetch(tenant: tenant)
        prefetch.identities = [IdentityKey(provider: "apple", subject: subject)]
        return prefetch
    }

    /// Applies the notification once.
    /// - Returns: how many events it wrote.
    package func write(_ unit: any UnitOfWork) throws -> Int {
        guard !(try unit.isRecorded(requestID: key)) else { return 0 }
        try unit.recordRequest(
            RequestRecord(
                requestID: key, method: "apple_notification", status: "ok", digest: nil, userID: nil, sessionID: nil,
                resultSealed: nil, processedAt: now, expiresAt: rememberedUntil))
        guard let identity = try unit.identity(provider: "apple", subject: subject) else { return 0 }
        switch type {
        case "consent-revoked":
            let sessions = try unit.liveSessions(userID: identity.userID, at: now)
            try unit.revokeSessions(sessions, reason: "consent_revoked", at: now)
            for session in sessions {
                try unit.appendEvent(
                    try events.sessionRevoked(user: identity.userID, session: session, reason: "consent_revoked"))
            }
            return sessions.count
        case "account-delete", "account-deleted":
            return try AccountDeletion.delete(
                [identity.userID], reason: "apple_account_deleted", revokeSessions: true, unit: unit, events: events
            ).events
        case "email-disabled", "email-enabled":
            try unit.setEmailStatus(
                provider: "apple", subject: subject, status: type == "email-enabled" ? "enabled" : "disabled")
            return 0
        default:
            return 0
        }
    }
}

/// Deleting users, for operators and for Apple's account deletions: every live session's end
/// and the deletion itself are announced, in the transaction that deletes.
public enum AccountDeletion {
    /// What a deletion did.
    public struct Summary: Sendable, Equatable {
        public var users: Int = 0
        public var sessionsRevoked: Int = 0
        public var events: Int = 0

        package init() {}
    }

    package static func delete(
        _ ids: [UUID], reason: String, revokeSessions: Bool, actor: String? = nil, unit: any UnitOfWork,
        events: EventFactory
    ) throws -> Summary {
        var summary = Summary()
        for id in ids {
            let ended = try endWaysIn(
                of: id, revokingSessions: revokeSessions, sessionReason: "user_deleted",
                revokingAppleTokens: reason != "apple_account_deleted", unit: unit, events: events)
            summary.sessionsRevoked += ended
            summary.events += ended
            try unit.appendEvent(try events.userDeleted(user: id, reason: reason))
            summary.events += 1
            // The trail outlives the account: who deleted it, and why.
            try unit.recordAudit(
                AuditEntry(
                    at: events.now, userID: id, action: "user_deleted", outcome: reason,
                    actor: actor ?? (reason == "apple_account_deleted" ? "apple" : "operator")))
        }
        try unit.deleteUsers(ids)
        summary.users = ids.count
        return summary
    }

    /// What a deletion does about each way into the account (`AccountAccess`) before the user's
    /// row is deleted; the rows of every table in the list go with it (`ON DELETE CASCADE`,
    /// which `AccountAccessTests` checks of the schema).
    /// - Parameters:
    ///   - revokingSessions: announce each live session's end (`auth.session.revoked`).
    ///   - revokingAppleTokens: queue the revocation of Apple's tokens (not when Apple itself
    ///     deleted the account).
    /// - Returns: the sessions announced as ended.
    package static func endWaysIn(
        of id: UUID, revokingSessions: Bool, sessionReason: String, revokingAppleTokens: Bool, unit: any UnitOfWork,
        events: EventFactory
    ) throws -> Int {
        var ended = 0
        for access in AccountAccess.allCases {
            switch access {
            case .sessions:
                guard revokingSessions else { continue }
                for session in try unit.liveSessions(userID: id, at: events.now) {
                    try unit.appendEvent(try events.sessionRevoked(user: id, session: session, reason: sessionReason))
                    ended += 1
                }
            case .identities:
                // Apple's tokens are revoked after the answer, by a durable job (Apple being down
                // never holds a deletion up).
                if revokingAppleTokens {
                    try unit.queueAppleRevocations(userID: id, identifiers: events.identifiers, at: events.now)
                }
            case .passkeys, .secondFactor, .pendingCodes, .passkeyChallenges, .consoleRole, .consoleSessions:
                // Nothing to announce: the rows go with the user's.
                break
            }
        }
        return ended
    }
}
