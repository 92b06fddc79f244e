import StrictJSON

/// The lifecycle events on `auth.user.events`. None carries a secret in clear: the one-time
/// codes of the two `…_requested` events travel sealed to the mail service's key.
public enum UserEventType {
    public static let created = "auth.user.created"
    public static let upgraded = "auth.user.upgraded"
    public static let identityLinked = "auth.identity.linked"
    public static let sessionRevoked = "auth.session.revoked"
    public static let deleted = "auth.user.deleted"
    /// A code to prove an address: for the mail service.
    public static let verificationRequested = "auth.email.verification_requested"
    /// A code to set a new password: for the mail service.
    public static let passwordResetRequested = "auth.password.reset_requested"
    /// A code to sign in with (`email_code`): for the mail service.
    public static let signInRequested = "auth.email.sign_in_requested"
    public static let emailVerified = "auth.user.email_verified"
    /// A password was set (`reason`: `reset` or `change`): for a "your password changed" mail.
    public static let passwordChanged = "auth.password.changed"
    /// A second factor became active (`mfa_verify`) or was removed (`mfa_remove`).
    public static let mfaEnabled = "auth.mfa.enabled"
    public static let mfaDisabled = "auth.mfa.disabled"
    /// Too many wrong second-factor codes: the factor refuses codes until `locked_until` (for a
    /// "someone has your password" mail).
    public static let mfaLocked = "auth.mfa.locked"
    /// A way of signing in was taken off an account (`reason`: `account_claimed`).
    public static let identityUnlinked = "auth.identity.unlinked"
    /// A passkey was registered to the account.
    public static let passkeyAdded = "auth.passkey.added"
    /// A passkey was removed by its user.
    public static let passkeyRemoved = "auth.passkey.removed"
    /// A passkey sign-in was refused because its signature counter went backwards: the
    /// authenticator may have been cloned.
    public static let passkeyCloneSuspected = "auth.passkey.clone_suspected"
    /// A code to send by text message (`phone_code`): for the SMS service.
    public static let phoneCodeRequested = "auth.phone.code_requested"
    /// An account's phone number was proven: added, or changed to another.
    public static let phoneVerified = "auth.user.phone_verified"
}

/// `auth.phone.code_requested`: what the SMS service needs to send the message. The code is in
/// `sealed_secret`, a compact JWE (`ECDH-ES`, `A256GCM`, X25519) to the SMS service's key
/// (`AUTH_SMS_KEY`) whose plaintext is `{"code":"123456"}`.
public struct PhoneCodeRequestedData: Decodable, Sendable, Equatable {
    /// Nil when the number has no account yet (a sign-up code), or when a sign-in code was asked
    /// for a number without one: the event is then keyed by the number.
    public var userId: String?
    /// Where to send it, in E.164 form.
    public var phone: String
    /// `phone_sign_in` (to sign in with) or `verify_phone` (to add or change a signed-in account's number).
    public var purpose: String
    public var sealedSecret: String
    public var expiresAt: String
    /// The language the request asked the message in (a BCP 47 tag), when it gave one.
    public var locale: String?

    public init(
        userId: String?, phone: String, purpose: String, sealedSecret: String, expiresAt: String, locale: String?
    ) {
        self.userId = userId
        self.phone = phone
        self.purpose = purpose
        self.sealedSecret = sealedSecret
        self.expiresAt = expiresAt
        self.locale = locale
    }

    enum CodingKeys: String, CodingKey {
        case phone, purpose, locale
        case userId = "user_id"
        case sealedSecret = "sealed_secret"
        case expiresAt = "expires_at"
    }
}

/// The plaintext of `PhoneCodeRequestedData.sealedSecret`.
public struct PhoneCodeSecret: Decodable, Sendable, Equatable, CustomStringConvertible {
    public var code: String

    public init(code: String) {
        self.code = code
    }

    enum CodingKeys: String, CodingKey {
        case code
    }

    public var description: String { "PhoneCodeSecret(<redacted>)" }
}

/// `auth.user.phone_verified`: the account's number now (`previous` when it replaced another).
public struct PhoneVerifiedData: Decodable, Sendable, Equatable {
    public var userId: String
    public var phone: String
    public var previous: String?

    public init(userId: String, phone: String, previous: String?) {
        self.userId = userId
        self.phone = phone
        self.previous = previous
    }

    enum CodingKeys: String, CodingKey {
        case phone, previous
        case userId = "user_id"
    }
}

