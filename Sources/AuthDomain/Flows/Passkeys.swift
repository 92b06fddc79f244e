import AuthCrypto
import Foundation
import Messages
import Passwords
import WebAuthn

/// Passkeys (WebAuthn L3), relayed by the gateway: the worker issues each ceremony's options
/// with a challenge it keeps (by its SHA-256), and verifies the response the client's
/// authenticator made against them. Nothing from the gateway is trusted: the origin, RP ID hash,
/// flags, algorithm, attestation and signature are all checked here, and a challenge is
/// answered once, in the transaction of its effect.
extension LoginFlows {
    /// The COSE algorithms offered, in the order offered.
    static let passkeyAlgorithms: [COSEAlgorithm] = [.edDSA, .es256, .rs256]

    /// The relying party, or `unsupported_method` when passkeys are not configured.
    func passkeyPolicy() throws -> RelyingParty {
        guard let relyingParty else {
            throw LoginError(.unsupportedMethod, "passkeys are not enabled on this worker (AUTH_WEBAUTHN_RP_ID)")
        }
        return relyingParty
    }

    /// `passkey_register_options`: creation options for the access token's user (a member or a guest).
    func preparePasskeyRegisterOptions(_ request: LoginRequest) throws -> any PreparedWrite {
        let rp = try passkeyPolicy()
        let now = clock.now()
        return PasskeyRegisterOptions(
            requestID: request.id, token: try accountToken(request, at: now), rp: rp,
            settings: configuration.passkeys, challenge: try SecureRandom.bytes(32),
            newHandle: try SecureRandom.bytes(32), now: now)
    }

    /// `passkey_register`: a registration response, verified (§7.1) but for its challenge, which
    /// the write looks up.
    func preparePasskeyRegister(_ request: LoginRequest) throws -> any PreparedWrite {
        let rp = try passkeyPolicy()
        let now = clock.now()
        let token = try accountToken(request, at: now)
        guard let credential = request.data.credential else {
            throw LoginError(.malformedRequest, "credential is required", field: "data.credential")
        }
        let response = RegistrationResponse(
            id: credential.id, rawID: try base64URL(credential.rawId, field: "data.credential.rawId"),
            clientDataJSON: try base64URL(
                credential.response.clientDataJSON, field: "data.credential.response.clientDataJSON"),
            attestationObject: try base64URL(
                credential.response.attestationObject ?? "", field: "data.credential.response.attestationObject"),
            transports: credential.response.transports ?? [])
        try checkCredentialID(credential, rawID: response.rawID)
        let verified: VerifiedRegistration
        do {
            verified = try WebAuthnCeremony.verifyRegistration(response, rp: rp, algorithms: Self.passkeyAlgorithms)
        } catch {
            throw error.loginError(refusal: .invalidPasskey)
        }
        let name = (request.data.name?.trimmedOfWhitespace.nilIfEmpty ?? request.data.device?.name ?? "Passkey")
        return PasskeyRegister(
            requestID: request.id, token: token, verified: verified,
            challengeHash: SHA256.hash(verified.clientData.challenge), transports: response.transports,
            name: String(name.prefix(64)), passkeyID: try identifiers.uuid(),
            pending: try pendingSession(at: now, isGuest: false), device: request.data.device,
            reauthMaxAge: configuration.accounts.reauthMaxAge, maximumPerUser: configuration.passkeys.maximumPerUser,
            events: events(for: request, at: now), now: now)
    }

