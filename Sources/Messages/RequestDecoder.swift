import Foundation
import StrictJSON

/// A validated login request: the envelope attributes the worker needs and the typed data.
public struct LoginRequest: Sendable {
    /// The CloudEvents `id`: the idempotency key.
    public var id: String
    public var source: String
    /// When the gateway published it, if it said.
    public var time: Date?
    public var traceparent: String?
    /// The `tenant` attribute when the request named one (`Tenant`); nil for the default tenant.
    public var tenant: String?
    public var method: LoginMethod
    public var data: LoginRequestData
    /// The Kafka key the request arrived with, as text, when it had one.
    public var partitionKey: String?
    /// How the request came (CloudEvents' Kafka binding): its answer goes back the same way.
    public var mode: CloudEventMode = .structured

    public init(
        id: String, source: String, time: Date?, traceparent: String?, method: LoginMethod, data: LoginRequestData
    ) {
        self.id = id
        self.source = source
        self.time = time
        self.traceparent = traceparent
        self.method = method
        self.data = data
    }
}

/// CloudEvents' content modes on Kafka: the event as one JSON value (`structured`,
/// `content-type: application/cloudevents+json`), or its attributes in `ce_` headers and its data as
/// the value (`binary`, `content-type: application/json`).
public enum CloudEventMode: Sendable, Equatable {
    case structured
    case binary

    /// The attributes a message's headers carry in binary mode, by their CloudEvents names
    /// (`ce_id` is `id`; `content-type` is `datacontenttype`); nil for a structured message: one
    /// whose `content-type` is `application/cloudevents…`, or that has no `ce_specversion`. A header
    /// that is not UTF-8 is left out (its attribute is then missing, and refused by name).
    public static func binaryAttributes(_ headers: some Sequence<(key: String, value: [UInt8]?)>) -> [String: String]? {
        var attributes: [String: String] = [:]
        var contentType: String?
        for (key, value) in headers {
            guard let value, let text = String(validating: value, as: UTF8.self) else { continue }
            if key.utf8.count > 3, key.hasPrefix("ce_") {
                attributes[String(key.dropFirst(3))] = text
            } else if key == "content-type" || (key.utf8.count == 12 && key.lowercased() == "content-type") {
                contentType = text
            }
        }
        if let contentType, contentType.lowercased().hasPrefix("application/cloudevents") { return nil }
        guard attributes["specversion"] != nil else { return nil }
        if let contentType { attributes["datacontenttype"] = contentType }
        return attributes
    }
}

/// What a consumed value turned out to be.
public enum DecodedRequest: Sendable {
    /// A request the worker can act on.
    case valid(LoginRequest)
    /// JSON with a usable `id`, but not a valid request: answered with an error result.
    case invalid(id: String, traceparent: String?, error: RequestValidationError)
    /// No answer is possible (not JSON, no `id`): the value goes to the DLQ.
    case unanswerable(reason: String, message: String)
}

/// Turns the bytes of an `auth.login.request` value into a `DecodedRequest`, strictly.
/// Opens credentials a gateway sealed to the worker (`data.sealed_credentials`).
public protocol CredentialOpener: Sendable {
    /// The plaintext of one sealed credential (a compact JWE).
    /// - Throws: anything, for a value that does not open; its description says why.
    func open(_ sealed: String) throws -> String
}

public struct RequestDecoder: Sendable {
    /// The credentials that may arrive sealed, by their member name in `data`: every credential.
    public static let sealableCredentials = CredentialField.allCases.map(\.rawValue)

    /// Opens `data.sealed_credentials`; without one, sealed credentials are refused.
    public var credentials: (any CredentialOpener)?
    /// Refuse credentials sent in clear: each must be under `data.sealed_credentials`.
    public var requireSealedCredentials = false

    /// Values larger than this are refused. Default: 64 KiB.
    public var maxValueBytes = 64 * 1024
    /// Limits on individual fields, in UTF-8 bytes.
    public var maxIDBytes = 256
    public var maxTokenBytes = 16 * 1024
    public var maxFieldBytes = 1024

