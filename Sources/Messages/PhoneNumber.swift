/// A phone number in E.164 form (`+` and up to 15 digits), one a country uses: its calling code is
/// a geographic country's and its national number has a length that country's numbers have
/// (`CallingCodes`, generated from libphonenumber's metadata). Spaces, dashes, dots and brackets
/// are not accepted: the gateway sends the number as E.164, as the contract says.
public struct PhoneNumber: Sendable, Hashable, CustomStringConvertible {
    /// The country calling code (1 for North America, 44 for the United Kingdom, 82 for Korea).
    public let callingCode: UInt16
    /// The national significant number's digits.
    public let nationalNumber: String

    /// Why a text is not a phone number this service accepts.
    public enum Refusal: Error, Equatable, Sendable {
        /// Not `+` followed by at most 15 digits, the first not 0.
        case notE164
        /// No geographic country has the calling code it starts with.
        case unknownCallingCode
        /// The country's numbers never have that many digits.
        case wrongLength
    }

    /// - Throws: `Refusal`.
    public init(e164 text: String) throws(Refusal) {
        let bytes = Array(text.utf8)
        guard bytes.first == UInt8(ascii: "+"), (3...16).contains(bytes.count),
            bytes.dropFirst().allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            bytes[1] != UInt8(ascii: "0")
        else { throw .notE164 }
        let digits = bytes.dropFirst()
        // Calling codes are prefix-free (E.164): at most one of the first one, two or three digits is one.
        for width in 1...3 {
            var code: UInt16 = 0
            for digit in digits.prefix(width) { code = code * 10 + UInt16(digit - UInt8(ascii: "0")) }
            guard let lengths = CallingCodes.lengths[code] else { continue }
            let national = digits.dropFirst(width)
            guard lengths.contains(UInt8(national.count)) else { throw .wrongLength }
            callingCode = code
            nationalNumber = String(decoding: national, as: UTF8.self)
            return
        }
        throw .unknownCallingCode
    }

    /// Whether a geographic country has the calling code.
    public static func isCallingCode(_ code: UInt16) -> Bool { CallingCodes.lengths[code] != nil }

    /// The number without its last three digits: the block of a thousand numbers it is in, which
    /// SMS pumping walks through.
    public var block: String { String(e164.dropLast(3)) }

    /// `+<calling code><national number>`.
    public var e164: String { "+\(callingCode)\(nationalNumber)" }

    public var description: String { e164 }
}
