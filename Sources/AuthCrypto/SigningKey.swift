import COpenSSL
import Foundation

/// A private key that signs JWS: Ed25519 (`EdDSA`) or ECDSA P-256 (`ES256`).
///
/// Owns an `EVP_PKEY`. `@unchecked Sendable`: the key is never mutated after loading, and OpenSSL
/// allows concurrent signing with one key as long as each operation has its own `EVP_MD_CTX`.
public final class SigningKey: @unchecked Sendable {
    /// Algorithms this key type signs with.
    public enum Algorithm: String, Sendable {
        case edDSA = "EdDSA"
        case es256 = "ES256"
    }

    /// Errors loading, generating or using a key. Never includes key material.
    public struct Failure: Error, CustomStringConvertible, Equatable {
        public var description: String

        public init(description: String) { self.description = description }
    }

    private let key: OpaquePointer
    /// A signing context initialised once with `key`. Each signature copies it: initialising a fresh
    /// context makes OpenSSL 3 fetch the algorithm and export the key again, which cost two thirds of
    /// an Ed25519 signature. `nil` when the copy is not supported; signing then initialises per call.
    private let template: OpaquePointer?
    public let algorithm: Algorithm
    /// The RFC 7638 JWK thumbprint (SHA-256, base64url): stable, derived from the public key.
    public private(set) var keyID: String = ""
    /// The public key as a JWK (with `kid`, `alg` and `use`).
    public private(set) var publicJWK: [String: String] = [:]

    private init(key: OpaquePointer) throws {
        self.key = key
        switch EVP_PKEY_get_base_id(key) {
        case EVP_PKEY_ED25519:
            algorithm = .edDSA
        case EVP_PKEY_EC where EVP_PKEY_get_bits(key) == 256:
            algorithm = .es256
        default:
            EVP_PKEY_free(key)
            throw Failure(description: "unsupported key type: use Ed25519 or EC P-256")
        }
        template = Self.initialisedContext(key: key, algorithm: algorithm)
        var jwk = try publicComponents()
        let canonical = jwk.sorted { $0.key < $1.key }.map { "\"\($0.key)\":\"\($0.value)\"" }.joined(separator: ",")
        keyID = Base64URL.encode(SHA256.hash("{\(canonical)}"))
        jwk["kid"] = keyID
        jwk["alg"] = algorithm.rawValue
        jwk["use"] = "sig"
        publicJWK = jwk
    }

    deinit {
        if let template { EVP_MD_CTX_free(template) }
        EVP_PKEY_free(key)
    }

    private static func initialisedContext(key: OpaquePointer, algorithm: Algorithm) -> OpaquePointer? {
        guard let context = EVP_MD_CTX_new() else { return nil }
        let digest = algorithm == .es256 ? FetchedAlgorithms.shared.sha256 : nil
        guard EVP_DigestSignInit(context, nil, digest, nil, key) == 1 else {
            EVP_MD_CTX_free(context)
            return nil
        }
        return context
    }

    /// Loads a PEM private key (PKCS#8 or traditional).
    /// - Throws: `Failure` when the text is not a supported unencrypted private key.
    public convenience init(pem: String) throws {
        let bytes = Array(pem.utf8)
        let loaded: OpaquePointer? = bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        ERR_clear_error()
        guard let loaded else { throw Failure(description: "not a PEM private key") }
        try self.init(key: loaded)
    }

