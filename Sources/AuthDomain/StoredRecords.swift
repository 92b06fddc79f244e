import Foundation
import Messages

/// A passkey ceremony's challenge, stored by its SHA-256 until answered or expired.
public struct PasskeyChallengeRecord: Sendable, Equatable {
    public enum Purpose: String, Sendable {
        case register, login
    }

    public var hash: [UInt8]
    public var purpose: Purpose
    /// Registration: the user it was issued to. Sign-in: the account named by e-mail, if any.
    public var userID: UUID?
    public var expiresAt: Date

    public init(hash: [UInt8], purpose: Purpose, userID: UUID?, expiresAt: Date) {
        self.hash = hash
        self.purpose = purpose
        self.userID = userID
        self.expiresAt = expiresAt
    }
}

/// A registered passkey: its public key (COSE, as the authenticator encoded it) and counter.
public struct PasskeyRecord: Sendable, Equatable {
    public var id: UUID
    public var userID: UUID
    public var credentialID: [UInt8]
    public var publicKey: [UInt8]
    public var algorithm: Int64
    public var signCount: UInt32
    public var transports: [String]
    public var aaguid: [UInt8]
    public var attestation: String
    public var backupEligible: Bool
    public var backedUp: Bool
    public var name: String
    public var createdAt: Date
    public var lastUsedAt: Date?

    public init(
        id: UUID, userID: UUID, credentialID: [UInt8], publicKey: [UInt8], algorithm: Int64, signCount: UInt32,
        transports: [String], aaguid: [UInt8], attestation: String, backupEligible: Bool, backedUp: Bool,
        name: String, createdAt: Date, lastUsedAt: Date?
    ) {
        self.id = id
        self.userID = userID
        self.credentialID = credentialID
        self.publicKey = publicKey
        self.algorithm = algorithm
        self.signCount = signCount
        self.transports = transports
        self.aaguid = aaguid
        self.attestation = attestation
        self.backupEligible = backupEligible
        self.backedUp = backedUp
        self.name = name
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
    }
}

// MARK: - Records

/// A way of signing in as stored, keyed by (provider, subject).
public struct IdentityRecord: Sendable, Equatable {
    public var provider: String
    public var subject: String
    public var userID: UUID
    public var email: String?
    public var emailVerified: Bool
    public var isPrivateEmail: Bool
    public var passwordHash: String?

    public init(
        provider: String, subject: String, userID: UUID, email: String?, emailVerified: Bool, isPrivateEmail: Bool,
        passwordHash: String?
    ) {
        self.provider = provider
        self.subject = subject
        self.userID = userID
        self.email = email
        self.emailVerified = emailVerified
        self.isPrivateEmail = isPrivateEmail
        self.passwordHash = passwordHash
    }
}

/// A session with what an account screen shows of it.
public struct SessionDetails: Sendable, Equatable {
    public var id: UUID
    public var provider: String
    public var deviceName: String?
    public var devicePlatform: String?
    public var createdAt: Date
    /// The newest refresh token's creation: the last refresh, or the sign-in.
    public var lastUsedAt: Date
    public var expiresAt: Date
    public var revokedAt: Date?
    public var revokedReason: String?

    public init(
        id: UUID, provider: String, deviceName: String?, devicePlatform: String?, createdAt: Date, lastUsedAt: Date,
        expiresAt: Date, revokedAt: Date?, revokedReason: String?
    ) {
        self.id = id
        self.provider = provider
        self.deviceName = deviceName
        self.devicePlatform = devicePlatform
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.expiresAt = expiresAt
        self.revokedAt = revokedAt
        self.revokedReason = revokedReason
    }
}

/// The rows about a user an export shows, beside its sessions: metadata only (no hash, no
/// secret). One member per table that refers to the user.
public struct AccountRecords: Sendable {
    public struct Identity: Sendable, Equatable {
        public var record: IdentityRecord
        public var createdAt: Date
        public var lastLoginAt: Date?

        public init(record: IdentityRecord, createdAt: Date, lastLoginAt: Date?) {
            self.record = record
            self.createdAt = createdAt
            self.lastLoginAt = lastLoginAt
        }
    }

