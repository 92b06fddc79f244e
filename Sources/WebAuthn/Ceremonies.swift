import AuthCrypto
import JOSE
import StrictJSON

/// The relying party's policy: who it is, which origins may run its ceremonies, and whether the
/// user must be verified (a PIN or biometric, beside presence).
public struct RelyingParty: Sendable {
    public enum UserVerification: String, Sendable, CaseIterable {
        case required, preferred, discouraged
    }

    public var id: String
    public var name: String
    /// Web origins (`https://example.com`) and Android apps (`android:apk-key-hash:…`).
    public var origins: [String]
    public var userVerification: UserVerification
    /// SHA-256 of the RP ID: what authenticator data must start with.
    public let idHash: [UInt8]

    public init(id: String, name: String, origins: [String], userVerification: UserVerification) {
        self.id = id
        self.name = name
        self.origins = origins
        self.userVerification = userVerification
        idHash = SHA256.hash(id)
    }
}

/// `clientDataJSON` (WebAuthn L3 §5.8.1), as the client wrote it.
public struct ClientData: Sendable {
    public let type: String
    public let challenge: [UInt8]
    public let origin: String
    public let crossOrigin: Bool
    /// SHA-256 of the bytes as sent: what the authenticator signed.
    public let hash: [UInt8]

    static let field = "data.credential.response.clientDataJSON"

    public init(_ bytes: [UInt8]) throws(WebAuthnFailure) {
        let members: [String: JSONValue]
        do {
            members = try JSONReader.object(bytes)
        } catch {
            throw .malformed(Self.field, "is not a JSON object: \(error)")
        }
        guard case .string(let type)? = members["type"] else { throw .malformed(Self.field, "has no type") }
        guard case .string(let challenge)? = members["challenge"] else {
            throw .malformed(Self.field, "has no challenge")
        }
        guard let challengeBytes = Base64URL.decode(challenge), !challengeBytes.isEmpty else {
            throw .malformed(Self.field, "challenge is not base64url")
        }
        guard case .string(let origin)? = members["origin"] else { throw .malformed(Self.field, "has no origin") }
        switch members["crossOrigin"] {
        case nil, .null?, .bool(false)?: crossOrigin = false
        case .bool(true)?: crossOrigin = true
        default: throw .malformed(Self.field, "crossOrigin must be a boolean")
        }
        self.type = type
        self.challenge = challengeBytes
        self.origin = origin
        hash = SHA256.hash(bytes)
    }

    /// §7.1 steps 7–10 and §7.2 steps 10–13: the type, origin and frame; the challenge is the
    /// caller's to look up.
    func check(type expected: String, rp: RelyingParty) throws(WebAuthnFailure) {
        guard type == expected else { throw .rejected(Self.field, "type must be \(expected), not \(type.prefix(32))") }
        guard rp.origins.contains(origin) else {
            throw .rejected(Self.field, "origin \(origin.prefix(128)) is not one of the relying party's")
        }
        guard !crossOrigin else { throw .rejected(Self.field, "a cross-origin ceremony is not accepted") }
    }
}

extension AuthenticatorData {
    /// The checks shared by both ceremonies: the RP ID hash, presence, verification when
    /// required, and the backup flags' consistency.
    func check(rp: RelyingParty, field: String) throws(WebAuthnFailure) {
        guard ConstantTime.equals(rpIDHash, rp.idHash) else {
            throw .rejected(field, "the RP ID hash is not that of \(rp.id)")
        }
        guard flags.contains(.userPresent) else { throw .rejected(field, "the user was not present (UP not set)") }
        if rp.userVerification == .required, !flags.contains(.userVerified) {
            throw .rejected(field, "the user was not verified (UV not set) and this relying party requires it")
        }
        if flags.contains(.backedUp), !flags.contains(.backupEligible) {
            throw .rejected(field, "backed up (BS) without being backup eligible (BE)")
        }
    }
}

/// A `RegistrationResponseJSON`'s parts, decoded from base64url.
public struct RegistrationResponse: Sendable {
    public var id: String
    public var rawID: [UInt8]
    public var clientDataJSON: [UInt8]
    public var attestationObject: [UInt8]
    public var transports: [String]

    public init(id: String, rawID: [UInt8], clientDataJSON: [UInt8], attestationObject: [UInt8], transports: [String]) {
        self.id = id
        self.rawID = rawID
        self.clientDataJSON = clientDataJSON
        self.attestationObject = attestationObject
        self.transports = transports
    }
}

/// An `AuthenticationResponseJSON`'s parts, decoded from base64url.
public struct AuthenticationResponse: Sendable {
    public var id: String
    public var rawID: [UInt8]
    public var clientDataJSON: [UInt8]
    public var authenticatorData: [UInt8]
    public var signature: [UInt8]
    public var userHandle: [UInt8]?

