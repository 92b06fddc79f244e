/// Why a token, key or signature was refused. The reason never contains the token or key material.
public struct JOSEError: Error, Equatable, CustomStringConvertible {
    /// What is wrong, as a growable set of codes.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Kind: Hashable, Sendable {
            case malformed, algorithmNotAllowed, keyNotFound, keyMismatch, invalidKey, badSignature
            case expired, notYetValid, issuedInFuture, issuerMismatch, audienceMismatch, nonceMismatch
            case missingClaim, invalidClaim, keySetUnavailable
        }

        private let kind: Kind

        /// Not a compact JWS of the expected shape (segments, base64url, JSON, size, `crit`).
        public static let malformed = Code(kind: .malformed)
        /// `alg` is `none`, HMAC, unknown, or not on the provider's allow-list.
        public static let algorithmNotAllowed = Code(kind: .algorithmNotAllowed)
        /// No key with the token's `kid` (or no `kid` where one is required).
        public static let keyNotFound = Code(kind: .keyNotFound)
        /// The key's type, curve or size does not fit the algorithm.
        public static let keyMismatch = Code(kind: .keyMismatch)
        /// A JWK or certificate that cannot be a valid public key.
        public static let invalidKey = Code(kind: .invalidKey)
        public static let badSignature = Code(kind: .badSignature)
        public static let expired = Code(kind: .expired)
        public static let notYetValid = Code(kind: .notYetValid)
        public static let issuedInFuture = Code(kind: .issuedInFuture)
        public static let issuerMismatch = Code(kind: .issuerMismatch)
        public static let audienceMismatch = Code(kind: .audienceMismatch)
        public static let nonceMismatch = Code(kind: .nonceMismatch)
        public static let missingClaim = Code(kind: .missingClaim)
        public static let invalidClaim = Code(kind: .invalidClaim)
        /// The provider's keys could not be fetched and none are cached: retriable.
        public static let keySetUnavailable = Code(kind: .keySetUnavailable)

        public var description: String { "\(kind)" }
    }

    public var code: Code
    public var reason: String

    public init(_ code: Code, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    public var description: String { "\(code): \(reason)" }

    /// Equal by code.
    public static func == (lhs: JOSEError, rhs: JOSEError) -> Bool { lhs.code == rhs.code }
}