/// `auth.mfa.locked`.
public struct MFALockedData: Decodable, Sendable, Equatable {
    public var userId: String
    /// `totp`.
    public var factor: String
    /// Wrong codes in the window that ended in this lock.
    public var failures: Int
    /// How many times the factor locked in the last day, this one included: each doubles the wait.
    public var lockouts: Int
    public var lockedUntil: String

    public init(userId: String, factor: String, failures: Int, lockouts: Int, lockedUntil: String) {
        self.userId = userId
        self.factor = factor
        self.failures = failures
        self.lockouts = lockouts
        self.lockedUntil = lockedUntil
    }

    enum CodingKeys: String, CodingKey {
        case factor, failures, lockouts
        case userId = "user_id"
        case lockedUntil = "locked_until"
    }
}

/// `auth.identity.unlinked`.
public struct IdentityUnlinkedData: Decodable, Sendable, Equatable {
    public var userId: String
    public var provider: String
    public var subject: String
    public var reason: String

    public init(userId: String, provider: String, subject: String, reason: String) {
        self.userId = userId
        self.provider = provider
        self.subject = subject
        self.reason = reason
    }

    enum CodingKeys: String, CodingKey {
        case provider, subject, reason
        case userId = "user_id"
    }
}

/// `auth.mfa.enabled` and `auth.mfa.disabled`.
public struct MFAChangedData: Decodable, Sendable, Equatable {
    public var userId: String
    /// `totp`.
    public var factor: String

    public init(userId: String, factor: String) {
        self.userId = userId
        self.factor = factor
    }

    enum CodingKeys: String, CodingKey {
        case factor
        case userId = "user_id"
    }
}

/// `auth.email.verification_requested` and `auth.password.reset_requested`: what the mail
/// service needs to send the message. The code and link token are in `sealed_secret`, a compact
/// JWE (`ECDH-ES`, `A256GCM`, X25519) to the mail service's key whose plaintext is
/// `{"code":"123456","link_token":"…"}`; nobody else who reads the topic can use them.
public struct EmailCodeRequestedData: Decodable, Sendable, Equatable {
    /// Nil for a sign-in code to an address with no account yet (the event is then keyed by the address).
    public var userId: String?
    public var email: String
    /// `verify_email` or `password_reset`: the method the code is for.
    public var purpose: String
    public var sealedSecret: String
    public var expiresAt: String

    public init(userId: String?, email: String, purpose: String, sealedSecret: String, expiresAt: String) {
        self.userId = userId
        self.email = email
        self.purpose = purpose
        self.sealedSecret = sealedSecret
        self.expiresAt = expiresAt
    }

    enum CodingKeys: String, CodingKey {
        case email, purpose
        case userId = "user_id"
        case sealedSecret = "sealed_secret"
        case expiresAt = "expires_at"
    }
}

/// The plaintext of `EmailCodeRequestedData.sealedSecret`.
public struct EmailCodeSecret: Decodable, Sendable, Equatable, CustomStringConvertible {
    public var code: String
    public var linkToken: String

    public init(code: String, linkToken: String) {
        self.code = code
        self.linkToken = linkToken
    }

    enum CodingKeys: String, CodingKey {
        case code
        case linkToken = "link_token"
    }

    public var description: String { "EmailCodeSecret(<redacted>)" }
}

/// `auth.user.email_verified`.
public struct EmailVerifiedData: Decodable, Sendable, Equatable {
    public var userId: String
    public var email: String

    public init(userId: String, email: String) {
        self.userId = userId
        self.email = email
    }

    enum CodingKeys: String, CodingKey {
        case email
        case userId = "user_id"
    }
}

/// `auth.password.changed`.
public struct PasswordChangedData: Decodable, Sendable, Equatable {
    public var userId: String
    /// `reset` (with a code from an e-mail) or `change` (with the current password).
    public var reason: String

    public init(userId: String, reason: String) {
        self.userId = userId
        self.reason = reason
    }

    enum CodingKeys: String, CodingKey {
        case reason
        case userId = "user_id"
    }
}

/// `auth.user.created`.
public struct UserCreatedData: Decodable, Sendable, Equatable {
    public var userId: String
    public var handle: String
    public var name: String?
    public var email: String?
    public var emailVerified: Bool
    public var isPrivateEmail: Bool
    public var isGuest: Bool
    public var provider: String
    public var createdAt: String
    /// The verified phone number a `phone_code` sign-up was made with.
    public var phone: String?

