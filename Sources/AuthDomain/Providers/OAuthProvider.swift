import Foundation
import ServiceKit
import StrictJSON
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Sends an OAuth provider's HTTP requests. `URLSessionOAuthTransport` in the service; unit tests
/// of the mapping give one of their own.
public protocol OAuthTransport: Sendable {
    /// - Throws: when no answer came (a refused connection, a timeout).
    func send(_ request: URLRequest, timeout: Duration) async throws -> (Data, HTTPURLResponse)
}

/// Over FoundationNetworking, with the provider's timeouts: `connectTimeout` as the longest
/// without a byte (connecting included), `totalTimeout` for the whole call (`HTTPExchange`).
/// Redirects are never followed: a 307 would send the client secret, or a bearer token, wherever
/// the answer points; a redirect is answered as what it is, a status that is not 200.
public struct URLSessionOAuthTransport: OAuthTransport {
    private let session: URLSession

    /// Refuses every redirect, so its response is the one the caller sees.
    private final class NoRedirects: NSObject, URLSessionTaskDelegate, Sendable {
        func urlSession(
            _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
            newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
        ) {
            completionHandler(nil)
        }
    }

    public init(connectTimeout: Duration, totalTimeout: Duration) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = Self.seconds(connectTimeout)
        configuration.timeoutIntervalForResource = Self.seconds(totalTimeout)
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        configuration.httpCookieStorage = nil
        session = URLSession(configuration: configuration, delegate: NoRedirects(), delegateQueue: nil)
    }

    private static func seconds(_ duration: Duration) -> TimeInterval {
        let (seconds, attoseconds) = duration.components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }

    public func send(_ request: URLRequest, timeout: Duration) async throws -> (Data, HTTPURLResponse) {
        let (data, response) = try await HTTPExchange.data(for: request, session: session, timeout: timeout)
        guard let http = response as? HTTPURLResponse else { throw URLError(.badServerResponse) }
        return (data, http)
    }
}

/// One OAuth 2.0 provider: exchanges an app's authorization code (with its PKCE verifier) for an
/// access token, reads the profile with it, and maps the profile to an identity. The access token
/// is used for those calls and dropped.
///
/// Calls run in the request's preparation task, beside the pipeline, never on its loop. At most
/// `maximumInFlight` sign-ins call the provider at once; a breaker opened by `breakerFailures`
/// failures in a row answers `provider_unavailable` at once for `breakerOpenFor`, then lets one
/// sign-in try the provider again.
public final class OAuthProvider: Sendable {
    public let configuration: OAuthProviderConfiguration
    private let transport: any OAuthTransport
    private let breaker: Mutex<Breaker>
    private let logger: Logger

    /// The largest answer read from the provider.
    static let maximumAnswerBytes = 1 << 20

    public init(configuration: OAuthProviderConfiguration, transport: (any OAuthTransport)? = nil, logger: Logger) {
        self.configuration = configuration
        self.transport =
            transport
            ?? URLSessionOAuthTransport(
                connectTimeout: configuration.connectTimeout, totalTimeout: configuration.totalTimeout)
        self.logger = logger
        breaker = Mutex(Breaker())
    }

    /// The identity the code's user has at the provider.
    /// - Throws: `LoginError`: `invalid_code` when the provider refuses the code (unknown, used,
    ///   expired, issued for another redirect URI or challenge), `provider_unavailable`
    ///   (retriable) when it does not answer, answers an error of its own, or the breaker is open,
    ///   `invalid_token` when its profile has no stable id.
    public func signIn(code: String, verifier: String, redirectURI: String) async throws -> VerifiedIdentity {
        let trial = try admit()
        var outcome = Outcome.failed
        defer { finish(trial: trial, outcome) }
        do {
            let token = try await exchange(code: code, verifier: verifier, redirectURI: redirectURI)
            let identity = try await profile(token: token)
            outcome = .answered
            return identity
        } catch let refusal as ProviderRefusal {
            outcome = .answered
            throw refusal.error
        } catch let error as LoginError {
            throw error
        } catch {
            logger.warning(
                "OAuth provider call failed",
                metadata: ["auth.provider": configuration.name, "error": "\(type(of: error))"])
            throw unavailable("did not answer")
        }
    }

    // MARK: - The calls

