import AuthCrypto
import Foundation
import Testing

@testable import TestSupport

@Suite struct Base64URLTests {
    @Test(arguments: [
        ([UInt8](), ""), ([0x66], "Zg"), ([0x66, 0x6f], "Zm8"), ([0x66, 0x6f, 0x6f], "Zm9v"),
        ([0xfb, 0xff, 0xfe], "-__-"), ([0x00, 0x10, 0x83, 0x10, 0x51, 0x87], "ABCDEFGH"),
    ])
    func roundTrips(bytes: [UInt8], text: String) {
        #expect(Base64URL.encode(bytes) == text)
        #expect(Base64URL.decode(text) == bytes)
    }

    /// Every length from 0 to 200, against Foundation's base64 with the URL alphabet and no
    /// padding, from an array, a slice and a collection with no contiguous storage.
    @Test func encodesAsFoundationDoes() {
        var state: UInt64 = 0x5EED
        for length in 0...200 {
            let bytes = (0..<length).map { _ in
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return UInt8(truncatingIfNeeded: state >> 56)
            }
            let expected = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            #expect(Base64URL.encode(bytes) == expected)
            #expect(Base64URL.encode(([0x00] + bytes + [0xFF])[1..<(length + 1)]) == expected)
            #expect(Base64URL.encode(bytes.lazy.map { $0 }) == expected)
            #expect(Base64URL.decode(expected) == bytes)
        }
    }

    /// Every byte that is not in the alphabet, at every position of texts of 2 to 9 characters,
    /// is refused; and of the 64 last characters a text ending in two or three characters can
    /// have, exactly those that leave the spare bits zero are accepted, each decoding to bytes
    /// that encode back to the same text.
    @Test func refusesEveryOtherByteAnywhereAndEverySpareBit() {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        let outside = (0...255).map(UInt8.init).filter { !alphabet.contains($0) }
        #expect(outside.count == 192)
        for length in 2...9 where length % 4 != 1 {
            let valid = [UInt8](repeating: UInt8(ascii: "A"), count: length)
            #expect(Base64URL.decode(valid) == [UInt8](repeating: 0, count: length / 4 * 3 + max(0, length % 4 - 1)))
            for position in 0..<length {
                for byte in outside {
                    var text = valid
                    text[position] = byte
                    #expect(Base64URL.decode(text) == nil, "\(byte) at \(position) of \(length)")
                }
            }
        }
        for prefix in ["", "Zm9v"] {
            for tail in ["Z", "Zm"] {
                var accepted = 0
                for last in alphabet {
                    let text = Array((prefix + tail).utf8) + [last]
                    if let bytes = Base64URL.decode(text) {
                        accepted += 1
                        #expect(Array(Base64URL.encode(bytes).utf8) == text)
                    }
                }
                // Two characters leave four spare bits (4 of 64 last characters keep them zero),
                // three leave two (16 of 64).
                #expect(accepted == (tail.count == 1 ? 4 : 16), "\(prefix + tail)")
            }
        }
    }

    @Test(arguments: ["Zg==", "Zm9v=", "Zm+v", "Zm/v", "Z", "Zm9v Zg", "Zh", "Zm9"])
    func rejectsNonCanonicalInput(text: String) {
        // Padding, the standard alphabet, impossible lengths, spaces and non-zero trailing bits
        // ("Zh" and "Zm9" are "f" and "fo" with stray bits: the canonical forms are "Zg" and "Zm8").
        #expect(Base64URL.decode(text) == nil)
    }
}

