import AuthCrypto
import COpenSSL
import Foundation
import JOSE

/// Keys of every type the verifier accepts, with their public JWK and a JWS signer: fixtures for
/// tests and benchmarks, never linked into the worker.
///
/// `@unchecked Sendable`: the key is immutable after generation.
public final class TestSigner: @unchecked Sendable {
    public enum Kind: Sendable, CustomStringConvertible {
        case rsa(Int32)
        case ec(JWSAlgorithm.Curve)
        case ed25519

        public var description: String {
            switch self {
            case .rsa(let bits): "RSA-\(bits)"
            case .ec(let curve): curve.rawValue
            case .ed25519: "Ed25519"
            }
        }
    }

    public let kind: Kind
    public let kid: String
    private let key: OpaquePointer

    /// Generates a key; crashes only if OpenSSL cannot (fixtures are not for untrusted input).
    public init(_ kind: Kind, kid: String = UUID().uuidString) {
        self.kind = kind
        self.kid = kid
        let context: OpaquePointer?
        switch kind {
        case .rsa: context = EVP_PKEY_CTX_new_id(EVP_PKEY_RSA, nil)
        case .ec: context = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nil)
        case .ed25519: context = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nil)
        }
        precondition(EVP_PKEY_keygen_init(context) == 1)
        switch kind {
        case .rsa(let bits): precondition(EVP_PKEY_CTX_set_rsa_keygen_bits(context, bits) == 1)
        case .ec(let curve):
            let nid =
                switch curve {
                case .p256: NID_X9_62_prime256v1
                case .p384: NID_secp384r1
                case .p521: NID_secp521r1
                }
            precondition(EVP_PKEY_CTX_set_ec_paramgen_curve_nid(context, nid) == 1)
        case .ed25519: break
        }
        var key: OpaquePointer?
        precondition(EVP_PKEY_keygen(context, &key) == 1)
        EVP_PKEY_CTX_free(context)
        guard let key else { preconditionFailure("OpenSSL could not generate a \(kind) key") }
        self.key = key
    }

    deinit { EVP_PKEY_free(key) }

    /// The public JWK as a dictionary (`kid` and, if given, `alg` included).
    public func jwk(alg: String? = nil) -> [String: String] {
        var result: [String: String] = ["kid": kid]
        if let alg { result["alg"] = alg }
        switch kind {
        case .rsa:
            result["kty"] = "RSA"
            result["n"] = Base64URL.encode(bignum(OSSL_PKEY_PARAM_RSA_N))
            result["e"] = Base64URL.encode(bignum(OSSL_PKEY_PARAM_RSA_E))
        case .ec(let curve):
            var point = [UInt8](repeating: 0, count: 1 + 2 * curve.coordinateSize)
            var length = 0
            precondition(
                EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_PUB_KEY, &point, point.count, &length) == 1)
            result["kty"] = "EC"
            result["crv"] = curve.rawValue
            result["x"] = Base64URL.encode(point[1...curve.coordinateSize])
            result["y"] = Base64URL.encode(point[(1 + curve.coordinateSize)...])
        case .ed25519:
            var raw = [UInt8](repeating: 0, count: 32)
            var length = 32
            precondition(EVP_PKEY_get_raw_public_key(key, &raw, &length) == 1)
            result["kty"] = "OKP"
            result["crv"] = "Ed25519"
            result["x"] = Base64URL.encode(raw)
        }
        return result
    }

    /// The public key as a PEM SubjectPublicKeyInfo.
    public var publicPEM: String {
        let bio = BIO_new(BIO_s_mem())
        defer { BIO_free(bio) }
        precondition(PEM_write_bio_PUBKEY(bio, key) == 1)
        var data: UnsafeMutablePointer<CChar>?
        let length = copenssl_shim_BIO_get_mem_data(bio, &data)
        return String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
    }

    private func bignum(_ name: String) -> [UInt8] {
        var number: OpaquePointer?
        precondition(EVP_PKEY_get_bn_param(key, name, &number) == 1)
        defer { BN_free(number) }
        var out = [UInt8](repeating: 0, count: Int((BN_num_bits(number) + 7) / 8))
        BN_bn2bin(number, &out)
        return out
    }

    /// A JWS signature over `message` with `algorithm` (raw `r || s` for ECDSA).
    public func sign(_ message: [UInt8], _ algorithm: JWSAlgorithm) -> [UInt8] {
        let context = EVP_MD_CTX_new()
        defer { EVP_MD_CTX_free(context) }
        var keyContext: OpaquePointer?
        let digest: OpaquePointer? =
            switch algorithm {
            case .rs256, .ps256, .es256: EVP_sha256()
            case .rs384, .ps384, .es384: EVP_sha384()
            case .rs512, .ps512, .es512: EVP_sha512()
            case .edDSA: nil
            }
        precondition(EVP_DigestSignInit(context, &keyContext, digest, nil, key) == 1)
        if [.ps256, .ps384, .ps512].contains(algorithm) {
            EVP_PKEY_CTX_set_rsa_padding(keyContext, RSA_PKCS1_PSS_PADDING)
            EVP_PKEY_CTX_set_rsa_pss_saltlen(keyContext, -1)  // the digest length
        }
        var length = 0
        precondition(EVP_DigestSign(context, nil, &length, message, message.count) == 1)
        var signature = [UInt8](repeating: 0, count: length)
        precondition(EVP_DigestSign(context, &signature, &length, message, message.count) == 1)
        signature.removeLast(signature.count - length)
        if case .ec(let curve) = kind {
            var cursor: UnsafePointer<UInt8>? = nil
            return signature.withUnsafeBufferPointer { buffer in
                cursor = buffer.baseAddress
                let parsed = d2i_ECDSA_SIG(nil, &cursor, buffer.count)
                defer { ECDSA_SIG_free(parsed) }
                var raw = [UInt8](repeating: 0, count: 2 * curve.coordinateSize)
                BN_bn2binpad(ECDSA_SIG_get0_r(parsed), &raw, Int32(curve.coordinateSize))
                raw.withUnsafeMutableBufferPointer { buffer in
                    if let base = buffer.baseAddress {
                        BN_bn2binpad(ECDSA_SIG_get0_s(parsed), base + curve.coordinateSize, Int32(curve.coordinateSize))
                    }
                }
                return raw
            }
        }
        return signature
    }

    /// A compact JWS of `claims` with `header` (alg and kid filled in unless given).
    public func token(
        _ claims: [String: Any], algorithm: JWSAlgorithm, header extra: [String: Any] = [:], includeKid: Bool = true
    ) -> String {
        var header: [String: Any] = ["alg": algorithm.rawValue, "typ": "JWT"]
        if includeKid { header["kid"] = kid }
        for (key, value) in extra { header[key] = value }
        let headerPart = TokenParts.encode(header)
        let payloadPart = TokenParts.encode(claims)
        let input = headerPart + "." + payloadPart
        return input + "." + Base64URL.encode(sign(Array(input.utf8), algorithm))
    }

    /// A key set document holding `signers`' public keys.
    public static func keySet(_ signers: [TestSigner]) -> Data {
        TokenParts.json(["keys": signers.map { $0.jwk() }])
    }
}

/// Raw material for hand-built tokens.
public enum TokenParts {
    public static func encode(_ object: [String: Any]) -> String {
        Base64URL.encode(json(object))
    }

    /// JSON bytes of a fixture object (sorted keys); `{}` if it is not JSON-serialisable.
    public static func json(_ object: Any) -> Data {
        (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
    }
}
