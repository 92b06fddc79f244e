import AuthCrypto
import Foundation
import StrictJSON

/// A compact JWS (RFC 7515 §7.1), split and decoded strictly, signature not yet checked.
public struct CompactJWS: Sendable {
    /// The protected header's members this verifier reads.
    public struct Header: Sendable {
        public var alg: String
        public var kid: String?
        public var typ: String?
        /// Every member, for parameters this type does not model.
        public var members: [String: JSONValue]

        init(members: [String: JSONValue]) throws {
            guard case .string(let alg)? = members["alg"] else {
                throw JOSEError(.malformed, "the header must have a string alg")
            }
            self.alg = alg
            switch members["kid"] {
            case nil: kid = nil
            case .string(let value)?: kid = value
            default: throw JOSEError(.malformed, "kid must be a string")
            }
            switch members["typ"] {
            case nil: typ = nil
            case .string(let value)?: typ = value
            default: throw JOSEError(.malformed, "typ must be a string")
            }
            if members["crit"] != nil {
                // RFC 7515 §4.1.11: a recipient must reject extensions it does not understand; this
                // verifier understands none.
                throw JOSEError(.malformed, "unsupported critical header parameters")
            }
            self.members = members
        }
    }

    public let header: Header
    /// The header's JSON bytes, as signed.
    public let headerBytes: [UInt8]
    /// The payload bytes, as signed.
    public let payload: [UInt8]
    public let signature: [UInt8]
    /// `BASE64URL(header) || '.' || BASE64URL(payload)`: what the signature covers.
    public let signingInput: [UInt8]

    /// Tokens longer than this are refused before any decoding. Default: 16 KiB.
    public static let defaultMaximumLength = 16 * 1024

    /// Splits and decodes a compact JWS.
    ///
    /// Exactly three segments of strict unpadded base64url; the header a JSON object with a
    /// string `alg`; `crit` refused (this verifier understands no extension). The payload is kept
    /// as bytes: claims are decoded only after the signature is checked.
    /// - Throws: `JOSEError.malformed`.
    public init(_ token: String, maximumLength: Int = CompactJWS.defaultMaximumLength) throws {
        var utf8 = Array(token.utf8)
        guard utf8.count <= maximumLength else { throw JOSEError(.malformed, "longer than \(maximumLength) bytes") }
        // Surrounding whitespace is a transport artefact; inside the token it is an error.
        while let last = utf8.last, last == 0x20 || last == 0x0A || last == 0x0D || last == 0x09 { utf8.removeLast() }
        let dots = utf8.indices.filter { utf8[$0] == UInt8(ascii: ".") }
        guard dots.count == 2 else { throw JOSEError(.malformed, "a compact JWS has three segments") }
        let headerPart = utf8[..<dots[0]]
        let payloadPart = utf8[(dots[0] + 1)..<dots[1]]
        let signaturePart = utf8[(dots[1] + 1)...]
        guard !headerPart.isEmpty, !payloadPart.isEmpty, !signaturePart.isEmpty else {
            throw JOSEError(.malformed, "empty segment")
        }
        guard let headerBytes = Base64URL.decode(headerPart), let payload = Base64URL.decode(payloadPart),
            let signature = Base64URL.decode(signaturePart)
        else { throw JOSEError(.malformed, "segments must be unpadded base64url") }
        let members: [String: JSONValue]
        do {
            members = try JSONReader.object(headerBytes)
        } catch let error as JSONReader.Failure {
            throw JOSEError(.malformed, "the header is not a JSON object: \(error)")
        }
        self.header = try Header(members: members)
        self.headerBytes = headerBytes
        self.payload = payload
        self.signature = signature
        self.signingInput = Array(utf8[..<dots[1]])
    }
}
