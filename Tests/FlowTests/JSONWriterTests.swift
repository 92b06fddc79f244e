import Foundation
import Messages
import StrictJSON
import Testing

@testable import AuthDomain
@testable import ServiceKit
@testable import TestSupport

/// The hand-written JSON of the per-request messages is byte for byte what `JSONEncoder` (sorted
/// keys, slashes unescaped) writes, so consumers and kept answers see no difference.
@Suite struct JSONWriterTests {
    static func encoder<T: Encodable>(_ value: T) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array(try encoder.encode(value))
    }

    static func same<T: Encodable & JSONWritable>(_ value: T, sourceLocation: SourceLocation = #_sourceLocation) throws
    {
        let expected = String(decoding: try encoder(value), as: UTF8.self)
        let written = String(decoding: value.jsonBytes, as: UTF8.self)
        #expect(written == expected, sourceLocation: sourceLocation)
    }

    static let awkward = "Zoë \"the\" \\ / \u{1}\n\t\r\u{8}\u{C}\u{1F} 日本 😀"

    @Test func resultsEventsAndRequestsMatchJSONEncoder() throws {
        let user = UserPayload(
            id: "0193", handle: "zoe_1a2b", name: Self.awkward, email: nil, emailVerified: true, isPrivateEmail: false,
            isGuest: false, providers: ["apple", "password"], createdAt: "2026-11-29T12:00:00Z")
        let session = SessionPayload(
            accessToken: "eyJ.a/b+c", expiresAt: "2026-11-29T12:15:00Z", refreshToken: nil, refreshExpiresAt: nil,
            abilities: ["*"])
        try Self.same(user)
        try Self.same(session)
        try Self.same(LoginResultData.ok(requestID: "r/1", user: user, newUser: true, session: session))
        try Self.same(LoginResultData.signedOut(requestID: "r-2", user: user))
        var error = ErrorPayload(code: .malformedRequest, message: Self.awkward, field: "data.method")
        try Self.same(LoginResultData.failure(requestID: "r-3", error: error))
        error.retryAfter = "2026-11-29T12:01:00Z"
        try Self.same(error)
        error.retryAfterSeconds = 60
        try Self.same(error)
        #expect(String(decoding: error.jsonBytes, as: UTF8.self).contains(#""retry_after_seconds":60"#))
        try Self.same(
            CloudEvent(
                id: "e", source: "/auth-worker", type: "auth.login.result", time: Date(timeIntervalSince1970: 0),
                traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                data: LoginResultData.failure(requestID: "x", error: error)))
        try Self.same(
            CloudEvent(
                id: "e", source: "/s", type: "t", time: nil,
                data: SessionRevokedData(userId: "u", sessionId: "s", reason: "logout")))
        try Self.same(
            UserCreatedData(
                userId: "u", handle: "h", name: nil, email: "a@b", emailVerified: false, isPrivateEmail: true,
                isGuest: true, provider: "guest", createdAt: "t"))
        try Self.same(UserUpgradedData(userId: "u", provider: "apple", email: nil, name: "N"))
        try Self.same(IdentityLinkedData(userId: "u", provider: "google", subject: "108"))
        try Self.same(UserDeletedData(userId: "u", reason: "operator"))
        var request = LoginRequestData(method: "apple")
        request.identityToken = "a.b.c"
        request.profile = .init(givenName: Self.awkward, familyName: nil)
        request.device = .init(name: "iPhone", platform: nil)
        request.replyKey = "k"
        request.clientID = "c"
        try Self.same(request)
        try Self.same(
            JWTAccessClaims(
                iss: "auth-worker", aud: "api", sub: "u", sid: "s", jti: "j", iat: 1_795_953_600, exp: 1_795_954_500,
                abilities: ["guest"], guest: true))
        try Self.same(JWTHeader(alg: "EdDSA", kid: "k1", typ: "at+jwt"))
    }
}

extension JSONWriterTests {
    /// Every member set, so a member one of the two writers knows and the other does not shows
    /// here (a `session_id` once went out of `Codable` and not out of the writer). A result's
    /// members are checked to be all set through its mirror, so a new one must be set here too.
    @Test func everyMemberIsWrittenBothWays() throws {
        var request = LoginRequestData(method: "session_revoke")
        for credential in CredentialField.allCases { request[keyPath: credential.keyPath] = credential.rawValue }
        request.provider = "p"
        request.nonce = "n"
        request.profile = .init(givenName: "G", familyName: "F")
        request.email = "e@x"
        request.name = "N"
        request.scope = "all"
        request.device = .init(name: "d", platform: "ios")
        request.replyKey = "k"
        request.clientID = "c"
        request.sessionID = "0193"
        request.context = .init(ip: "203.0.113.7", userAgent: "Mozilla/5.0 (X11)")
        request.passkeyID = "0194"
        var credentialResponse = PasskeyCredential.Response(clientDataJSON: "cd")
        credentialResponse.attestationObject = "ao"
        credentialResponse.authenticatorData = "ad"
        credentialResponse.signature = "sg"
        credentialResponse.userHandle = "uh"
        credentialResponse.transports = ["internal"]
        var credential = PasskeyCredential(id: "i", rawId: "i", type: "public-key", response: credentialResponse)
        credential.authenticatorAttachment = "platform"
        request.credential = credential
        try Self.same(request)
        let encoded = try #require(
            try JSONSerialization.jsonObject(with: Data(try Self.encoder(request))) as? [String: Any])
        #expect(encoded.count == 25, "every member of LoginRequestData is set above: \(encoded.keys.sorted())")

