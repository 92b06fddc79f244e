import AuthCrypto
import Foundation
import JOSE
import Messages
import ServiceKit
import Testing

@testable import AuthWorker

@Suite struct SessionFlowTests {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
    let store = InMemoryAuthStore()
    let keyPath: String

    init() throws {
        keyPath = try TestKeys.temporaryKeyFile().path
    }

    func service(_ configure: (inout WorkerConfiguration) -> Void = { _ in }) throws -> LoginService {
        var config = WorkerConfiguration()
        config.signingKeyPaths = [keyPath]
        configure(&config)
        let issuer: any AccessTokenIssuer =
            config.accessTokenFormat == .jwt
            ? try JWTAccessTokenIssuer(configuration: config)
            : OpaqueTokenIssuer(identifiers: Identifiers(clock: clock))
        return LoginService(
            configuration: config, store: store, accessTokens: issuer, clock: clock,
            identifiers: Identifiers(clock: clock), logger: Logger(label: "test", handler: InMemoryLogHandler()))
    }

    func request(_ method: LoginMethod, _ fill: (inout LoginRequestData) -> Void = { _ in }) -> LoginRequest {
        var data = LoginRequestData(method: method.rawValue)
        fill(&data)
        return LoginRequest(
            id: UUID().uuidString, source: "/test", time: nil, traceparent: nil, method: method, data: data)
    }

    func signIn(_ service: LoginService) async throws -> SessionPayload {
        try #require(try await service.handle(request(.guest))?.result.session)
    }

    func refresh(_ service: LoginService, _ token: String?) async throws -> SessionPayload {
        try #require(try await service.handle(request(.refresh) { $0.refreshToken = token })?.result.session)
    }

    @Test func everyRefreshRotates() async throws {
        let service = try service()
        let first = try await signIn(service)
        clock.advance(by: 60)
        let second = try await refresh(service, first.refreshToken)
        #expect(second.refreshToken != first.refreshToken)
        #expect(second.accessToken != first.accessToken)
        #expect(second.abilities == ["guest"])
        clock.advance(by: 60)
        let third = try await refresh(service, second.refreshToken)
        #expect(third.refreshToken != second.refreshToken)
    }

    @Test func twoTabsRefreshingAtOnceGetTheSameSuccessor() async throws {
        let service = try service()
        let first = try await signIn(service)
        let tabA = try await refresh(service, first.refreshToken)
        clock.advance(by: 3)
        let tabB = try await refresh(service, first.refreshToken)
        #expect(tabA == tabB)
    }

    @Test func reuseAfterTheGraceIntervalEndsTheFamily() async throws {
        let service = try service()
        let first = try await signIn(service)
        let successor = try await refresh(service, first.refreshToken)
        clock.advance(by: 6)
        do {
            _ = try await service.handle(request(.refresh) { $0.refreshToken = first.refreshToken })
            Issue.record("expected refresh_token_reused")
        } catch let reuse as RefreshReuse {
            #expect(reuse.loginError.code == .refreshTokenReused)
            let event = try MessageCoding.decode(
                CloudEvent<SessionRevokedData>.self, from: try #require(reuse.events.first).payload)
            #expect(event.type == "auth.session.revoked")
            #expect(event.data.reason == "refresh_reuse")
        }
        // The whole family is gone: the successor the thief or the user holds is dead too.
        await #expect(throws: LoginError(.invalidRefreshToken, "")) {
            try await service.handle(request(.refresh) { $0.refreshToken = successor.refreshToken })
        }
        #expect(store.revokedSessions.count == 1)
    }