@Suite struct DigestTests {
    @Test func sha256KnownAnswers() {
        #expect(Hex.encode(SHA256.hash("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(Hex.encode(SHA256.hash("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(
            Hex.encode(SHA256.hash("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        #expect(
            Hex.encode(SHA256.hash([UInt8](repeating: 0x61, count: 1_000_000)))
                == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    /// RFC 4231 test cases 1, 2 and 6 (a key longer than the block is hashed first), and a key of
    /// exactly one block.
    @Test func hmacSHA256KnownAnswers() {
        func mac(_ key: [UInt8], _ message: String) -> String {
            Hex.encode(HMACSHA256.mac(key: key, message: Array(message.utf8)))
        }
        #expect(
            mac([UInt8](repeating: 0x0b, count: 20), "Hi There")
                == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        #expect(
            mac(Array("Jefe".utf8), "what do ya want for nothing?")
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        #expect(
            mac([UInt8](repeating: 0xaa, count: 131), "Test Using Larger Than Block-Size Key - Hash Key First")
                == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
        #expect(
            mac([UInt8](repeating: 0x01, count: 64), "")
                == "11581ebc1f05ecefdee13d63845c1a43b219a7bc8e0e90d3396baeb2a55677d7")
    }

    @Test func constantTimeComparison() {
        #expect(ConstantTime.equals([1, 2, 3] as [UInt8], [1, 2, 3] as [UInt8]))
        #expect(!ConstantTime.equals([1, 2, 3] as [UInt8], [1, 2, 4] as [UInt8]))
        #expect(!ConstantTime.equals([1, 2, 3] as [UInt8], [1, 2] as [UInt8]))
        #expect(ConstantTime.equals([UInt8](), [UInt8]()))
    }

    @Test func randomBytesDiffer() throws {
        let first = try SecureRandom.bytes(32)
        let second = try SecureRandom.bytes(32)
        #expect(first.count == 32)
        #expect(first != second)
    }

    /// Small requests come from a buffer of 4 KiB: across many refills, from several threads at
    /// once, every answer has its length and no two 16-byte answers are the same (as no two
    /// draws of 128 random bits are); large requests bypass the buffer.
    @Test func bufferedRandomBytesNeverRepeat() async throws {
        for count in [0, 1, 255, 256, 257, 4096, 5000] { #expect(try SecureRandom.bytes(count).count == count) }
        let draws = try await withThrowingTaskGroup(of: [[UInt8]].self) { group in
            for _ in 0..<4 {
                group.addTask { try (0..<2_000).map { _ in try SecureRandom.bytes(16) } }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        #expect(draws.count == 8_000)
        #expect(Set(draws).count == 8_000, "a buffered random value was handed out twice")
        #expect(!draws.contains([UInt8](repeating: 0, count: 16)))
    }

    /// `fill` (a UUID's bytes, a secret's) serves the same buffer without an array: every size
    /// filled whole, and no two 16-byte fills alike across threads and refills.
    @Test func filledRandomBytesNeverRepeat() async throws {
        for count in [1, 255, 256, 257, 4096, 5000] {
            var buffer = [UInt8](repeating: 0, count: count)
            try buffer.withUnsafeMutableBytes { try SystemRandom().fill($0) }
            // All zero by chance: 2^-8 for one byte; the larger ones never.
            if count > 1 { #expect(buffer.contains { $0 != 0 }, "\(count) bytes") }
        }
        try SystemRandom().fill(UnsafeMutableRawBufferPointer(start: nil, count: 0))
        let draws = try await withThrowingTaskGroup(of: [[UInt8]].self) { group in
            for _ in 0..<4 {
                group.addTask {
                    try (0..<2_000).map { _ in
                        var sixteen = [UInt8](repeating: 0, count: 16)
                        try sixteen.withUnsafeMutableBytes { try SystemRandom().fill($0) }
                        return sixteen
                    }
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        #expect(Set(draws).count == 8_000, "a buffered random value was handed out twice")
        #expect(!draws.contains([UInt8](repeating: 0, count: 16)))
    }
}

@Suite struct SigningKeyTests {
    @Test(arguments: [SigningKey.Algorithm.edDSA, .es256])
    func generatedKeysRoundTripThroughPEM(algorithm: SigningKey.Algorithm) throws {
        let key = try SigningKey.generate(algorithm)
        let reloaded = try SigningKey(pem: try key.privateKeyPEM())
        #expect(reloaded.keyID == key.keyID)
        #expect(reloaded.algorithm == algorithm)
        #expect(key.publicJWK["kid"] == key.keyID)
        #expect(key.publicJWK["d"] == nil, "the public JWK must not carry the private key")
        let signature = try key.sign(Array("message".utf8))
        #expect(signature.count == 64)
    }

    @Test func rejectsGarbageAndUnsupportedKeys() {
        #expect(throws: SigningKey.Failure.self) { try SigningKey(pem: "not a key") }
    }

    @Test func rfc7638ThumbprintOfAKnownEd25519Key() throws {
        // RFC 8037 Appendix A.1 private key; A.3 gives its thumbprint.
        let pem = """
            -----BEGIN PRIVATE KEY-----
            MC4CAQAwBQYDK2VwBCIEIJ1hsZ3v/VpguoRK9JLsLMREScVpezJpGXA7rAMcrn9g
            -----END PRIVATE KEY-----
            """
        let key = try SigningKey(pem: pem)
        #expect(key.publicJWK["x"] == "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
        #expect(key.keyID == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k")
    }
}
