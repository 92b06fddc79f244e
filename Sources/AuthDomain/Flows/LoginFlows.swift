import AuthCrypto
import Foundation
import JOSE
import Messages
import Passwords
import ServiceKit
import WebAuthn

/// A request prepared for its write: everything decided that needs no database.
///
/// `write` runs inside the batch's transaction, on the database's thread, after every request
/// before it in the batch: it reads what it must decide on through the unit of work, writes, and
/// returns the answer. Throwing a `LoginError` refuses the request and drops its writes.
public protocol PreparedWrite: Sendable {
    /// The rows `write` will read, fetched for the whole batch in one round trip (a hint: reads
    /// of anything else still work, one round trip each).
    var prefetch: Prefetch { get }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer
}

/// What a request's write decided: the answer, and what it concerns.
public struct FlowAnswer: Sendable {
    public var result: LoginResultData
    public var userID: UUID?
    public var sessionID: UUID?

    public init(result: LoginResultData, userID: UUID?, sessionID: UUID?) {
        self.result = result
        self.userID = userID
        self.sessionID = sessionID
    }
}

extension FlowAnswer {
    /// An error answer whose request still wrote something (a wrong code counted against its
    /// limit): returned, not thrown, so those writes are kept.
    static func refused(_ error: LoginError, requestID: String, userID: UUID?) -> FlowAnswer {
        FlowAnswer(result: .failure(requestID: requestID, error: error.payload), userID: userID, sessionID: nil)
    }
}

/// Counts password attempts before they are verified, and reads the credential to verify; takes
/// rate-limited uses before the work they allow.
public protocol PasswordAttempts: Sendable {
    func reservePasswordAttempt(key: String, email: String?, at date: Date, policy: ThrottlePolicy) async throws
        -> PasswordAttempt
    /// Takes up to `wanted` uses of each bucket's current window, in order, each in its own
    /// atomic step shared by every replica; answers what each granted. A bucket that grants
    /// fewer than wanted ends it: the buckets after it are not touched, and not answered.
    func reserveRateLimits(_ reservations: [RateLimitReservation], at date: Date) async throws -> [RateLimitGrant]
    /// The address of the password identity of the user an access token signs in as (by its
    /// session id, or an opaque token's SHA-256); nil when there is none.
    func passwordEmail(sessionID: UUID?, accessTokenHash: [UInt8]?) async throws -> String?
}

/// Uses of a rate-limited bucket asked for.
public struct RateLimitReservation: Sendable, Equatable {
    public var bucket: String
    public var limit: WorkerConfiguration.RateLimit
    public var wanted: Int

    public init(bucket: String, limit: WorkerConfiguration.RateLimit, wanted: Int) {
        self.bucket = bucket
        self.limit = limit
        self.wanted = wanted
    }
}

/// Uses granted, and when the bucket's window ends (when to try again if none were).
public struct RateLimitGrant: Sendable, Equatable {
    public var granted: Int
    public var windowEnd: Date

    public init(granted: Int, windowEnd: Date) {
        self.granted = granted
        self.windowEnd = windowEnd
    }
}

/// The login flows. Each reads top to bottom in two steps: `prepare` validates the request and
/// computes what needs no database (verifies tokens, hashes passwords, makes ids and secrets),
/// in parallel with the rest of the batch; the prepared value's `write` then decides and writes
/// through the batch's unit of work.
///
/// Definite refusals are thrown as `LoginError`; anything else thrown (a database that is down,
/// a key set that cannot be fetched for a notification) is for the caller to retry.
public struct LoginFlows: Sendable {
    package let configuration: WorkerConfiguration
    let accessTokens: any AccessTokenIssuer
    package let providers: IdentityProviders
    let passwords: PasswordService?
    let attempts: any PasswordAttempts
    let clock: any WorkerClock
    let identifiers: Identifiers
    let logger: Logger
    /// Derived once from the configuration's keys (nil when the feature is off), not per request.
    let emailCodeKeys: CodeKeys?
    let phoneCodeKeys: CodeKeys?
    let secondFactorKeys: FactorKeys?
    /// Seals Apple's authorization codes and refresh tokens; nil unless Apple's REST API is configured.
    let appleTokenKeys: AppleTokenKeys?
    /// The passkeys' relying party; nil unless `AUTH_WEBAUTHN_RP_ID` is set.
    let relyingParty: RelyingParty?
    /// Makes the stand-in credentials `passkey_login_options` lists for an address without
    /// passkeys; nil without a results key to derive it from.
    let passkeyStandIns: PasskeyStandIns?
    /// What a new password is held to: the password service's policy with this configuration's
    /// context words (a tenant's own, `AUTH_PASSWORD_CONTEXT_WORDS`).
    let passwordPolicy: PasswordPolicy

