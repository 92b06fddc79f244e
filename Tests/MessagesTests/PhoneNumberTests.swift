import Foundation
import Testing

@testable import Messages
@testable import TestSupport

extension Trait where Self == ConditionTrait {
    /// libphonenumber's Python port, the independent judge of phone numbers.
    static var requiresPhonenumbers: Self {
        .enabled(
            if: IntegrationEnvironment.isRequired || IndependentJOSE.canImport("phonenumbers"),
            "python3 with phonenumbers is not installed")
    }
}

@Suite struct PhoneNumberTests {
    @Test func e164NumbersOfAKnownCountryAndLength() throws {
        let us = try PhoneNumber(e164: "+14155550100")
        #expect(us.callingCode == 1 && us.nationalNumber == "4155550100" && us.e164 == "+14155550100")
        let korea = try PhoneNumber(e164: "+821012345678")
        #expect(korea.callingCode == 82 && korea.nationalNumber == "1012345678")
        #expect(try PhoneNumber(e164: "+447911123456").callingCode == 44)
        #expect(try PhoneNumber(e164: "+37161234567").callingCode == 371, "a three-digit code")
    }

    @Test(arguments: [
        ("14155550100", PhoneNumber.Refusal.notE164), ("+1 415 555 0100", .notE164), ("+1-415-555-0100", .notE164),
        ("+0123456789", .notE164), ("+1415555010012345", .notE164), ("+1", .notE164), ("+", .notE164), ("", .notE164),
        ("+１４１５５５５０１００", .notE164), ("+4155550100a", .notE164),
        ("+1415555010", .wrongLength), ("+141555501000", .wrongLength), ("+1234567", .wrongLength),
        ("+8823456789012", .unknownCallingCode), ("+80012345678", .unknownCallingCode),
        ("+9991234567", .unknownCallingCode),
    ])
    func refusals(text: String, refusal: PhoneNumber.Refusal) {
        #expect(throws: refusal) { try PhoneNumber(e164: text) }
    }

    /// Every calling code at every length from one under its shortest to one over its longest,
    /// judged by libphonenumber too: possible there (not only when dialled locally) exactly when
    /// accepted here. Numbers libphonenumber rewrites while parsing (Norfolk Island's five digits
    /// get a 3 in front) are left out: E.164 has no such rule, and they are refused here.
    @Test(.requiresPhonenumbers) func libphonenumberAgrees() async throws {
        var candidates: [String] = []
        for (code, lengths) in CallingCodes.lengths {
            guard let shortest = lengths.min(), let longest = lengths.max() else { continue }
            for length in Int(shortest) - 1...Int(longest) + 1 where length > 0 {
                let number = "+\(code)" + String(repeating: "2", count: length)
                if number.utf8.count <= 16 { candidates.append(number) }
            }
        }
        #expect(candidates.count > 1000)
        let verdicts = try await IndependentJOSE.run(
            """
            import sys, phonenumbers
            from phonenumbers import ValidationResult
            for line in sys.stdin.read().split():
                try:
                    number = phonenumbers.parse(line, None)
                    if "+%d%d" % (number.country_code, number.national_number) != line:
                        print("rewritten")
                        continue
                    geographic = phonenumbers.region_code_for_country_code(number.country_code) != "001"
                    possible = phonenumbers.is_possible_number_with_reason(number) == ValidationResult.IS_POSSIBLE
                    print("yes" if geographic and possible else "no")
                except phonenumbers.NumberParseException:
                    print("no")
            """, input: candidates.joined(separator: "\n")
        ).split(separator: "\n").map(String.init)
        #expect(verdicts.count == candidates.count)
        #expect(verdicts.filter { $0 == "rewritten" }.count < 5)
        var disagreements: [String] = []
        for (candidate, verdict) in zip(candidates, verdicts) where verdict != "rewritten" {
            let accepted = (try? PhoneNumber(e164: candidate)) != nil
            if accepted != (verdict == "yes") {
                disagreements.append("\(candidate): ours \(accepted), theirs \(verdict)")
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.prefix(20))")
    }
}