    @Test func unknownAndExpiredRefreshTokens() async throws {
        let service = try service { $0.sessions.refreshTokenLifetime = 600 }
        await #expect(throws: LoginError(.invalidRefreshToken, "")) {
            try await service.handle(request(.refresh) { $0.refreshToken = "rt_nope" })
        }
        let first = try await signIn(service)
        clock.advance(by: 601)
        await #expect(throws: LoginError(.invalidRefreshToken, "")) {
            try await service.handle(request(.refresh) { $0.refreshToken = first.refreshToken })
        }
    }

    @Test func theAbsoluteSessionLifetimeBoundsEverything() async throws {
        let service = try service { $0.sessions.sessionLifetime = 1000 }
        var session = try await signIn(service)
        #expect(session.refreshExpiresAt == "2026-11-29T12:16:40Z")
        clock.advance(by: 900)
        session = try await refresh(service, session.refreshToken)
        #expect(session.expiresAt == "2026-11-29T12:16:40Z", "no token outlives its session")
        clock.advance(by: 101)
        await #expect(throws: LoginError(.invalidRefreshToken, "")) {
            try await service.handle(request(.refresh) { $0.refreshToken = session.refreshToken })
        }
    }

    @Test(arguments: [WorkerConfiguration.AccessTokenFormat.jwt, .opaque])
    func logoutEndsTheSession(format: WorkerConfiguration.AccessTokenFormat) async throws {
        let service = try service { $0.accessTokenFormat = format }
        let guest = try #require(try await service.handle(request(.guest)))
        let first = try #require(guest.result.session)
        // The session's current tokens, after a rotation.
        let other = try await refresh(service, first.refreshToken)
        let outcome = try #require(
            try await service.handle(
                request(.logout) {
                    $0.accessToken = other.accessToken
                    $0.scope = "device"
                }))
        #expect(outcome.result.status == "ok")
        #expect(outcome.result.session == nil)
        #expect(outcome.result.user?.id == guest.result.user?.id)
        let event = try MessageCoding.decode(
            CloudEvent<SessionRevokedData>.self, from: try #require(outcome.events.first).payload)
        #expect(event.data.reason == "logout")
        await #expect(throws: LoginError(.invalidRefreshToken, "")) {
            try await service.handle(request(.refresh) { $0.refreshToken = other.refreshToken })
        }
        await #expect(throws: LoginError(.invalidToken, "")) {
            try await service.handle(request(.logout) { $0.accessToken = "garbage" })
        }
    }

    @Test func opaqueAccessTokensExpire() async throws {
        let service = try service { $0.accessTokenFormat = .opaque }
        let passwords = try PasswordService(parameters: fastArgon2, threads: 1)
        var config = WorkerConfiguration()
        config.accessTokenFormat = .opaque
        let accounts = LoginService(
            configuration: config, store: store,
            accessTokens: OpaqueTokenIssuer(identifiers: Identifiers(clock: clock)),
            passwords: passwords, clock: clock, identifiers: Identifiers(clock: clock),
            logger: Logger(label: "test", handler: InMemoryLogHandler()))
        let guest = try await signIn(service)
        #expect(guest.accessToken.wholeMatch(of: /[0-9a-f-]{36}\|[A-Za-z0-9]{40}/) != nil)
        clock.advance(by: 901)
        // Past its 15 minutes the token no longer proves the guest's account for linking.
        await #expect(throws: LoginError(.invalidToken, "")) {
            try await accounts.handle(
                request(.register) {
                    $0.email = "late@example.com"
                    $0.password = "correct horse"
                    $0.linkTo = guest.accessToken
                })
        }
    }

    @Test func logoutAllEndsEverySessionOfTheUser() async throws {
        let service = try service()
        let password = try PasswordService(parameters: fastArgon2, threads: 1)
        let accounts = LoginService(
            configuration: {
                var c = WorkerConfiguration(); c.signingKeyPaths = [keyPath]; return c
            }(), store: store,
            accessTokens: try JWTAccessTokenIssuer(
                configuration: {
                    var c = WorkerConfiguration(); c.signingKeyPaths = [keyPath]; return c
                }()),
            passwords: password, clock: clock, identifiers: Identifiers(clock: clock),
            logger: Logger(label: "test", handler: InMemoryLogHandler()))
        _ = try await accounts.handle(
            request(.register) {
                $0.email = "all@example.com"
                $0.password = "correct horse"
            })
        var sessions: [SessionPayload] = []
        for _ in 0..<3 {
            sessions.append(
                try #require(
                    try await accounts.handle(
                        request(.password) {
                            $0.email = "all@example.com"
                            $0.password = "correct horse"
                        })?.result.session))
        }
        let outcome = try #require(
            try await service.handle(
                request(.logout) {
                    $0.accessToken = sessions[0].accessToken
                    $0.scope = "all"
                }))
        #expect(outcome.events.count == 4, "the registration's session and three logins")
        #expect(outcome.events.allSatisfy { String(decoding: $0.payload, as: UTF8.self).contains("logout_all") })
        for session in sessions {
            await #expect(throws: LoginError(.invalidRefreshToken, "")) {
                try await service.handle(request(.refresh) { $0.refreshToken = session.refreshToken })
            }
        }
    }

    @Test func replyKeysSealTheSessionAndBadOnesAreRefusedFirst() async throws {
        let service = try service()
        let recipient = try X25519.generateKeyPair()
        let outcome = try #require(
            try await service.handle(request(.guest) { $0.replyKey = Base64URL.encode(recipient.publicKey) }))
        #expect(outcome.result.session == nil)
        let jwe = try #require(outcome.result.sealedSession)
        #expect(jwe.split(separator: ".", omittingEmptySubsequences: false).count == 5)
        #expect(!jwe.contains("rt_"))

        await #expect(throws: LoginError(.malformedRequest, "")) {
            try await service.handle(request(.guest) { $0.replyKey = "not-a-key" })
        }
        let strict = try self.service { $0.sessions.requireReplyKey = true }
        await #expect(throws: LoginError(.malformedRequest, "")) { try await strict.handle(request(.guest)) }
        #expect(store.users.count == 1, "refused before anything was written")
    }

    @Test(.requiresIndependentJOSE) func theGatewayOpensTheSealedSessionWithItsPrivateKey() async throws {
        let service = try service()
        let recipient = try X25519.generateKeyPair()
        let outcome = try #require(
            try await service.handle(request(.guest) { $0.replyKey = Base64URL.encode(recipient.publicKey) }))
        let script = """
            import sys, json
            from jwcrypto import jwk, jwe
            d, x, token = sys.stdin.read().split()
            obj = jwe.JWE()
            obj.deserialize(token, key=jwk.JWK(kty='OKP', crv='X25519', d=d, x=x))
            session = json.loads(obj.payload)
            print(session['token_type'], session['abilities'][0], session['refresh_token'][:3])
            """
        let input = [
            Base64URL.encode(recipient.privateKey), Base64URL.encode(recipient.publicKey),
            try #require(outcome.result.sealedSession),
        ].joined(separator: " ")
        #expect(try IndependentJOSE.run(script, input: input) == "Bearer guest rt_")
    }
}
