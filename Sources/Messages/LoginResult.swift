/// The `data` of an `auth.login.result` event.
public struct LoginResultData: Decodable, Sendable, Equatable {
    public var requestId: String
    /// `ok` or `error`.
    public var status: String
    public var user: UserPayload?
    public var newUser: Bool?
    public var session: SessionPayload?
    /// A compact JWE holding the session, when the request had a `reply_key`.
    public var sealedSession: String?
    /// The answer to `introspect` (RFC 7662's members).
    public var introspection: IntrospectionPayload?
    /// The second factor's secret (`mfa_enroll`) or recovery codes (`mfa_verify`): shown once.
    public var mfa: MFAPayload?
    /// `mfa` as a compact JWE, when the request had a `reply_key`.
    public var sealedMFA: String?
    /// The answer to `sessions_list`: the user's live sessions.
    public var sessions: [SessionInfoPayload]?
    /// The answer to `account_export`: the export (`AccountExportPayload`) as a compact JWE to the
    /// request's `reply_key`; it is never sent in clear.
    public var sealedExport: String?
    /// The options of a passkey ceremony (`passkey_register_options`, `passkey_login_options`).
    public var passkeyOptions: PasskeyOptionsPayload?
    /// The passkey registered (`passkey_register`) or renamed (`passkey_rename`).
    public var passkey: PasskeyPayload?
    /// The user's passkeys (`passkey_list`).
    public var passkeys: [PasskeyPayload]?
    public var error: ErrorPayload?

    enum CodingKeys: String, CodingKey {
        case status, user, session, error, introspection, mfa, sessions, passkey, passkeys
        case passkeyOptions = "passkey_options"
        case sealedMFA = "sealed_mfa"
        case sealedExport = "sealed_export"
        case requestId = "request_id"
        case newUser = "new_user"
        case sealedSession = "sealed_session"
    }

    /// A success.
    public static func ok(requestID: String, user: UserPayload, newUser: Bool, session: SessionPayload)
        -> LoginResultData
    {
        LoginResultData(
            requestId: requestID, status: "ok", user: user, newUser: newUser, session: session, sealedSession: nil,
            error: nil)
    }

    /// A success that issues nothing (logout).
    public static func signedOut(requestID: String, user: UserPayload) -> LoginResultData {
        LoginResultData(
            requestId: requestID, status: "ok", user: user, newUser: nil, session: nil, sealedSession: nil, error: nil)
    }

    /// A success that issues nothing and may show nobody (a reset asked for an address that may
    /// have no account: the answer is the same either way).
    public static func accepted(requestID: String, user: UserPayload?) -> LoginResultData {
        LoginResultData(
            requestId: requestID, status: "ok", user: user, newUser: nil, session: nil, sealedSession: nil, error: nil)
    }

    /// A failure.
    public static func failure(requestID: String, error: ErrorPayload) -> LoginResultData {
        LoginResultData(
            requestId: requestID, status: "error", user: nil, newUser: nil, session: nil, sealedSession: nil,
            error: error)
    }

    /// The answer to `introspect`.
    public static func introspected(requestID: String, _ introspection: IntrospectionPayload) -> LoginResultData {
        var result = LoginResultData(
            requestId: requestID, status: "ok", user: nil, newUser: nil, session: nil, sealedSession: nil, error: nil)
        result.introspection = introspection
        return result
    }

    /// The CloudEvent type of a result.
    public static let eventType = "auth.login.result"
}

/// What an access token stands for, as RFC 7662 (OAuth 2.0 Token Introspection) answers it:
/// `active` false and nothing else for a token that is unknown, malformed, expired, or whose
/// session has ended.
public struct IntrospectionPayload: Decodable, Sendable, Equatable {
    public var active: Bool
    /// The user id.
    public var sub: String?
    /// The session id.
    public var sid: String?
    public var abilities: [String]?
    /// When the token stops being accepted, in seconds since the Unix epoch.
    public var exp: Int64?
    public var guest: Bool?
    /// `Bearer`.
    public var tokenType: String?

    public static let inactive = IntrospectionPayload(active: false)

    public init(
        active: Bool, sub: String? = nil, sid: String? = nil, abilities: [String]? = nil, exp: Int64? = nil,
        guest: Bool? = nil
    ) {
        self.active = active
        self.sub = sub
        self.sid = sid
        self.abilities = abilities
        self.exp = exp
        self.guest = guest
        self.tokenType = active ? "Bearer" : nil
    }

    enum CodingKeys: String, CodingKey {
        case active, sub, sid, abilities, exp, guest
        case tokenType = "token_type"
    }
}