    /// `passkey_login_options`: request options; with an `email`, its account's passkeys are
    /// listed in `allowCredentials`, without one the sign-in is discoverable.
    /// Without a results key there is no secret to make stand-ins with, so the address is not
    /// looked up at all: every sign-in is discoverable, and the answer says nothing of anyone.
    func preparePasskeyLoginOptions(_ request: LoginRequest) throws -> any PreparedWrite {
        let rp = try passkeyPolicy()
        let settings = configuration.passkeys
        let client = request.data.clientID ?? request.partitionKey
        var limits: [(bucket: String, limit: WorkerConfiguration.RateLimit)] = []
        if settings.optionsRateLimit.count > 0, let client = client.flatMap(\.nilIfEmpty) {
            limits.append(("passkey-options:" + client, settings.optionsRateLimit))
        }
        if settings.optionsGlobalRateLimit.count > 0 {
            limits.append((PasskeyLoginOptions.globalBucket, settings.optionsGlobalRateLimit))
        }
        let email = request.data.email?.trimmedOfWhitespace.nilIfEmpty
        return PasskeyLoginOptions(
            requestID: request.id, email: passkeyStandIns == nil ? nil : email.map { EmailAddress.normalize($0) ?? $0 },
            rp: rp, settings: settings, challenge: try SecureRandom.bytes(32), limits: limits,
            standIns: passkeyStandIns, now: clock.now())
    }

    /// `passkey_login`: an assertion, checked (§7.2) up to the stored credential, which the write
    /// finds and verifies the signature with.
    func preparePasskeyLogin(_ request: LoginRequest) throws -> any PreparedWrite {
        let rp = try passkeyPolicy()
        let now = clock.now()
        guard let credential = request.data.credential else {
            throw LoginError(.malformedRequest, "credential is required", field: "data.credential")
        }
        let response = AuthenticationResponse(
            id: credential.id, rawID: try base64URL(credential.rawId, field: "data.credential.rawId"),
            clientDataJSON: try base64URL(
                credential.response.clientDataJSON, field: "data.credential.response.clientDataJSON"),
            authenticatorData: try base64URL(
                credential.response.authenticatorData ?? "", field: "data.credential.response.authenticatorData"),
            signature: try base64URL(credential.response.signature ?? "", field: "data.credential.response.signature"),
            userHandle: try credential.response.userHandle.flatMap(\.nilIfEmpty).map {
                try base64URL($0, field: "data.credential.response.userHandle")
            })
        try checkCredentialID(credential, rawID: response.rawID)
        let assertion: CheckedAssertion
        do {
            assertion = try WebAuthnCeremony.checkAssertion(response, rp: rp)
        } catch {
            throw error.loginError(refusal: .invalidCredentials)
        }
        return PasskeyLogin(
            requestID: request.id, assertion: assertion, credentialID: response.rawID, userHandle: response.userHandle,
            challengeHash: SHA256.hash(assertion.clientData.challenge),
            pending: try pendingSession(at: now, isGuest: false), device: request.data.device, mfa: mfaGate(),
            events: events(for: request, at: now), now: now)
    }

    /// `passkey_list`.
    func preparePasskeyList(_ request: LoginRequest) throws -> any PreparedWrite {
        _ = try passkeyPolicy()
        let now = clock.now()
        return PasskeyList(requestID: request.id, token: try accountToken(request, at: now), now: now)
    }

    /// `passkey_rename`.
    func preparePasskeyRename(_ request: LoginRequest) throws -> any PreparedWrite {
        _ = try passkeyPolicy()
        let now = clock.now()
        guard let name = request.data.name?.trimmedOfWhitespace.nilIfEmpty else {
            throw LoginError(.malformedRequest, "name must not be empty", field: "data.name")
        }
        return PasskeyRename(
            requestID: request.id, token: try accountToken(request, at: now), passkeyID: try passkeyID(request),
            name: String(name.prefix(64)), now: now)
    }

    /// `passkey_remove`: after a recent sign-in or the password, and never the last way in.
    func preparePasskeyRemove(_ request: LoginRequest) async throws -> any PreparedWrite {
        _ = try passkeyPolicy()
        let now = clock.now()
        let token = try accountToken(request, at: now)
        return PasskeyRemove(
            requestID: request.id, token: token, passkeyID: try passkeyID(request),
            reauthentication: try await reauthentication(request, token: token, at: now),
            events: events(for: request, at: now), now: now)
    }

