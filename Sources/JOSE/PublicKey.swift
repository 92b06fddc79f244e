import AuthCrypto
import COpenSSL
import Synchronization

/// A verification key: RSA (at least 2048 bits), EC P-256/384/521 or Ed25519.
///
/// Owns an `EVP_PKEY`. `@unchecked Sendable`: the key is immutable after construction, and OpenSSL
/// allows concurrent verification with one key when each operation has its own context (each
/// verification copies one of `templates`, which are never used themselves).
public final class PublicKey: @unchecked Sendable {
    /// The smallest RSA modulus accepted, in bits.
    public static let minimumRSABits: Int32 = 2048

    let pointer: OpaquePointer
    public let family: JWSAlgorithm.KeyFamily
    /// Key size in bits (modulus for RSA, field for EC, 253 for Ed25519).
    public let bits: Int32
    /// Per RSA or ECDSA algorithm used with this key, a context set up to verify its digests,
    /// made at the first verification: each verification works on a copy. A context made for
    /// each one looked the key's type up by name among the providers' key managers and fetched
    /// the signature method, which cost more than copying a ready one.
    private let templates = Mutex<[JWSAlgorithm: VerifyTemplate]>([:])

    private init(taking pointer: OpaquePointer) throws {
        self.pointer = pointer
        bits = EVP_PKEY_get_bits(pointer)
        switch EVP_PKEY_get_base_id(pointer) {
        case EVP_PKEY_RSA:
            family = .rsa
        case EVP_PKEY_ED25519:
            family = .ed25519
        case EVP_PKEY_EC:
            switch bits {
            case 256: family = .ec(.p256)
            case 384: family = .ec(.p384)
            case 521: family = .ec(.p521)
            default:
                EVP_PKEY_free(pointer)
                throw JOSEError(.invalidKey, "unsupported EC curve")
            }
        default:
            EVP_PKEY_free(pointer)
            throw JOSEError(.invalidKey, "unsupported key type")
        }
    }

    deinit {
        EVP_PKEY_free(pointer)
    }

    // MARK: - Construction

    /// An RSA public key from the big-endian modulus and exponent.
    /// - Throws: `JOSEError.invalidKey` for a modulus under 2048 bits or a bad exponent.
    public static func rsa(modulus: [UInt8], exponent: [UInt8]) throws -> PublicKey {
        let modulus = Array(modulus.drop { $0 == 0 })
        let exponent = Array(exponent.drop { $0 == 0 })
        guard !modulus.isEmpty, !exponent.isEmpty, exponent.count <= 8, (exponent.last ?? 0) & 1 == 1 else {
            throw JOSEError(.invalidKey, "bad RSA modulus or exponent")
        }
        guard modulus.count * 8 >= Int(minimumRSABits) - 7 else {
            throw JOSEError(.invalidKey, "RSA keys must have at least \(minimumRSABits) bits")
        }
        let key = try fromData(type: "RSA") { builder in
            guard let n = BN_bin2bn(modulus, Int32(modulus.count), nil) else { return nil }
            defer { BN_free(n) }
            guard let e = BN_bin2bn(exponent, Int32(exponent.count), nil) else { return nil }
            defer { BN_free(e) }
            guard OSSL_PARAM_BLD_push_BN(builder, ParameterName.rsaN.cString, n) == 1,
                OSSL_PARAM_BLD_push_BN(builder, ParameterName.rsaE.cString, e) == 1
            else { return nil }
            return OSSL_PARAM_BLD_to_param(builder)
        }
        try key.checkStrength()
        return key
    }

    /// An EC public key from its affine coordinates; the point must lie on the curve.
    public static func ec(curve: JWSAlgorithm.Curve, x: [UInt8], y: [UInt8]) throws -> PublicKey {
        let size = curve.coordinateSize
        guard x.count == size, y.count == size else {
            throw JOSEError(.invalidKey, "EC coordinates must be \(size) bytes for \(curve.rawValue)")
        }
        let point = [0x04] + x + y
        let key = try fromData(type: "EC") { builder in
            point.withUnsafeBytes { bytes in
                guard
                    OSSL_PARAM_BLD_push_utf8_string(
                        builder, ParameterName.groupName.cString, curve.openSSLGroupName.cString, 0) == 1,
                    OSSL_PARAM_BLD_push_octet_string(
                        builder, ParameterName.publicKey.cString, bytes.baseAddress, bytes.count) == 1
                else { return nil }
                return OSSL_PARAM_BLD_to_param(builder)
            }
        }
        try key.checkPublic()
        return key
    }

