import AuthCrypto
import Foundation
import JOSE
import Messages
import ServiceKit

/// The worker's credential-encryption keys (X25519): gateways seal passwords and tokens to the
/// current one (`ECDH-ES` + `A256GCM` compact JWE), so no credential sits readable in the
/// requests topic, its backups or the dead-letter topic.
///
/// The first key is current: published first in the JWK Set, the one gateways should use. The
/// others still open what was sealed to them while gateways' cached key sets catch up, as for
/// signing keys. A JWE naming a `kid` is opened with that key only.
public struct CredentialKeys: CredentialOpener {
    public struct Key: Sendable {
        let privateKey: [UInt8]
        public let publicKey: [UInt8]
        /// The RFC 7638 thumbprint of the public JWK.
        public let keyID: String

        public init(privateKey: [UInt8]) throws {
            self.privateKey = privateKey
            publicKey = try X25519.publicKey(ofPrivateKey: privateKey)
            let x = Base64URL.encode(publicKey)
            keyID = Base64URL.encode(SHA256.hash(#"{"crv":"X25519","kty":"OKP","x":""# + x + #""}"#))
        }

        /// The public JWK: `use: enc`, `alg: ECDH-ES`.
        public var publicJWK: [String: String] {
            [
                "kty": "OKP", "crv": "X25519", "x": Base64URL.encode(publicKey), "kid": keyID, "use": "enc",
                "alg": "ECDH-ES",
            ]
        }
    }

    public let keys: [Key]

    public init(keys: [Key]) {
        self.keys = keys
    }

    /// Loads PEM files, the current key first.
    /// - Throws: `ConfigurationError` naming `AUTH_CREDENTIAL_KEYS`.
    public init(paths: [String]) throws {
        keys = try paths.map { path in
            guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigurationError(variable: Setting.credentialKeys.name, reason: "cannot read \(path)")
            }
            do {
                return try Key(privateKey: try X25519.privateKey(pem: pem))
            } catch {
                throw ConfigurationError(
                    variable: Setting.credentialKeys.name, reason: "\(path) is not an X25519 private key")
            }
        }
    }

    public struct Refusal: Error, CustomStringConvertible {
        public var description: String
    }

    public func open(_ sealed: String) throws -> String {
        let candidates: [Key]
        if let kid = JWE.keyID(of: sealed) {
            guard let key = keys.first(where: { $0.keyID == kid }) else {
                throw Refusal(description: "sealed to a key this worker does not have (kid \(kid.prefix(64)))")
            }
            candidates = [key]
        } else {
            candidates = keys
        }
        var failure: any Error = Refusal(description: "no credential key")
        for key in candidates {
            do {
                let opened = try JWE.openECDHES(sealed, privateKey: key.privateKey)
                guard let text = String(validating: opened.plaintext, as: UTF8.self) else {
                    throw Refusal(description: "the plaintext is not UTF-8")
                }
                return text
            } catch let error as JOSEError {
                failure = Refusal(description: error.reason)
            }
        }
        throw failure
    }
}
