import Foundation

/// The claims of an OpenID Connect ID token (and Apple's additions), decoded leniently where
/// providers differ: `aud` as a string or an array, booleans as `true` or `"true"`, times as
/// integers or decimals.
public struct IDTokenClaims: Decodable, Sendable {
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

    enum CodingKeys: String, CodingKey {
        case iss, sub, aud, exp, nbf, iat, nonce, email, name, azp, hd, events
        case emailVerified = "email_verified"
        case isPrivateEmail = "is_private_email"
        case givenName = "given_name"
        case familyName = "family_name"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        issuer = try Self.string(container, .iss)
        subject = try Self.string(container, .sub)
        if let single = try? container.decodeIfPresent(String.self, forKey: .aud) {
            audience = [single]
        } else if let many = try? container.decodeIfPresent([String].self, forKey: .aud) {
            audience = many
        } else if container.contains(.aud), try !container.decodeNil(forKey: .aud) {
            throw JOSEError(.invalidClaim, "aud must be a string or an array of strings")
        } else {
            audience = []
        }
        expiresAt = try Self.number(container, .exp)
        notBefore = try Self.number(container, .nbf)
        issuedAt = try Self.number(container, .iat)
        nonce = try Self.string(container, .nonce)
        email = try Self.string(container, .email)
        emailVerified = try Self.boolean(container, .emailVerified)
        isPrivateEmail = try Self.boolean(container, .isPrivateEmail)
        name = try Self.string(container, .name)
        givenName = try Self.string(container, .givenName)
        familyName = try Self.string(container, .familyName)
        authorizedParty = try Self.string(container, .azp)
        hostedDomain = try Self.string(container, .hd)
        events = try Self.string(container, .events)
    }

    public init(issuer: String?, subject: String?, audience: [String]) {
        self.issuer = issuer
        self.subject = subject
        self.audience = audience
    }

    private static func string(_ container: KeyedDecodingContainer<CodingKeys>, _ key: CodingKeys) throws -> String? {
        guard container.contains(key), try !container.decodeNil(forKey: key) else { return nil }
        guard let value = try? container.decode(String.self, forKey: key) else {
            throw JOSEError(.invalidClaim, "\(key.stringValue) must be a string")
        }
        return value
    }

    private static func number(_ container: KeyedDecodingContainer<CodingKeys>, _ key: CodingKeys) throws -> Double? {
        guard container.contains(key), try !container.decodeNil(forKey: key) else { return nil }
        guard let value = try? container.decode(Double.self, forKey: key), value.isFinite else {
            throw JOSEError(.invalidClaim, "\(key.stringValue) must be a number")
        }
        return value
    }

    private static func boolean(_ container: KeyedDecodingContainer<CodingKeys>, _ key: CodingKeys) throws -> Bool? {
        guard container.contains(key), try !container.decodeNil(forKey: key) else { return nil }
        if let value = try? container.decode(Bool.self, forKey: key) { return value }
        switch try? container.decode(String.self, forKey: key) {
        case "true": return true
        case "false": return false
        default: throw JOSEError(.invalidClaim, "\(key.stringValue) must be a boolean")
        }
    }
}
