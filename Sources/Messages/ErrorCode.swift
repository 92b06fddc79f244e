/// The `error.code` values of CONTRACT.md: what clients branch on.
public struct ErrorCode: RawRepresentable, Decodable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }

    public static let malformedRequest = ErrorCode(rawValue: "malformed_request")
    public static let unsupportedMethod = ErrorCode(rawValue: "unsupported_method")
    public static let unknownProvider = ErrorCode(rawValue: "unknown_provider")
    public static let invalidToken = ErrorCode(rawValue: "invalid_token")
    public static let tokenExpired = ErrorCode(rawValue: "token_expired")
    public static let issuerMismatch = ErrorCode(rawValue: "issuer_mismatch")
    public static let audienceMismatch = ErrorCode(rawValue: "audience_mismatch")
    public static let nonceMismatch = ErrorCode(rawValue: "nonce_mismatch")
    public static let invalidCredentials = ErrorCode(rawValue: "invalid_credentials")
    public static let emailTaken = ErrorCode(rawValue: "email_taken")
    public static let weakPassword = ErrorCode(rawValue: "weak_password")
    public static let tooManyAttempts = ErrorCode(rawValue: "too_many_attempts")
    public static let invalidRefreshToken = ErrorCode(rawValue: "invalid_refresh_token")
    public static let refreshTokenReused = ErrorCode(rawValue: "refresh_token_reused")
    public static let linkConflict = ErrorCode(rawValue: "link_conflict")
    public static let providerUnavailable = ErrorCode(rawValue: "provider_unavailable")
    public static let internalError = ErrorCode(rawValue: "internal_error")
    /// A one-time code (or link token) that is wrong, used, superseded, or out of attempts.
    public static let invalidCode = ErrorCode(rawValue: "invalid_code")
    /// A one-time code past its lifetime: ask for a new one.
    public static let codeExpired = ErrorCode(rawValue: "code_expired")
    /// The account has a second factor: finish with `mfa_challenge` and the answer's `mfa_token`.
    public static let mfaRequired = ErrorCode(rawValue: "mfa_required")
    /// The address is not verified yet and this worker requires it (`AUTH_REQUIRE_VERIFIED_EMAIL`).
    public static let emailNotVerified = ErrorCode(rawValue: "email_not_verified")
    /// The change asks for a recent sign-in: the session is older than `AUTH_REAUTH_MAX_AGE` and no
    /// password came with the request. Sign in again (or send the password) and repeat.
    public static let reauthenticationRequired = ErrorCode(rawValue: "reauthentication_required")
    /// `session_revoke` named no live session of the user: unknown, ended, or another user's
    /// (which answers alike, so ids of others' sessions cannot be probed).
    public static let unknownSession = ErrorCode(rawValue: "unknown_session")
    /// A passkey's registration response failed a check of WebAuthn §7.1 (origin, RP ID, flags,
    /// algorithm, attestation): `field` names the part.
    public static let invalidPasskey = ErrorCode(rawValue: "invalid_passkey")
    /// The ceremony's challenge is unknown, used, expired, or was issued for another purpose or
    /// user: ask for new options.
    public static let invalidChallenge = ErrorCode(rawValue: "invalid_challenge")
    /// The credential is registered already (to this account or another).
    public static let passkeyExists = ErrorCode(rawValue: "passkey_exists")
    /// `passkey_rename` or `passkey_remove` named no passkey of the user (answered alike for
    /// another user's).
    public static let unknownPasskey = ErrorCode(rawValue: "unknown_passkey")
    /// Removing it would leave the account with no way to sign in.
    public static let lastSignInMethod = ErrorCode(rawValue: "last_sign_in_method")
    /// The account was disabled by support or an operator: no sign-in or refresh until it is
    /// enabled again.
    public static let accountDisabled = ErrorCode(rawValue: "account_disabled")
    /// The request's `tenant` names no tenant of this deployment: nothing was done. Not retriable.
    public static let unknownTenant = ErrorCode(rawValue: "unknown_tenant")

    /// Every code the contract defines.
    public static let all: [ErrorCode] = [
        .malformedRequest, .unsupportedMethod, .unknownProvider, .invalidToken, .tokenExpired, .issuerMismatch,
        .audienceMismatch, .nonceMismatch, .invalidCredentials, .emailTaken, .weakPassword, .tooManyAttempts,
        .invalidRefreshToken, .refreshTokenReused, .linkConflict, .providerUnavailable, .internalError, .invalidCode,
        .codeExpired, .mfaRequired, .emailNotVerified, .reauthenticationRequired,
        .unknownSession, .invalidPasskey, .invalidChallenge, .passkeyExists, .unknownPasskey, .lastSignInMethod,
        .accountDisabled, .unknownTenant,
    ]

    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(String.self)
    }

    public var description: String { rawValue }
}
