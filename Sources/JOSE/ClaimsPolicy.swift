import AuthCrypto
import Foundation

/// What an ID token's claims must satisfy for one provider.
public struct ClaimsPolicy: Sendable, Equatable {
    /// How the token's `nonce` relates to the raw nonce the app sends.
    public enum NonceMode: String, Sendable, Codable {
        /// The token carries the raw nonce (Google, most OIDC providers).
        case raw
        /// The token carries `hex(SHA-256(raw))` (Sign in with Apple, Firebase's Apple flow).
        case sha256Hex = "sha256"
    }

    /// Exact `iss` values accepted.
    public var issuers: [String]
    /// Accepted `aud` values; the token must name at least one.
    public var audiences: [String]
    /// Tolerance for `exp`, `nbf` and `iat`. Default: 60 s.
    public var clockSkew: TimeInterval = 60
    /// Default: `.raw`.
    public var nonceMode: NonceMode = .raw
    /// Refuse requests without a nonce. Default: false (checked whenever the request has one).
    public var requireNonce = false
    /// Google Workspace: accepted `hd` values; nil accepts any or none.
    public var hostedDomains: [String]?
    /// Accepted `azp` values when the token has one; nil accepts any.
    public var authorizedParties: [String]?
    /// Refuse tokens issued longer ago than this, whatever their `exp`; nil for no limit.
    /// Default: one day (Apple and Google ID tokens live an hour to a day).
    public var maximumAge: TimeInterval? = 86400

    /// Require a `sub` claim. Default: true (false for provider notifications, whose subject is inside).
    public var requireSubject = true

    public init(issuers: [String], audiences: [String]) {
        self.issuers = issuers
        self.audiences = audiences
    }

    /// Checks `claims` at `now` against the policy and the request's raw nonce.
    /// - Throws: `JOSEError` with `.issuerMismatch`, `.audienceMismatch`, `.expired`, `.notYetValid`,
    ///   `.issuedInFuture`, `.nonceMismatch`, `.missingClaim` or `.invalidClaim`.
    public func validate(_ claims: IDTokenClaims, now: Date, nonce: String?) throws {
        let time = now.timeIntervalSince1970
        guard let issuer = claims.issuer else { throw JOSEError(.missingClaim, "iss is missing") }
        guard issuers.contains(issuer) else {
            throw JOSEError(.issuerMismatch, "iss is not one of the provider's issuers")
        }
        guard claims.audience.contains(where: audiences.contains) else {
            throw JOSEError(.audienceMismatch, "aud names none of the configured audiences")
        }
        // OpenID Connect Core §3.1.3.7 (3): reject additional audiences the client does not trust.
        guard claims.audience.allSatisfy(audiences.contains) else {
            throw JOSEError(.audienceMismatch, "aud lists an audience that is not trusted")
        }
        guard let expiresAt = claims.expiresAt else { throw JOSEError(.missingClaim, "exp is missing") }
        guard expiresAt + clockSkew > time else { throw JOSEError(.expired, "exp has passed") }
        if let notBefore = claims.notBefore, notBefore - clockSkew > time {
            throw JOSEError(.notYetValid, "nbf is in the future")
        }
        guard let issuedAt = claims.issuedAt else { throw JOSEError(.missingClaim, "iat is missing") }
        guard issuedAt - clockSkew <= time else { throw JOSEError(.issuedInFuture, "iat is in the future") }
        if let maximumAge, time - issuedAt > maximumAge + clockSkew {
            throw JOSEError(.expired, "issued too long ago")
        }
        if requireSubject {
            guard let subject = claims.subject, !subject.isEmpty else {
                throw JOSEError(.missingClaim, "sub is missing")
            }
        }
        if let authorizedParties, let party = claims.authorizedParty, !authorizedParties.contains(party) {
            throw JOSEError(.audienceMismatch, "azp is not an accepted client")
        }
        if let hostedDomains {
            guard let domain = claims.hostedDomain, hostedDomains.contains(domain) else {
                throw JOSEError(.audienceMismatch, "hd is not an accepted domain")
            }
        }
        try checkNonce(claims.nonce, raw: nonce)
    }

    private func checkNonce(_ tokenNonce: String?, raw: String?) throws {
        guard let raw, !raw.isEmpty else {
            if requireNonce {
                throw JOSEError(.nonceMismatch, "the request has no nonce, which this provider requires")
            }
            return
        }
        guard let tokenNonce else { throw JOSEError(.nonceMismatch, "the token has no nonce") }
        let expected = nonceMode == .sha256Hex ? Hex.encode(SHA256.hash(raw)) : raw
        guard ConstantTime.equals(Array(tokenNonce.utf8), Array(expected.utf8)) else {
            throw JOSEError(.nonceMismatch, "the token's nonce does not match the request's")
        }
    }
}
