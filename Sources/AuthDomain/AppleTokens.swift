import AuthCrypto
import Foundation

/// Seals what Sign in with Apple's REST API hands over (authorization codes, refresh tokens) at
/// rest, under a key derived from the results key, each bound to its Apple subject.
public struct AppleTokenKeys: Sendable {
    private let key: [UInt8]

    /// Nil without a results key to derive from.
    public init?(configuration: WorkerConfiguration) {
        guard let results = configuration.resultsKey else { return nil }
        key = HMACSHA256.mac(key: results, message: Array("auth-worker apple tokens".utf8))
    }

    public enum Secret: String, Sendable {
        case authorizationCode = "apple authorization code"
        case refreshToken = "apple refresh token"
    }

    public func seal(_ secret: String, _ kind: Secret, subject: String) throws -> [UInt8] {
        try AESGCM.seal(Array(secret.utf8), key: key, aad: Self.aad(kind, subject)).combined
    }

    public func open(_ sealed: [UInt8], _ kind: Secret, subject: String) -> String? {
        guard let box = AESGCM.Sealed(combined: sealed),
            let plain = AESGCM.open(box, key: key, aad: Self.aad(kind, subject))
        else { return nil }
        return String(validating: plain, as: UTF8.self)
    }

    private static func aad(_ kind: Secret, _ subject: String) -> [UInt8] {
        Array("\(kind.rawValue)\u{0}\(subject)".utf8)
    }
}

/// A job for Apple's REST API: exchange an authorization code, or revoke a refresh token.
public struct AppleJob: Sendable, Equatable {
    public enum Kind: String, Sendable {
        case exchange, revoke
    }

    public var id: UUID
    public var kind: Kind
    /// The Apple subject (`sub`) the secret belongs to.
    public var subject: String
    /// The app's bundle or services id: the `client_id` Apple issued the token to.
    public var clientID: String
    /// The code (exchange) or refresh token (revoke), sealed with `AppleTokenKeys`.
    public var secretSealed: [UInt8]
    public var attempts: Int
    public var createdAt: Date
    /// The tenant of the sign-in (or deletion) that queued it.
    public var tenant = TenantScope.defaultName

    public init(
        id: UUID, kind: Kind, subject: String, clientID: String, secretSealed: [UInt8], attempts: Int = 0,
        createdAt: Date
    ) {
        self.id = id
        self.kind = kind
        self.subject = subject
        self.clientID = clientID
        self.secretSealed = secretSealed
        self.attempts = attempts
        self.createdAt = createdAt
    }
}

/// An Apple refresh token as stored (sealed), by its subject.
public struct AppleTokenRecord: Sendable, Equatable {
    public var subject: String
    public var clientID: String
    public var refreshTokenSealed: [UInt8]

    public init(subject: String, clientID: String, refreshTokenSealed: [UInt8]) {
        self.subject = subject
        self.clientID = clientID
        self.refreshTokenSealed = refreshTokenSealed
    }
}

extension UnitOfWork {
    /// Queues the revocation of every Apple refresh token of `userID`'s Apple identities, and
    /// forgets the stored tokens: what a deletion does before the user goes.
    func queueAppleRevocations(userID: UUID, identifiers: Identifiers, at now: Date) throws {
        for identity in try identities(userID: userID) where identity.provider == "apple" {
            guard let token = try appleToken(subject: identity.subject) else { continue }
            try enqueueAppleJob(
                AppleJob(
                    id: try identifiers.uuid(), kind: .revoke, subject: token.subject, clientID: token.clientID,
                    secretSealed: token.refreshTokenSealed, createdAt: now))
            try deleteAppleToken(subject: token.subject)
        }
    }
}
