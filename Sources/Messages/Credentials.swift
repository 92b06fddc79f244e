/// The members of a request's `data` whose values are credentials: the one list the decoder (what
/// may arrive under `sealed_credentials`), the dead-letter redactor and the descriptions that
/// keep them out of logs all read. The contract marks the same members `writeOnly` in
/// `contract/schemas/login-request.json`, and a test holds the two lists equal.
public enum CredentialField: String, CaseIterable, Sendable {
    case password
    case newPassword = "new_password"
    case identityToken = "identity_token"
    case refreshToken = "refresh_token"
    case accessToken = "access_token"
    case linkTo = "link_to"
    case code
    case linkToken = "link_token"
    case mfaToken = "mfa_token"
    case recoveryCode = "recovery_code"
    case authorizationCode = "authorization_code"

    /// Where the credential sits in a decoded request.
    public var keyPath: WritableKeyPath<LoginRequestData, String?> {
        switch self {
        case .password: \.password
        case .newPassword: \.newPassword
        case .identityToken: \.identityToken
        case .refreshToken: \.refreshToken
        case .accessToken: \.accessToken
        case .linkTo: \.linkTo
        case .code: \.code
        case .linkToken: \.linkToken
        case .mfaToken: \.mfaToken
        case .recoveryCode: \.recoveryCode
        case .authorizationCode: \.authorizationCode
        }
    }

    /// The member names, for lookups by name.
    public static let names: Set<String> = Set(allCases.map(\.rawValue))
}

extension LoginMethod {
    /// Whether the answer to this method can carry a secret: a session, a TOTP secret, recovery
    /// codes, an `mfa_token`, or an account's export. Such answers are sealed to the request's `reply_key`; a gateway
    /// (and `AuthClient`) sends one with every such request, and a worker that requires reply
    /// keys refuses these methods without one. The one list both sides read.
    public var answerCarriesSecret: Bool {
        switch self {
        case .logout, .introspect, .sendVerification, .verifyEmail, .passwordResetRequest, .changePassword, .mfaRemove,
            .emailCodeRequest, .sessionsList, .sessionRevoke, .accountDelete, .passkeyRegisterOptions,
            .passkeyLoginOptions, .passkeyList, .passkeyRename, .passkeyRemove:
            false
        case .apple, .google, .oidc, .password, .register, .guest, .refresh, .passwordReset, .mfaEnroll, .mfaVerify,
            .mfaChallenge, .emailCode, .accountExport, .passkeyLogin, .passkeyRegister:
            true
        }
    }
}
