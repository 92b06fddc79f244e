/// What a method requires of a request's fields, declared once per method (`LoginMethod.fieldRules`)
/// and checked by the decoder (`RequestDecoder`): the required fields with their sizes, and the
/// shapes some must have (a six-digit code, a UUID, a scope).
enum FieldRule: Sendable {
    /// How long a field may be.
    enum Size: Sendable {
        /// `RequestDecoder.maxFieldBytes` (1 KiB).
        case field
        /// `RequestDecoder.maxTokenBytes` (16 KiB): tokens and WebAuthn's binary parts.
        case token
        case bytes(Int)
    }

    /// A text field of the request's `data`.
    enum Field: Sendable {
        case email, password, newPassword, identityToken, provider, refreshToken, accessToken, mfaToken, sessionID
        case passkeyID, name, code, codeVerifier, redirectURI

        var path: String {
            switch self {
            case .email: "email"
            case .password: "password"
            case .newPassword: "new_password"
            case .identityToken: "identity_token"
            case .provider: "provider"
            case .refreshToken: "refresh_token"
            case .accessToken: "access_token"
            case .mfaToken: "mfa_token"
            case .sessionID: "session_id"
            case .passkeyID: "passkey_id"
            case .name: "name"
            case .code: "code"
            case .codeVerifier: "code_verifier"
            case .redirectURI: "redirect_uri"
            }
        }

        func value(in data: LoginRequestData) -> String? {
            switch self {
            case .email: data.email
            case .password: data.password
            case .newPassword: data.newPassword
            case .identityToken: data.identityToken
            case .provider: data.provider
            case .refreshToken: data.refreshToken
            case .accessToken: data.accessToken
            case .mfaToken: data.mfaToken
            case .sessionID: data.sessionID
            case .passkeyID: data.passkeyID
            case .name: data.name
            case .code: data.code
            case .codeVerifier: data.codeVerifier
            case .redirectURI: data.redirectURI
            }
        }
    }

    /// Present, not empty, within its size.
    case required(Field, Size)
    /// Within its size when present.
    case limited(Field, Size)
    /// A six-digit e-mail code with its address, or a link token alone.
    case codeOrLink
    /// A phone number in E.164 form that a country uses (`PhoneNumber`).
    case phone
    /// The six digits of a text message (`phone_code`).
    case textedCode
    /// When present, a language tag (BCP 47: letters, digits and dashes, at most 35).
    case locale
    /// A six-digit code from an authenticator app, or (when allowed) a recovery code.
    case factorCode(allowRecovery: Bool)
    /// When present, six digits (a second factor's code beside a deletion).
    case optionalFactorCode
    /// Present and a UUID (`what` names it in the refusal).
    case uuid(Field, what: String)
    /// `device` or `all`, when present.
    case scope
    /// A registration response's `credential`.
    case registrationCredential
    /// An authentication response's `credential`.
    case assertionCredential
}

extension FieldRule {
    // The rules of each method, made once.
    static let identityToken: [FieldRule] = [.required(.identityToken, .token)]
    static let providerToken: [FieldRule] = [.required(.provider, .field), .required(.identityToken, .token)]
    static let emailAndPassword: [FieldRule] = [.required(.email, .field), .required(.password, .field)]
    static let refreshToken: [FieldRule] = [.required(.refreshToken, .field)]
    static let oauth: [FieldRule] = [
        .required(.provider, .field), .required(.code, .field), .required(.codeVerifier, .field),
        .required(.redirectURI, .field),
    ]
    static let accessToken: [FieldRule] = [.required(.accessToken, .token)]
    static let logout: [FieldRule] = [.required(.accessToken, .token), .scope]
    static let codeOrLinkOnly: [FieldRule] = [.codeOrLink]
    static let email: [FieldRule] = [.required(.email, .field)]
    static let phoneCodeRequest: [FieldRule] = [.phone, .locale, .limited(.accessToken, .token)]
    static let phoneCode: [FieldRule] = [.phone, .textedCode, .limited(.accessToken, .token)]
    static let passwordReset: [FieldRule] = [.codeOrLink, .required(.newPassword, .field)]
    static let changePassword: [FieldRule] = [
        .required(.accessToken, .token), .required(.password, .field), .required(.newPassword, .field),
    ]
    static let mfaVerify: [FieldRule] = [.required(.accessToken, .token), .factorCode(allowRecovery: false)]
    static let mfaChallenge: [FieldRule] = [.required(.mfaToken, .field), .factorCode(allowRecovery: true)]
    static let mfaRemove: [FieldRule] = [.required(.accessToken, .token), .factorCode(allowRecovery: true)]
    static let sessionRevoke: [FieldRule] = [
        .required(.accessToken, .token), .uuid(.sessionID, what: "a session id (a UUID)"),
    ]
    static let passkeyRegister: [FieldRule] = [.required(.accessToken, .token), .registrationCredential]
    static let passkeyLoginOptions: [FieldRule] = [.limited(.email, .field)]
    static let passkeyLogin: [FieldRule] = [.assertionCredential]
    static let passkeyRename: [FieldRule] = [
        .required(.accessToken, .token), .uuid(.passkeyID, what: "a passkey id (a UUID)"),
        .required(.name, .bytes(64)),
    ]
    static let passkeyRemove: [FieldRule] = [
        .required(.accessToken, .token), .uuid(.passkeyID, what: "a passkey id (a UUID)"),
    ]
    static let accountDelete: [FieldRule] = [.required(.accessToken, .token), .optionalFactorCode]
}