    public init(
        configuration: WorkerConfiguration, accessTokens: any AccessTokenIssuer,
        providers: IdentityProviders = IdentityProviders([]), passwords: PasswordService? = nil,
        attempts: any PasswordAttempts, clock: any WorkerClock, identifiers: Identifiers, logger: Logger
    ) {
        self.configuration = configuration
        self.accessTokens = accessTokens
        self.providers = providers
        self.passwords = passwords
        self.attempts = attempts
        self.clock = clock
        self.identifiers = identifiers
        self.logger = logger
        emailCodeKeys = CodeKeys.mail(configuration)
        phoneCodeKeys = CodeKeys.sms(configuration)
        secondFactorKeys = FactorKeys(configuration: configuration)
        appleTokenKeys = configuration.appleTokens.isEnabled ? AppleTokenKeys(configuration: configuration) : nil
        passkeyStandIns = configuration.resultsKey.map(PasskeyStandIns.init(resultsKey:))
        var policy = passwords?.policy ?? PasswordPolicy()
        policy.contextWords = configuration.accounts.passwordContextWords
        passwordPolicy = policy
        let passkeys = configuration.passkeys
        relyingParty = passkeys.rpID.map { id in
            RelyingParty(
                id: id, name: passkeys.rpName ?? id, origins: passkeys.origins,
                userVerification: RelyingParty.UserVerification(rawValue: passkeys.userVerification) ?? .required)
        }
    }

    /// The events a request causes, stamped with its trace and time.
    func events(for request: LoginRequest, at date: Date) -> EventFactory {
        var events = EventFactory(configuration, identifiers: identifiers, traceparent: request.traceparent, now: date)
        if let tenant = request.tenant, tenant != Tenant.defaultName { events.tenant = tenant }
        return events
    }

    /// A new session's ids, secrets and lifetimes.
    func pendingSession(at date: Date, isGuest: Bool) throws -> PendingSession {
        try PendingSession(
            identifiers: identifiers, lifetimes: configuration.sessions, now: date, isGuest: isGuest,
            issuer: accessTokens)
    }

    /// Handles to try for a new user, shortest first: the random part grows until one is free,
    /// so a handle is always found however crowded a name is. Users without a name of their own
    /// (guests, and a first Sign in with Apple that shares none, all `apple_user_…`), who are
    /// many under one prefix, start where collisions are rare: with two bytes, one such sign-up in
    /// six collided after 10,000 of them, each collision a round trip, and two writers inserting
    /// the same handle had to wait for each other.
    /// - Parameter shared: `name` is a stand-in many users get (`Apple user`), not the user's.
    func handleCandidates(name: String?, isGuest: Bool, shared: Bool = false) throws -> [String] {
        let slug = name.map(Identifiers.slug) ?? ""
        let named = !shared && !slug.isEmpty
        return try (named ? [2, 3, 4, 6] : [4, 6, 8]).map {
            try identifiers.handle(slug: slug, isGuest: isGuest, bytes: $0)
        }
    }

    // MARK: - Access tokens presented by clients

    /// An access token a request presents (`link_to`, logout), checked as far as it can be without
    /// the database: a JWT's signature, issuer, audience and (unless `allowExpired`) expiry.
    /// - Throws: `invalid_token` naming `field`.
    func presentedToken(_ token: String, field: String, allowExpired: Bool, at date: Date) throws
        -> PresentedAccessToken
    {
        // Tokens are printable ASCII without spaces: one with padding, a line break or anything
        // else around it is not the token that was issued.
        guard !token.isEmpty, token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw PresentedAccessToken.invalid(field: field)
        }
        if token.split(separator: ".", omittingEmptySubsequences: false).count == 3,
            let jwt = accessTokens as? JWTAccessTokenIssuer
        {
            guard let claims = try? jwt.verify(token, now: allowExpired ? .distantPast : date) else {
                throw PresentedAccessToken.invalid(field: field)
            }
            return .jwt(claims)
        }
        return .opaque(hash: SHA256.hash(token))
    }
}

/// An access token presented by a client, before its session is looked up.
enum PresentedAccessToken: Sendable {
    case jwt(AccessTokenClaims)
    /// An opaque token, by its SHA-256 (the only form the database knows).
    case opaque(hash: [UInt8])

    var prefetch: Prefetch {
        var prefetch = Prefetch()
        switch self {
        case .jwt(let claims): prefetch.sessions = [claims.sessionID]
        case .opaque(let hash): prefetch.accessTokens = [hash]
        }
        return prefetch
    }

    static func invalid(field: String) -> LoginError {
        LoginError(.invalidToken, "\(field.dropFirst(5)) is not a valid access token", field: field)
    }

    /// The live session the token belongs to; an opaque token's use is recorded.
    /// - Parameter allowExpired: accept a token whose short lifetime has passed while its session
    ///   lives (logging out with a stale token is fine; linking is not).
    /// - Throws: `invalid_token` naming `field`.
    func session(in unit: any UnitOfWork, at date: Date, allowExpired: Bool, field: String) throws -> SessionRecord {
        switch self {
        case .jwt(let claims):
            guard let session = try unit.session(id: claims.sessionID), session.userID == claims.userID,
                session.revokedAt == nil, allowExpired || session.expiresAt > date
            else { throw Self.invalid(field: field) }
            return session
        case .opaque(let hash):
            guard let token = try unit.accessToken(hash: hash), token.session.revokedAt == nil,
                allowExpired || min(token.expiresAt, token.session.expiresAt) > date
            else { throw Self.invalid(field: field) }
            try unit.recordAccessTokenUse(tokenID: token.id, at: date)
            return token.session
        }
    }
}