    public init() {}

    /// The CloudEvent type of a login request.
    public static let requestType = "auth.login.request"

    public func decode(_ value: [UInt8]) -> DecodedRequest {
        let envelope: [String: JSONValue]
        do {
            envelope = try JSONReader.object(value)
        } catch let failure as JSONReader.Failure {
            // Not acceptable JSON (nested too deeply, a duplicate member name): answered when its
            // id can still be read, dead-lettered when not.
            guard let id = JSONReader.topLevelString(value, member: "id"), Self.isUsableID(id, max: maxIDBytes) else {
                return .unanswerable(reason: "invalid_json", message: "value is not a JSON object")
            }
            let traceparent = JSONReader.topLevelString(value, member: "traceparent").flatMap {
                Self.isValidTraceparent($0) ? $0 : nil
            }
            return .invalid(
                id: id, traceparent: traceparent,
                error: RequestValidationError(field: "value", reason: "is not acceptable JSON: \(failure.reason)"))
        } catch {
            return .unanswerable(reason: "invalid_json", message: "value is not a JSON object")
        }
        guard case .string(let id)? = envelope["id"], Self.isUsableID(id, max: maxIDBytes) else {
            return .unanswerable(reason: "missing_id", message: "value has no usable string id")
        }
        var traceparent: String?
        if case .string(let text)? = envelope["traceparent"], Self.isValidTraceparent(text) { traceparent = text }
        do {
            return .valid(try validate(envelope, size: value.count, id: id, traceparent: traceparent))
        } catch let error as RequestValidationError {
            return .invalid(id: id, traceparent: traceparent, error: error)
        } catch {
            return .invalid(
                id: id, traceparent: traceparent, error: RequestValidationError(field: "value", reason: "\(error)"))
        }
    }

    /// A request in CloudEvents' binary content mode: `attributes` from the `ce_` headers
    /// (`CloudEventMode.binaryAttributes`), the value its `data`. Checked exactly as the structured
    /// form with the same members would be, so the two modes accept and refuse alike.
    public func decode(_ value: [UInt8], binaryAttributes attributes: [String: String]) -> DecodedRequest {
        guard let id = attributes["id"], Self.isUsableID(id, max: maxIDBytes) else {
            return .unanswerable(reason: "missing_id", message: "binary-mode message has no usable ce_id header")
        }
        let traceparent = attributes["traceparent"].flatMap { Self.isValidTraceparent($0) ? $0 : nil }
        var envelope: [String: JSONValue] = [:]
        for (name, text) in attributes { envelope[name] = .string(text) }
        do {
            envelope["data"] = .object(try JSONReader.object(value))
        } catch let failure as JSONReader.Failure {
            return .invalid(
                id: id, traceparent: traceparent,
                error: RequestValidationError(field: "data", reason: "is not acceptable JSON: \(failure.reason)"))
        } catch {
            return .invalid(
                id: id, traceparent: traceparent,
                error: RequestValidationError(field: "data", reason: "the value must be a JSON object"))
        }
        guard attributes["datacontenttype"] != nil else {
            return .invalid(
                id: id, traceparent: traceparent,
                error: RequestValidationError(
                    field: "datacontenttype", reason: "a binary-mode request needs content-type: application/json"))
        }
        do {
            var request = try validate(envelope, size: value.count, id: id, traceparent: traceparent)
            request.mode = .binary
            return .valid(request)
        } catch let error as RequestValidationError {
            return .invalid(id: id, traceparent: traceparent, error: error)
        } catch {
            return .invalid(
                id: id, traceparent: traceparent, error: RequestValidationError(field: "value", reason: "\(error)"))
        }
    }

