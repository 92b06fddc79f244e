import Foundation

/// A validated login request: the envelope attributes the worker needs and the typed data.
public struct LoginRequest: Sendable {
    /// The CloudEvents `id`: the idempotency key.
    public var id: String
    public var source: String
    /// When the gateway published it, if it said.
    public var time: Date?
    public var traceparent: String?
    public var method: LoginMethod
    public var data: LoginRequestData
    /// The Kafka key the request arrived with, as text, when it had one.
    public var partitionKey: String?

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
public struct RequestDecoder: Sendable {
    /// Values larger than this are refused. Default: 64 KiB.
    public var maxValueBytes = 64 * 1024
    /// Limits on individual fields, in UTF-8 bytes.
    public var maxIDBytes = 256
    public var maxTokenBytes = 16 * 1024
    public var maxFieldBytes = 1024

    public init() {}

    /// The CloudEvent type of a login request.
    public static let requestType = "auth.login.request"

    private struct Probe: Decodable {
        var id: String?
        var traceparent: String?

        enum CodingKeys: String, CodingKey { case id, traceparent }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            id = try? container.decodeIfPresent(String.self, forKey: .id)
            traceparent = try? container.decodeIfPresent(String.self, forKey: .traceparent)
        }
    }

    public func decode(_ value: [UInt8]) -> DecodedRequest {
        let probe: Probe
        do {
            probe = try JSONDecoder().decode(Probe.self, from: Data(value))
        } catch {
            return .unanswerable(reason: "invalid_json", message: "value is not a JSON object")
        }
        guard let id = probe.id, !id.isEmpty, id.utf8.count <= maxIDBytes, !id.contains(where: \.isNewline) else {
            return .unanswerable(reason: "missing_id", message: "value has no usable string id")
        }
        let traceparent = probe.traceparent.flatMap { Self.isValidTraceparent($0) ? $0 : nil }
        do {
            let request = try validate(value, id: id, traceparent: traceparent)
            return .valid(request)
        } catch let error as RequestValidationError {
            return .invalid(id: id, traceparent: traceparent, error: error)
        } catch {
            return .invalid(
                id: id, traceparent: traceparent, error: RequestValidationError(field: "value", reason: "\(error)"))
        }
    }

    private func validate(_ value: [UInt8], id: String, traceparent: String?) throws -> LoginRequest {
        guard value.count <= maxValueBytes else {
            throw RequestValidationError(field: "value", reason: "larger than \(maxValueBytes) bytes")
        }
        let event: CloudEvent<LoginRequestData>
        do {
            event = try JSONDecoder().decode(CloudEvent<LoginRequestData>.self, from: Data(value))
        } catch let error as DecodingError {
            throw Self.describe(error)
        }
        guard event.specversion == "1.0" else {
            throw RequestValidationError(field: "specversion", reason: "must be \"1.0\"")
        }
        guard event.type == Self.requestType else {
            throw RequestValidationError(field: "type", reason: "must be \"\(Self.requestType)\"")
        }
        guard !event.source.isEmpty, event.source.utf8.count <= maxFieldBytes else {
            throw RequestValidationError(field: "source", reason: "must be a non-empty URI reference")
        }
        var time: Date?
        if let text = event.time {
            guard let parsed = Timestamp.parse(text) else {
                throw RequestValidationError(field: "time", reason: "must be an RFC 3339 timestamp")
            }
            time = parsed
        }
        if let contentType = event.datacontenttype, !contentType.hasPrefix("application/json") {
            throw RequestValidationError(field: "datacontenttype", reason: "must be application/json")
        }
        guard let method = LoginMethod(rawValue: event.data.method) else {
            throw RequestValidationError(
                field: "data.method", reason: "unknown method \"\(event.data.method.prefix(32))\"",
                code: .unsupportedMethod)
        }
        try validateFields(event.data, method: method)
        return LoginRequest(
            id: id, source: event.source, time: time, traceparent: traceparent, method: method, data: event.data)
    }

    private func validateFields(_ data: LoginRequestData, method: LoginMethod) throws {
        func require(_ value: String?, _ field: String, max: Int) throws {
            guard let value, !value.isEmpty else {
                throw RequestValidationError(
                    field: "data.\(field)", reason: "is required for method \(method.rawValue)")
            }
            try limit(value, field, max: max)
        }
        func limit(_ value: String?, _ field: String, max: Int) throws {
            if let value, value.utf8.count > max {
                throw RequestValidationError(field: "data.\(field)", reason: "longer than \(max) bytes")
            }
        }
        switch method {
        case .apple, .google:
            try require(data.identityToken, "identity_token", max: maxTokenBytes)
        case .oidc:
            try require(data.provider, "provider", max: maxFieldBytes)
            try require(data.identityToken, "identity_token", max: maxTokenBytes)
        case .password:
            try require(data.email, "email", max: maxFieldBytes)
            try require(data.password, "password", max: maxFieldBytes)
        case .register:
            try require(data.email, "email", max: maxFieldBytes)
            try require(data.password, "password", max: maxFieldBytes)
        case .refresh:
            try require(data.refreshToken, "refresh_token", max: maxFieldBytes)
        case .logout:
            try require(data.accessToken, "access_token", max: maxTokenBytes)
            if let scope = data.scope, scope != "device", scope != "all" {
                throw RequestValidationError(field: "data.scope", reason: "must be \"device\" or \"all\"")
            }
        case .guest:
            break
        }
        try limit(data.nonce, "nonce", max: maxFieldBytes)
        try limit(data.name, "name", max: maxFieldBytes)
        try limit(data.linkTo, "link_to", max: maxTokenBytes)
        try limit(data.replyKey, "reply_key", max: maxFieldBytes)
        try limit(data.clientID, "client_id", max: maxFieldBytes)
        try limit(data.profile?.givenName, "profile.given_name", max: maxFieldBytes)
        try limit(data.profile?.familyName, "profile.family_name", max: maxFieldBytes)
        try limit(data.device?.name, "device.name", max: maxFieldBytes)
        try limit(data.device?.platform, "device.platform", max: maxFieldBytes)
    }

    /// `version-traceid-parentid-flags`, lower-case hex (W3C Trace Context).
    static func isValidTraceparent(_ text: String) -> Bool {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count >= 4, parts[0].count == 2, parts[1].count == 32, parts[2].count == 16, parts[3].count == 2
        else { return false }
        return parts.allSatisfy { $0.allSatisfy { $0.isHexDigit && !$0.isUppercase } }
    }

    /// Names the field a `DecodingError` is about, as a dotted path.
    static func describe(_ error: DecodingError) -> RequestValidationError {
        func path(_ codingPath: [any CodingKey], _ last: (any CodingKey)? = nil) -> String {
            let keys = codingPath + (last.map { [$0] } ?? [])
            let text = keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
            return text.isEmpty ? "value" : text.replacingOccurrences(of: ".[", with: "[")
        }
        switch error {
        case .keyNotFound(let key, let context):
            return RequestValidationError(field: path(context.codingPath, key), reason: "is required")
        case .typeMismatch(let type, let context):
            return RequestValidationError(field: path(context.codingPath), reason: "must be \(describe(type))")
        case .valueNotFound(let type, let context):
            return RequestValidationError(
                field: path(context.codingPath), reason: "must be \(describe(type)), not null")
        case .dataCorrupted(let context):
            return RequestValidationError(field: path(context.codingPath), reason: "is not valid JSON")
        @unknown default:
            return RequestValidationError(field: "value", reason: "could not be decoded")
        }
    }

    private static func describe(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "a boolean"
        case is Int.Type, is Double.Type: "a number"
        default: "an object"
        }
    }
}
