import AuthCrypto
import Foundation
import JOSE
import JOSEFixtures
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

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Sign in with Apple's code exchange and revocation against a local stand-in for Apple's two
/// endpoints (`scripts/apple-stand-in.py`) that checks every request as Apple documents it: the
/// client secret's signature with the public half of the configured key, its claims, the form.
@Suite(.requiresDatabase, .requiresIndependentJOSE, .serialized) struct AppleRevocationTests {
    static let teamID = "TEAM123456"
    static let keyID = "KEY7654321"
    static let clientID = "com.example.app"

    /// Near the real time (a little behind, as the tests move it on): the stand-in checks the
    /// client secret's times against its own clock, and refuses an `iat` in its future.
    let clock = ManualClock(Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down) - 600))
    let passwords: PasswordService
    let logs = InMemoryLogHandler()

    init() throws {
        passwords = try PasswordService(parameters: fastArgon2, threads: 2)
    }

    /// A running stand-in, stopped when the test ends.
    final class StandIn: Sendable {
        let process: Process
        let url: String

        /// Waits for it to listen without holding a cooperative thread (its Python can take seconds to
        /// start on a busy machine).
        init(publicKeyPEM: String) async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apple-\(UUID())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let publicKey = directory.appendingPathComponent("public.pem")
            try publicKeyPEM.write(to: publicKey, atomically: true, encoding: .utf8)
            let portFile = directory.appendingPathComponent("port").path
            process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = [
                "python3", ProjectPaths.root.appendingPathComponent("scripts/apple-stand-in.py").path, portFile,
                publicKey.path, AppleRevocationTests.teamID, AppleRevocationTests.keyID, AppleRevocationTests.clientID,
            ]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            var port: String?
            for _ in 0..<200 {
                port = try? String(contentsOfFile: portFile, encoding: .utf8)
                if port != nil { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            guard let port else { throw Failure("the Apple stand-in did not start") }
            url = "http://127.0.0.1:\(port)"
        }

        /// SIGKILL: the test process may block SIGTERM, and a child inherits the mask.
        private func control(_ path: String) throws -> URL {
            guard let address = URL(string: url + path) else { throw Failure("not a URL: \(url + path)") }
            return address
        }

        func stop() {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }

        struct State: Decodable {
            var exchanged: [String]
            var revoked: [String]
            var refused: [[String: String]]
            var down: Bool
        }

        func state() async throws -> State {
            let (data, _) = try await URLSession.shared.data(from: try control("/control/state"))
            return try JSONDecoder().decode(State.self, from: data)
        }

        func set(down: Bool) async throws {
            var request = URLRequest(url: try control(down ? "/control/down" : "/control/up"))
            request.httpMethod = "POST"
            request.httpBody = Data("{}".utf8)
            let (_, response) = try await URLSession.shared.data(for: request)
            guard (response as? HTTPURLResponse)?.statusCode == 200 else { throw Failure("control refused") }
        }
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// The worker's side: flows and the job runner on one database, Apple's key `keyPath`.
    func service(_ standIn: StandIn, keyPath: String) async throws -> (FlowHarness, AppleTokenService) {
        let logger = Logger(label: "test", level: .info, handler: logs)
        let keys = KeySetCache(
            fixed: try JWKSet(json: TestSigner.keySet([Signers.rsa2048])), clock: clock, logger: logger)
        let apple = IdentityProvider(
            configuration: .apple(audiences: [Self.clientID], keysURL: URL(fileURLWithPath: "/unused")), keySet: keys,
            clock: clock)
        let resultsKey = try SecureRandom.bytes(32)
        let harness = try await FlowHarness(
            clock: clock, providers: IdentityProviders([apple]), passwords: passwords, logger: logger
        ) { config in
            config.resultsKey = resultsKey
            config.appleTokens.teamID = Self.teamID
            config.appleTokens.keyID = Self.keyID
            config.appleTokens.privateKeyPath = keyPath
            config.appleTokens.tokenURL = standIn.url + "/auth/token"
            config.appleTokens.revokeURL = standIn.url + "/auth/revoke"
        }
        let runner = try #require(
            try AppleTokenService(
                configuration: harness.configuration, store: harness.store, clock: clock, metrics: WorkerMetrics(),
                logger: logger))
        return (harness, runner)
    }

    func appleToken(_ subject: String) -> String {
        let now = Int(clock.now().timeIntervalSince1970)
        return Signers.rsa2048.token(
            [
                "iss": "https://appleid.apple.com", "aud": Self.clientID, "sub": subject, "iat": now - 5,
                "exp": now + 600, "email": "\(subject)@privaterelay.appleid.com", "email_verified": "true",
                "is_private_email": "true",
            ], algorithm: .rs256)
    }

    /// A Sign in with Apple login with the authorization code the app got beside the token.
    func signIn(_ harness: FlowHarness, _ subject: String, code: String) async throws -> LoginResultData {
        try #require(
            try await harness.handle(
                makeRequest(.apple) {
                    $0.identityToken = appleToken(subject)
                    $0.authorizationCode = code
                })
        ).result
    }

    func delete(_ harness: FlowHarness, _ session: SessionPayload?) async throws {
        let deleted = try #require(
            try await harness.handle(makeRequest(.accountDelete) { $0.accessToken = session?.accessToken }))
        #expect(deleted.result.status == "ok")
    }

    func withStandIn(_ body: (StandIn, String) async throws -> Void) async throws {
        let (keyPath, key) = try TestKeys.temporaryKeyFile(.es256)
        defer { try? FileManager.default.removeItem(atPath: keyPath) }
        let standIn = try await StandIn(publicKeyPEM: try key.publicKeyPEM())
        defer { standIn.stop() }
        try await body(standIn, keyPath)
    }

    @Test func theCodeIsExchangedAfterTheLoginAndTheDeletionRevokesTheTokenOnce() async throws {
        try await withStandIn { standIn, keyPath in
            let (harness, runner) = try await service(standIn, keyPath: keyPath)
            let login = try await signIn(harness, "001.ada", code: "good-ada")
            #expect(login.session != nil, "the login never waits for Apple")
            #expect(try await standIn.state().exchanged.isEmpty)
            #expect(try await runner.runOnce() == 1)
            #expect(try await standIn.state().exchanged == ["good-ada"])
            // Kept sealed: the refresh token is nowhere in clear.
            let stored = try await harness.query("SELECT refresh_token_sealed FROM apple_tokens").first
            let sealed = try #require(try stored?.decode("refresh_token_sealed", as: PGBytes.self).bytes)
            #expect(!String(decoding: sealed, as: UTF8.self).contains("rt-good-ada"))
            #expect(
                try await harness.count("apple_jobs", where: Self.holdingASecret) == 0, "the code went with its job")

            try await delete(harness, login.session)
            #expect(try await harness.count("apple_jobs", where: Self.holdingASecret) == 1, "the revocation's token")
            #expect(try await harness.count("apple_tokens") == 0)
            #expect(try await runner.runOnce() == 1)
            #expect(try await standIn.state().revoked == ["rt-good-ada"])
            #expect(try await runner.runOnce() == 0)
            #expect(try await standIn.state().revoked == ["rt-good-ada"], "exactly once")
            #expect(try await harness.count("audit_log", where: "action = 'apple_revoke' AND outcome = 'revoked'") == 1)
            #expect(try await harness.count("apple_jobs", where: Self.holdingASecret) == 0)
        }
    }

    /// A job that is not finished holds its secret (sealed); a finished one holds none.
    static let holdingASecret = "octet_length(secret_sealed) > 0"

    @Test func aRefusedCodeEndsItsJobAndTheLoginStands() async throws {
        try await withStandIn { standIn, keyPath in
            let (harness, runner) = try await service(standIn, keyPath: keyPath)
            let login = try await signIn(harness, "001.bob", code: "expired-or-reused")
            #expect(login.session != nil)
            try await runner.runOnce()
            #expect(try await standIn.state().refused.map { $0["error"] } == ["invalid_grant"])
            #expect(try await harness.count("apple_jobs", where: "outcome = 'refused:invalid_grant'") == 1)
            #expect(try await harness.count("apple_jobs", where: Self.holdingASecret) == 0, "nor kept when refused")
            #expect(try await harness.count("apple_tokens") == 0)
            #expect(try await runner.runOnce() == 0, "a definite refusal is not tried again")
            #expect(try await harness.count("users") == 1)
        }
    }

    @Test func appleDownDelaysTheRevocationUntilItIsBackAndItHappensOnce() async throws {
        try await withStandIn { standIn, keyPath in
            let (harness, runner) = try await service(standIn, keyPath: keyPath)
            let login = try await signIn(harness, "001.cy", code: "good-cy")
            try await runner.runOnce()
            try await standIn.set(down: true)
            try await delete(harness, login.session)
            #expect(try await harness.count("users") == 0, "the deletion never waits for Apple")
            try await runner.runOnce()
            #expect(try await harness.count("apple_jobs", where: "finished_at IS NULL AND attempts = 1") == 1)
            #expect(try await harness.count("apple_jobs", where: Self.holdingASecret) == 1, "kept for the retry")
            #expect(try await runner.runOnce() == 0, "not due before its backoff")
            try await standIn.set(down: false)
            #expect(try await standIn.state().down == false)
            clock.advance(by: 6)
            #expect(try await runner.runOnce() == 1)
            let state = try await standIn.state()
            #expect(state.revoked == ["rt-good-cy"], "\(state.refused)")
            #expect(try await harness.count("apple_jobs", where: Self.holdingASecret) == 0)
            clock.advance(by: 3600)
            #expect(try await runner.runOnce() == 0)
            #expect(try await standIn.state().revoked == ["rt-good-cy"], "exactly once")
        }
    }

    @Test func aCodeExchangedAfterItsAccountWasDeletedIsRevokedAtOnce() async throws {
        try await withStandIn { standIn, keyPath in
            let (harness, runner) = try await service(standIn, keyPath: keyPath)
            let login = try await signIn(harness, "001.dee", code: "good-dee")
            try await delete(harness, login.session)
            #expect(try await runner.runOnce() == 1)
            #expect(try await standIn.state().exchanged == ["good-dee"])
            #expect(try await runner.runOnce() == 1)
            #expect(try await standIn.state().revoked == ["rt-good-dee"])
        }
    }

    /// Apple is slow; meanwhile the account is deleted and the same Apple user signs up again.
    /// The first exchange's token was the deleted account's: revoked, never kept for the new one,
    /// which keeps its own.
    @Test func aCodeExchangedAfterItsAccountWasDeletedAndMadeAgainIsNotKeptForTheNewOne() async throws {
        try await withStandIn { standIn, keyPath in
            let (harness, runner) = try await service(standIn, keyPath: keyPath)
            let first = try await signIn(harness, "001.eve", code: "good-eve-1")
            try await delete(harness, first.session)
            clock.advance(by: 1)
            let again = try await signIn(harness, "001.eve", code: "good-eve-2")
            #expect(again.user?.id != first.user?.id, "a new account")
            #expect(try await runner.runOnce() == 2, "both exchanges")
            #expect(try await runner.runOnce() == 1, "the deleted account's token revoked")
            let state = try await standIn.state()
            #expect(Set(state.exchanged) == ["good-eve-1", "good-eve-2"])
            #expect(state.revoked == ["rt-good-eve-1"], "\(state.revoked)")
            #expect(try await harness.count("apple_jobs", where: "outcome = 'exchanged_after_deletion'") == 1)
            // What is kept is the new account's own token: deleting it revokes that one.
            try await delete(harness, again.session)
            #expect(try await runner.runOnce() == 1)
            #expect(try await standIn.state().revoked == ["rt-good-eve-1", "rt-good-eve-2"])
        }
    }

    @Test func aDeletionWithoutAppleQueuesNothing() async throws {
        try await withStandIn { standIn, keyPath in
            let (harness, runner) = try await service(standIn, keyPath: keyPath)
            let registered = try #require(
                try await harness.handle(
                    makeRequest(.register) {
                        $0.email = "ed@example.com"
                        $0.password = "correct horse battery"
                    }))
            try await delete(harness, registered.result.session)
            #expect(try await harness.count("apple_jobs") == 0)
            #expect(try await runner.runOnce() == 0)
        }
    }

    /// The stand-in is no mock that takes anything: a client secret signed by another key is
    /// refused as Apple would (`invalid_client`), and the job ends there.
    @Test func aClientSecretSignedByAnotherKeyIsRefused() async throws {
        try await withStandIn { standIn, _ in
            let (otherPath, _) = try TestKeys.temporaryKeyFile(.es256)
            defer { try? FileManager.default.removeItem(atPath: otherPath) }
            let (harness, runner) = try await service(standIn, keyPath: otherPath)
            _ = try await signIn(harness, "001.eve", code: "good-eve")
            try await runner.runOnce()
            let state = try await standIn.state()
            #expect(state.exchanged.isEmpty)
            #expect(state.refused.first?["error"] == "invalid_client")
            #expect(try await harness.count("apple_jobs", where: "outcome = 'refused:invalid_client'") == 1)
        }
    }
}
