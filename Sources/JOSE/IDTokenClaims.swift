import Foundation
import StrictJSON

/// The claims of an OpenID Connect ID token (and Apple's additions), decoded leniently where
/// providers differ: `aud` as a string or an array, booleans as `true` or `"true"`, times as
/// integers or decimals.
public struct IDTokenClaims: Sendable {
    public var issuer: String?
    public var subject: String?
    public var audience: [String]
    public var expiresAt: Double?
    public var notBefore: Double?
    public var issuedAt: Double?
    public var nonce: String?
    public var email: String?
    public var emailVerified: Bool?
    public var isPrivateEmail: Bool?
    public var name: String?
    public var givenName: String?
    public var familyName: String?
    /// Google: the authorised party (the client that asked for the token).
    public var authorizedParty: String?
    /// Google Workspace: the hosted domain.
    public var hostedDomain: String?
    /// Apple server-to-server notifications: a JSON string.
    public var events: String?

    /// Every member of the payload, for claims this type does not model.
    public var members: [String: JSONValue]

    /// Reads the claims from a decoded payload object.
    /// - Throws: `JOSEError.invalidClaim` for a claim of the wrong type.
    public init(members: [String: JSONValue]) throws {
        self.members = members
        issuer = try Self.string(members, "iss")
        subject = try Self.string(members, "sub")
        switch members["aud"] {
        case nil, .null?: audience = []
        case .string(let single)?: audience = [single]
        case .array(let many)?:
            audience = try many.map { element in
                guard case .string(let value) = element else {
                    throw JOSEError(.invalidClaim, "aud must be a string or an array of strings")
                }
                return value
            }
        default: throw JOSEError(.invalidClaim, "aud must be a string or an array of strings")
        }
        expiresAt = try Self.number(members, "exp")
        notBefore = try Self.number(members, "nbf")
        issuedAt = try Self.number(members, "iat")
        nonce = try Self.string(members, "nonce")
        email = try Self.string(members, "email")
        emailVerified = try Self.boolean(members, "email_verified")
        isPrivateEmail = try Self.boolean(members, "is_private_email")
        name = try Self.string(members, "name")
        givenName = try Self.string(members, "given_name")
        familyName = try Self.string(members, "family_name")
        authorizedParty = try Self.string(members, "azp")
        hostedDomain = try Self.string(members, "hd")
        events = try Self.string(members, "events")
    }

    public init(issuer: String?, subject: String?, audience: [String]) {
        self.issuer = issuer
        self.subject = subject
        self.audience = audience
        self.members = [:]
    }

    private static func string(_ members: [String: JSONValue], _ name: String) throws -> String? {
        switch members[name] {
        case nil, .null?: return nil
        case .string(let value)?: return value
        default: throw JOSEError(.invalidClaim, "\(name) must be a string")
        }
    }

    private static func number(_ members: [String: JSONValue], _ name: String) throws -> Double? {
        switch members[name] {
        case nil, .null?: return nil
        case .number(let value)?: return value
        default: throw JOSEError(.invalidClaim, "\(name) must be a number")
        }
    }

    /// Booleans, also as the strings `"true"` and `"false"` (Apple sends them so).
    private static func boolean(_ members: [String: JSONValue], _ name: String) throws -> Bool? {
        switch members[name] {
        case nil, .null?: return nil
        case .bool(let value)?: return value
        case .string("true")?: return true
        case .string("false")?: return false
        default: throw JOSEError(.invalidClaim, "\(name) must be a boolean")
        }
    }
}
