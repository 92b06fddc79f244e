import Foundation
import Messages
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

    /// The contract's secret members (`writeOnly` in the request schema) are exactly the
    /// credential list the decoder, the redactor and the sealed credentials share.
    @Test func theContractsSecretMembersAreTheCredentialList() throws {
        let url = ProjectPaths.root.appendingPathComponent("contract/schemas/login-request.json")
        let schema = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any])
        let data = try #require((schema["properties"] as? [String: Any])?["data"] as? [String: Any])
        let members = try #require(data["properties"] as? [String: [String: Any]])
        let secret = Set(members.filter { $0.value["writeOnly"] as? Bool == true }.keys)
        #expect(secret == CredentialField.names)
        #expect(Set(RequestDecoder.sealableCredentials) == CredentialField.names)
        #expect(DeadLetters.credentialMembers == CredentialField.names)
        let sealable = try #require((members["sealed_credentials"]?["properties"] as? [String: Any])?.keys)
        #expect(Set(sealable) == CredentialField.names)
    }

    /// Every credential, in a value that parses (no id: a dead letter) and in one cut short, with
    /// its name spelt plainly and with escapes.
    @Test(arguments: CredentialField.allCases)
    func everyCredentialIsRedactedHoweverItIsSpelt(field: CredentialField) {
        let escaped = field.rawValue.unicodeScalars.map { String(format: "\\u%04x", $0.value) }.joined()
        for name in [field.rawValue, escaped] {
            let whole = #"{"specversion":"1.0","data":{"method":"x","NAME":"s3cret-VALUE"}}"#
                .replacingOccurrences(of: "NAME", with: name)
            let broken = #"{"data":{"method":"x", "NAME" : "s3cret-VALUE", "more":"#
                .replacingOccurrences(of: "NAME", with: name)
            for value in [whole, broken] {
                let copy = DeadLetters.copy(of: Array(value.utf8), limit: 1 << 20)
                #expect(copy.redacted, "\(value)")
                #expect(!text(copy).contains("s3cret-VALUE"), "\(value)")
            }
        }
    }

    @Test func aCredentialsNameInsideAnotherStringIsNoMember() {
        let value = Array(#"{"data":{"note":"\"password\":\"not a member\"", "x":"#.utf8)
        let copy = DeadLetters.copy(of: value, limit: 1 << 20)
        #expect(!copy.redacted)
        #expect(copy.value == value)
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
