import AuthCrypto
import Foundation
import Messages
import StrictJSON

/// The keys of second factors, derived from the results key: one seals TOTP secrets at rest
/// (bound to their user), one seals the `mfa_token` of an `mfa_required` answer.
struct FactorKeys: Sendable {
    let secrets: [UInt8]
    let tokens: [UInt8]

    /// Nil without a results key to derive them from.
    init?(configuration: WorkerConfiguration) {
        guard let results = configuration.resultsKey else { return nil }
        secrets = HMACSHA256.mac(key: results, message: Array("auth-worker mfa secrets".utf8))
        tokens = HMACSHA256.mac(key: results, message: Array("auth-worker mfa tokens".utf8))
    }

    func sealSecret(_ secret: [UInt8], userID: UUID) throws -> [UInt8] {
        try AESGCM.seal(secret, key: secrets, aad: Array("totp\u{0}\(userID.lowercasedString)".utf8)).combined
    }

    func openSecret(_ sealed: [UInt8], userID: UUID) -> [UInt8]? {
        guard let box = AESGCM.Sealed(combined: sealed) else { return nil }
        return AESGCM.open(box, key: secrets, aad: Array("totp\u{0}\(userID.lowercasedString)".utf8))
    }
}

/// What an `mfa_token` carries: who passed the first factor, how, on which device, until when.
struct MFATicket: Decodable, Sendable, JSONWritable {
    /// Random: the ticket is good for one sign-in, spent by the id.
    var id: String?
    var userID: String
    var provider: String
    var deviceName: String?
    var devicePlatform: String?
    var expiresAt: Int64

    enum CodingKeys: String, CodingKey {
        case id = "i"
        case userID = "u"
        case provider = "p"
        case deviceName = "dn"
        case devicePlatform = "dp"
        case expiresAt = "exp"
    }

    func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("dn", deviceName)
            out.member("dp", devicePlatform)
            out.member("exp", expiresAt)
            out.member("i", id)
            out.member("p", provider)
            out.member("u", userID)
        }
    }

    static let prefix = "mt_"
    static let aad = Array("auth-worker mfa_token".utf8)

    func token(key: [UInt8]) throws -> String {
        Self.prefix
            + Base64URL.encode(try AESGCM.seal(MessageCoding.encode(self), key: key, aad: Self.aad).combined)
    }

    static func open(_ token: String, key: [UInt8]) -> MFATicket? {
        guard token.hasPrefix(prefix), let bytes = Base64URL.decode(String(token.dropFirst(prefix.count))),
            let box = AESGCM.Sealed(combined: bytes), let json = AESGCM.open(box, key: key, aad: aad)
        else { return nil }
        return try? MessageCoding.decode(MFATicket.self, from: json)
    }
}

/// What a sign-in needs to stop at the second factor: the key its `mfa_token` is sealed with.
struct MFAGate: Sendable {
    let tokenKey: [UInt8]
    let lifetime: TimeInterval

    /// The `mfa_required` answer when the user has an active factor; nil otherwise.
    func answer(
        requestID: String, user: UUID, provider: String, device: LoginRequestData.Device?, in unit: any UnitOfWork,
        at now: Date
    ) throws -> FlowAnswer? {
        guard let factor = try unit.mfaFactor(userID: user), factor.enabledAt != nil else { return nil }
        // A disabled account is refused before its second factor is asked for, not after.
        if try unit.user(id: user)?.isDisabled == true { throw LoginError.accountDisabled }
        let ticket = MFATicket(
            id: Base64URL.encode(try SecureRandom.bytes(16)), userID: user.lowercasedString, provider: provider,
            deviceName: device?.name,
            devicePlatform: device?.platform, expiresAt: Int64((now + lifetime).timeIntervalSince1970))
        var error = LoginError(
            .mfaRequired, "this account has a second factor: send mfa_challenge with the mfa_token and a code"
        ).payload
        error.mfaToken = try ticket.token(key: tokenKey)
        return FlowAnswer(result: .failure(requestID: requestID, error: error), userID: user, sessionID: nil)
    }
}