    /// An id a result can be keyed by: a non-empty string of bounded length, with no line breaks
    /// and no NUL (which would end it early in C code, and in the database).
    ///
    /// Read as bytes: walking an id's characters (grapheme breaking) cost more than the rest of
    /// its checks together. A line break is a scalar of its own character (Unicode breaks
    /// graphemes before and after every control, line and paragraph separator), so the scalars are
    /// what `Character.isNewline` looks at: U+000A – U+000D, and beyond ASCII U+0085, U+2028, U+2029.
    static func isUsableID(_ id: String, max: Int) -> Bool {
        let utf8 = id.utf8
        guard !utf8.isEmpty, utf8.count <= max else { return false }
        var ascii = true
        for byte in utf8 {
            if byte == 0 || (byte >= 0x0A && byte <= 0x0D) { return false }
            if byte >= 0x80 { ascii = false }
        }
        return ascii || !id.unicodeScalars.contains { $0 == "\u{85}" || $0 == "\u{2028}" || $0 == "\u{2029}" }
    }

    private func validate(_ envelope: [String: JSONValue], size: Int, id: String, traceparent: String?) throws
        -> LoginRequest
    {
        guard size <= maxValueBytes else {
            throw RequestValidationError(field: "value", reason: "larger than \(maxValueBytes) bytes")
        }
        let fields = Fields(members: envelope, path: "")
        guard try fields.required("specversion") == "1.0" else {
            throw RequestValidationError(field: "specversion", reason: "must be \"1.0\"")
        }
        guard try fields.required("type") == Self.requestType else {
            throw RequestValidationError(field: "type", reason: "must be \"\(Self.requestType)\"")
        }
        let source = try fields.required("source")
        guard !source.isEmpty, source.utf8.count <= maxFieldBytes else {
            throw RequestValidationError(field: "source", reason: "must be a non-empty URI reference")
        }
        var time: Date?
        if let text = try fields.optional("time") {
            guard let parsed = Timestamp.parse(text) else {
                throw RequestValidationError(field: "time", reason: "must be an RFC 3339 timestamp")
            }
            time = parsed
        }
        if let contentType = try fields.optional("datacontenttype"), !contentType.hasPrefix("application/json") {
            throw RequestValidationError(field: "datacontenttype", reason: "must be application/json")
        }
        let tenant = try fields.optional("tenant")
        if let tenant, !Tenant.isValidName(tenant) {
            throw RequestValidationError(field: "tenant", reason: "must be 1 to 32 of a-z, 0-9 and -")
        }
        let data = try fields.object("data")
        let methodName = try data.required("method")
        var request = LoginRequestData(method: methodName)
        request.provider = try data.optional("provider")
        request.identityToken = try data.optional("identity_token")
        request.nonce = try data.optional("nonce")
        request.email = try data.optional("email")
        request.phone = try data.optional("phone")
        request.locale = try data.optional("locale")
        request.password = try data.optional("password")
        request.name = try data.optional("name")
        request.refreshToken = try data.optional("refresh_token")
        request.accessToken = try data.optional("access_token")
        request.scope = try data.optional("scope")
        request.linkTo = try data.optional("link_to")
        request.replyKey = try data.optional("reply_key")
        request.clientID = try data.optional("client_id")
        request.code = try data.optional("code")
        request.linkToken = try data.optional("link_token")
        request.codeVerifier = try data.optional("code_verifier")
        request.redirectURI = try data.optional("redirect_uri")
        request.newPassword = try data.optional("new_password")
        request.mfaToken = try data.optional("mfa_token")
        request.recoveryCode = try data.optional("recovery_code")
        request.sessionID = try data.optional("session_id")
        request.authorizationCode = try data.optional("authorization_code")
        request.passkeyID = try data.optional("passkey_id")
        if let credential = try data.optionalObject("credential") {
            request.credential = try passkeyCredential(credential)
        }
        try unseal(data, into: &request)
        if let profile = try data.optionalObject("profile") {
            request.profile = .init(
                givenName: try profile.optional("given_name"), familyName: try profile.optional("family_name"))
        }
        if let device = try data.optionalObject("device") {
            request.device = .init(name: try device.optional("name"), platform: try device.optional("platform"))
        }
        if let context = try data.optionalObject("context") {
            request.context = .init(ip: try context.optional("ip"), userAgent: try context.optional("user_agent"))
        }
        guard let method = LoginMethod(rawValue: methodName) else {
            throw RequestValidationError(
                field: "data.method", reason: "unknown method \"\(methodName.prefix(32))\"", code: .unsupportedMethod)
        }
        try validateFields(request, method: method)
        var login = LoginRequest(
            id: id, source: source, time: time, traceparent: traceparent, method: method, data: request)
        login.tenant = tenant
        return login
    }

