import AuthCrypto
import Foundation
import Messages

/// Signs access tokens as JWTs (RFC 9068 profile: `typ` `at+jwt`) with the newest configured key.
///
/// Every configured key is published in the JWK Set (`auth-worker keys jwks`), so tokens signed
/// by a previous key keep verifying until they expire.
public struct JWTAccessTokenIssuer: AccessTokenIssuer {
    /// All loaded keys, newest (the signer) first.
    public let keys: [SigningKey]
    private let issuer: String
    private let audience: String

    /// Loads every key file named by `AUTH_SIGNING_KEYS`.
    /// - Throws: `ConfigurationError` for a missing, unreadable or unsupported key: never a silent fallback.
    public init(configuration: WorkerConfiguration) throws {
        guard !configuration.signingKeyPaths.isEmpty else {
            throw ConfigurationError(variable: "AUTH_SIGNING_KEYS", reason: "is required for jwt access tokens")
        }
        keys = try configuration.signingKeyPaths.map { path in
            guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigurationError(variable: "AUTH_SIGNING_KEYS", reason: "cannot read \(path)")
            }
            do {
                return try SigningKey(pem: pem)
            } catch {
                throw ConfigurationError(variable: "AUTH_SIGNING_KEYS", reason: "\(path): \(error)")
            }
        }
        issuer = configuration.tokenIssuer
        audience = configuration.tokenAudience
    }

    public func issue(_ claims: AccessTokenClaims) throws -> String {
        guard let key = keys.first else { throw SigningKey.Failure(description: "no signing key") }
        let header = JWTHeader(alg: key.algorithm.rawValue, kid: key.keyID, typ: "at+jwt")
        let payload = JWTAccessClaims(
            iss: issuer, aud: audience, sub: claims.userID.lowercasedString, sid: claims.sessionID.lowercasedString,
            jti: claims.tokenID.lowercasedString, iat: Int64(claims.issuedAt.timeIntervalSince1970),
            exp: Int64(claims.expiresAt.timeIntervalSince1970), abilities: claims.abilities, guest: claims.isGuest)
        let signingInput =
            Base64URL.encode(try MessageCoding.encode(header)) + "."
            + Base64URL.encode(try MessageCoding.encode(payload))
        let signature = try key.sign(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }

    /// The public keys as a JWK Set document.
    public static func jwks(_ keys: [SigningKey]) throws -> String {
        let document = ["keys": keys.map(\.publicJWK)]
        return String(decoding: try MessageCoding.encode(document), as: UTF8.self)
    }
}

struct JWTHeader: Codable {
    var alg: String
    var kid: String
    var typ: String
}

/// Claims of an issued access token.
struct JWTAccessClaims: Codable {
    var iss: String
    var aud: String
    var sub: String
    var sid: String
    var jti: String
    var iat: Int64
    var exp: Int64
    var abilities: [String]
    var guest: Bool
}