    /// The token endpoint (RFC 6749 §4.1.3, RFC 7636 §4.5).
    private func exchange(code: String, verifier: String, redirectURI: String) async throws -> String {
        var form = [
            ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirectURI),
            ("code_verifier", verifier),
        ]
        var request = URLRequest(url: configuration.tokenEndpoint)
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        request.setValue(Self.userAgent, forHTTPHeaderField: "User-Agent")
        switch configuration.clientAuthentication {
        case .clientSecretPost:
            form += [("client_id", configuration.clientID), ("client_secret", configuration.clientSecret)]
        case .clientSecretBasic:
            // RFC 6749 §2.3.1: each part form-encoded, then Basic.
            let pair = Self.formEncoded(configuration.clientID) + ":" + Self.formEncoded(configuration.clientSecret)
            request.setValue("Basic " + Data(pair.utf8).base64EncodedString(), forHTTPHeaderField: "Authorization")
        }
        request.httpBody = Data(
            form.map { Self.formEncoded($0.0) + "=" + Self.formEncoded($0.1) }.joined(separator: "&").utf8)
        let (status, answer) = try await call(request)
        let object = answer.flatMap { if case .object(let members) = $0 { members } else { nil } }
        if let object, case .string(let error)? = object["error"] {
            throw Self.tokenRefusal(error: error, provider: configuration.name, logger: logger)
        }
        guard status == 200, let object, case .string(let token)? = object["access_token"], !token.isEmpty else {
            throw unavailable("answered the token request with HTTP \(status) and no access token")
        }
        if case .string(let type)? = object["token_type"], type.lowercased() != "bearer" {
            throw unavailable("issued a \(type.prefix(32)) token, not a bearer one")
        }
        return token
    }

    /// The profile, and for GitHub-like providers the primary verified address.
    private func profile(token: String) async throws -> VerifiedIdentity {
        guard case .object(let profile)? = try await api(configuration.userinfoEndpoint, token: token) else {
            throw unavailable("answered the profile with no object")
        }
        var verifiedAddress: String?
        if let emailsEndpoint = configuration.emailsEndpoint {
            guard case .array(let addresses)? = try await api(emailsEndpoint, token: token) else {
                throw unavailable("answered the addresses with no list")
            }
            verifiedAddress = Self.primaryVerifiedAddress(addresses)
        }
        return try OAuthProfileMapping(configuration.claims, provider: configuration.name).identity(
            profile, primaryVerifiedAddress: verifiedAddress)
    }

    private func api(_ url: URL, token: String) async throws -> JSONValue? {
        var request = URLRequest(url: url)
        request.setValue("Bearer " + token, forHTTPHeaderField: "Authorization")
        request.setValue(configuration.apiAccept, forHTTPHeaderField: "Accept")
        request.setValue(Self.userAgent, forHTTPHeaderField: "User-Agent")
        for (name, value) in configuration.apiHeaders { request.setValue(value, forHTTPHeaderField: name) }
        let (status, answer) = try await call(request)
        guard status == 200 else { throw unavailable("answered \(url.path) with HTTP \(status)") }
        return answer
    }

    /// One call within the total timeout: the status, and the answer when it is JSON.
    private func call(_ request: URLRequest) async throws -> (Int, JSONValue?) {
        let (data, response) = try await transport.send(request, timeout: configuration.totalTimeout)
        guard data.count <= Self.maximumAnswerBytes else {
            throw unavailable("answered more than \(Self.maximumAnswerBytes) bytes")
        }
        return (response.statusCode, try? JSONReader.value(Array(data)))
    }

    /// GitHub's `/user/emails`: the address marked both primary and verified.
    static func primaryVerifiedAddress(_ addresses: [JSONValue]) -> String? {
        for case .object(let address) in addresses {
            if address["primary"] == .bool(true), address["verified"] == .bool(true),
                case .string(let email)? = address["email"]
            {
                return email
            }
        }
        return nil
    }

    /// What the token endpoint's `error` means for the sign-in: a refused grant is the app's
    /// `invalid_code`; a refused client is the operator's configuration, never the user's.
    static func tokenRefusal(error: String, provider: String, logger: Logger) -> any Error {
        switch error {
        case "invalid_client", "incorrect_client_credentials", "unauthorized_client":
            logger.error(
                "The OAuth provider refused the worker's client credentials: check client_id and client_secret_file",
                metadata: ["auth.provider": provider, "error": "\(error.prefix(64))"])
            return LoginError(.providerUnavailable, "provider \(provider) refused this service", retriable: true)
        default:
            return ProviderRefusal(
                error: LoginError(
                    .invalidCode, "the provider refused the code (used, expired, or another redirect URI or verifier)",
                    field: "data.code"))
        }
    }

    private func unavailable(_ what: String) -> LoginError {
        LoginError(.providerUnavailable, "provider \(configuration.name) \(what)", retriable: true)
    }

    static let userAgent = "auth-worker"

    /// `application/x-www-form-urlencoded` (the WHATWG URL standard's byte set).
    static func formEncoded(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "*"), UInt8(ascii: "-"), UInt8(ascii: "."),
                UInt8(ascii: "_"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: " "):
                out += "+"
            default:
                out += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return out
    }

    // MARK: - Limits and the breaker

    /// The provider answered (even with a refusal), or it did not.
    private enum Outcome { case answered, failed }

    private struct Breaker {
        var inFlight = 0
        var failuresInARow = 0
        /// While open: until when (monotonic nanoseconds).
        var openUntil: UInt64?
        var trialInFlight = false
    }

    /// Takes a place in flight, or throws `provider_unavailable` at once.
    /// - Returns: whether this call is the breaker's trial.
    private func admit() throws -> Bool {
        let now = MonotonicNanos.now()
        let limit = configuration.maximumInFlight
        let admitted: Bool? = breaker.withLock { state in
            var trial = false
            if let openUntil = state.openUntil {
                guard now >= openUntil, !state.trialInFlight else { return nil }
                trial = true
            }
            guard state.inFlight < limit else { return nil }
            state.inFlight += 1
            if trial { state.trialInFlight = true }
            return trial
        }
        guard let admitted else { throw unavailable("is unavailable (failing, or too busy)") }
        return admitted
    }

    private func finish(trial: Bool, _ outcome: Outcome) {
        let now = MonotonicNanos.now()
        let (seconds, attoseconds) = configuration.breakerOpenFor.components
        let openFor = UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
        let opened: Bool = breaker.withLock { state in
            state.inFlight -= 1
            if trial { state.trialInFlight = false }
            switch outcome {
            case .answered:
                state.failuresInARow = 0
                state.openUntil = nil
                return false
            case .failed:
                state.failuresInARow += 1
                guard trial || state.failuresInARow >= configuration.breakerFailures else { return false }
                state.openUntil = now + openFor
                return true
            }
        }
        if opened {
            logger.warning(
                "OAuth provider failing: sign-ins with it are answered provider_unavailable",
                metadata: ["auth.provider": configuration.name, "auth.breaker_seconds": "\(seconds)"])
        }
    }
}

