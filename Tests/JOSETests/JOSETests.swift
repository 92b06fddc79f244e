import AuthCrypto
import Foundation
import JOSE
import JOSEFixtures
import Testing

@testable import TestSupport

@Suite struct JWSSignatureTests {
    static let cases: [(TestSigner, JWSAlgorithm)] =
        [Signers.rsa2048, Signers.rsa3072, Signers.rsa4096].flatMap { signer in
            [JWSAlgorithm.rs256, .rs384, .rs512, .ps256, .ps384, .ps512].map { (signer, $0) }
        } + [(Signers.p256, .es256), (Signers.p384, .es384), (Signers.p521, .es512), (Signers.ed25519, .edDSA)]

    @Test(arguments: cases)
    func everyAlgorithmVerifiesAndRejectsTampering(signer: TestSigner, algorithm: JWSAlgorithm) throws {
        let token = signer.token(["sub": "u"], algorithm: algorithm)
        let keys = Signers.keySet
        let verified = try JWSVerifier.verifySignature(
            CompactJWS(token), keys: keys, allowed: Set(JWSAlgorithm.allCases))
        #expect(verified.keyID == signer.kid)

        // One flipped bit in the signature, and a payload from another token, both fail.
        var parts = token.split(separator: ".").map(String.init)
        var signature = try #require(Base64URL.decode(parts[2]))
        signature[signature.count / 2] ^= 0x01
        let flipped = parts[0] + "." + parts[1] + "." + Base64URL.encode(signature)
        #expect(throws: JOSEError(.badSignature, "")) {
            try JWSVerifier.verifySignature(CompactJWS(flipped), keys: keys, allowed: Set(JWSAlgorithm.allCases))
        }
        parts[1] = TokenParts.encode(["sub": "admin"])
        #expect(throws: JOSEError(.badSignature, "")) {
            try JWSVerifier.verifySignature(
                CompactJWS(parts.joined(separator: ".")), keys: keys, allowed: Set(JWSAlgorithm.allCases))
        }
    }

    @Test func rawSignatureAPIBelowTheJWSLayer() throws {
        let jwk = try JWK(json: try JSONSerialization.data(withJSONObject: Signers.p256.jwk()))
        let message = Array("hello".utf8)
        let signature = Signers.p256.sign(message, .es256)
        #expect(try jwk.key.verify(signature: signature, message: message, algorithm: .es256))
        #expect(try !jwk.key.verify(signature: signature, message: Array("hellO".utf8), algorithm: .es256))
        #expect(throws: JOSEError(.keyMismatch, "")) {
            try jwk.key.verify(signature: signature, message: message, algorithm: .rs256)
        }
        #expect(throws: JOSEError(.keyMismatch, "")) {
            try jwk.key.verify(signature: signature, message: message, algorithm: .es384)
        }
    }

    /// One key verified from many threads at once, from its first use (when its ready contexts
    /// are made) on, with two algorithms whose contexts differ (PKCS #1 v1.5 and PSS padding):
    /// every answer is the one verifying alone gives.
    @Test func oneKeyVerifiesFromManyThreadsAtOnce() async throws {
        let signer = TestSigner(.rsa(2048))
        let jwk = try JWK(json: try JSONSerialization.data(withJSONObject: signer.jwk()))
        let key = jwk.key
        let messages = (0..<8).map { Array("message \($0)".utf8) }
        let signatures = messages.map { message in
            [JWSAlgorithm.rs256, .ps256].map { (algorithm: $0, signature: signer.sign(message, $0)) }
        }
        let wrong = try await withThrowingTaskGroup(of: Int.self) { group in
            for task in 0..<8 {
                group.addTask {
                    var wrong = 0
                    for round in 0..<60 {
                        let index = (task + round) % messages.count
                        for (algorithm, signature) in signatures[index] {
                            // Its own message verifies; the next one's does not; nor the other
                            // padding's signature.
                            let other: JWSAlgorithm = algorithm == .rs256 ? .ps256 : .rs256
                            if try !key.verify(signature: signature, message: messages[index], algorithm: algorithm) {
                                wrong += 1
                            }
                            let next = messages[(index + 1) % messages.count]
                            if try key.verify(signature: signature, message: next, algorithm: algorithm) { wrong += 1 }
                            if try key.verify(signature: signature, message: messages[index], algorithm: other) {
                                wrong += 1
                            }
                        }
                    }
                    return wrong
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(wrong == 0)
    }
}

@Suite struct JWSNegativeTests {
    let keys = Signers.keySet
    let allowed: Set<JWSAlgorithm> = [.rs256, .es256]

    func verify(_ token: String, allowed: Set<JWSAlgorithm>? = nil, requireKeyID: Bool = true) throws {
        try JWSVerifier.verifySignature(
            CompactJWS(token), keys: keys, allowed: allowed ?? self.allowed, requireKeyID: requireKeyID)
    }

    @Test func algNoneIsRefusedWithOrWithoutASignature() {
        let unsigned = TokenParts.encode(["alg": "none", "kid": "rsa2048"]) + "." + TokenParts.encode(["sub": "u"])
        #expect(throws: JOSEError(.malformed, "")) { try verify(unsigned + ".") }
        #expect(throws: JOSEError(.algorithmNotAllowed, "")) { try verify(unsigned + ".AAAA") }
        let noneUpper = TokenParts.encode(["alg": "None", "kid": "rsa2048"]) + "." + TokenParts.encode(["sub": "u"])
        #expect(throws: JOSEError(.algorithmNotAllowed, "")) { try verify(noneUpper + ".AAAA") }
    }

    @Test func hmacKeyedWithThePublicKeyIsRefused() throws {
        // The classic confusion: HS256 with the RSA public key's PEM as the secret.
        let input = TokenParts.encode(["alg": "HS256", "kid": "rsa2048"]) + "." + TokenParts.encode(["sub": "admin"])
        let pem = Array(Signers.rsa2048.publicPEM.utf8)
        let mac = HMACForTests.sha256(key: pem, message: Array(input.utf8))
        #expect(throws: JOSEError(.algorithmNotAllowed, "")) {
            try verify(input + "." + Base64URL.encode(mac), allowed: Set(JWSAlgorithm.allCases))
        }
    }

    @Test func keysAreChosenByKidOnly() {
        let signer = Signers.rsa2048
        // Unknown kid: no falling back to trying every key.
        let unknown = signer.token(["sub": "u"], algorithm: .rs256, header: ["kid": "nope"])
        #expect(throws: JOSEError(.keyNotFound, "")) { try verify(unknown) }
        // Missing kid.
        let missing = signer.token(["sub": "u"], algorithm: .rs256, includeKid: false)
        #expect(throws: JOSEError(.keyNotFound, "")) { try verify(missing) }
        #expect(throws: JOSEError(.keyNotFound, "")) { try verify(missing, requireKeyID: false) }
        // Mismatched kid: names another RSA key, so the signature does not verify under it.
        let mismatched = signer.token(["sub": "u"], algorithm: .rs256, header: ["kid": "rsa3072"])
        #expect(throws: JOSEError(.badSignature, "")) { try verify(mismatched) }
        // kid of an EC key for an RS256 token: the key does not fit the algorithm.
        let wrongType = signer.token(["sub": "u"], algorithm: .rs256, header: ["kid": "p256"])
        #expect(throws: JOSEError(.keyMismatch, "")) { try verify(wrongType) }
    }

    @Test func aKeySetWithOneKeyAcceptsAMissingKidOnlyWhenAllowed() throws {
        let single = try JWKSet(json: TestSigner.keySet([Signers.p256]))
        let token = Signers.p256.token(["sub": "u"], algorithm: .es256, includeKid: false)
        try JWSVerifier.verifySignature(CompactJWS(token), keys: single, allowed: [.es256], requireKeyID: false)
        #expect(throws: JOSEError(.keyNotFound, "")) {
            try JWSVerifier.verifySignature(CompactJWS(token), keys: single, allowed: [.es256])
        }
    }

    @Test func algorithmsOffTheAllowListAreRefused() {
        let token = Signers.p384.token(["sub": "u"], algorithm: .es384)
        #expect(throws: JOSEError(.algorithmNotAllowed, "")) { try verify(token) }
    }

    @Test func declaredJWKAlgorithmIsEnforced() throws {
        let keys = try JWKSet(
            json: try JSONSerialization.data(withJSONObject: ["keys": [Signers.rsa2048.jwk(alg: "PS256")]]))
        let token = Signers.rsa2048.token(["sub": "u"], algorithm: .rs256)
        #expect(throws: JOSEError(.keyMismatch, "")) {
            try JWSVerifier.verifySignature(CompactJWS(token), keys: keys, allowed: [.rs256, .ps256])
        }
    }

    @Test func headerTamperingBreaksTheSignature() {
        let token = Signers.rsa2048.token(["sub": "u"], algorithm: .rs256)
        let parts = token.split(separator: ".").map(String.init)
        let header = TokenParts.encode(["alg": "RS256", "kid": "rsa2048", "typ": "JWT", "x": 1])
        #expect(throws: JOSEError(.badSignature, "")) { try verify(header + "." + parts[1] + "." + parts[2]) }
    }

    @Test(arguments: [
        "a.b", "a.b.c.d", "..", "e30.e30.", ".e30.AAAA", "e30..AAAA", "not a token at all",
    ])
    func malformedShapes(token: String) {
        #expect(throws: JOSEError(.malformed, "")) { try verify(token) }
    }

    @Test func encodingMustBeStrictBase64URL() {
        let token = Signers.rsa2048.token(["sub": "u"], algorithm: .rs256)
        let parts = token.split(separator: ".").map(String.init)
        let padded = parts[0] + "." + parts[1] + "." + parts[2] + "=="
        #expect(throws: JOSEError(.malformed, "")) { try verify(padded) }
        let standardAlphabet =
            parts[0] + "." + parts[1] + "."
            + parts[2].replacingOccurrences(of: "-", with: "+")
            .replacingOccurrences(of: "_", with: "/")
        if standardAlphabet != token {
            #expect(throws: JOSEError(.malformed, "")) { try verify(standardAlphabet) }
        }
        let truncated = String(token.dropLast(10))
        #expect(throws: (any Error).self) { try verify(truncated) }
    }

    @Test func ecdsaSignaturesMustBeRawNotDER() throws {
        let token = Signers.p256.token(["sub": "u"], algorithm: .es256)
        let parts = token.split(separator: ".").map(String.init)
        let raw = try #require(Base64URL.decode(parts[2]))
        let der = DERForTests.ecdsa(raw)
        #expect(throws: JOSEError(.badSignature, "")) {
            try verify(parts[0] + "." + parts[1] + "." + Base64URL.encode(der))
        }
        // r = 0 is never valid.
        let zeroR = [UInt8](repeating: 0, count: 32) + raw[32...]
        #expect(throws: JOSEError(.badSignature, "")) {
            try verify(parts[0] + "." + parts[1] + "." + Base64URL.encode(zeroR))
        }
    }

    @Test func oversizedTokensAreRefusedBeforeDecoding() {
        let huge = Signers.rsa2048.token(["sub": String(repeating: "x", count: 20_000)], algorithm: .rs256)
        #expect(throws: JOSEError(.malformed, "")) { try verify(huge) }
    }

    @Test func criticalHeaderParametersAreRefused() {
        let token = Signers.rsa2048.token(["sub": "u"], algorithm: .rs256, header: ["crit": ["exp"], "exp": 1])
        #expect(throws: JOSEError(.malformed, "")) { try verify(token) }
    }
}