    private func passkeyID(_ request: LoginRequest) throws -> UUID {
        guard let id = request.data.passkeyID.flatMap(UUID.init(uuidString:)) else {
            throw LoginError(.malformedRequest, "passkey_id must be a passkey id", field: "data.passkey_id")
        }
        return id
    }

    /// Strict base64url (no padding, no other characters).
    private func base64URL(_ text: String, field: String) throws -> [UInt8] {
        guard !text.isEmpty, !text.contains("="), let bytes = Base64URL.decode(text) else {
            throw LoginError(.malformedRequest, "\(field.dropFirst(5)) must be base64url", field: field)
        }
        return bytes
    }

    /// `id` is `rawId` in base64url (§5.1).
    private func checkCredentialID(_ credential: PasskeyCredential, rawID: [UInt8]) throws {
        guard credential.id == Base64URL.encode(rawID) else {
            throw LoginError(.malformedRequest, "credential.id must be rawId in base64url", field: "data.credential.id")
        }
    }
}

extension WebAuthnFailure {
    /// A malformed part answers `malformed_request`; a failed check, the ceremony's refusal.
    func loginError(refusal: ErrorCode) -> LoginError {
        LoginError(kind == .malformed ? .malformedRequest : refusal, reason, field: field)
    }
}

extension Error {
    fileprivate func loginError(refusal: ErrorCode) -> LoginError {
        if let failure = self as? WebAuthnFailure { return failure.loginError(refusal: refusal) }
        return LoginError(refusal, "\(self)")
    }
}

// MARK: - Options

/// The challenge's refusals: the same code for unknown, used, or another ceremony's or user's.
private func challengeRefusal(_ reason: String) -> LoginError {
    LoginError(.invalidChallenge, reason + ": ask for new options", field: "data.credential.response.clientDataJSON")
}

extension PasskeyRecord {
    var payload: PasskeyPayload {
        PasskeyPayload(
            id: id.lowercasedString, credentialId: Base64URL.encode(credentialID), name: name,
            createdAt: Timestamp.format(createdAt), lastUsedAt: lastUsedAt.map(Timestamp.format),
            backupEligible: backupEligible, backedUp: backedUp, transports: transports,
            algorithm: COSEAlgorithm(rawValue: algorithm)?.name ?? String(algorithm))
    }

    var descriptor: PasskeyOptionsPayload.CredentialDescriptor {
        .init(id: Base64URL.encode(credentialID), transports: transports.isEmpty ? nil : transports)
    }
}

/// `passkey_register_options`, ready to write: the user's handle (made once), the challenge.
struct PasskeyRegisterOptions: PreparedWrite {
    let requestID: String
    let token: PresentedAccessToken
    let rp: RelyingParty
    let settings: WorkerConfiguration.Passkeys
    let challenge: [UInt8]
    let newHandle: [UInt8]
    let now: Date

    var prefetch: Prefetch { token.prefetch }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let (session, user) = try signedIn(token, in: unit, at: now)
        let passkeys = try unit.passkeys(userID: user.id)
        guard passkeys.count < settings.maximumPerUser else {
            throw LoginError(
                .invalidPasskey, "this account holds \(settings.maximumPerUser) passkeys, the most it may: remove one",
                field: "data.access_token")
        }
        let handle: [UInt8]
        if let existing = try unit.passkeyHandle(userID: user.id) {
            handle = existing
        } else {
            try unit.insertPasskeyHandle(userID: user.id, handle: newHandle)
            handle = newHandle
        }
        try unit.insertPasskeyChallenge(
            PasskeyChallengeRecord(
                hash: SHA256.hash(challenge), purpose: .register, userID: user.id,
                expiresAt: now + settings.challengeLifetime),
            at: now)
        var options = PasskeyOptionsPayload(
            challenge: Base64URL.encode(challenge), timeout: Int64(settings.challengeLifetime * 1000))
        options.rp = .init(id: rp.id, name: settings.rpName ?? rp.id)
        let accountName = user.email ?? user.handle
        options.user = .init(id: Base64URL.encode(handle), name: accountName, displayName: user.name ?? accountName)
        options.pubKeyCredParams = LoginFlows.passkeyAlgorithms.map { .init(alg: $0.rawValue) }
        options.excludeCredentials = passkeys.map(\.descriptor)
        options.authenticatorSelection = .init(userVerification: rp.userVerification.rawValue)
        options.attestation = settings.attestation
        options.hints = ["client-device"]
        options.extensions = .init(credProps: true)
        var result = LoginResultData.accepted(requestID: requestID, user: user.payload)
        result.passkeyOptions = options
        return FlowAnswer(result: result, userID: user.id, sessionID: session.id)
    }
}

