import AuthCrypto
import Foundation
import StrictJSON

/// A public JSON Web Key (RFC 7517) turned into a `PublicKey`.
public struct JWK: Sendable {
    public var keyID: String?
    /// `use`, when given; keys for `enc` are never used to verify signatures.
    public var use: String?
    /// `alg`, when given: the only algorithm this key may verify.
    public var algorithm: String?
    public var key: PublicKey

    public init(keyID: String?, use: String?, algorithm: String?, key: PublicKey) {
        self.keyID = keyID
        self.use = use
        self.algorithm = algorithm
        self.key = key
    }

    struct Fields: Decodable {
        var kty: String?
        var kid: String?
        var use: String?
        var alg: String?
        var n: String?
        var e: String?
        var crv: String?
        var x: String?
        var y: String?
    }

    /// Parses one JWK object. Private members (`d`, …) are ignored, never used.
    /// - Throws: `JOSEError.invalidKey` naming what is wrong.
    public init(json: Data) throws {
        let fields: Fields
        do {
            fields = try JSONDecoder().decode(Fields.self, from: json)
        } catch {
            throw JOSEError(.invalidKey, "a JWK must be a JSON object")
        }
        try self.init(fields: fields)
    }

    init(fields: Fields) throws {
        func decode(_ value: String?, _ name: String) throws -> [UInt8] {
            guard let value, let bytes = Base64URL.decode(value), !bytes.isEmpty else {
                throw JOSEError(.invalidKey, "JWK member \(name) is missing or not base64url")
            }
            return bytes
        }
        let key: PublicKey
        switch fields.kty {
        case "RSA":
            key = try PublicKey.rsa(modulus: try decode(fields.n, "n"), exponent: try decode(fields.e, "e"))
        case "EC":
            guard let curve = fields.crv.flatMap(JWSAlgorithm.Curve.init(rawValue:)) else {
                throw JOSEError(.invalidKey, "unsupported EC curve")
            }
            key = try PublicKey.ec(curve: curve, x: try decode(fields.x, "x"), y: try decode(fields.y, "y"))
        case "OKP":
            guard fields.crv == "Ed25519" else { throw JOSEError(.invalidKey, "unsupported OKP curve") }
            key = try PublicKey.ed25519(try decode(fields.x, "x"))
        default:
            throw JOSEError(.invalidKey, "unsupported key type")
        }
        self.init(keyID: fields.kid, use: fields.use, algorithm: fields.alg, key: key)
    }

    /// True when this key may verify a signature made with `algorithm`.
    public func permits(_ algorithm: JWSAlgorithm) -> Bool {
        if let use, use != "sig" { return false }
        if let declared = self.algorithm, declared != algorithm.rawValue { return false }
        return key.fits(algorithm)
    }
}

/// A set of verification keys, looked up by `kid`.
public struct JWKSet: Sendable {
    public private(set) var keys: [JWK]
    /// Members that could not be used (unsupported type, too small, malformed), for diagnostics.
    public private(set) var skipped: [String]

    public init(keys: [JWK]) {
        self.keys = keys
        self.skipped = []
    }

    /// Parses `{"keys": [...]}`, or the `{"<kid>": "<PEM certificate>"}` form.
    ///
    /// Keys that cannot be used are skipped (and listed in `skipped`) rather than failing the
    /// whole set, so one exotic key in a provider's set does not lock every user out.
    /// - Throws: `JOSEError.invalidKey` when the document is neither form.
    public init(json: Data) throws {
        guard let object = try? JSONSerialization.jsonObject(with: json) as? [String: Any] else {
            throw JOSEError(.invalidKey, "a key set must be a JSON object")
        }
        keys = []
        skipped = []
        if let members = object["keys"] {
            guard let array = members as? [Any] else { throw JOSEError(.invalidKey, "keys must be an array") }
            for (index, member) in array.enumerated() {
                do {
                    guard JSONSerialization.isValidJSONObject(member) else {
                        throw JOSEError(.invalidKey, "not an object")
                    }
                    let data = try JSONSerialization.data(withJSONObject: member)
                    keys.append(try JWK(json: data))
                } catch {
                    let kid = (member as? [String: Any])?["kid"] as? String
                    skipped.append("\(kid ?? "#\(index)"): \(error)")
                }
            }
            return
        }
        for (kid, value) in object.sorted(by: { $0.key < $1.key }) {
            guard let pem = value as? String else {
                throw JOSEError(.invalidKey, "a certificate map holds PEM strings")
            }
            do {
                keys.append(JWK(keyID: kid, use: "sig", algorithm: nil, key: try PublicKey.pem(pem)))
            } catch {
                skipped.append("\(kid): \(error)")
            }
        }
    }

    /// Keys whose `kid` is `keyID`.
    public func keys(withID keyID: String) -> [JWK] {
        keys.filter { $0.keyID == keyID }
    }

    /// Every `kid` in the set.
    public var keyIDs: [String] { keys.compactMap(\.keyID) }
}
