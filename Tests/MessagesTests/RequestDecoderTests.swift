import Foundation
import StrictJSON
import Testing

@testable import Messages
@testable import TestSupport

@Suite struct RequestDecoderTests {
    let decoder = RequestDecoder()

    func request(_ data: String, id: String = "req-1", extra: String = "") -> [UInt8] {
        Array(
            """
            {"specversion":"1.0","id":"\(id)","source":"/gateway/test","type":"auth.login.request",
             "time":"2026-11-29T12:00:00Z","datacontenttype":"application/json"\(extra),"data":\(data)}
            """.utf8)
    }

    @Test func acceptsAGuestRequest() throws {
        guard
            case .valid(let request) = decoder.decode(
                request(#"{"method":"guest","device":{"name":"iPhone 15","platform":"ios"}}"#))
        else {
            Issue.record("expected a valid request")
            return
        }
        #expect(request.id == "req-1")
        #expect(request.method == .guest)
        #expect(request.data.device?.name == "iPhone 15")
        #expect(request.time == Date(timeIntervalSince1970: 1_795_953_600))
    }

    @Test func keepsAValidTraceparentAndDropsAnInvalidOne() {
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        guard
            case .valid(let kept) = decoder.decode(
                request(#"{"method":"guest"}"#, extra: #","traceparent":"\#(valid)""#)),
            case .valid(let dropped) = decoder.decode(request(#"{"method":"guest"}"#, extra: #","traceparent":"nope""#))
        else {
            Issue.record("expected valid requests")
            return
        }
        #expect(kept.traceparent == valid)
        #expect(dropped.traceparent == nil)
    }

    @Test func keepsTheTenantARequestNames() throws {
        guard
            case .valid(let named) = decoder.decode(request(#"{"method":"guest"}"#, extra: #","tenant":"acme-2""#)),
            case .valid(let unnamed) = decoder.decode(request(#"{"method":"guest"}"#)),
            case .valid(let binary) = decoder.decode(
                Array(#"{"method":"guest"}"#.utf8),
                binaryAttributes: [
                    "specversion": "1.0", "id": "b-1", "source": "/g", "type": "auth.login.request",
                    "datacontenttype": "application/json", "tenant": "acme",
                ])
        else {
            Issue.record("expected valid requests")
            return
        }
        #expect(named.tenant == "acme-2")
        #expect(unnamed.tenant == nil)
        #expect(binary.tenant == "acme")
        #expect(Tenant.isValidName(String(repeating: "a", count: 32)))
        for name in ["", "Acme", "acme_2", "acme.example", "ácme", String(repeating: "a", count: 33)] {
            #expect(!Tenant.isValidName(name), "\(name)")
            guard
                case .invalid(_, _, let error) = decoder.decode(
                    request(#"{"method":"guest"}"#, extra: #","tenant":"\#(name)""#))
            else {
                Issue.record("expected \(name) refused")
                continue
            }
            #expect(error.field == "tenant" && error.code == .malformedRequest)
        }
    }

    @Test(arguments: ["not json", "[1,2]", "\"text\"", "{\"specversion\":\"1.0\"}", "{\"id\":42}", "{\"id\":\"\"}", ""])
    func unanswerableValuesGoToTheDeadLetterTopic(value: String) {
        guard case .unanswerable = decoder.decode(Array(value.utf8)) else {
            Issue.record("expected unanswerable for \(value)")
            return
        }
    }

    @Test(arguments: [
        (#"{}"#, "", "data.method"),
        (#"{"method":7}"#, "", "data.method"),
        (#"{"method":"apple"}"#, "", "data.identity_token"),
        (#"{"method":"oidc","identity_token":"x.y.z"}"#, "", "data.provider"),
        (#"{"method":"oauth","code":"c","code_verifier":"v","redirect_uri":"app://cb"}"#, "", "data.provider"),
        (#"{"method":"oauth","provider":"github","code_verifier":"v","redirect_uri":"app://cb"}"#, "", "data.code"),
        (#"{"method":"oauth","provider":"github","code":"c","redirect_uri":"app://cb"}"#, "", "data.code_verifier"),
        (#"{"method":"oauth","provider":"github","code":"c","code_verifier":"v"}"#, "", "data.redirect_uri"),
        (#"{"method":"password","email":"a@b.c"}"#, "", "data.password"),
        (#"{"method":"refresh"}"#, "", "data.refresh_token"),
        (#"{"method":"logout","access_token":"t","scope":"everything"}"#, "", "data.scope"),
        (#"{"method":"guest","device":"phone"}"#, "", "data.device"),
        (#"{"method":"guest","profile":{"given_name":3}}"#, "", "data.profile.given_name"),
        (#"{"method":"send_verification"}"#, "", "data.access_token"),
        (#"{"method":"verify_email","code":"123456"}"#, "", "data.email"),
        (#"{"method":"verify_email","email":"a@b.c","code":"12345"}"#, "", "data.code"),
        (#"{"method":"verify_email","email":"a@b.c","code":"12345x"}"#, "", "data.code"),
        (#"{"method":"verify_email","email":"a@b.c","code":"１２３４５６"}"#, "", "data.code"),
        (#"{"method":"verify_email","code":"123456","link_token":"lt_x"}"#, "", "data.code"),
        (#"{"method":"password_reset_request"}"#, "", "data.email"),
        (#"{"method":"password_reset","link_token":"lt_x"}"#, "", "data.new_password"),
        (#"{"method":"change_password","access_token":"t","password":"old password"}"#, "", "data.new_password"),
        (#"{"method":"change_password","access_token":"t","new_password":"new password"}"#, "", "data.password"),
        (#"{"method":"mfa_enroll"}"#, "", "data.access_token"),
        (#"{"method":"mfa_verify","access_token":"t"}"#, "", "data.code"),
        (#"{"method":"mfa_verify","access_token":"t","recovery_code":"abcd-efgh-ijkl"}"#, "", "data.code"),
        (#"{"method":"mfa_challenge","code":"123456"}"#, "", "data.mfa_token"),
        (#"{"method":"mfa_challenge","mfa_token":"mt_x","code":"12345"}"#, "", "data.code"),
        (#"{"method":"mfa_challenge","mfa_token":"mt_x","code":"123456","recovery_code":"x"}"#, "", "data.code"),
        (#"{"method":"mfa_remove","access_token":"t"}"#, "", "data.code"),
        (#"{"method":"phone_code_request"}"#, "", "data.phone"),
        (#"{"method":"phone_code_request","phone":"+1 415 555 0100"}"#, "", "data.phone"),
        (#"{"method":"phone_code_request","phone":"14155550100"}"#, "", "data.phone"),
        (#"{"method":"phone_code_request","phone":"+9991234567"}"#, "", "data.phone"),
        (#"{"method":"phone_code_request","phone":"+1415555010"}"#, "", "data.phone"),
        (#"{"method":"phone_code_request","phone":"+14155550100","locale":"en_US"}"#, "", "data.locale"),
        (#"{"method":"phone_code_request","phone":"+14155550100","locale":"e"}"#, "", "data.locale"),
        (#"{"method":"phone_code","phone":"+14155550100"}"#, "", "data.code"),
        (#"{"method":"phone_code","phone":"+14155550100","code":"12345"}"#, "", "data.code"),
        (#"{"method":"phone_code","code":"123456"}"#, "", "data.phone"),
    ])
    func invalidRequestsNameTheField(data: String, extra: String, field: String) {
        let value = request(data, extra: extra)
        guard case .invalid(let id, _, let error) = decoder.decode(value) else {
            Issue.record("expected invalid")
            return
        }
        #expect(id == "req-1")
        #expect(error.field == field)
        #expect(error.code == .malformedRequest)
    }

    @Test func binaryModeIsTheHeadersSayingSo() {
        func headers(_ pairs: [(String, String)]) -> [(key: String, value: [UInt8]?)] {
            pairs.map { (key: $0.0, value: Array($0.1.utf8)) }
        }
        let binary = CloudEventMode.binaryAttributes(
            headers([("ce_specversion", "1.0"), ("ce_id", "r-1"), ("Content-Type", "application/json")]))
        #expect(binary == ["specversion": "1.0", "id": "r-1", "datacontenttype": "application/json"])
        #expect(
            CloudEventMode.binaryAttributes(
                headers([("ce_specversion", "1.0"), ("content-type", "application/cloudevents+json")])) == nil)
        #expect(
            CloudEventMode.binaryAttributes(headers([("content-type", "application/json"), ("ce_id", "r")])) == nil)
        #expect(CloudEventMode.binaryAttributes(headers([])) == nil)
        let invalidUTF8 = CloudEventMode.binaryAttributes([
            (key: "ce_specversion", value: Array("1.0".utf8)), (key: "ce_id", value: [0xFF, 0xFE]),
        ])
        #expect(invalidUTF8 == ["specversion": "1.0"], "a header that is not UTF-8 is left out")
    }

    /// The binary form of a request is accepted and refused exactly as its structured form.
    @Test(arguments: [
        #"{"method":"guest","device":{"name":"iPhone","platform":"ios"}}"#, #"{"method":42}"#,
        #"{"method":"carrier-pigeon"}"#, #"{"method":"phone_code","phone":"+14155550100","code":"12"}"#,
        #"{"method":"password","email":"a@b.c"}"#,
    ])
    func binaryAndStructuredModesDecideAlike(data: String) {
        let structured = decoder.decode(request(data))
        let binary = decoder.decode(
            Array(data.utf8),
            binaryAttributes: [
                "specversion": "1.0", "id": "req-1", "source": "/gateway/test", "type": "auth.login.request",
                "time": "2026-11-29T12:00:00Z", "datacontenttype": "application/json",
            ])
        switch (structured, binary) {
        case (.valid(let one), .valid(let other)):
            #expect(one.method == other.method && one.data.device == other.data.device)
            #expect(one.mode == .structured && other.mode == .binary)
        case (.invalid(_, _, let one), .invalid(let id, _, let other)):
            #expect(id == "req-1")
            #expect(one.field == other.field && one.code == other.code && one.reason == other.reason)
        default:
            Issue.record("the modes disagree on \(data): \(structured) against \(binary)")
        }
    }

    @Test func acceptsPhoneRequests() throws {
        guard
            case .valid(let asked) = decoder.decode(
                request(#"{"method":"phone_code_request","phone":"+821012345678","locale":"ko-KR"}"#)),
            case .valid(let code) = decoder.decode(
                request(#"{"method":"phone_code","phone":"+14155550100","code":"012345","access_token":"t"}"#))
        else {
            Issue.record("expected valid requests")
            return
        }
        #expect(
            asked.method == .phoneCodeRequest && asked.data.phone == "+821012345678" && asked.data.locale == "ko-KR")
        #expect(code.method == .phoneCode && code.data.code == "012345" && code.data.accessToken == "t")
        #expect(RequestDecoder.isLanguageTag("zh-Hant-TW") && !RequestDecoder.isLanguageTag("en--US"))
    }

    /// Objects of a few members are searched name by name, larger ones through their hash table
    /// (`Fields.member`): either way each member is found, one of the wrong type is refused with
    /// its path, and one that is absent is absent.
    @Test(arguments: [0, 3, 12])
    func membersAreFoundInObjectsOfAnySize(padding: Int) {
        let extra = (0..<padding).map { #","x\#($0)":\#($0)"# }.joined()
        guard
            case .valid(let found) = decoder.decode(
                request(
                    #"{"method":"guest","client_id":"app"\#(extra),"device":{"name":"Pixel","platform":"android"\#(extra)}}"#
                ))
        else {
            Issue.record("expected a valid request with \(padding) more members")
            return
        }
        #expect(found.data.clientID == "app")
        #expect(found.data.device?.name == "Pixel")
        #expect(found.data.device?.platform == "android")
        #expect(found.data.email == nil)
        guard case .invalid(_, _, let error) = decoder.decode(request(#"{"method":"guest"\#(extra),"client_id":7}"#))
        else {
            Issue.record("expected invalid with \(padding) more members")
            return
        }
        #expect(error.field == "data.client_id")
    }

    /// libpq ends text parameters at a NUL: `P\0A` would collide with `P`, and a field cut short
    /// would be stored as something the sender did not send. The field is named.
    @Test(arguments: [
        (#"{"method":"password","email":"victim@example.com\u0000x","password":"pw-long-enough"}"#, "data.email"),
        (#"{"method":"guest","device":{"name":"phone\u0000","platform":"ios"}}"#, "data.device.name"),
        (#"{"method":"refresh","refresh_token":"rt_\u0000"}"#, "data.refresh_token"),
    ])
    func fieldsWithANULAreMalformed(data: String, field: String) {
        guard case .invalid(let id, _, let error) = decoder.decode(request(data)) else {
            Issue.record("expected invalid for \(data)")
            return
        }
        #expect(id == "req-1")
        #expect(error.code == .malformedRequest)
        #expect(error.field == field)
    }

    /// An id with a NUL cannot key a result (it would collide with its prefix): dead-lettered.
    @Test func anIdWithANULIsUnanswerable() {
        guard case .unanswerable = decoder.decode(request(#"{"method":"guest"}"#, id: #"P\u0000A"#)) else {
            Issue.record("expected unanswerable")
            return
        }
    }

    /// An id with a line break of any kind cannot key a result either; an id that is not ASCII can.
    /// Each is checked against the definition by characters the decoder's byte scan stands for.
    @Test(arguments: [
        "P\nA", "P\rA", "P\r\nA", "\u{0B}", "P\u{0C}", "é\u{85}", "P\u{2028}A", "\u{2029}", "é\nx",
        "req-é-1", "日本-1", "e\u{301}\u{85}", "a\u{301}b", "P\tA", "🙂", "req-1",
    ])
    func idsWithALineBreakAreUnanswerable(id: String) throws {
        let breaks = id.contains(where: \.isNewline)
        #expect(RequestDecoder.isUsableID(id, max: 128) == !breaks)
        var writer = JSONWriter()
        writer.string(id)
        let escaped = String(decoding: writer.bytes, as: UTF8.self)
        let decoded = decoder.decode(
            Array(
                """
                {"specversion":"1.0","id":\(escaped),"source":"/gateway/test","type":"auth.login.request",
                 "datacontenttype":"application/json","data":{"method":"guest"}}
                """.utf8))
        switch decoded {
        case .unanswerable: #expect(breaks, "refused \(Array(id.unicodeScalars))")
        case .valid(let request): #expect(!breaks && request.id == id)
        case .invalid: Issue.record("expected valid or unanswerable for \(Array(id.unicodeScalars))")
        }
    }

    /// JSON the reader will not take (too deep, a member named twice) is answered when an id can
    /// still be read at the top level, instead of being dead-lettered with the gateway waiting.
    @Test(arguments: [
        String(repeating: #"{"a":"#, count: 200) + "1" + String(repeating: "}", count: 200),
        #"{"method":"guest","method":"password"}"#,
    ])
    func unacceptableJSONWithAnIdIsAnswered(data: String) {
        guard case .invalid(let id, _, let error) = decoder.decode(request(data)) else {
            Issue.record("expected invalid")
            return
        }
        #expect(id == "req-1")
        #expect(error.code == .malformedRequest)
        #expect(error.field == "value")
    }

    @Test func wrongSpecVersionIsMalformed() {
        let value = Array(
            #"{"specversion":"0.3","id":"x","source":"/g","type":"auth.login.request","data":{"method":"guest"}}"#.utf8)
        guard case .invalid(_, _, let error) = decoder.decode(value) else {
            Issue.record("expected invalid")
            return
        }
        #expect(error.field == "specversion")
    }

    @Test func wrongEventTypeIsMalformed() {
        let value = Array(
            #"{"specversion":"1.0","id":"x","source":"/g","type":"something.else","data":{"method":"guest"}}"#.utf8)
        guard case .invalid(_, _, let error) = decoder.decode(value) else {
            Issue.record("expected invalid")
            return
        }
        #expect(error.field == "type")
    }

    @Test func unknownMethodIsUnsupported() {
        guard case .invalid(_, _, let error) = decoder.decode(request(#"{"method":"telepathy"}"#)) else {
            Issue.record("expected invalid")
            return
        }
        #expect(error.code == .unsupportedMethod)
        #expect(error.field == "data.method")
    }

    @Test func oversizedValuesAreRefused() {
        let padding = String(repeating: "a", count: 70_000)
        guard case .invalid(_, _, let error) = decoder.decode(request(#"{"method":"guest","name":"\#(padding)"}"#))
        else {
            Issue.record("expected invalid")
            return
        }
        #expect(error.field == "value")
    }

    @Test func requestDescriptionsNeverShowSecrets() {
        var data = LoginRequestData(method: "password")
        data.password = "hunter2-secret"
        data.identityToken = "eyJsecret"
        data.refreshToken = "rt_secret"
        for text in [String(describing: data), String(reflecting: data), "\(data)"] {
            #expect(!text.contains("hunter2"))
            #expect(!text.contains("eyJsecret"))
            #expect(!text.contains("rt_secret"))
        }
        var session = SessionPayload(
            accessToken: "at_secret", expiresAt: "", refreshToken: "rt_secret", refreshExpiresAt: nil, abilities: [])
        session.abilities = ["*"]
        #expect(!String(describing: session).contains("secret"))
    }

    @Test func everyContractErrorCodeIsDefinedOnce() {
        #expect(Set(ErrorCode.all).count == 30)
        #expect(ErrorCode.all.map(\.rawValue).contains("provider_unavailable"))
        #expect(ErrorCode.all.map(\.rawValue).contains("reauthentication_required"))
    }

    @Test func resultsEncodeWithTheContractsFieldNames() throws {
        let result = LoginResultData.failure(
            requestID: "r", error: ErrorPayload(code: .malformedRequest, message: "m", field: "data.method"))
        let json = String(decoding: MessageCoding.encode(result), as: UTF8.self)
        #expect(
            json
                == #"{"error":{"code":"malformed_request","field":"data.method","message":"m","retriable":false},"request_id":"r","status":"error"}"#
        )
    }

    @Test func timestampsAreRFC3339InUTC() {
        #expect(Timestamp.format(Date(timeIntervalSince1970: 1_795_953_600)) == "2026-11-29T12:00:00Z")
        #expect(Timestamp.parse("2026-11-29T12:00:00Z") == Date(timeIntervalSince1970: 1_795_953_600))
        #expect(Timestamp.parse("2026-11-29T12:00:00.5Z") == Date(timeIntervalSince1970: 1_795_953_600.5))
        #expect(Timestamp.parse("yesterday") == nil)
    }
}
