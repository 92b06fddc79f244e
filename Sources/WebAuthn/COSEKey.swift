import COpenSSL
import JOSE

/// The COSE algorithms a passkey may use (IANA COSE registry): the three WebAuthn clients offer.
public enum COSEAlgorithm: Int64, Sendable, CaseIterable {
    case es256 = -7
    case edDSA = -8
    case rs256 = -257

    /// The same algorithm in JOSE's terms, for the signature check.
    var jws: JWSAlgorithm {
        switch self {
        case .es256: .es256
        case .edDSA: .edDSA
        case .rs256: .rs256
        }
    }

    public var name: String {
        switch self {
        case .es256: "ES256"
        case .edDSA: "EdDSA"
        case .rs256: "RS256"
        }
    }
}

/// A credential public key in its COSE_Key form (RFC 9052 §7, RFC 9053): EC2 P-256, OKP Ed25519
/// or RSA of at least 2048 bits, under the same policy as providers' keys (a point on the curve,
/// no small-order Ed25519 point, an odd exponent of at least 3).
public struct COSEKey: Sendable {
    public let algorithm: COSEAlgorithm
    public let key: PublicKey

    /// Errors name what is wrong; callers answer them as a refused credential.
    public struct Failure: Error, Equatable, Sendable, CustomStringConvertible {
        public var reason: String
        public var description: String { reason }
    }

    /// The key a COSE_Key map describes.
    public init(_ value: CBORValue) throws(Failure) {
        guard case .map = value else { throw Failure(reason: "the credential public key is not a CBOR map") }
        guard let kty = value[1]?.integerValue else { throw Failure(reason: "the credential public key has no kty") }
        guard let alg = value[3]?.integerValue else { throw Failure(reason: "the credential public key has no alg") }
        guard let algorithm = COSEAlgorithm(rawValue: alg) else {
            throw Failure(reason: "COSE algorithm \(alg) is not supported")
        }
        do {
            switch (algorithm, kty) {
            case (.es256, 2):
                guard value[-1]?.integerValue == 1 else { throw Failure(reason: "ES256 keys must be on P-256 (crv 1)") }
                guard let x = value[-2]?.bytesValue, let y = value[-3]?.bytesValue, x.count == 32, y.count == 32 else {
                    throw Failure(reason: "an EC2 key needs 32-byte x and y coordinates")
                }
                key = try PublicKey.ec(curve: .p256, x: x, y: y)
            case (.edDSA, 1):
                guard value[-1]?.integerValue == 6 else { throw Failure(reason: "EdDSA keys must be Ed25519 (crv 6)") }
                guard let x = value[-2]?.bytesValue, x.count == 32 else {
                    throw Failure(reason: "an OKP key needs a 32-byte x")
                }
                key = try PublicKey.ed25519(x)
            case (.rs256, 3):
                guard let n = value[-1]?.bytesValue, let e = value[-2]?.bytesValue else {
                    throw Failure(reason: "an RSA key needs n and e")
                }
                key = try PublicKey.rsa(modulus: n, exponent: e)
            default:
                throw Failure(reason: "key type \(kty) does not fit algorithm \(algorithm.name)")
            }
        } catch let failure as Failure {
            throw failure
        } catch {
            throw Failure(reason: "the credential public key is not acceptable: \(error)")
        }
        self.algorithm = algorithm
    }

    /// The key stored as its COSE bytes.
    public init(bytes: [UInt8]) throws(Failure) {
        let value: CBORValue
        do {
            value = try CBOR.decode(bytes)
        } catch {
            throw Failure(reason: "the credential public key is not CBOR: \(error)")
        }
        try self.init(value)
    }

    /// Whether `signature` (as WebAuthn encodes it: ECDSA in ASN.1 DER) is this key's over `message`.
    public func verify(signature: [UInt8], message: [UInt8]) -> Bool {
        Signature.verify(signature, message: message, key: key, algorithm: algorithm)
    }
}

/// WebAuthn's signature encodings over JOSE's verification.
enum Signature {
    static func verify(_ signature: [UInt8], message: [UInt8], key: PublicKey, algorithm: COSEAlgorithm) -> Bool {
        var signature = signature
        if algorithm == .es256 {
            guard let raw = derToRaw(signature, size: 32) else { return false }
            signature = raw
        }
        return (try? key.verify(signature: signature, message: message, algorithm: algorithm.jws)) ?? false
    }

    /// An ECDSA signature in strict DER (re-encoding it gives the same bytes) as `r || s`.
    static func derToRaw(_ der: [UInt8], size: Int) -> [UInt8]? {
        guard !der.isEmpty, der.count <= 2 * size + 16 else { return nil }
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var pointer = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &pointer, buffer.count)
        }
        guard let parsed else {
            ERR_clear_error()
            return nil
        }
        defer { ECDSA_SIG_free(parsed) }
        var encoded: UnsafeMutablePointer<UInt8>?
        let length = i2d_ECDSA_SIG(parsed, &encoded)
        guard length > 0, let encoded else { return nil }
        defer { CRYPTO_free(encoded, nil, 0) }
        guard Array(UnsafeBufferPointer(start: encoded, count: Int(length))) == der else { return nil }
        guard let r = ECDSA_SIG_get0_r(parsed), let s = ECDSA_SIG_get0_s(parsed) else { return nil }
        var raw = [UInt8](repeating: 0, count: 2 * size)
        let ok = raw.withUnsafeMutableBufferPointer { out in
            guard let base = out.baseAddress else { return false }
            return BN_bn2binpad(r, base, Int32(size)) == Int32(size)
                && BN_bn2binpad(s, base + size, Int32(size)) == Int32(size)
        }
        return ok ? raw : nil
    }
}
