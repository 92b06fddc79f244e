import AuthCLI
import AuthCrypto
import AuthDomain
import AuthStore
import AuthWorker
import Foundation
import Testing

@testable import TestSupport

@Suite struct IdentifiersTests {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))

    /// The wire form of a UUID, written without `uuidString`, is exactly its lower-cased form.
    @Test func uuidsAreWrittenInTheirCanonicalLowerCaseForm() {
        var samples = (0..<1_000).map { _ in UUID() }
        samples.append(UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)))
        samples.append(UUID(uuid: (255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255)))
        for uuid in samples { #expect(uuid.lowercasedString == uuid.uuidString.lowercased()) }
        #expect(
            UUID(uuidString: "0190A5B2-7C3D-7E4F-8A1B-2C3D4E5F6A7B")?.lowercasedString
                == "0190a5b2-7c3d-7e4f-8a1b-2c3d4e5f6a7b")
    }

    @Test func uuidsAreVersion7WithTheClocksMilliseconds() throws {
        let ids = Identifiers(clock: clock)
        let id = try ids.uuid()
        let bytes = withUnsafeBytes(of: id.uuid) { Array($0) }
        #expect(bytes[6] >> 4 == 7)
        #expect(bytes[8] >> 6 == 0b10)
        let milliseconds = bytes[0..<6].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        #expect(milliseconds == 1_795_953_600_000)
        #expect(try ids.uuid() != id)
    }

    @Test(arguments: [
        ("Mario Rossi", "mario_rossi"), ("  José  Álvarez ", "jose_alvarez"), ("李雷", ""),
        ("O'Brien-Smith", "o_brien_smith"),
        ("A very long name that goes on and on", "a_very_long_name_that"),
        ("ＡＢＣ Straße", "abc_strasse"), ("MARIO99", "mario99"),
        ("Averyveryverylongsinglewordname", "averyveryverylongsinglew"),
        ("Averyveryverylongsinglewordname and more", "averyveryverylongsinglew"),
        ("abcdefghijklmnopqrst uvwxyz ab", "abcdefghijklmnopqrst"), ("ab李cd", "ab_cd"), ("Renée Zoë", "renee_zoe"),
        ("--", ""), ("", ""), ("x", "x"),
    ])
    func slugs(name: String, slug: String) {
        #expect(Identifiers.slug(name) == slug)
    }

    @Test func handlesHaveASuffixAndAFallbackBase() throws {
        let ids = Identifiers(clock: clock)
        #expect(try ids.handle(name: "Mario Rossi", isGuest: false).wholeMatch(of: /mario_rossi_[0-9a-f]{4}/) != nil)
        #expect(try ids.handle(name: nil, isGuest: true).wholeMatch(of: /guest_[0-9a-f]{6}/) != nil)
        #expect(try ids.handle(name: "李雷", isGuest: false).wholeMatch(of: /user_[0-9a-f]{4}/) != nil)
    }

    @Test func secretsUseTheAlphanumericAlphabet() throws {
        let ids = Identifiers(clock: clock, random: CountingRandom())
        let secret = try ids.secret(characters: 200)
        #expect(secret.count == 200)
        #expect(secret.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) })
    }

    /// The UUID's random bits are the source's bytes, as `bytes(16)` would give them, under the
    /// time, version and variant bits.
    @Test func uuidsTakeTheirRandomBitsFromTheSource() throws {
        let id = try Identifiers(clock: clock, random: CountingRandom()).uuid()
        let drawn = try CountingRandom().bytes(16)
        let bytes = withUnsafeBytes(of: id.uuid) { Array($0) }
        #expect(bytes[6] == 0x70 | (drawn[6] & 0x0F))
        #expect(bytes[7] == drawn[7])
        #expect(bytes[8] == 0x80 | (drawn[8] & 0x3F))
        #expect(Array(bytes[9...]) == Array(drawn[9...]))
    }

    /// A secret is the source's bytes below 248 mapped onto the 62 characters, in order: draws of
    /// `count` bytes until enough are kept (the counting source yields bytes of 248 and above, so
    /// some are dropped and a second draw is needed).
    @Test func secretsKeepTheSourcesBytesBelow248InOrder() throws {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
        for count in [1, 7, 43, 200] {
            let secret = try Identifiers(clock: clock, random: CountingRandom()).secret(characters: count)
            let source = CountingRandom()
            var expected: [Character] = []
            var draws = 0
            while expected.count < count {
                draws += 1
                for byte in try source.bytes(count) where byte < 248 && expected.count < count {
                    expected.append(alphabet[Int(byte % 62)])
                }
            }
            #expect(secret == String(expected), "\(count) characters")
            if count == 200 { #expect(draws == 2, "the dropped bytes were drawn again") }
        }
        #expect(try Identifiers(clock: clock).secret(characters: 0) == "")
    }
}
