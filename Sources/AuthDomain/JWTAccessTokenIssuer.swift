import AuthCrypto
import Foundation
import JOSE
import Messages
import ServiceKit
import StrictJSON

/// Signs access tokens as JWTs (RFC 9068 profile: `typ` `at+jwt`) with the newest configured key.
///
/// Keys go through three states, so verifiers that cache the JWK Set never meet a token signed
/// by a key they have not fetched: *next* (`AUTH_SIGNING_KEYS_NEXT`: published, not signing yet),
/// *current* (the first of `AUTH_SIGNING_KEYS`: signs) and *previous* (the rest of
/// `AUTH_SIGNING_KEYS`: published until the tokens they signed have expired).
public struct JWTAccessTokenIssuer: AccessTokenIssuer {
    /// The current key (the signer) first, then the previous ones.
    public let keys: [SigningKey]
    /// Keys published before they sign.
    public let nextKeys: [SigningKey]
    /// What the JWK Set publishes: current, previous, next.
    public var publishedKeys: [SigningKey] { keys + nextKeys }
    private let issuer: String
    private let audience: String
    /// The `tenant` claim of the tokens it issues and accepts: a tenant's name; nil for the
    /// default tenant, whose tokens carry none (as before tenants).
    private let tenant: String?
    /// The public halves of `keys`, made once: what `verify` checks against.
    private let verificationKeys: JWKSet
    /// The current key's protected header, encoded once: the same for every token it signs.
    private let headerSegment: String?

