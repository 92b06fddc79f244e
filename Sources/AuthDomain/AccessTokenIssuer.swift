import AuthCrypto
import Foundation

/// Claims of an access token to issue.
public struct AccessTokenClaims: Sendable, Equatable {
    public var tokenID: UUID
    public var userID: UUID
    public var sessionID: UUID
    public var abilities: [String]
    public var isGuest: Bool
    public var issuedAt: Date
    public var expiresAt: Date

    public init(
        tokenID: UUID, userID: UUID, sessionID: UUID, abilities: [String], isGuest: Bool, issuedAt: Date,
        expiresAt: Date
    ) {
        self.tokenID = tokenID
        self.userID = userID
        self.sessionID = sessionID
        self.abilities = abilities
        self.isGuest = isGuest
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
    }
}

/// Makes access tokens in the configured format.
public protocol AccessTokenIssuer: Sendable {
    /// The token string handed to the client once; the store keeps only its SHA-256.
    func issue(_ claims: AccessTokenClaims) throws -> String

    /// True when a token proves itself (a signed JWT, checked against the session it names): no
    /// row per token is kept. False for opaque tokens, looked up by their SHA-256.
    var isSelfContained: Bool { get }
}

/// Sanctum-style personal access tokens: `<token id>|<40 random characters>`.
///
/// The id part lets a gateway find the row without a scan; the secret part carries ~238 bits of
/// entropy. Stored only as the SHA-256 of the whole string.
public struct OpaqueTokenIssuer: AccessTokenIssuer {
    private let identifiers: Identifiers

    public init(identifiers: Identifiers) {
        self.identifiers = identifiers
    }

    public func issue(_ claims: AccessTokenClaims) throws -> String {
        "\(claims.tokenID.lowercasedString)|\(try identifiers.secret(characters: 40))"
    }

    public var isSelfContained: Bool { false }
}