    public init(
        id: String, rawID: [UInt8], clientDataJSON: [UInt8], authenticatorData: [UInt8], signature: [UInt8],
        userHandle: [UInt8]?
    ) {
        self.id = id
        self.rawID = rawID
        self.clientDataJSON = clientDataJSON
        self.authenticatorData = authenticatorData
        self.signature = signature
        self.userHandle = userHandle
    }
}

/// A registration that passed every check but the challenge's, which the caller looks up.
public struct VerifiedRegistration: Sendable {
    public let clientData: ClientData
    public let authenticatorData: AuthenticatorData
    public let credential: AuthenticatorData.AttestedCredential
    /// `none`, `packed` (self or x5c), or the format taken as `none`.
    public let attestationFormat: String
    public let attestationVerified: Bool
}

/// An assertion whose client data and authenticator data passed their checks; its signature is
/// checked against the stored key by `verifySignature`.
public struct CheckedAssertion: Sendable {
    public let clientData: ClientData
    public let authenticatorData: AuthenticatorData
    public let signature: [UInt8]

    /// §7.2 step 20: the signature over `authenticatorData ‖ SHA-256(clientDataJSON)`.
    public func verifySignature(with key: COSEKey) -> Bool {
        key.verify(signature: signature, message: authenticatorData.bytes + clientData.hash)
    }
}

public enum WebAuthnCeremony {
    static let attestationField = "data.credential.response.attestationObject"
    static let authenticatorDataField = "data.credential.response.authenticatorData"

    /// WebAuthn L3 §7.1 (registering a new credential), but for the challenge's lookup.
    public static func verifyRegistration(
        _ response: RegistrationResponse, rp: RelyingParty, algorithms: [COSEAlgorithm]
    ) throws(WebAuthnFailure) -> VerifiedRegistration {
        let clientData = try ClientData(response.clientDataJSON)
        try clientData.check(type: "webauthn.create", rp: rp)
        let object: CBORValue
        do {
            object = try CBOR.decode(response.attestationObject)
        } catch {
            throw .malformed(attestationField, "is not acceptable CBOR: \(error)")
        }
        guard case .map = object, let format = object["fmt"]?.textValue,
            let statement = object["attStmt"], case .map = statement, let authDataBytes = object["authData"]?.bytesValue
        else {
            throw .malformed(attestationField, "must be a map of fmt, attStmt and authData")
        }
        let authenticatorData = try AuthenticatorData(authDataBytes, field: attestationField)
        try authenticatorData.check(rp: rp, field: attestationField)
        guard let credential = authenticatorData.attestedCredential else {
            throw .rejected(attestationField, "carries no attested credential data (AT not set)")
        }
        guard credential.credentialID == response.rawID else {
            throw .rejected("data.credential.rawId", "is not the credential id in the authenticator data")
        }
        guard algorithms.contains(credential.publicKey.algorithm) else {
            throw .rejected(
                attestationField, "algorithm \(credential.publicKey.algorithm.name) was not offered")
        }
        let verified: Bool
        switch format {
        case "packed":
            try Attestation.verifyPacked(
                statement, authenticatorData: authenticatorData, clientDataHash: clientData.hash,
                credential: credential)
            verified = true
        case "none":
            guard case .map(let entries) = statement, entries.isEmpty else {
                throw .rejected(attestationField, "a none attestation's statement must be empty")
            }
            verified = false
        default:
            // Other formats (tpm, android-key, apple, fido-u2f…) prove only the make of the
            // authenticator, which this service does not judge: taken as none.
            verified = false
        }
        return VerifiedRegistration(
            clientData: clientData, authenticatorData: authenticatorData, credential: credential,
            attestationFormat: format, attestationVerified: verified)
    }

    /// WebAuthn L3 §7.2 (verifying an authentication assertion), up to the stored credential:
    /// the caller finds it by `rawId`, checks its owner, the challenge, the signature (with
    /// `verifySignature`) and the sign count.
    public static func checkAssertion(_ response: AuthenticationResponse, rp: RelyingParty) throws(WebAuthnFailure)
        -> CheckedAssertion
    {
        let clientData = try ClientData(response.clientDataJSON)
        try clientData.check(type: "webauthn.get", rp: rp)
        let authenticatorData = try AuthenticatorData(response.authenticatorData, field: authenticatorDataField)
        try authenticatorData.check(rp: rp, field: authenticatorDataField)
        return CheckedAssertion(
            clientData: clientData, authenticatorData: authenticatorData, signature: response.signature)
    }

    /// Whether the new sign count is acceptable after `stored` (§7.2 step 22): when either is
    /// non-zero, the new one must be greater, or the credential may have been cloned.
    public static func signCountAdvances(stored: UInt32, new: UInt32) -> Bool {
        (stored == 0 && new == 0) || new > stored
    }
}
