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

    /// Strings are scanned eight bytes a step until a word holds a quote, a backslash or a
    /// control character: each such byte, its neighbours in value (which a wrong mask would take
    /// for it or miss), and bytes beyond ASCII, at every offset of strings up to three words
    /// long and every alignment of the string in the document, read as a byte at a time would.
    @Test func everyByteThatEndsAWordStepIsFoundAtEveryOffset() throws {
        // (the bytes placed in the string, what they read as; nil: the document is refused)
        let cases: [([UInt8], String?)] = [
            ([0x5C, 0x22], "\""), ([0x5C, 0x5C], "\\"), ([0x5C, 0x6E], "\n"),
            (Array(#"\u00e9"#.utf8), "é"), ([0x21], "!"), ([0x23], "#"), ([0x5B], "["), ([0x5D], "]"),
            ([0x20], " "), ([0x7F], "\u{7F}"), ([0xC3, 0xA9], "é"), ([0xF0, 0x9F, 0x98, 0x80], "😀"),
            ([0x00], nil), ([0x01], nil), ([0x0A], nil), ([0x1F], nil), ([0xFF], nil), ([0x80], nil),
            ([0xC3, 0xA9, 0x1F], nil), ([0xC2, 0xA2], "¢"), ([0xDC, 0x9C], "\u{071C}"),
        ]
        for (bytes, expected) in cases {
            for length in 0...24 {
                for offset in 0...length {
                    for padding in 0..<8 {
                        let before = String(repeating: "a", count: offset)
                        let after = String(repeating: "b", count: length - offset)
                        let document =
                            Array(String(repeating: " ", count: padding).utf8) + Array(#"{"k":""#.utf8)
                            + Array(before.utf8) + bytes + Array(after.utf8) + Array(#""}"#.utf8)
                        if let expected {
                            #expect(try JSONReader.object(document)["k"] == .string(before + expected + after))
                        } else {
                            #expect(throws: JSONReader.Failure.self) { try JSONReader.object(document) }
                        }
                    }
                }
            }
        }
        // A string with no byte that ends the fast path, as long as a token, read whole.
        let long = String((0..<2_000).map { Character(Unicode.Scalar(UInt8(0x23 + $0 % 0x39))) })
        #expect(try read(#"{"k":""# + long + #""}"#)["k"] == .string(long))
    }

    @Test func limitsNesting() throws {
        let deep = String(repeating: #"{"a":"#, count: 40) + "1" + String(repeating: "}", count: 40)
        #expect(throws: JSONReader.Failure.self) { try read(deep) }
        let fine = String(repeating: #"{"a":"#, count: 10) + "1" + String(repeating: "}", count: 10)
        _ = try read(fine)
    }
}
