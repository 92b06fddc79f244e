import AuthCrypto
import Foundation
import JOSE
import Messages
import PGStore
import ServiceKit
import Testing

@testable import AuthCLI
@testable import AuthClient
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// Which requests the gateway library seals: every method whose answer carries a secret (a
/// session, a TOTP secret, recovery codes, an `mfa_token`) goes out with a reply key, by the
/// worker's own list; the others without.
@Suite struct AuthClientSealingTests {
    @Test(arguments: LoginMethod.allCases)
    func aSecretAnswerIsAlwaysAskedForSealed(method: LoginMethod) throws {
        let pair = try X25519.generateKeyPair()
        let (request, replyKey) = try AuthClient.outgoing(
            LoginRequestData(method: method.rawValue), sealing: true, keyPair: { pair })
        if method.answerCarriesSecret {
            #expect(request.replyKey == Base64URL.encode(pair.publicKey))
            #expect(replyKey == pair.privateKey)
        } else {
            #expect(request.replyKey == nil && replyKey == nil)
        }
    }

    /// The methods the review found going out without one.
    @Test func theReviewedMethodsCarryAReplyKey() throws {
        for method in ["mfa_challenge", "email_code", "password_reset", "mfa_enroll", "mfa_verify"] {
            let (request, _) = try AuthClient.outgoing(
                LoginRequestData(method: method), sealing: true, keyPair: X25519.generateKeyPair)
            #expect(request.replyKey != nil, "\(method)")
        }
    }

    /// What came sealed opens in place: a session, a factor's secret, an `mfa_token`.
    @Test func sealedPartsOfAnAnswerOpenInPlace() throws {
        let pair = try X25519.generateKeyPair()
        var result = LoginResultData.failure(
            requestID: "r", error: LoginError(.mfaRequired, "needs the factor").payload)
        result.error?.sealedMFAToken = try JWE.sealECDHES(Array("mt_ticket".utf8), to: pair.publicKey)
        result.sealedMFA = try JWE.sealECDHES(
            MessageCoding.encode(MFAPayload(recoveryCodes: ["aaaa-bbbb-cccc"])), to: pair.publicKey)
        let opened = try AuthClient.open(result, replyKey: pair.privateKey, requestID: "r")
        #expect(opened.error?.mfaToken == "mt_ticket" && opened.error?.sealedMFAToken == nil)
        #expect(opened.mfa?.recoveryCodes == ["aaaa-bbbb-cccc"] && opened.sealedMFA == nil)
        let stranger = try X25519.generateKeyPair()
        #expect(throws: AuthClient.Failure.self) {
            try AuthClient.open(result, replyKey: stranger.privateKey, requestID: "r")
        }
    }
}

