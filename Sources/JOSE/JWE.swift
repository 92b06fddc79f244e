import AuthCrypto
import StrictJSON

/// Compact JWE (RFC 7516) with `ECDH-ES` direct key agreement on X25519 (RFC 8037) and `A256GCM`
/// content encryption (RFC 7518 §4.6, §5.3): what any JOSE library opens with the recipient's
/// private key.
public enum JWE {
    /// Encrypts `plaintext` to an X25519 public key (32 raw bytes).
    /// - Throws: `JOSEError.invalidKey` for a key that is not a usable X25519 public key.
    public static func sealECDHES(_ plaintext: [UInt8], to recipientPublicKey: [UInt8], keyID: String? = nil) throws
        -> String
    {
        guard recipientPublicKey.count == 32 else { throw JOSEError(.invalidKey, "an X25519 key is 32 bytes") }
        let ephemeral = try X25519.generateKeyPair()
        let shared: [UInt8]
        do {
            shared = try X25519.sharedSecret(privateKey: ephemeral.privateKey, publicKey: recipientPublicKey)
        } catch {
            throw JOSEError(.invalidKey, "not a usable X25519 public key")
        }
        // A key id is base64url or a simple name; anything needing JSON escapes is left out.
        let kid = keyID.flatMap { id in
            id.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }
                ? #","kid":""# + id + "\"" : nil
        }
        let header =
            #"{"alg":"ECDH-ES","enc":"A256GCM","epk":{"crv":"X25519","kty":"OKP","x":""#
            + Base64URL.encode(ephemeral.publicKey) + #""}"# + (kid ?? "") + "}"
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

    /// A compact JWE opened: the plaintext, and the `kid` of the key it was sealed to, if named.
    public struct Opened: Sendable {
        public var plaintext: [UInt8]
        public var keyID: String?
    }

    /// The `kid` a compact JWE names in its protected header, read without opening it (to pick
    /// the private key). Nil when there is none or the header cannot be read.
    public static func keyID(of compact: String) -> String? {
        guard let dot = compact.utf8.firstIndex(of: UInt8(ascii: ".")),
            let bytes = Base64URL.decode(compact.utf8[..<dot]), let members = try? JSONReader.object(bytes),
            case .string(let kid)? = members["kid"]
        else { return nil }
        return kid
    }

    /// Opens a compact JWE sealed with `ECDH-ES` on X25519 and `A256GCM` to our private key, as
    /// `sealECDHES` and any JOSE library (jwcrypto, jose, Nimbus) make it. Nothing else is
    /// accepted: no other algorithm, no compression, no critical extensions, a non-empty
    /// encrypted key refused, an ephemeral key of small order refused.
    /// - Throws: `JOSEError.malformed` for what is not such a JWE, `JOSEError.badSignature` when
    ///   it does not open (another key, or altered).
    public static func openECDHES(_ compact: String, privateKey: [UInt8], maximumLength: Int = 64 * 1024) throws
        -> Opened
    {
        let utf8 = Array(compact.utf8)
        guard utf8.count <= maximumLength else { throw JOSEError(.malformed, "longer than \(maximumLength) bytes") }
        let parts = utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 5 else { throw JOSEError(.malformed, "a compact JWE has five segments") }
        guard parts[1].isEmpty else { throw JOSEError(.malformed, "ECDH-ES has an empty encrypted key") }
        guard let headerBytes = Base64URL.decode(parts[0]), let iv = Base64URL.decode(parts[2]),
            let ciphertext = Base64URL.decode(parts[3]), let tag = Base64URL.decode(parts[4])
        else { throw JOSEError(.malformed, "segments must be unpadded base64url") }
        guard iv.count == 12, tag.count == 16 else {
            throw JOSEError(.malformed, "A256GCM has a 96-bit IV and a 128-bit tag")
        }
        let header: [String: JSONValue]
        do {
            header = try JSONReader.object(headerBytes)
        } catch {
            throw JOSEError(.malformed, "the header is not a JSON object")
        }
        guard case .string("ECDH-ES")? = header["alg"], case .string("A256GCM")? = header["enc"] else {
            throw JOSEError(.algorithmNotAllowed, "only alg ECDH-ES with enc A256GCM")
        }
        guard header["crit"] == nil, header["zip"] == nil else {
            throw JOSEError(.malformed, "no compression and no critical extensions")
        }
        guard case .object(let epk)? = header["epk"], case .string("OKP")? = epk["kty"],
            case .string("X25519")? = epk["crv"], case .string(let x)? = epk["x"],
            let ephemeral = Base64URL.decode(Array(x.utf8)), X25519.isUsablePublicKey(ephemeral)
        else { throw JOSEError(.malformed, "epk must be a usable X25519 public key") }
        func optionalBytes(_ name: String) throws -> [UInt8] {
            switch header[name] {
            case nil: return []
            case .string(let text)?:
                guard let bytes = Base64URL.decode(Array(text.utf8)) else {
                    throw JOSEError(.malformed, "\(name) must be base64url")
                }
                return bytes
            default: throw JOSEError(.malformed, "\(name) must be a string")
            }
        }
        var keyID: String?
        switch header["kid"] {
        case nil: keyID = nil
        case .string(let value)?: keyID = value
        default: throw JOSEError(.malformed, "kid must be a string")
        }
        let shared: [UInt8]
        do {
            shared = try X25519.sharedSecret(privateKey: privateKey, publicKey: ephemeral)
        } catch {
            throw JOSEError(.malformed, "epk must be a usable X25519 public key")
        }
        let key = concatKDF(
            sharedSecret: shared, algorithm: "A256GCM", keyBits: 256, partyU: try optionalBytes("apu"),
            partyV: try optionalBytes("apv"))
        guard
            let plaintext = AESGCM.open(
                AESGCM.Sealed(iv: iv, ciphertext: ciphertext, tag: tag), key: key, aad: Array(parts[0]))
        else { throw JOSEError(.badSignature, "the JWE does not open with this key") }
        return Opened(plaintext: plaintext, keyID: keyID)
    }

    /// The Concat KDF of NIST SP 800-56A as RFC 7518 §4.6.2 profiles it.
    static func concatKDF(
        sharedSecret: [UInt8], algorithm: String, keyBits: UInt32, partyU: [UInt8] = [], partyV: [UInt8] = []
    ) -> [UInt8] {
        func lengthPrefixed(_ bytes: [UInt8]) -> [UInt8] { bigEndian(UInt32(bytes.count)) + bytes }
        func bigEndian(_ value: UInt32) -> [UInt8] {
            [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
        }
        let otherInfo =
            lengthPrefixed(Array(algorithm.utf8)) + lengthPrefixed(partyU) + lengthPrefixed(partyV)
            + bigEndian(keyBits)
        var output: [UInt8] = []
        var counter: UInt32 = 1
        while output.count * 8 < Int(keyBits) {
            output += SHA256.hash(bigEndian(counter) + sharedSecret + otherInfo)
            counter += 1
        }
        return Array(output.prefix(Int(keyBits) / 8))
    }
}
