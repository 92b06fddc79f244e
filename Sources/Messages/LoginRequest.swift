import StrictJSON

/// The `data` of an `auth.login.request` event.
///
/// Holds secrets (passwords, provider and refresh tokens): its descriptions redact them, so an
/// accidental `print` or log interpolation cannot leak one.
public struct LoginRequestData: Decodable, Sendable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    public var method: String
    public var provider: String?
    public var identityToken: String?
    public var nonce: String?
    public var profile: Profile?
    public var email: String?
    /// `phone_code_request`, `phone_code`: a number in E.164 form (`+` and the country calling code).
    public var phone: String?
    /// `phone_code_request`: the language to write the text message in (a BCP 47 tag, `ko-KR`),
    /// passed on to the SMS service.
    public var locale: String?
    public var password: String?
    public var name: String?
    public var refreshToken: String?
    public var accessToken: String?
    public var scope: String?
    public var linkTo: String?
    public var device: Device?
    public var replyKey: String?
    /// The gateway's id for the client app install (an addition to the contract): the key guest
    /// sign-ups are rate-limited by. Without it, the request's Kafka key is used.
    public var clientID: String?
    /// A one-time code from an e-mail (`verify_email`, `password_reset`): six digits.
    public var code: String?
    /// The link token from the same e-mail, instead of the code and address.
    public var linkToken: String?
    /// `oauth`: the PKCE verifier the app made for the authorization request (RFC 7636).
    public var codeVerifier: String?
    /// `oauth`: the redirect URI the authorization code was issued for.
    public var redirectURI: String?
    /// The password to set (`password_reset`, `change_password`).
    public var newPassword: String?
    /// The token of an `mfa_required` answer (`mfa_challenge`).
    public var mfaToken: String?
    /// One of the second factor's recovery codes, instead of `code` (`mfa_challenge`, `mfa_remove`).
    public var recoveryCode: String?
    /// Sign in with Apple's authorization code (`apple`), beside the identity token: exchanged
    /// for a refresh token after the login, so the account's deletion can revoke it.
    public var authorizationCode: String?
    /// The session to end (`session_revoke`): an `id` from `sessions_list`.
    public var sessionID: String?
    /// Where the request came from, as the gateway saw it (an addition to the contract): kept in
    /// the audit trail only.
    public var context: Context?
    /// A passkey ceremony's response (`passkey_register`, `passkey_login`).
    public var credential: PasskeyCredential?
    /// The passkey to rename or remove: an `id` from `passkey_list`.
    public var passkeyID: String?

    /// The client's network address and user agent, as the gateway saw them.
    public struct Context: Decodable, Sendable, Equatable {
        public var ip: String?
        public var userAgent: String?

        public init(ip: String?, userAgent: String?) {
            self.ip = ip
            self.userAgent = userAgent
        }

        enum CodingKeys: String, CodingKey {
            case ip
            case userAgent = "user_agent"
        }
    }

    /// The name Apple sends on first authorization only.
    public struct Profile: Decodable, Sendable, Equatable {
        public var givenName: String?
        public var familyName: String?

        public init(givenName: String?, familyName: String?) {
            self.givenName = givenName
            self.familyName = familyName
        }

        enum CodingKeys: String, CodingKey {
            case givenName = "given_name"
            case familyName = "family_name"
        }
    }

    /// The device a session is issued to; names the token.
    public struct Device: Decodable, Sendable, Equatable {
        public var name: String?
        public var platform: String?

        public init(name: String?, platform: String?) {
            self.name = name
            self.platform = platform
        }
    }

    enum CodingKeys: String, CodingKey {
        case method, provider, nonce, profile, email, phone, locale, password, name, scope, device
        case identityToken = "identity_token"
        case refreshToken = "refresh_token"
        case accessToken = "access_token"
        case linkTo = "link_to"
        case replyKey = "reply_key"
        case clientID = "client_id"
        case code
        case linkToken = "link_token"
        case codeVerifier = "code_verifier"
        case redirectURI = "redirect_uri"
        case newPassword = "new_password"
        case mfaToken = "mfa_token"
        case recoveryCode = "recovery_code"
        case sessionID = "session_id"
        case context
        case authorizationCode = "authorization_code"
        case credential
        case passkeyID = "passkey_id"
    }

    public init(method: String) {
        self.method = method
    }

    public var description: String {
        var parts = ["method: \(method)"]
        if let provider { parts.append("provider: \(provider)") }
        if let device { parts.append("device: \(device.name ?? "-")/\(device.platform ?? "-")") }
        for credential in CredentialField.allCases where self[keyPath: credential.keyPath] != nil {
            parts.append("\(credential.rawValue): <redacted>")
        }
        if nonce != nil { parts.append("nonce: <redacted>") }
        return "LoginRequestData(\(parts.joined(separator: ", ")))"
    }

    public var debugDescription: String { description }

    public var customMirror: Mirror { Mirror(self, children: ["description": description]) }
}

/// The login methods of the contract.
public enum LoginMethod: String, Sendable, CaseIterable {
    case apple, google, oidc, oauth, password, register, guest, refresh, logout, introspect
    case sendVerification = "send_verification"
    case verifyEmail = "verify_email"
    case passwordResetRequest = "password_reset_request"
    case passwordReset = "password_reset"
    case changePassword = "change_password"
    case mfaEnroll = "mfa_enroll"
    case mfaVerify = "mfa_verify"
    case mfaChallenge = "mfa_challenge"
    case mfaRemove = "mfa_remove"
    case emailCodeRequest = "email_code_request"
    case emailCode = "email_code"
    case phoneCodeRequest = "phone_code_request"
    case phoneCode = "phone_code"
    case sessionsList = "sessions_list"
    case sessionRevoke = "session_revoke"
    case accountDelete = "account_delete"
    case accountExport = "account_export"
    case passkeyRegisterOptions = "passkey_register_options"
    case passkeyRegister = "passkey_register"
    case passkeyLoginOptions = "passkey_login_options"
    case passkeyLogin = "passkey_login"
    case passkeyList = "passkey_list"
    case passkeyRename = "passkey_rename"
    case passkeyRemove = "passkey_remove"
}

/// What is wrong with a request, naming the field.
public struct RequestValidationError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The JSON path of the offending field (`data.method`), or the envelope attribute.
    public var field: String
    public var reason: String
    /// The contract code to answer with: `malformed_request` or `unsupported_method`.
    public var code: ErrorCode

    public init(field: String, reason: String, code: ErrorCode = .malformedRequest) {
        self.field = field
        self.reason = reason
        self.code = code
    }

    public var description: String { "\(field): \(reason)" }
}

extension LoginRequestData.Device: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.name, name)
            out.member(CodingKeys.platform, platform)
        }
    }
}