/// The provider answered, and refused: not a failure of the provider.
private struct ProviderRefusal: Error {
    var error: LoginError
}

/// A provider's profile read through its entry's `claims`.
struct OAuthProfileMapping {
    let claims: OAuthProviderConfiguration.Claims
    let provider: String

    init(_ claims: OAuthProviderConfiguration.Claims, provider: String) {
        self.claims = claims
        self.provider = provider
    }

    /// - Throws: `invalid_token` (as a `ProviderRefusal`) when the profile has no stable id.
    func identity(_ profile: [String: JSONValue], primaryVerifiedAddress: String?) throws -> VerifiedIdentity {
        guard let subject = Self.subject(Self.member(claims.subject, of: profile)) else {
            throw ProviderRefusal(
                error: LoginError(.invalidToken, "provider \(provider)'s profile has no stable id (\(claims.subject))"))
        }
        var email: String?
        var verified = false
        if let primaryVerifiedAddress {
            email = primaryVerifiedAddress
            verified = true
        } else if let member = claims.email, case .string(let address)? = Self.member(member, of: profile) {
            email = address
            switch claims.emailVerified {
            case .always(let fixed): verified = fixed
            case .member(let name): verified = Self.member(name, of: profile) == .bool(true)
            }
        }
        email = email?.trimmingWhitespace().lowercased()
        var name: String?
        if let member = claims.name, case .string(let text)? = Self.member(member, of: profile) {
            name = text.trimmingWhitespace()
        }
        // A NUL would cut a value short in C code and the database (as for ID tokens).
        for value in [subject, email, name] where value?.utf8.contains(0) == true {
            throw ProviderRefusal(error: LoginError(.invalidToken, "provider \(provider)'s profile holds a NUL"))
        }
        return VerifiedIdentity(
            provider: provider, subject: subject, email: email?.isEmpty == false ? email : nil,
            emailVerified: verified && email?.isEmpty == false, isPrivateEmail: false,
            name: name?.isEmpty == false ? name : nil)
    }

    /// A member by its dotted path.
    static func member(_ path: String, of object: [String: JSONValue]) -> JSONValue? {
        var current = JSONValue.object(object)
        for part in path.split(separator: ".", omittingEmptySubsequences: false) {
            guard case .object(let members) = current, let next = members[String(part)] else { return nil }
            current = next
        }
        return current
    }

    /// A stable id: a string of 1 to 255 bytes, or a whole number JSON carries exactly (GitHub's).
    static func subject(_ value: JSONValue?) -> String? {
        switch value {
        case .string(let text) where !text.isEmpty && text.utf8.count <= 255:
            return text
        case .number(let number) where number.rounded() == number && abs(number) < 9_007_199_254_740_992:
            return String(Int64(number))
        default:
            return nil
        }
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
