import AuthCrypto
import Foundation
import JOSE
import JOSEFixtures
import Messages
import PGStore
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// Refresh, logout, sealed results and Apple notifications through the broker and PostgreSQL.
@Suite(.requiresServices, .serialized, .timeLimit(.minutes(3))) struct SessionIntegrationTests {
    @Test func refreshLogoutAndSealedResultsThroughTheWorker() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        var config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        config.sessions.refreshReuseGrace = 1
        let worker = try await RunningWorker(config)
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        let events = try TopicReader(topic: topics.events)
        func send(_ data: LoginRequestData) async throws -> LoginResultData {
            try #require(try await gateway.login(data))
        }

        let guest = try await send(LoginRequestData(method: "guest"))
        let first = try #require(guest.session)
        var refresh = LoginRequestData(method: "refresh")
        refresh.refreshToken = first.refreshToken
        let rotated = try #require(try await send(refresh).session)
        #expect(rotated.refreshToken != first.refreshToken)
        try await Task.sleep(for: .seconds(1.5))
        let reused = try await send(refresh)
        #expect(reused.error?.code == .refreshTokenReused)
        refresh.refreshToken = rotated.refreshToken
        #expect(try await send(refresh).error?.code == .invalidRefreshToken, "the family ended")

        // A second session, logged out; and a sealed result.
        let recipient = try X25519.generateKeyPair()
        var sealed = LoginRequestData(method: "guest")
        sealed.replyKey = Base64URL.encode(recipient.publicKey)
        let sealedResult = try await send(sealed)
        #expect(sealedResult.session == nil)
        let jwe = try #require(sealedResult.sealedSession)
        #expect(jwe.split(separator: ".", omittingEmptySubsequences: false).count == 5)

        var logout = LoginRequestData(method: "logout")
        logout.accessToken = try #require(try await send(LoginRequestData(method: "guest")).session?.accessToken)
        let loggedOut = try await send(logout)
        #expect(loggedOut.status == "ok")

        let seen = try await events.waitUntil { messages in
            messages.filter { $0.json["type"] as? String == "auth.session.revoked" }.count >= 2
        }
        let reasons = Set(
            seen.compactMap {
                $0.json["type"] as? String == "auth.session.revoked" ? $0.data["reason"] as? String : nil
            })
        #expect(reasons == ["refresh_reuse", "logout"])
        let connection = try PGConnection(conninfo: databaseURL)
        let stored = try connection.query(
            "SELECT encode(successor_sealed, 'hex') AS s FROM refresh_tokens WHERE successor_sealed IS NOT NULL")
        #expect(stored.count == 1)
        let dump =
            try connection.query("SELECT string_agg(row_to_json(r)::text, ' ') AS all FROM refresh_tokens r").first?
            .decode("all", as: String.self) ?? ""
        #expect(!dump.contains(rotated.refreshToken ?? "-"), "no refresh token in plain text")

        await events.close()
        gateway.close()
        try await worker.stop()
    }

    @Test func appleNotificationsActOncePerEvent() async throws {
        let server = try KeyServer()
        defer { server.stop() }
        server.serve("/apple/keys", .init(body: TestSigner.keySet([Signers.rsa2048])))
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        var config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        config.appleAudiences = ["com.example.app"]
        config.appleKeysURL = server.url("/apple/keys").absoluteString
        let worker = try await RunningWorker(config)
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        let events = try TopicReader(topic: topics.events)
        let now = Int(Date().timeIntervalSince1970)

        func signIn(_ subject: String) async throws -> LoginResultData {
            var apple = LoginRequestData(method: "apple")
            apple.identityToken = Signers.rsa2048.token(
                [
                    "iss": "https://appleid.apple.com", "aud": "com.example.app", "sub": subject, "iat": now - 5,
                    "exp": now + 600,
                    "email": "\(subject)@privaterelay.appleid.com", "email_verified": "true",
                ], algorithm: .rs256)
            let id = UUID().uuidString.lowercased()
            try await gateway.publish(requestID: id, data: apple)
            let bytes = try #require(try await gateway.awaitResult(requestID: id, timeout: .seconds(30)))
            return try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: bytes).data
        }
        func notify(_ type: String, _ subject: String) async throws {
            let events = #"{"type":"\#(type)","sub":"\#(subject)","event_time":\#(now)000}"#
            let token = Signers.rsa2048.token(
                [
                    "iss": "https://appleid.apple.com", "aud": "com.example.app", "iat": now - 1, "exp": now + 600,
                    "events": events,
                ],
                algorithm: .rs256)
            let envelope = CloudEvent(
                id: UUID().uuidString, source: "/gateway/apple", type: "auth.provider.notification", time: Date(),
                data: ProviderNotificationData(payload: token))
            try await gateway.publishRaw(
                topic: topics.notifications, key: nil, value: MessageCoding.encode(envelope))
        }

        let consenting = try await signIn("sub-consent")
        let deleting = try await signIn("sub-delete")
        let relay = try await signIn("sub-relay")
        try await notify("consent-revoked", "sub-consent")
        try await notify("account-delete", "sub-delete")
        try await notify("account-delete", "sub-delete")  // Apple retries: acts once.
        try await notify("email-disabled", "sub-relay")
        // A forged notification (signed by a key Apple never published) changes nothing.
        let forged = Signers.rsa3072.token(
            [
                "iss": "https://appleid.apple.com", "aud": "com.example.app", "iat": now, "exp": now + 600,
                "events": #"{"type":"account-delete","sub":"sub-relay"}"#,
            ], algorithm: .rs256, header: ["kid": "rsa2048"])
        try await gateway.publishRaw(
            topic: topics.notifications, key: nil,
            value: MessageCoding.encode(
                CloudEvent(
                    id: "forged", source: "/x", type: "auth.provider.notification", time: nil,
                    data: ProviderNotificationData(payload: forged)
                )))

        let seen = try await events.waitUntil { messages in
            messages.contains { $0.json["type"] as? String == "auth.user.deleted" }
                && messages.contains { $0.data["reason"] as? String == "consent_revoked" }
        }
        let deleted = seen.filter { $0.json["type"] as? String == "auth.user.deleted" }
        #expect(deleted.map(\.keyString) == [deleting.user?.id ?? ""])
        #expect(deleted.first?.data["reason"] as? String == "apple_account_deleted")
        #expect(
            seen.contains { $0.keyString == consenting.user?.id && $0.data["reason"] as? String == "consent_revoked" })

        let connection = try PGConnection(conninfo: databaseURL)
        let deadline = ContinuousClock.now + .seconds(30)
        var status: String?
        // Looked at once more after the deadline: a sleep can end late in the parallel run.
        while true {
            let looked = ContinuousClock.now
            status = try connection.query("SELECT email_status FROM identities WHERE subject = 'sub-relay'").first?
                .decode("email_status", as: String?.self)
            if status != nil || looked >= deadline { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(status == "disabled")
        #expect(
            try connection.query("SELECT count(*) AS n FROM users WHERE id = \(UUID(uuidString: relay.user?.id ?? ""))")
                .first?.decode("n", as: Int.self) == 1)
        let revoked = try connection.query(
            "SELECT count(*) AS n FROM sessions WHERE user_id = \(UUID(uuidString: consenting.user?.id ?? "")) AND revoked_reason = 'consent_revoked'"
        )
        #expect(try revoked.first?.decode("n", as: Int.self) == 1)
        await events.close()
        gateway.close()
        try await worker.stop()
    }
}
