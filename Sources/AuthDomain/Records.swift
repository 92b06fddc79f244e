import Foundation

/// A stored password credential.
public struct PasswordCredential: Sendable, Equatable {
    public var userID: UUID
    public var passwordHash: String

    public init(userID: UUID, passwordHash: String) {
        self.userID = userID
        self.passwordHash = passwordHash
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

/// A user to insert.
public struct NewUser: Sendable, Equatable {
    public var id: UUID
    public var name: String?
    public var email: String?
    public var emailVerified: Bool
    public var isPrivateEmail: Bool
    public var isGuest: Bool
    public var createdAt: Date
    /// A number proven by a texted code (`phone_code`), in E.164 form.
    public var phone: String?

    public init(
        id: UUID, name: String?, email: String?, emailVerified: Bool, isPrivateEmail: Bool, isGuest: Bool,
        createdAt: Date, phone: String? = nil
    ) {
        self.id = id
        self.name = name
        self.email = email
        self.emailVerified = emailVerified
        self.isPrivateEmail = isPrivateEmail
        self.isGuest = isGuest
        self.createdAt = createdAt
        self.phone = phone
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
    /// Disabled by support or an operator: its sign-ins and refreshes answer `account_disabled`.
    public var isDisabled = false
    /// The account's phone number (E.164), proven by a texted code; its `phone` identity signs in.
    public var phone: String?

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

/// A session and its first tokens. Tokens appear only as SHA-256 hashes; a self-contained
/// (JWT) access token has no row, and no hash.
public struct NewSession: Sendable, Equatable {
    public var id: UUID
    public var provider: String
    public var deviceName: String?
    public var devicePlatform: String?
    public var abilities: [String]
    public var createdAt: Date
    public var expiresAt: Date
    public var accessTokenID: UUID
    public var accessTokenHash: [UInt8]?
    public var accessTokenExpiresAt: Date
    public var refreshTokenID: UUID
    public var refreshTokenHash: [UInt8]
    public var refreshTokenExpiresAt: Date

    public init(
        id: UUID, provider: String, deviceName: String?, devicePlatform: String?, abilities: [String], createdAt: Date,
        expiresAt: Date, accessTokenID: UUID, accessTokenHash: [UInt8]?, accessTokenExpiresAt: Date,
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

/// A counted password attempt: whether it may be verified, and the credential to verify against.
public struct PasswordAttempt: Sendable, Equatable {
    /// False while the account is locked: the attempt is refused without a verification.
    public var allowed: Bool
    /// Attempts counted in the current window, this one included when allowed.
    public var failures: Int
    public var lockedUntil: Date?
    /// Nil for an unknown e-mail.
    public var credential: PasswordCredential?

    public init(allowed: Bool, failures: Int, lockedUntil: Date?, credential: PasswordCredential?) {
        self.allowed = allowed
        self.failures = failures
        self.lockedUntil = lockedUntil
        self.credential = credential
    }
}