    public struct Code: Sendable, Equatable {
        public var purpose: String
        public var email: String
        public var createdAt: Date
        public var expiresAt: Date
        public var usedAt: Date?

        public init(purpose: String, email: String, createdAt: Date, expiresAt: Date, usedAt: Date?) {
            self.purpose = purpose
            self.email = email
            self.createdAt = createdAt
            self.expiresAt = expiresAt
            self.usedAt = usedAt
        }
    }

    public struct Request: Sendable, Equatable {
        public var method: String
        public var status: String
        public var processedAt: Date

        public init(method: String, status: String, processedAt: Date) {
            self.method = method
            self.status = status
            self.processedAt = processedAt
        }
    }

    public var identities: [Identity]
    public var factor: MFAFactorRecord?
    public var unusedRecoveryCodes: Int
    public var codes: [Code]
    public var requests: [Request]
    public var audit: [AuditEntry]
    /// Passkey ceremonies' challenges not answered yet: purpose, created, expires.
    public var passkeyChallenges: [(purpose: String, createdAt: Date, expiresAt: Date)] = []
    /// The account's admin console role, if an operator granted one.
    public var consoleRole: String?
    /// When the account was disabled, if it is.
    public var disabledAt: Date?
    /// The admin console's sessions the account holds: the client, opened, last seen.
    public var consoleSessions: [(client: String, createdAt: Date, lastSeenAt: Date)] = []

    public init(
        identities: [Identity], factor: MFAFactorRecord?, unusedRecoveryCodes: Int, codes: [Code], requests: [Request],
        audit: [AuditEntry]
    ) {
        self.identities = identities
        self.factor = factor
        self.unusedRecoveryCodes = unusedRecoveryCodes
        self.codes = codes
        self.requests = requests
        self.audit = audit
    }
}

/// A rate-limited action's count in its current window.
public struct RateLimitWindow: Sendable, Equatable {
    public var count: Int
    /// When the window ends (and the count starts again).
    public var endsAt: Date

    public init(count: Int, endsAt: Date) {
        self.count = count
        self.endsAt = endsAt
    }
}

extension UnitOfWork {
    /// Uses of a rate-limited action in the window that contains `date`, before this request.
    public func rateLimitUsage(bucket: String, at date: Date, window: TimeInterval) throws -> Int {
        try rateLimitWindow(bucket: bucket, at: date, window: window).count
    }
}

/// A session as stored, with what its tokens need to know about its user.
public struct SessionRecord: Sendable, Equatable {
    public var id: UUID
    public var userID: UUID
    /// When it was made: the sign-in it stands for (refreshing does not move it).
    public var createdAt: Date
    public var expiresAt: Date
    public var revokedAt: Date?
    public var abilities: [String]
    public var deviceName: String?
    public var userIsGuest: Bool
    /// Whether the session's user is disabled.
    public var userIsDisabled = false

    public init(
        id: UUID, userID: UUID, createdAt: Date, expiresAt: Date, revokedAt: Date?, abilities: [String],
        deviceName: String?, userIsGuest: Bool
    ) {
        self.id = id
        self.userID = userID
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.revokedAt = revokedAt
        self.abilities = abilities
        self.deviceName = deviceName
        self.userIsGuest = userIsGuest
    }

    /// Neither revoked nor past its absolute lifetime.
    public func isLive(at date: Date) -> Bool { revokedAt == nil && expiresAt > date }
}

/// A refresh token as stored, with its session.
public struct RefreshTokenRecord: Sendable, Equatable {
    public var id: UUID
    public var expiresAt: Date
    /// When it was rotated; nil while it is the session's current refresh token.
    public var usedAt: Date?
    /// The successor it was rotated to, sealed with a key only the token's holder can derive.
    public var successorSealed: [UInt8]?
    public var session: SessionRecord

    public init(id: UUID, expiresAt: Date, usedAt: Date?, successorSealed: [UInt8]?, session: SessionRecord) {
        self.id = id
        self.expiresAt = expiresAt
        self.usedAt = usedAt
        self.successorSealed = successorSealed
        self.session = session
    }
}

/// An opaque access token as stored, with its session.
public struct AccessTokenRecord: Sendable, Equatable {
    public var id: UUID
    public var expiresAt: Date
    public var session: SessionRecord

