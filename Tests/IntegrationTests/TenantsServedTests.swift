import AuthClient
import AuthCrypto
import Foundation
import JOSE
import JOSEFixtures
import Kafka
import Messages
import PGStore
import Testing

@testable import AuthWorker
@testable import TestSupport

/// One worker, run as operators run it (`auth-worker run` with `AUTH_TENANTS_FILE`), serving the
/// default tenant and `acme` side by side through the broker: each with its own Apple audience,
/// token issuer and signing key, its own users; a tenant added to the file is served after
/// SIGHUP, and a file with a mistake leaves the tenants served as they were.
extension ProcessIntegrationTests {
    @Test func twoTenantsSideBySideAndOneAddedOnSIGHUP() async throws {
        let topics = try await IntegrationEnvironment.makeTopics()
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let brokers = try #require(IntegrationEnvironment.kafkaBrokers)
        let keys = try KeyServer()
        defer { keys.stop() }
        keys.serve("/apple/keys", .init(body: TestSigner.keySet([Signers.rsa2048])))
        let main = try TestKeys.temporaryKeyFile()
        let acme = try TestKeys.temporaryKeyFile()
        let tenantsFile = FileManager.default.temporaryDirectory.appendingPathComponent("tenants-\(UUID()).json").path
        func writeTenants(_ text: String) throws {
            try text.write(toFile: tenantsFile, atomically: true, encoding: .utf8)
        }
        let acmeSettings = """
            "acme": {"AUTH_APPLE_AUDIENCES": "com.acme.app", "AUTH_TOKEN_ISSUER": "https://auth.acme.example",
                     "AUTH_SIGNING_KEYS": "\(acme.path)", "AUTH_SESSION_TTL_SECONDS": 3600}
            """
        try writeTenants(#"{"tenants": {\#(acmeSettings)}}"#)
        defer {
            for path in [main.path, acme.path, tenantsFile] { try? FileManager.default.removeItem(atPath: path) }
        }
        let healthPort = try IsolatedCluster.freePort()
        let (process, output, _) = try launch(
            ["run"],
            environment: [
                "AUTH_KAFKA_BROKERS": brokers, "AUTH_DATABASE_URL": databaseURL, "AUTH_MIGRATE_ON_START": "true",
                "AUTH_KAFKA_GROUP": IntegrationEnvironment.uniqueName("group"),
                "AUTH_TOPIC_REQUESTS": topics.requests, "AUTH_TOPIC_RESULTS": topics.results,
                "AUTH_TOPIC_EVENTS": topics.events, "AUTH_TOPIC_NOTIFICATIONS": topics.notifications,
                "AUTH_TOPIC_DLQ": topics.deadLetters, "AUTH_KAFKA_FETCH_WAIT_MS": "5",
                "AUTH_HEALTH_PORT": String(healthPort), "AUTH_HEALTH_ADDRESS": "127.0.0.1",
                "AUTH_ACCESS_TOKEN_FORMAT": "jwt", "AUTH_SIGNING_KEYS": main.path,
                "AUTH_TOKEN_ISSUER": "https://auth.example.com", "AUTH_APPLE_AUDIENCES": "com.example.app",
                "AUTH_APPLE_KEYS_URL": keys.url("/apple/keys").absoluteString, "AUTH_TENANTS_FILE": tenantsFile,
            ])
        let logs = LogCollector(output)
        defer { process.terminate() }
        let assigned = await logs.value(of: "msg", inLineWith: "Partitions assigned", timeout: .seconds(60))
        let early = await logs.all()
        #expect(assigned != nil, "\(early)")
        let served = await logs.value(of: "auth.tenants", inLineWith: "Tenants served")
        #expect(served == "acme")

        func client(_ tenant: String?, sealing: Bool = true) async throws -> AuthClient {
            var configuration = AuthClient.Configuration(brokers: [brokers])
            configuration.sealSessions = sealing
            configuration.requestsTopic = topics.requests
            configuration.resultsTopic = topics.results
            configuration.timeout = .seconds(30)
            configuration.tenant = tenant
            return try await AuthClient.connect(configuration, logger: IntegrationEnvironment.quietLogger)
        }
        let mainClient = try await client(nil)
        let acmeClient = try await client("acme")
        let betaClient = try await client("beta")
        let now = Int(Date().timeIntervalSince1970)
        func apple(_ audience: String, _ sub: String) -> LoginRequestData {
            var data = LoginRequestData(method: "apple")
            data.identityToken = Signers.rsa2048.token(
                ["iss": "https://appleid.apple.com", "aud": audience, "sub": sub, "iat": now - 5, "exp": now + 600],
                algorithm: .rs256)
            return data
        }
        /// A JWT's claims and its header's key id.
        func claims(_ token: String) throws -> (claims: [String: Any], kid: String?) {
            let parts = token.split(separator: ".").map(String.init)
            try #require(parts.count == 3)
            let header = try JSONSerialization.jsonObject(with: Data(try #require(Base64URL.decode(parts[0]))))
            let body = try JSONSerialization.jsonObject(with: Data(try #require(Base64URL.decode(parts[1]))))
            return (try #require(body as? [String: Any]), (header as? [String: Any])?["kid"] as? String)
        }

        // Each tenant's Apple audience: acme's app signs in at acme only, the default's at the default only.
        let acmeUser = try await acmeClient.login(apple("com.acme.app", "001.shared"))
        #expect(acmeUser.isOK && acmeUser.newUser == true, "\(String(describing: acmeUser.error))")
        let refusedAtMain = try await mainClient.login(apple("com.acme.app", "001.shared"))
        #expect(refusedAtMain.error?.code == .audienceMismatch)
        let refusedAtAcme = try await acmeClient.login(apple("com.example.app", "001.shared"))
        #expect(refusedAtAcme.error?.code == .audienceMismatch)
        let mainUser = try await mainClient.login(apple("com.example.app", "001.shared"))
        #expect(mainUser.isOK && mainUser.newUser == true, "the same Apple user is another account here")
        #expect(mainUser.user?.id != nil && mainUser.user?.id != acmeUser.user?.id)

        // Each tenant's issuer and key.
        let acmeToken = try claims(try #require(acmeUser.session?.accessToken))
        #expect(acmeToken.claims["iss"] as? String == "https://auth.acme.example")
        #expect(acmeToken.claims["tenant"] as? String == "acme", "a tenant's token names it")
        #expect(acmeToken.kid == acme.key.keyID)
        let mainToken = try claims(try #require(mainUser.session?.accessToken))
        #expect(mainToken.claims["iss"] as? String == "https://auth.example.com")
        #expect(mainToken.claims["tenant"] == nil, "the default tenant's names none, as before")
        #expect(mainToken.kid == main.key.keyID)
        // Each tenant's keys and discovery document, beside the default tenant's.
        let health = "http://127.0.0.1:\(healthPort)"
        let acmeKeys = try await HTTP.get(health + "/tenants/acme/.well-known/jwks.json")
        #expect(
            acmeKeys.status == 200 && acmeKeys.body.contains(acme.key.keyID) && !acmeKeys.body.contains(main.key.keyID))
        let mainKeys = try await HTTP.get(health + "/.well-known/jwks.json")
        #expect(mainKeys.body.contains(main.key.keyID) && !mainKeys.body.contains(acme.key.keyID))
        let acmeDiscovery = try await HTTP.get(health + "/tenants/acme/.well-known/openid-configuration")
        #expect(acmeDiscovery.body.contains(#""issuer":"https://auth.acme.example""#), "\(acmeDiscovery.body)")
        #expect(try await HTTP.get(health + "/tenants/beta/.well-known/jwks.json").status == 404)
        // A tenant's session is unknown to the other.
        let crossed = try await acmeClient.introspect(try #require(mainUser.session?.accessToken))
        #expect(crossed.active == false)
        var refresh = LoginRequestData(method: "refresh")
        refresh.refreshToken = acmeUser.session?.refreshToken
        #expect(try await mainClient.login(refresh).error?.code == .invalidRefreshToken)
        #expect(try await acmeClient.login(refresh).isOK, "and still works in its own")

        // Apple's notifications name their tenant as requests do: acme's account deletion, for
        // acme's audience, deletes acme's user only; for the default tenant's audience it is
        // refused (a dead letter) and deletes nothing.
        let producer = try KafkaProducer(
            configuration: KafkaSettings.forTests(brokers).producerConfiguration,
            logger: IntegrationEnvironment.quietLogger)
        func notify(_ audience: String, tenant: String?) async throws {
            let token = Signers.rsa2048.token(
                [
                    "iss": "https://appleid.apple.com", "aud": audience, "iat": now - 1, "exp": now + 600,
                    "jti": UUID().uuidString, "events": #"{"type":"account-delete","sub":"001.shared"}"#,
                ], algorithm: .rs256)
            let envelope = CloudEvent(
                id: UUID().uuidString, source: "/gateway/apple", type: "auth.provider.notification", time: Date(),
                tenant: tenant, data: ProviderNotificationData(payload: token))
            try await producer.send(
                ProducerRecord(topic: topics.notifications, key: nil, value: MessageCoding.encode(envelope)))
        }
        try await notify("com.example.app", tenant: "acme")
        try await notify("com.acme.app", tenant: "acme")
        let database = try PGConnection(conninfo: databaseURL)
        func appleUsers(_ tenant: String) throws -> Int {
            try database.query(
                "SELECT count(*) AS n FROM identities WHERE subject = '001.shared' AND tenant = \(tenant)"
            ).first?.decode("n") ?? -1
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while try appleUsers("acme") > 0, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(try appleUsers("acme") == 0, "acme's Apple user deleted")
        #expect(try appleUsers("default") == 1, "the default tenant's is another account")
        let refusedNotification = await logs.value(of: "error", inLineWith: "Provider notification refused")
        #expect(refusedNotification?.contains("audience") == true, "\(String(describing: refusedNotification))")
        await producer.shutdown(timeout: .seconds(5))

        // beta is not served until the file names it and the worker reads it again.
        #expect(try await betaClient.login(LoginRequestData(method: "guest")).error?.code == .unknownTenant)
        // Results by tenant for the tenants served; a name not served gets no series of its own.
        let metrics = try await HTTP.get(health + "/metrics").body
        #expect(metrics.contains(#"auth_tenant_results_total{tenant="acme",code="ok"}"#), "\(metrics)")
        #expect(metrics.contains(#"auth_tenant_results_total{tenant="default",code="ok"}"#))
        #expect(metrics.contains(#"auth_tenant_results_total{tenant="default",code="audience_mismatch"}"#))
        #expect(metrics.contains(#"auth_results_total{code="unknown_tenant"} 1"#))
        #expect(!metrics.contains(#"tenant="beta""#))
        try writeTenants(
            #"{"tenants": {\#(acmeSettings), "beta": {"AUTH_SESSION_TTL_SECONDS": 7200, "AUTH_REQUIRE_REPLY_KEY": true}}}"#
        )
        kill(process.processIdentifier, SIGHUP)
        let reloaded = await logs.value(of: "auth.tenants", inLineWith: "\"auth.tenants\":\"acme,beta\"")
        let sofar = await logs.all()
        #expect(reloaded == "acme,beta", "\(sofar)")
        #expect(try await HTTP.get(health + "/tenants/beta/.well-known/jwks.json").body.contains(main.key.keyID))
        let betaGuest = try await betaClient.login(LoginRequestData(method: "guest"))
        #expect(betaGuest.isOK, "\(String(describing: betaGuest.error))")
        #expect(
            try claims(try #require(betaGuest.session?.accessToken)).claims["iss"] as? String
                == "https://auth.example.com")
        // beta shares the deployment's keys and issuer, yet its tokens are its own: a gateway's
        // verifier for the default tenant refuses them, one for beta takes them.
        let betaToken = try #require(betaGuest.session?.accessToken)
        let sharedKeys = try #require(URL(string: health + "/tenants/beta/.well-known/jwks.json"))
        let forBeta = AccessTokenVerifier(
            keysURL: sharedKeys, issuer: "https://auth.example.com", audience: "api", tenant: "beta")
        #expect(try await forBeta.verify(betaToken).tenant == "beta")
        let forDefault = AccessTokenVerifier(
            keysURL: try #require(URL(string: health + "/.well-known/jwks.json")), issuer: "https://auth.example.com",
            audience: "api")
        do {
            _ = try await forDefault.verify(betaToken)
            Issue.record("the default tenant's verifier took beta's token")
        } catch let refusal as AccessTokenVerifier.Refusal {
            #expect(refusal.description == "another tenant's")
        }
        // beta requires reply keys (its own AUTH_REQUIRE_REPLY_KEY); the default tenant does not.
        let unsealed = [try await client("beta", sealing: false), try await client(nil, sealing: false)]
        let betaUnsealed = try await unsealed[0].login(LoginRequestData(method: "guest"))
        #expect(betaUnsealed.error?.code == .malformedRequest && betaUnsealed.error?.field == "data.reply_key")
        #expect(try await unsealed[1].login(LoginRequestData(method: "guest")).isOK)
        for client in unsealed { await client.close() }

        // A file with a mistake is refused, named in the log, and the tenants served stay.
        try writeTenants(#"{"tenants": {"beta": {"AUTH_DATABASE_URL": "postgres://elsewhere"}}}"#)
        kill(process.processIdentifier, SIGHUP)
        let refusal = await logs.value(of: "error", inLineWith: "Tenants file refused")
        #expect(
            refusal?.contains("tenant beta: AUTH_DATABASE_URL is the deployment's") == true,
            "\(String(describing: refusal))")
        #expect(try await betaClient.login(LoginRequestData(method: "guest")).isOK)
        #expect(try await acmeClient.login(LoginRequestData(method: "guest")).isOK)
        await mainClient.close()
        await acmeClient.close()
        await betaClient.close()

        // `auth-worker request guest --tenant`: a guest of acme's, answered in acme's name.
        let cli = [
            "AUTH_KAFKA_BROKERS": brokers, "AUTH_TOPIC_REQUESTS": topics.requests,
            "AUTH_TOPIC_RESULTS": topics.results,
        ]
        let byHand = try await runToEnd(["request", "guest", "--tenant", "acme"], environment: cli)
        #expect(byHand.status == 0, "\(byHand.errors)")
        let handResult = try JSONSerialization.jsonObject(with: Data(byHand.output.utf8)) as? [String: Any]
        #expect(handResult?["status"] as? String == "ok", "\(byHand.output)")
        let misnamed = try await runToEnd(["request", "guest", "--tenant", "Acme"], environment: cli)
        #expect(misnamed.status == 2 && misnamed.errors.contains("--tenant"), "\(misnamed.errors)")

        // The key and provider commands take the tenant's settings from the tenants file.
        let settings = [
            "AUTH_SIGNING_KEYS": main.path, "AUTH_APPLE_AUDIENCES": "com.example.app",
            "AUTH_TENANTS_FILE": tenantsFile,
        ]
        try writeTenants(#"{"tenants": {\#(acmeSettings)}}"#)
        let acmeJWKS = try await runToEnd(["keys", "jwks", "--tenant", "acme"], environment: settings)
        #expect(acmeJWKS.status == 0 && acmeJWKS.output.contains(acme.key.keyID), "\(acmeJWKS.errors)")
        #expect(!acmeJWKS.output.contains(main.key.keyID))
        let mainJWKS = try await runToEnd(["keys", "jwks"], environment: settings)
        #expect(mainJWKS.output.contains(main.key.keyID) && !mainJWKS.output.contains(acme.key.keyID))
        let nobody = try await runToEnd(["keys", "jwks", "--tenant", "nobody"], environment: settings)
        #expect(nobody.status == 2 && nobody.errors.contains("no tenant nobody"), "\(nobody.errors)")
        let keySet = FileManager.default.temporaryDirectory.appendingPathComponent("apple-\(UUID()).json").path
        try TestSigner.keySet([Signers.rsa2048]).write(to: URL(fileURLWithPath: keySet))
        defer { try? FileManager.default.removeItem(atPath: keySet) }
        let cliToken = try #require(apple("com.acme.app", "001.cli").identityToken)
        let verify = ["token", "verify", "--provider", "apple", "--keys", keySet]
        let atAcme = try await runToEnd(verify + ["--tenant", "acme", cliToken], environment: settings)
        #expect(atAcme.status == 0 && atAcme.output.contains("001.cli"), "\(atAcme.errors)")
        let atMain = try await runToEnd(verify + [cliToken], environment: settings)
        #expect(atMain.status == 1 && atMain.errors.hasPrefix("audience_mismatch"), "\(atMain.errors)")

        // The Python gateway example, with a second gateway in acme's name: acme's token checked
        // against acme's own key set and issuer, the default tenant's token unknown there.
        let example = try await Subprocess.run(
            ["python3", ProjectPaths.root.appendingPathComponent("examples/python-gateway/gateway.py").path],
            environment: ProcessInfo.processInfo.environment.merging([
                "AUTH_KAFKA_BROKERS": brokers, "AUTH_WORKER_URL": health, "AUTH_TOPIC_REQUESTS": topics.requests,
                "AUTH_TOPIC_RESULTS": topics.results, "AUTH_TOKEN_ISSUER": "https://auth.example.com",
                "AUTH_EXAMPLE_TENANT": "acme", "AUTH_EXAMPLE_TENANT_ISSUER": "https://auth.acme.example",
            ]) { $1 })
        #expect(example.status == 0, "\(example.output)")
        let steps = example.output.split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
        #expect(steps.map { $0["step"] as? String } == ["login", "verify", "tenant", "introspect", "logout"])
        let tenantStep = steps.first { $0["step"] as? String == "tenant" }
        #expect(tenantStep?["iss"] as? String == "https://auth.acme.example", "\(example.output)")
    }
}