    /// `data.credential`: the members of a `RegistrationResponseJSON` or `AuthenticationResponseJSON`
    /// this worker reads, as strings (their base64url is decoded, and refused by field, by the
    /// passkey flows). Other members (`clientExtensionResults`, members a later WebAuthn level adds)
    /// are accepted and not read.
    private func passkeyCredential(_ credential: Fields) throws -> PasskeyCredential {
        let response = try credential.object("response")
        var body = PasskeyCredential.Response(clientDataJSON: try response.required("clientDataJSON"))
        body.attestationObject = try response.optional("attestationObject")
        body.authenticatorData = try response.optional("authenticatorData")
        body.signature = try response.optional("signature")
        body.userHandle = try response.optional("userHandle")
        body.transports = try response.optionalStrings("transports", maxCount: 8, maxBytes: 32)
        var result = PasskeyCredential(
            id: try credential.required("id"), rawId: try credential.required("rawId"),
            type: try credential.required("type"), response: body)
        result.authenticatorAttachment = try credential.optional("authenticatorAttachment")
        guard result.type == "public-key" else {
            throw RequestValidationError(field: "data.credential.type", reason: "must be \"public-key\"")
        }
        for (name, value) in [
            ("id", result.id), ("rawId", result.rawId), ("response.clientDataJSON", body.clientDataJSON),
            ("response.attestationObject", body.attestationObject ?? ""),
            ("response.authenticatorData", body.authenticatorData ?? ""), ("response.signature", body.signature ?? ""),
            ("response.userHandle", body.userHandle ?? ""),
            ("authenticatorAttachment", result.authenticatorAttachment ?? ""),
        ] where value.utf8.count > maxTokenBytes {
            throw RequestValidationError(field: "data.credential.\(name)", reason: "longer than \(maxTokenBytes) bytes")
        }
        return result
    }

    /// Replaces the members of `data.sealed_credentials` by their plaintext, and refuses clear
    /// credentials when they must be sealed. A credential given both ways is refused.
    private func unseal(_ data: Fields, into request: inout LoginRequestData) throws {
        var opened: Set<String> = []
        if let sealed = try data.optionalObject("sealed_credentials") {
            for name in sealed.memberNames {
                guard CredentialField.names.contains(name) else {
                    throw RequestValidationError(
                        field: "data.sealed_credentials.\(name)", reason: "is not a credential that can be sealed")
                }
            }
            for credential in CredentialField.allCases {
                let name = credential.rawValue
                guard let value = try sealed.optional(name) else { continue }
                let field = "data.sealed_credentials.\(name)"
                guard request[keyPath: credential.keyPath] == nil else {
                    throw RequestValidationError(field: field, reason: "is also given in clear as data.\(name)")
                }
                guard let credentials else {
                    throw RequestValidationError(
                        field: field, reason: "cannot be opened: this worker has no credential key")
                }
                guard value.utf8.count <= maxTokenBytes * 2 else {
                    throw RequestValidationError(field: field, reason: "longer than \(maxTokenBytes * 2) bytes")
                }
                let plaintext: String
                do {
                    plaintext = try credentials.open(value)
                } catch {
                    throw RequestValidationError(field: field, reason: "does not open: \(error)")
                }
                guard !plaintext.utf8.contains(0) else {
                    throw RequestValidationError(field: field, reason: "must not contain a NUL character")
                }
                request[keyPath: credential.keyPath] = plaintext
                opened.insert(name)
            }
        }
        if requireSealedCredentials {
            for credential in CredentialField.allCases
            where !opened.contains(credential.rawValue) && request[keyPath: credential.keyPath] != nil {
                throw RequestValidationError(
                    field: "data.\(credential.rawValue)",
                    reason: "must be sealed to the worker's key, under data.sealed_credentials")
            }
        }
    }

