import AuthCrypto
import Foundation
import Messages
import StrictJSON

/// What the worker publishes for verifiers and gateways: the JWK Set (signing keys in every
/// state, `use: sig`, and the credential-encryption keys, `use: enc`) and an OpenID-style
/// discovery document pointing at it. Made once at start; served by `auth-worker keys jwks` and
/// on the health port at `/.well-known/jwks.json` and `/.well-known/openid-configuration`.
public struct PublishedKeys: Sendable {
    /// The JWK Set document.
    public let jwks: String
    /// The discovery document, when there is a `jwks_uri` to announce.
    public let discovery: String?
    /// Whether any key is published.
    public let isEmpty: Bool

    /// - Throws: `ConfigurationError` for a key file that cannot be loaded.
    public init(configuration: WorkerConfiguration) throws {
        var signing: [SigningKey] = []
        if !configuration.signingKeyPaths.isEmpty {
            var jwt = configuration
            jwt.accessTokenFormat = .jwt
            signing = try JWTAccessTokenIssuer(configuration: jwt).publishedKeys
        }
        let credentials = try CredentialKeys(paths: configuration.credentialKeyPaths).keys
        let keys = signing.map(\.publicJWK) + credentials.map(\.publicJWK)
        isEmpty = keys.isEmpty
        jwks = String(decoding: try MessageCoding.encodeDocument(["keys": keys]), as: UTF8.self)

        let issuer = configuration.tokenIssuer
        var jwksURI = configuration.jwksURI
        if jwksURI == nil, let url = URL(string: issuer), ["https", "http"].contains(url.scheme ?? ""),
            url.host != nil
        {
            jwksURI = (issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer) + "/.well-known/jwks.json"
        }
        if let jwksURI, !signing.isEmpty {
            let algorithms = Array(Set(signing.map(\.algorithm.rawValue))).sorted()
            let document = DiscoveryDocument(
                issuer: issuer, jwksURI: jwksURI, algorithms: algorithms, audience: configuration.tokenAudience)
            discovery = String(decoding: document.jsonBytes, as: UTF8.self)
        } else {
            discovery = nil
        }
    }
}

/// The subset of OpenID Provider Metadata (and RFC 8414) that a resource server needs to verify
/// the worker's access tokens: who issues them and where the keys are.
struct DiscoveryDocument: JSONWritable {
    var issuer: String
    var jwksURI: String
    var algorithms: [String]
    var audience: String

    func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("issuer", issuer)
            out.member("jwks_uri", jwksURI)
            out.member("id_token_signing_alg_values_supported", algorithms)
            out.member("access_token_signing_alg_values_supported", algorithms)
            out.member("subject_types_supported", ["public"])
            out.member("response_types_supported", ["token"])
            out.member("token_types_supported", ["at+jwt"])
            out.member("access_token_audience", audience)
            out.member(
                "claims_supported", ["iss", "aud", "sub", "sid", "jti", "iat", "exp", "abilities", "guest"])
        }
    }
}
