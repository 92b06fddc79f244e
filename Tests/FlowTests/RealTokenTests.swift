import Foundation
import JOSE
import ServiceKit
import Testing

@testable import AuthDomain
@testable import TestSupport

/// Real Sign in with Apple and Google tokens with the key sets that signed them, the clock pinned
/// between `iat` and `exp`. Their subjects and e-mails are public but are never printed.
@Suite(.requiresSharedTestData) struct RealTokenTests {
    func provider(
        _ configuration: IdentityProviderConfiguration, keys file: String, at time: Double
    ) throws -> IdentityProvider {
        let clock = ManualClock(Date(timeIntervalSince1970: time))
        let set = try JWKSet(json: try SharedTestData.data("real/\(file)"))
        return IdentityProvider(
            configuration: configuration,
            keySet: KeySetCache(fixed: set, clock: clock, logger: Logger(label: "test", handler: InMemoryLogHandler())),
            clock: clock)
    }

    static let unusedURL = URL(fileURLWithPath: "/unused")

    @Test func googleTokensVerifyWithinTheirLifetimeAndExpireAfter() async throws {
        let samples = try RealTokens.samples("google")
        #expect(samples.count >= 7)
        for sample in samples {
            let iat = try #require(sample.claims["iat"] as? Double)
            let exp = try #require(sample.claims["exp"] as? Double)
            let audience = try #require(sample.claims["aud"] as? String)
            let issuer = try #require(sample.claims["iss"] as? String)
            var configuration = IdentityProviderConfiguration.google(audiences: [audience], keysURL: Self.unusedURL)
            if issuer == "https://cloud.google.com/iap" {
                configuration.issuers = [issuer]
                configuration.algorithms = [.es256]
            }
            let nonce = sample.claims["nonce"] as? String
            let verified = try await provider(configuration, keys: sample.jwksFile, at: iat + 60)
                .verify(token: sample.token, nonce: nonce).identity
            #expect(verified.subject == sample.claims["sub"] as? String)
            if sample.claims["email_verified"] as? Bool == true { #expect(verified.emailVerified) }

            await #expect(throws: JOSEError(.expired, "")) {
                try await provider(configuration, keys: sample.jwksFile, at: exp + 3600).verify(
                    token: sample.token, nonce: nonce)
            }
            await #expect(throws: JOSEError(.audienceMismatch, "")) {
                var other = configuration
                other.audiences = [audience + "1"]
                return try await provider(other, keys: sample.jwksFile, at: iat + 60).verify(
                    token: sample.token, nonce: nonce)
            }
            if let nonce {
                await #expect(throws: JOSEError(.nonceMismatch, "")) {
                    try await provider(configuration, keys: sample.jwksFile, at: iat + 60)
                        .verify(token: sample.token, nonce: nonce + "1")
                }
            }
        }
    }

    @Test func bothGoogleIssuerSpellingsAreAccepted() {
        let google = IdentityProviderConfiguration.google(audiences: ["a"], keysURL: Self.unusedURL)
        #expect(google.issuers.contains("accounts.google.com"))
        #expect(google.issuers.contains("https://accounts.google.com"))
        let apple = IdentityProviderConfiguration.apple(audiences: ["a"], keysURL: Self.unusedURL)
        #expect(apple.issuers == ["https://appleid.apple.com", "https://account.apple.com"])
        #expect(apple.nonceMode == .sha256Hex)
    }

    @Test func theLegacyCertificateFormVerifiesToo() async throws {
        let sample = try #require(try RealTokens.samples("google").first { $0.jwksFile.contains("f9d97b4c") })
        let iat = try #require(sample.claims["iat"] as? Double)
        let audience = try #require(sample.claims["aud"] as? String)
        let configuration = IdentityProviderConfiguration.google(audiences: [audience], keysURL: Self.unusedURL)
        let verified = try await provider(
            configuration, keys: "google/certs_google_v1_x509_2020-04_f9d97b4c_28b741e8.json", at: iat + 60
        ).verify(token: sample.token, nonce: nil)
        #expect(verified.identity.subject == sample.claims["sub"] as? String)
    }

    @Test func appleTokensVerifyAndTheirBooleansArriveAsStrings() async throws {
        let samples = try RealTokens.samples("apple")
        #expect(samples.count == 4)
        var verifiedCount = 0
        for sample in samples {
            let iat = try #require(sample.claims["iat"] as? Double)
            let audience = try #require(sample.claims["aud"] as? String)
            let configuration = IdentityProviderConfiguration.apple(audiences: [audience], keysURL: Self.unusedURL)
            let apple = try provider(configuration, keys: sample.jwksFile, at: iat + 60)
            guard sample.claims["sub"] is String else {
                // The server-to-server notification: signed by Apple, but no `sub` to sign in with.
                await #expect(throws: JOSEError(.missingClaim, "")) {
                    try await apple.verify(token: sample.token, nonce: nil)
                }
                let keys = try JWKSet(json: try SharedTestData.data("real/\(sample.jwksFile)"))
                try JWSVerifier.verifySignature(CompactJWS(sample.token), keys: keys, allowed: [.rs256])
                let claims = try JWSVerifier.decodeClaims(try CompactJWS(sample.token).payload)
                #expect(claims.events?.contains("\"type\"") == true, "events is itself a JSON string")
                continue
            }
            let verified = try await apple.verify(token: sample.token, nonce: nil).identity
            verifiedCount += 1
            if sample.claims["is_private_email"] as? String == "true" {
                #expect(verified.isPrivateEmail)
                #expect(verified.emailVerified)
            }
            if let rawNonce = sample.claims["nonce"] as? String {
                // This app put the raw value in the token; Apple's rule is hex(SHA-256(raw)).
                await #expect(throws: JOSEError(.nonceMismatch, "")) {
                    try await apple.verify(token: sample.token, nonce: rawNonce)
                }
            }
        }
        #expect(verifiedCount == 3)
    }

    /// Every derived negative is refused, with two documented policy decisions:
    /// `apple_padded_base64` is refused (RFC 7515 base64url has no padding: strict), and
    /// `es256_high_s_malleated` is accepted (a mathematically valid ECDSA signature; JOSE has no low-S
    /// rule and OpenSSL accepts it; malleability cannot forge new claims).
    @Test func derivedNegatives() async throws {
        let cases = try #require(try SharedTestData.json("real/negative/negatives_derived.json") as? [[String: Any]])
        #expect(cases.count >= 19)
        for entry in cases {
            let name = try #require(entry["name"] as? String)
            let token = try #require(entry["token"] as? String)
            let file = try #require(entry["jwks_file"] as? String)
            let keys = try JWKSet(json: try SharedTestData.data("real/\(file)"))
            let accepted: Bool
            do {
                try JWSVerifier.verifySignature(CompactJWS(token), keys: keys, allowed: [.rs256, .es256])
                accepted = true
            } catch {
                accepted = false
            }
            if name == "es256_high_s_malleated" {
                #expect(accepted, "\(name): valid ECDSA, accepted by policy")
            } else {
                #expect(!accepted, "\(name) must be refused")
            }
        }
    }
}
