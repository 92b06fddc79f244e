import COpenSSL

/// AES-256-GCM over OpenSSL.
public enum AESGCM {
    public struct Sealed: Sendable, Equatable {
        public var iv: [UInt8]
        public var ciphertext: [UInt8]
        public var tag: [UInt8]

        public init(iv: [UInt8], ciphertext: [UInt8], tag: [UInt8]) {
            self.iv = iv
            self.ciphertext = ciphertext
            self.tag = tag
        }

        /// One byte string for storage: `iv (12) || tag (16) || ciphertext`.
        public var combined: [UInt8] { iv + tag + ciphertext }

        /// Splits a `combined` byte string; nil when it is too short to be one.
        public init?(combined: [UInt8]) {
            guard combined.count >= 28 else { return nil }
            self.init(iv: Array(combined[0..<12]), ciphertext: Array(combined[28...]), tag: Array(combined[12..<28]))
        }
    }

    public struct Failure: Error, CustomStringConvertible, Equatable {
        public var description: String
    }

    /// Encrypts with a fresh random 96-bit IV and a 128-bit tag.
    /// - Parameter key: 32 bytes.
    public static func seal(_ plaintext: [UInt8], key: [UInt8], aad: [UInt8] = []) throws -> Sealed {
        guard key.count == 32 else { throw Failure(description: "AES-256 keys are 32 bytes") }
        let iv = try SecureRandom.bytes(12)
        guard let context = EVP_CIPHER_CTX_new() else { throw Failure(description: "out of memory") }
        defer { EVP_CIPHER_CTX_free(context) }
        var ciphertext = [UInt8](repeating: 0, count: plaintext.count + 16)
        var length: Int32 = 0
        var total = 0
        guard EVP_EncryptInit_ex(context, FetchedAlgorithms.shared.aes256GCM, nil, nil, nil) == 1,
            EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_IVLEN, 12, nil) == 1,
            EVP_EncryptInit_ex(context, nil, nil, key, iv) == 1
        else { throw Failure(description: "AES-GCM init failed") }
        if !aad.isEmpty {
            guard EVP_EncryptUpdate(context, nil, &length, aad, Int32(aad.count)) == 1 else {
                throw Failure(description: "AES-GCM AAD failed")
            }
        }
        guard EVP_EncryptUpdate(context, &ciphertext, &length, plaintext, Int32(plaintext.count)) == 1 else {
            throw Failure(description: "AES-GCM encryption failed")
        }
        total = Int(length)
        let finalized = ciphertext.withUnsafeMutableBufferPointer { buffer in
            EVP_EncryptFinal_ex(context, buffer.baseAddress.map { $0 + total }, &length)
        }
        guard finalized == 1 else { throw Failure(description: "AES-GCM encryption failed") }
        total += Int(length)
        var tag = [UInt8](repeating: 0, count: 16)
        guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, 16, &tag) == 1 else {
            throw Failure(description: "AES-GCM tag failed")
        }
        return Sealed(iv: iv, ciphertext: Array(ciphertext.prefix(total)), tag: tag)
    }

    /// Decrypts and authenticates; nil when the key, IV, AAD, ciphertext or tag do not fit.
    public static func open(_ sealed: Sealed, key: [UInt8], aad: [UInt8] = []) -> [UInt8]? {
        guard key.count == 32, sealed.iv.count == 12, sealed.tag.count == 16, let context = EVP_CIPHER_CTX_new() else {
            return nil
        }
        defer { EVP_CIPHER_CTX_free(context) }
        var plaintext = [UInt8](repeating: 0, count: sealed.ciphertext.count + 16)
        var length: Int32 = 0
        guard EVP_DecryptInit_ex(context, FetchedAlgorithms.shared.aes256GCM, nil, nil, nil) == 1,
            EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_IVLEN, 12, nil) == 1,
            EVP_DecryptInit_ex(context, nil, nil, key, sealed.iv) == 1
        else { return nil }
        if !aad.isEmpty, EVP_DecryptUpdate(context, nil, &length, aad, Int32(aad.count)) != 1 { return nil }
        guard EVP_DecryptUpdate(context, &plaintext, &length, sealed.ciphertext, Int32(sealed.ciphertext.count)) == 1
        else { return nil }
        let total = Int(length)
        var tag = sealed.tag
        guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, 16, &tag) == 1 else { return nil }
        let finalized = plaintext.withUnsafeMutableBufferPointer { buffer in
            EVP_DecryptFinal_ex(context, buffer.baseAddress.map { $0 + total }, &length)
        }
        guard finalized == 1 else {
            ERR_clear_error()
            return nil
        }
        return Array(plaintext.prefix(total + Int(length)))
    }
}

/// X25519 key agreement (RFC 7748) over OpenSSL.
public enum X25519 {
    public struct Failure: Error, CustomStringConvertible, Equatable {
        public var description: String
    }

    /// The canonical encodings of the points of small order (RFC 7748 §7, as blocklisted by
    /// libsodium): agreeing with one gives a secret an attacker knows.
    private static let smallOrderPoints: [[UInt8]] = [
        [UInt8](repeating: 0, count: 32),
        [1] + [UInt8](repeating: 0, count: 31),
        [
            0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4, 0x6a,
            0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49, 0xb8, 0x00,
        ],
        [
            0x5f, 0x9c, 0x95, 0xbc, 0xa3, 0x50, 0x8c, 0x24, 0xb1, 0xd0, 0xb1, 0x55, 0x9c, 0x83, 0xef, 0x5b,
            0x04, 0x44, 0x5c, 0xc4, 0x58, 0x1c, 0x8e, 0x86, 0xd8, 0x22, 0x4e, 0xdd, 0xd0, 0x9f, 0x11, 0x57,
        ],
        [0xec] + [UInt8](repeating: 0xff, count: 30) + [0x7f],
    ]