        var error = ErrorPayload(
            code: .mfaRequired, message: "m", retriable: false, field: "f", retryAfter: "t", retryAfterSeconds: 1)
        error.mfaToken = "mt"
        error.sealedMFAToken = "a.b.c.d.e"
        try Self.same(error)
        var result = LoginResultData.ok(
            requestID: "r",
            user: UserPayload(
                id: "u", handle: "h", name: "n", email: "e", emailVerified: true, isPrivateEmail: false, isGuest: false,
                providers: ["password"], createdAt: "t"),
            newUser: false,
            session: SessionPayload(
                accessToken: "a", expiresAt: "t", refreshToken: "r", refreshExpiresAt: "t", abilities: ["*"]))
        result.sealedSession = "s"
        result.introspection = IntrospectionPayload(
            active: true, sub: "u", sid: "s", abilities: ["*"], exp: 1, guest: false)
        result.mfa = MFAPayload(secret: "S", otpauthURI: "otpauth://totp/x")
        result.sealedMFA = "m"
        result.sessions = [
            SessionInfoPayload(
                id: "s", device: .init(name: "d", platform: nil), method: "password", createdAt: "t", lastUsedAt: "t",
                expiresAt: "t", current: true)
        ]
        result.sealedExport = "x"
        var options = PasskeyOptionsPayload(challenge: "c", timeout: 300_000)
        options.rp = .init(id: "example.com", name: "Example")
        options.user = .init(id: "h", name: "n", displayName: "d")
        options.pubKeyCredParams = [.init(alg: -7)]
        options.excludeCredentials = [.init(id: "x", transports: ["usb"])]
        options.authenticatorSelection = .init(userVerification: "required")
        options.attestation = "none"
        options.rpId = "example.com"
        options.allowCredentials = [.init(id: "y", transports: nil)]
        options.userVerification = "required"
        options.hints = ["client-device"]
        options.extensions = .init(credProps: true)
        result.passkeyOptions = options
        let passkey = PasskeyPayload(
            id: "p", credentialId: "c", name: "n", createdAt: "t", lastUsedAt: "t", backupEligible: true,
            backedUp: false, transports: ["internal"], algorithm: "ES256")
        result.passkey = passkey
        result.passkeys = [passkey]
        result.error = error
        let unset = Mirror(reflecting: result).children.filter { child in
            if case Optional<Any>.none = child.value as Any? { return false }
            return "\(child.value)" == "nil"
        }
        #expect(unset.isEmpty, "members left unset: \(unset.compactMap(\.label))")
        try Self.same(result)
    }
}

@Suite struct TimestampTests {
    /// The hand-written formatter agrees with Foundation's ISO 8601 style over centuries.
    @Test func formatsAsFoundationDoes() {
        let style = Date.ISO8601FormatStyle(timeZone: .gmt).year().month().day().dateTimeSeparator(.standard).time(
            includingFractionalSeconds: false
        ).timeZone(separator: .omitted)
        var seconds: Double = -2_208_988_800  // 1900
        while seconds < 7_258_118_400 {  // 2200
            let date = Date(timeIntervalSince1970: seconds + 0.75)
            #expect(Timestamp.format(date) == date.formatted(style))
            seconds += 86_399 * 37 + 3601
        }
        #expect(Timestamp.format(Date(timeIntervalSince1970: 1_795_953_600)) == "2026-11-29T12:00:00Z")
        #expect(Timestamp.format(Date(timeIntervalSince1970: 951_782_400)) == "2000-02-29T00:00:00Z")
        // The log lines' form: the same writer with milliseconds.
        #expect(
            RFC3339.format(Date(timeIntervalSince1970: 1_795_953_600.1234), milliseconds: true)
                == "2026-11-29T12:00:00.123Z")
        #expect(RFC3339.format(Date(timeIntervalSince1970: -0.5), milliseconds: true) == "1969-12-31T23:59:59.500Z")
    }
}

extension JSONWriterTests {
    /// A result event written around its data's JSON is the event encoded whole.
    @Test func anEventAroundDataWrittenOnceIsTheWholeEvent() throws {
        let result = LoginResultData.failure(
            requestID: "r", error: ErrorPayload(code: .invalidToken, message: "no", field: "data.link_to"))
        let time = Date(timeIntervalSince1970: 1_795_953_600)
        let whole = CloudEvent(
            id: "e", source: "/auth-worker", type: "auth.login.result", time: time, traceparent: nil, data: result)
        let spliced = CloudEvent<LoginResultData>.json(
            id: "e", source: "/auth-worker", type: "auth.login.result", time: time, traceparent: nil,
            data: result.jsonBytes)
        #expect(String(decoding: spliced, as: UTF8.self) == String(decoding: try Self.encoder(whole), as: UTF8.self))
    }
}

extension TimestampTests {
    /// Log lines keep the format they had: ISO 8601 with milliseconds, in UTC.
    @Test func logTimestampsAsFoundationFormatsThem() throws {
        let style = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        for seconds in stride(from: 1_700_000_000.0, to: 1_900_000_000.0, by: 7_777_777.123) {
            let date = Date(timeIntervalSince1970: seconds)
            let line = String(
                decoding: JSONLinesLogHandler.format(
                    LogRecord(date: date, level: .info, label: "test", message: "m", metadata: [:])), as: UTF8.self)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
            let written = try #require(object["ts"])
            #expect(written.wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/) != nil)
            // The same instant, give or take how each rounds a binary fraction to milliseconds.
            let parsed = try #require(try? style.parse(written))
            #expect(abs(parsed.timeIntervalSince(date)) <= 0.001, "\(written) for \(date.formatted(style))")
        }
    }
}