/// `passkey_login_options`, ready to write: the challenge, and the named account's passkeys, or
/// stand-ins where it has none (WebAuthn L3 §14.6.2): an address with an account and passkeys
/// and one without are answered alike, so the options tell nobody which addresses have accounts.
struct PasskeyLoginOptions: PreparedWrite {
    /// The ceiling's bucket, shared by every client.
    static let globalBucket = "passkey-options-all"

    let requestID: String
    /// The address named, normalized; nil for a discoverable sign-in (or without stand-ins).
    let email: String?
    let rp: RelyingParty
    let settings: WorkerConfiguration.Passkeys
    let challenge: [UInt8]
    /// The client's rate-limit bucket (when it is limited) and the global ceiling's.
    let limits: [(bucket: String, limit: WorkerConfiguration.RateLimit)]
    let standIns: PasskeyStandIns?
    let now: Date

    var prefetch: Prefetch {
        var prefetch = Prefetch()
        prefetch.rateLimitBuckets = limits.map(\.bucket)
        return prefetch
    }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        for (bucket, limit) in limits {
            guard try unit.rateLimitUsage(bucket: bucket, at: now, window: limit.window) < limit.count else {
                throw LoginError.tooManyAttempts(
                    until: now + limit.window, now: now,
                    message: bucket == Self.globalBucket
                        ? "too many passkey sign-ins asked for right now; try again later"
                        : "too many passkey sign-ins asked for from this client")
            }
        }
        for (bucket, limit) in limits {
            try unit.recordRateLimitedUse(bucket: bucket, at: now, window: limit.window)
        }
        var descriptors: [PasskeyOptionsPayload.CredentialDescriptor] = []
        var account: UUID?
        if let email {
            let matches = try unit.usersWithVerifiedEmail(email)
            if matches.count == 1, let match = matches.first {
                let passkeys = try unit.passkeys(userID: match)
                if !passkeys.isEmpty {
                    account = match
                    descriptors = passkeys.map(\.descriptor)
                }
            }
            if account == nil, let standIns { descriptors = standIns.descriptors(for: email) }
        }
        try unit.insertPasskeyChallenge(
            PasskeyChallengeRecord(
                hash: SHA256.hash(challenge), purpose: .login, userID: account,
                expiresAt: now + settings.challengeLifetime),
            at: now)
        var options = PasskeyOptionsPayload(
            challenge: Base64URL.encode(challenge), timeout: Int64(settings.challengeLifetime * 1000))
        options.rpId = rp.id
        options.allowCredentials = descriptors
        options.userVerification = rp.userVerification.rawValue
        var result = LoginResultData.accepted(requestID: requestID, user: nil)
        result.passkeyOptions = options
        return FlowAnswer(result: result, userID: nil, sessionID: nil)
    }
}

/// Stand-in credentials for an address that has no account with passkeys: stable (the same
/// address gets the same ones, as an account's own would stay), unguessable without the key (an
/// HMAC of the address under a key derived from the results key), and shaped as real ones are
/// (one or two, of the lengths authenticators use, with their transports).
struct PasskeyStandIns: Sendable {
    private let key: [UInt8]