    /// An Ed25519 public key from its 32 bytes.
    public static func ed25519(_ raw: [UInt8]) throws -> PublicKey {
        guard raw.count == 32 else { throw JOSEError(.invalidKey, "Ed25519 keys are 32 bytes") }
        guard let pointer = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, raw, raw.count) else {
            ERR_clear_error()
            throw JOSEError(.invalidKey, "bad Ed25519 key")
        }
        let key = try PublicKey(taking: pointer)
        try key.checkStrength()
        return key
    }

    /// The public key of a DER X.509 certificate (a WebAuthn attestation's `x5c`), under the same
    /// key policy. The whole input must be the certificate.
    public static func certificate(der: [UInt8]) throws -> PublicKey {
        let pointer: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            guard let start = buffer.baseAddress else { return nil }
            var cursor: UnsafePointer<UInt8>? = start
            guard let certificate = d2i_X509(nil, &cursor, buffer.count) else { return nil }
            defer { X509_free(certificate) }
            guard cursor == start + buffer.count else { return nil }
            return X509_get_pubkey(certificate)
        }
        ERR_clear_error()
        guard let pointer else { throw JOSEError(.invalidKey, "not a DER certificate") }
        let key = try PublicKey(taking: pointer)
        try key.checkStrength()
        return key
    }

    /// The public key of a PEM X.509 certificate (the `{kid: certificate}` form of Firebase and
    /// Google's v1 endpoint) or a PEM SubjectPublicKeyInfo.
    public static func pem(_ text: String) throws -> PublicKey {
        let bytes = Array(text.utf8)
        let pointer: OpaquePointer? = bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            if text.contains("BEGIN CERTIFICATE") {
                guard let certificate = PEM_read_bio_X509(bio, nil, nil, nil) else { return nil }
                defer { X509_free(certificate) }
                return X509_get_pubkey(certificate)
            }
            return PEM_read_bio_PUBKEY(bio, nil, nil, nil)
        }
        ERR_clear_error()
        guard let pointer else { throw JOSEError(.invalidKey, "not a PEM certificate or public key") }
        let key = try PublicKey(taking: pointer)
        try key.checkStrength()
        return key
    }

    /// Refuses keys under which anyone can forge, whatever the signature code does:
    /// - RSA under 2048 bits, or with a public exponent below 3 (with e = 1 a signature is the
    ///   padded message itself). Odd exponents of 3 and up are accepted: OpenSSL checks PKCS#1 v1.5
    ///   signatures by encoding the expected block and comparing all of it, so the low-exponent
    ///   forgeries that need a lenient parser do not apply, and PSS does not depend on the exponent.
    ///   Apple's and Google's keys use 65537.
    /// - Ed25519 public keys of small order (RFC 8032 verification without the cofactor accepts
    ///   signatures under them that nobody made: with the neutral point, `R` = neutral, `S` = 0
    ///   verifies for every message), in any encoding of their sign bit.
    func checkStrength() throws {
        switch family {
        case .rsa:
            guard bits >= Self.minimumRSABits else {
                throw JOSEError(.invalidKey, "RSA keys must have at least \(Self.minimumRSABits) bits")
            }
            var exponent: OpaquePointer?
            guard EVP_PKEY_get_bn_param(pointer, ParameterName.rsaE.cString, &exponent) == 1, let exponent else {
                ERR_clear_error()
                throw JOSEError(.invalidKey, "RSA key without a readable exponent")
            }
            defer { BN_free(exponent) }
            guard BN_is_odd(exponent) == 1, BN_num_bits(exponent) >= 2, BN_num_bits(exponent) <= 64 else {
                throw JOSEError(.invalidKey, "RSA exponent must be odd and at least 3")
            }
        case .ed25519:
            var raw = [UInt8](repeating: 0, count: 32)
            var length = 32
            guard EVP_PKEY_get_raw_public_key(pointer, &raw, &length) == 1, length == 32 else {
                ERR_clear_error()
                throw JOSEError(.invalidKey, "bad Ed25519 key")
            }
            let unsigned = Array(raw[0..<31]) + [raw[31] & 0x7f]
            guard !Self.smallOrderEd25519.contains(unsigned) else {
                throw JOSEError(.invalidKey, "Ed25519 key of small order")
            }
        default:
            break
        }
    }

    /// Encodings (sign bit cleared) of the Edwards25519 points of small order, and the
    /// non-canonical encodings of two of them: as libsodium blocklists them.
    public static let smallOrderEd25519: Set<[UInt8]> = [
        [UInt8](repeating: 0, count: 32),
        [1] + [UInt8](repeating: 0, count: 31),
        [
            0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98, 0xf0,
            0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05,
        ],
        [
            0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67, 0x0f,
            0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a,
        ],
        [0xec] + [UInt8](repeating: 0xff, count: 30) + [0x7f],
        [0xed] + [UInt8](repeating: 0xff, count: 30) + [0x7f],
        [0xee] + [UInt8](repeating: 0xff, count: 30) + [0x7f],
    ]

    /// Builds a key from OpenSSL parameters. `parameters` pushes onto the builder and calls
    /// `OSSL_PARAM_BLD_to_param` itself: the builder keeps pointers to pushed buffers until then, so
    /// they must still be alive at that call.
    private static func fromData(type: StaticString, _ parameters: (OpaquePointer) -> UnsafeMutablePointer<OSSL_PARAM>?)
        throws -> PublicKey
    {
        guard let builder = OSSL_PARAM_BLD_new() else { throw JOSEError(.invalidKey, "out of memory") }
        defer { OSSL_PARAM_BLD_free(builder) }
        guard let parameters = parameters(builder) else {
            ERR_clear_error()
            throw JOSEError(.invalidKey, "bad key parameters")
        }
        defer { OSSL_PARAM_free(parameters) }
        // OpenSSL 3.0 keeps the key type pointer in the context: a StaticString outlives it.
        guard let context = EVP_PKEY_CTX_new_from_name(nil, type.cString, nil) else {
            throw JOSEError(.invalidKey, "unsupported key type")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var pointer: OpaquePointer?
        guard EVP_PKEY_fromdata_init(context) == 1,
            EVP_PKEY_fromdata(context, &pointer, copenssl_shim_EVP_PKEY_PUBLIC_KEY(), parameters) == 1,
            let pointer
        else {
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(ERR_peek_last_error(), &buffer, 256)
            let detail = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            ERR_clear_error()
            throw JOSEError(.invalidKey, "OpenSSL refused the key: \(detail)")
        }
        return try PublicKey(taking: pointer)
    }

    private func checkPublic() throws {
        guard let context = EVP_PKEY_CTX_new_from_pkey(nil, pointer, nil) else {
            throw JOSEError(.invalidKey, "out of memory")
        }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_public_check(context) == 1 else {
            ERR_clear_error()
            throw JOSEError(.invalidKey, "the point is not on the curve")
        }
    }

    // MARK: - Verification

    /// True when `algorithm` may be used with this key (family, curve, RSA size).
    public func fits(_ algorithm: JWSAlgorithm) -> Bool {
        guard algorithm.keyFamily == family else { return false }
        return family != .rsa || bits >= Self.minimumRSABits
    }

    /// Verifies a JWS signature over `message` (raw bytes, below the JWS layer).
    ///
    /// ECDSA signatures are the fixed-size `r || s` of RFC 7518 §3.4 (a DER signature is refused);
    /// PSS uses MGF1 with the same hash and a salt as long as the hash (RFC 7518 §3.5).
    /// - Throws: `JOSEError.keyMismatch` when the key does not fit the algorithm.
    /// - Returns: whether the signature is valid.
    public func verify(signature: [UInt8], message: [UInt8], algorithm: JWSAlgorithm) throws -> Bool {
        guard fits(algorithm) else {
            throw JOSEError(.keyMismatch, "\(algorithm.rawValue) cannot be used with this key")
        }
        var signature = signature
        if case .ec(let curve) = family {
            guard let der = Self.rawToDER(signature, size: curve.coordinateSize) else { return false }
            signature = der
        }
        if family == .ed25519 {
            return verifyEdDSA(signature: signature, message: message)
        }
        // RSA and ECDSA: hash here, then verify the digest. This skips the per-call digest
        // context EVP_DigestVerify would set up, which costs more than the hash itself.
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var digestLength: UInt32 = 0
        guard EVP_Digest(message, message.count, &digest, &digestLength, algorithm.digest, nil) == 1,
            let template = template(for: algorithm), let context = EVP_PKEY_CTX_dup(template.pointer)
        else {
            ERR_clear_error()
            return false
        }
        defer { EVP_PKEY_CTX_free(context) }
        let result = EVP_PKEY_verify(context, signature, signature.count, digest, Int(digestLength))
        if result != 1 { ERR_clear_error() }
        return result == 1
    }

    /// The ready context for `algorithm` (RSA or ECDSA), made on first use; nil when OpenSSL
    /// cannot set one up.
    private func template(for algorithm: JWSAlgorithm) -> VerifyTemplate? {
        if let ready = templates.withLock({ $0[algorithm] }) { return ready }
        guard let context = EVP_PKEY_CTX_new(pointer, nil) else { return nil }
        let template = VerifyTemplate(context)
        guard EVP_PKEY_verify_init(context) == 1, EVP_PKEY_CTX_set_signature_md(context, algorithm.digest) == 1
        else { return nil }
        if algorithm.isPSS {
            guard EVP_PKEY_CTX_set_rsa_padding(context, RSA_PKCS1_PSS_PADDING) == 1,
                EVP_PKEY_CTX_set_rsa_pss_saltlen(context, algorithm.digestLength) == 1,
                EVP_PKEY_CTX_set_rsa_mgf1_md(context, algorithm.digest) == 1
            else { return nil }
        }
        // Two threads may both make one; the first kept is used by both.
        return templates.withLock { kept in
            if let first = kept[algorithm] { return first }
            kept[algorithm] = template
            return template
        }
    }

    private func verifyEdDSA(signature: [UInt8], message: [UInt8]) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, nil, nil, pointer) == 1 else {
            ERR_clear_error()
            return false
        }
        let result = EVP_DigestVerify(context, signature, signature.count, message, message.count)
        if result != 1 { ERR_clear_error() }
        return result == 1
    }

    /// `r || s` to DER, or nil when the length is wrong.
    static func rawToDER(_ raw: [UInt8], size: Int) -> [UInt8]? {
        guard raw.count == 2 * size, let signature = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(signature) }
        guard let r = BN_bin2bn(raw, Int32(size), nil) else { return nil }
        guard
            let s = raw.withUnsafeBufferPointer({ buffer in
                buffer.baseAddress.flatMap { BN_bin2bn($0 + size, Int32(size), nil) }
            })
        else {
            BN_free(r)
            return nil
        }
        // ECDSA_SIG_set0 takes ownership of r and s.
        guard ECDSA_SIG_set0(signature, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        let length = i2d_ECDSA_SIG(signature, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor = buffer.baseAddress
            return i2d_ECDSA_SIG(signature, &cursor)
        }
        return written == length ? der : nil
    }
}

/// OpenSSL parameter names as C strings that live forever.
///
/// `OSSL_PARAM_BLD` and `EVP_PKEY_CTX` keep the pointers they are given (not copies) until later
/// calls; a Swift `String` passed to C is only valid during the call, so these are `StaticString`s.
enum ParameterName {
    static let rsaN: StaticString = "n"
    static let rsaE: StaticString = "e"
    static let groupName: StaticString = "group"
    static let publicKey: StaticString = "pub"
}

extension StaticString {
    /// The string's bytes as a NUL-terminated C string, valid for the life of the program.
    var cString: UnsafePointer<CChar> {
        UnsafeRawPointer(utf8Start).assumingMemoryBound(to: CChar.self)
    }
}

/// A verification context that is only ever copied (`EVP_PKEY_CTX_dup`), never used, so threads
/// may copy it at once.
private final class VerifyTemplate: @unchecked Sendable {
    let pointer: OpaquePointer

    init(_ pointer: OpaquePointer) { self.pointer = pointer }

    deinit { EVP_PKEY_CTX_free(pointer) }
}
