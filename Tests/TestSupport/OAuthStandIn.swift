import AuthCrypto
import Foundation

@testable import AuthDomain

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A running `scripts/oauth-stand-in.py`: an OAuth 2.0 provider on loopback behaving as GitHub,
/// Discord or Naver documents, which refuses what they refuse. Stopped with `stop()`.
final class OAuthStandIn: Sendable {
    enum Flavor: String, Sendable { case github, discord, naver }

    let flavor: Flavor
    let url: String
    let clientID = "stand-in-client"
    let secretPath: String
    private let process: Process

    /// Waits for it to listen without holding a cooperative thread (its Python can take seconds
    /// to start on a busy machine).
    init(_ flavor: Flavor, secret: String = "stand-in-secret-\(UUID().uuidString)") async throws {
        self.flavor = flavor
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("oauth-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        secretPath = directory.appendingPathComponent("client-secret").path
        try secret.write(toFile: secretPath, atomically: true, encoding: .utf8)
        let portFile = directory.appendingPathComponent("port").path
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [
            "python3", ProjectPaths.root.appendingPathComponent("scripts/oauth-stand-in.py").path, portFile,
            flavor.rawValue, clientID, secretPath,
        ]
        process.standardOutput = FileHandle.nullDevice
        // OAUTH_STAND_IN_LOG=1 keeps the stand-in's request log in its folder, for debugging a test.
        if ProcessInfo.processInfo.environment["OAUTH_STAND_IN_LOG"] != nil {
            let log = directory.appendingPathComponent("requests.log")
            guard FileManager.default.createFile(atPath: log.path, contents: nil) else {
                throw Failure("cannot create \(log.path)")
            }
            process.standardError = try FileHandle(forWritingTo: log)
        } else {
            process.standardError = FileHandle.nullDevice
        }
        try process.run()
        var port: String?
        for _ in 0..<200 {
            port = try? String(contentsOfFile: portFile, encoding: .utf8)
            if port != nil { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        guard let port else { throw Failure("the OAuth stand-in did not start") }
        url = "http://127.0.0.1:\(port)"
    }

    /// SIGKILL: the test process may block SIGTERM, and a child inherits the mask.
    func stop() {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    static let redirectURI = "com.example.app://oauth/callback"

    /// The entry the providers file would hold for this stand-in, named `name`.
    func configuration(name: String? = nil, secretPath: String? = nil) throws -> OAuthProviderConfiguration {
        let (tokenPath, userPath, claims): (String, String, OAuthProviderConfiguration.Claims) =
            switch flavor {
            case .github: ("/login/oauth/access_token", "/user", .init(subject: "id", name: "name"))
            case .discord:
                (
                    "/api/oauth2/token", "/api/users/@me",
                    .init(subject: "id", email: "email", emailVerified: .member("verified"), name: "global_name")
                )
            case .naver:
                (
                    "/oauth2.0/token", "/v1/nid/me",
                    .init(subject: "response.id", email: "response.email", name: "response.name")
                )
            }
        let secret = try String(contentsOfFile: secretPath ?? self.secretPath, encoding: .utf8)
        var configuration = OAuthProviderConfiguration(
            name: name ?? flavor.rawValue, tokenEndpoint: try address(tokenPath),
            userinfoEndpoint: try address(userPath), clientID: clientID, clientSecret: secret,
            claims: claims, redirectURIs: [Self.redirectURI])
        switch flavor {
        case .github:
            configuration.emailsEndpoint = try address("/user/emails")
            configuration.apiAccept = "application/vnd.github+json"
            configuration.apiHeaders = ["X-GitHub-Api-Version": "2022-11-28"]
        case .discord:
            configuration.clientAuthentication = .clientSecretBasic
        case .naver:
            break
        }
        configuration.connectTimeout = .seconds(2)
        configuration.totalTimeout = .seconds(2)
        return configuration
    }

    /// This stand-in's entry of a providers file (`AUTH_OIDC_PROVIDERS`), named after its flavor,
    /// as an operator would write it for the provider it stands in for.
    func entry(timeoutSeconds: Double = 10) -> [String: Any] {
        var entry: [String: Any] = [
            "type": "oauth2", "name": flavor.rawValue, "client_id": clientID, "client_secret_file": secretPath,
            "redirect_uris": [OAuthStandIn.redirectURI], "timeout_seconds": timeoutSeconds, "breaker_failures": 1000,
        ]
        switch flavor {
        case .github:
            entry["token_endpoint"] = url + "/login/oauth/access_token"
            entry["userinfo_endpoint"] = url + "/user"
            entry["emails_endpoint"] = url + "/user/emails"
            entry["token_endpoint_auth"] = "client_secret_post"
            entry["claims"] = ["subject": "id", "name": "name"]
            entry["api_accept"] = "application/vnd.github+json"
            entry["api_headers"] = ["X-GitHub-Api-Version": "2022-11-28"]
        case .discord:
            entry["token_endpoint"] = url + "/api/oauth2/token"
            entry["userinfo_endpoint"] = url + "/api/users/@me"
            entry["token_endpoint_auth"] = "client_secret_basic"
            entry["claims"] = ["subject": "id", "email": "email", "email_verified": "verified", "name": "global_name"]
        case .naver:
            entry["token_endpoint"] = url + "/oauth2.0/token"
            entry["userinfo_endpoint"] = url + "/v1/nid/me"
            entry["claims"] = ["subject": "response.id", "email": "response.email", "name": "response.name"]
        }
        return entry
    }

    /// A providers file holding this stand-in's entry.
    func providersFile(timeoutSeconds: Double = 10) throws -> String {
        try Self.providersFile([entry(timeoutSeconds: timeoutSeconds)])
    }

    /// A providers file of `entries`, in a temporary file.
    static func providersFile(_ entries: [[String: Any]]) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("providers-\(UUID()).json").path
        try JSONSerialization.data(withJSONObject: entries).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// A PKCE pair: a verifier of 43 unreserved characters and its S256 challenge.
    static func pkce() -> (verifier: String, challenge: String) {
        let verifier = Base64URL.encode(Array(UUID().uuidString.utf8) + Array(UUID().uuidString.utf8)).prefix(60)
        return (String(verifier), Base64URL.encode(SHA256.hash(Array(verifier.utf8))))
    }

    /// What the consent page would hand the app: a code for `user`, issued for the redirect URI and
    /// the challenge.
    func authorize(
        user: [String: Any], emails: [[String: Any]] = [], challenge: String?, redirectURI: String = redirectURI
    ) async throws -> String {
        var body: [String: Any] = ["user": user, "emails": emails, "redirect_uri": redirectURI]
        if let challenge {
            body["code_challenge"] = challenge
            body["code_challenge_method"] = "S256"
        }
        let answer = try await control("/control/authorize", body)
        guard let code = answer["code"] as? String else { throw Failure("no code in \(answer)") }
        return code
    }

    /// Every provider endpoint answers 503 while `down`, after `delay` seconds.
    func set(down: Bool = false, delay: Double = 0) async throws {
        _ = try await control("/control/mode", ["down": down, "delay": delay])
    }

    func expire(_ code: String) async throws {
        _ = try await control("/control/expire", ["code": code])
    }

    struct State: Decodable {
        var exchanged: [String]
        var refused: [[String: String]]
        var apiCalls: [String]
        var issued: [String]
        var requests: Int

        enum CodingKeys: String, CodingKey {
            case exchanged, refused, issued, requests
            case apiCalls = "api_calls"
        }
    }

    func state() async throws -> State {
        let (data, _) = try await URLSession.shared.data(from: try address("/control/state"))
        return try JSONDecoder().decode(State.self, from: data)
    }

    private func control(_ path: String, _ body: [String: Any]) async throws -> [String: Any] {
        var request = URLRequest(url: try address(path))
        request.httpMethod = "POST"
        request.httpBody = try JSONSerialization.data(withJSONObject: body)
        let (data, response) = try await URLSession.shared.data(for: request)
        guard (response as? HTTPURLResponse)?.statusCode == 200 else { throw Failure("control \(path) refused") }
        return try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
    }

    private func address(_ path: String) throws -> URL {
        guard let address = URL(string: url + path) else { throw Failure("not a URL: \(url + path)") }
        return address
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}