    /// Typed access to an object's members, naming the member's path in every refusal. Strings
    /// with a NUL are refused: C code and the database would see them cut short.
    private struct Fields {
        let members: [String: JSONValue]
        let path: String

        private func name(_ key: String) -> String { path.isEmpty ? key : path + "." + key }

        var memberNames: [String] { members.keys.sorted() }

        /// The member named `key`. A request's objects hold a few members and are asked for dozens
        /// that are absent (28 lookups in a guest login): comparing the few names costs less than
        /// hashing every name asked for.
        private func member(_ key: String) -> JSONValue? {
            guard members.count <= Self.scannedMembers else { return members[key] }
            for (name, value) in members where name == key { return value }
            return nil
        }

        /// Objects with this many members or fewer are searched name by name (`member`).
        static let scannedMembers = 8

        func optional(_ key: String) throws -> String? {
            switch member(key) {
            case nil, .null?: return nil
            case .string(let value)?:
                guard !Self.containsNUL(value) else {
                    throw RequestValidationError(field: name(key), reason: "must not contain a NUL character")
                }
                return value
            default: throw RequestValidationError(field: name(key), reason: "must be a string")
            }
        }

        /// Whether `value` has a NUL byte: `memchr` over the contiguous UTF-8 (an identity token is
        /// a kilobyte, walked byte by byte otherwise).
        static func containsNUL(_ value: String) -> Bool {
            var value = value
            return value.withUTF8 { bytes in bytes.baseAddress.map { memchr($0, 0, bytes.count) != nil } ?? false }
        }

        /// An array of short strings, or nil when absent.
        func optionalStrings(_ key: String, maxCount: Int, maxBytes: Int) throws -> [String]? {
            switch member(key) {
            case nil, .null?: return nil
            case .array(let values)?:
                guard values.count <= maxCount else {
                    throw RequestValidationError(field: name(key), reason: "has more than \(maxCount) items")
                }
                return try values.map { value in
                    guard case .string(let text) = value, text.utf8.count <= maxBytes, !Self.containsNUL(text) else {
                        throw RequestValidationError(
                            field: name(key), reason: "must be strings of at most \(maxBytes) bytes")
                    }
                    return text
                }
            default: throw RequestValidationError(field: name(key), reason: "must be an array of strings")
            }
        }

        func required(_ key: String) throws -> String {
            guard let value = try optional(key) else {
                throw RequestValidationError(field: name(key), reason: "is required")
            }
            return value
        }

        func optionalObject(_ key: String) throws -> Fields? {
            switch member(key) {
            case nil, .null?: return nil
            case .object(let nested)?: return Fields(members: nested, path: name(key))
            default: throw RequestValidationError(field: name(key), reason: "must be an object")
            }
        }

        func object(_ key: String) throws -> Fields {
            guard let nested = try optionalObject(key) else {
                throw RequestValidationError(field: name(key), reason: "is required")
            }
            return nested
        }
    }

