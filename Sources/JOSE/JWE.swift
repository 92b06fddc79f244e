import AuthCrypto

/// Compact JWE (RFC 7516) with `ECDH-ES` direct key agreement on X25519 (RFC 8037) and `A256GCM`
/// content encryption (RFC 7518 §4.6, §5.3): what any JOSE library opens with the recipient's
/// private key.
public enum JWE {
    /// Encrypts `plaintext` to an X25519 public key (32 raw bytes).
    /// - Throws: `JOSEError.invalidKey` for a key that is not a usable X25519 public key.
    public static func sealECDHES(_ plaintext: [UInt8], to recipientPublicKey: [UInt8]) throws -> String {
        guard recipientPublicKey.count == 32 else { throw JOSEError(.invalidKey, "an X25519 key is 32 bytes") }
        let ephemeral = try X25519.generateKeyPair()
        let shared: [UInt8]
        do {
            shared = try X25519.sharedSecret(privateKey: ephemeral.privateKey, publicKey: recipientPublicKey)
        } catch {
            throw JOSEError(.invalidKey, "not a usable X25519 public key")
        }
        let header =
            #"{"alg":"ECDH-ES","enc":"A256GCM","epk":{"crv":"X25519","kty":"OKP","x":""#
            + Base64URL.encode(ephemeral.publicKey) + #""}}"#
        let protected = Base64URL.encode(Array(header.utf8))
        let key = concatKDF(sharedSecret: shared, algorithm: "A256GCM", keyBits: 256)
        // The AAD is the ASCII of the encoded protected header (RFC 7516 §5.1 step 14).
        let sealed = try AESGCM.seal(plaintext, key: key, aad: Array(protected.utf8))
        // ECDH-ES direct agreement: the encrypted key is empty.
        return [
            protected, "", Base64URL.encode(sealed.iv), Base64URL.encode(sealed.ciphertext),
            Base64URL.encode(sealed.tag),
        ].joined(separator: ".")
    }

    /// The Concat KDF of NIST SP 800-56A as RFC 7518 §4.6.2 profiles it, with empty `apu`/`apv`.
    static func concatKDF(sharedSecret: [UInt8], algorithm: String, keyBits: UInt32) -> [UInt8] {
        func lengthPrefixed(_ bytes: [UInt8]) -> [UInt8] { bigEndian(UInt32(bytes.count)) + bytes }
        func bigEndian(_ value: UInt32) -> [UInt8] {
            [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
        }
        let otherInfo =
            lengthPrefixed(Array(algorithm.utf8)) + lengthPrefixed([]) + lengthPrefixed([]) + bigEndian(keyBits)
        var output: [UInt8] = []
        var counter: UInt32 = 1
        while output.count * 8 < Int(keyBits) {
            output += SHA256.hash(bigEndian(counter) + sharedSecret + otherInfo)
            counter += 1
        }
        return Array(output.prefix(Int(keyBits) / 8))
    }
}