extension LoginFlows {
    /// The factor keys, or `unsupported_method` when this worker has no results key to derive them from.
    func factorKeys() throws -> FactorKeys {
        guard let secondFactorKeys else {
            throw LoginError(
                .unsupportedMethod, "second factors are not enabled on this worker (AUTH_RESULTS_KEY_FILE)")
        }
        return secondFactorKeys
    }

    /// The gate sign-ins pass through; nil when second factors are off.
    func mfaGate() -> MFAGate? {
        secondFactorKeys.map { MFAGate(tokenKey: $0.tokens, lifetime: configuration.mfa.challengeLifetime) }
    }

    /// The factor code a request brings: a TOTP code or a recovery code.
    func presentedFactorCode(_ data: LoginRequestData) -> PresentedFactorCode {
        if let recovery = data.recoveryCode { return .recovery(hash: Self.recoveryHash(recovery)) }
        return .totp(data.code ?? "")
    }

    /// Recovery codes compare without case, spaces or dashes.
    static func recoveryHash(_ code: String) -> [UInt8] {
        SHA256.hash(String(code.lowercased().filter { $0.isLetter || $0.isNumber }))
    }

    // MARK: - Enrolment

    /// `mfa_enroll`: a new TOTP secret for the signed-in account, pending until `mfa_verify`.
    /// Asks for a recent sign-in or the password (`Reauthentication`).
    func prepareMFAEnroll(_ request: LoginRequest) async throws -> any PreparedWrite {
        let keys = try factorKeys()
        let now = clock.now()
        let token = try presentedToken(
            request.data.accessToken ?? "", field: "data.access_token", allowExpired: false, at: now)
        return MFAEnroll(
            requestID: request.id, token: token,
            reauthentication: try await reauthentication(request, token: token, at: now),
            secret: try SecureRandom.bytes(20), keys: keys, issuer: configuration.mfa.issuer, now: now)
    }

    /// How factor codes are checked for a request: the limit, its escalation, the lock event.
    func factorCheck(_ keys: FactorKeys, request: LoginRequest, at now: Date) -> FactorCheck {
        FactorCheck(
            keys: keys, limit: configuration.mfa.attempts, horizon: configuration.mfa.lockoutHorizon,
            events: events(for: request, at: now))
    }

    /// `mfa_verify`: the first code from the app activates the factor; the answer shows the
    /// recovery codes, once.
    /// Asks for a recent sign-in, the password, or a pending factor enrolled that recently (its
    /// enrolment asked for the same).
    func prepareMFAVerify(_ request: LoginRequest) async throws -> any PreparedWrite {
        let keys = try factorKeys()
        let now = clock.now()
        let recoveryCodes = try (0..<10).map { _ -> String in
            let text = Base32.encode(try SecureRandom.bytes(8)).prefix(12).lowercased()
            return "\(text.prefix(4))-\(text.dropFirst(4).prefix(4))-\(text.dropFirst(8))"
        }
        let token = try presentedToken(
            request.data.accessToken ?? "", field: "data.access_token", allowExpired: false, at: now)
        return MFAVerify(
            requestID: request.id, token: token,
            reauthentication: try await reauthentication(request, token: token, at: now), code: request.data.code ?? "",
            recoveryCodes: recoveryCodes, keys: keys, check: factorCheck(keys, request: request, at: now),
            events: events(for: request, at: now), now: now)
    }

    /// `mfa_challenge`: the `mfa_token` of an `mfa_required` answer and a code finish the sign-in.
    func prepareMFAChallenge(_ request: LoginRequest) throws -> any PreparedWrite {
        let keys = try factorKeys()
        let now = clock.now()
        guard let ticket = MFATicket.open(request.data.mfaToken ?? "", key: keys.tokens),
            let userID = UUID(uuidString: ticket.userID), let ticketID = ticket.id
        else {
            throw LoginError(.invalidToken, "mfa_token is not one this worker issued", field: "data.mfa_token")
        }
        guard Double(ticket.expiresAt) > now.timeIntervalSince1970 else {
            throw LoginError(.tokenExpired, "mfa_token has expired: sign in again", field: "data.mfa_token")
        }
        return MFAChallenge(
            requestID: request.id, userID: userID, ticketID: ticketID,
            ticketLifetime: configuration.mfa.challengeLifetime,
            provider: ticket.provider, device: .init(name: ticket.deviceName, platform: ticket.devicePlatform),
            code: presentedFactorCode(request.data), check: factorCheck(keys, request: request, at: now),
            pending: try pendingSession(at: now, isGuest: false), now: now)
    }

