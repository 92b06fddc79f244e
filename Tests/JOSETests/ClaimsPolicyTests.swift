import AuthCrypto
import Foundation
import JOSE
import Testing

@testable import TestSupport

@Suite struct ClaimsPolicyTests {
    let now = Date(timeIntervalSince1970: 1_795_953_600)
    var policy: ClaimsPolicy {
        var policy = ClaimsPolicy(issuers: ["https://appleid.apple.com"], audiences: ["com.example.app"])
        policy.nonceMode = .sha256Hex
        return policy
    }

    func claims(_ overrides: [String: Any] = [:], removing: [String] = []) throws -> IDTokenClaims {
        var values: [String: Any] = [
            "iss": "https://appleid.apple.com", "aud": "com.example.app", "sub": "001234.abcd",
            "exp": 1_795_953_600 + 600, "iat": 1_795_953_600 - 10, "nonce": Hex.encode(SHA256.hash("raw-nonce")),
        ]
        for (key, value) in overrides { values[key] = value }
        for key in removing { values.removeValue(forKey: key) }
        return try JWSVerifier.decodeClaims(Array(try JSONSerialization.data(withJSONObject: values)))
    }

    @Test func aGoodTokenPasses() throws {
        try policy.validate(try claims(), now: now, nonce: "raw-nonce")
    }

    /// Overrides as JSON (test arguments must be Sendable), with the expected refusal.
    @Test(arguments: [
        (#"{"iss":"https://appleid.apple.com1"}"#, JOSEError.Code.issuerMismatch),
        (#"{"iss":"https://evil.example"}"#, .issuerMismatch),
        (#"{"aud":"com.example.app1"}"#, .audienceMismatch),
        (#"{"aud":["other","another"]}"#, .audienceMismatch),
        (#"{"exp":1795953539}"#, .expired),
        (#"{"exp":1795953240}"#, .expired),
        (#"{"nbf":1795953661}"#, .notYetValid),
        (#"{"iat":1795953661}"#, .issuedInFuture),
        (#"{"nonce":"raw-nonce"}"#, .nonceMismatch),
        (#"{"nonce":"0000000000000000000000000000000000000000000000000000000000000000"}"#, .nonceMismatch),
        (#"{"sub":""}"#, .missingClaim),
        (#"{"exp":"tomorrow"}"#, .invalidClaim),
        (#"{"aud":7}"#, .invalidClaim),
        (#"{"email_verified":"yes"}"#, .invalidClaim),
        (#"{"aud":["com.example.app","com.example.app1"]}"#, .audienceMismatch),
        (#"{"iat":1795348800}"#, .expired),
    ])
    func refusals(overrides: String, code: JOSEError.Code) throws {
        let values = try #require(try JSONSerialization.jsonObject(with: Data(overrides.utf8)) as? [String: Any])
        #expect(throws: JOSEError(code, "")) { try policy.validate(try claims(values), now: now, nonce: "raw-nonce") }
    }

    @Test func missingAudienceIsRefusedAndASingleElementArrayAccepted() throws {
        #expect(throws: JOSEError(.audienceMismatch, "")) {
            try policy.validate(try claims(removing: ["aud"]), now: now, nonce: "raw-nonce")
        }
        try policy.validate(try claims(["aud": ["com.example.app"]]), now: now, nonce: "raw-nonce")
    }

    @Test(arguments: ["iss", "exp", "iat", "sub"])
    func requiredClaims(name: String) {
        #expect(throws: JOSEError(.missingClaim, "")) {
            try policy.validate(try claims(removing: [name]), now: now, nonce: "raw-nonce")
        }
    }

    @Test func clockSkewIsTolerated() throws {
        try policy.validate(try claims(["exp": 1_795_953_600 - 59, "iat": 1_795_953_600 + 59]), now: now, nonce: nil)
        var strict = policy
        strict.clockSkew = 0
        #expect(throws: JOSEError(.expired, "")) {
            try strict.validate(try claims(["exp": 1_795_953_600 - 1]), now: now, nonce: nil)
        }
    }

    @Test func audienceArraysAndStringBooleans() throws {
        let parsed = try claims([
            "aud": ["com.example.app"], "email_verified": "true", "is_private_email": "false",
        ])
        try policy.validate(parsed, now: now, nonce: "raw-nonce")
        #expect(parsed.emailVerified == true)
        #expect(parsed.isPrivateEmail == false)
        #expect(try claims(["email_verified": true]).emailVerified == true)
        #expect(try claims(["iat": 1_795_953_590.5]).issuedAt == 1_795_953_590.5)
    }

    @Test func nonceModesAndRequirement() throws {
        var raw = policy
        raw.nonceMode = .raw
        try raw.validate(try claims(["nonce": "raw-nonce"]), now: now, nonce: "raw-nonce")
        // Without a nonce in the request the token's nonce is not checked, unless required.
        try policy.validate(try claims(), now: now, nonce: nil)
        var required = policy
        required.requireNonce = true
        #expect(throws: JOSEError(.nonceMismatch, "")) { try required.validate(try claims(), now: now, nonce: nil) }
        // A request nonce with a token that has none.
        #expect(throws: JOSEError(.nonceMismatch, "")) {
            try policy.validate(try claims(removing: ["nonce"]), now: now, nonce: "raw-nonce")
        }
    }

    @Test func googleHostedDomainAndAuthorizedParty() throws {
        var google = ClaimsPolicy(issuers: ["https://accounts.google.com"], audiences: ["web-client"])
        google.hostedDomains = ["example.com"]
        google.authorizedParties = ["android-client", "web-client"]
        let base: [String: Any] = ["iss": "https://accounts.google.com", "aud": "web-client", "nonce": "n"]
        try google.validate(
            try claims(base.merging(["hd": "example.com", "azp": "android-client"]) { $1 }), now: now, nonce: nil)
        #expect(throws: JOSEError(.audienceMismatch, "")) {
            try google.validate(try claims(base.merging(["hd": "evil.com"]) { $1 }), now: now, nonce: nil)
        }
        #expect(throws: JOSEError(.audienceMismatch, "")) {
            try google.validate(
                try claims(base.merging(["hd": "example.com", "azp": "stranger"]) { $1 }), now: now, nonce: nil)
        }
        // The OpenID secondary-audience case: an extra audience the client does not trust.
        #expect(throws: JOSEError(.audienceMismatch, "")) {
            try google.validate(
                try claims(base.merging(["hd": "example.com", "aud": ["web-client", "web-client1"]]) { $1 }), now: now,
                nonce: nil)
        }
    }
}
