import Foundation
import ServiceKit

/// An OAuth 2.0 provider that issues no ID token (GitHub, Discord, Naver, X, Facebook Login): the
/// app's authorization code is exchanged at the provider's token endpoint, and the access token it
/// gives reads the user's profile. An entry of the providers file (`AUTH_OIDC_PROVIDERS`) with
/// `"type": "oauth2"`; docs/providers.md has ready-made entries.
public struct OAuthProviderConfiguration: Sendable, Equatable {
    /// How the worker authenticates to the token endpoint (RFC 6749 §2.3.1).
    public enum ClientAuthentication: String, Sendable, Equatable {
        /// `client_id` and `client_secret` in the form.
        case clientSecretPost = "client_secret_post"
        /// HTTP Basic with the form-encoded id and secret.
        case clientSecretBasic = "client_secret_basic"
    }

    /// Whether the profile's address counts as verified: a member of the profile, or a fixed
    /// answer for a provider whose documentation promises (or denies) it for every address.
    public enum Verification: Sendable, Equatable {
        case member(String)
        case always(Bool)
    }

    /// Where the profile keeps what the worker needs: member names, dotted for nested objects
    /// (`response.id`, Naver's).
    public struct Claims: Sendable, Equatable {
        /// The provider's stable user id (a string, or a whole number as GitHub's is).
        public var subject: String
        public var email: String?
        public var emailVerified: Verification
        public var name: String?

        public init(
            subject: String, email: String? = nil, emailVerified: Verification = .always(false), name: String? = nil
        ) {
            self.subject = subject
            self.email = email
            self.emailVerified = emailVerified
            self.name = name
        }
    }

    /// The name `oauth` requests give as `provider`.
    public var name: String
    public var tokenEndpoint: URL
    /// Answers the signed-in user's profile to the access token.
    public var userinfoEndpoint: URL
    /// GitHub's `/user/emails`: a list of `{email, primary, verified}`; the primary verified
    /// address is the identity's (GitHub's profile shows only a public address, if any).
    public var emailsEndpoint: URL?
    public var clientID: String
    /// From `client_secret_file`; never logged (`description` leaves it out).
    public var clientSecret: String
    public var clientAuthentication: ClientAuthentication = .clientSecretPost
    public var claims: Claims
    /// The app's redirect URIs: a request's `redirect_uri` must be one of them, exactly.
    public var redirectURIs: [String]
    /// The API's `Accept` (GitHub asks for `application/vnd.github+json`). Default:
    /// `application/json`.
    public var apiAccept = "application/json"
    /// Further headers every API call sends (GitHub's `X-GitHub-Api-Version`).
    public var apiHeaders: [String: String] = [:]
    /// The longest a call may go without a byte from the provider (connecting included).
    /// Default: 3 s.
    public var connectTimeout: Duration = .seconds(3)
    /// The longest one call may take. Default: 10 s.
    public var totalTimeout: Duration = .seconds(10)
    /// Sign-ins in flight with this provider at once; one more is answered
    /// `provider_unavailable` (retriable) rather than queued. Default: 32.
    public var maximumInFlight = 32
    /// Failures in a row (timeouts, 5xx, unreadable answers) that open the breaker: while it is
    /// open, sign-ins are answered `provider_unavailable` without calling. Default: 5.
    public var breakerFailures = 5
    /// How long the breaker stays open before one sign-in tries the provider again. Default: 30 s.
    public var breakerOpenFor: Duration = .seconds(30)

    public init(
        name: String, tokenEndpoint: URL, userinfoEndpoint: URL, clientID: String, clientSecret: String,
        claims: Claims, redirectURIs: [String]
    ) {
        self.name = name
        self.tokenEndpoint = tokenEndpoint
        self.userinfoEndpoint = userinfoEndpoint
        self.clientID = clientID
        self.clientSecret = clientSecret
        self.claims = claims
        self.redirectURIs = redirectURIs
    }
}

/// An `"type": "oauth2"` entry of the providers file.
struct OAuthProviderEntry: Decodable {
    var type: String
    var name: String
    var tokenEndpoint: String
    var userinfoEndpoint: String
    var emailsEndpoint: String?
    var clientID: String
    var clientSecretFile: String
    var tokenEndpointAuth: String?
    var claims: ClaimsEntry
    var redirectURIs: [String]
    var apiAccept: String?
    var apiHeaders: [String: String]?
    var connectTimeoutSeconds: Double?
    var timeoutSeconds: Double?
    var maxInFlight: Int?
    var breakerFailures: Int?
    var breakerOpenSeconds: Double?

