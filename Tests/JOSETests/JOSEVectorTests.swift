import AuthCrypto
import Foundation
import JOSE
import Testing

@testable import TestSupport

/// Project Wycheproof signature vectors for every algorithm the verifier accepts.
///
/// Policy for `acceptable` vectors: they are run and whatever OpenSSL decides is accepted by the
/// test (they cover legacy encodings a strict verifier may refuse); `valid` must verify and
/// `invalid` must not. Keys below 2048 bits are refused by policy, so their vectors must not verify.
/// ECDSA vectors are the P1363 (`r || s`) files, the encoding JWS uses; PSS vectors only where the
/// salt length equals the hash length and MGF1 uses the same hash, as RFC 7518 §3.5 requires.
@Suite(.requiresSharedTestData) struct WycheproofTests {
    static let files: [(String, JWSAlgorithm)] = [
        ("rsa_signature_2048_sha256_test.json", .rs256), ("rsa_signature_3072_sha256_test.json", .rs256),
        ("rsa_signature_4096_sha256_test.json", .rs256), ("rsa_signature_2048_sha384_test.json", .rs384),
        ("rsa_signature_3072_sha384_test.json", .rs384), ("rsa_signature_4096_sha384_test.json", .rs384),
        ("rsa_signature_2048_sha512_test.json", .rs512), ("rsa_signature_3072_sha512_test.json", .rs512),
        ("rsa_signature_4096_sha512_test.json", .rs512), ("rsa_pss_2048_sha256_mgf1_32_test.json", .ps256),
        ("rsa_pss_3072_sha256_mgf1_32_test.json", .ps256), ("rsa_pss_4096_sha256_mgf1_32_test.json", .ps256),
        ("rsa_pss_2048_sha384_mgf1_48_test.json", .ps384), ("rsa_pss_4096_sha384_mgf1_48_test.json", .ps384),
        ("rsa_pss_4096_sha512_mgf1_64_test.json", .ps512), ("ecdsa_secp256r1_sha256_p1363_test.json", .es256),
        ("ecdsa_secp384r1_sha384_p1363_test.json", .es384), ("ecdsa_secp521r1_sha512_p1363_test.json", .es512),
        ("ed25519_test.json", .edDSA),
    ]

    static func bytes(hex: String) -> [UInt8] {
        var out: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            out.append(UInt8(hex[index..<next], radix: 16) ?? 0)
            index = next
        }
        return out
    }

    @Test(arguments: files)
    func vectors(file: String, algorithm: JWSAlgorithm) throws {
        let document = try #require(try SharedTestData.json("wycheproof/testvectors_v1/\(file)") as? [String: Any])
        var counts: [String: Int] = [:]
        for group in try #require(document["testGroups"] as? [[String: Any]]) {
            let key: PublicKey
            do {
                if let jwkObject = group["publicKeyJwk"] ?? group["keyJwk"] {
                    key = try JWK(json: try JSONSerialization.data(withJSONObject: jwkObject)).key
                } else {
                    // Some EC groups give only the uncompressed point.
                    guard case .ec(let curve) = algorithm.keyFamily,
                        let point = (group["publicKey"] as? [String: Any])?["uncompressed"] as? String
                    else { throw JOSEError(.invalidKey, "no key in group") }
                    let bytes = Self.bytes(hex: point)
                    let size = curve.coordinateSize
                    key = try PublicKey.ec(
                        curve: curve, x: Array(bytes[1...size]), y: Array(bytes[(1 + size)...]))
                }
            } catch {
                // Only keys the policy refuses may fail to load: small RSA moduli.
                let bits = group["keySize"] as? Int ?? 0
                #expect(bits < 2048, "\(file): a \(bits)-bit key failed to load: \(error)")
                counts["refused key", default: 0] += (group["tests"] as? [Any])?.count ?? 0
                continue
            }
            for test in try #require(group["tests"] as? [[String: Any]]) {
                let message = Self.bytes(hex: test["msg"] as? String ?? "")
                let signature = Self.bytes(hex: test["sig"] as? String ?? "")
                let result = test["result"] as? String ?? ""
                let verified = (try? key.verify(signature: signature, message: message, algorithm: algorithm)) ?? false
                switch result {
                case "valid": #expect(verified, "\(file) tcId \(test["tcId"] ?? "?") must verify")
                case "invalid": #expect(!verified, "\(file) tcId \(test["tcId"] ?? "?") must not verify")
                default: break
                }
                counts[result, default: 0] += 1
            }
        }
        #expect((counts["valid"] ?? 0) > 0)
        #expect((counts["invalid"] ?? 0) > 0)
    }
}

