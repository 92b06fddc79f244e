/// The wire's half of a login method, one line a method (`LoginMethod.traits`): what it requires
/// of the request's fields and whether its answer can carry a secret. The decoder, `AuthClient`
/// and the sealing of answers read this table; none of them compares method names. How the
/// worker handles the method (its preparation and write, its audit) is its `MethodHandler`
/// (AuthDomain), declared beside its flow.
public struct MethodTraits: Sendable {
    let fieldRules: [FieldRule]
    /// The answer can carry a secret (a session, a TOTP secret, recovery codes, an `mfa_token`,
    /// an export): sealed to the request's `reply_key`, which `AuthClient` always sends for it and
    /// a worker requiring reply keys insists on.
    public let answerCarriesSecret: Bool

    init(_ fieldRules: [FieldRule], secret: Bool) {
        self.fieldRules = fieldRules
        self.answerCarriesSecret = secret
    }
}

extension LoginMethod {
    /// The method's traits: the one table.
    public var traits: MethodTraits {
        switch self {
        case .guest: MethodTraits.guest
        case .apple, .google: MethodTraits.provider
        case .oidc: MethodTraits.oidc
        case .oauth: MethodTraits.oauth
        case .register: MethodTraits.register
        case .password: MethodTraits.password
        case .refresh: MethodTraits.refresh
        case .logout: MethodTraits.logout
        case .introspect: MethodTraits.introspect
        case .sendVerification: MethodTraits.sendVerification
        case .verifyEmail: MethodTraits.verifyEmail
        case .passwordResetRequest: MethodTraits.passwordResetRequest
        case .passwordReset: MethodTraits.passwordReset
        case .changePassword: MethodTraits.changePassword
        case .emailCodeRequest: MethodTraits.emailCodeRequest
        case .emailCode: MethodTraits.emailCode
        case .phoneCodeRequest: MethodTraits.phoneCodeRequest
        case .phoneCode: MethodTraits.phoneCode
        case .mfaEnroll: MethodTraits.mfaEnroll
        case .mfaVerify: MethodTraits.mfaVerify
        case .mfaChallenge: MethodTraits.mfaChallenge
        case .mfaRemove: MethodTraits.mfaRemove
        case .sessionsList: MethodTraits.sessionsList
        case .sessionRevoke: MethodTraits.sessionRevoke
        case .accountExport: MethodTraits.accountExport
        case .accountDelete: MethodTraits.accountDelete
        case .passkeyRegisterOptions: MethodTraits.passkeyRegisterOptions
        case .passkeyRegister: MethodTraits.passkeyRegister
        case .passkeyLoginOptions: MethodTraits.passkeyLoginOptions
        case .passkeyLogin: MethodTraits.passkeyLogin
        case .passkeyList: MethodTraits.passkeyList
        case .passkeyRename: MethodTraits.passkeyRename
        case .passkeyRemove: MethodTraits.passkeyRemove
        }
    }

    /// What this method requires of the request's fields.
    var fieldRules: [FieldRule] { traits.fieldRules }

    /// Whether the answer to this method can carry a secret (`MethodTraits.answerCarriesSecret`).
    public var answerCarriesSecret: Bool { traits.answerCarriesSecret }
}

extension MethodTraits {
    // One line a method: the fields it requires, whether its answer carries a secret.
    static let guest = MethodTraits([], secret: true)
    static let provider = MethodTraits(FieldRule.identityToken, secret: true)
    static let oidc = MethodTraits(FieldRule.providerToken, secret: true)
    static let oauth = MethodTraits(FieldRule.oauth, secret: true)
    static let register = MethodTraits(FieldRule.emailAndPassword, secret: true)
    static let password = MethodTraits(
        FieldRule.emailAndPassword, secret: true)
    static let refresh = MethodTraits(FieldRule.refreshToken, secret: true)
    static let logout = MethodTraits(FieldRule.logout, secret: false)
    static let introspect = MethodTraits(FieldRule.accessToken, secret: false)
    static let sendVerification = MethodTraits(FieldRule.accessToken, secret: false)
    static let verifyEmail = MethodTraits(
        FieldRule.codeOrLinkOnly, secret: false)
    static let passwordResetRequest = MethodTraits(FieldRule.email, secret: false)
    static let passwordReset = MethodTraits(FieldRule.passwordReset, secret: true)
    static let changePassword = MethodTraits(
        FieldRule.changePassword, secret: false)
    static let emailCodeRequest = MethodTraits(FieldRule.email, secret: false)
    static let emailCode = MethodTraits(FieldRule.codeOrLinkOnly, secret: true)
    static let phoneCodeRequest = MethodTraits(FieldRule.phoneCodeRequest, secret: false)
    static let phoneCode = MethodTraits(FieldRule.phoneCode, secret: true)
    static let mfaEnroll = MethodTraits(
        FieldRule.accessToken, secret: true)
    static let mfaVerify = MethodTraits(FieldRule.mfaVerify, secret: true)
    static let mfaChallenge = MethodTraits(FieldRule.mfaChallenge, secret: true)
    static let mfaRemove = MethodTraits(FieldRule.mfaRemove, secret: false)
    static let sessionsList = MethodTraits(FieldRule.accessToken, secret: false)
    static let sessionRevoke = MethodTraits(FieldRule.sessionRevoke, secret: false)
    static let accountExport = MethodTraits(FieldRule.accessToken, secret: true)
    static let accountDelete = MethodTraits(
        FieldRule.accountDelete, secret: false)
    static let passkeyRegisterOptions = MethodTraits(FieldRule.accessToken, secret: false)
    static let passkeyRegister = MethodTraits(FieldRule.passkeyRegister, secret: true)
    static let passkeyLoginOptions = MethodTraits(
        FieldRule.passkeyLoginOptions, secret: false)
    static let passkeyLogin = MethodTraits(FieldRule.passkeyLogin, secret: true)
    static let passkeyList = MethodTraits(FieldRule.accessToken, secret: false)
    static let passkeyRename = MethodTraits(FieldRule.passkeyRename, secret: false)
    static let passkeyRemove = MethodTraits(FieldRule.passkeyRemove, secret: false)
}
