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
    case codeVerifier = "code_verifier"

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
        case .codeVerifier: \.codeVerifier
        }
    }

    /// The member names, for lookups by name.
    public static let names: Set<String> = Set(allCases.map(\.rawValue))
}
