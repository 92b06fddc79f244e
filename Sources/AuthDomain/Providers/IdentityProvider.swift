import Foundation
import JOSE
import Messages
import ServiceKit

/// What a verified ID token says about the person signing in.
public struct VerifiedIdentity: Sendable, Equatable {
    public var provider: String
    /// The provider's stable user id (`sub`): the identity's key.
    public var subject: String
    /// Lower-cased; nil when the token has none.
    public var email: String?
    public var emailVerified: Bool
    /// Apple's "Hide my e-mail" relay address (real and verified, but useless for matching).
    public var isPrivateEmail: Bool
    /// The name in the token (Google); Apple never puts one there.
    public var name: String?
    /// The configured audience the token was issued to (Apple: the app's bundle or services id,
    /// the `client_id` of Apple's token endpoints).
    public var audience: String?

    public init(
        provider: String, subject: String, email: String?, emailVerified: Bool, isPrivateEmail: Bool, name: String?
    ) {
        self.provider = provider
        self.subject = subject
        self.email = email
        self.emailVerified = emailVerified
        self.isPrivateEmail = isPrivateEmail
        self.name = name
    }
}

/// One configured provider: its key set and its claims policy.
public struct IdentityProvider: Sendable {
    public let configuration: IdentityProviderConfiguration
    public let keySet: KeySetCache
    private let clock: any WorkerClock

    public init(configuration: IdentityProviderConfiguration, keySet: KeySetCache, clock: any WorkerClock) {
        self.configuration = configuration
        self.keySet = keySet
        self.clock = clock
    }

    /// The domain Apple's private relay addresses use.
    public static let privateRelayDomain = "privaterelay.appleid.com"

    /// Verifies an ID token as a login would: signature with the provider's keys, then claims.
    /// - Returns: the verified header's `kid`, the claims, and the identity they describe.
    /// - Throws: `JOSEError` (mapped to contract codes by `LoginError(_:)`).
    public func verify(token: String, nonce: String?) async throws -> (
        claims: IDTokenClaims, identity: VerifiedIdentity
    ) {
        let jws = try parse(token)
        return try verify(jws, keys: try await keySet.keys(forKeyID: jws.header.kid), nonce: nonce)
    }

    /// `verify`, when the provider's keys are cached, fresh and hold the token's `kid`: no wait.
    /// - Returns: nil when `verify` would wait for the key set (a fetch, a refetch for an unknown
    ///   `kid`, a fallback to stale keys); it is then the way.
    public func verifyAtOnce(token: String, nonce: String?) throws -> (
        claims: IDTokenClaims, identity: VerifiedIdentity
    )? {
        let jws = try parse(token)
        guard let keys = keySet.freshKeys(forKeyID: jws.header.kid) else { return nil }
        return try verify(jws, keys: keys, nonce: nonce)
    }

    /// The token's parts, its algorithm refused before any key is looked at when not allowed.
    private func parse(_ token: String) throws -> CompactJWS {
        let jws = try CompactJWS(token)
        guard let algorithm = JWSAlgorithm(rawValue: jws.header.alg), configuration.algorithms.contains(algorithm)
        else {
            throw JOSEError(
                .algorithmNotAllowed, "alg \(jws.header.alg.prefix(16)) is not allowed for \(configuration.name)")
        }
        return jws
    }

    private func verify(_ jws: CompactJWS, keys: JWKSet, nonce: String?) throws -> (
        claims: IDTokenClaims, identity: VerifiedIdentity
    ) {
        let claims = try JWSVerifier.verifyIDToken(
            jws, keys: keys, allowed: configuration.algorithms, policy: configuration.claimsPolicy, now: clock.now(),
            nonce: nonce, requireKeyID: configuration.requireKeyID)
        // A NUL would cut a value short in C code and the database: `victim\u0000x` must never
        // be read as `victim`. No provider issues one; a token that has one is refused.
        for (name, value) in [
            ("sub", claims.subject), ("email", claims.email), ("name", claims.name),
            ("given_name", claims.givenName), ("family_name", claims.familyName),
        ] where value?.utf8.contains(0) == true {
            throw JOSEError(.invalidClaim, "\(name) contains a NUL character")
        }
        return (claims, identity(from: claims))
    }

