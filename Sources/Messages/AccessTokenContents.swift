import StrictJSON

/// The claims of the worker's JWT access tokens (`typ` `at+jwt`; docs/gateway-guide.md, "Sessions and tokens"), read
/// from a payload whose signature has been checked: one reading for the worker and for gateways.
public struct AccessTokenContents: Sendable, Equatable {
    public var issuer: String
    public var audience: String
    /// The user id (`sub`).
    public var subject: String
    /// The session id (`sid`).
    public var sessionID: String
    /// The token id (`jti`).
    public var tokenID: String
    /// Seconds since 1970 (`iat`, `exp`).
    public var issuedAt: Double
    public var expiresAt: Double
    public var abilities: [String]
    public var isGuest: Bool
    /// The tenant whose token it is (`tenant`); nil for the default tenant's, which name none.
    public var tenant: String?

    /// - Returns: nil when a required claim is missing or not of its type.
    public init?(_ members: [String: JSONValue]) {
        guard case .string(let iss)? = members["iss"], case .string(let aud)? = members["aud"],
            case .string(let sub)? = members["sub"], case .string(let sid)? = members["sid"],
            case .string(let jti)? = members["jti"], case .number(let exp)? = members["exp"],
            case .number(let iat)? = members["iat"]
        else { return nil }
        issuer = iss
        audience = aud
        subject = sub
        sessionID = sid
        tokenID = jti
        issuedAt = iat
        expiresAt = exp
        abilities = []
        if case .array(let values)? = members["abilities"] {
            abilities = values.compactMap { if case .string(let value) = $0 { value } else { nil } }
        }
        isGuest = false
        if case .bool(let value)? = members["guest"] { isGuest = value }
        if case .string(let value)? = members["tenant"] { tenant = value }
    }
}
