import AuthCrypto
import Foundation
import JOSE
import Messages
import PGStore
import ServiceKit
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

@Suite(.requiresDatabase) struct SessionFlowTests {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
    let keyPath: String

    init() throws {
        keyPath = try TestKeys.temporaryKeyFile().path
    }

    func harness(passwords: PasswordService? = nil, _ configure: (inout WorkerConfiguration) -> Void = { _ in })
        async throws -> FlowHarness
    {
        try await FlowHarness(clock: clock, passwords: passwords) {
            $0.accessTokenFormat = .jwt
            $0.signingKeyPaths = [keyPath]
            configure(&$0)
        }
    }

    func signIn(_ harness: FlowHarness) async throws -> SessionPayload {
        try #require(try await harness.handle(makeRequest(.guest))?.result.session)
    }

    func refresh(_ harness: FlowHarness, _ token: String?) async throws -> FlowHarness.Outcome {
        try #require(try await harness.handle(makeRequest(.refresh) { $0.refreshToken = token }))
    }

    func rotated(_ harness: FlowHarness, _ token: String?) async throws -> SessionPayload {
        try #require(try await refresh(harness, token).result.session)
    }

    @Test func everyRefreshRotates() async throws {
        let harness = try await harness()
        let first = try await signIn(harness)
        clock.advance(by: 60)
        let second = try await rotated(harness, first.refreshToken)
        #expect(second.refreshToken != first.refreshToken)
        #expect(second.accessToken != first.accessToken)
        #expect(second.abilities == ["guest"])
        clock.advance(by: 60)
        let third = try await rotated(harness, second.refreshToken)
        #expect(third.refreshToken != second.refreshToken)
    }

    @Test func twoTabsRefreshingAtOnceGetTheSameSuccessor() async throws {
        let harness = try await harness()
        let first = try await signIn(harness)
        let tabA = try await rotated(harness, first.refreshToken)
        clock.advance(by: 3)
        let tabB = try await rotated(harness, first.refreshToken)
        #expect(tabA == tabB)
    }

    @Test func twoTabsInOneBatchGetTheSameSuccessor() async throws {
        let harness = try await harness()
        let first = try await signIn(harness)
        let answers = try await harness.handleBatch([
            makeRequest(.refresh) { $0.refreshToken = first.refreshToken },
            makeRequest(.refresh) { $0.refreshToken = first.refreshToken },
        ])
        let tabA = try #require(try answers[0].get().result.session)
        let tabB = try #require(try answers[1].get().result.session)
        #expect(tabA == tabB, "the second sees the first's rotation, though both were read together")
        #expect(try await harness.count("refresh_tokens") == 2)
    }

    @Test func reuseAfterTheGraceIntervalEndsTheFamily() async throws {
        let harness = try await harness()
        let first = try await signIn(harness)
        let successor = try await rotated(harness, first.refreshToken)
        clock.advance(by: 6)
        let reuse = try await refresh(harness, first.refreshToken)
        #expect(reuse.result.error?.code == .refreshTokenReused)
        let event = try MessageCoding.decode(
            CloudEvent<SessionRevokedData>.self, from: try #require(reuse.events.first).payload)
        #expect(event.type == "auth.session.revoked")
        #expect(event.data.reason == "refresh_reuse")
        // The whole family is gone: the successor the thief or the user holds is dead too.
        await #expect(throws: LoginError(.invalidRefreshToken, "")) {
            try await harness.handle(makeRequest(.refresh) { $0.refreshToken = successor.refreshToken })
        }
        #expect(try await harness.count("sessions", where: "revoked_reason = 'refresh_reuse'") == 1)
    }

