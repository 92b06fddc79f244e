/// The lifecycle events on `auth.user.events`. None carries a secret.
public enum UserEventType {
    public static let created = "auth.user.created"
    public static let upgraded = "auth.user.upgraded"
    public static let identityLinked = "auth.identity.linked"
    public static let sessionRevoked = "auth.session.revoked"
    public static let deleted = "auth.user.deleted"
}

/// `auth.user.created`.
public struct UserCreatedData: Codable, Sendable, Equatable {
    public var userId: String
    public var handle: String
    public var name: String?
    public var email: String?
    public var emailVerified: Bool
    public var isPrivateEmail: Bool
    public var isGuest: Bool
    public var provider: String
    public var createdAt: String

    public init(
        userId: String, handle: String, name: String?, email: String?, emailVerified: Bool, isPrivateEmail: Bool,
        isGuest: Bool, provider: String, createdAt: String
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
    }

    enum CodingKeys: String, CodingKey {
        case handle, name, email, provider
        case userId = "user_id"
        case emailVerified = "email_verified"
        case isPrivateEmail = "is_private_email"
        case isGuest = "is_guest"
        case createdAt = "created_at"
    }
}

/// `auth.user.upgraded`: a guest became a full account.
public struct UserUpgradedData: Codable, Sendable, Equatable {
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
public struct IdentityLinkedData: Codable, Sendable, Equatable {
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
public struct SessionRevokedData: Codable, Sendable, Equatable {
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
public struct UserDeletedData: Codable, Sendable, Equatable {
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