    init(resultsKey: [UInt8]) {
        key = HMACSHA256.mac(key: resultsKey, message: Array("auth-worker passkey stand-ins".utf8))
    }

    /// Lengths platform and roaming authenticators give their credential ids.
    private static let idLengths = [16, 20, 32, 64]
    private static let transports: [[String]] = [["internal", "hybrid"], ["internal"], ["hybrid"], ["usb", "nfc"]]

    func descriptors(for email: String) -> [PasskeyOptionsPayload.CredentialDescriptor] {
        let shape = HMACSHA256.mac(key: key, message: Array("shape\u{0}\(email)".utf8))
        let count = 1 + Int(shape[0] % 2)
        return (0..<count).map { index in
            let length = Self.idLengths[Int(shape[1 + index] % UInt8(Self.idLengths.count))]
            var id: [UInt8] = []
            var block = 0
            while id.count < length {
                id += HMACSHA256.mac(key: key, message: Array("id\u{0}\(index)\u{0}\(block)\u{0}\(email)".utf8))
                block += 1
            }
            let transports = Self.transports[Int(shape[3 + index] % UInt8(Self.transports.count))]
            return .init(id: Base64URL.encode(Array(id.prefix(length))), transports: transports)
        }
    }
}

// MARK: - Registration

/// `passkey_register`, ready to write.
struct PasskeyRegister: PreparedWrite {
    let requestID: String
    let token: PresentedAccessToken
    let verified: VerifiedRegistration
    let challengeHash: [UInt8]
    let transports: [String]
    let name: String
    let passkeyID: UUID
    /// The member's session a guest gets when the passkey makes it a member.
    let pending: PendingSession
    let device: LoginRequestData.Device?
    let reauthMaxAge: TimeInterval
    let maximumPerUser: Int
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch { token.prefetch }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let (session, stored) = try signedIn(token, in: unit, at: now)
        guard let challenge = try unit.passkeyChallenge(hash: challengeHash), challenge.purpose == .register,
            challenge.userID == stored.id
        else {
            throw challengeRefusal("the challenge is unknown, answered already, or was issued for another ceremony")
        }
        try unit.consumePasskeyChallenge(hash: challengeHash)
        guard challenge.expiresAt > now else {
            return .refused(challengeRefusal("the challenge has expired"), requestID: requestID, userID: stored.id)
        }
        // Another way into a full account is a change to how it signs in: a recent sign-in only.
        if !stored.isGuest, now.timeIntervalSince(session.createdAt) > reauthMaxAge {
            return .refused(
                Reauthentication.refusal(field: "data.access_token"), requestID: requestID, userID: stored.id)
        }
        let credential = verified.credential
        if try unit.passkey(credentialID: credential.credentialID) != nil {
            return .refused(
                LoginError(.passkeyExists, "this passkey is registered already", field: "data.credential.rawId"),
                requestID: requestID, userID: stored.id)
        }
        guard try unit.passkeys(userID: stored.id).count < maximumPerUser else {
            return .refused(
                LoginError(.invalidPasskey, "this account holds the most passkeys it may", field: "data.credential"),
                requestID: requestID, userID: stored.id)
        }
        let flags = verified.authenticatorData.flags
        let record = PasskeyRecord(
            id: passkeyID, userID: stored.id, credentialID: credential.credentialID,
            publicKey: credential.publicKeyBytes, algorithm: credential.publicKey.algorithm.rawValue,
            signCount: verified.authenticatorData.signCount, transports: transports, aaguid: credential.aaguid,
            attestation: verified.attestationVerified ? verified.attestationFormat : "none",
            backupEligible: flags.contains(.backupEligible), backedUp: flags.contains(.backedUp), name: name,
            createdAt: now, lastUsedAt: nil)
        try unit.insertPasskey(record)
        try unit.appendEvent(try events.passkeyAdded(user: stored.id, passkey: record))
        var user = stored
        if !user.providers.contains("passkey") { user.providers.append("passkey") }
        guard stored.isGuest else {
            var result = LoginResultData.accepted(requestID: requestID, user: user.payload)
            result.passkey = record.payload
            return FlowAnswer(result: result, userID: user.id, sessionID: session.id)
        }
        // A guest becomes a member with the same user id, and gets a member's session.
        user.isGuest = false
        try unit.updateUser(user, upgradedAt: now, at: now)
        try unit.appendEvent(try events.userUpgraded(user, provider: "passkey"))
        var answer = try pending.open(
            for: user, provider: "passkey", device: device, newUser: false, requestID: requestID, in: unit)
        answer.result.passkey = record.payload
        return answer
    }
}