    private func validateFields(_ data: LoginRequestData, method: LoginMethod) throws {
        for rule in method.fieldRules {
            try check(rule, data, method: method)
        }
        try limit(data.nonce, "nonce", max: maxFieldBytes)
        try limit(data.name, "name", max: maxFieldBytes)
        try limit(data.linkTo, "link_to", max: maxTokenBytes)
        try limit(data.authorizationCode, "authorization_code", max: maxFieldBytes)
        try limit(data.replyKey, "reply_key", max: maxFieldBytes)
        try limit(data.clientID, "client_id", max: maxFieldBytes)
        try limit(data.profile?.givenName, "profile.given_name", max: maxFieldBytes)
        try limit(data.profile?.familyName, "profile.family_name", max: maxFieldBytes)
        try limit(data.device?.name, "device.name", max: maxFieldBytes)
        try limit(data.device?.platform, "device.platform", max: maxFieldBytes)
        try limit(data.context?.userAgent, "context.user_agent", max: maxFieldBytes)
        if let ip = data.context?.ip,
            ip.utf8.count > 45
                || !ip.utf8.allSatisfy({ byte in
                    (0x30...0x39).contains(byte) || (0x61...0x66).contains(byte) || (0x41...0x46).contains(byte)
                        || byte == UInt8(ascii: ".") || byte == UInt8(ascii: ":")
                })
        {
            throw RequestValidationError(field: "data.context.ip", reason: "must be an IPv4 or IPv6 address")
        }
    }

    // MARK: - Field rules

    private func bytes(_ size: FieldRule.Size) -> Int {
        switch size {
        case .field: maxFieldBytes
        case .token: maxTokenBytes
        case .bytes(let count): count
        }
    }

    private func require(_ value: String?, _ field: String, max: Int, method: LoginMethod) throws {
        guard let value, !value.isEmpty else {
            throw RequestValidationError(field: "data.\(field)", reason: "is required for method \(method.rawValue)")
        }
        try limit(value, field, max: max)
    }

    private func limit(_ value: String?, _ field: String, max: Int) throws {
        if let value, value.utf8.count > max {
            throw RequestValidationError(field: "data.\(field)", reason: "longer than \(max) bytes")
        }
    }

