import Foundation
import JOSE
import ServiceKit

/// How one identity provider's ID tokens are verified.
public struct IdentityProviderConfiguration: Sendable, Equatable {
    /// The name requests use: `apple`, `google`, or the `provider` of an `oidc` request.
    public var name: String
    /// Exact `iss` values accepted.
    public var issuers: [String]
    /// Where the key set is fetched; nil when it is found through discovery.
    public var keysURL: URL?
    /// `<issuer>/.well-known/openid-configuration`, used when `keysURL` is nil.
    public var discoveryURL: URL?
    /// Accepted `aud` values (the app's client ids). Required: a provider without any is refused.
    public var audiences: [String]
    /// The algorithm allow-list. Default: RS256.
    public var algorithms: Set<JWSAlgorithm> = [.rs256]
    public var nonceMode: ClaimsPolicy.NonceMode = .raw
    public var requireNonce = false
    public var hostedDomains: [String]?
    public var authorizedParties: [String]?
    /// Default: 60 s.
    public var clockSkew: TimeInterval = 60
    /// Refuse tokens without `kid`. Default: true for Apple and Google (which always set one);
    /// false for OIDC providers, where a token without `kid` is checked against a single-key set.
    public var requireKeyID = true
    /// Refuse tokens issued longer ago than this. Default: one day.
    public var maximumTokenAge: TimeInterval? = 86400

    public init(name: String, issuers: [String], keysURL: URL?, audiences: [String]) {
        self.name = name
        self.issuers = issuers
        self.keysURL = keysURL
        self.audiences = audiences
    }

    /// Sign in with Apple: RS256, both issuers Apple uses, and the hashed nonce of its SDKs.
    public static func apple(audiences: [String], keysURL: URL) -> IdentityProviderConfiguration {
        var configuration = IdentityProviderConfiguration(
            name: "apple", issuers: ["https://appleid.apple.com", "https://account.apple.com"], keysURL: keysURL,
            audiences: audiences)
        configuration.nonceMode = .sha256Hex
        return configuration
    }

    /// Google: RS256, both spellings of its issuer, the raw nonce.
    public static func google(audiences: [String], keysURL: URL) -> IdentityProviderConfiguration {
        IdentityProviderConfiguration(
            name: "google", issuers: ["accounts.google.com", "https://accounts.google.com"], keysURL: keysURL,
            audiences: audiences)
    }

    /// The claims policy this configuration implies.
    public var claimsPolicy: ClaimsPolicy {
        var policy = ClaimsPolicy(issuers: issuers, audiences: audiences)
        policy.clockSkew = clockSkew
        policy.nonceMode = nonceMode
        policy.requireNonce = requireNonce
        policy.hostedDomains = hostedDomains
        policy.authorizedParties = authorizedParties
        policy.maximumAge = maximumTokenAge
        return policy
    }

    /// Throws a `ConfigurationError` when the provider cannot work.
    public func validate(variable: String) throws {
        guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
            throw ConfigurationError(variable: variable, reason: "provider names are letters, digits, - and _")
        }
        guard !audiences.isEmpty else {
            throw ConfigurationError(variable: variable, reason: "provider \(name) has no audiences")
        }
        guard !issuers.isEmpty else {
            throw ConfigurationError(variable: variable, reason: "provider \(name) has no issuer")
        }
        guard keysURL != nil || discoveryURL != nil else {
            throw ConfigurationError(variable: variable, reason: "provider \(name) has neither jwks_uri nor discovery")
        }
        guard !algorithms.isEmpty else {
            throw ConfigurationError(variable: variable, reason: "provider \(name) allows no algorithm")
        }
    }
}

/// One entry of the `AUTH_OIDC_PROVIDERS` file.
struct OIDCProviderEntry: Decodable {
    var name: String
    var issuer: String
    /// Additional accepted issuers (for providers with two spellings).
    var additionalIssuers: [String]?
    var jwksURI: String?
    /// Use `<issuer>/.well-known/openid-configuration` to find the key set.
    var discovery: Bool?
    var audiences: [String]
    var algorithms: [String]?
    /// `raw` (default) or `sha256`.
    var nonce: String?
    var nonceRequired: Bool?
    var clockSkewSeconds: Double?
    var hostedDomains: [String]?
    var authorizedParties: [String]?
    var requireKeyID: Bool?
    var maximumTokenAgeSeconds: Double?