@Suite struct JWKTests {
    @Test func smallRSAKeysAreRefused() {
        let small = TestSigner(.rsa(1024))
        #expect(throws: JOSEError(.invalidKey, "")) {
            try JWK(json: try JSONSerialization.data(withJSONObject: small.jwk()))
        }
    }

    /// With e = 1 an RSA "signature" is the padded message itself: anyone can make one.
    @Test func rsaExponentsBelowThreeAreRefused() throws {
        var jwk = Signers.rsa2048.jwk()
        for (exponent, usable) in [("AQ", false), ("Ag", false), ("AAE", false), ("Aw", true), ("AQAB", true)] {
            jwk["e"] = exponent
            let data = try JSONSerialization.data(withJSONObject: jwk)
            if usable {
                _ = try JWK(json: data)
            } else {
                #expect(throws: JOSEError(.invalidKey, ""), "e = \(exponent)") { try JWK(json: data) }
            }
        }
    }

    /// A small-order Ed25519 key verifies signatures nobody made: under the neutral point,
    /// R = neutral and S = 0 verify for any message. Such keys never enter a key set.
    @Test func smallOrderEd25519KeysAreRefusedAndCannotForge() throws {
        let neutral = [1] + [UInt8](repeating: 0, count: 31)
        let document: [String: Any] = [
            "keys": [["kty": "OKP", "crv": "Ed25519", "x": Base64URL.encode(neutral), "kid": "weak"]]
        ]
        let set = try JWKSet(json: try JSONSerialization.data(withJSONObject: document))
        #expect(set.keyIDs.isEmpty)
        let header = Base64URL.encode(Array(#"{"alg":"EdDSA","kid":"weak"}"#.utf8))
        let payload = Base64URL.encode(Array(#"{"sub":"victim","iss":"https://issuer.example"}"#.utf8))
        let forged = try CompactJWS(
            "\(header).\(payload).\(Base64URL.encode(neutral + [UInt8](repeating: 0, count: 32)))")
        #expect(throws: JOSEError.self) { try JWSVerifier.verifySignature(forged, keys: set, allowed: [.edDSA]) }
        // Every blocklisted encoding, with its sign bit either way.
        for point in PublicKey.smallOrderEd25519 {
            for sign in [UInt8(0), 0x80] {
                let encoded = Array(point[0..<31]) + [point[31] | sign]
                #expect(throws: JOSEError.self) { try PublicKey.ed25519(encoded) }
            }
        }
        _ = try PublicKey.ed25519(Array(try #require(Base64URL.decode(Signers.ed25519.jwk()["x"] ?? ""))))
    }

    @Test func pointsOffTheCurveAreRefused() throws {
        var jwk = Signers.p256.jwk()
        var y = try #require(Base64URL.decode(jwk["y"] ?? ""))
        y[31] ^= 0x01
        jwk["y"] = Base64URL.encode(y)
        #expect(throws: JOSEError(.invalidKey, "")) { try JWK(json: try JSONSerialization.data(withJSONObject: jwk)) }
    }

    @Test func unusableMembersAreSkippedNotFatal() throws {
        let document: [String: Any] = [
            "keys": [
                Signers.ed25519.jwk(), ["kty": "oct", "k": "c2VjcmV0", "kid": "hmac"],
                ["kty": "EC", "crv": "secp256k1", "x": "AA", "y": "AA", "kid": "k1"], "not an object",
            ]
        ]
        let set = try JWKSet(json: try JSONSerialization.data(withJSONObject: document))
        #expect(set.keyIDs == ["ed25519"])
        #expect(set.skipped.count == 3)
    }

    @Test func keysForEncryptionNeverVerify() throws {
        var jwk = Signers.p256.jwk()
        jwk["use"] = "enc"
        let set = try JWKSet(json: try JSONSerialization.data(withJSONObject: ["keys": [jwk]]))
        #expect(set.skipped == [])
        let token = Signers.p256.token(["sub": "u"], algorithm: .es256)
        #expect(throws: JOSEError(.keyMismatch, "")) {
            try JWSVerifier.verifySignature(CompactJWS(token), keys: set, allowed: [.es256])
        }
    }

    @Test func pemPublicKeysAndTheCertificateMapForm() throws {
        let set = try JWKSet(json: try JSONSerialization.data(withJSONObject: ["pem-key": Signers.rsa2048.publicPEM]))
        #expect(set.keyIDs == ["pem-key"])
        let token = Signers.rsa2048.token(["sub": "u"], algorithm: .rs256, header: ["kid": "pem-key"])
        try JWSVerifier.verifySignature(CompactJWS(token), keys: set, allowed: [.rs256])
    }

    @Test func garbageDocumentsAreRefused() {
        #expect(throws: JOSEError.self) { try JWKSet(json: Data("[]".utf8)) }
        #expect(throws: JOSEError.self) { try JWKSet(json: Data("{\"keys\":{}}".utf8)) }
        #expect(throws: JOSEError.self) { try JWKSet(json: Data("nope".utf8)) }
    }
}