    /// `mfa_remove`: a code (or a recovery code) removes the factor.
    func prepareMFARemove(_ request: LoginRequest) throws -> any PreparedWrite {
        let keys = try factorKeys()
        let now = clock.now()
        return MFARemove(
            requestID: request.id,
            token: try presentedToken(
                request.data.accessToken ?? "", field: "data.access_token", allowExpired: false, at: now),
            code: presentedFactorCode(request.data), keys: keys, check: factorCheck(keys, request: request, at: now),
            events: events(for: request, at: now), now: now)
    }
}

/// A second-factor code as a request brings it.
enum PresentedFactorCode: Sendable {
    case totp(String)
    /// A recovery code, by its SHA-256.
    case recovery(hash: [UInt8])
}

/// Checks factor codes inside the write: guesses counted per user, a TOTP code accepted once.
///
/// `limit.count` wrong codes in a window lock the factor until the window ends, announced as
/// `auth.mfa.locked`; each lock in the last `horizon` doubles the window (5 minutes, then 10,
/// 20, … up to a day), so guessing with the password in hand gets a few dozen tries a day, not
/// fourteen hundred.
struct FactorCheck {
    let keys: FactorKeys
    let limit: WorkerConfiguration.RateLimit
    let horizon: TimeInterval
    let events: EventFactory

    enum Outcome {
        /// The code is right: the step to record, or the recovery code to spend.
        case accepted(step: Int64?, recovery: [UInt8]?)
        /// Wrong (counted): answered with this error, the count kept.
        case wrong(LoginError)
    }

    /// The window after `locks` locks in the horizon.
    func window(afterLocks locks: Int) -> TimeInterval {
        min(limit.window * pow(2, Double(min(locks, 20))), max(horizon, limit.window))
    }

    /// - Throws: `too_many_attempts` while the factor is locked, `retry_after` at the lock's end.
    func check(
        _ code: PresentedFactorCode, factor: MFAFactorRecord, in unit: any UnitOfWork, at now: Date,
        allowRecovery: Bool = true
    ) throws -> Outcome {
        let user = factor.userID.lowercasedString
        let bucket = "mfa:" + user
        let lockBucket = "mfa-locks:" + user
        var locks = 0
        var current = RateLimitWindow(count: 0, endsAt: now)
        if limit.count > 0 {
            locks = try unit.rateLimitUsage(bucket: lockBucket, at: now, window: horizon)
            current = try unit.rateLimitWindow(bucket: bucket, at: now, window: window(afterLocks: locks))
            if current.count >= limit.count {
                throw LoginError.tooManyAttempts(
                    until: current.endsAt, now: now, message: "too many wrong codes for this account; try later")
            }
        }
        func wrong(_ message: String) throws -> Outcome {
            if limit.count > 0 {
                let length = window(afterLocks: locks)
                try unit.recordRateLimitedUse(bucket: bucket, at: now, window: length)
                if current.count + 1 >= limit.count {
                    // This guess locks the factor; the lock lengthens the window it ends.
                    try unit.recordRateLimitedUse(bucket: lockBucket, at: now, window: horizon)
                    let until = current.endsAt - length + window(afterLocks: locks + 1)
                    try unit.appendEvent(
                        try events.mfaLocked(
                            user: factor.userID, failures: current.count + 1, lockouts: locks + 1, until: until))
                }
            }
            return .wrong(LoginError(.invalidCode, message, field: "data.code"))
        }
        switch code {
        case .recovery(let hash):
            guard allowRecovery, try unit.hasUnusedRecoveryCode(userID: factor.userID, hash: hash) else {
                return try wrong("the recovery code is wrong or used")
            }
            return .accepted(step: nil, recovery: hash)
        case .totp(let text):
            guard let secret = keys.openSecret(factor.secretSealed, userID: factor.userID) else {
                throw LoginError(.internalError, "the second factor's secret does not open", retriable: false)
            }
            guard let step = TOTP.matchingStep(text, secret: secret, at: now) else {
                return try wrong("the code is wrong")
            }
            // Each code works once: its step, and every step before it, is spent.
            guard step > (factor.lastUsedStep ?? .min) else {
                return try wrong("the code was used already: wait for the next one")
            }
            return .accepted(step: step, recovery: nil)
        }
    }

