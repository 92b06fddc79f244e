/// Everything about a login method that is not its flow, declared together, one line a method
/// (`LoginMethod.traits`): what it requires of the request's fields, whether its answer can carry a
/// secret, whether its outcomes go to the audit trail, and how the worker prepares it. The
/// decoder, `AuthClient`, the audit, the sealing of answers and the pipeline all read this table;
/// none of them compares method names. The flow itself is `LoginFlows`' (AuthDomain).
public struct MethodTraits: Sendable {
    /// How the worker prepares a request of the method before its transaction.
    public enum Preparation: Sendable, Equatable {
        /// CPU work of microseconds: where the request is (a guest's session, a refresh).
        case atOnce
        /// A provider token: at once when the provider's keys are cached, in a task otherwise.
        case atOnceWithCachedKeys
        /// A password to hash or verify, on the hashing pool: in a task of its own.
        case hashing
        /// A read before the transaction, or a password only sometimes: in a task.
        case waits
    }

    /// When preparing reads the account (a password verified against the stored hash), so the
    /// request waits for the requests before it on its key.
    public enum AccountRead: Sendable, Equatable {
        case never
        case always
        /// Only when the request carries a `password`.
        case withPassword
    }

    let fieldRules: [FieldRule]
    /// The answer can carry a secret (a session, a TOTP secret, recovery codes, an `mfa_token`,
    /// an export): sealed to the request's `reply_key`, which `AuthClient` always sends for it and
    /// a worker requiring reply keys insists on.
    public let answerCarriesSecret: Bool
    /// Its outcomes go to the audit trail: sign-ins (succeeded and refused), registrations,
    /// changes to how an account signs in, sessions ended, the account deleted or exported; not
    /// the frequent, routine ones nor those that only send a code.
    public let isAudited: Bool
    public let preparation: Preparation
    public let accountRead: AccountRead
    /// A guest sign-up: counted against the global guest ceiling when it is looked up.
    public let isGuestSignUp: Bool

    init(
        _ fieldRules: [FieldRule], secret: Bool, audited: Bool, _ preparation: Preparation,
        reads accountRead: AccountRead = .never, guestSignUp: Bool = false
    ) {
        self.fieldRules = fieldRules
        self.answerCarriesSecret = secret
        self.isAudited = audited
        self.preparation = preparation
        self.accountRead = accountRead
        self.isGuestSignUp = guestSignUp
    }
}

extension LoginMethod {
    /// The method's traits: the one table.
    public var traits: MethodTraits {
        switch self {
        case .guest: MethodTraits.guest
        case .apple, .google: MethodTraits.provider
        case .oidc: MethodTraits.oidc
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

    /// Whether its outcomes go to the audit trail (`MethodTraits.isAudited`).
    public var isAudited: Bool { traits.isAudited }
}

extension MethodTraits {
    // One line a method: fields, secret answer, audited, preparation (and reads, guest sign-up).
    static let guest = MethodTraits([], secret: true, audited: true, .atOnce, guestSignUp: true)
    static let provider = MethodTraits(FieldRule.identityToken, secret: true, audited: true, .atOnceWithCachedKeys)
    static let oidc = MethodTraits(FieldRule.providerToken, secret: true, audited: true, .atOnceWithCachedKeys)
    static let register = MethodTraits(FieldRule.emailAndPassword, secret: true, audited: true, .hashing)
    static let password = MethodTraits(
        FieldRule.emailAndPassword, secret: true, audited: true, .hashing, reads: .always)
    static let refresh = MethodTraits(FieldRule.refreshToken, secret: true, audited: false, .atOnce)
    static let logout = MethodTraits(FieldRule.logout, secret: false, audited: true, .atOnce)
    static let introspect = MethodTraits(FieldRule.accessToken, secret: false, audited: false, .atOnce)
    static let sendVerification = MethodTraits(FieldRule.accessToken, secret: false, audited: false, .atOnce)
    static let verifyEmail = MethodTraits(
        FieldRule.codeOrLinkOnly, secret: false, audited: true, .waits, reads: .withPassword)
    static let passwordResetRequest = MethodTraits(FieldRule.email, secret: false, audited: false, .atOnce)
    static let passwordReset = MethodTraits(FieldRule.passwordReset, secret: true, audited: true, .waits)
    static let changePassword = MethodTraits(
        FieldRule.changePassword, secret: false, audited: true, .waits, reads: .always)
    static let emailCodeRequest = MethodTraits(FieldRule.email, secret: false, audited: false, .atOnce)
    static let emailCode = MethodTraits(FieldRule.codeOrLinkOnly, secret: true, audited: true, .atOnce)
    static let mfaEnroll = MethodTraits(
        FieldRule.accessToken, secret: true, audited: true, .waits, reads: .withPassword)
    static let mfaVerify = MethodTraits(FieldRule.mfaVerify, secret: true, audited: true, .waits, reads: .withPassword)
    static let mfaChallenge = MethodTraits(FieldRule.mfaChallenge, secret: true, audited: true, .atOnce)
    static let mfaRemove = MethodTraits(FieldRule.mfaRemove, secret: false, audited: true, .atOnce)
    static let sessionsList = MethodTraits(FieldRule.accessToken, secret: false, audited: false, .atOnce)
    static let sessionRevoke = MethodTraits(FieldRule.sessionRevoke, secret: false, audited: true, .atOnce)
    static let accountExport = MethodTraits(FieldRule.accessToken, secret: true, audited: true, .atOnce)
    static let accountDelete = MethodTraits(
        FieldRule.accountDelete, secret: false, audited: true, .waits, reads: .withPassword)
    static let passkeyRegisterOptions = MethodTraits(FieldRule.accessToken, secret: false, audited: false, .atOnce)
    static let passkeyRegister = MethodTraits(FieldRule.passkeyRegister, secret: true, audited: true, .atOnce)
    static let passkeyLoginOptions = MethodTraits(
        FieldRule.passkeyLoginOptions, secret: false, audited: false, .atOnce)
    static let passkeyLogin = MethodTraits(FieldRule.passkeyLogin, secret: true, audited: true, .atOnce)
    static let passkeyList = MethodTraits(FieldRule.accessToken, secret: false, audited: false, .atOnce)
    static let passkeyRename = MethodTraits(FieldRule.passkeyRename, secret: false, audited: true, .atOnce)
    static let passkeyRemove = MethodTraits(FieldRule.passkeyRemove, secret: false, audited: true, .waits)
}
