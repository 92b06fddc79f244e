import Foundation
import JOSE
import Messages
import ServiceKit
import StrictJSON

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Verifies the worker's JWT access tokens locally, against its JWK Set fetched over HTTP
/// (`/.well-known/jwks.json`) and cached as the worker's `Cache-Control` says. A token signed by a
/// key not in the cached set triggers a refetch, at most once per `refetchInterval`, so key
/// rotation needs nothing from the gateway.
///
/// Only signature, issuer, audience, tenant and expiry are checked: a token of a session that ended
/// stays valid until it expires (15 minutes by default). Ask `AuthClient.introspect` where that
/// matters, or drop tokens whose `sid` an `auth.session.revoked` event names.
public actor AccessTokenVerifier {
    /// A verified access token's claims.
    public struct Claims: Sendable, Equatable {
        public var userID: String
        public var sessionID: String
        public var tokenID: String
        public var abilities: [String]
        public var isGuest: Bool
        public var issuedAt: Date
        public var expiresAt: Date
        /// The tenant whose token it is; nil for the default tenant's.
        public var tenant: String?

        /// Whether the token may do `ability` (`*` may do anything).
        public func can(_ ability: String) -> Bool { abilities.contains("*") || abilities.contains(ability) }
    }

    public struct Refusal: Error, Equatable, CustomStringConvertible {
        public var description: String
    }

    private let keysURL: URL
    private let issuer: String
    private let audience: String
    private let tenant: String?
    private let refetchInterval: TimeInterval
    private let clockSkew: TimeInterval
    private var keys: JWKSet?
    private var expiresAt = Date.distantPast
    private var lastFetch = Date.distantPast

    /// - Parameters:
    ///   - keysURL: the worker's `/.well-known/jwks.json` (or the discovery document's `jwks_uri`).
    ///   - issuer, audience: `AUTH_TOKEN_ISSUER` and `AUTH_TOKEN_AUDIENCE` of the worker (of the
    ///     tenant's, for a tenant).
    ///   - tenant: the tenant whose tokens to accept (their `tenant` claim); nil for the default
    ///     tenant's, which carry none.
    public init(
        keysURL: URL, issuer: String, audience: String, tenant: String? = nil, refetchInterval: TimeInterval = 30,
        clockSkew: TimeInterval = 30
    ) {
        self.keysURL = keysURL
        self.issuer = issuer
        self.audience = audience
        self.tenant = tenant == Tenant.defaultName ? nil : tenant
        self.refetchInterval = refetchInterval
        self.clockSkew = clockSkew
    }

    /// The token's claims when it verifies now.
    /// - Throws: `Refusal` (bad signature, unknown key, wrong issuer or audience, expired) or the
    ///   fetch's error when the key set cannot be had at all.
    public func verify(_ token: String, now: Date = Date()) async throws -> Claims {
        let jws: CompactJWS
        do {
            jws = try CompactJWS(token)
        } catch {
            throw Refusal(description: "not a compact JWS")
        }
        var set = try await currentKeys(now: now)
        if let kid = jws.header.kid, !set.keyIDs.contains(kid), now.timeIntervalSince(lastFetch) >= refetchInterval {
            set = try await fetch(now: now)
        }
        do {
            try JWSVerifier.verifySignature(jws, keys: set, allowed: [.es256, .edDSA])
        } catch {
            throw Refusal(description: "the signature does not verify: \(error)")
        }
        let members: [String: JSONValue]
        do {
            members = try JSONReader.object(jws.payload)
        } catch {
            throw Refusal(description: "the claims are not a JSON object")
        }
        guard let contents = AccessTokenContents(members) else {
            throw Refusal(description: "not an access token of this issuer")
        }
        guard contents.issuer == issuer else { throw Refusal(description: "another issuer") }
        guard contents.audience == audience else { throw Refusal(description: "another audience") }
        guard contents.tenant == tenant else { throw Refusal(description: "another tenant's") }
        guard contents.expiresAt + clockSkew > now.timeIntervalSince1970 else { throw Refusal(description: "expired") }
        return Claims(
            userID: contents.subject, sessionID: contents.sessionID, tokenID: contents.tokenID,
            abilities: contents.abilities, isGuest: contents.isGuest,
            issuedAt: Date(timeIntervalSince1970: contents.issuedAt),
            expiresAt: Date(timeIntervalSince1970: contents.expiresAt), tenant: contents.tenant)
    }

    private func currentKeys(now: Date) async throws -> JWKSet {
        if let keys, now < expiresAt { return keys }
        do {
            return try await fetch(now: now)
        } catch {
            // The worker unreachable: keep verifying with the keys already known.
            if let keys { return keys }
            throw error
        }
    }

    private func fetch(now: Date) async throws -> JWKSet {
        lastFetch = now
        var request = URLRequest(url: keysURL, timeoutInterval: 5)
        request.setValue("application/jwk-set+json, application/json", forHTTPHeaderField: "Accept")
        let (data, response) = try await HTTPExchange.data(for: request, session: .shared, timeout: .seconds(5))
        guard let http = response as? HTTPURLResponse, http.statusCode == 200 else {
            throw Refusal(description: "\(keysURL.absoluteString) did not answer 200")
        }
        let set = try JWKSet(json: data)
        keys = set
        expiresAt = now + min(max(Self.maxAge(http.value(forHTTPHeaderField: "Cache-Control")), 30), 86400)
        return set
    }

    /// `max-age` of a `Cache-Control` value; 300 s when there is none.
    static func maxAge(_ header: String?) -> TimeInterval {
        guard let header else { return 300 }
        for directive in header.split(separator: ",") {
            let parts = directive.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            if parts.count == 2, parts[0].lowercased() == "max-age", let seconds = TimeInterval(parts[1]) {
                return seconds
            }
        }
        return 300
    }
}
