import AuthCrypto
import Foundation
import Messages
import PGStore
import Passwords
import ServiceKit
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// The account rules against the real PostgreSQL: uniqueness under concurrency, throttling shared
/// by replicas, legacy hashes replaced, upgrades and conflicts.
@Suite(.requiresDatabase, .timeLimit(.minutes(3))) struct AccountIntegrationTests {
    let clock = ManualClock(Date())
    let passwords: PasswordService

    init() throws {
        passwords = try PasswordService(parameters: fastArgon2, threads: 2)
    }

    /// One "replica": its own flows and pool of connections to the shared database.
    func replica(_ databaseURL: String) async throws -> (FlowHarness, Void) {
        let harness = try await FlowHarness(clock: clock, passwords: passwords, databaseURL: databaseURL) { config in
            config.accounts.throttle.threshold = 4
            config.accounts.throttle.baseDelay = 60
        }
        return (harness, ())
    }

    func request(_ method: LoginMethod, email: String, password: String, linkTo: String? = nil) -> LoginRequest {
        var data = LoginRequestData(method: method.rawValue)
        data.email = email
        data.password = password
        data.linkTo = linkTo
        return LoginRequest(
            id: UUID().uuidString, source: "/test", time: nil, traceparent: nil, method: method, data: data)
    }

    @Test func theSameEmailRegisteredConcurrentlyHasExactlyOneWinner() async throws {
        let databaseURL = try await IntegrationEnvironment.makeMigratedDatabase()
        let (first, _) = try await replica(databaseURL)
        let (second, _) = try await replica(databaseURL)
        for round in 0..<5 {
            let email = "race\(round)@example.com"
            let outcomes = await withTaskGroup(of: Result<FlowHarness.Outcome?, any Error>.self) { group in
                for service in [first, second, first, second] {
                    group.addTask {
                        do {
                            return .success(
                                try await service.handle(request(.register, email: email, password: "correct horse")))
                        } catch {
                            return .failure(error)
                        }
                    }
                }
                var all: [Result<FlowHarness.Outcome?, any Error>] = []
                for await outcome in group { all.append(outcome) }
                return all
            }
            let wins = outcomes.filter { if case .success(.some) = $0 { true } else { false } }.count
            let taken = outcomes.filter {
                if case .failure(let error as LoginError) = $0 { error.code == .emailTaken } else { false }
            }.count
            #expect(wins == 1 && taken == 3, "round \(round): \(outcomes)")
        }
        let users = try PGConnection(conninfo: databaseURL).query("SELECT count(*) AS n FROM users").first?.decode(
            "n", as: Int.self)
        #expect(users == 5)
    }

    @Test func throttlingHoldsAcrossReplicas() async throws {
        let databaseURL = try await IntegrationEnvironment.makeMigratedDatabase()
        let (first, _) = try await replica(databaseURL)
        let (second, _) = try await replica(databaseURL)
        _ = try await first.handle(request(.register, email: "t@example.com", password: "correct horse"))
        for service in [first, second, first, second] {
            await #expect(throws: LoginError(.invalidCredentials, "")) {
                try await service.handle(request(.password, email: "t@example.com", password: "wrong horse"))
            }
        }
        for service in [first, second] {
            await #expect(throws: LoginError(.tooManyAttempts, "")) {
                try await service.handle(request(.password, email: "t@example.com", password: "correct horse"))
            }
        }
        clock.advance(by: 61)
        _ = try #require(try await second.handle(request(.password, email: "t@example.com", password: "correct horse")))
        let rows = try PGConnection(conninfo: databaseURL).query("SELECT count(*) AS n FROM login_throttle").first?
            .decode("n", as: Int.self)
        #expect(rows == 0, "success resets the count")
    }

    @Test(.requiresSharedTestData) func legacyHashesVerifyAndAreReplaced() async throws {
        let databaseURL = try await IntegrationEnvironment.makeMigratedDatabase()
        let connection = try PGConnection(conninfo: databaseURL)
        let vectors = try #require(try SharedTestData.json("passwords/bcrypt_vectors.json") as? [[String: Any]])
        let laravel = try #require(
            vectors.first { ($0["group"] as? String) == "laravel" && ($0["password_utf8"] as? String) == "password" })
        let legacy = try #require(laravel["hash"] as? String)
        let userID = UUID()
        let now = Date()
        try connection.query(
            """
            INSERT INTO users (id, handle, email, is_guest, created_at, updated_at)
            VALUES (\(userID), 'legacy_user', 'legacy@example.com', false, \(now), \(now))
            """)
        try connection.query(
            """
            INSERT INTO identities (provider, subject, user_id, email, password_hash, created_at, last_login_at)
            VALUES ('password', 'legacy@example.com', \(userID), 'legacy@example.com', \(legacy), \(now), \(now))
            """)
        let (service, _) = try await replica(databaseURL)
        let outcome = try #require(
            try await service.handle(request(.password, email: "legacy@example.com", password: "password")))
        #expect(outcome.result.user?.id == userID.lowercasedString)
        let stored = try #require(
            try connection.query("SELECT password_hash FROM identities WHERE subject = 'legacy@example.com'").first?
                .decode(
                    "password_hash", as: String.self))
        #expect(stored.hasPrefix("$argon2id$"), "the bcrypt hash was replaced")
        _ = try #require(
            try await service.handle(request(.password, email: "legacy@example.com", password: "password")))
    }

    @Test func upgradesKeepTheGuestAndConflictsChangeNothing() async throws {
        let databaseURL = try await IntegrationEnvironment.makeMigratedDatabase()
        let (service, _) = try await replica(databaseURL)
        let guestRequest = LoginRequest(
            id: UUID().uuidString, source: "/test", time: nil, traceparent: nil, method: .guest,
            data: .init(method: "guest"))
        let guest = try #require(try await service.handle(guestRequest))
        let guestToken = try #require(guest.result.session?.accessToken)
        let upgraded = try #require(
            try await service.handle(
                request(.register, email: "up@example.com", password: "correct horse", linkTo: guestToken)))
        #expect(upgraded.result.user?.id == guest.result.user?.id)
        #expect(upgraded.result.user?.isGuest == false)

        // A second guest tries to take the registered e-mail: email_taken, and it stays a guest.
        let other = try #require(try await service.handle(guestRequest.with(id: UUID().uuidString)))
        await #expect(throws: LoginError(.emailTaken, "")) {
            try await service.handle(
                request(
                    .register, email: "up@example.com", password: "correct horse",
                    linkTo: try #require(other.result.session?.accessToken)))
        }
        let connection = try PGConnection(conninfo: databaseURL)
        let rows = try connection.query(
            "SELECT id, is_guest, upgraded_at IS NOT NULL AS upgraded FROM users ORDER BY created_at")
        let states = try rows.map {
            (try $0.decode("id", as: UUID.self).lowercasedString, try $0.decode("is_guest", as: Bool.self))
        }
        #expect(states.count == 2)
        #expect(states.contains { $0.0 == guest.result.user?.id && !$0.1 })
        #expect(states.contains { $0.0 == other.result.user?.id && $0.1 })
        let lastUsed = try connection.query(
            "SELECT count(*) AS n FROM access_tokens WHERE last_used_at IS NOT NULL"
        ).first?.decode("n", as: Int.self)
        // The upgrade records its token's use; the refused registration leaves nothing behind, not even that.
        #expect(lastUsed == 1, "presenting a token as link_to records its use")
        let types = try connection.query(
            "SELECT convert_from(payload, 'UTF8')::json->>'type' AS type FROM outbox ORDER BY seq"
        ).map { try $0.decode("type", as: String.self) }
        #expect(types == ["auth.user.created", "auth.user.upgraded", "auth.user.created"])
    }
}

extension LoginRequest {
    func with(id: String) -> LoginRequest {
        var copy = self
        copy.id = id
        return copy
    }
}