/// A session whose ids, refresh token and lifetimes are decided before the write; its access
/// token is signed once the user is known (a JWT names its user).
struct PendingSession: Sendable {
    let sessionID: UUID
    let accessID: UUID
    let refreshID: UUID
    let refreshToken: String
    let now: Date
    let accessExpiry: Date
    let refreshExpiry: Date
    let sessionExpiry: Date
    let abilities: [String]
    let isGuest: Bool
    let issuer: any AccessTokenIssuer

    init(
        identifiers: Identifiers, lifetimes: WorkerConfiguration.Sessions, now: Date, isGuest: Bool,
        issuer: any AccessTokenIssuer
    ) throws {
        sessionID = try identifiers.uuid()
        accessID = try identifiers.uuid()
        refreshID = try identifiers.uuid()
        refreshToken = "rt_" + (try identifiers.secret(characters: 48))
        self.now = now
        sessionExpiry = now + lifetimes.sessionLifetime
        accessExpiry = min(now + lifetimes.accessTokenLifetime, sessionExpiry)
        refreshExpiry = min(now + lifetimes.refreshTokenLifetime, sessionExpiry)
        abilities = isGuest ? lifetimes.guestAbilities : lifetimes.memberAbilities
        self.isGuest = isGuest
        self.issuer = issuer
    }

    /// Signs (or makes) the access token for `userID`.
    func accessToken(for userID: UUID) throws -> String {
        try issuer.issue(
            AccessTokenClaims(
                tokenID: accessID, userID: userID, sessionID: sessionID, abilities: abilities, isGuest: isGuest,
                issuedAt: now, expiresAt: accessExpiry))
    }

    /// The session row with its tokens' hashes.
    func session(provider: String, device: LoginRequestData.Device?, accessToken: String) -> NewSession {
        NewSession(
            id: sessionID, provider: provider, deviceName: device?.name, devicePlatform: device?.platform,
            abilities: abilities, createdAt: now, expiresAt: sessionExpiry, accessTokenID: accessID,
            accessTokenHash: issuer.isSelfContained ? nil : SHA256.hash(accessToken),
            accessTokenExpiresAt: accessExpiry, refreshTokenID: refreshID,
            refreshTokenHash: SHA256.hash(refreshToken), refreshTokenExpiresAt: refreshExpiry)
    }

    /// Signs the access token, writes the session for `user`, and answers it: how every sign-in
    /// that ends in a session ends.
    func open(
        for user: StoredUser, provider: String, device: LoginRequestData.Device?, newUser: Bool, requestID: String,
        in unit: any UnitOfWork
    ) throws -> FlowAnswer {
        // Every sign-in ends here: a disabled account gets no session, whatever proved it.
        guard !user.isDisabled else { throw LoginError.accountDisabled }
        let accessToken = try accessToken(for: user.id)
        try unit.insertSession(session(provider: provider, device: device, accessToken: accessToken), userID: user.id)
        return FlowAnswer(
            result: .ok(
                requestID: requestID, user: user.payload, newUser: newUser, session: payload(accessToken: accessToken)),
            userID: user.id, sessionID: sessionID)
    }

    /// What the client receives.
    func payload(accessToken: String) -> SessionPayload {
        SessionPayload(
            accessToken: accessToken, expiresAt: Timestamp.format(accessExpiry), refreshToken: refreshToken,
            refreshExpiresAt: Timestamp.format(refreshExpiry), abilities: abilities)
    }
}

extension StoredUser {
    /// The user as results show it.
    var payload: UserPayload {
        UserPayload(
            id: id.lowercasedString, handle: handle, name: name, email: email, emailVerified: emailVerified,
            isPrivateEmail: isPrivateEmail, isGuest: isGuest, providers: providers,
            createdAt: Timestamp.format(createdAt), phone: phone)
    }
}

extension UUID {
    /// The canonical lower-case form used on the wire, written directly (`uuidString` formats
    /// through `sprintf`, then `lowercased()` copies it; a login makes a dozen of these).
    public var lowercasedString: String {
        withUnsafeBytes(of: uuid) { bytes in
            String(unsafeUninitializedCapacity: 36) { out in
                var index = 0
                for (position, byte) in bytes.enumerated() {
                    if position == 4 || position == 6 || position == 8 || position == 10 {
                        out[index] = UInt8(ascii: "-")
                        index += 1
                    }
                    out[index] = Hex.digit(byte >> 4)
                    out[index + 1] = Hex.digit(byte & 0x0F)
                    index += 2
                }
                return index
            }
        }
    }
}

extension String {
    var nilIfEmpty: String? { isEmpty ? nil : self }

    /// Without leading and trailing Unicode whitespace (spaces, tabs, line breaks, no-break spaces).
    func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
            let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })
        else { return "" }
        if first == scalars.startIndex, last == scalars.index(before: scalars.endIndex) { return self }
        return String(scalars[first...last])
    }
}
