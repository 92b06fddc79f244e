import AuthCrypto
import Foundation
import Messages
import Testing

@testable import AuthDomain
@testable import AuthWorker
@testable import TestSupport

/// `oauth` through the whole worker: the broker, PostgreSQL, the providers file, and the stand-in
/// provider (`scripts/oauth-stand-in.py`) on loopback.
@Suite(.requiresServices, .serialized, .timeLimit(.minutes(3))) struct OAuthIntegrationTests {
    /// Discord's and Naver's kinds of entry, read from the providers file, each through Kafka.
    @Test func discordAndNaverEntriesSignInThroughTheWorker() async throws {
        let discord = try await OAuthStandIn(.discord)
        defer { discord.stop() }
        let naver = try await OAuthStandIn(.naver)
        defer { naver.stop() }
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        var config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        config.oidcProvidersPath = try OAuthStandIn.providersFile([discord.entry(), naver.entry()])
        let worker = try await RunningWorker(config)
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        func signIn(_ standIn: OAuthStandIn, user: [String: Any]) async throws -> LoginResultData {
            let pkce = OAuthStandIn.pkce()
            var data = LoginRequestData(method: "oauth")
            data.provider = standIn.flavor.rawValue
            data.code = try await standIn.authorize(user: user, challenge: pkce.challenge)
            data.codeVerifier = pkce.verifier
            data.redirectURI = OAuthStandIn.redirectURI
            return try #require(try await gateway.login(data))
        }
        let nelly = try await signIn(
            discord,
            user: ["id": "80351110224678912", "global_name": "Nelly", "email": "nelly@example.com", "verified": true])
        #expect(nelly.status == "ok")
        #expect(nelly.user?.providers == ["discord"])
        #expect(nelly.user?.emailVerified == true)
        let jimin = try await signIn(naver, user: ["id": "32742776", "email": "jimin@example.kr", "name": "Jimin"])
        #expect(jimin.status == "ok")
        #expect(jimin.user?.providers == ["naver"])
        #expect(jimin.user?.name == "Jimin")
        #expect(jimin.user?.emailVerified == false)
        #expect(try await discord.state().refused.isEmpty)
        #expect(try await naver.state().refused.isEmpty)
        gateway.close()
        try await worker.stop()
    }

    /// A GitHub sign-in end to end, and guests answered as before while every call to the provider
    /// runs into its timeout: the calls run beside the pipeline, never in its way.
    @Test func gitHubSignsInAndASlowProviderHoldsUpNobodyElse() async throws {
        let github = try await OAuthStandIn(.github)
        defer { github.stop() }
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        var config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        config.oidcProvidersPath = try github.providersFile(timeoutSeconds: 5)
        let worker = try await RunningWorker(config)
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)

        func oauth() async throws -> LoginRequestData {
            let pkce = OAuthStandIn.pkce()
            let code = try await github.authorize(
                user: ["id": 583_231, "login": "octocat", "name": "The Octocat"],
                emails: [["email": "octocat@example.com", "primary": true, "verified": true]], challenge: pkce.challenge
            )
            var data = LoginRequestData(method: "oauth")
            data.provider = "github"
            data.code = code
            data.codeVerifier = pkce.verifier
            data.redirectURI = OAuthStandIn.redirectURI
            return data
        }
        let signedIn = try #require(try await gateway.login(oauth()))
        #expect(signedIn.status == "ok")
        #expect(signedIn.newUser == true)
        #expect(signedIn.user?.email == "octocat@example.com")
        #expect(signedIn.user?.providers == ["github"])
        #expect(signedIn.session != nil)

        // Bursts of guests published together, each guest's time from its publication to its
        // result's (the result's broker timestamp, in milliseconds), read from the results topic.
        let results = try TopicReader(topic: topics.results)
        let before = try await gateway.burst(guests: 40, results: results).guests

        // Every call to the provider now takes longer than the entry's 5 s timeout; the slow
        // sign-ins arrive in the same burst as the guests.
        try await github.set(delay: 8)
        var slow: [LoginRequestData] = []
        for _ in 0..<8 { slow.append(try await oauth()) }
        let (during, refused) = try await gateway.burst(guests: 40, with: slow, results: results)
        #expect(refused.count == slow.count)
        #expect(refused.allSatisfy { $0.error?.code == .providerUnavailable && $0.error?.retriable == true })
        // Had a provider's call held the pipeline, or a task preparing guests, guests would have
        // waited for its 5 s timeout (the bound leaves room for a test run that fills both cores).
        let p99 = during[min(during.count - 1, during.count * 99 / 100)]
        #expect(p99 < 2500, "guest p99 \(p99) ms while the provider times out (before: \(before.last ?? -1) ms)")
        await results.close()
        gateway.close()
        try await worker.stop()
    }
}