// MARK: - Sign-in

/// `passkey_login`, ready to write.
struct PasskeyLogin: PreparedWrite {
    let requestID: String
    let assertion: CheckedAssertion
    let credentialID: [UInt8]
    let userHandle: [UInt8]?
    let challengeHash: [UInt8]
    let pending: PendingSession
    let device: LoginRequestData.Device?
    let mfa: MFAGate?
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch { Prefetch() }

    private func refused(_ reason: String, user: UUID? = nil) -> FlowAnswer {
        .refused(LoginError(.invalidCredentials, reason), requestID: requestID, userID: user)
    }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        guard let challenge = try unit.passkeyChallenge(hash: challengeHash), challenge.purpose == .login else {
            throw challengeRefusal("the challenge is unknown, answered already, or was issued for another ceremony")
        }
        // Answered once, whatever the answer: a refused assertion cannot be tried again.
        try unit.consumePasskeyChallenge(hash: challengeHash)
        guard challenge.expiresAt > now else {
            return .refused(challengeRefusal("the challenge has expired"), requestID: requestID, userID: nil)
        }
        // Unknown, removed, or another account's than the one named: answered alike.
        guard let passkey = try unit.passkey(credentialID: credentialID),
            challenge.userID == nil || challenge.userID == passkey.userID
        else { return refused("this passkey is not registered to an account here") }
        // A discoverable sign-in names its account by the user handle (§7.2 step 6).
        if challenge.userID == nil, userHandle == nil {
            return refused("userHandle is required for a sign-in without an e-mail address", user: passkey.userID)
        }
        if let userHandle, try unit.userID(passkeyHandle: userHandle) != passkey.userID {
            return refused("this passkey is not registered to an account here", user: passkey.userID)
        }
        guard let key = try? COSEKey(bytes: passkey.publicKey), assertion.verifySignature(with: key) else {
            return refused("the passkey's signature does not verify", user: passkey.userID)
        }
        let flags = assertion.authenticatorData.flags
        guard flags.contains(.backupEligible) == passkey.backupEligible else {
            return refused("the authenticator's backup eligibility changed", user: passkey.userID)
        }
        let count = assertion.authenticatorData.signCount
        guard WebAuthnCeremony.signCountAdvances(stored: passkey.signCount, new: count) else {
            try unit.appendEvent(
                try events.passkeyCloneSuspected(
                    user: passkey.userID, passkey: passkey, stored: passkey.signCount, presented: count))
            return refused(
                "the passkey's signature counter went backwards: the authenticator may have been cloned",
                user: passkey.userID)
        }
        try unit.recordPasskeyUse(id: passkey.id, signCount: count, backedUp: flags.contains(.backedUp), at: now)
        guard let user = try unit.user(id: passkey.userID) else { return refused("no such account") }
        // A verified user (UV) is two factors in one; a passkey without UV passes the gate as any
        // first factor does.
        if !flags.contains(.userVerified), let mfa,
            let stop = try mfa.answer(
                requestID: requestID, user: user.id, provider: "passkey", device: device, in: unit, at: now)
        {
            return stop
        }
        return try pending.open(
            for: user, provider: "passkey", device: device, newUser: false, requestID: requestID, in: unit)
    }
}

