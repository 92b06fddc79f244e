import Foundation
import StrictJSON
import Testing

@testable import Messages

/// Events published in binary content mode: the outbox's structured JSON taken apart into `ce_`
/// headers and the data's own bytes.
@Suite struct BinaryCloudEventTests {
    @Test func theDataIsTheSameBytesAndTheAttributesAreHeaders() throws {
        let data = PhoneCodeRequestedData(
            userId: nil, phone: "+14155550100", purpose: "phone_sign_in",
            sealedSecret: #"a.b"c}d,e]{["#, expiresAt: "2026-12-07T03:00:00Z", locale: "ko-KR")
        let event = CloudEvent(
            id: "e-1", source: "/auth-worker", type: "auth.phone.code_requested",
            time: Date(timeIntervalSince1970: 1_796_612_400),
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", data: data)
        let binary = try #require(BinaryCloudEvent(structured: MessageCoding.encode(event)))
        #expect(binary.data == data.jsonBytes, "the data member's bytes, braces and quotes inside strings included")
        #expect(try MessageCoding.decode(PhoneCodeRequestedData.self, from: binary.data) == data)
        let headers = Dictionary(uniqueKeysWithValues: binary.headers.map { ($0.key, $0.value) })
        #expect(headers["ce_id"] == "e-1" && headers["ce_type"] == "auth.phone.code_requested")
        #expect(headers["ce_source"] == "/auth-worker" && headers["ce_specversion"] == "1.0")
        #expect(headers["ce_time"] == "2026-12-07T03:00:00Z")
        #expect(headers["ce_traceparent"] == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        #expect(headers["content-type"] == "application/json")
        #expect(headers["ce_data"] == nil)
    }

    @Test(arguments: [
        #"{"specversion":"1.0","id":"x","data":{"a":[1,{"b":"}"}],"c":"\\\"{"}}"#,
        #"{ "id" : "x" , "data" : { "nested" : { "deep" : [ [ ] ] } } , "type" : "t" }"#,
        #"{"data":{},"id":"x"}"#,
    ])
    func theDataMemberIsFoundWhereverItIs(json: String) throws {
        let binary = try #require(BinaryCloudEvent(structured: Array(json.utf8)))
        let original = try #require(try JSONReader.object(Array(json.utf8))["data"])
        #expect(JSONValue.object(try JSONReader.object(binary.data)) == original)
        #expect(binary.headers.contains { $0.key == "ce_id" && $0.value == "x" })
    }

    @Test(arguments: [#"{"id":"x"}"#, #"{"id":"x","data":"text"}"#, "not json", "[]"])
    func whatIsNotAnEventWithObjectDataStaysStructured(json: String) {
        #expect(BinaryCloudEvent(structured: Array(json.utf8)) == nil)
    }
}
