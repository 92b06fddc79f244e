import Foundation
import StrictJSON

/// Verifies compact JWS signatures against a key set, then claims against a policy.
public enum JWSVerifier {
    /// Checks the signature of `jws` with the key its header names.
    ///
    /// Order: `alg` must be implemented and allowed (so `none` and HMAC never reach a key); the key
    /// is chosen by `kid` only (never by trying every key), and must fit the algorithm; then the
    /// signature is verified.
    /// - Parameters:
    ///   - allowed: the provider's algorithm allow-list.
    ///   - requireKeyID: refuse tokens without `kid`. When false, a token without `kid` is checked
    ///     against the set's only key, if it has exactly one.
    /// - Returns: the key that verified it.
    /// - Throws: `JOSEError` `.algorithmNotAllowed`, `.keyNotFound`, `.keyMismatch` or `.badSignature`.
    @discardableResult
    public static func verifySignature(
        _ jws: CompactJWS, keys: JWKSet, allowed: Set<JWSAlgorithm>, requireKeyID: Bool = true
    ) throws -> JWK {
        guard let algorithm = JWSAlgorithm(rawValue: jws.header.alg) else {
            throw JOSEError(.algorithmNotAllowed, "alg \(jws.header.alg.prefix(16)) is not supported")
        }
        guard allowed.contains(algorithm) else {
            throw JOSEError(.algorithmNotAllowed, "alg \(algorithm.rawValue) is not allowed for this provider")
        }
        let candidates: [JWK]
        if let kid = jws.header.kid {
            candidates = keys.keys(withID: kid)
            guard !candidates.isEmpty else { throw JOSEError(.keyNotFound, "no key with the token's kid") }
        } else {
            guard !requireKeyID, keys.keys.count == 1 else { throw JOSEError(.keyNotFound, "the token has no kid") }
            candidates = keys.keys
        }
        let fitting = candidates.filter { $0.permits(algorithm) }
        guard !fitting.isEmpty else {
            throw JOSEError(.keyMismatch, "the key named by kid does not allow \(algorithm.rawValue)")
        }
        for key in fitting
        where try key.key.verify(signature: jws.signature, message: jws.signingInput, algorithm: algorithm) {
            return key
        }
        throw JOSEError(.badSignature, "the signature does not verify")
    }

    /// Signature first, then claims: decodes the payload only once the signature is good.
    /// - Returns: the verified claims.
    public static func verifyIDToken(
        _ jws: CompactJWS, keys: JWKSet, allowed: Set<JWSAlgorithm>, policy: ClaimsPolicy, now: Date,
        nonce: String?, requireKeyID: Bool = true
    ) throws -> IDTokenClaims {
        try verifySignature(jws, keys: keys, allowed: allowed, requireKeyID: requireKeyID)
        let claims = try decodeClaims(jws.payload)
        try policy.validate(claims, now: now, nonce: nonce)
        return claims
    }

    /// Decodes a payload as ID token claims.
    /// - Throws: `JOSEError.malformed` when it is not a JSON object, `.invalidClaim` for a mistyped claim.
    public static func decodeClaims(_ payload: [UInt8]) throws -> IDTokenClaims {
        let members: [String: JSONValue]
        do {
            members = try JSONReader.object(payload)
        } catch let error as JSONReader.Failure {
            throw JOSEError(.malformed, "the payload is not a JSON object: \(error)")
        }
        return try IDTokenClaims(members: members)
    }
}
