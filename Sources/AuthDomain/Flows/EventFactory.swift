import Foundation
import Messages
import StrictJSON

/// Makes the lifecycle events of `auth.user.events`: one way to build each, with a fresh
/// (UUIDv7) id, the request's trace and the time it was decided.
package struct EventFactory: Sendable {
    let identifiers: Identifiers
    let topic: String
    let source: String
    let traceparent: String?
    let now: Date
    /// The tenant of the request, for a tenant other than the default one (whose events name none).
    var tenant: String?

    package init(identifiers: Identifiers, topic: String, source: String, traceparent: String?, now: Date) {
        self.identifiers = identifiers
        self.topic = topic
        self.source = source
        self.traceparent = traceparent
        self.now = now
    }

    /// For what `configuration`'s worker, an operator or a console user decides now, with a trace
    /// when a request brought one.
    package init(
        _ configuration: WorkerConfiguration, identifiers: Identifiers, traceparent: String? = nil, now: Date
    ) {
        self.init(
            identifiers: identifiers, topic: configuration.topics.events, source: configuration.eventSource,
            traceparent: traceparent, now: now)
    }

    /// For an operator's chore or a console user's action on `tenant`'s users: no request, so no trace.
    package static func `operator`(
        _ configuration: WorkerConfiguration, _ clock: any WorkerClock, tenant: String = Tenant.defaultName
    ) -> EventFactory {
        var events = EventFactory(configuration, identifiers: Identifiers(clock: clock), now: clock.now())
        if tenant != Tenant.defaultName { events.tenant = tenant }
        return events
    }

    func userCreated(_ user: StoredUser, provider: String) throws -> OutboxEvent {
        try make(
            UserEventType.created,
            UserCreatedData(
                userId: user.id.lowercasedString, handle: user.handle, name: user.name, email: user.email,
                emailVerified: user.emailVerified, isPrivateEmail: user.isPrivateEmail, isGuest: user.isGuest,
                provider: provider, createdAt: Timestamp.format(user.createdAt), phone: user.phone),
            user: user.id)
    }

    func userUpgraded(_ user: StoredUser, provider: String) throws -> OutboxEvent {
        try make(
            UserEventType.upgraded,
            UserUpgradedData(userId: user.id.lowercasedString, provider: provider, email: user.email, name: user.name),
            user: user.id)
    }

    func identityLinked(user: UUID, provider: String, subject: String) throws -> OutboxEvent {
        try make(
            UserEventType.identityLinked,
            IdentityLinkedData(userId: user.lowercasedString, provider: provider, subject: subject), user: user)
    }

    func sessionRevoked(user: UUID, session: UUID, reason: String) throws -> OutboxEvent {
        try make(
            UserEventType.sessionRevoked,
            SessionRevokedData(userId: user.lowercasedString, sessionId: session.lowercasedString, reason: reason),
            user: user)
    }

    func userDeleted(user: UUID, reason: String) throws -> OutboxEvent {
        try make(UserEventType.deleted, UserDeletedData(userId: user.lowercasedString, reason: reason), user: user)
    }

    /// `auth.email.verification_requested` or `auth.password.reset_requested`: for the mail service.
    /// Keyed by the user, or by the address for a sign-up code (no user yet).
    func codeRequested(purpose: CodePurpose, user: UUID?, email: String, sealedSecret: String, expiresAt: Date) throws
        -> OutboxEvent
    {
        let type =
            switch purpose {
            case .verifyEmail: UserEventType.verificationRequested
            case .passwordReset: UserEventType.passwordResetRequested
            case .signIn: UserEventType.signInRequested
            case .phoneSignIn, .verifyPhone: UserEventType.phoneCodeRequested
            }
        return try make(
            type,
            EmailCodeRequestedData(
                userId: user?.lowercasedString, email: email, purpose: purpose.rawValue, sealedSecret: sealedSecret,
                expiresAt: Timestamp.format(expiresAt)),
            key: user?.lowercasedString ?? email)
    }

    /// `auth.phone.code_requested`, keyed by the user, or by the number when it has no account.
    func phoneCodeRequested(
        purpose: CodePurpose, user: UUID?, phone: String, sealedSecret: String, expiresAt: Date, locale: String?
    ) throws -> OutboxEvent {
        try make(
            UserEventType.phoneCodeRequested,
            PhoneCodeRequestedData(
                userId: user?.lowercasedString, phone: phone, purpose: purpose.rawValue, sealedSecret: sealedSecret,
                expiresAt: Timestamp.format(expiresAt), locale: locale),
            key: user?.lowercasedString ?? phone)
    }

    func phoneVerified(user: UUID, phone: String, previous: String?) throws -> OutboxEvent {
        try make(
            UserEventType.phoneVerified,
            PhoneVerifiedData(userId: user.lowercasedString, phone: phone, previous: previous), user: user)
    }

    func emailVerified(user: UUID, email: String) throws -> OutboxEvent {
        try make(
            UserEventType.emailVerified, EmailVerifiedData(userId: user.lowercasedString, email: email), user: user)
    }

    func passwordChanged(user: UUID, reason: String) throws -> OutboxEvent {
        try make(
            UserEventType.passwordChanged, PasswordChangedData(userId: user.lowercasedString, reason: reason),
            user: user)
    }

    func mfaChanged(user: UUID, enabled: Bool) throws -> OutboxEvent {
        try make(
            enabled ? UserEventType.mfaEnabled : UserEventType.mfaDisabled,
            MFAChangedData(userId: user.lowercasedString, factor: "totp"), user: user)
    }

    func mfaLocked(user: UUID, failures: Int, lockouts: Int, until: Date) throws -> OutboxEvent {
        try make(
            UserEventType.mfaLocked,
            MFALockedData(
                userId: user.lowercasedString, factor: "totp", failures: failures, lockouts: lockouts,
                lockedUntil: Timestamp.format(until)),
            user: user)
    }

    func identityUnlinked(user: UUID, provider: String, subject: String, reason: String) throws -> OutboxEvent {
        try make(
            UserEventType.identityUnlinked,
            IdentityUnlinkedData(userId: user.lowercasedString, provider: provider, subject: subject, reason: reason),
            user: user)
    }

    func passkeyAdded(user: UUID, passkey: PasskeyRecord) throws -> OutboxEvent {
        try make(
            UserEventType.passkeyAdded,
            PasskeyEventData(
                userId: user.lowercasedString, passkeyId: passkey.id.lowercasedString, name: passkey.name, reason: nil),
            user: user)
    }

    /// - Parameter reason: `user` (`passkey_remove`), `account_claimed` (the mailbox's owner
    ///   took the account over) or `admin` (support staff or an operator).
    func passkeyRemoved(user: UUID, passkey: PasskeyRecord, reason: String = "user") throws -> OutboxEvent {
        try make(
            UserEventType.passkeyRemoved,
            PasskeyEventData(
                userId: user.lowercasedString, passkeyId: passkey.id.lowercasedString, name: passkey.name,
                reason: reason),
            user: user)
    }

    func passkeyCloneSuspected(user: UUID, passkey: PasskeyRecord, stored: UInt32, presented: UInt32) throws
        -> OutboxEvent
    {
        try make(
            UserEventType.passkeyCloneSuspected,
            PasskeyEventData(
                userId: user.lowercasedString, passkeyId: passkey.id.lowercasedString, name: passkey.name,
                reason: "sign count \(presented) after \(stored)"),
            user: user)
    }

    /// Events are keyed by their user, so one user's events stay in order.
    private func make<Payload: Decodable & JSONWritable & Sendable>(_ type: String, _ data: Payload, user: UUID) throws
        -> OutboxEvent
    {
        try make(type, data, key: user.lowercasedString)
    }

    private func make<Payload: Decodable & JSONWritable & Sendable>(_ type: String, _ data: Payload, key: String) throws
        -> OutboxEvent
    {
        let id = try identifiers.uuid()
        let envelope = CloudEvent(
            id: id.lowercasedString, source: source, type: type, time: now, traceparent: traceparent, tenant: tenant,
            data: data)
        return OutboxEvent(
            id: id, topic: topic, key: key, payload: MessageCoding.encode(envelope),
            createdAt: now)
    }
}