    public init(id: UUID, expiresAt: Date, session: SessionRecord) {
        self.id = id
        self.expiresAt = expiresAt
        self.session = session
    }
}

/// A refresh: the used token, its successor and the new access token (hashes only).
public struct TokenRotation: Sendable, Equatable {
    public var sessionID: UUID
    public var usedTokenID: UUID
    public var successorID: UUID
    public var successorHash: [UInt8]
    public var successorExpiresAt: Date
    /// The answer's session, sealed under a key derived from the used token.
    public var successorSealed: [UInt8]
    public var accessTokenID: UUID
    /// Nil for a self-contained (JWT) access token, which has no row.
    public var accessTokenHash: [UInt8]?
    public var accessTokenExpiresAt: Date
    public var abilities: [String]
    public var deviceName: String?
    public var at: Date

    public init(
        sessionID: UUID, usedTokenID: UUID, successorID: UUID, successorHash: [UInt8], successorExpiresAt: Date,
        successorSealed: [UInt8], accessTokenID: UUID, accessTokenHash: [UInt8]?, accessTokenExpiresAt: Date,
        abilities: [String], deviceName: String?, at: Date
    ) {
        self.sessionID = sessionID
        self.usedTokenID = usedTokenID
        self.successorID = successorID
        self.successorHash = successorHash
        self.successorExpiresAt = successorExpiresAt
        self.successorSealed = successorSealed
        self.accessTokenID = accessTokenID
        self.accessTokenHash = accessTokenHash
        self.accessTokenExpiresAt = accessTokenExpiresAt
        self.abilities = abilities
        self.deviceName = deviceName
        self.at = at
    }
}

/// A processed request as recorded with its effects.
public struct RequestRecord: Sendable, Equatable {
    public var requestID: String
    public var method: String
    /// The answer's status: `ok` or `error` (an error that changed something, such as a reused
    /// refresh token ending its session).
    public var status: String
    /// A keyed digest of the request's content: the id is bound to it.
    public var digest: [UInt8]?
    public var userID: UUID?
    public var sessionID: UUID?
    /// The answer, sealed with the results key; nil when there is no key.
    public var resultSealed: [UInt8]?
    public var processedAt: Date
    public var expiresAt: Date

    public init(
        requestID: String, method: String, status: String, digest: [UInt8]?, userID: UUID?, sessionID: UUID?,
        resultSealed: [UInt8]?, processedAt: Date, expiresAt: Date
    ) {
        self.requestID = requestID
        self.method = method
        self.status = status
        self.digest = digest
        self.userID = userID
        self.sessionID = sessionID
        self.resultSealed = resultSealed
        self.processedAt = processedAt
        self.expiresAt = expiresAt
    }
}

/// A request id within its tenant: two tenants' gateways may choose the same id, for two requests.
public struct RequestKey: Hashable, Sendable {
    public var tenant: String
    public var id: String

    public init(tenant: String, id: String) {
        self.tenant = tenant
        self.id = id
    }
}

extension RequestKey: Comparable, ExpressibleByStringLiteral {
    /// A default tenant's request id.
    public init(stringLiteral id: String) { self.init(tenant: Tenant.defaultName, id: id) }

    public static func < (lhs: RequestKey, rhs: RequestKey) -> Bool { (lhs.tenant, lhs.id) < (rhs.tenant, rhs.id) }
}

extension LoginRequest {
    /// The request's id within its tenant (the one it names, or the default one).
    public var key: RequestKey { RequestKey(tenant: tenant ?? Tenant.defaultName, id: id) }
}

/// A request id as found before a batch: processed before, with its digest and kept answer.
public struct KeptRequest: Sendable, Equatable {
    public var requestID: String
    public var digest: [UInt8]?
    public var resultSealed: [UInt8]?

    public init(requestID: String, digest: [UInt8]?, resultSealed: [UInt8]?) {
        self.requestID = requestID
        self.digest = digest
        self.resultSealed = resultSealed
    }
}

