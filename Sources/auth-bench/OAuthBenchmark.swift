import AuthCrypto
import AuthDomain
import Foundation
import JOSE
import JOSEFixtures
import ServiceKit

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// What an `oauth` sign-in costs the worker beside what an OpenID Connect one does: the part of
/// each that differs (the code's exchange, the profile and the addresses read over HTTP and
/// mapped, against the ID token's verification); the identity's write after it is the same code
/// for both. Counted in this process's CPU time (user and system), so the stand-in provider's own
/// work (another process, `scripts/oauth-stand-in.py`) and the wait for it are not in it.
struct OAuthBenchmark {
    let standIn: String
    let secretPath: String
    let clientID = "bench-client"
    static let redirectURI = "com.example.app://oauth/callback"

    /// CPU seconds this process has used so far.
    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
            + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    func provider() throws -> OAuthProvider {
        func address(_ path: String) throws -> URL {
            guard let url = URL(string: standIn + path) else { throw BenchmarkFailure(reason: "not a URL: \(path)") }
            return url
        }
        var configuration = OAuthProviderConfiguration(
            name: "github", tokenEndpoint: try address("/login/oauth/access_token"),
            userinfoEndpoint: try address("/user"), clientID: clientID,
            clientSecret: try String(contentsOfFile: secretPath, encoding: .utf8).trimmingCharacters(in: .newlines),
            claims: .init(subject: "id", name: "name"), redirectURIs: [Self.redirectURI])
        configuration.emailsEndpoint = try address("/user/emails")
        configuration.apiAccept = "application/vnd.github+json"
        configuration.apiHeaders = ["X-GitHub-Api-Version": "2022-11-28"]
        configuration.maximumInFlight = 1000
        return OAuthProvider(configuration: configuration, logger: Logger(label: "bench", level: .error))
    }

    /// `count` codes from the stand-in's consent step, with their verifiers, made before timing.
    func codes(_ count: Int) async throws -> [(code: String, verifier: String)] {
        var made: [(code: String, verifier: String)] = []
        for index in 0..<count {
            let verifier = Base64URL.encode(try SecureRandom.bytes(48))
            let body: [String: Any] = [
                "user": ["id": 583_231 + index, "login": "octocat", "name": "The Octocat"],
                "emails": [["email": "octocat\(index)@example.com", "primary": true, "verified": true]],
                "redirect_uri": Self.redirectURI, "code_challenge": Base64URL.encode(SHA256.hash(Array(verifier.utf8))),
                "code_challenge_method": "S256",
            ]
            guard let url = URL(string: standIn + "/control/authorize") else { throw BenchmarkFailure(reason: "URL") }
            var request = URLRequest(url: url)
            request.httpMethod = "POST"
            request.httpBody = try JSONSerialization.data(withJSONObject: body)
            let (data, _) = try await URLSession.shared.data(for: request)
            guard let code = (try JSONSerialization.jsonObject(with: data) as? [String: Any])?["code"] as? String else {
                throw BenchmarkFailure(reason: "the stand-in issued no code")
            }
            made.append((code, verifier))
        }
        return made
    }

    /// CPU microseconds an `oauth` sign-in's provider part takes, over `count` sign-ins one at a time.
    func oauthMicroseconds(count: Int) async throws -> Double {
        let provider = try provider()
        let codes = try await codes(count)
        let start = Self.cpuSeconds()
        for (code, verifier) in codes {
            _ = try await provider.signIn(code: code, verifier: verifier, redirectURI: Self.redirectURI)
        }
        return (Self.cpuSeconds() - start) / Double(count) * 1e6
    }

    /// CPU microseconds an OpenID Connect ID token's verification takes (RS256, a Google-sized token).
    static func oidcMicroseconds(count: Int) throws -> Double {
        let signer = TestSigner(.rsa(2048), kid: "rsa")
        let token = signer.token(
            [
                "iss": "https://accounts.google.com", "aud": "1234-web.apps.googleusercontent.com",
                "sub": "108378151968747898733", "email": "someone@example.com", "email_verified": true,
                "name": "Some One", "iat": 1_795_953_590, "exp": 1_795_957_190,
            ], algorithm: .rs256)
        let keys = try JWKSet(json: TestSigner.keySet([signer]))
        let policy = ClaimsPolicy(
            issuers: ["https://accounts.google.com"], audiences: ["1234-web.apps.googleusercontent.com"])
        let now = Date(timeIntervalSince1970: 1_795_953_600)
        let start = cpuSeconds()
        for _ in 0..<count {
            _ = try JWSVerifier.verifyIDToken(
                CompactJWS(token), keys: keys, allowed: [.rs256], policy: policy, now: now, nonce: nil)
        }
        return (cpuSeconds() - start) / Double(count) * 1e6
    }
}
