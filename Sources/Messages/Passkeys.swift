import StrictJSON

/// A passkey ceremony's response as the client's `PublicKeyCredential.toJSON()` gives it: W3C
/// WebAuthn Level 3 `RegistrationResponseJSON` (with `attestationObject`) or
/// `AuthenticationResponseJSON` (with `authenticatorData` and `signature`); binary members are
/// base64url without padding. `clientExtensionResults` is accepted and not read.
public struct PasskeyCredential: Decodable, Sendable, Equatable {
    public var id: String
    public var rawId: String
    public var type: String
    public var response: Response
    public var authenticatorAttachment: String?

    public struct Response: Decodable, Sendable, Equatable {
        public var clientDataJSON: String
        /// Registration.
        public var attestationObject: String?
        /// Registration (a convenience copy, not read) and authentication.
        public var authenticatorData: String?
        /// Authentication.
        public var signature: String?
        public var userHandle: String?
        /// Registration: how the client reached the authenticator (`internal`, `hybrid`, `usb`…).
        public var transports: [String]?

        public init(clientDataJSON: String) {
            self.clientDataJSON = clientDataJSON
        }
    }

    public init(id: String, rawId: String, type: String, response: Response) {
        self.id = id
        self.rawId = rawId
        self.type = type
        self.response = response
    }
}

/// `passkey_options`: the options of a ceremony, as W3C WebAuthn Level 3
/// `PublicKeyCredentialCreationOptionsJSON` (registration: `rp`, `user`, `pubKeyCredParams`) or
/// `PublicKeyCredentialRequestOptionsJSON` (sign-in: `rpId`, `allowCredentials`), ready for
/// `PublicKeyCredential.parseCreationOptionsFromJSON` / `parseRequestOptionsFromJSON`.
public struct PasskeyOptionsPayload: Decodable, Sendable, Equatable {
    public var challenge: String
    public var timeout: Int64
    public var rp: RelyingPartyEntity?
    public var user: UserEntity?
    public var pubKeyCredParams: [CredentialParameters]?
    public var excludeCredentials: [CredentialDescriptor]?
    public var authenticatorSelection: AuthenticatorSelection?
    public var attestation: String?
    public var rpId: String?
    public var allowCredentials: [CredentialDescriptor]?
    public var userVerification: String?
    public var hints: [String]?
    public var extensions: Extensions?

    public init(challenge: String, timeout: Int64) {
        self.challenge = challenge
        self.timeout = timeout
    }

    public struct RelyingPartyEntity: Decodable, Sendable, Equatable {
        public var id: String
        public var name: String

        public init(id: String, name: String) {
            self.id = id
            self.name = name
        }
    }

    public struct UserEntity: Decodable, Sendable, Equatable {
        /// The user's random WebAuthn handle (base64url), never the user id.
        public var id: String
        public var name: String
        public var displayName: String

        public init(id: String, name: String, displayName: String) {
            self.id = id
            self.name = name
            self.displayName = displayName
        }
    }

    public struct CredentialParameters: Decodable, Sendable, Equatable {
        public var type: String
        public var alg: Int64

        public init(alg: Int64) {
            type = "public-key"
            self.alg = alg
        }
    }

    public struct CredentialDescriptor: Decodable, Sendable, Equatable {
        public var type: String
        public var id: String
        public var transports: [String]?

        public init(id: String, transports: [String]?) {
            type = "public-key"
            self.id = id
            self.transports = transports
        }
    }

    public struct AuthenticatorSelection: Decodable, Sendable, Equatable {
        public var residentKey: String
        public var requireResidentKey: Bool
        public var userVerification: String

        public init(userVerification: String) {
            residentKey = "required"
            requireResidentKey = true
            self.userVerification = userVerification
        }
    }

    /// `credProps`: asks the client to say whether the credential is discoverable.
    public struct Extensions: Decodable, Sendable, Equatable {
        public var credProps: Bool?

        public init(credProps: Bool?) {
            self.credProps = credProps
        }
    }
}

/// One passkey of a user (`passkey`, `passkeys`).
public struct PasskeyPayload: Decodable, Sendable, Equatable {
    /// The id `passkey_rename` and `passkey_remove` take.
    public var id: String
    /// The credential id (base64url), as the client's authenticator knows it.
    public var credentialId: String
    public var name: String
    public var createdAt: String
    public var lastUsedAt: String?
    /// Whether the passkey may be synced (BE) and is (BS), e.g. in iCloud Keychain.
    public var backupEligible: Bool
    public var backedUp: Bool
    public var transports: [String]
    public var algorithm: String