/// The JWS examples of RFC 7515 Appendix A, RFC 7520 §4 and RFC 8037 Appendix A.
@Suite(.requiresSharedTestData) struct RFCExampleTests {
    func jwk(_ object: Any?) throws -> JWKSet {
        var key = try #require(object as? [String: Any])
        key["kid"] = "example"
        return try JWKSet(json: try JSONSerialization.data(withJSONObject: ["keys": [key]]))
    }

    @Test(arguments: ["rfc7515_a_2.json", "rfc7515_a_3.json", "rfc7515_a_4.json", "rfc8037_appendix_a_ed25519.json"])
    func examplesVerify(file: String) throws {
        let example = try #require(try SharedTestData.json("rfc/\(file)") as? [String: Any])
        let keys = try jwk(example["jwk_public"] ?? example["jwk"] ?? example["key"])
        let compact = try #require((example["compact"] ?? example["jws_compact"]) as? String)
        let jws = try CompactJWS(compact)
        try JWSVerifier.verifySignature(jws, keys: keys, allowed: Set(JWSAlgorithm.allCases), requireKeyID: false)

        // The same token with one payload byte changed fails.
        var parts = compact.split(separator: ".").map(String.init)
        var payload = try #require(Base64URL.decode(parts[1]))
        payload[0] ^= 0x20
        parts[1] = Base64URL.encode(payload)
        #expect(throws: JOSEError(.badSignature, "")) {
            try JWSVerifier.verifySignature(
                CompactJWS(parts.joined(separator: ".")), keys: keys, allowed: Set(JWSAlgorithm.allCases),
                requireKeyID: false)
        }
    }

    @Test(arguments: ["rfc7515_a_2.json", "rfc7515_a_3.json", "rfc7515_a_4.json", "rfc8037_appendix_a_ed25519.json"])
    func negativeVariantsAreRefused(file: String) throws {
        let example = try #require(try SharedTestData.json("rfc/\(file)") as? [String: Any])
        let keys = try jwk(example["jwk_public"])
        let variants = try #require(example["negative_variants"] as? [[String: Any]])
        #expect(!variants.isEmpty)
        for variant in variants where variant["expected"] as? String == "invalid" {
            let compact = try #require(variant["compact"] as? String)
            let accepted =
                (try? JWSVerifier.verifySignature(
                    CompactJWS(compact), keys: keys, allowed: Set(JWSAlgorithm.allCases), requireKeyID: false)) != nil
            #expect(!accepted, "\(file) \(variant["name"] ?? "?") must be refused")
        }
    }

    @Test func hmacAndUnsecuredExamplesAreRefused() throws {
        for file in ["rfc7515_a_1.json", "rfc7515_a_5.json"] {
            let example = try #require(try SharedTestData.json("rfc/\(file)") as? [String: Any])
            let compact = try #require((example["compact"] ?? example["jws_compact"]) as? String)
            #expect(throws: JOSEError.self) {
                try JWSVerifier.verifySignature(
                    CompactJWS(compact), keys: JWKSet(keys: []), allowed: Set(JWSAlgorithm.allCases),
                    requireKeyID: false)
            }
        }
    }
}