/// A one-time code as stored: its HMAC and its link token's hash, never the secrets.
public struct OneTimeCodeRecord: Sendable, Equatable {
    public var id: UUID
    /// Nil for a sign-up code: sent to an address that had no account.
    public var userID: UUID?
    public var purpose: String
    public var email: String
    public var codeHMAC: [UInt8]
    public var attempts: Int
    public var expiresAt: Date
    public var usedAt: Date?

    public init(
        id: UUID, userID: UUID?, purpose: String, email: String, codeHMAC: [UInt8], attempts: Int, expiresAt: Date,
        usedAt: Date?
    ) {
        self.id = id
        self.userID = userID
        self.purpose = purpose
        self.email = email
        self.codeHMAC = codeHMAC
        self.attempts = attempts
        self.expiresAt = expiresAt
        self.usedAt = usedAt
    }
}

/// A second factor as stored.
public struct MFAFactorRecord: Sendable, Equatable {
    public var userID: UUID
    public var secretSealed: [UInt8]
    /// When it was enrolled (a pending factor: when `mfa_enroll` made its secret).
    public var createdAt: Date
    public var enabledAt: Date?
    public var lastUsedStep: Int64?

    public init(userID: UUID, secretSealed: [UInt8], createdAt: Date, enabledAt: Date?, lastUsedStep: Int64?) {
        self.userID = userID
        self.secretSealed = secretSealed
        self.createdAt = createdAt
        self.enabledAt = enabledAt
        self.lastUsedStep = lastUsedStep
    }
}

/// A one-time code to store.
public struct NewOneTimeCode: Sendable, Equatable {
    public var id: UUID
    public var userID: UUID?
    public var purpose: String
    public var email: String
    public var codeHMAC: [UInt8]
    public var linkHash: [UInt8]
    public var createdAt: Date
    public var expiresAt: Date

    public init(
        id: UUID, userID: UUID?, purpose: String, email: String, codeHMAC: [UInt8], linkHash: [UInt8], createdAt: Date,
        expiresAt: Date
    ) {
        self.id = id
        self.userID = userID
        self.purpose = purpose
        self.email = email
        self.codeHMAC = codeHMAC
        self.linkHash = linkHash
        self.createdAt = createdAt
        self.expiresAt = expiresAt
    }
}

/// The rows a batch's flows will read, fetched (and locked) for the whole batch in one round
/// trip. Only a hint: a read of anything not named here goes to the database.
///
/// The rows are `tenant`'s; merging the prefetch of another tenant's request keeps its rows apart
/// (`otherTenants`), each tenant's read with its own tenant.
public struct Prefetch: Sendable, Equatable {
    public var tenant = Tenant.defaultName
    public var identities: [IdentityKey] = []
    public var users: [UUID] = []
    public var refreshTokens: [[UInt8]] = []
    public var sessions: [UUID] = []
    public var accessTokens: [[UInt8]] = []
    public var handles: [String] = []
    public var rateLimitBuckets: [String] = []
    /// The rows of the other tenants' requests of the batch, by tenant.
    public private(set) var otherTenants: [String: Prefetch] = [:]

    public init() {}

    public init(tenant: String) { self.tenant = tenant }

    public mutating func merge(_ other: Prefetch) {
        guard other.tenant == tenant else {
            var own = other
            own.otherTenants = [:]
            if own != Prefetch(tenant: own.tenant) {
                otherTenants[own.tenant, default: Prefetch(tenant: own.tenant)].merge(own)
            }
            for part in other.otherTenants.values { merge(part) }
            return
        }
        identities += other.identities
        users += other.users
        refreshTokens += other.refreshTokens
        sessions += other.sessions
        accessTokens += other.accessTokens
        handles += other.handles
        rateLimitBuckets += other.rateLimitBuckets
        for part in other.otherTenants.values { merge(part) }
    }

    /// Each tenant's rows, its own first and then the others' in the order of their names: the
    /// order their reads lock in.
    public var parts: [Prefetch] {
        var own = self
        own.otherTenants = [:]
        return [own] + otherTenants.keys.sorted().compactMap { otherTenants[$0] }
    }
}

/// (provider, subject): how an identity is named.
public struct IdentityKey: Hashable, Sendable {
    public var provider: String
    public var subject: String

    public init(provider: String, subject: String) {
        self.provider = provider
        self.subject = subject
    }
}