    /// True for a public key worth agreeing with: 32 bytes, canonical (below 2^255 − 19, top bit
    /// clear) and not of small order. Other encodings are accepted by X25519 itself, but a peer
    /// that sends one is either broken or probing.
    public static func isUsablePublicKey(_ key: [UInt8]) -> Bool {
        guard key.count == 32, key[31] & 0x80 == 0 else { return false }
        // At or above p = 2^255 − 19: ed ff … ff 7f and up.
        if key[31] == 0x7f, key[1...30].allSatisfy({ $0 == 0xff }), key[0] >= 0xed { return false }
        return !smallOrderPoints.contains(key)
    }

    /// A fresh ephemeral key pair: (private key bytes, public key bytes), 32 bytes each.
    public static func generateKeyPair() throws -> (privateKey: [UInt8], publicKey: [UInt8]) {
        guard let context = EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, nil) else {
            throw Failure(description: "out of memory")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_keygen(context, &key) == 1, let key else {
            throw Failure(description: "X25519 keygen failed")
        }
        defer { EVP_PKEY_free(key) }
        var privateKey = [UInt8](repeating: 0, count: 32)
        var publicKey = [UInt8](repeating: 0, count: 32)
        var privateLength = 32
        var publicLength = 32
        guard EVP_PKEY_get_raw_private_key(key, &privateKey, &privateLength) == 1,
            EVP_PKEY_get_raw_public_key(key, &publicKey, &publicLength) == 1
        else { throw Failure(description: "X25519 export failed") }
        return (privateKey, publicKey)
    }

    /// The public key of a private key (32 bytes each).
    public static func publicKey(ofPrivateKey privateKey: [UInt8]) throws -> [UInt8] {
        guard privateKey.count == 32, let key = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nil, privateKey, 32)
        else { throw Failure(description: "bad X25519 private key") }
        defer { EVP_PKEY_free(key) }
        var publicKey = [UInt8](repeating: 0, count: 32)
        var length = 32
        guard EVP_PKEY_get_raw_public_key(key, &publicKey, &length) == 1 else {
            throw Failure(description: "X25519 export failed")
        }
        return publicKey
    }

    /// A private key from PEM (PKCS#8), its 32 raw bytes.
    /// - Throws: when the text is not an unencrypted X25519 private key.
    public static func privateKey(pem: String) throws -> [UInt8] {
        let bytes = Array(pem.utf8)
        let loaded: OpaquePointer? = bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        ERR_clear_error()
        guard let loaded else { throw Failure(description: "not a PEM private key") }
        defer { EVP_PKEY_free(loaded) }
        guard EVP_PKEY_get_base_id(loaded) == EVP_PKEY_X25519 else {
            throw Failure(description: "not an X25519 key")
        }
        var privateKey = [UInt8](repeating: 0, count: 32)
        var length = 32
        guard EVP_PKEY_get_raw_private_key(loaded, &privateKey, &length) == 1, length == 32 else {
            throw Failure(description: "X25519 export failed")
        }
        return privateKey
    }

    /// A private key as PKCS#8 PEM, for a file only its owner reads.
    public static func privateKeyPEM(_ privateKey: [UInt8]) throws -> String {
        guard privateKey.count == 32, let key = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nil, privateKey, 32)
        else { throw Failure(description: "bad X25519 private key") }
        defer { EVP_PKEY_free(key) }
        guard let pem = PrivateKeyPEM.encode(key) else { throw Failure(description: "PEM encoding failed") }
        return pem
    }

    /// The shared secret of our private key and their public key.
    /// - Throws: for a malformed public key, or one of small order (an all-zero secret).
    public static func sharedSecret(privateKey: [UInt8], publicKey: [UInt8]) throws -> [UInt8] {
        guard privateKey.count == 32, publicKey.count == 32 else {
            throw Failure(description: "X25519 keys are 32 bytes")
        }
        guard let ours = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nil, privateKey, 32) else {
            throw Failure(description: "bad X25519 private key")
        }
        defer { EVP_PKEY_free(ours) }
        guard let theirs = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nil, publicKey, 32) else {
            throw Failure(description: "bad X25519 public key")
        }
        defer { EVP_PKEY_free(theirs) }
        guard let context = EVP_PKEY_CTX_new(ours, nil) else { throw Failure(description: "out of memory") }
        defer { EVP_PKEY_CTX_free(context) }
        var secret = [UInt8](repeating: 0, count: 32)
        var length = 32
        guard EVP_PKEY_derive_init(context) == 1, EVP_PKEY_derive_set_peer(context, theirs) == 1,
            EVP_PKEY_derive(context, &secret, &length) == 1, length == 32
        else {
            ERR_clear_error()
            throw Failure(description: "X25519 agreement failed (a low-order public key?)")
        }
        guard secret.contains(where: { $0 != 0 }) else { throw Failure(description: "X25519 agreement gave zero") }
        return secret
    }
}
