import Foundation
import Messages
import PGStore
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// `method: introspect` (RFC 7662) for JWT and opaque access tokens, through the broker: active
/// with what the token stands for, inactive once its session ends or when it is not a token at
/// all; an opaque token's use is recorded; the gateway view agrees.
@Suite(.requiresServices, .serialized, .timeLimit(.minutes(3))) struct IntrospectionTests {
    @Test(arguments: [WorkerConfiguration.AccessTokenFormat.jwt, .opaque])
    func introspectionAnswersForLiveAndEndedSessions(format: WorkerConfiguration.AccessTokenFormat) async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        var config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        config.accessTokenFormat = format
        let (keyPath, _) = try TestKeys.temporaryKeyFile(.es256)
        defer { try? FileManager.default.removeItem(atPath: keyPath) }
        config.signingKeyPaths = [keyPath]
        let worker = try await RunningWorker(config)
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        defer { gateway.close() }
        func introspect(_ token: String) async throws -> IntrospectionPayload {
            var request = LoginRequestData(method: "introspect")
            request.accessToken = token
            let answer = try #require(try await gateway.login(request))
            #expect(answer.status == "ok" && answer.user == nil && answer.session == nil)
            return try #require(answer.introspection)
        }

        var guest = LoginRequestData(method: "guest")
        guest.device = .init(name: "Pixel 9", platform: "android")
        let signedIn = try #require(try await gateway.login(guest))
        let token = try #require(signedIn.session?.accessToken)
        let live = try await introspect(token)
        #expect(live.active)
        #expect(live.sub == signedIn.user?.id)
        #expect(live.sid != nil)
        #expect(live.abilities == ["guest"] && live.guest == true && live.tokenType == "Bearer")
        let expiresAt = try #require(signedIn.session.flatMap { Timestamp.parse($0.expiresAt) })
        #expect(abs(Double(try #require(live.exp)) - expiresAt.timeIntervalSince1970) <= 1)

        let connection = try PGConnection(conninfo: databaseURL)
        let view: PGQuery =
            "SELECT active FROM gateway_access_tokens WHERE token_hash = sha256(convert_to(\(token), 'UTF8'))"
        if format == .opaque {
            let used = try connection.query(
                "SELECT last_used_at FROM access_tokens WHERE token_hash = sha256(convert_to(\(token), 'UTF8'))")
            #expect(try used.first?.decode("last_used_at", as: Date?.self) != nil, "introspection records the use")
            #expect(try connection.query(view).first?.decode("active", as: Bool.self) == true, "the view agrees")
        }

        // Not a token at all, or a token nobody issued: inactive, and nothing more is said.
        for garbage in ["nonsense", "a.b.c", token + "x"] {
            #expect(try await introspect(garbage) == .inactive, "\(garbage)")
        }

        var logout = LoginRequestData(method: "logout")
        logout.accessToken = token
        #expect(try await gateway.login(logout)?.status == "ok")
        let ended = try await introspect(token)
        #expect(ended == .inactive, "the session ended: the token is no longer active")
        if format == .opaque {
            #expect(try connection.query(view).first?.decode("active", as: Bool.self) == false)
        }
        try await worker.stop()
    }
}