    enum CodingKeys: String, CodingKey, CaseIterable {
        case name, issuer, discovery, audiences, algorithms, nonce
        case additionalIssuers = "additional_issuers"
        case jwksURI = "jwks_uri"
        case nonceRequired = "nonce_required"
        case clockSkewSeconds = "clock_skew_seconds"
        case hostedDomains = "hosted_domains"
        case authorizedParties = "authorized_parties"
        case requireKeyID = "require_kid"
        case maximumTokenAgeSeconds = "max_token_age_seconds"
    }

    func configuration() throws -> IdentityProviderConfiguration {
        let variable = Setting.oidcProviders.name
        var keysURL: URL?
        if let jwksURI {
            guard let url = URL(string: jwksURI), ["https", "http"].contains(url.scheme?.lowercased() ?? ""),
                url.host?.isEmpty == false
            else {
                throw ConfigurationError(
                    variable: variable, reason: "provider \(name): jwks_uri is not an https:// URL: \(jwksURI)")
            }
            keysURL = url
        }
        var configuration = IdentityProviderConfiguration(
            name: name, issuers: [issuer] + (additionalIssuers ?? []), keysURL: keysURL, audiences: audiences)
        if keysURL == nil, discovery == true {
            let base = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
            guard let url = URL(string: base + "/.well-known/openid-configuration") else {
                throw ConfigurationError(variable: variable, reason: "provider \(name): issuer is not a URL")
            }
            configuration.discoveryURL = url
        }
        if let algorithms {
            configuration.algorithms = Set(
                try algorithms.map { name in
                    guard let algorithm = JWSAlgorithm(rawValue: name) else {
                        throw ConfigurationError(
                            variable: variable, reason: "provider \(self.name): algorithm \(name) is not supported")
                    }
                    return algorithm
                })
        }
        if let nonce {
            guard let mode = ClaimsPolicy.NonceMode(rawValue: nonce) else {
                throw ConfigurationError(variable: variable, reason: "provider \(name): nonce is raw or sha256")
            }
            configuration.nonceMode = mode
        }
        configuration.requireNonce = nonceRequired ?? false
        if let clockSkewSeconds { configuration.clockSkew = clockSkewSeconds }
        configuration.hostedDomains = hostedDomains
        configuration.authorizedParties = authorizedParties
        configuration.requireKeyID = requireKeyID ?? false
        if let maximumTokenAgeSeconds { configuration.maximumTokenAge = maximumTokenAgeSeconds }
        try configuration.validate(variable: variable)
        return configuration
    }
}

/// What the providers file (`AUTH_OIDC_PROVIDERS`) declares: providers that issue ID tokens
/// (`"type": "oidc"`, the default) and OAuth 2.0 ones (`"type": "oauth2"`).
public struct ProvidersFile: Sendable {
    public var oidc: [IdentityProviderConfiguration] = []
    public var oauth: [OAuthProviderConfiguration] = []

    public init() {}

    /// Decodes the file strictly: a field this release does not know (a typo such as
    /// `algoritms`) is refused rather than ignored, and every error names the file and the
    /// field's path (`[1].audiences`).
    static func decode(_ data: Data, path: String) throws -> ProvidersFile {
        func refuse(_ reason: String) -> ConfigurationError {
            ConfigurationError(variable: Setting.oidcProviders.name, reason: "\(path): \(reason)")
        }
        guard let array = try? JSONSerialization.jsonObject(with: data) as? [Any] else {
            throw refuse("is not a JSON array of provider objects")
        }
        var file = ProvidersFile()
        for (index, element) in array.enumerated() {
            guard let object = element as? [String: Any] else { throw refuse("[\(index)] is not an object") }
            let type = object["type"] as? String ?? "oidc"
            let known: Set<String>
            switch type {
            case "oidc": known = Set(OIDCProviderEntry.CodingKeys.allCases.map(\.rawValue))
            case "oauth2": known = Set(OAuthProviderEntry.CodingKeys.allCases.map(\.rawValue))
            default: throw refuse("[\(index)].type is oidc or oauth2")
            }
            if let unknown = object.keys.sorted().first(where: { !known.contains($0) }) {
                throw refuse(
                    "[\(index)].\(unknown) is not a known field of an \(type) provider (known: \(known.sorted().joined(separator: ", ")))"
                )
            }
            if type == "oauth2", let claims = object["claims"] as? [String: Any] {
                let knownClaims = Set(OAuthProviderEntry.ClaimsEntry.CodingKeys.allCases.map(\.rawValue))
                if let unknown = claims.keys.sorted().first(where: { !knownClaims.contains($0) }) {
                    throw refuse(
                        "[\(index)].claims.\(unknown) is not a known claim (known: \(knownClaims.sorted().joined(separator: ", ")))"
                    )
                }
            }
            let single = try JSONSerialization.data(withJSONObject: object)
            do {
                if type == "oauth2" {
                    file.oauth.append(try JSONDecoder().decode(OAuthProviderEntry.self, from: single).configuration())
                } else {
                    file.oidc.append(try JSONDecoder().decode(OIDCProviderEntry.self, from: single).configuration())
                }
            } catch let error as DecodingError {
                throw refuse(Self.explain(error, at: "[\(index)]"))
            }
        }
        return file
    }