    @Test func unknownAndExpiredRefreshTokens() async throws {
        let harness = try await harness { $0.sessions.refreshTokenLifetime = 600 }
        await #expect(throws: LoginError(.invalidRefreshToken, "")) {
            try await harness.handle(makeRequest(.refresh) { $0.refreshToken = "rt_nope" })
        }
        let first = try await signIn(harness)
        clock.advance(by: 601)
        await #expect(throws: LoginError(.invalidRefreshToken, "")) {
            try await harness.handle(makeRequest(.refresh) { $0.refreshToken = first.refreshToken })
        }
    }

    @Test func theAbsoluteSessionLifetimeBoundsEverything() async throws {
        let harness = try await harness { $0.sessions.sessionLifetime = 1000 }
        var session = try await signIn(harness)
        #expect(session.refreshExpiresAt == "2026-11-29T12:16:40Z")
        clock.advance(by: 900)
        session = try await rotated(harness, session.refreshToken)
        #expect(session.expiresAt == "2026-11-29T12:16:40Z", "no token outlives its session")
        clock.advance(by: 101)
        await #expect(throws: LoginError(.invalidRefreshToken, "")) {
            try await harness.handle(makeRequest(.refresh) { $0.refreshToken = session.refreshToken })
        }
    }

    /// A rotated refresh token presented after its session's absolute lifetime is an ended
    /// session's token (`invalid_refresh_token`, as the README says), not a theft to act on: no
    /// `refresh_token_reused`, and no revocation written or announced for a session that is over.
    @Test func aUsedTokenOfAnEndedSessionIsRefusedNotTreatedAsReuse() async throws {
        let harness = try await harness { $0.sessions.sessionLifetime = 1000 }
        let first = try await signIn(harness)
        clock.advance(by: 60)
        _ = try await rotated(harness, first.refreshToken)
        clock.advance(by: 941)
        await #expect(throws: LoginError(.invalidRefreshToken, "")) {
            try await harness.handle(makeRequest(.refresh) { $0.refreshToken = first.refreshToken })
        }
        #expect(try await harness.count("sessions", where: "revoked_at IS NOT NULL") == 0)
    }

    /// A week after a session ends the relay's purge forgets its tokens: a refresh token of it is
    /// answered as before (`invalid_refresh_token`, no reuse, nothing revoked), and its opaque
    /// access token is inactive to `introspect`, as before; a logout with that access token, which
    /// was `ok` and ended nothing, is now `invalid_token`; a live session's tokens go on working.
    @Test func theTokensOfASessionEndedAWeekAgoAreAnsweredAsBeforeOnceForgotten() async throws {
        let harness = try await harness {
            $0.accessTokenFormat = .opaque
            $0.sessions.sessionLifetime = 1000
        }
        let ended = try await signIn(harness)
        let used = ended.refreshToken
        let current = try await rotated(harness, used)
        clock.advance(by: 1001)
        func answers() async throws {
            for token in [used, current.refreshToken] {
                await #expect(throws: LoginError(.invalidRefreshToken, "")) {
                    try await harness.handle(makeRequest(.refresh) { $0.refreshToken = token })
                }
            }
            let introspection = try #require(
                try await harness.handle(makeRequest(.introspect) { $0.accessToken = current.accessToken }))
            #expect(introspection.result.introspection?.active == false)
        }
        try await answers()
        let logout = { makeRequest(.logout) { $0.accessToken = current.accessToken } }
        #expect(try await harness.handle(logout())?.result.status == "ok", "an expired session's logout ends nothing")

        clock.advance(by: 8 * 86_400)
        let live = try await signIn(harness)
        let purge = try await harness.store.purgeExpired(
            at: clock.now(), throttleWindow: 3600, rateLimitWindow: 3600, windows: false)
        #expect(purge.endedSessions == 1)
        #expect(try await harness.count("refresh_tokens") == 1, "the live session's only")
        #expect(try await harness.count("access_tokens") == 1)
        #expect(try await harness.count("sessions") == 2, "the ended session stays")
        try await answers()
        #expect(try await harness.count("sessions", where: "revoked_reason = 'refresh_reuse'") == 0)
        await #expect(throws: LoginError(.invalidToken, ""), "the one answer that changes: the token is unknown") {
            try await harness.handle(logout())
        }
        _ = try await rotated(harness, live.refreshToken)
    }

    @Test(arguments: [WorkerConfiguration.AccessTokenFormat.jwt, .opaque])
    func logoutEndsTheSession(format: WorkerConfiguration.AccessTokenFormat) async throws {
        let harness = try await harness { $0.accessTokenFormat = format }
        let guest = try #require(try await harness.handle(makeRequest(.guest)))
        let first = try #require(guest.result.session)
        // The session's current tokens, after a rotation.
        let other = try await rotated(harness, first.refreshToken)
        let outcome = try #require(
            try await harness.handle(
                makeRequest(.logout) {
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
            try await harness.handle(makeRequest(.refresh) { $0.refreshToken = other.refreshToken })
        }
        await #expect(throws: LoginError(.invalidToken, "")) {
            try await harness.handle(makeRequest(.logout) { $0.accessToken = "garbage" })
        }
    }

    @Test func aSecondLogoutInTheSameBatchSeesTheFirst() async throws {
        // The first logout revokes the session its opaque access token carries; the second, with
        // the same token in the same batch, must read the token again and find it ended, as it
        // does in a batch of its own.
        let harness = try await harness { $0.accessTokenFormat = .opaque }
        let session = try await signIn(harness)
        let logout = { makeRequest(.logout) { $0.accessToken = session.accessToken } }
        let answers = try await harness.handleBatch([logout(), logout()])
        #expect(try answers[0].get().result.status == "ok")
        #expect(throws: LoginError(.invalidToken, "")) { try answers[1].get() }
        await #expect(throws: LoginError(.invalidToken, "")) { try await harness.handle(logout()) }
        #expect(try await harness.count("sessions", where: "revoked_at IS NOT NULL") == 1)
    }

    @Test func opaqueAccessTokensExpireAndRecordTheirUse() async throws {
        let harness = try await harness(passwords: try PasswordService(parameters: fastArgon2, threads: 1)) {
            $0.accessTokenFormat = .opaque
        }
        let guest = try await signIn(harness)
        #expect(guest.accessToken.wholeMatch(of: /[0-9a-f-]{36}\|[A-Za-z0-9]{40}/) != nil)
        clock.advance(by: 60)
        _ = try await harness.handle(makeRequest(.logout) { $0.accessToken = guest.accessToken })
        let used = try await harness.query("SELECT last_used_at FROM access_tokens").first?.decode(
            "last_used_at", as: Date?.self)
        #expect(used == clock.now(), "presenting the token is a use")
        let other = try await signIn(harness)
        clock.advance(by: 901)
        // Past its 15 minutes the token no longer proves the guest's account for linking.
        await #expect(throws: LoginError(.invalidToken, "")) {
            try await harness.handle(
                makeRequest(.register) {
                    $0.email = "late@example.com"
                    $0.password = "correct horse"
                    $0.linkTo = other.accessToken
                })
        }
    }

    @Test func logoutAllEndsEverySessionOfTheUser() async throws {
        let harness = try await harness(passwords: try PasswordService(parameters: fastArgon2, threads: 1))
        _ = try await harness.handle(
            makeRequest(.register) {
                $0.email = "all@example.com"
                $0.password = "correct horse"
            })
        var sessions: [SessionPayload] = []
        for _ in 0..<3 {
            sessions.append(
                try #require(
                    try await harness.handle(
                        makeRequest(.password) {
                            $0.email = "all@example.com"
                            $0.password = "correct horse"
                        })?.result.session))
        }
        let outcome = try #require(
            try await harness.handle(
                makeRequest(.logout) {
                    $0.accessToken = sessions[0].accessToken
                    $0.scope = "all"
                }))
        #expect(outcome.events.count == 4, "the registration's session and three logins")
        #expect(outcome.events.allSatisfy { String(decoding: $0.payload, as: UTF8.self).contains("logout_all") })
        for session in sessions {
            await #expect(throws: LoginError(.invalidRefreshToken, "")) {
                try await harness.handle(makeRequest(.refresh) { $0.refreshToken = session.refreshToken })
            }
        }
    }

    @Test func replyKeysSealTheSessionAndBadOnesAreRefusedFirst() async throws {
        let harness = try await harness()
        let recipient = try X25519.generateKeyPair()
        let outcome = try #require(
            try await harness.handle(makeRequest(.guest) { $0.replyKey = Base64URL.encode(recipient.publicKey) }))
        #expect(outcome.result.session == nil)
        let jwe = try #require(outcome.result.sealedSession)
        #expect(jwe.split(separator: ".", omittingEmptySubsequences: false).count == 5)
        // The session opens with the reply key's private half, and its tokens are not in the clear.
        // (Not "no `rt_` in it": base64url ciphertext spells that by chance in about 1 run of 250.)
        let sealed = try MessageCoding.decode(
            SessionPayload.self, from: try JWE.openECDHES(jwe, privateKey: recipient.privateKey).plaintext)
        let refreshToken = try #require(sealed.refreshToken)
        #expect(refreshToken.hasPrefix("rt_"))
        #expect(!jwe.contains(refreshToken))
        #expect(!jwe.contains(sealed.accessToken))

        await #expect(throws: LoginError(.malformedRequest, "")) {
            try await harness.handle(makeRequest(.guest) { $0.replyKey = "not-a-key" })
        }
        let strict = try await self.harness { $0.sessions.requireReplyKey = true }
        await #expect(throws: LoginError(.malformedRequest, "")) { try await strict.handle(makeRequest(.guest)) }
        #expect(try await harness.count("users") == 1, "refused before anything was written")
        #expect(try await strict.count("users") == 0)
    }

    @Test(.requiresIndependentJOSE) func theGatewayOpensTheSealedSessionWithItsPrivateKey() async throws {
        let harness = try await harness()
        let recipient = try X25519.generateKeyPair()
        let outcome = try #require(
            try await harness.handle(makeRequest(.guest) { $0.replyKey = Base64URL.encode(recipient.publicKey) }))
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
        #expect(try await IndependentJOSE.run(script, input: input) == "Bearer guest rt_")
    }
}
