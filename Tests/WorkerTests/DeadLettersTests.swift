import Foundation
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// Dead letters keep what helps a person find the problem and drop what must not be kept.
@Suite struct DeadLettersTests {
    private func text(_ copy: DeadLetters.Copy) -> String { String(decoding: copy.value, as: UTF8.self) }

    @Test func credentialsInJSONAreReplacedAtAnyDepth() throws {
        // No id, so a dead letter; a password and a token inside.
        let value = Array(
            #"{"specversion":"1.0","data":{"method":"password","email":"a@example.com","password":"hunter2hunter2","profile":{"refresh_token":"rt_secret"}}}"#
                .utf8)
        let copy = DeadLetters.copy(of: value, limit: 1 << 20)
        #expect(copy.redacted)
        #expect(!text(copy).contains("hunter2"))
        #expect(!text(copy).contains("rt_secret"))
        #expect(text(copy).contains("a@example.com"), "what is not a credential stays, to find the problem")
        let parsed = try JSONSerialization.jsonObject(with: Data(copy.value)) as? [String: Any]
        let data = parsed?["data"] as? [String: Any]
        #expect(data?["password"] as? String == DeadLetters.redacted)
    }

    @Test func duplicateMembersDoNotHideACredential() {
        let value = Array(#"{"data":{"password":"first-secret","password":"second-secret"}}"#.utf8)
        let copy = DeadLetters.copy(of: value, limit: 1 << 20)
        #expect(!text(copy).contains("first-secret"))
        #expect(!text(copy).contains("second-secret"))
    }

    @Test(arguments: [
        #"{"data":{"identity_token":"eyJhbGciOi.secret.sig","method":"apple""#,
        #"{"data": {"password" : "p\"a\\ss-secret"  , "x": 1"#,
        #"garbage "access_token":"at_secret"#,
        #"{"link_to":"at_secret"}}"#,
    ])
    func credentialsInBrokenJSONAreReplacedToo(value: String) {
        let copy = DeadLetters.copy(of: Array(value.utf8), limit: 1 << 20)
        #expect(copy.redacted)
        #expect(!text(copy).contains("secret"), "\(text(copy))")
    }

    @Test func valuesWithoutCredentialsAreKeptByteForByte() {
        for value in ["{not json", #"{"data":{"method":"guest"}}"#, "", "\u{0}\u{1}binary"] {
            let copy = DeadLetters.copy(of: Array(value.utf8), limit: 1 << 20)
            #expect(copy == DeadLetters.Copy(value: Array(value.utf8), truncatedFrom: nil, redacted: false))
        }
    }

    @Test func aLongValueIsCutAndSaysHowLongItWas() {
        let value = [UInt8](repeating: UInt8(ascii: "x"), count: 2_000_000)
        let copy = DeadLetters.copy(of: value, limit: 1000)
        #expect(copy.value.count == 1000)
        #expect(copy.truncatedFrom == 2_000_000)
    }
}