    /// A decoding error in the file's words: where, and what was expected.
    private static func explain(_ error: DecodingError, at prefix: String) -> String {
        func location(_ codingPath: [any CodingKey], _ last: (any CodingKey)? = nil) -> String {
            prefix
                + (codingPath + (last.map { [$0] } ?? [])).map { key in
                    key.intValue.map { "[\($0)]" } ?? ".\(key.stringValue)"
                }.joined()
        }
        switch error {
        case .keyNotFound(let key, let context):
            return "\(location(context.codingPath, key)) is required"
        case .typeMismatch(let type, let context), .valueNotFound(let type, let context):
            let expected =
                type == String.self
                ? "a string"
                : type == Bool.self
                    ? "true or false" : type == Double.self || type == Int.self ? "a number" : "a list of strings"
            return "\(location(context.codingPath)) must be \(expected)"
        case .dataCorrupted(let context):
            return "\(location(context.codingPath)) is not valid: \(context.debugDescription)"
        @unknown default:
            return "is not a JSON array of providers"
        }
    }
}

extension WorkerConfiguration {
    /// The providers file's declarations; empty without `AUTH_OIDC_PROVIDERS`.
    /// - Throws: `ConfigurationError` for an unreadable file or an unusable provider.
    public func providersFile() throws -> ProvidersFile {
        guard let path = oidcProvidersPath else { return ProvidersFile() }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError(variable: Setting.oidcProviders.name, reason: "cannot read \(path)")
        }
        let file = try ProvidersFile.decode(data, path: path)
        var names = Set((appleAudiences.isEmpty ? [] : ["apple"]) + (googleAudiences.isEmpty ? [] : ["google"]))
        for name in file.oidc.map(\.name) + file.oauth.map(\.name) {
            guard names.insert(name).inserted else {
                throw ConfigurationError(
                    variable: Setting.oidcProviders.name,
                    reason: "provider \(name) is defined twice")
            }
        }
        return file
    }

    /// Every enabled provider that issues ID tokens: Apple and Google when they have audiences,
    /// plus the providers file's OpenID Connect ones.
    /// - Throws: `ConfigurationError` for an unreadable file or an unusable provider.
    public func identityProviders(file: ProvidersFile? = nil) throws -> [IdentityProviderConfiguration] {
        var providers: [IdentityProviderConfiguration] = []
        if !appleAudiences.isEmpty {
            guard let url = URL(string: appleKeysURL) else {
                throw ConfigurationError(variable: Setting.appleKeysURL.name, reason: "is not a URL")
            }
            providers.append(.apple(audiences: appleAudiences, keysURL: url))
        }
        if !googleAudiences.isEmpty {
            guard let url = URL(string: googleKeysURL) else {
                throw ConfigurationError(variable: Setting.googleKeysURL.name, reason: "is not a URL")
            }
            var google = IdentityProviderConfiguration.google(audiences: googleAudiences, keysURL: url)
            if !googleHostedDomains.isEmpty { google.hostedDomains = googleHostedDomains }
            providers.append(google)
        }
        return providers + (try file ?? providersFile()).oidc
    }
}
