import AuthCrypto
import Foundation
import Messages
import PGStore
import ServiceKit
import Testing

@testable import AuthDomain
@testable import AuthStore
@testable import TestSupport

/// `oauth` sign-ins against a local stand-in provider (`scripts/oauth-stand-in.py`) that behaves
/// as GitHub, Discord or Naver documents and refuses what they refuse: the flows on PostgreSQL,
/// the provider over HTTP on loopback.
@Suite(.requiresDatabase, .serialized, .timeLimit(.minutes(3))) struct OAuthSignInTests {
    let clock = ManualClock(Date())
    let logs = InMemoryLogHandler()

    func service(
        _ configurations: [OAuthProviderConfiguration], configure: (inout WorkerConfiguration) -> Void = { _ in }
    ) async throws -> FlowHarness {
        let logger = Logger(label: "test", level: .debug, handler: logs)
        let providers = IdentityProviders(
            [], oauth: configurations.map { OAuthProvider(configuration: $0, logger: logger) })
        return try await FlowHarness(clock: clock, providers: providers, logger: logger, configure: configure)
    }

    func request(
        _ provider: String, code: String, verifier: String, redirectURI: String = OAuthStandIn.redirectURI,
        linkTo: String? = nil
    ) -> LoginRequest {
        makeRequest(.oauth) {
            $0.provider = provider
            $0.code = code
            $0.codeVerifier = verifier
            $0.redirectURI = redirectURI
            $0.linkTo = linkTo
        }
    }

    /// A code the stand-in issued for `user` with a fresh PKCE pair, and the request that spends it.
    func signIn(
        _ standIn: OAuthStandIn, user: [String: Any], emails: [[String: Any]] = [], as name: String? = nil,
        linkTo: String? = nil
    ) async throws -> LoginRequest {
        let pkce = OAuthStandIn.pkce()
        let code = try await standIn.authorize(user: user, emails: emails, challenge: pkce.challenge)
        return request(name ?? standIn.flavor.rawValue, code: code, verifier: pkce.verifier, linkTo: linkTo)
    }

    static var octocat: [String: Any] {
        [
            "login": "octocat", "id": 583_231, "name": "The Octocat", "email": NSNull(),
            "avatar_url": "https://avatars.example/u/583231",
        ]
    }
    static var octocatEmails: [[String: Any]] {
        [
            ["email": "octo@work.example", "primary": false, "verified": true, "visibility": NSNull()],
            ["email": "Octocat@Example.com", "primary": true, "verified": true, "visibility": "public"],
        ]
    }

    @Test func aGitHubSignInCreatesTheAccountWithThePrimaryVerifiedAddressAndKeepsNoToken() async throws {
        let github = try await OAuthStandIn(.github)
        defer { github.stop() }
        let service = try await service([try github.configuration()])

        let first = try #require(
            try await service.handle(signIn(github, user: Self.octocat, emails: Self.octocatEmails)))
        let user = try #require(first.result.user)
        #expect(first.result.newUser == true)
        #expect(user.name == "The Octocat")
        #expect(user.email == "octocat@example.com")
        #expect(user.emailVerified == true)
        #expect(user.providers == ["github"])
        #expect(first.result.session?.accessToken != nil)
        let identity = try await service.query(
            "SELECT subject, email, email_verified FROM identities WHERE provider = 'github'")
        #expect(try identity.first?.decode("subject", as: String.self) == "583231", "GitHub's numeric id, as text")
        #expect(try identity.first?.decode("email_verified", as: Bool.self) == true)
        #expect(
            try first.events.map { try MessageCoding.decode(CloudEvent<UserCreatedData>.self, from: $0.payload).type }
                == ["auth.user.created"])

        // The next sign-in finds the same account; each read the profile and the addresses.
        let second = try #require(
            try await service.handle(signIn(github, user: Self.octocat, emails: Self.octocatEmails)))
        #expect(second.result.newUser == false)
        #expect(second.result.user?.id == user.id)
        let state = try await github.state()
        #expect(state.exchanged.count == 2)
        #expect(state.apiCalls == ["/user", "/user/emails", "/user", "/user/emails"])
        #expect(state.refused.isEmpty, "every request as GitHub documents it: \(state.refused)")
        #expect(try await service.count("audit_log", where: "action = 'oauth' AND outcome = 'ok'") == 2)

        // The provider's access tokens are kept nowhere: no row of any table holds one.
        let tables = try await service.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
        ).map { try $0.decode("table_name", as: String.self) }
        #expect(tables.contains("identities"))
        for token in state.issued {
            for table in tables {
                let bound: PGQuery = "SELECT \(token)"
                let holding = try await service.query(
                    PGQuery(
                        unsafeSQL: "SELECT count(*) AS n FROM \"\(table)\" AS t WHERE t::text LIKE '%' || $1 || '%'",
                        parameters: bound.parameters))
                #expect(try holding.first?.decode("n", as: Int.self) == 0, "\(table) holds the provider's token")
            }
        }
        #expect(!logs.lines.joined(separator: "\n").contains(state.issued[0]))
    }

    @Test func discordAndNaverEntriesSignIn() async throws {
        let discord = try await OAuthStandIn(.discord)
        defer { discord.stop() }
        let naver = try await OAuthStandIn(.naver)
        defer { naver.stop() }
        let service = try await service([try discord.configuration(), try naver.configuration()])

        // Discord: HTTP Basic client authentication; `verified` says the address is.
        let nelly = try #require(
            try await service.handle(
                signIn(
                    discord,
                    user: [
                        "id": "80351110224678912", "username": "nelly", "global_name": "Nelly",
                        "email": "nelly@example.com", "verified": true,
                    ])))
        #expect(nelly.result.user?.name == "Nelly")
        #expect(nelly.result.user?.email == "nelly@example.com")
        #expect(nelly.result.user?.emailVerified == true)
        #expect(try await discord.state().refused.isEmpty)

        // Naver: the profile wrapped in `response`; nothing says the address is verified.
        let naverUser = try #require(
            try await service.handle(
                signIn(naver, user: ["id": "32742776", "email": "jimin@example.kr", "name": "Jimin"])))
        #expect(naverUser.result.user?.name == "Jimin")
        #expect(naverUser.result.user?.emailVerified == false)
        #expect(try await service.count("identities", where: "provider = 'naver' AND subject = '32742776'") == 1)
        #expect(try await naver.state().refused.isEmpty)
    }

    @Test func eachRefusalIsAnsweredAsDocumented() async throws {
        let github = try await OAuthStandIn(.github)
        defer { github.stop() }
        let service = try await service([try github.configuration()])
        func refusal(_ request: LoginRequest) async -> LoginError? {
            do {
                _ = try await service.handle(request)
                return nil
            } catch {
                return error as? LoginError
            }
        }
        let pkce = OAuthStandIn.pkce()

        // Checked before the code is spent.
        var code = try await github.authorize(user: Self.octocat, challenge: pkce.challenge)
        let unknown = await refusal(request("gitlab", code: code, verifier: pkce.verifier))
        #expect(unknown?.code == .unknownProvider)
        #expect(unknown?.field == "data.provider")
        let elsewhere = await refusal(
            request("github", code: code, verifier: pkce.verifier, redirectURI: "https://evil.example/callback"))
        #expect(elsewhere?.code == .malformedRequest)
        #expect(elsewhere?.field == "data.redirect_uri")
        let short = await refusal(request("github", code: code, verifier: "too-short"))
        #expect(short?.code == .malformedRequest)
        #expect(short?.field == "data.code_verifier")
        #expect(try await github.state().requests == 0, "no call for a request refused before the exchange")

        // The provider refuses: another verifier, a used code, an expired one.
        let other = OAuthStandIn.pkce()
        let wrongVerifier = await refusal(request("github", code: code, verifier: other.verifier))
        #expect(wrongVerifier?.code == .invalidCode)
        #expect(wrongVerifier?.retriable == false)
        code = try await github.authorize(user: Self.octocat, challenge: pkce.challenge)
        _ = try #require(try await service.handle(request("github", code: code, verifier: pkce.verifier)))
        // A redelivery after the exchange: the code is spent, nothing is written twice.
        let sessions = try await service.count("sessions")
        #expect(await refusal(request("github", code: code, verifier: pkce.verifier))?.code == .invalidCode)
        #expect(try await service.count("sessions") == sessions)
        code = try await github.authorize(user: Self.octocat, challenge: pkce.challenge)
        try await github.expire(code)
        #expect(await refusal(request("github", code: code, verifier: pkce.verifier))?.code == .invalidCode)
        let reasons = try await github.state().refused.compactMap { $0["why"] }
        #expect(reasons.contains("the verifier does not match the challenge"))
        #expect(reasons.contains("the code is unknown or used"))
        #expect(reasons.contains("the code expired"))

        // A profile without a stable id.
        var anonymous = Self.octocat
        anonymous["id"] = NSNull()
        let noID = await refusal(try await signIn(github, user: anonymous))
        #expect(noID?.code == .invalidToken)
        anonymous["id"] = 1.5
        #expect(await refusal(try await signIn(github, user: anonymous))?.code == .invalidToken)
        #expect(try await service.count("users") == 1)
        // Each refusal of an audited method is in the audit trail.
        #expect(try await service.count("audit_log", where: "action = 'oauth' AND outcome <> 'ok'") >= 7)
    }

    @Test func aProviderDownOrSlowIsRetriableAndTheBreakerAnswersAtOnce() async throws {
        let github = try await OAuthStandIn(.github)
        defer { github.stop() }
        var configuration = try github.configuration()
        configuration.breakerFailures = 2
        configuration.breakerOpenFor = .seconds(1)
        configuration.totalTimeout = .milliseconds(700)
        let service = try await service([configuration])
        func answer(_ request: LoginRequest) async -> LoginError? {
            do {
                _ = try await service.handle(request)
                return nil
            } catch {
                return error as? LoginError
            }
        }

        try await github.set(down: true)
        let down = await answer(try await signIn(github, user: Self.octocat))
        #expect(down?.code == .providerUnavailable)
        #expect(down?.retriable == true)
        // Slow past the timeout: the second failure in a row opens the breaker.
        try await github.set(delay: 2)
        let started = ContinuousClock.now
        #expect(await answer(try await signIn(github, user: Self.octocat))?.code == .providerUnavailable)
        #expect(ContinuousClock.now - started < .seconds(2), "the call is given up at its timeout")
        try await github.set()
        let seen = try await github.state().requests
        let open = ContinuousClock.now
        let shed = await answer(try await signIn(github, user: Self.octocat))
        #expect(shed?.code == .providerUnavailable)
        #expect(shed?.retriable == true)
        #expect(ContinuousClock.now - open < .milliseconds(300))
        #expect(try await github.state().requests == seen, "an open breaker does not call")
        #expect(logs.lines.joined(separator: "\n").contains("OAuth provider failing"))

        // After its pause, one sign-in tries the provider again, and closes it.
        try await Task.sleep(for: .milliseconds(1100))
        _ = try #require(try await service.handle(signIn(github, user: Self.octocat, emails: Self.octocatEmails)))
        _ = try #require(try await service.handle(signIn(github, user: Self.octocat, emails: Self.octocatEmails)))
    }

    /// Nothing listening where the entry points (the provider unreachable): retriable at once, not
    /// after a timeout, and nothing written.
    @Test func anUnreachableProviderIsRetriable() async throws {
        let github = try await OAuthStandIn(.github)
        var configuration = try github.configuration()
        let code = try await github.authorize(user: Self.octocat, challenge: OAuthStandIn.pkce().challenge)
        github.stop()
        configuration.totalTimeout = .seconds(10)
        let service = try await service([configuration])
        let started = ContinuousClock.now
        do {
            _ = try await service.handle(request("github", code: code, verifier: OAuthStandIn.pkce().verifier))
            Issue.record("signed in with nobody answering")
        } catch let error as LoginError {
            #expect(error.code == .providerUnavailable)
            #expect(error.retriable)
        }
        #expect(ContinuousClock.now - started < .seconds(5), "a refused connection is not waited out")
        #expect(try await service.count("users") == 0)
        #expect(logs.lines.contains { $0.contains("OAuth provider call failed") })
    }

    /// A token endpoint that redirects is not followed: the client secret and the code go to the
    /// configured endpoint only.
    @Test func aRedirectIsNotFollowed() async throws {
        let github = try await OAuthStandIn(.github)
        defer { github.stop() }
        let server = try KeyServer()
        defer { server.stop() }
        server.serve(
            "/token",
            .init(status: 307, body: Data(), headers: ["Location": github.url + "/login/oauth/access_token"]))
        var configuration = try github.configuration()
        configuration.tokenEndpoint = server.url("/token")
        let service = try await service([configuration])
        let code = try await github.authorize(user: Self.octocat, challenge: OAuthStandIn.pkce().challenge)
        do {
            _ = try await service.handle(request("github", code: code, verifier: OAuthStandIn.pkce().verifier))
            Issue.record("signed in through a redirect")
        } catch let error as LoginError {
            #expect(error.code == .providerUnavailable)
        }
        #expect(server.hits("/token") == 1)
        #expect(try await github.state().requests == 0, "the redirect's target was never asked")
    }

    @Test func signInsPastTheLimitInFlightAreAnsweredAtOnce() async throws {
        let github = try await OAuthStandIn(.github)
        defer { github.stop() }
        var configuration = try github.configuration()
        configuration.maximumInFlight = 1
        let service = try await service([configuration])
        try await github.set(delay: 1)
        let first = try await signIn(github, user: Self.octocat, emails: Self.octocatEmails)
        let second = try await signIn(github, user: Self.octocat, emails: Self.octocatEmails)
        let flows = service.flows
        async let slow = flows.prepare(first)
        try await Task.sleep(for: .milliseconds(300))
        let started = ContinuousClock.now
        await #expect(throws: LoginError(.providerUnavailable, "")) { try await flows.prepare(second) }
        #expect(ContinuousClock.now - started < .milliseconds(500))
        _ = try await slow
    }

    @Test func onlyAVerifiedAddressLinksAndAGuestKeepsItsID() async throws {
        let github = try await OAuthStandIn(.github)
        defer { github.stop() }
        let naver = try await OAuthStandIn(.naver)
        defer { naver.stop() }
        let discord = try await OAuthStandIn(.discord)
        defer { discord.stop() }
        let service = try await service(
            [try github.configuration(), try naver.configuration(), try discord.configuration()]
        ) { $0.accounts.linkByVerifiedEmail = true }

        let owner = try #require(
            try await service.handle(signIn(github, user: Self.octocat, emails: Self.octocatEmails))?.result.user)
        // Naver's address is not known to be verified: a separate account, never the owner's.
        let unverified = try #require(
            try await service.handle(
                signIn(naver, user: ["id": "n-1", "email": "octocat@example.com", "name": "Octo"])))
        #expect(unverified.result.newUser == true)
        #expect(unverified.result.user?.id != owner.id)
        // Discord says it is verified: linked to the owner.
        let linked = try #require(
            try await service.handle(
                signIn(
                    discord, user: ["id": "d-1", "global_name": "O", "email": "octocat@example.com", "verified": true])
            ))
        #expect(linked.result.user?.id == owner.id)
        #expect(linked.result.newUser == false)

        // A guest signing up with GitHub keeps its id.
        let guest = try #require(try await service.handle(makeRequest(.guest)))
        let guestID = try #require(guest.result.user?.id)
        let token = try #require(guest.result.session?.accessToken)
        var someone = Self.octocat
        someone["id"] = 9_000_001
        let upgraded = try #require(
            try await service.handle(
                signIn(
                    github, user: someone,
                    emails: [["email": "new@example.com", "primary": true, "verified": true]], linkTo: token)))
        #expect(upgraded.result.user?.id == guestID)
        #expect(upgraded.result.user?.isGuest == false)
    }

    @Test func aRefusedClientSecretIsTheOperatorsProblemAndNeverLogged() async throws {
        let github = try await OAuthStandIn(.github)
        defer { github.stop() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("oauth-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let wrong = directory.appendingPathComponent("secret").path
        try "not-the-secret-\(UUID().uuidString)".write(toFile: wrong, atomically: true, encoding: .utf8)
        let service = try await service([try github.configuration(secretPath: wrong)])
        do {
            _ = try await service.handle(signIn(github, user: Self.octocat))
            Issue.record("a refused client signed in")
        } catch let error as LoginError {
            #expect(error.code == .providerUnavailable)
        }
        #expect(logs.lines.joined(separator: "\n").contains("refused the worker's client credentials"))
        let secret = try String(contentsOfFile: wrong, encoding: .utf8)
        #expect(!logs.lines.joined(separator: "\n").contains(secret))
        // Nor does any description of the entry carry it.
        let configuration = try github.configuration(secretPath: wrong)
        var dumped = ""
        dump(configuration, to: &dumped)
        for text in [String(describing: configuration), String(reflecting: configuration), dumped] {
            #expect(!text.contains(secret), "\(text)")
        }
        #expect(try await github.state().refused.first?["error"] == "incorrect_client_credentials")
    }
}