// MARK: - Managing passkeys

/// `passkey_list`, ready to write (it writes nothing but the token's use).
struct PasskeyList: PreparedWrite {
    let requestID: String
    let token: PresentedAccessToken
    let now: Date

    var prefetch: Prefetch { token.prefetch }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let (session, user) = try signedIn(token, in: unit, at: now)
        var result = LoginResultData.accepted(requestID: requestID, user: user.payload)
        result.passkeys = try unit.passkeys(userID: user.id).map(\.payload)
        return FlowAnswer(result: result, userID: user.id, sessionID: session.id)
    }
}

/// The user's passkey with that id; another user's answers as an unknown one.
private func ownPasskey(_ id: UUID, user: UUID, in unit: any UnitOfWork) throws -> PasskeyRecord {
    guard let passkey = try unit.passkey(id: id), passkey.userID == user else {
        throw LoginError(.unknownPasskey, "this account has no passkey with that id", field: "data.passkey_id")
    }
    return passkey
}

/// `passkey_rename`, ready to write.
struct PasskeyRename: PreparedWrite {
    let requestID: String
    let token: PresentedAccessToken
    let passkeyID: UUID
    let name: String
    let now: Date

    var prefetch: Prefetch { token.prefetch }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let (session, user) = try signedIn(token, in: unit, at: now)
        var passkey = try ownPasskey(passkeyID, user: user.id, in: unit)
        try unit.renamePasskey(id: passkey.id, name: name)
        passkey.name = name
        var result = LoginResultData.accepted(requestID: requestID, user: user.payload)
        result.passkey = passkey.payload
        return FlowAnswer(result: result, userID: user.id, sessionID: session.id)
    }
}

/// `passkey_remove`, ready to write.
struct PasskeyRemove: PreparedWrite {
    let requestID: String
    let token: PresentedAccessToken
    let passkeyID: UUID
    let reauthentication: Reauthentication
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch {
        var prefetch = token.prefetch
        prefetch.merge(reauthentication.prefetch)
        return prefetch
    }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let (session, stored) = try signedIn(token, in: unit, at: now)
        let passkey = try ownPasskey(passkeyID, user: stored.id, in: unit)
        try reauthentication.require(for: session, in: unit, at: now, field: "data.password")
        let others = try unit.passkeys(userID: stored.id).count - 1
        let otherWays = stored.providers.filter { $0 != "passkey" }.count
        guard others > 0 || otherWays > 0 else {
            throw LoginError(
                .lastSignInMethod, "this passkey is the account's only way to sign in: add another first",
                field: "data.passkey_id")
        }
        try unit.deletePasskey(id: passkey.id)
        try unit.appendEvent(try events.passkeyRemoved(user: stored.id, passkey: passkey))
        var user = stored
        if others == 0 { user.providers.removeAll { $0 == "passkey" } }
        return FlowAnswer(
            result: .accepted(requestID: requestID, user: user.payload), userID: user.id, sessionID: session.id)
    }
}

// MARK: - Handlers (registered in `LoginMethod.handler`)

extension MethodHandler {
    static let passkeyRegisterOptions = MethodHandler(
        audited: false, .atOnce { try $0.preparePasskeyRegisterOptions($1) })
    static let passkeyRegister = MethodHandler(audited: true, .atOnce { try $0.preparePasskeyRegister($1) })
    static let passkeyLoginOptions = MethodHandler(audited: false, .atOnce { try $0.preparePasskeyLoginOptions($1) })
    static let passkeyLogin = MethodHandler(audited: true, .atOnce { try $0.preparePasskeyLogin($1) })
    static let passkeyList = MethodHandler(audited: false, .atOnce { try $0.preparePasskeyList($1) })
    static let passkeyRename = MethodHandler(audited: true, .atOnce { try $0.preparePasskeyRename($1) })
    static let passkeyRemove = MethodHandler(audited: true, .waits { try await $0.preparePasskeyRemove($1) })
}
