import AuthCrypto
import Foundation
import JOSE
import Messages
import Passwords

/// What a one-time code is for. Each purpose has its own codes, limits and event.
enum CodePurpose: String, Sendable, CaseIterable {
    case verifyEmail = "verify_email"
    case passwordReset = "password_reset"
    case signIn = "email_sign_in"
    /// Texted: signs in (`phone_code`).
    case phoneSignIn = "phone_sign_in"
    /// Texted: proves a number a signed-in account adds or changes to.
    case verifyPhone = "verify_phone"
}

/// The keys of one kind of code: the public key of the service that delivers them (they leave
/// the worker sealed to it) and the key codes are stored under (an HMAC, derived from the
/// results key).
struct CodeKeys: Sendable {
    /// The mail service's key for e-mail codes, the SMS service's for texted ones.
    let recipient: [UInt8]
    let hmac: [UInt8]

    init(recipient: [UInt8], resultsKey: [UInt8]) {
        self.recipient = recipient
        hmac = HMACSHA256.mac(key: resultsKey, message: Array("auth-worker one-time codes".utf8))
    }

    /// E-mail codes' keys; nil unless both keys are configured.
    static func mail(_ configuration: WorkerConfiguration) -> CodeKeys? {
        guard let mail = configuration.emailCodes.mailKey, let results = configuration.resultsKey else { return nil }
        return CodeKeys(recipient: mail, resultsKey: results)
    }

    /// Texted codes' keys; nil unless both keys are configured.
    static func sms(_ configuration: WorkerConfiguration) -> CodeKeys? {
        guard let sms = configuration.phoneCodes.smsKey, let results = configuration.resultsKey else { return nil }
        return CodeKeys(recipient: sms, resultsKey: results)
    }

    /// The HMAC a code is stored as: bound to its purpose and destination (an address, a
    /// number), so a code for one cannot be checked against another's row.
    func hmac(code: String, purpose: CodePurpose, email: String) -> [UInt8] {
        HMACSHA256.mac(key: hmac, message: Array("\(purpose.rawValue)\u{0}\(email)\u{0}\(code)".utf8))
    }
}

extension LoginFlows {
    /// The code keys, or `unsupported_method` when this worker sends no codes.
    func codeKeys() throws -> CodeKeys {
        guard let emailCodeKeys else {
            throw LoginError(
                .unsupportedMethod,
                "e-mail codes are not enabled on this worker (AUTH_MAIL_KEY and AUTH_RESULTS_KEY_FILE)")
        }
        return emailCodeKeys
    }

    /// A new code and link token for `purpose`, sealed to the mail service: made before the
    /// write, stored (as an HMAC) by it.
    func pendingCode(_ purpose: CodePurpose, keys: CodeKeys, at now: Date) throws -> PendingCode {
        let code = try Self.sixDigits()
        let linkToken = "lt_" + (try identifiers.secret(characters: 43))
        let sealed = try JWE.sealECDHES(
            MessageCoding.encode(EmailCodeSecret(code: code, linkToken: linkToken)), to: keys.recipient)
        return PendingCode(
            id: try identifiers.uuid(), purpose: purpose, code: code, linkHash: SHA256.hash(linkToken), sealed: sealed,
            keys: keys, createdAt: now, expiresAt: now + configuration.emailCodes.lifetime)
    }

    /// Six decimal digits, uniformly: 32 random bits, drawn again in the rare case they fall in
    /// the last, incomplete run of a million.
    static func sixDigits() throws -> String {
        while true {
            let bytes = try SecureRandom.bytes(4)
            let value = bytes.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            guard value < 4_294_000_000 else { continue }
            let digits = String(value % 1_000_000)
            return String(repeating: "0", count: 6 - digits.count) + digits
        }
    }

    /// The code (with its address) or link token a request brings back.
    func presentedCode(_ request: LoginRequest, purpose: CodePurpose, keys: CodeKeys) throws -> PresentedCode {
        let data = request.data
        if let link = data.linkToken {
            return PresentedCode(
                form: .link(hash: SHA256.hash(link)), purpose: purpose, keys: keys,
                maxAttempts: configuration.emailCodes.maxAttempts)
        }
        guard let email = EmailAddress.normalize(data.email ?? "") else {
            throw LoginError(.malformedRequest, "not a valid e-mail address", field: "data.email")
        }
        return PresentedCode(
            form: .code(destination: email, code: data.code ?? ""), purpose: purpose, keys: keys,
            maxAttempts: configuration.emailCodes.maxAttempts)
    }
}

// MARK: - Codes made and checked

