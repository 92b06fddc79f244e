import AuthCrypto
import Foundation
import ServiceKit
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

@Suite struct PublishedKeysTests {
    func keys(_ document: String) throws -> [[String: String]] {
        let object = try JSONSerialization.jsonObject(with: Data(document.utf8)) as? [String: Any]
        return try #require(object?["keys"] as? [[String: String]])
    }

    @Test func theKeySetHoldsEveryStateCurrentFirst() throws {
        let (current, currentKey) = try TestKeys.temporaryKeyFile(.es256)
        let (previous, previousKey) = try TestKeys.temporaryKeyFile(.edDSA)
        let (next, nextKey) = try TestKeys.temporaryKeyFile(.es256)
        defer { for path in [current, previous, next] { try? FileManager.default.removeItem(atPath: path) } }
        var config = WorkerConfiguration()
        config.signingKeyPaths = [current, previous]
        config.nextSigningKeyPaths = [next]
        let published = try PublishedKeys(configuration: config)
        let set = try keys(published.jwks)
        #expect(set.map { $0["kid"] } == [currentKey.keyID, previousKey.keyID, nextKey.keyID])
        #expect(set.allSatisfy { $0["use"] == "sig" && $0["d"] == nil }, "public halves only")
        let issuer = try JWTAccessTokenIssuer(configuration: config)
        #expect(issuer.keys.first?.keyID == currentKey.keyID, "the current key signs, never the next one")

        config.nextSigningKeyPaths = [current]
        #expect(throws: ConfigurationError(variable: "AUTH_SIGNING_KEYS_NEXT", reason: "")) {
            try PublishedKeys(configuration: config)
        }
    }

    @Test func discoveryNamesTheIssuerAndWhereTheKeysAre() throws {
        let (current, _) = try TestKeys.temporaryKeyFile(.es256)
        defer { try? FileManager.default.removeItem(atPath: current) }
        var config = WorkerConfiguration()
        config.signingKeyPaths = [current]
        #expect(try PublishedKeys(configuration: config).discovery == nil, "issuer `auth-worker` is no URL")

        config.tokenIssuer = "https://auth.example.com/"
        let derived = try #require(try PublishedKeys(configuration: config).discovery)
        let document = try #require(try JSONSerialization.jsonObject(with: Data(derived.utf8)) as? [String: Any])
        #expect(document["issuer"] as? String == "https://auth.example.com/")
        #expect(document["jwks_uri"] as? String == "https://auth.example.com/.well-known/jwks.json")
        #expect(document["id_token_signing_alg_values_supported"] as? [String] == ["ES256"])

        config.jwksURI = "https://keys.example.com/auth.json"
        let explicit = try #require(try PublishedKeys(configuration: config).discovery)
        #expect(explicit.contains(#""jwks_uri":"https://keys.example.com/auth.json""#))
        #expect(throws: ConfigurationError(variable: "AUTH_JWKS_URI", reason: "")) {
            try WorkerConfiguration.fromEnvironment(["AUTH_JWKS_URI": "keys.json"])
        }
    }

    @Test func theHealthPortServesTheDocumentsCacheable() throws {
        let (current, _) = try TestKeys.temporaryKeyFile(.es256)
        defer { try? FileManager.default.removeItem(atPath: current) }
        var config = WorkerConfiguration()
        config.signingKeyPaths = [current]
        config.tokenIssuer = "https://auth.example.com"
        let documents = WorkerApplication.keyDocuments(try PublishedKeys(configuration: config), maxAge: 120)
        let jwks = try #require(documents["/.well-known/jwks.json"]?())
        #expect(jwks.status == 200 && jwks.contentType == "application/jwk-set+json")
        #expect(jwks.headers.contains { $0 == ("Cache-Control", "public, max-age=120") })
        let discovery = try #require(documents["/.well-known/openid-configuration"]?())
        #expect(discovery.body.contains(#""issuer":"https://auth.example.com""#))
        #expect(
            WorkerApplication.keyDocuments(try PublishedKeys(configuration: WorkerConfiguration()), maxAge: 1).isEmpty)
    }
}