    func identity(from claims: IDTokenClaims) -> VerifiedIdentity {
        let email = claims.email?.trimmingWhitespace().lowercased()
        let relay = email?.hasSuffix("@" + Self.privateRelayDomain) ?? false
        let joined = [claims.givenName, claims.familyName].compactMap { $0?.trimmingWhitespace() }
            .filter { !$0.isEmpty }.joined(separator: " ")
        let name = claims.name?.trimmingWhitespace()
        var identity = VerifiedIdentity(
            provider: configuration.name, subject: claims.subject ?? "", email: email?.isEmpty == true ? nil : email,
            emailVerified: claims.emailVerified ?? false, isPrivateEmail: (claims.isPrivateEmail ?? false) || relay,
            name: name?.isEmpty == false ? name : (joined.isEmpty ? nil : joined))
        identity.audience = claims.audience.first { configuration.audiences.contains($0) }
        return identity
    }
}

/// The enabled providers by name: those that issue ID tokens (Apple, Google, OpenID Connect) and
/// the OAuth 2.0 ones whose codes the worker exchanges.
public struct IdentityProviders: Sendable {
    private let providers: [String: IdentityProvider]
    private let oauthProviders: [String: OAuthProvider]

    public init(_ providers: [IdentityProvider], oauth: [OAuthProvider] = []) {
        self.providers = Dictionary(
            providers.map { ($0.configuration.name, $0) }, uniquingKeysWith: { first, _ in first })
        oauthProviders = Dictionary(oauth.map { ($0.configuration.name, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// Builds every provider the configuration enables, fetching keys with `fetcher`.
    public static func build(
        configuration: WorkerConfiguration, fetcher: any DocumentFetcher, clock: any WorkerClock, logger: Logger
    ) throws -> IdentityProviders {
        let file = try configuration.providersFile()
        let withTokens = try configuration.identityProviders(file: file).map { provider in
            let source: KeySetCache.Source =
                if let url = provider.keysURL {
                    .keysURL(url)
                } else if let discovery = provider.discoveryURL {
                    .discovery(discovery, issuers: provider.issuers)
                } else {
                    throw ConfigurationError(
                        variable: Setting.oidcProviders.name, reason: "\(provider.name) has no keys")
                }
            let cache = KeySetCache(
                source: source, fetcher: fetcher, clock: clock, settings: configuration.keySets,
                logger: logger.child(label: "auth.keys.\(provider.name)"))
            return IdentityProvider(configuration: provider, keySet: cache, clock: clock)
        }
        let oauth = file.oauth.map {
            OAuthProvider(configuration: $0, logger: logger.child(label: "auth.oauth.\($0.name)"))
        }
        return IdentityProviders(withTokens, oauth: oauth)
    }

    public subscript(name: String) -> IdentityProvider? { providers[name] }

    /// The OAuth 2.0 provider an `oauth` request names.
    public func oauth(_ name: String) -> OAuthProvider? { oauthProviders[name] }

    public var names: [String] { (Array(providers.keys) + Array(oauthProviders.keys)).sorted() }
}

extension LoginError {
    /// The contract's code for a verification failure.
    public init(_ error: JOSEError) {
        let code: ErrorCode =
            switch error.code {
            case .expired, .notYetValid, .issuedInFuture: .tokenExpired
            case .issuerMismatch: .issuerMismatch
            case .audienceMismatch: .audienceMismatch
            case .nonceMismatch: .nonceMismatch
            case .keySetUnavailable: .providerUnavailable
            default: .invalidToken
            }
        self.init(code, error.reason, retriable: error.code == .keySetUnavailable)
    }
}
