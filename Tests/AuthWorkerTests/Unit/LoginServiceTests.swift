import AuthCrypto
import AuthWorker
import Foundation
import Messages
import ServiceKit
import Testing

@Suite struct LoginServiceTests {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
    let store = InMemoryAuthStore()
    let logs = InMemoryLogHandler()

    func service(format: WorkerConfiguration.AccessTokenFormat = .opaque, keyPath: String? = nil) throws -> LoginService
    {
        var config = WorkerConfiguration()
        config.accessTokenFormat = format
        if let keyPath { config.signingKeyPaths = [keyPath] }
        let identifiers = Identifiers(clock: clock)
        let issuer: any AccessTokenIssuer =
            format == .jwt
            ? try JWTAccessTokenIssuer(configuration: config) : OpaqueTokenIssuer(identifiers: identifiers)
        return LoginService(
            configuration: config, store: store, accessTokens: issuer, clock: clock, identifiers: identifiers,
            logger: Logger(label: "test", level: .debug, handler: logs))
    }

    func request(_ method: LoginMethod, id: String = "req-1") -> LoginRequest {
        var data = LoginRequestData(method: method.rawValue)
        data.device = .init(name: "iPhone 15", platform: "ios")
        return LoginRequest(id: id, source: "/test", time: nil, traceparent: nil, method: method, data: data)
    }

    @Test func guestLoginCreatesAGuestAndASessionWithRestrictedAbilities() async throws {
        let outcome = try #require(try await service().handle(request(.guest)))
        let user = try #require(outcome.result.user)
        let session = try #require(outcome.result.session)
        #expect(outcome.result.status == "ok")
        #expect(outcome.result.newUser == true)
        #expect(user.isGuest)
        #expect(user.handle.hasPrefix("guest_"))
        #expect(user.createdAt == "2026-11-29T12:00:00Z")
        #expect(session.abilities == ["guest"])
        #expect(session.expiresAt == "2026-11-29T12:15:00Z")
        #expect(session.tokenType == "Bearer")

        // Opaque token: `<id>|<40 characters>`; only its SHA-256 is stored.
        let parts = session.accessToken.split(separator: "|")
        #expect(parts.count == 2 && parts[1].count == 40)
        let stored = try #require(store.sessions.first)
        #expect(stored.accessTokenHash == SHA256.hash(session.accessToken))
        #expect(stored.refreshTokenHash == SHA256.hash(session.refreshToken ?? ""))
        #expect(stored.deviceName == "iPhone 15")
        #expect(!logs.lines.joined().contains(parts[1]), "tokens never reach the log")
    }

    @Test func guestLoginEmitsUserCreatedKeyedByTheUser() async throws {
        let outcome = try #require(try await service().handle(request(.guest)))
        let event = try #require(outcome.events.first)
        let userID = try #require(outcome.result.user?.id)
        #expect(outcome.events.count == 1)
        #expect(event.key == userID)
        #expect(event.topic == "auth.user.events")
        let decoded = try MessageCoding.decode(CloudEvent<UserCreatedData>.self, from: event.payload)
        #expect(decoded.type == "auth.user.created")
        #expect(decoded.id == event.id.lowercasedString)
        #expect(decoded.data.userId == userID)
        #expect(decoded.data.isGuest)
        #expect(decoded.data.provider == "guest")
        #expect(!String(decoding: event.payload, as: UTF8.self).contains("token"), "events carry no secret")
        #expect(store.unpublishedIDs == [event.id])
    }

    @Test func aReplayedRequestCreatesNothing() async throws {
        let service = try service()
        _ = try await service.handle(request(.guest, id: "same"))
        let replay = try await service.handle(request(.guest, id: "same"))
        #expect(replay == nil)
        #expect(store.users.count == 1)
        #expect(store.sessions.count == 1)
    }

    @Test(arguments: [LoginMethod.apple, .google, .password, .register])
    func methodsNotEnabledAreRefused(method: LoginMethod) async throws {
        // Apple and Google without audiences are disabled; without a password service, passwords are.
        await #expect(throws: LoginError(.unsupportedMethod, "")) { try await service().handle(request(method)) }
        #expect(store.users.isEmpty)
    }

    @Test func anOIDCProviderThatIsNotConfiguredIsUnknown() async throws {
        var oidc = request(.oidc)
        oidc.data.provider = "myspace"
        await #expect(throws: LoginError(.unknownProvider, "")) { try await service().handle(oidc) }
    }

    @Test func jwtAccessTokensCarryTheSessionClaims() async throws {
        let (path, key) = try TestKeys.temporaryKeyFile()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let outcome = try #require(try await service(format: .jwt, keyPath: path).handle(request(.guest)))
        let token = try #require(outcome.result.session?.accessToken)
        let parts = token.split(separator: ".").map(String.init)
        #expect(parts.count == 3)
        let header =
            try JSONSerialization.jsonObject(with: Data(try #require(Base64URL.decode(parts[0])))) as? [String: Any]
        let claims =
            try JSONSerialization.jsonObject(with: Data(try #require(Base64URL.decode(parts[1])))) as? [String: Any]
        #expect(header?["alg"] as? String == "EdDSA")
        #expect(header?["kid"] as? String == key.keyID)
        #expect(header?["typ"] as? String == "at+jwt")
        #expect(claims?["sub"] as? String == outcome.result.user?.id)
        #expect(claims?["exp"] as? Int == 1_795_953_600 + 900)
        #expect(claims?["guest"] as? Bool == true)
        #expect(claims?["abilities"] as? [String] == ["guest"])
        #expect(claims?["sid"] as? String == store.sessions.first?.id.lowercasedString)
        #expect(try #require(Base64URL.decode(parts[2])).count == 64)
    }
}
