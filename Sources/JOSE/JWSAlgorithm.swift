import AuthCrypto
import COpenSSL

/// The JWS signature algorithms this verifier implements (RFC 7518 §3, RFC 8037).
///
/// `none` and the HMAC algorithms are deliberately absent: a token naming them is refused before
/// any key is looked at, so a public key can never be used as an HMAC secret.
public enum JWSAlgorithm: String, Sendable, CaseIterable, Codable {
    case rs256 = "RS256", rs384 = "RS384", rs512 = "RS512"
    case ps256 = "PS256", ps384 = "PS384", ps512 = "PS512"
    case es256 = "ES256", es384 = "ES384", es512 = "ES512"
    case edDSA = "EdDSA"

    /// The key family the algorithm needs.
    public enum KeyFamily: Sendable, Equatable {
        case rsa
        case ec(Curve)
        case ed25519
    }

    /// NIST curves by their JWK `crv` name.
    public enum Curve: String, Sendable, Equatable {
        case p256 = "P-256", p384 = "P-384", p521 = "P-521"

        /// Bytes of one coordinate, and of `r` or `s` in a JWS signature.
        public var coordinateSize: Int {
            switch self {
            case .p256: 32
            case .p384: 48
            case .p521: 66
            }
        }

        var openSSLGroupName: StaticString {
            switch self {
            case .p256: "prime256v1"
            case .p384: "secp384r1"
            case .p521: "secp521r1"
            }
        }
    }

    public var keyFamily: KeyFamily {
        switch self {
        case .rs256, .rs384, .rs512, .ps256, .ps384, .ps512: .rsa
        case .es256: .ec(.p256)
        case .es384: .ec(.p384)
        case .es512: .ec(.p521)
        case .edDSA: .ed25519
        }
    }

    var isPSS: Bool { self == .ps256 || self == .ps384 || self == .ps512 }

    /// The digest, or nil for EdDSA (which hashes internally).
    var digest: OpaquePointer? {
        switch self {
        case .rs256, .ps256, .es256: FetchedAlgorithms.shared.sha256
        case .rs384, .ps384, .es384: FetchedAlgorithms.shared.sha384
        case .rs512, .ps512, .es512: FetchedAlgorithms.shared.sha512
        case .edDSA: nil
        }
    }

    var digestLength: Int32 {
        switch self {
        case .rs256, .ps256, .es256: 32
        case .rs384, .ps384, .es384: 48
        case .rs512, .ps512, .es512: 64
        case .edDSA: 0
        }
    }
}