/// What enrolling a second factor shows once: the TOTP secret (base32) and its `otpauth://` URI
/// after `mfa_enroll`, the recovery codes after `mfa_verify`.
public struct MFAPayload: Decodable, Sendable, Equatable, CustomStringConvertible {
    public var secret: String?
    public var otpauthURI: String?
    public var recoveryCodes: [String]?

    public init(secret: String? = nil, otpauthURI: String? = nil, recoveryCodes: [String]? = nil) {
        self.secret = secret
        self.otpauthURI = otpauthURI
        self.recoveryCodes = recoveryCodes
    }

    enum CodingKeys: String, CodingKey {
        case secret
        case otpauthURI = "otpauth_uri"
        case recoveryCodes = "recovery_codes"
    }

    public var description: String { "MFAPayload(<redacted>)" }
}

/// A user as results show it. Never holds a secret.
public struct UserPayload: Decodable, Sendable, Equatable {
    public var id: String
    public var handle: String
    public var name: String?
    public var email: String?
    public var emailVerified: Bool
    public var isPrivateEmail: Bool
    public var isGuest: Bool
    public var providers: [String]
    public var createdAt: String
    /// The account's phone number (E.164), when it has one: absent otherwise.
    public var phone: String?
    /// True beside `phone`: the worker keeps a number only once a code sent to it came back.
    public var phoneVerified: Bool?

    public init(
        id: String, handle: String, name: String?, email: String?, emailVerified: Bool, isPrivateEmail: Bool,
        isGuest: Bool, providers: [String], createdAt: String, phone: String? = nil
    ) {
        self.id = id
        self.handle = handle
        self.name = name
        self.email = email
        self.emailVerified = emailVerified
        self.isPrivateEmail = isPrivateEmail
        self.isGuest = isGuest
        self.providers = providers
        self.createdAt = createdAt
        self.phone = phone
        self.phoneVerified = phone.map { _ in true }
    }

    enum CodingKeys: String, CodingKey {
        case id, handle, name, email, providers, phone
        case phoneVerified = "phone_verified"
        case emailVerified = "email_verified"
        case isPrivateEmail = "is_private_email"
        case isGuest = "is_guest"
        case createdAt = "created_at"
    }
}

/// The secrets a successful login hands back: shown once, stored only as hashes.
public struct SessionPayload: Decodable, Sendable, Equatable, CustomStringConvertible {
    public var tokenType: String
    public var accessToken: String
    public var expiresAt: String
    public var refreshToken: String?
    public var refreshExpiresAt: String?
    public var abilities: [String]

    public init(
        accessToken: String, expiresAt: String, refreshToken: String?, refreshExpiresAt: String?, abilities: [String]
    ) {
        self.tokenType = "Bearer"
        self.accessToken = accessToken
        self.expiresAt = expiresAt
        self.refreshToken = refreshToken
        self.refreshExpiresAt = refreshExpiresAt
        self.abilities = abilities
    }

    enum CodingKeys: String, CodingKey {
        case abilities
        case tokenType = "token_type"
        case accessToken = "access_token"
        case expiresAt = "expires_at"
        case refreshToken = "refresh_token"
        case refreshExpiresAt = "refresh_expires_at"
    }

    public var description: String { "SessionPayload(expires_at: \(expiresAt), tokens: <redacted>)" }
}

/// Why a request failed. `message` is for logs; clients branch on `code`.
public struct ErrorPayload: Decodable, Sendable, Equatable {
    public var code: ErrorCode
    public var message: String
    public var retriable: Bool
    /// For `malformed_request`: the offending field's path (an addition to the contract).
    public var field: String?
    /// For `too_many_attempts` and other throttling: when to try again (an addition to the contract).
    public var retryAfter: String?
    /// The same wait in whole seconds from when the answer was made, at least 1 (for clients that
    /// set an HTTP `Retry-After` or a timer without parsing a timestamp).
    public var retryAfterSeconds: Int64?
    /// For `mfa_required`: what `mfa_challenge` finishes the sign-in with (short-lived, opaque,
    /// good for one sign-in).
    public var mfaToken: String?
    /// `mfa_token` sealed to the request's `reply_key` (a compact JWE whose plaintext is the
    /// token's text), in its place, when the request had one (an addition to the contract).
    public var sealedMFAToken: String?

    public init(
        code: ErrorCode, message: String, retriable: Bool = false, field: String? = nil, retryAfter: String? = nil,
        retryAfterSeconds: Int64? = nil
    ) {
        self.code = code
        self.message = message
        self.retriable = retriable
        self.field = field
        self.retryAfter = retryAfter
        self.retryAfterSeconds = retryAfterSeconds
    }

    enum CodingKeys: String, CodingKey {
        case code, message, retriable, field
        case retryAfter = "retry_after"
        case retryAfterSeconds = "retry_after_seconds"
        case mfaToken = "mfa_token"
        case sealedMFAToken = "sealed_mfa_token"
    }
}