    private static func isSixDigits(_ code: String) -> Bool {
        code.utf8.count == 6 && code.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 })
    }

    /// Checks one of a method's rules (`LoginMethod.fieldRules`).
    private func check(_ rule: FieldRule, _ data: LoginRequestData, method: LoginMethod) throws {
        switch rule {
        case .required(let field, let size):
            try require(field.value(in: data), field.path, max: bytes(size), method: method)
        case .limited(let field, let size):
            try limit(field.value(in: data), field.path, max: bytes(size))
        case .codeOrLink:
            try checkCodeOrLink(data, method: method)
        case .phone:
            try checkPhone(data, method: method)
        case .locale:
            if let locale = data.locale, !Self.isLanguageTag(locale) {
                throw RequestValidationError(field: "data.locale", reason: "must be a language tag such as en or ko-KR")
            }
        case .textedCode:
            try require(data.code, "code", max: maxFieldBytes, method: method)
            guard let code = data.code, Self.isSixDigits(code) else {
                throw RequestValidationError(field: "data.code", reason: "must be the six digits from the text message")
            }
        case .factorCode(let allowRecovery):
            try checkFactorCode(data, allowRecovery: allowRecovery, method: method)
        case .optionalFactorCode:
            if let code = data.code, !Self.isSixDigits(code) {
                throw RequestValidationError(
                    field: "data.code", reason: "must be the six digits the authenticator app shows")
            }
        case .uuid(let field, let what):
            try require(field.value(in: data), field.path, max: maxFieldBytes, method: method)
            guard let id = field.value(in: data), UUID(uuidString: id) != nil else {
                throw RequestValidationError(field: "data.\(field.path)", reason: "must be \(what)")
            }
        case .scope:
            if let scope = data.scope, scope != "device", scope != "all" {
                throw RequestValidationError(field: "data.scope", reason: "must be \"device\" or \"all\"")
            }
        case .registrationCredential:
            let credential = try requiredCredential(data, method: method)
            try require(
                credential.response.attestationObject, "credential.response.attestationObject", max: maxTokenBytes,
                method: method)
        case .assertionCredential:
            let credential = try requiredCredential(data, method: method)
            try require(
                credential.response.authenticatorData, "credential.response.authenticatorData", max: maxTokenBytes,
                method: method)
            try require(
                credential.response.signature, "credential.response.signature", max: maxTokenBytes, method: method)
        }
    }

    private func requiredCredential(_ data: LoginRequestData, method: LoginMethod) throws
        -> PasskeyCredential
    {
        guard let credential = data.credential else {
            throw RequestValidationError(field: "data.credential", reason: "is required for method \(method.rawValue)")
        }
        return credential
    }

    /// A code with its address, or a link token alone.
    private func checkCodeOrLink(_ data: LoginRequestData, method: LoginMethod) throws {
        if let link = data.linkToken {
            try require(link, "link_token", max: maxFieldBytes, method: method)
            if data.code != nil {
                throw RequestValidationError(field: "data.code", reason: "give either code or link_token, not both")
            }
            return
        }
        try require(data.email, "email", max: maxFieldBytes, method: method)
        try require(data.code, "code", max: maxFieldBytes, method: method)
        guard let code = data.code, Self.isSixDigits(code) else {
            throw RequestValidationError(field: "data.code", reason: "must be the six digits from the e-mail")
        }
    }

    /// A BCP 47 language tag's shape: a 2–8 letter language, then dash-separated subtags of 1–8
    /// letters or digits; at most 35 characters.
    static func isLanguageTag(_ text: String) -> Bool {
        let parts = text.utf8.split(separator: UInt8(ascii: "-"), omittingEmptySubsequences: false)
        guard text.utf8.count <= 35, let first = parts.first, (2...8).contains(first.count),
            first.allSatisfy({ ($0 | 0x20) >= UInt8(ascii: "a") && ($0 | 0x20) <= UInt8(ascii: "z") })
        else { return false }
        return parts.dropFirst().allSatisfy { part in
            (1...8).contains(part.count)
                && part.allSatisfy {
                    ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9"))
                        || (($0 | 0x20) >= UInt8(ascii: "a") && ($0 | 0x20) <= UInt8(ascii: "z"))
                }
        }
    }

    /// A number in E.164 form, with a calling code and a length a country uses.
    private func checkPhone(_ data: LoginRequestData, method: LoginMethod) throws {
        try require(data.phone, "phone", max: maxFieldBytes, method: method)
        do {
            _ = try PhoneNumber(e164: data.phone ?? "")
        } catch {
            let reason =
                switch error {
                case .notE164: "must be a number in E.164 form: + and the country calling code, no spaces"
                case .unknownCallingCode: "no country uses this calling code"
                case .wrongLength: "the country of this calling code has no numbers of this length"
                }
            throw RequestValidationError(field: "data.phone", reason: reason)
        }
    }

    /// A six-digit code from an authenticator app, or a recovery code.
    private func checkFactorCode(_ data: LoginRequestData, allowRecovery: Bool, method: LoginMethod) throws {
        if allowRecovery, let recovery = data.recoveryCode {
            try require(recovery, "recovery_code", max: maxFieldBytes, method: method)
            if data.code != nil {
                throw RequestValidationError(field: "data.code", reason: "give either code or recovery_code, not both")
            }
            return
        }
        try require(data.code, "code", max: maxFieldBytes, method: method)
        guard let code = data.code, Self.isSixDigits(code) else {
            throw RequestValidationError(
                field: "data.code", reason: "must be the six digits the authenticator app shows")
        }
    }

    /// `version-traceid-parentid-flags`, lower-case hex (W3C Trace Context).
    static func isValidTraceparent(_ text: String) -> Bool {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count >= 4, parts[0].count == 2, parts[1].count == 32, parts[2].count == 16, parts[3].count == 2
        else { return false }
        return parts.allSatisfy { $0.allSatisfy { $0.isHexDigit && !$0.isUppercase } }
    }
}