    struct ClaimsEntry: Decodable {
        var subject: String
        var email: String?
        var emailVerified: VerifiedEntry?
        var name: String?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case subject, email, name
            case emailVerified = "email_verified"
        }
    }

    /// `email_verified`: a member name, or `true`/`false` for every address.
    enum VerifiedEntry: Decodable {
        case member(String)
        case always(Bool)

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let fixed = try? container.decode(Bool.self) {
                self = .always(fixed)
            } else {
                self = .member(try container.decode(String.self))
            }
        }
    }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case type, name, claims
        case tokenEndpoint = "token_endpoint"
        case userinfoEndpoint = "userinfo_endpoint"
        case emailsEndpoint = "emails_endpoint"
        case clientID = "client_id"
        case clientSecretFile = "client_secret_file"
        case tokenEndpointAuth = "token_endpoint_auth"
        case redirectURIs = "redirect_uris"
        case apiAccept = "api_accept"
        case apiHeaders = "api_headers"
        case connectTimeoutSeconds = "connect_timeout_seconds"
        case timeoutSeconds = "timeout_seconds"
        case maxInFlight = "max_in_flight"
        case breakerFailures = "breaker_failures"
        case breakerOpenSeconds = "breaker_open_seconds"
    }

    func configuration() throws -> OAuthProviderConfiguration {
        func refuse(_ reason: String) -> ConfigurationError {
            ConfigurationError(variable: Setting.oidcProviders.name, reason: "provider \(name): \(reason)")
        }
        func endpoint(_ text: String, _ field: String) throws -> URL {
            guard let url = URL(string: text), HTTPDocumentFetcher.isAllowed(url) else {
                throw refuse("\(field) is not an https:// URL: \(text)")
            }
            return url
        }
        guard let secret = try? String(contentsOfFile: clientSecretFile, encoding: .utf8),
            !secret.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty
        else {
            throw refuse("cannot read a secret from client_secret_file \(clientSecretFile)")
        }
        guard !redirectURIs.isEmpty, redirectURIs.allSatisfy({ URL(string: $0)?.scheme != nil }) else {
            throw refuse("redirect_uris must list the app's redirect URIs")
        }
        let verification: OAuthProviderConfiguration.Verification =
            switch claims.emailVerified {
            case .member(let member): .member(member)
            case .always(let fixed): .always(fixed)
            case nil: .always(false)
            }
        var configuration = OAuthProviderConfiguration(
            name: name, tokenEndpoint: try endpoint(tokenEndpoint, "token_endpoint"),
            userinfoEndpoint: try endpoint(userinfoEndpoint, "userinfo_endpoint"), clientID: clientID,
            clientSecret: secret.trimmingCharacters(in: .whitespacesAndNewlines),
            claims: .init(subject: claims.subject, email: claims.email, emailVerified: verification, name: claims.name),
            redirectURIs: redirectURIs)
        configuration.emailsEndpoint = try emailsEndpoint.map { try endpoint($0, "emails_endpoint") }
        if let tokenEndpointAuth {
            guard let method = OAuthProviderConfiguration.ClientAuthentication(rawValue: tokenEndpointAuth) else {
                throw refuse("token_endpoint_auth is client_secret_post or client_secret_basic")
            }
            configuration.clientAuthentication = method
        }
        if let apiAccept { configuration.apiAccept = apiAccept }
        configuration.apiHeaders = apiHeaders ?? [:]
        try applyLimits(to: &configuration, refuse)
        try configuration.validate(variable: Setting.oidcProviders.name)
        return configuration
    }

    private func applyLimits(
        to configuration: inout OAuthProviderConfiguration, _ refuse: (String) -> ConfigurationError
    ) throws {
        func duration(_ seconds: Double?, _ field: String, within range: ClosedRange<Double>) throws -> Duration? {
            guard let seconds else { return nil }
            guard range.contains(seconds) else {
                throw refuse("\(field) must be from \(range.lowerBound) to \(range.upperBound)")
            }
            return .milliseconds(Int64(seconds * 1000))
        }
        if let value = try duration(connectTimeoutSeconds, "connect_timeout_seconds", within: 0.1...60) {
            configuration.connectTimeout = value
        }
        if let value = try duration(timeoutSeconds, "timeout_seconds", within: 0.1...120) {
            configuration.totalTimeout = value
        }
        if let value = try duration(breakerOpenSeconds, "breaker_open_seconds", within: 1...3600) {
            configuration.breakerOpenFor = value
        }
        if let maxInFlight {
            guard (1...10_000).contains(maxInFlight) else { throw refuse("max_in_flight must be from 1 to 10000") }
            configuration.maximumInFlight = maxInFlight
        }
        if let breakerFailures {
            guard (1...1000).contains(breakerFailures) else { throw refuse("breaker_failures must be from 1 to 1000") }
            configuration.breakerFailures = breakerFailures
        }
    }
}

extension OAuthProviderConfiguration: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// Leaves the client secret out, as the debug description and the mirror (`dump`) do.
    public var description: String {
        "OAuthProviderConfiguration(\(name), token: \(tokenEndpoint), userinfo: \(userinfoEndpoint))"
    }

    public var debugDescription: String { description }

    public var customMirror: Mirror { Mirror(self, children: ["description": description]) }

    /// Throws a `ConfigurationError` when the provider cannot work.
    public func validate(variable: String) throws {
        guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
            throw ConfigurationError(variable: variable, reason: "provider names are letters, digits, - and _")
        }
        guard !clientID.isEmpty, !clientSecret.isEmpty else {
            throw ConfigurationError(variable: variable, reason: "provider \(name) needs a client id and secret")
        }
        guard !claims.subject.isEmpty else {
            throw ConfigurationError(variable: variable, reason: "provider \(name): claims.subject names no member")
        }
    }
}
