import Testing

@testable import WebAuthn

/// The strict CBOR reader: what authenticators send is read, and every laxity an attacker could
/// use to make two parsers disagree is refused (RFC 8949 §4.2, CTAP2 canonical form).
@Suite struct CBORTests {
    func bytes(_ hex: String) -> [UInt8] {
        var out: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            out.append(UInt8(hex[index..<next], radix: 16) ?? 0)
            index = next
        }
        return out
    }

    @Test func readsTheItemsOfACOSEKeyAndAnAttestationObject() throws {
        // RFC 8949 Appendix A examples.
        #expect(try CBOR.decode(bytes("00")) == .integer(0))
        #expect(try CBOR.decode(bytes("1903e8")) == .integer(1000))
        #expect(try CBOR.decode(bytes("3903e7")) == .integer(-1000))
        #expect(try CBOR.decode(bytes("4401020304")) == .bytes([1, 2, 3, 4]))
        #expect(try CBOR.decode(bytes("6449455446")) == .text("IETF"))
        #expect(try CBOR.decode(bytes("83010203")) == .array([.integer(1), .integer(2), .integer(3)]))
        #expect(try CBOR.decode(bytes("f4")) == .bool(false))
        #expect(try CBOR.decode(bytes("f6")) == .null)
        let map = try CBOR.decode(bytes("a201022003"))  // {1: 2, -1: 3}
        #expect(map[1] == .integer(2) && map[-1] == .integer(3))
        let text = try CBOR.decode(bytes("a163666d74646e6f6e65"))  // {"fmt": "none"}
        #expect(text["fmt"] == .text("none"))
    }

    @Test(arguments: [
        ("1bffffffffffffffff", "integer out of range"),
        ("1801", "not in its shortest form"),
        ("190017", "not in its shortest form"),
        ("5f4101ff", "indefinite"),
        ("9f01ff", "indefinite"),
        ("a201020103", "duplicate map key"),
        ("a1f401", "map keys must be integers or text"),
        ("c11a514b67b0", "tags"),
        ("f93c00", "floating-point"),
        ("f7", "simple value"),
        ("62c328", "not UTF-8"),
        ("4501", "past the end"),
        ("9a7fffffff", "past the end"),
        ("0000", "trailing bytes"),
        ("1c", "reserved"),
        ("ff", "unexpected break"),
    ])
    func refusesWhatIsNotStrict(hex: String, reason: String) {
        #expect {
            _ = try CBOR.decode(bytes(hex))
        } throws: { error in
            (error as? CBOR.Failure)?.reason.contains(reason) == true
        }
    }

    @Test func refusesNestingDeeperThanTheLimitAndTooManyItems() {
        let deep = [UInt8](repeating: 0x81, count: CBOR.maximumDepth) + [0x00]
        #expect(throws: CBOR.Failure.self) { try CBOR.decode(deep) }
        let shallow = [UInt8](repeating: 0x81, count: CBOR.maximumDepth - 1) + [0x00]
        #expect(throws: Never.self) { try CBOR.decode(shallow) }
        // An array announcing 5,000 items of one byte each: more items than the limit.
        let many = [0x99, 0x13, 0x88] + [UInt8](repeating: 0x00, count: 5000)
        #expect(throws: CBOR.Failure.self) { try CBOR.decode(many) }
    }

    @Test func aPrefixEndsWhereItsItemEnds() throws {
        let input = bytes("a10102") + [0xAA, 0xBB]
        let (value, end) = try CBOR.decodePrefix(input[...])
        #expect(value[1] == .integer(2))
        #expect(end == 3)
    }

    @Test func aCOSEKeyIsHeldToTheProvidersKeyPolicy() throws {
        // An EC2 key whose point is not on P-256.
        let offCurve: CBORValue = .map([
            .init(key: .integer(1), value: .integer(2)), .init(key: .integer(3), value: .integer(-7)),
            .init(key: .integer(-1), value: .integer(1)),
            .init(key: .integer(-2), value: .bytes([UInt8](repeating: 1, count: 32))),
            .init(key: .integer(-3), value: .bytes([UInt8](repeating: 2, count: 32))),
        ])
        #expect(throws: COSEKey.Failure.self) { try COSEKey(offCurve) }
        // Ed25519's neutral point (small order).
        let neutral: CBORValue = .map([
            .init(key: .integer(1), value: .integer(1)), .init(key: .integer(3), value: .integer(-8)),
            .init(key: .integer(-1), value: .integer(6)),
            .init(key: .integer(-2), value: .bytes([1] + [UInt8](repeating: 0, count: 31))),
        ])
        #expect(throws: COSEKey.Failure.self) { try COSEKey(neutral) }
        // RSA with an even exponent, and a 1024-bit modulus.
        let keys: [([UInt8], [UInt8])] = [
            ([0xC1] + [UInt8](repeating: 0xFF, count: 255), [0x01, 0x00, 0x00]),
            ([0xC1] + [UInt8](repeating: 0xFF, count: 127), [0x01, 0x00, 0x01]),
        ]
        for (modulus, exponent) in keys {
            let rsa: CBORValue = .map([
                .init(key: .integer(1), value: .integer(3)), .init(key: .integer(3), value: .integer(-257)),
                .init(key: .integer(-1), value: .bytes(modulus)), .init(key: .integer(-2), value: .bytes(exponent)),
            ])
            #expect(throws: COSEKey.Failure.self) { try COSEKey(rsa) }
        }
        // A key type that does not fit its algorithm.
        let mismatched: CBORValue = .map([
            .init(key: .integer(1), value: .integer(3)), .init(key: .integer(3), value: .integer(-7)),
        ])
        #expect(throws: COSEKey.Failure.self) { try COSEKey(mismatched) }
    }

    @Test func anECDSASignatureMustBeStrictDER() {
        // r = 1, s = 1 in DER, and the same with a needless leading zero (BER, not DER).
        #expect(Signature.derToRaw([0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01], size: 32) != nil)
        #expect(Signature.derToRaw([0x30, 0x07, 0x02, 0x02, 0x00, 0x01, 0x02, 0x01, 0x01], size: 32) == nil)
        #expect(Signature.derToRaw([0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01, 0x00], size: 32) == nil)
    }

    /// A map as large as the item limit allows, its keys all different but an integer and a text
    /// key of the same look: read; the same with one duplicate, last: refused. (Keys are checked
    /// by hash: an unauthenticated sign-in's extension map costs linear time.)
    @Test func aLargeMapIsCheckedForDuplicatesWholeAndAllowsEqualLookingKeysOfTwoKinds() throws {
        func map(_ keys: [[UInt8]]) -> [UInt8] {
            var out: [UInt8] = [0xb9, UInt8(keys.count >> 8), UInt8(keys.count & 0xff)]
            for key in keys { out += key + [0x00] }
            return out
        }
        func integer(_ value: Int) -> [UInt8] { [0x19, UInt8(value >> 8), UInt8(value & 0xff)] }
        func text(_ value: Int) -> [UInt8] {
            let digits = Array(String(value).utf8)
            return [0x60 | UInt8(digits.count)] + digits
        }
        var keys = (1000..<2000).map(integer) + (0..<1000).map(text)
        #expect(keys.count == 2000)
        guard case .map(let entries) = try CBOR.decode(map(keys)) else {
            Issue.record("not a map")
            return
        }
        #expect(entries.count == 2000)
        keys[1999] = text(0)
        #expect(throws: CBOR.Failure.self) { try CBOR.decode(map(keys)) }
        keys[1999] = integer(1000)
        #expect(throws: CBOR.Failure.self) { try CBOR.decode(map(keys)) }
    }
}