    /// Spends what was accepted.
    static func spend(
        _ outcome: (step: Int64?, recovery: [UInt8]?), userID: UUID, in unit: any UnitOfWork, at now: Date
    )
        throws
    {
        if let step = outcome.step { try unit.recordFactorStep(userID: userID, step: step) }
        if let hash = outcome.recovery { try unit.useRecoveryCode(userID: userID, hash: hash, at: now) }
    }
}

// MARK: - The writes

/// The signed-in user a factor request concerns: never a guest.
private func signedInMember(_ token: PresentedAccessToken, in unit: any UnitOfWork, at now: Date) throws -> (
    SessionRecord, StoredUser
) {
    let (session, user) = try signedIn(token, in: unit, at: now)
    guard !user.isGuest else {
        throw LoginError(.malformedRequest, "a guest cannot have a second factor", field: "data.access_token")
    }
    return (session, user)
}

/// `mfa_enroll`, ready to write.
struct MFAEnroll: PreparedWrite {
    let requestID: String
    let token: PresentedAccessToken
    let reauthentication: Reauthentication
    let secret: [UInt8]
    let keys: FactorKeys
    let issuer: String
    let now: Date

    var prefetch: Prefetch {
        var prefetch = token.prefetch
        prefetch.merge(reauthentication.prefetch)
        return prefetch
    }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let (session, user) = try signedInMember(token, in: unit, at: now)
        try reauthentication.require(for: session, in: unit, at: now, field: "data.password")
        if try unit.mfaFactor(userID: user.id)?.enabledAt != nil {
            throw LoginError(
                .malformedRequest, "a second factor is active already: remove it first", field: "data.access_token")
        }
        try unit.savePendingFactor(userID: user.id, secretSealed: try keys.sealSecret(secret, userID: user.id), at: now)
        let encoded = Base32.encode(secret)
        var result = LoginResultData.accepted(requestID: requestID, user: user.payload)
        result.mfa = MFAPayload(secret: encoded, otpauthURI: Self.uri(secret: encoded, issuer: issuer, user: user))
        return FlowAnswer(result: result, userID: user.id, sessionID: session.id)
    }

    /// `otpauth://totp/ISSUER:ACCOUNT?secret=…&issuer=…&algorithm=SHA1&digits=6&period=30`.
    static func uri(secret: String, issuer: String, user: StoredUser) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~@")
        func escape(_ text: String) -> String { text.addingPercentEncoding(withAllowedCharacters: allowed) ?? "" }
        let account = user.email ?? user.handle
        return "otpauth://totp/\(escape(issuer)):\(escape(account))?secret=\(secret)&issuer=\(escape(issuer))"
            + "&algorithm=SHA1&digits=6&period=30"
    }
}

/// `mfa_verify`, ready to write.
struct MFAVerify: PreparedWrite {
    let requestID: String
    let token: PresentedAccessToken
    let reauthentication: Reauthentication
    let code: String
    let recoveryCodes: [String]
    let keys: FactorKeys
    let check: FactorCheck
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch {
        var prefetch = token.prefetch
        prefetch.merge(reauthentication.prefetch)
        return prefetch
    }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let (session, user) = try signedInMember(token, in: unit, at: now)
        guard let factor = try unit.mfaFactor(userID: user.id) else {
            throw LoginError(.malformedRequest, "no second factor to verify: send mfa_enroll first", field: "data.code")
        }
        guard factor.enabledAt == nil else {
            throw LoginError(.malformedRequest, "the second factor is active already", field: "data.code")
        }
        // The enrolment asked for a recent sign-in: finishing it soon after asks for no more.
        if now.timeIntervalSince(factor.createdAt) > reauthentication.maxAge {
            try reauthentication.require(for: session, in: unit, at: now, field: "data.password")
        }
        switch try check.check(.totp(code), factor: factor, in: unit, at: now, allowRecovery: false) {
        case .wrong(let error):
            return .refused(error, requestID: requestID, userID: user.id)
        case .accepted(let step, _):
            try unit.enableFactor(
                userID: user.id, step: step ?? TOTP.step(at: now),
                recoveryHashes: recoveryCodes.map(LoginFlows.recoveryHash), at: now)
        }
        try unit.appendEvent(try events.mfaChanged(user: user.id, enabled: true))
        var result = LoginResultData.accepted(requestID: requestID, user: user.payload)
        result.mfa = MFAPayload(recoveryCodes: recoveryCodes)
        return FlowAnswer(result: result, userID: user.id, sessionID: session.id)
    }
}

