import AuthCrypto
import Foundation
import Messages
import PGStore
import ServiceKit
import Synchronization
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

@Suite(.requiresDatabase) struct GuestFlowTests {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
    let logs = InMemoryLogHandler()

    func harness(format: WorkerConfiguration.AccessTokenFormat = .opaque, keyPath: String? = nil) async throws
        -> FlowHarness
    {
        try await FlowHarness(clock: clock, logger: Logger(label: "test", level: .debug, handler: logs)) {
            $0.accessTokenFormat = format
            if let keyPath { $0.signingKeyPaths = [keyPath] }
        }
    }

    func request(_ method: LoginMethod, id: String = UUID().uuidString) -> LoginRequest {
        makeRequest(method, id: id) { $0.device = .init(name: "iPhone 15", platform: "ios") }
    }

    @Test func guestLoginCreatesAGuestAndASessionWithRestrictedAbilities() async throws {
        let harness = try await harness()
        let outcome = try #require(try await harness.handle(request(.guest)))
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
        let access = try #require(try await harness.query("SELECT token_hash, name FROM access_tokens").first)
        #expect(try access.decode("token_hash", as: PGBytes.self).bytes == SHA256.hash(session.accessToken))
        #expect(try access.decode("name") == "iPhone 15")
        let refresh = try #require(try await harness.query("SELECT token_hash FROM refresh_tokens").first)
        #expect(try refresh.decode("token_hash", as: PGBytes.self).bytes == SHA256.hash(session.refreshToken ?? ""))
        let device = try await harness.query("SELECT device_name FROM sessions").first?.decode(
            "device_name", as: String.self)
        #expect(device == "iPhone 15")
        #expect(!logs.lines.joined().contains(parts[1]), "tokens never reach the log")
    }

    @Test func guestLoginEmitsUserCreatedKeyedByTheUser() async throws {
        let harness = try await harness()
        let outcome = try #require(try await harness.handle(request(.guest)))
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
        let outbox = try await harness.query("SELECT event_id FROM outbox WHERE published_at IS NULL")
        #expect(try outbox.map { try $0.decode("event_id", as: UUID.self) } == [event.id])
    }

    @Test func aRecordedRequestCreatesNothingMore() async throws {
        let harness = try await harness()
        _ = try await harness.handle(request(.guest, id: "same"))
        let replay = try await harness.handle(request(.guest, id: "same"))
        #expect(replay == nil)
        #expect(try await harness.count("users") == 1)
        #expect(try await harness.count("sessions") == 1)
    }

    @Test(arguments: [LoginMethod.apple, .google, .password, .register])
    func methodsNotEnabledAreRefused(method: LoginMethod) async throws {
        // Apple and Google without audiences are disabled; without a password service, passwords are.
        let harness = try await harness()
        await #expect(throws: LoginError(.unsupportedMethod, "")) { try await harness.handle(request(method)) }
        #expect(try await harness.count("users") == 0)
    }

    @Test func anOIDCProviderThatIsNotConfiguredIsUnknown() async throws {
        var oidc = request(.oidc)
        oidc.data.provider = "myspace"
        let harness = try await harness()
        await #expect(throws: LoginError(.unknownProvider, "")) { try await harness.handle(oidc) }
    }

    @Test func jwtAccessTokensCarryTheSessionClaims() async throws {
        let (path, key) = try TestKeys.temporaryKeyFile()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let harness = try await harness(format: .jwt, keyPath: path)
        let outcome = try #require(try await harness.handle(request(.guest)))
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
        let session = try await harness.query("SELECT id FROM sessions").first?.decode("id", as: UUID.self)
        #expect(claims?["sid"] as? String == session?.lowercasedString)
        #expect(try #require(Base64URL.decode(parts[2])).count == 64)
    }

    /// A light-load write that carries its own lookup (`PostgresStore.lookUpAndWrite`): written
    /// when the ids are new and the guests within the ceiling, with the ceiling counted; rolled
    /// back whole, the ceiling's count with it, when the lookup finds a kept answer or too few
    /// sign-ups left.
    @Test func aWriteCarryingItsLookupCommitsOnlyWhatTheLookupAllows() async throws {
        let harness = try await harness()
        let store = harness.store
        let limit = WorkerConfiguration.RateLimit(count: 2, window: 60)
        let now = clock.now()
        func attempt(_ requests: [LoginRequest]) async throws -> (PostgresStore.LookedUpWrite, RateLimitGrant?) {
            var items: [WriteItem] = []
            var prefetch = Prefetch()
            for request in requests {
                let prepared = try await harness.flows.prepare(request)
                prefetch.merge(prepared.prefetch)
                items.append(
                    .login(
                        PreparedRequest(
                            request: request, digest: SHA256.hash(request.id), replyKey: nil, prepared: prepared)))
            }
            let seen = Mutex<RateLimitGrant?>(nil)
            let ids = requests.map(\.key)
            let done = try await store.lookUpAndWrite(
                items, ids: ids, guests: ids, bucket: "guest-all", limit: limit, prefetch: prefetch, writer: 0,
                resultsKey: nil, rememberedUntil: now + 3600, at: now
            ) { kept, grant in
                seen.withLock { $0 = grant }
                return kept.isEmpty && (grant?.granted ?? ids.count) >= ids.count
            }
            return (done, seen.withLock { $0 })
        }
        func ceilingCount() async throws -> Int? {
            try await harness.query("SELECT count FROM rate_limits WHERE bucket = 'guest-all'").first?.decode(
                "count", as: Int.self)
        }

        let first = request(.guest)
        let (written, grant) = try await attempt([first])
        guard case .written(let outcomes) = written, case .written(.login(let result, _), let events)? = outcomes.first
        else {
            Issue.record("a new guest within the ceiling is written: \(written)")
            return
        }
        #expect(result.status == "ok" && events.count == 1)
        #expect(grant == RateLimitGrant(granted: 1, windowEnd: now + 60))
        #expect(try await harness.count("users") == 1)
        #expect(try await harness.count("processed_requests", where: "request_id = '\(first.id)'") == 1)
        #expect(try await ceilingCount() == 1)

        // The same id again: the kept answer declines the write; nothing is added or counted.
        let (replayed, _) = try await attempt([first])
        guard case .declined = replayed else {
            Issue.record("a kept answer declines the write: \(replayed)")
            return
        }
        #expect(try await harness.count("users") == 1)
        #expect(try await ceilingCount() == 1, "the ceiling's count is rolled back with the write")

        // Two new guests with one sign-up left: declined, the reservation rolled back.
        let (over, overGrant) = try await attempt([request(.guest), request(.guest)])
        guard case .declined = over else {
            Issue.record("guests over the ceiling decline the write: \(over)")
            return
        }
        #expect(overGrant?.granted == 1)
        #expect(try await harness.count("users") == 1)
        #expect(try await ceilingCount() == 1)

        // One of them alone fits.
        let (last, _) = try await attempt([request(.guest)])
        guard case .written = last else {
            Issue.record("the last sign-up within the ceiling is written: \(last)")
            return
        }
        #expect(try await harness.count("users") == 2)
        #expect(try await ceilingCount() == 2)
    }
}