/// The gateway library against a real worker: logins with the session sealed per request and
/// opened, introspection, a retry with the same request id answered once, a timeout when nobody
/// answers, and the access-token verifier fetching the worker's JWK Set over HTTP.
@Suite(.requiresServices, .serialized, .timeLimit(.minutes(3))) struct AuthClientTests {
    @Test func loginIntrospectAndVerifyThroughTheWorker() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        var config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        let (keyPath, key) = try TestKeys.temporaryKeyFile(.es256)
        defer { try? FileManager.default.removeItem(atPath: keyPath) }
        config.accessTokenFormat = .jwt
        config.signingKeyPaths = [keyPath]
        config.tokenIssuer = "https://auth.example.com"
        config.sessions.requireReplyKey = true
        config.resultsKey = Array(repeating: 7, count: 32)  // kept answers can be given again
        let github = try await OAuthStandIn(.github)
        defer { github.stop() }
        config.oidcProvidersPath = try github.providersFile()
        let sms = try X25519.generateKeyPair()
        config.phoneCodes.smsKey = sms.publicKey
        config.phoneCodes.signUp = true
        let events = try TopicReader(topic: topics.events)
        let worker = try await RunningWorker(config)
        var clientConfiguration = AuthClient.Configuration(brokers: [try #require(IntegrationEnvironment.kafkaBrokers)])
        clientConfiguration.requestsTopic = topics.requests
        clientConfiguration.resultsTopic = topics.results
        clientConfiguration.source = "/gateway/tests"
        // What this test checks is not latency: room for a parallel run that keeps both cores busy.
        clientConfiguration.timeout = .seconds(30)
        let client = try await AuthClient.connect(clientConfiguration, logger: IntegrationEnvironment.quietLogger)

        // A guest login: the worker requires a reply key, the client makes one and opens the session.
        var guest = LoginRequestData(method: "guest")
        guest.device = .init(name: "Pixel 9", platform: "android")
        let signedIn = try await client.login(guest)
        #expect(signedIn.isOK && signedIn.newUser == true)
        let session = try #require(signedIn.session, "the sealed session is opened")
        #expect(session.abilities == ["guest"])

        // The same request id again is answered with the same user, never a second one.
        let id = UUID().uuidString.lowercased()
        let first = try await client.login(guest, requestID: id)
        let again = try await client.login(guest, requestID: id)
        #expect(again.user?.id == first.user?.id, "\(String(describing: again.error))")

        // Many at once, each matched to its own answer.
        let request = guest
        let users = try await withThrowingTaskGroup(of: String?.self) { group in
            for _ in 0..<20 { group.addTask { try await client.login(request).user?.id } }
            return try await group.reduce(into: Set<String>()) { if let id = $1 { $0.insert(id) } }
        }
        #expect(users.count == 20)

        // The same through CloudEvents' binary content mode: the request's attributes in headers,
        // the answer read from the worker's binary answer, the session opened.
        var binaryConfiguration = clientConfiguration
        binaryConfiguration.contentMode = .binary
        let binaryClient = try await AuthClient.connect(binaryConfiguration, logger: IntegrationEnvironment.quietLogger)
        let binarySignedIn = try await binaryClient.login(guest)
        #expect(binarySignedIn.isOK && binarySignedIn.session != nil, "\(String(describing: binarySignedIn.error))")
        let binaryID = UUID().uuidString.lowercased()
        let binaryFirst = try await binaryClient.login(guest, requestID: binaryID)
        #expect(try await binaryClient.login(guest, requestID: binaryID).user?.id == binaryFirst.user?.id)
        await binaryClient.close()

        // A GitHub sign-in, with the app's code and PKCE verifier, the guest keeping its id.
        let pkce = OAuthStandIn.pkce()
        let code = try await github.authorize(
            user: ["id": 583_231, "name": "The Octocat"],
            emails: [["email": "octocat@example.com", "primary": true, "verified": true]], challenge: pkce.challenge)
        let upgraded = try await client.signIn(
            oauth: "github", code: code, codeVerifier: pkce.verifier, redirectURI: OAuthStandIn.redirectURI,
            linkTo: try #require(try await client.login(guest).session?.accessToken))
        #expect(upgraded.isOK, "\(String(describing: upgraded.error))")
        #expect(upgraded.user?.isGuest == false && upgraded.user?.providers == ["github"])
        #expect(upgraded.session != nil, "the member's sealed session is opened")

        // A phone sign-up, the code read from the event as the SMS service does.
        let asked = try await client.requestPhoneCode(
            phone: "+14155550100", locale: "en", clientID: "install-1", ip: "203.0.113.9")
        #expect(asked.isOK && asked.user == nil, "\(String(describing: asked.error))")
        let textedEvents = try await events.waitUntil { messages in
            messages.contains { $0.json["type"] as? String == "auth.phone.code_requested" }
        }
        let text = try MessageCoding.decode(
            CloudEvent<PhoneCodeRequestedData>.self,
            from: try #require(textedEvents.first { $0.json["type"] as? String == "auth.phone.code_requested" }).value)
        let texted = try MessageCoding.decode(
            PhoneCodeSecret.self, from: try JWE.openECDHES(text.data.sealedSecret, privateKey: sms.privateKey).plaintext
        )
        let byPhone = try await client.signIn(phone: "+14155550100", code: texted.code)
        #expect(byPhone.isOK && byPhone.newUser == true, "\(String(describing: byPhone.error))")
        #expect(byPhone.user?.phone == "+14155550100" && byPhone.session != nil)
        await events.close()

        // Introspection, live and ended.
        let live = try await client.introspect(session.accessToken)
        #expect(live.active && live.sub == signedIn.user?.id)
        var logout = LoginRequestData(method: "logout")
        logout.accessToken = session.accessToken
        #expect(try await client.login(logout).isOK)
        #expect(try await client.introspect(session.accessToken) == .inactive)

        // The verifier fetches the worker's key set from its HTTP port.
        let port = try #require(worker.application.health?.port)
        let verifier = AccessTokenVerifier(
            keysURL: try #require(URL(string: "http://127.0.0.1:\(port)/.well-known/jwks.json")),
            issuer: "https://auth.example.com", audience: "api")
        let fresh = try #require(try await client.login(guest).session?.accessToken)
        let claims = try await verifier.verify(fresh)
        #expect(claims.isGuest && claims.can("guest") && !claims.can("admin"))
        #expect(try await HTTP.get("http://127.0.0.1:\(port)/.well-known/jwks.json").body.contains(key.keyID))
        await #expect(throws: AccessTokenVerifier.Refusal.self) { try await verifier.verify(fresh + "x") }
        let otherAudience = AccessTokenVerifier(
            keysURL: try #require(URL(string: "http://127.0.0.1:\(port)/.well-known/jwks.json")),
            issuer: "https://auth.example.com", audience: "another-api")
        await #expect(throws: AccessTokenVerifier.Refusal.self) { try await otherAudience.verify(fresh) }

        await client.close()
        try await worker.stop()
    }

    /// An app's account screen through the worker: the devices listed and one signed out,
    /// another user's session refused as unknown, the export opened, and the deletion asking for
    /// the password once the sign-in is not recent.
    @Test func theAccountScreenThroughTheWorker() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        var config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        config.accounts.argon2 = fastArgon2
        config.resultsKey = try SecureRandom.bytes(32)
        let worker = try await RunningWorker(config)
        var clientConfiguration = AuthClient.Configuration(brokers: [try #require(IntegrationEnvironment.kafkaBrokers)])
        clientConfiguration.requestsTopic = topics.requests
        clientConfiguration.resultsTopic = topics.results
        let client = try await AuthClient.connect(clientConfiguration, logger: IntegrationEnvironment.quietLogger)
        var register = LoginRequestData(method: "register")
        register.email = "ada@example.com"
        register.password = "correct horse battery"
        register.device = .init(name: "iPhone 15", platform: "ios")
        let phone = try #require(try await client.login(register).session)
        var login = LoginRequestData(method: "password")
        login.email = "ada@example.com"
        login.password = "correct horse battery"
        login.device = .init(name: "Firefox", platform: "web")
        let laptop = try #require(try await client.login(login).session)
        let stranger = try #require(try await client.login(LoginRequestData(method: "guest")).session)

        let sessions = try #require(try await client.sessions(accessToken: phone.accessToken).data.sessions)
        #expect(sessions.map(\.device?.name).sorted { ($0 ?? "") < ($1 ?? "") } == ["Firefox", "iPhone 15"])
        let strangers = try #require(try await client.sessions(accessToken: stranger.accessToken).data.sessions)
        let foreign = try await client.revokeSession(strangers[0].id, accessToken: phone.accessToken)
        #expect(foreign.error?.code == .unknownSession)
        let laptopID = try #require(sessions.first { !$0.current }?.id)
        #expect(try await client.revokeSession(laptopID, accessToken: phone.accessToken).isOK)
        #expect(try await client.introspect(laptop.accessToken) == .inactive)

        let (exported, export) = try await client.exportAccount(accessToken: phone.accessToken)
        #expect(exported.isOK && export?.user.email == "ada@example.com")
        #expect(export?.sessions.count == 2 && export?.audit.isEmpty == false)

        // Ten minutes later, by the session's age: the deletion asks for the password.
        _ = try PGConnection(conninfo: databaseURL).query(
            "UPDATE sessions SET created_at = created_at - interval '10 minutes' RETURNING id")
        let stale = try await client.deleteAccount(accessToken: phone.accessToken)
        #expect(stale.error?.code == .reauthenticationRequired)
        let deleted = try await client.deleteAccount(accessToken: phone.accessToken, password: "correct horse battery")
        #expect(deleted.isOK)
        #expect(try await client.introspect(phone.accessToken) == .inactive)

        await client.close()
        try await worker.stop()
    }

    /// Passkeys end to end through the broker and PostgreSQL: a guest adds one (the software
    /// authenticator answering the worker's options) and becomes a member with the same id, then
    /// signs in with it, discoverably; py_webauthn accepts both responses.
    @Test(.requiresSoftAuthenticator) func aGuestAddsAPasskeyAndSignsInWithItThroughTheWorker() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        var config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        config.resultsKey = try SecureRandom.bytes(32)
        config.passkeys.rpID = "example.com"
        config.passkeys.origins = ["https://example.com"]
        let worker = try await RunningWorker(config)
        var clientConfiguration = AuthClient.Configuration(brokers: [try #require(IntegrationEnvironment.kafkaBrokers)])
        clientConfiguration.requestsTopic = topics.requests
        clientConfiguration.resultsTopic = topics.results
        let client = try await AuthClient.connect(clientConfiguration, logger: IntegrationEnvironment.quietLogger)
        let guest = try await client.login(LoginRequestData(method: "guest"))
        let guestToken = try #require(guest.session?.accessToken)
        let guestID = try #require(guest.data.user?.id)

        func authenticator(_ command: [String: Any]) async throws -> (PasskeyCredential, [String: Any]) {
            let answer = try SoftAuthenticator.object(
                try await SoftAuthenticator.run(try JSONSerialization.data(withJSONObject: command)))
            let verdict = try #require(answer["py_webauthn"] as? [String: Any])
            #expect(verdict["verified"] as? Bool == true, "py_webauthn: \(verdict)")
            let response = try JSONSerialization.data(withJSONObject: try #require(answer["response"]))
            return (try JSONDecoder().decode(PasskeyCredential.self, from: response), answer)
        }

        let creation = try #require(
            try await client.passkeyRegistrationOptions(accessToken: guestToken).data.passkeyOptions)
        #expect(creation.rp?.id == "example.com" && creation.pubKeyCredParams?.map(\.alg) == [-8, -7, -257])
        #expect(creation.authenticatorSelection?.residentKey == "required")
        let (made, answer) = try await authenticator([
            "op": "create", "options": try SoftAuthenticator.json(creation), "origin": "https://example.com",
            "alg": "ES256", "attestation": "packed-x5c",
        ])
        let registered = try await client.registerPasskey(made, accessToken: guestToken, name: "iPhone")
        #expect(registered.isOK, "\(String(describing: registered.error))")
        #expect(registered.data.user?.id == guestID && registered.data.user?.isGuest == false)
        #expect(registered.data.passkey?.name == "iPhone")
        let memberToken = try #require(registered.session?.accessToken, "the guest gets a member's session")

        let request = try #require(try await client.passkeyLoginOptions().data.passkeyOptions)
        #expect(request.rpId == "example.com" && request.allowCredentials == [])
        let credential = try #require(answer["credential"] as? [String: Any])
        let (assertion, _) = try await authenticator([
            "op": "get", "options": try SoftAuthenticator.json(request), "origin": "https://example.com",
            "credential": credential, "sign_count": 1,
            "verify": ["public_key": credential["public_key"] ?? "", "sign_count": 0],
        ])
        let signedIn = try await client.loginWithPasskey(assertion, device: .init(name: "Safari", platform: "web"))
        #expect(signedIn.isOK, "\(String(describing: signedIn.error))")
        #expect(signedIn.data.user?.id == guestID && signedIn.session != nil)
        let listed = try await client.passkeys(accessToken: memberToken)
        #expect(listed.data.passkeys?.count == 1 && listed.data.passkeys?.first?.lastUsedAt != nil)
        let replayed = try await client.loginWithPasskey(assertion)
        #expect(replayed.error?.code == .invalidChallenge)

        await client.close()
        try await worker.stop()
    }

    @Test func aLoginNobodyAnswersTimesOut() async throws {
        let topics = try await IntegrationEnvironment.makeTopics()
        var configuration = AuthClient.Configuration(brokers: [try #require(IntegrationEnvironment.kafkaBrokers)])
        configuration.requestsTopic = topics.requests
        configuration.resultsTopic = topics.results
        let client = try await AuthClient.connect(configuration, logger: IntegrationEnvironment.quietLogger)
        let started = ContinuousClock.now
        await #expect(throws: AuthClient.Failure.self) {
            try await client.login(LoginRequestData(method: "guest"), timeout: .milliseconds(500))
        }
        // Loose (the test resumes on a cooperative pool the parallel run can keep busy for over a
        // minute): what it catches is a login that waits for ever.
        #expect(ContinuousClock.now - started < .seconds(120))
        await client.close()
        await #expect(throws: AuthClient.Failure.closed) { try await client.login(LoginRequestData(method: "guest")) }
    }
}