/// A code made before the write: the secrets only in `sealed`, for the mail service.
struct PendingCode: Sendable {
    let id: UUID
    let purpose: CodePurpose
    let code: String
    let linkHash: [UInt8]
    /// `{"code","link_token"}` sealed to the mail service's key.
    let sealed: String
    let keys: CodeKeys
    let createdAt: Date
    let expiresAt: Date

    /// Stores the code (earlier ones for the purpose stop working) and announces it to the mail
    /// service.
    /// - Parameter userID: nil for a sign-up code (`email_sign_in` to an address with no account).
    func issue(to userID: UUID?, email: String, in unit: any UnitOfWork, events: EventFactory) throws {
        try unit.insertCode(
            NewOneTimeCode(
                id: id, userID: userID, purpose: purpose.rawValue, email: email,
                codeHMAC: keys.hmac(code: code, purpose: purpose, email: email), linkHash: linkHash,
                createdAt: createdAt, expiresAt: expiresAt))
        try unit.appendEvent(
            try events.codeRequested(
                purpose: purpose, user: userID, email: email, sealedSecret: sealed, expiresAt: expiresAt))
    }

    /// The bucket that limits the codes sent to one account for the purpose.
    static func bucket(_ purpose: CodePurpose, userID: UUID) -> String {
        "code:\(purpose.rawValue):\(userID.lowercasedString)"
    }
}

/// A code or link token brought back, checked inside the write.
struct PresentedCode: Sendable {
    enum Form: Sendable {
        /// A code with where it was sent: an address, or a number in E.164 form.
        case code(destination: String, code: String)
        case link(hash: [UInt8])
    }

    let form: Form
    let purpose: CodePurpose
    let keys: CodeKeys
    let maxAttempts: Int

    /// What checking found.
    enum Check {
        /// The code is right and live: the caller marks it used.
        case valid(OneTimeCodeRecord)
        /// A wrong guess, counted: answered with this error, the count kept.
        case wrongGuess(LoginError)
    }

    /// The one refusal for a code that does not work: the same code, message and field whether
    /// the address has an account, a live code, an expired one or none, so a wrong guess tells
    /// nothing about the address.
    var refusal: LoginError {
        let field: String
        switch form {
        case .code: field = "data.code"
        case .link: field = "data.link_token"
        }
        return LoginError(
            .invalidCode, "the code is wrong, expired or used; ask for a new one if it keeps failing", field: field)
    }

    /// Finds and checks the code. Wrong guesses are counted against the code (the caller answers
    /// them without throwing, so the count is written); after `maxAttempts` the code is spent, its
    /// link token too.
    /// - Throws: `invalid_code` for an unknown, used, spent or wrong code; `code_expired` only to
    ///   whoever shows the expired code itself (or its link), who learns nothing new from it.
    func check(in unit: any UnitOfWork, at now: Date) throws -> Check {
        switch form {
        case .link(let hash):
            guard let record = try unit.code(linkHash: hash), record.purpose == purpose.rawValue,
                record.usedAt == nil, record.attempts < maxAttempts
            else { throw refusal }
            guard record.expiresAt > now else { throw expired }
            return .valid(record)
        case .code(let destination, let code):
            guard let record = try unit.liveCode(email: destination, purpose: purpose.rawValue) else { throw refusal }
            let matches = ConstantTime.equals(
                keys.hmac(code: code, purpose: purpose, email: record.email), record.codeHMAC)
            guard record.expiresAt > now else { throw matches ? expired : refusal }
            guard record.attempts < maxAttempts else { throw refusal }
            guard matches else {
                try unit.recordCodeAttempt(id: record.id)
                return .wrongGuess(refusal)
            }
            return .valid(record)
        }
    }

    private var expired: LoginError { LoginError(.codeExpired, "the code has expired; ask for a new one") }

    /// What spending a code came to.
    enum Spent {
        /// The code was right and is used up now.
        case spent(OneTimeCodeRecord)
        /// A wrong guess: the answer to give, its count kept.
        case refused(FlowAnswer)
    }

    /// Checks the code and, when it is right, uses it up: the one way a flow takes a code.
    /// - Throws: as `check`.
    func spend(in unit: any UnitOfWork, at now: Date, requestID: String) throws -> Spent {
        switch try check(in: unit, at: now) {
        case .wrongGuess(let error):
            return .refused(.refused(error, requestID: requestID, userID: nil))
        case .valid(let record):
            try unit.useCode(id: record.id, at: now)
            return .spent(record)
        }
    }
}

extension UnitOfWork {
    /// Marks `email` verified on the user, when it is the user's address.
    func markVerified(email: String, user: inout StoredUser, at now: Date) throws {
        if let current = user.email, EmailAddress.normalize(current) == email, !user.emailVerified {
            user.emailVerified = true
            try updateUser(user, upgradedAt: nil, at: now)
        }
    }
}
