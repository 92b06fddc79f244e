import AuthCrypto
import Foundation

/// Writes a fresh signing key to a temporary file for tests that need AUTH_SIGNING_KEYS.
enum TestKeys {
    static func temporaryKeyFile(_ algorithm: SigningKey.Algorithm = .edDSA) throws -> (path: String, key: SigningKey) {
        let key = try SigningKey.generate(algorithm)
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("signing-\(UUID()).pem").path
        try key.privateKeyPEM().write(toFile: path, atomically: true, encoding: .utf8)
        return (path, key)
    }
}