/// `mfa_challenge`, ready to write.
struct MFAChallenge: PreparedWrite {
    let requestID: String
    let userID: UUID
    /// The `mfa_token`'s id: spent by the sign-in it finishes.
    let ticketID: String
    let ticketLifetime: TimeInterval
    let provider: String
    let device: LoginRequestData.Device?
    let code: PresentedFactorCode
    let check: FactorCheck
    let pending: PendingSession
    let now: Date

    var prefetch: Prefetch {
        var prefetch = Prefetch()
        prefetch.users = [userID]
        // Not the token's bucket: it is read after the factor's row is locked, so two replicas
        // finishing with one token are ordered by that lock and the second sees it spent.
        return prefetch
    }

    private var ticketBucket: String { "mfa-token:" + ticketID }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        guard let factor = try unit.mfaFactor(userID: userID), factor.enabledAt != nil,
            let user = try unit.user(id: userID)
        else {
            throw LoginError(
                .invalidToken, "mfa_token is for an account without a second factor now", field: "data.mfa_token")
        }
        guard try unit.rateLimitUsage(bucket: ticketBucket, at: now, window: ticketLifetime) == 0 else {
            throw LoginError(
                .invalidToken, "mfa_token finished a sign-in already: sign in again", field: "data.mfa_token")
        }
        switch try check.check(code, factor: factor, in: unit, at: now) {
        case .wrong(let error):
            return .refused(error, requestID: requestID, userID: userID)
        case .accepted(let step, let recovery):
            try FactorCheck.spend((step, recovery), userID: userID, in: unit, at: now)
            try unit.recordRateLimitedUse(bucket: ticketBucket, at: now, window: ticketLifetime)
        }
        return try pending.open(
            for: user, provider: provider, device: device, newUser: false, requestID: requestID, in: unit)
    }
}

/// `mfa_remove`, ready to write.
struct MFARemove: PreparedWrite {
    let requestID: String
    let token: PresentedAccessToken
    let code: PresentedFactorCode
    let keys: FactorKeys
    let check: FactorCheck
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch { token.prefetch }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let (session, user) = try signedInMember(token, in: unit, at: now)
        guard let factor = try unit.mfaFactor(userID: user.id), factor.enabledAt != nil else {
            throw LoginError(.malformedRequest, "this account has no active second factor", field: "data.access_token")
        }
        switch try check.check(code, factor: factor, in: unit, at: now) {
        case .wrong(let error):
            return .refused(error, requestID: requestID, userID: user.id)
        case .accepted:
            try unit.deleteFactor(userID: user.id)
        }
        try unit.appendEvent(try events.mfaChanged(user: user.id, enabled: false))
        return FlowAnswer(
            result: .accepted(requestID: requestID, user: user.payload), userID: user.id, sessionID: session.id)
    }
}

// MARK: - Handlers (registered in `LoginMethod.handler`)

extension MethodHandler {
    static let mfaEnroll = MethodHandler(
        audited: true, .waits { try await $0.prepareMFAEnroll($1) }, reads: .withPassword)
    static let mfaVerify = MethodHandler(
        audited: true, .waits { try await $0.prepareMFAVerify($1) }, reads: .withPassword)
    static let mfaChallenge = MethodHandler(audited: true, .atOnce { try $0.prepareMFAChallenge($1) })
    static let mfaRemove = MethodHandler(audited: true, .atOnce { try $0.prepareMFARemove($1) })
}