    public init(
        id: String, credentialId: String, name: String, createdAt: String, lastUsedAt: String?,
        backupEligible: Bool, backedUp: Bool, transports: [String], algorithm: String
    ) {
        self.id = id
        self.credentialId = credentialId
        self.name = name
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.backupEligible = backupEligible
        self.backedUp = backedUp
        self.transports = transports
        self.algorithm = algorithm
    }

    enum CodingKeys: String, CodingKey {
        case id, name, transports, algorithm
        case credentialId = "credential_id"
        case createdAt = "created_at"
        case lastUsedAt = "last_used_at"
        case backupEligible = "backup_eligible"
        case backedUp = "backed_up"
    }
}

/// `auth.passkey.added`, `auth.passkey.removed` and `auth.passkey.clone_suspected`.
public struct PasskeyEventData: Decodable, Sendable, Equatable {
    public var userId: String
    public var passkeyId: String
    public var name: String
    /// Why it was removed (`user`), or what a suspected clone presented.
    public var reason: String?

    public init(userId: String, passkeyId: String, name: String, reason: String?) {
        self.userId = userId
        self.passkeyId = passkeyId
        self.name = name
        self.reason = reason
    }

    enum CodingKeys: String, CodingKey {
        case name, reason
        case userId = "user_id"
        case passkeyId = "passkey_id"
    }
}

// MARK: - Written one way

extension PasskeyCredential: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.authenticatorAttachment, authenticatorAttachment)
            out.member(CodingKeys.id, id)
            out.member(CodingKeys.rawId, rawId)
            out.member(CodingKeys.response, response)
            out.member(CodingKeys.type, type)
        }
    }
}

extension PasskeyCredential.Response: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.attestationObject, attestationObject)
            out.member(CodingKeys.authenticatorData, authenticatorData)
            out.member(CodingKeys.clientDataJSON, clientDataJSON)
            out.member(CodingKeys.signature, signature)
            if let transports { out.member(CodingKeys.transports, transports) }
            out.member(CodingKeys.userHandle, userHandle)
        }
    }
}

extension PasskeyOptionsPayload: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.allowCredentials, allowCredentials)
            out.member(CodingKeys.attestation, attestation)
            out.member(CodingKeys.authenticatorSelection, authenticatorSelection)
            out.member(CodingKeys.challenge, challenge)
            out.member(CodingKeys.excludeCredentials, excludeCredentials)
            out.member(CodingKeys.extensions, extensions)
            if let hints { out.member(CodingKeys.hints, hints) }
            out.member(CodingKeys.pubKeyCredParams, pubKeyCredParams)
            out.member(CodingKeys.rp, rp)
            out.member(CodingKeys.rpId, rpId)
            out.member(CodingKeys.timeout, timeout)
            out.member(CodingKeys.user, user)
            out.member(CodingKeys.userVerification, userVerification)
        }
    }
}

extension PasskeyOptionsPayload.RelyingPartyEntity: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.id, id)
            out.member(CodingKeys.name, name)
        }
    }
}

extension PasskeyOptionsPayload.UserEntity: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.displayName, displayName)
            out.member(CodingKeys.id, id)
            out.member(CodingKeys.name, name)
        }
    }
}

extension PasskeyOptionsPayload.CredentialParameters: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.alg, alg)
            out.member(CodingKeys.type, type)
        }
    }
}

extension PasskeyOptionsPayload.CredentialDescriptor: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.id, id)
            if let transports { out.member(CodingKeys.transports, transports) }
            out.member(CodingKeys.type, type)
        }
    }
}

extension PasskeyOptionsPayload.AuthenticatorSelection: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.requireResidentKey, requireResidentKey)
            out.member(CodingKeys.residentKey, residentKey)
            out.member(CodingKeys.userVerification, userVerification)
        }
    }
}

extension PasskeyOptionsPayload.Extensions: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.credProps, credProps)
        }
    }
}

extension PasskeyPayload: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.algorithm, algorithm)
            out.member(CodingKeys.backedUp, backedUp)
            out.member(CodingKeys.backupEligible, backupEligible)
            out.member(CodingKeys.createdAt, createdAt)
            out.member(CodingKeys.credentialId, credentialId)
            out.member(CodingKeys.id, id)
            out.member(CodingKeys.lastUsedAt, lastUsedAt)
            out.member(CodingKeys.name, name)
            out.member(CodingKeys.transports, transports)
        }
    }
}

extension PasskeyEventData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.name, name)
            out.member(CodingKeys.passkeyId, passkeyId)
            out.member(CodingKeys.reason, reason)
            out.member(CodingKeys.userId, userId)
        }
    }
}
