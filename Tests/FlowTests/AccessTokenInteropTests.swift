import AuthCrypto
import Foundation
import JOSE
import StrictJSON
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// Downstream services verify access tokens with their own JOSE library against the published JWK Set.
@Suite(.requiresIndependentJOSE) struct AccessTokenInteropTests {
    static let verifier = """
        import sys, json, jwt
        jwks, token = sys.stdin.read().split('\\n', 1)
        keys = {key.key_id: key for key in jwt.PyJWKSet.from_json(jwks).keys}
        kid = jwt.get_unverified_header(token.strip())['kid']
        claims = jwt.decode(token.strip(), keys[kid].key, algorithms=['EdDSA', 'ES256'], audience='api', issuer='auth-worker')
        print(kid, claims['sub'], claims['sid'], claims['guest'])
        """

    func claims(_ now: Date) -> AccessTokenClaims {
        AccessTokenClaims(
            tokenID: UUID(), userID: UUID(), sessionID: UUID(), abilities: ["*"], isGuest: false, issuedAt: now,
            expiresAt: now + 900)
    }

    @Test func pyJWTVerifiesTokensWithThePublishedKeysAcrossARotation() async throws {
        let old = try TestKeys.temporaryKeyFile(.edDSA)
        let new = try TestKeys.temporaryKeyFile(.es256)
        var before = WorkerConfiguration()
        before.signingKeyPaths = [old.path]
        var after = WorkerConfiguration()
        after.signingKeyPaths = [new.path, old.path]
        let previousIssuer = try JWTAccessTokenIssuer(configuration: before)
        let currentIssuer = try JWTAccessTokenIssuer(configuration: after)
        let jwks = try JWTAccessTokenIssuer.jwks(currentIssuer.keys)

        let now = Date()
        let oldClaims = claims(now)
        let oldToken = try previousIssuer.issue(oldClaims)
        let newClaims = claims(now)
        let newToken = try currentIssuer.issue(newClaims)

        let oldResult = try await IndependentJOSE.run(Self.verifier, input: jwks + "\n" + oldToken)
        #expect(
            oldResult
                == "\(old.key.keyID) \(oldClaims.userID.lowercasedString) \(oldClaims.sessionID.lowercasedString) False"
        )
        let newResult = try await IndependentJOSE.run(Self.verifier, input: jwks + "\n" + newToken)
        #expect(newResult.hasPrefix(new.key.keyID + " "), "new tokens are signed by the newest key")

        // And our own verifier (used for link_to and logout) accepts both too.
        #expect(try currentIssuer.verify(oldToken, now: now).userID == oldClaims.userID)
        #expect(try currentIssuer.verify(newToken, now: now).sessionID == newClaims.sessionID)
        #expect(throws: (any Error).self) { try previousIssuer.verify(newToken, now: now) }
        #expect(throws: JOSEError.self) { try currentIssuer.verify(newToken, now: now + 901) }
    }

    @Test func aTamperedTokenIsRefusedByPyJWT() async throws {
        let key = try TestKeys.temporaryKeyFile(.edDSA)
        var configuration = WorkerConfiguration()
        configuration.signingKeyPaths = [key.path]
        let issuer = try JWTAccessTokenIssuer(configuration: configuration)
        let token = try issuer.issue(claims(Date()))
        var parts = token.split(separator: ".").map(String.init)
        parts[1] = Base64URL.encode(Array(#"{"sub":"admin","aud":"api","iss":"auth-worker","exp":9999999999}"#.utf8))
        await #expect(throws: IndependentJOSE.Failure.self) {
            try await IndependentJOSE.run(
                Self.verifier, input: try JWTAccessTokenIssuer.jwks(issuer.keys) + "\n" + parts.joined(separator: "."))
        }
    }

    /// Two tenants that share the deployment's keys, issuer and audience still have their own
    /// tokens: a tenant's names it (`tenant`), the default tenant's names none, and each issuer
    /// accepts its own only.
    @Test func aTenantsTokenNamesItAndIsNoOtherTenants() throws {
        let key = try TestKeys.temporaryKeyFile(.es256)
        var configuration = WorkerConfiguration()
        configuration.signingKeyPaths = [key.path]
        let main = try JWTAccessTokenIssuer(configuration: configuration)
        let acme = try JWTAccessTokenIssuer(configuration: configuration, tenant: "acme")
        let beta = try JWTAccessTokenIssuer(configuration: configuration, tenant: "beta")
        let now = Date()
        let (mainClaims, acmeClaims) = (claims(now), claims(now))
        let mainToken = try main.issue(mainClaims)
        let acmeToken = try acme.issue(acmeClaims)
        func tenantClaim(_ token: String) throws -> JSONValue? {
            try JSONReader.object(try CompactJWS(token).payload)["tenant"]
        }
        #expect(try tenantClaim(mainToken) == nil)
        #expect(try tenantClaim(acmeToken) == .string("acme"))
        #expect(try main.verify(mainToken, now: now).userID == mainClaims.userID)
        #expect(try acme.verify(acmeToken, now: now).userID == acmeClaims.userID)
        #expect(throws: JOSEError.self) { try main.verify(acmeToken, now: now) }
        #expect(throws: JOSEError.self) { try acme.verify(mainToken, now: now) }
        #expect(throws: JOSEError.self) { try beta.verify(acmeToken, now: now) }
    }
}
