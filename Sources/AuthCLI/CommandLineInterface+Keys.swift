import AdminConsole
import AuthClient
import AuthCrypto
import AuthDomain
import AuthStore
import AuthWorker
import Foundation
import JOSE
import Kafka
import Messages
import PGStore
import Passwords
import ServiceKit

#if canImport(Glibc)
    import Glibc
#endif

/// `keys generate`, `keys jwks` and `token verify`.
extension CommandLineInterface {
    // MARK: - keys

    func generateKey(_ arguments: Arguments) throws {
        // ES256 by default: OpenSSL 3.0 signs P-256 about twice as fast as Ed25519 (assembly for
        // the curve; Ed25519 is portable C), and every JWT library verifies it.
        var algorithm = SigningKey.Algorithm.es256
        var encryption = false
        let path = arguments.positionals[0]
        if let name = arguments.values["--alg"] {
            if name == "X25519" {
                encryption = true
            } else if let parsed = SigningKey.Algorithm(rawValue: name) {
                algorithm = parsed
            } else {
                throw UsageError(message: "--alg takes ES256, EdDSA or X25519")
            }
        }
        guard !FileManager.default.fileExists(atPath: path) else {
            throw UsageError(message: "\(path) exists; refusing to overwrite a key")
        }
        let pem: String
        let description: String
        if encryption {
            let pair = try X25519.generateKeyPair()
            pem = try X25519.privateKeyPEM(pair.privateKey)
            description = "X25519 credential key \(try CredentialKeys.Key(privateKey: pair.privateKey).keyID)"
        } else {
            let key = try SigningKey.generate(algorithm)
            pem = try key.privateKeyPEM()
            description = "\(algorithm.rawValue) key \(key.keyID)"
        }
        do {
            try SecretFile.create(atPath: path, contents: Array(pem.utf8))
        } catch let failure as SecretFile.Failure {
            throw UsageError(message: "cannot write the key: \(failure.description)")
        }
        output("wrote \(description) to \(path)")
    }

    /// The public JWK Set: the signing keys of AUTH_SIGNING_KEYS and the credential keys of
    /// AUTH_CREDENTIAL_KEYS (`use: enc`), current keys first.
    func printJWKS(tenant: String) throws {
        let published = try PublishedKeys(configuration: try configuration(ofTenant: tenant))
        guard !published.isEmpty else {
            throw UsageError(message: "no keys: set AUTH_SIGNING_KEYS and/or AUTH_CREDENTIAL_KEYS")
        }
        output(published.jwks)
    }

    // MARK: - token verify

    func verifyToken(_ arguments: Arguments, tenant: String, usage: String) async throws -> Int32 {
        guard let providerName = arguments.values["--provider"] else { throw UsageError(message: usage) }
        let token = arguments.positionals[0]
        let keysPath = arguments.values["--keys"]
        let nonce = arguments.values["--nonce"]
        var at: Date?
        if let value = arguments.values["--at"] {
            guard let seconds = Double(value) else { throw UsageError(message: "--at takes a Unix time") }
            at = Date(timeIntervalSince1970: seconds)
        }
        let configuration = try configuration(ofTenant: tenant)
        guard
            let providerConfiguration = try configuration.identityProviders().first(where: { $0.name == providerName })
        else {
            errorOutput(
                "auth-worker: unknown_provider: \(providerName) is not configured (Apple and Google need "
                    + "AUTH_APPLE_AUDIENCES / AUTH_GOOGLE_AUDIENCES; others AUTH_OIDC_PROVIDERS)")
            return 1
        }
        let clock: any WorkerClock = at.map { FixedClock($0) } ?? SystemClock()
        let logger = Logger(label: "auth-worker", level: .warning, handler: JSONLinesLogHandler.standardError)
        let keySet: KeySetCache
        if let keysPath {
            guard let data = FileManager.default.contents(atPath: keysPath) else {
                throw UsageError(message: "cannot read \(keysPath)")
            }
            keySet = KeySetCache(fixed: try JWKSet(json: data), clock: clock, logger: logger)
        } else {
            let source: KeySetCache.Source =
                if let url = providerConfiguration.keysURL {
                    .keysURL(url)
                } else if let discovery = providerConfiguration.discoveryURL {
                    .discovery(discovery, issuers: providerConfiguration.issuers)
                } else { throw UsageError(message: "\(providerName) has no key set URL") }
            keySet = KeySetCache(
                source: source, fetcher: HTTPDocumentFetcher(timeout: configuration.keySets.fetchTimeout), clock: clock,
                settings: configuration.keySets, logger: logger)
        }
        let provider = IdentityProvider(configuration: providerConfiguration, keySet: keySet, clock: clock)
        do {
            _ = try await provider.verify(token: token, nonce: nonce)
        } catch let error as JOSEError {
            let failure = LoginError(error)
            errorOutput("\(failure.code.rawValue): \(failure.message)")
            return 1
        }
        // Verified: print the header and claims exactly as the token carries them.
        let jws = try CompactJWS(token)
        let header = try JSONSerialization.jsonObject(with: Data(jws.headerBytes))
        let claims = try JSONSerialization.jsonObject(with: Data(jws.payload))
        let document = try JSONSerialization.data(
            withJSONObject: ["provider": providerName, "header": header, "claims": claims],
            options: [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes])
        output(String(decoding: document, as: UTF8.self))
        return 0
    }
}
