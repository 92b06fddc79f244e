import AuthCrypto
import Foundation
import JOSE
import StrictJSON
import Testing

@Suite struct SealingTests {
    @Test func aesGCMRoundTripsAndDetectsTampering() throws {
        let key = try SecureRandom.bytes(32)
        let sealed = try AESGCM.seal(Array("secret session".utf8), key: key, aad: Array("header".utf8))
        #expect(AESGCM.open(sealed, key: key, aad: Array("header".utf8)) == Array("secret session".utf8))
        var tampered = sealed
        tampered.ciphertext[0] ^= 1
        #expect(AESGCM.open(tampered, key: key, aad: Array("header".utf8)) == nil)
        #expect(AESGCM.open(sealed, key: key, aad: Array("other".utf8)) == nil)
        #expect(AESGCM.open(sealed, key: try SecureRandom.bytes(32), aad: Array("header".utf8)) == nil)
    }

    @Test func x25519AgreesAndRefusesLowOrderPoints() throws {
        let alice = try X25519.generateKeyPair()
        let bob = try X25519.generateKeyPair()
        #expect(
            try X25519.sharedSecret(privateKey: alice.privateKey, publicKey: bob.publicKey)
                == X25519.sharedSecret(privateKey: bob.privateKey, publicKey: alice.publicKey))
        #expect(throws: X25519.Failure.self) {
            try X25519.sharedSecret(privateKey: alice.privateKey, publicKey: [UInt8](repeating: 0, count: 32))
        }
        #expect(throws: JOSEError.self) { try JWE.sealECDHES([1], to: [UInt8](repeating: 0, count: 32)) }
        #expect(throws: JOSEError.self) { try JWE.sealECDHES([1], to: [1, 2, 3]) }
    }

    /// RFC 7518 Appendix C: the Concat KDF example (ECDH-ES with A128GCM, apu "Alice", apv "Bob")
    /// is for P-256 and non-empty party info; here the structure is pinned against a value computed
    /// by an independent implementation in the interop test instead.
    @Test func compactJWEShape() throws {
        let recipient = try X25519.generateKeyPair()
        let jwe = try JWE.sealECDHES(Array("{}".utf8), to: recipient.publicKey)
        let parts = jwe.split(separator: ".", omittingEmptySubsequences: false)
        #expect(parts.count == 5)
        #expect(parts[1].isEmpty, "ECDH-ES direct agreement has no encrypted key")
        let header = try JSONReader.object(try #require(Base64URL.decode(String(parts[0]))))
        #expect(header["alg"] == .string("ECDH-ES"))
        #expect(header["enc"] == .string("A256GCM"))
        guard case .object(let epk)? = header["epk"] else {
            Issue.record("no epk")
            return
        }
        #expect(epk["kty"] == .string("OKP") && epk["crv"] == .string("X25519"))
    }

    @Test(.requiresIndependentJOSE) func jwcryptoOpensOurJWEAndRefusesTampering() throws {
        let recipient = try X25519.generateKeyPair()
        let plaintext = #"{"access_token":"at","token_type":"Bearer"}"#
        let jwe = try JWE.sealECDHES(Array(plaintext.utf8), to: recipient.publicKey)
        let script = """
            import sys, json
            from jwcrypto import jwk, jwe
            d, x, token = sys.stdin.read().split()
            key = jwk.JWK(kty='OKP', crv='X25519', d=d, x=x)
            obj = jwe.JWE()
            try:
                obj.deserialize(token, key=key)
                print(obj.payload.decode())
            except Exception as error:
                print('REFUSED', type(error).__name__)
            """
        let input = [Base64URL.encode(recipient.privateKey), Base64URL.encode(recipient.publicKey), jwe].joined(
            separator: " ")
        #expect(try IndependentJOSE.run(script, input: input) == plaintext)
        var parts = jwe.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        var ciphertext = try #require(Base64URL.decode(parts[3]))
        ciphertext[0] ^= 1
        parts[3] = Base64URL.encode(ciphertext)
        let tampered = [
            Base64URL.encode(recipient.privateKey), Base64URL.encode(recipient.publicKey), parts.joined(separator: "."),
        ]
        .joined(separator: " ")
        #expect(try IndependentJOSE.run(script, input: tampered).hasPrefix("REFUSED"))
    }
}
