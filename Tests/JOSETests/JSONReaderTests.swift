import JOSE
import StrictJSON
import Testing

@testable import TestSupport

@Suite struct JSONReaderTests {
    func read(_ text: String) throws -> [String: JSONValue] { try JSONReader.object(Array(text.utf8)) }

    @Test func readsEveryKindOfValue() throws {
        let object = try read(
            #" { "s": "x\"y\\z\/\n\u00e9\ud83d\ude00", "n": -12.5e2, "i": 1795953600, "t": true, "f": false, "z": null, "a": [1, "two", []], "o": {"k": {}} } "#
        )
        #expect(object["s"] == .string("x\"y\\z/\né😀"))
        #expect(object["n"] == .number(-1250))
        #expect(object["i"] == .number(1_795_953_600))
        #expect(object["t"] == .bool(true))
        #expect(object["f"] == .bool(false))
        #expect(object["z"] == .null)
        #expect(object["a"] == .array([.number(1), .string("two"), .array([])]))
        #expect(object["o"] == .object(["k": .object([:])]))
        #expect(try read("{}").isEmpty)
        #expect(try read(#"{"name":"Łukasz 李雷"}"#)["name"] == .string("Łukasz 李雷"))
    }

    @Test(arguments: [
        "", "[]", "\"s\"", "{", "}", #"{"a":1,}"#, #"{"a" 1}"#, #"{a:1}"#, #"{"a":1}x"#, #"{"a":1}{}"#,
        #"{"a":01}"#, #"{"a":1.}"#, #"{"a":.5}"#, #"{"a":1e}"#, #"{"a":-}"#, #"{"a":+1}"#, #"{"a":NaN}"#,
        #"{"a":Infinity}"#, #"{"a":1e999}"#, #"{"a":tru}"#, #"{"a":nul}"#, #"{"a":"\x"}"#, #"{"a":"\u12"}"#,
        #"{"a":"\ud800"}"#, #"{"a":"\udc00"}"#, #"{"a":"\ud800\u0041"}"#, "{\"a\":\"tab\there\"}",
        "{\"a\":\"unterminated}",
        #"{"sub":"alice","sub":"mallory"}"#, #"{"a":[1,2}"#, #"{"a":'x'}"#,
    ])
    func refusesWhatIsNotStrictJSON(text: String) {
        #expect(throws: JSONReader.Failure.self) { try read(text) }
    }

    @Test func refusesInvalidUTF8() {
        let bytes: [UInt8] = Array(#"{"a":""#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8)
        #expect(throws: JSONReader.Failure.self) { try JSONReader.object(bytes) }
        let overlong: [UInt8] = Array(#"{"a":""#.utf8) + [0xC0, 0xAF] + Array(#""}"#.utf8)
        #expect(throws: JSONReader.Failure.self) { try JSONReader.object(overlong) }
        // ASCII strings skip validation: a bad byte anywhere in a string, after a long ASCII run
        // too, in a key, or beside an escape, still refuses the document.
        let ascii = Array(String(repeating: "a", count: 300).utf8)
        for bad: [UInt8] in [[0xFF], [0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xE2, 0x82]] {
            for document in [
                Array(#"{"a":""#.utf8) + ascii + bad + Array(#""}"#.utf8),
                Array(#"{""#.utf8) + bad + Array(#"":1}"#.utf8),
                Array(#"{"a":"\n"#.utf8) + bad + Array(#""}"#.utf8),
            ] {
                #expect(throws: JSONReader.Failure.self) { try JSONReader.object(document) }
            }
        }
        let text = try? JSONReader.object(Array(#"{"a":""#.utf8) + ascii + [0x7F, 0xC3, 0xA9] + Array(#""}"#.utf8))
        #expect(text?["a"] == .string(String(repeating: "a", count: 300) + "\u{7F}é"))
    }

    @Test func limitsNesting() throws {
        let deep = String(repeating: #"{"a":"#, count: 40) + "1" + String(repeating: "}", count: 40)
        #expect(throws: JSONReader.Failure.self) { try read(deep) }
        let fine = String(repeating: #"{"a":"#, count: 10) + "1" + String(repeating: "}", count: 10)
        _ = try read(fine)
    }
}