    public init(
        userId: String, handle: String, name: String?, email: String?, emailVerified: Bool, isPrivateEmail: Bool,
        isGuest: Bool, provider: String, createdAt: String, phone: String? = nil
    ) {
        self.userId = userId
        self.handle = handle
        self.name = name
        self.email = email
        self.emailVerified = emailVerified
        self.isPrivateEmail = isPrivateEmail
        self.isGuest = isGuest
        self.provider = provider
        self.createdAt = createdAt
        self.phone = phone
    }

    enum CodingKeys: String, CodingKey {
        case handle, name, email, provider, phone
        case userId = "user_id"
        case emailVerified = "email_verified"
        case isPrivateEmail = "is_private_email"
        case isGuest = "is_guest"
        case createdAt = "created_at"
    }
}

/// `auth.user.upgraded`: a guest became a full account.
public struct UserUpgradedData: Decodable, Sendable, Equatable {
    public var userId: String
    public var provider: String
    public var email: String?
    public var name: String?

    public init(userId: String, provider: String, email: String?, name: String?) {
        self.userId = userId
        self.provider = provider
        self.email = email
        self.name = name
    }

    enum CodingKeys: String, CodingKey {
        case provider, email, name
        case userId = "user_id"
    }
}

/// `auth.identity.linked`.
public struct IdentityLinkedData: Decodable, Sendable, Equatable {
    public var userId: String
    public var provider: String
    public var subject: String

    public init(userId: String, provider: String, subject: String) {
        self.userId = userId
        self.provider = provider
        self.subject = subject
    }

    enum CodingKeys: String, CodingKey {
        case provider, subject
        case userId = "user_id"
    }
}

/// `auth.session.revoked`.
public struct SessionRevokedData: Decodable, Sendable, Equatable {
    public var userId: String
    public var sessionId: String
    /// `logout`, `logout_all`, `refresh_reuse`, `consent_revoked`, …
    public var reason: String

    public init(userId: String, sessionId: String, reason: String) {
        self.userId = userId
        self.sessionId = sessionId
        self.reason = reason
    }

    enum CodingKeys: String, CodingKey {
        case reason
        case userId = "user_id"
        case sessionId = "session_id"
    }
}

/// `auth.user.deleted`.
public struct UserDeletedData: Decodable, Sendable, Equatable {
    public var userId: String
    public var reason: String

    public init(userId: String, reason: String) {
        self.userId = userId
        self.reason = reason
    }

    enum CodingKeys: String, CodingKey {
        case reason
        case userId = "user_id"
    }
}

/// The `data` of an `auth.provider.notification` (on the notifications topic): a provider's
/// server-to-server notification as the gateway received it, `{"payload": "<JWT>"}`.
public struct ProviderNotificationData: Decodable, Sendable, Equatable {
    public var payload: String

    public init(payload: String) {
        self.payload = payload
    }
}

// MARK: - Written one way

extension ProviderNotificationData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.payload, payload)
        }
    }
}

extension MFALockedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.factor, factor)
            out.member(CodingKeys.failures, Int64(failures))
            out.member(CodingKeys.lockedUntil, lockedUntil)
            out.member(CodingKeys.lockouts, Int64(lockouts))
            out.member(CodingKeys.userId, userId)
        }
    }
}

extension IdentityUnlinkedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.provider, provider)
            out.member(CodingKeys.reason, reason)
            out.member(CodingKeys.subject, subject)
            out.member(CodingKeys.userId, userId)
        }
    }
}

extension MFAChangedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.factor, factor)
            out.member(CodingKeys.userId, userId)
        }
    }
}

extension PhoneCodeRequestedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.expiresAt, expiresAt)
            out.member(CodingKeys.locale, locale)
            out.member(CodingKeys.phone, phone)
            out.member(CodingKeys.purpose, purpose)
            out.member(CodingKeys.sealedSecret, sealedSecret)
            out.member(CodingKeys.userId, userId)
        }
    }
}

extension PhoneCodeSecret: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.code, code)
        }
    }
}

extension PhoneVerifiedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.phone, phone)
            out.member(CodingKeys.previous, previous)
            out.member(CodingKeys.userId, userId)
        }
    }
}

extension EmailCodeRequestedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.email, email)
            out.member(CodingKeys.expiresAt, expiresAt)
            out.member(CodingKeys.purpose, purpose)
            out.member(CodingKeys.sealedSecret, sealedSecret)
            out.member(CodingKeys.userId, userId)
        }
    }
}

extension EmailCodeSecret: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.code, code)
            out.member(CodingKeys.linkToken, linkToken)
        }
    }
}

extension EmailVerifiedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.email, email)
            out.member(CodingKeys.userId, userId)
        }
    }
}

extension PasswordChangedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.reason, reason)
            out.member(CodingKeys.userId, userId)
        }
    }
}
