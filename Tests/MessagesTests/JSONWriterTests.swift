import Foundation
import Messages
import StrictJSON
import Testing

@testable import AuthDomain
@testable import ServiceKit
@testable import TestSupport

/// Every message is written one way, by its `JSONWritable` writer (no message type is
/// `Encodable`). These tests read back what each writer writes: `Decodable` (the contract's keys,
/// as gateways and AuthClient read them) gives the same value, and the bytes are canonical JSON,
/// what Foundation's `JSONSerialization` writes for the same object with sorted keys.
@Suite struct JSONWriterTests {
    /// The value's JSON reads back as the value, in canonical form.
    static func same<T: Decodable & JSONWritable & Equatable>(
        _ value: T, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let written = value.jsonBytes
        #expect(try MessageCoding.decode(T.self, from: written) == value, sourceLocation: sourceLocation)
        try canonical(written, sourceLocation: sourceLocation)
    }

    /// For a value that is not `Equatable` (a request holds secrets): read back and written again,
    /// the same bytes.
    static func sameAgain<T: Decodable & JSONWritable>(
        _ value: T, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let written = value.jsonBytes
        let again = try MessageCoding.decode(T.self, from: written).jsonBytes
        #expect(
            String(decoding: again, as: UTF8.self) == String(decoding: written, as: UTF8.self),
            sourceLocation: sourceLocation)
        try canonical(written, sourceLocation: sourceLocation)
    }

    /// Members in sorted key order at every level, nothing escaped that need not be: the bytes
    /// `JSONSerialization` writes for the object they parse to.
    static func canonical(_ written: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) throws {
        let object = try JSONSerialization.jsonObject(with: Data(written))
        let again = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
        #expect(
            String(decoding: again, as: UTF8.self) == String(decoding: written, as: UTF8.self),
            sourceLocation: sourceLocation)
    }

    /// The members of the object `written` is.
    static func members(_ written: [UInt8]) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(written)) as? [String: Any])
    }

    static let awkward = "Zoë \"the\" \\ / \u{1}\n\t\r\u{8}\u{C}\u{1F} 日本 😀"

    /// Each byte that must be escaped, and some that must not, at every offset of the first words a
    /// string is scanned in, alone and beside another: the writer's output is the byte-by-byte
    /// definition's, and reads back as the string.
    @Test func stringsAreEscapedAtEveryOffset() throws {
        let escaped = (0..<0x20).map { Character(Unicode.Scalar(UInt8($0))) } + ["\"", "\\"]
        let plain: [Character] = [" ", "!", "/", "#", "]", "[", "\u{7F}", "é", "😀", "a\u{301}", "]", "{"]
        for inserted in escaped + plain {
            for length in [1, 7, 8, 9, 15, 16, 17, 24] {
                for offset in 0..<length {
                    for second in [nil, length - 1, length / 2] {
                        var characters = Array(repeating: Character("a"), count: length)
                        characters[offset] = inserted
                        if let second { characters[second] = escaped[(offset + length) % escaped.count] }
                        let text = String(characters)
                        var writer = JSONWriter()
                        writer.string(text)
                        #expect(writer.bytes == Self.escapedByteByByte(text), "\(Array(text.unicodeScalars))")
                        let read = try JSONSerialization.jsonObject(
                            with: Data(writer.bytes), options: .fragmentsAllowed)
                        #expect(read as? String == text)
                    }
                }
            }
        }
    }

    /// JSON's string escapes, one byte at a time: quote, backslash, the short forms of control
    /// characters that have one, `\u00XX` for the rest of them.
    static func escapedByteByByte(_ text: String) -> [UInt8] {
        var out: [UInt8] = [0x22]
        for byte in text.utf8 {
            switch byte {
            case 0x22: out += Array(#"\""#.utf8)
            case 0x5C: out += Array(#"\\"#.utf8)
            case 0x08: out += Array(#"\b"#.utf8)
            case 0x0C: out += Array(#"\f"#.utf8)
            case 0x0A: out += Array(#"\n"#.utf8)
            case 0x0D: out += Array(#"\r"#.utf8)
            case 0x09: out += Array(#"\t"#.utf8)
            case ..<0x20: out += Array(String(format: "\\u%04x", Int(byte)).utf8)
            default: out.append(byte)
            }
        }
        out.append(0x22)
        return out
    }

    @Test func resultsEventsAndRequestsReadBack() throws {
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
        let event = CloudEvent(
            id: "e", source: "/auth-worker", type: "auth.login.result", time: Date(timeIntervalSince1970: 0),
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            data: LoginResultData.failure(requestID: "x", error: error))
        try Self.sameAgain(event)
        let read = try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: event.jsonBytes)
        #expect(read.data == event.data && read.traceparent == event.traceparent && read.time == "1970-01-01T00:00:00Z")
        #expect(try Self.members(event.jsonBytes).count == 8)
        try Self.sameAgain(
            CloudEvent(
                id: "e", source: "/s", type: "t", time: nil,
                data: SessionRevokedData(userId: "u", sessionId: "s", reason: "logout")))
        try Self.same(
            UserCreatedData(
                userId: "u", handle: "h", name: nil, email: "a@b", emailVerified: false, isPrivateEmail: true,
                isGuest: true, provider: "guest", createdAt: "t"))
        try Self.same(
            UserCreatedData(
                userId: "u", handle: "h", name: nil, email: nil, emailVerified: false, isPrivateEmail: false,
                isGuest: false, provider: "phone", createdAt: "t", phone: "+821012345678"))
        try Self.same(
            PhoneCodeRequestedData(
                userId: "u", phone: "+14155550100", purpose: "verify_phone", sealedSecret: "a.b.c.d.e", expiresAt: "t",
                locale: "ko-KR"))
        try Self.same(PhoneCodeSecret(code: "012345"))
        try Self.same(PhoneVerifiedData(userId: "u", phone: "+14155550100", previous: "+14155550199"))
        try Self.same(UserUpgradedData(userId: "u", provider: "apple", email: nil, name: "N"))
        try Self.same(IdentityLinkedData(userId: "u", provider: "google", subject: "108"))
        try Self.same(UserDeletedData(userId: "u", reason: "operator"))
        var request = LoginRequestData(method: "apple")
        request.identityToken = "a.b.c"
        request.profile = .init(givenName: Self.awkward, familyName: nil)
        request.device = .init(name: "iPhone", platform: nil)
        request.replyKey = "k"
        request.clientID = "c"
        try Self.sameAgain(request)
        // The access token's header and claims are only written (gateways read them as JSON).
        let claims = JWTAccessClaims(
            iss: "auth-worker", aud: "api", sub: "u", sid: "s", jti: "j", iat: 1_795_953_600, exp: 1_795_954_500,
            abilities: ["guest"], guest: true)
        try Self.canonical(claims.jsonBytes)
        let claimMembers = try Self.members(claims.jsonBytes)
        #expect(claimMembers.keys.sorted() == ["abilities", "aud", "exp", "guest", "iat", "iss", "jti", "sid", "sub"])
        #expect(claimMembers["exp"] as? Int == 1_795_954_500 && claimMembers["guest"] as? Bool == true)
        let header = JWTHeader(alg: "EdDSA", kid: "k1", typ: "at+jwt")
        try Self.canonical(header.jsonBytes)
        #expect(String(decoding: header.jsonBytes, as: UTF8.self) == #"{"alg":"EdDSA","kid":"k1","typ":"at+jwt"}"#)
    }
}

extension JSONWriterTests {
    /// Every member set, so a member the writer leaves out, or writes under another key than the
    /// one it is read by, shows here (a `session_id` once went out of one writer and not the
    /// other). A result's members are checked to be all set through its mirror, so a new one must
    /// be set here too.
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
        request.redirectURI = "com.example.app://oauth"
        request.phone = "+14155550100"
        request.locale = "en-US"
        var credentialResponse = PasskeyCredential.Response(clientDataJSON: "cd")
        credentialResponse.attestationObject = "ao"
        credentialResponse.authenticatorData = "ad"
        credentialResponse.signature = "sg"
        credentialResponse.userHandle = "uh"
        credentialResponse.transports = ["internal"]
        var credential = PasskeyCredential(id: "i", rawId: "i", type: "public-key", response: credentialResponse)
        credential.authenticatorAttachment = "platform"
        request.credential = credential
        try Self.sameAgain(request)
        let encoded = try Self.members(request.jsonBytes)
        #expect(encoded.count == 29, "every member of LoginRequestData is set above: \(encoded.keys.sorted())")

        var error = ErrorPayload(
            code: .mfaRequired, message: "m", retriable: false, field: "f", retryAfter: "t", retryAfterSeconds: 1)
        error.mfaToken = "mt"
        error.sealedMFAToken = "a.b.c.d.e"
        try Self.same(error)
        var result = LoginResultData.ok(
            requestID: "r",
            user: UserPayload(
                id: "u", handle: "h", name: "n", email: "e", emailVerified: true, isPrivateEmail: false, isGuest: false,
                providers: ["password"], createdAt: "t", phone: "+14155550100"),
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
    /// A result event written around its data's JSON is the event written whole.
    @Test func anEventAroundDataWrittenOnceIsTheWholeEvent() throws {
        let result = LoginResultData.failure(
            requestID: "r", error: ErrorPayload(code: .invalidToken, message: "no", field: "data.link_to"))
        let time = Date(timeIntervalSince1970: 1_795_953_600)
        let whole = CloudEvent(
            id: "e", source: "/auth-worker", type: "auth.login.result", time: time, traceparent: nil, data: result)
        let spliced = CloudEvent<LoginResultData>.json(
            id: "e", source: "/auth-worker", type: "auth.login.result", time: time, traceparent: nil,
            data: result.jsonBytes)
        #expect(String(decoding: spliced, as: UTF8.self) == String(decoding: whole.jsonBytes, as: UTF8.self))
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

extension TimestampTests {
    /// A log line: its members in sorted key order, the line's metadata over the logger's, and
    /// the four members every line has over any metadata of the same name.
    @Test func aLogLineSortsItsMembersAndKeepsItsOwnFour() throws {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test", handler: handler)
        logger.metadata = ["replica": "a", "shared": "logger"]
        logger.info(
            "hello",
            metadata: [
                "shared": "line", "msg": "forged", "b.key": "1", "level": "forged", "lz": "2", "ts": "forged",
                "tz": "3", "lo": "4", "m": "5",
            ])
        let record = try #require(handler.records.first)
        #expect(
            record.metadata == [
                "replica": "a", "shared": "line", "msg": "forged", "b.key": "1", "level": "forged", "lz": "2",
                "ts": "forged", "tz": "3", "lo": "4", "m": "5",
            ])
        let line = String(decoding: JSONLinesLogHandler.format(record), as: UTF8.self)
        let keys = line.matches(of: /"([a-z.]+)":/).map { String($0.output.1) }
        #expect(keys == ["b.key", "level", "lo", "logger", "lz", "m", "msg", "replica", "shared", "ts", "tz"])
        #expect(line.contains(#""msg":"hello""#) && line.contains(#""level":"info""#) && !line.contains("forged"))
        #expect(line.contains(#""shared":"line""#))
    }
}

extension TimestampTests {
    /// The request loop's lines of a pass, written at once: the same lines, in order, that one
    /// write each would have written, the logger's metadata merged into each, and below the
    /// logger's level nothing.
    @Test func linesWrittenTogetherAreTheLinesWrittenOneByOne() throws {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        defer { close(ends[0]) }
        var logger = Logger(label: "test", handler: JSONLinesLogHandler(fileDescriptor: ends[1]))
        logger.metadata = ["replica": "a"]
        let lines: [(message: String, metadata: Logger.Metadata)] = [
            ("first", ["auth.request_id": "r1", "replica": "b"]), ("second \u{1F600}\n", [:]),
            ("third", ["auth.outcome": "ok"]),
        ]
        logger.log(.debug, lines: lines)
        logger.log(.info, lines: [])
        logger.log(.info, lines: lines)
        close(ends[1])
        var written: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while case let count = read(ends[0], &buffer, buffer.count), count > 0 {
            written.append(contentsOf: buffer[..<count])
        }
        let read = written.split(separator: 0x0A, omittingEmptySubsequences: false).map { Array($0) }
        #expect(read.count == 4 && read.last == [])
        let objects = try read.dropLast().map {
            try #require(try JSONSerialization.jsonObject(with: Data($0)) as? [String: String])
        }
        #expect(objects.map { $0["msg"] } == ["first", "second \u{1F600}\n", "third"])
        #expect(objects.map { $0["replica"] } == ["b", "a", "a"])
        #expect(objects[0]["auth.request_id"] == "r1" && objects[2]["auth.outcome"] == "ok")
        #expect(Set(objects.map { $0["ts"] }).count == 1, "one stamp for the lot")
        // Each line is what formatting its record alone gives.
        let stamp = try #require(objects[0]["ts"])
        for (index, line) in lines.enumerated() {
            var metadata = logger.metadata
            metadata.merge(line.metadata) { _, own in own }
            let date = try #require(try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(stamp))
            let alone = JSONLinesLogHandler.format(
                LogRecord(date: date, level: .info, label: "test", message: line.message, metadata: metadata),
                timestamp: stamp)
            #expect(read[index] == alone)
        }
    }
}

extension JSONWriterTests {
    /// The lifecycle events, the mail service's sealed secret, the notification a gateway forwards
    /// and the account export: each written by its writer, read back whole.
    @Test func everyEventAndTheExportReadBack() throws {
        try Self.same(MFALockedData(userId: "u", factor: "totp", failures: 5, lockouts: 2, lockedUntil: "t"))
        try Self.same(IdentityUnlinkedData(userId: "u", provider: "apple", subject: "001.a", reason: "account_claimed"))
        try Self.same(MFAChangedData(userId: "u", factor: "totp"))
        try Self.same(
            EmailCodeRequestedData(
                userId: "u", email: "a@b", purpose: "verify_email", sealedSecret: "j.w.e", expiresAt: "t"))
        try Self.same(
            EmailCodeRequestedData(userId: nil, email: "a@b", purpose: "sign_in", sealedSecret: "s", expiresAt: "t"))
        try Self.same(EmailCodeSecret(code: "123456", linkToken: Self.awkward))
        try Self.same(EmailVerifiedData(userId: "u", email: "a@b"))
        try Self.same(PasswordChangedData(userId: "u", reason: "reset"))
        try Self.same(PasskeyEventData(userId: "u", passkeyId: "p", name: Self.awkward, reason: "sign count 1 after 5"))
        try Self.same(ProviderNotificationData(payload: "a.b.c"))
        try Self.same(
            SessionInfoPayload(
                id: "s", device: .init(name: "d", platform: "ios"), method: "apple", createdAt: "t", lastUsedAt: "t",
                expiresAt: "t", current: false))

        let device = LoginRequestData.Device(name: "Lena's iPhone", platform: "ios")
        var export = AccountExportPayload(
            exportedAt: "t",
            user: UserPayload(
                id: "u", handle: "h", name: "n", email: "e", emailVerified: true, isPrivateEmail: false, isGuest: false,
                providers: ["apple"], createdAt: "t"),
            identities: [
                .init(
                    provider: "apple", subject: "001", email: "e", emailVerified: true, hasPassword: false,
                    createdAt: "t", lastLoginAt: "t")
            ],
            sessions: [
                .init(
                    id: "s", device: device, method: "apple", createdAt: "t", expiresAt: "t", revokedAt: "t",
                    revokedReason: "logout")
            ],
            secondFactor: .init(kind: "totp", active: true, createdAt: "t", enabledAt: "t", recoveryCodesLeft: 9),
            oneTimeCodes: [.init(purpose: "verify_email", email: "e", createdAt: "t", expiresAt: "t", usedAt: "t")],
            requests: [.init(method: "apple", status: "ok", processedAt: "t")],
            audit: [
                .init(
                    at: "t", action: "login", outcome: "ok", requestId: "r", clientId: "c", device: device,
                    ip: "203.0.113.7", userAgent: "UA", actor: "user")
            ])
        export.passkeys = [
            PasskeyPayload(
                id: "p", credentialId: "c", name: "n", createdAt: "t", lastUsedAt: nil, backupEligible: true,
                backedUp: true, transports: [], algorithm: "ES256")
        ]
        export.passkeyHandle = "h"
        export.passkeyChallenges = [.init(purpose: "register", createdAt: "t", expiresAt: "t")]
        export.consoleRole = "support"
        export.disabledAt = "t"
        export.consoleSessions = [.init(client: "203.0.113.7", createdAt: "t", lastSeenAt: "t")]
        let unset = Mirror(reflecting: export).children.filter { "\($0.value)" == "nil" }
        #expect(unset.isEmpty, "members left unset: \(unset.compactMap(\.label))")
        try Self.same(export)
        #expect(try Self.members(export.jsonBytes).count == 14)
    }

    /// The `mfa_token`'s sealed ticket reads back as it was written (its short keys are its own).
    @Test func theMFATicketReadsBack() throws {
        let ticket = MFATicket(
            id: "i", userID: "u", provider: "password", deviceName: "d", devicePlatform: "ios", expiresAt: 1_795_954_500
        )
        let key = [UInt8](repeating: 7, count: 32)
        let opened = try #require(MFATicket.open(try ticket.token(key: key), key: key))
        #expect(opened.jsonBytes == ticket.jsonBytes)
        try Self.canonical(ticket.jsonBytes)
        #expect(try Self.members(ticket.jsonBytes).count == 6)
    }
}

/// Objects nested `depth` levels, each with a member before and after the nested one.
private struct Nest: JSONWritable {
    var depth: Int

    func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("a", Int64(depth))
            out.member("b", depth > 0 ? Nest(depth: depth - 1) : nil)
            out.member("c", true)
        }
    }

    var expected: String {
        depth > 0 ? "{\"a\":\(depth),\"b\":\(Nest(depth: depth - 1).expected),\"c\":true}" : "{\"a\":0,\"c\":true}"
    }
}

extension JSONWriterTests {
    /// The writer keeps which open objects have a member in a word's bits for the first 64 levels
    /// and in a list beyond: commas come out right on both sides of that line, and after an
    /// object closes (the level it leaves is reused by the next object opened there).
    @Test func nestedObjectsGetTheirCommasAtAnyDepth() throws {
        for depth in [0, 1, 62, 63, 64, 65, 66, 130] {
            let nest = Nest(depth: depth)
            #expect(String(decoding: nest.jsonBytes, as: UTF8.self) == nest.expected)
        }
        // Two deep values side by side in one writer: the second's levels start clean.
        var writer = JSONWriter()
        writer.object { out in
            out.member("first", Nest(depth: 70))
            out.member("second", Nest(depth: 70))
        }
        let expected = "{\"first\":\(Nest(depth: 70).expected),\"second\":\(Nest(depth: 70).expected)}"
        #expect(String(decoding: writer.bytes, as: UTF8.self) == expected)
        _ = try JSONSerialization.jsonObject(with: Data(writer.bytes))
    }
}