    /// Generates a new key.
    public static func generate(_ algorithm: Algorithm) throws -> SigningKey {
        let context: OpaquePointer?
        switch algorithm {
        case .edDSA: context = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nil)
        case .es256: context = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nil)
        }
        guard let context else { throw Failure(description: "EVP_PKEY_CTX_new_id failed") }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_keygen_init(context) == 1 else { throw Failure(description: "keygen init failed") }
        if algorithm == .es256, EVP_PKEY_CTX_set_ec_paramgen_curve_nid(context, NID_X9_62_prime256v1) != 1 {
            throw Failure(description: "cannot select P-256")
        }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen(context, &key) == 1, let key else { throw Failure(description: "keygen failed") }
        return try SigningKey(key: key)
    }

    /// The public half as a PEM SubjectPublicKeyInfo.
    public func publicKeyPEM() throws -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { throw Failure(description: "BIO_new failed") }
        defer { BIO_free(bio) }
        guard PEM_write_bio_PUBKEY(bio, key) == 1 else { throw Failure(description: "PEM encoding failed") }
        var data: UnsafeMutablePointer<CChar>?
        let length = copenssl_shim_BIO_get_mem_data(bio, &data)
        guard let data, length > 0 else { throw Failure(description: "PEM encoding is empty") }
        return String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
    }

    /// The private key as PKCS#8 PEM, for writing to a file with restrictive permissions.
    public func privateKeyPEM() throws -> String {
        guard let pem = PrivateKeyPEM.encode(key) else { throw Failure(description: "PEM encoding failed") }
        return pem
    }

    /// Signs `message` as JWS requires: raw Ed25519, or ECDSA P-256 over SHA-256 as raw `r || s`.
    public func sign(_ message: [UInt8]) throws -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw Failure(description: "EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(context) }
        if let template, EVP_MD_CTX_copy_ex(context, template) == 1 {
            // Ready to sign.
        } else {
            EVP_MD_CTX_reset(context)
            let digest = algorithm == .es256 ? FetchedAlgorithms.shared.sha256 : nil
            guard EVP_DigestSignInit(context, nil, digest, nil, key) == 1 else {
                throw Failure(description: "sign init failed")
            }
        }
        var length = 0
        guard EVP_DigestSign(context, nil, &length, message, message.count) == 1 else {
            throw Failure(description: "sign failed")
        }
        var signature = [UInt8](repeating: 0, count: length)
        guard EVP_DigestSign(context, &signature, &length, message, message.count) == 1 else {
            throw Failure(description: "sign failed")
        }
        signature.removeLast(signature.count - length)
        return algorithm == .es256 ? try Self.derToRaw(signature, size: 32) : signature
    }

    /// ECDSA signatures come from OpenSSL as DER; JWS wants fixed-size big-endian `r || s`.
    static func derToRaw(_ der: [UInt8], size: Int) throws -> [UInt8] {
        try der.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            guard let signature = d2i_ECDSA_SIG(nil, &cursor, buffer.count) else {
                throw Failure(description: "bad DER signature")
            }
            defer { ECDSA_SIG_free(signature) }
            var raw = [UInt8](repeating: 0, count: size * 2)
            guard let r = ECDSA_SIG_get0_r(signature), let s = ECDSA_SIG_get0_s(signature),
                BN_bn2binpad(r, &raw, Int32(size)) == Int32(size),
                raw.withUnsafeMutableBufferPointer({ buffer in
                    buffer.baseAddress.map { BN_bn2binpad(s, $0 + size, Int32(size)) } ?? 0
                }) == Int32(size)
            else { throw Failure(description: "bad signature size") }
            return raw
        }
    }

    private func publicComponents() throws -> [String: String] {
        switch algorithm {
        case .edDSA:
            var length = 32
            var raw = [UInt8](repeating: 0, count: 32)
            guard EVP_PKEY_get_raw_public_key(key, &raw, &length) == 1, length == 32 else {
                throw Failure(description: "cannot read the public key")
            }
            return ["kty": "OKP", "crv": "Ed25519", "x": Base64URL.encode(raw)]
        case .es256:
            var point = [UInt8](repeating: 0, count: 65)
            var length = 0
            guard EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_PUB_KEY, &point, point.count, &length) == 1,
                length == 65, point[0] == 0x04
            else { throw Failure(description: "cannot read the public key") }
            return [
                "kty": "EC", "crv": "P-256", "x": Base64URL.encode(point[1..<33]),
                "y": Base64URL.encode(point[33..<65]),
            ]
        }
    }
}

/// A private key as PKCS#8 PEM (OpenSSL's `PEM_write_bio_PrivateKey`), for the key types that
/// write their keys to files.
enum PrivateKeyPEM {
    /// - Returns: nil when OpenSSL cannot encode it.
    static func encode(_ key: OpaquePointer) -> String? {
        guard let bio = BIO_new(BIO_s_mem()) else { return nil }
        defer { BIO_free(bio) }
        guard PEM_write_bio_PrivateKey(bio, key, nil, nil, 0, nil, nil) == 1 else { return nil }
        var data: UnsafeMutablePointer<CChar>?
        let length = copenssl_shim_BIO_get_mem_data(bio, &data)
        guard let data, length > 0 else { return nil }
        return String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
    }
}