    /// Loads every key file named by `AUTH_SIGNING_KEYS`.
    /// - Parameter tenant: whose tokens these are (its name in their `tenant` claim; none for the
    ///   default tenant).
    /// - Throws: `ConfigurationError` for a missing, unreadable or unsupported key: never a silent fallback.
    public init(configuration: WorkerConfiguration, tenant: String = Tenant.defaultName) throws {
        self.tenant = tenant == Tenant.defaultName ? nil : tenant
        guard !configuration.signingKeyPaths.isEmpty else {
            throw ConfigurationError(variable: Setting.signingKeys.name, reason: "is required for jwt access tokens")
        }
        func load(_ paths: [String], variable: String) throws -> [SigningKey] {
            try paths.map { path in
                guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
                    throw ConfigurationError(variable: variable, reason: "cannot read \(path)")
                }
                do {
                    return try SigningKey(pem: pem)
                } catch {
                    throw ConfigurationError(variable: variable, reason: "\(path): \(error)")
                }
            }
        }
        keys = try load(configuration.signingKeyPaths, variable: Setting.signingKeys.name)
        nextKeys = try load(configuration.nextSigningKeyPaths, variable: Setting.signingKeysNext.name)
        let current = Set(keys.map(\.keyID))
        if let twice = nextKeys.first(where: { current.contains($0.keyID) }) {
            throw ConfigurationError(
                variable: Setting.signingKeysNext.name, reason: "key \(twice.keyID) is also in AUTH_SIGNING_KEYS")
        }
        issuer = configuration.tokenIssuer
        audience = configuration.tokenAudience
        verificationKeys = JWKSet(
            keys: try (keys + nextKeys).map { key in
                JWK(keyID: key.keyID, use: "sig", algorithm: key.algorithm.rawValue, key: try key.publicKey())
            })
        headerSegment = keys.first.map { key in
            Base64URL.encode(
                MessageCoding.encode(JWTHeader(alg: key.algorithm.rawValue, kid: key.keyID, typ: "at+jwt")))
        }
    }

    public var isSelfContained: Bool { true }

    public func issue(_ claims: AccessTokenClaims) throws -> String {
        guard let key = keys.first, let headerSegment else {
            throw SigningKey.Failure(description: "no signing key")
        }
        let payload = JWTAccessClaims(
            iss: issuer, aud: audience, sub: claims.userID.lowercasedString, sid: claims.sessionID.lowercasedString,
            jti: claims.tokenID.lowercasedString, iat: Int64(claims.issuedAt.timeIntervalSince1970),
            exp: Int64(claims.expiresAt.timeIntervalSince1970), abilities: claims.abilities, guest: claims.isGuest,
            tenant: tenant)
        let payloadSegment = Base64URL.encode(MessageCoding.encode(payload))
        // The token's bytes in one buffer, sized once: header, payload, then (after signing
        // what is there so far) the signature. The signature's segment is at most 128
        // characters for the algorithms that issue (ES256's and Ed25519's are 86).
        var token: [UInt8] = []
        token.reserveCapacity(headerSegment.utf8.count + payloadSegment.utf8.count + 2 + 128)
        token.append(contentsOf: headerSegment.utf8)
        token.append(UInt8(ascii: "."))
        token.append(contentsOf: payloadSegment.utf8)
        let signature = try key.sign(token)
        token.append(UInt8(ascii: "."))
        token.append(contentsOf: Base64URL.encode(signature).utf8)
        return String(decoding: token, as: UTF8.self)
    }

    /// The claims of an access token this worker issued, when its signature (by any configured
    /// key), issuer, audience, tenant and expiry check out: a token naming another tenant (or a
    /// tenant's at the default one) is not this issuer's, whatever keys the tenants share.
    public func verify(_ token: String, now: Date) throws -> AccessTokenClaims {
        let jws = try CompactJWS(token)
        try JWSVerifier.verifySignature(jws, keys: verificationKeys, allowed: [.edDSA, .es256])
        let members = try JSONReader.object(jws.payload)
        guard let contents = AccessTokenContents(members), contents.issuer == issuer, contents.audience == audience,
            contents.tenant == tenant,
            let userID = UUID(uuidString: contents.subject), let sessionID = UUID(uuidString: contents.sessionID),
            let tokenID = UUID(uuidString: contents.tokenID)
        else { throw JOSEError(.invalidClaim, "not an access token of this issuer") }
        guard contents.expiresAt > now.timeIntervalSince1970 else {
            throw JOSEError(.expired, "the access token has expired")
        }
        return AccessTokenClaims(
            tokenID: tokenID, userID: userID, sessionID: sessionID, abilities: contents.abilities,
            isGuest: contents.isGuest, issuedAt: Date(timeIntervalSince1970: contents.issuedAt),
            expiresAt: Date(timeIntervalSince1970: contents.expiresAt))
    }

    /// The public keys as a JWK Set document.
    public static func jwks(_ keys: [SigningKey]) throws -> String {
        let document = ["keys": keys.map(\.publicJWK)]
        return String(decoding: try MessageCoding.encodeDocument(document), as: UTF8.self)
    }
}

struct JWTHeader {
    var alg: String
    var kid: String
    var typ: String
}

/// Claims of an issued access token.
struct JWTAccessClaims {
    var iss: String
    var aud: String
    var sub: String
    var sid: String
    var jti: String
    var iat: Int64
    var exp: Int64
    var abilities: [String]
    var guest: Bool
    /// A tenant's name; nil (and no member) for the default tenant.
    var tenant: String?
}

extension SigningKey {
    /// The verification key of this signing key.
    func publicKey() throws -> PublicKey {
        try PublicKey.pem(try publicKeyPEM())
    }
}

extension JWTHeader: JSONWritable {
    func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("alg", alg)
            out.member("kid", kid)
            out.member("typ", typ)
        }
    }
}

extension JWTAccessClaims: JSONWritable {
    func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("abilities", abilities)
            out.member("aud", aud)
            out.member("exp", exp)
            out.member("guest", guest)
            out.member("iat", iat)
            out.member("iss", iss)
            out.member("jti", jti)
            out.member("sid", sid)
            out.member("sub", sub)
            if let tenant { out.member("tenant", tenant) }
        }
    }
}
