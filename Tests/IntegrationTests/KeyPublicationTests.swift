import AuthCrypto
import Foundation
import Messages
import ServiceKit
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The worker publishes its keys over HTTP, and a signing key goes next → current → previous →
/// gone without a verifier ever meeting a token signed by a key it has not fetched. The verifier is
/// PyJWT, fetching the worker's discovery document and JWK Set as any resource server would.
@Suite(.requiresServices, .requiresIndependentJOSE, .serialized, .timeLimit(.minutes(3)))
struct KeyPublicationTests {
    /// A port nothing listens on now (the discovery document must name the worker's own URL).
    static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else { throw IndependentJOSE.Failure(description: "no free port") }
        return UInt16(bigEndian: address.sin_port)
    }

    /// Verifies `tokens` with PyJWT: the key set comes from the discovery document's `jwks_uri`
    /// (fetched now) or, with `cached`, from a key set fetched earlier. Prints, per token, `ok` or
    /// the exception's name; with `save`, writes the fetched key set there.
    static let verifier = """
        import json, sys, urllib.request, jwt
        job = json.load(sys.stdin)
        if job.get("cached"):
            keys = jwt.PyJWKSet.from_json(open(job["cached"]).read())
            find = lambda token: keys[jwt.get_unverified_header(token)["kid"]]
        else:
            discovery = json.load(urllib.request.urlopen(job["issuer"] + "/.well-known/openid-configuration"))
            assert discovery["issuer"] == job["issuer"], discovery
            client = jwt.PyJWKClient(discovery["jwks_uri"], cache_jwk_set=False)
            if job.get("save"):
                open(job["save"], "w").write(json.dumps(client.fetch_data()))
            find = lambda token: client.get_signing_key_from_jwt(token)
        for token in job["tokens"]:
            try:
                key = find(token)
                claims = jwt.decode(token, key.key, algorithms=["ES256", "EdDSA"], audience="api",
                                    issuer=job["issuer"])
                print("ok" if claims["sub"] else "no-sub")
            except Exception as error:
                print(type(error).__name__)
        """

    @Test func pyJWTVerifiesThroughAFullRotation() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        let (keyA, _) = try TestKeys.temporaryKeyFile(.es256)
        let (keyB, _) = try TestKeys.temporaryKeyFile(.es256)
        let cached = FileManager.default.temporaryDirectory.appendingPathComponent("jwks-\(UUID()).json").path
        defer { for path in [keyA, keyB, cached] { try? FileManager.default.removeItem(atPath: path) } }
        let port = try Self.freePort()
        let issuer = "http://127.0.0.1:\(port)"
        var base = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        base.accessTokenFormat = .jwt
        base.tokenIssuer = issuer
        base.healthPort = port
        base.healthAddress = "127.0.0.1"

        /// Runs the worker with `current` signing keys and `next` ones, logs a guest in, and
        /// returns its access token.
        func phase(current: [String], next: [String] = []) async throws -> (
            String, WorkerApplication, ServiceGroup, Task<Void, any Error>
        ) {
            var config = base
            config.signingKeyPaths = current
            config.nextSigningKeyPaths = next
            let application = try await WorkerApplication.build(
                configuration: config.worker, kafka: config.kafka, logger: IntegrationEnvironment.quietLogger)
            let group = application.makeServiceGroup(signals: [])
            let task = Task { [application, group] in try await application.run(group) }
            let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
            defer { gateway.close() }
            let id = UUID().uuidString.lowercased()
            try await gateway.publish(requestID: id, data: LoginRequestData(method: "guest"))
            let bytes = try #require(try await gateway.awaitResult(requestID: id, timeout: .seconds(30)))
            let token = try #require(
                try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: bytes).data.session?.accessToken)
            return (token, application, group, task)
        }
        func stop(_ running: (String, WorkerApplication, ServiceGroup, Task<Void, any Error>)) async throws {
            running.2.startGracefulShutdown(reason: "rotation step")
            try await running.3.value
        }
        func verify(_ tokens: [String], cachedFrom: String? = nil, saveTo: String? = nil) async throws -> [String] {
            var job: [String: Any] = ["issuer": issuer, "tokens": tokens]
            if let cachedFrom { job["cached"] = cachedFrom }
            if let saveTo { job["save"] = saveTo }
            let input = String(decoding: try JSONSerialization.data(withJSONObject: job), as: UTF8.self)
            return try await IndependentJOSE.run(Self.verifier, input: input).split(separator: "\n").map(String.init)
        }
        func kid(_ token: String) throws -> String {
            let header = try #require(token.split(separator: ".").first.flatMap { Base64URL.decode(String($0)) })
            return try #require(
                (try JSONSerialization.jsonObject(with: Data(header)) as? [String: Any])?["kid"] as? String)
        }

        // 1. A signs.
        let one = try await phase(current: [keyA])
        #expect(try await verify([one.0]) == ["ok"])
        let headers = try await HTTP.head("http://127.0.0.1:\(port)/.well-known/jwks.json")
        #expect(headers["Cache-Control"] == "public, max-age=300")
        #expect(headers["Content-Type"] == "application/jwk-set+json")
        try await stop(one)

        // 2. B is published next: A still signs; a verifier caches the set holding both.
        let two = try await phase(current: [keyA], next: [keyB])
        #expect(try kid(two.0) == kid(one.0), "a next key does not sign")
        #expect(try await verify([one.0, two.0], saveTo: cached) == ["ok", "ok"])
        try await stop(two)

        // 3. B signs, A is previous: tokens of both verify, and so does B's token with the set
        //    the verifier cached before B signed anything.
        let three = try await phase(current: [keyB, keyA])
        #expect(try kid(three.0) != kid(one.0), "the former next key signs")
        #expect(try await verify([one.0, three.0]) == ["ok", "ok"])
        #expect(try await verify([three.0], cachedFrom: cached) == ["ok"], "no verifier meets an unknown key")
        try await stop(three)

        // 4. A is gone once its tokens have expired: its tokens no longer verify, B's do.
        let four = try await phase(current: [keyB])
        let results = try await verify([one.0, three.0, four.0])
        #expect(results[0] == "PyJWKClientError", "A is no longer published: \(results)")
        #expect(Array(results[1...]) == ["ok", "ok"])
        try await stop(four)
    }
}
