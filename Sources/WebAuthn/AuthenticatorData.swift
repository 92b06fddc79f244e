/// Why a ceremony's response is refused: `malformed` for bytes that do not parse (answered as a
/// malformed request naming the field), `rejected` for a response that parses and fails a check.
public struct WebAuthnFailure: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        case malformed
        case rejected
    }

    public var kind: Kind
    /// The request member at fault, as a JSON path under `data.credential`.
    public var field: String
    public var reason: String

    public init(_ kind: Kind, field: String, _ reason: String) {
        self.kind = kind
        self.field = field
        self.reason = reason
    }

    public var description: String { "\(field): \(reason)" }

    static func malformed(_ field: String, _ reason: String) -> WebAuthnFailure {
        .init(.malformed, field: field, reason)
    }
    static func rejected(_ field: String, _ reason: String) -> WebAuthnFailure {
        .init(.rejected, field: field, reason)
    }
}

/// The authenticator data of a registration or an assertion (WebAuthn L3 §6.1).
public struct AuthenticatorData: Sendable {
    /// The flags byte: user present, user verified, backup eligible, backed up, attested
    /// credential data, extension data.
    public struct Flags: OptionSet, Sendable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        public static let userPresent = Flags(rawValue: 0x01)
        public static let userVerified = Flags(rawValue: 0x04)
        public static let backupEligible = Flags(rawValue: 0x08)
        public static let backedUp = Flags(rawValue: 0x10)
        public static let attestedCredentialData = Flags(rawValue: 0x40)
        public static let extensionData = Flags(rawValue: 0x80)
    }

    /// The credential a registration creates.
    public struct AttestedCredential: Sendable {
        public let aaguid: [UInt8]
        public let credentialID: [UInt8]
        /// The COSE_Key exactly as the authenticator encoded it (what is stored).
        public let publicKeyBytes: [UInt8]
        public let publicKey: COSEKey
    }

    public static let maximumCredentialIDBytes = 1023

    public let bytes: [UInt8]
    public let rpIDHash: [UInt8]
    public let flags: Flags
    public let signCount: UInt32
    public let attestedCredential: AttestedCredential?
    /// Parsed so their form is checked; no extension's output is acted on.
    public let extensions: CBORValue?

    /// Parses authenticator data; `field` names where it came from in refusals.
    public init(_ bytes: [UInt8], field: String) throws(WebAuthnFailure) {
        guard bytes.count >= 37 else { throw .malformed(field, "authenticator data is shorter than 37 bytes") }
        self.bytes = bytes
        rpIDHash = Array(bytes[0..<32])
        flags = Flags(rawValue: bytes[32])
        signCount = bytes[33..<37].reduce(0) { $0 << 8 | UInt32($1) }
        var position = 37
        if flags.contains(.attestedCredentialData) {
            guard bytes.count >= position + 18 else {
                throw .malformed(field, "attested credential data is cut short")
            }
            let aaguid = Array(bytes[position..<position + 16])
            let length = Int(bytes[position + 16]) << 8 | Int(bytes[position + 17])
            position += 18
            guard length > 0, length <= Self.maximumCredentialIDBytes else {
                throw .rejected(field, "the credential id must be 1 to \(Self.maximumCredentialIDBytes) bytes")
            }
            guard bytes.count >= position + length else { throw .malformed(field, "the credential id is cut short") }
            let credentialID = Array(bytes[position..<position + length])
            position += length
            let keyValue: CBORValue
            let end: Int
            do {
                (keyValue, end) = try CBOR.decodePrefix(bytes[position...])
            } catch {
                throw .malformed(field, "the credential public key is not CBOR: \(error)")
            }
            let keyBytes = Array(bytes[position..<end])
            position = end
            let key: COSEKey
            do {
                key = try COSEKey(keyValue)
            } catch {
                throw .rejected(field, error.reason)
            }
            attestedCredential = AttestedCredential(
                aaguid: aaguid, credentialID: credentialID, publicKeyBytes: keyBytes, publicKey: key)
        } else {
            attestedCredential = nil
        }
        if flags.contains(.extensionData) {
            do {
                let (value, end) = try CBOR.decodePrefix(bytes[position...])
                guard case .map = value else { throw WebAuthnFailure.malformed(field, "extensions are not a CBOR map") }
                extensions = value
                position = end
            } catch let failure as WebAuthnFailure {
                throw failure
            } catch {
                throw .malformed(field, "extensions are not CBOR: \(error)")
            }
        } else {
            extensions = nil
        }
        guard position == bytes.count else { throw .malformed(field, "trailing bytes after the authenticator data") }
    }
}
