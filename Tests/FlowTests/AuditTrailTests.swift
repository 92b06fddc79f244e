import AuthCrypto
import Foundation
import JOSE
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

/// The audit trail: every security-relevant outcome recorded in the transaction of its effect,
/// refusals too (in the same batch, no round trip of their own), and never a secret.
@Suite(.requiresDatabase, .requiresIndependentJOSE) struct AuditTrailTests {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
    let passwords: PasswordService

    init() throws {
        passwords = try PasswordService(parameters: fastArgon2, threads: 2)
    }

    func service() async throws -> FlowHarness {
        let resultsKey = try SecureRandom.bytes(32)
        return try await FlowHarness(clock: clock, passwords: passwords) { config in
            config.resultsKey = resultsKey
            config.mfa.issuer = "Example App"
        }
    }

    /// What a gateway adds to every request: the client's install, device and network address.
    func request(_ method: LoginMethod, _ fill: (inout LoginRequestData) -> Void) -> LoginRequest {
        makeRequest(method) {
            $0.clientID = "install-7"
            $0.device = .init(name: "Pixel 9", platform: "android")
            $0.context = .init(ip: "203.0.113.7", userAgent: "ExampleApp/3.1 (Android 15)")
            fill(&$0)
        }
    }

    func send(_ harness: FlowHarness, _ method: LoginMethod, _ fill: (inout LoginRequestData) -> Void) async throws
        -> LoginResultData?
    {
        do {
            return try await harness.handle(request(method, fill))?.result
        } catch is LoginError {
            return nil
        }
    }

    func appCode(uri: String, at date: Date) async throws -> String {
        try await Subprocess.run([
            "python3", "-c", "import pyotp, sys; print(pyotp.parse_uri(sys.argv[1]).at(int(sys.argv[2])))", uri,
            String(Int64(date.timeIntervalSince1970)),
        ]).output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    struct Row: Equatable {
        var action: String
        var outcome: String
        var user: String?
    }

    func rows(_ harness: FlowHarness) async throws -> [Row] {
        try await harness.query("SELECT action, outcome, user_id::text AS user FROM audit_log ORDER BY id").map {
            Row(
                action: try $0.decode("action"), outcome: try $0.decode("outcome"),
                user: try $0.decode("user", as: String?.self))
        }
    }

    @Test func everySignInAndChangeIsRecordedWithoutASecret() async throws {
        let harness = try await service()
        var secrets: [String] = ["correct horse battery", "a wrong guess here", "another long password"]
        let registered = try #require(
            try await send(harness, .register) {
                $0.email = "ada@example.com"
                $0.password = "correct horse battery"
            })
        let user = try #require(registered.user?.id)
        let session = try #require(registered.session)
        secrets += [session.accessToken, session.refreshToken ?? "-"]
        _ = try await send(harness, .password) {
            $0.email = "ada@example.com"
            $0.password = "a wrong guess here"
        }
        let usersBefore = try await harness.count("users")
        _ = try await send(harness, .password) {
            $0.email = "nobody@example.com"
            $0.password = "a wrong guess here"
        }
        #expect(try await harness.count("users") == usersBefore, "an unknown address creates nothing")
        let enrolled = try #require(try await send(harness, .mfaEnroll) { $0.accessToken = session.accessToken })
        let uri = try #require(enrolled.mfa?.otpauthURI)
        secrets += [try #require(enrolled.mfa?.secret)]
        let code = try await appCode(uri: uri, at: clock.now())
        let verified = try #require(
            try await send(harness, .mfaVerify) {
                $0.accessToken = session.accessToken
                $0.code = code
            })
        secrets += try #require(verified.mfa?.recoveryCodes)
        clock.advance(by: 30)
        let stopped = try #require(
            try await send(harness, .password) {
                $0.email = "ada@example.com"
                $0.password = "correct horse battery"
            })
        let ticket = try #require(stopped.error?.mfaToken)
        secrets.append(ticket)
        _ = try await send(harness, .mfaChallenge) {
            $0.mfaToken = ticket
            $0.code = "000000" == code ? "111111" : "000000"
        }
        _ = try await send(harness, .changePassword) {
            $0.accessToken = session.accessToken
            $0.password = "correct horse battery"
            $0.newPassword = "another long password"
        }
        _ = try await send(harness, .refresh) { $0.refreshToken = session.refreshToken }
        _ = try await send(harness, .logout) { $0.accessToken = session.accessToken }

        #expect(
            try await rows(harness) == [
                Row(action: "register", outcome: "ok", user: user),
                Row(action: "password", outcome: "invalid_credentials", user: user),
                Row(action: "password", outcome: "invalid_credentials", user: nil),
                Row(action: "mfa_enroll", outcome: "ok", user: user),
                Row(action: "mfa_verify", outcome: "ok", user: user),
                Row(action: "password", outcome: "mfa_required", user: user),
                Row(action: "mfa_challenge", outcome: "invalid_code", user: user),
                Row(action: "change_password", outcome: "ok", user: user),
                Row(action: "logout", outcome: "ok", user: user),
            ], "refresh is routine and not recorded")
        let context = try #require(
            try await harness.query(
                "SELECT client_id, device_name, device_platform, ip, user_agent, actor FROM audit_log LIMIT 1"
            ).first)
        #expect(try context.decode("client_id", as: String.self) == "install-7")
        #expect(try context.decode("device_name", as: String.self) == "Pixel 9")
        #expect(try context.decode("ip", as: String.self) == "203.0.113.7")
        #expect(try context.decode("user_agent", as: String.self) == "ExampleApp/3.1 (Android 15)")
        #expect(try context.decode("actor", as: String.self) == "user")

        // No secret the requests carried or the answers gave appears in any row.
        let dump = try #require(
            try await harness.query("SELECT string_agg(a::text, ' ') AS text FROM audit_log a").first?.decode(
                "text", as: String.self))
        for secret in secrets where !secret.isEmpty {
            #expect(!dump.contains(secret), "the audit trail holds a secret")
        }
        #expect(!dump.contains("$argon2"))
    }

    /// The rest of the cases: a reset, a factor removed, a session ended by its user, an export,
    /// and the account deleted by its owner, which outlives the account.
    @Test func resetsFactorsSessionsExportsAndDeletionsAreRecordedToo() async throws {
        let mail = try X25519.generateKeyPair()
        let resultsKey = try SecureRandom.bytes(32)
        let harness = try await FlowHarness(clock: clock, passwords: passwords) { config in
            config.resultsKey = resultsKey
            config.emailCodes.mailKey = mail.publicKey
        }
        let registered = try #require(
            try await send(harness, .register) {
                $0.email = "bo@example.com"
                $0.password = "correct horse battery"
            })
        let user = try #require(registered.user?.id)
        let session = try #require(registered.session)
        let enrolled = try #require(try await send(harness, .mfaEnroll) { $0.accessToken = session.accessToken })
        let uri = try #require(enrolled.mfa?.otpauthURI)
        let code = try await appCode(uri: uri, at: clock.now())
        let recovery = try #require(
            try await send(harness, .mfaVerify) {
                $0.accessToken = session.accessToken
                $0.code = code
            }?.mfa?.recoveryCodes)
        _ = try await send(harness, .mfaRemove) {
            $0.accessToken = session.accessToken
            $0.recoveryCode = recovery[0]
        }
        let second = try #require(
            try await send(harness, .password) {
                $0.email = "bo@example.com"
                $0.password = "correct horse battery"
            }?.session)
        let listed = try #require(
            try await send(harness, .sessionsList) { $0.accessToken = session.accessToken }?.sessions)
        _ = try await send(harness, .sessionRevoke) {
            $0.accessToken = session.accessToken
            $0.sessionID = listed.first { !$0.current }?.id
        }
        _ = try await send(harness, .accountExport) {
            $0.accessToken = session.accessToken
            $0.replyKey = Base64URL.encode(mail.publicKey)
        }
        _ = try await send(harness, .accountDelete) { $0.accessToken = session.accessToken }
        #expect(second.accessToken != session.accessToken)
        #expect(try await harness.count("users") == 0)
        let trail = try await rows(harness).filter { $0.user == user }.map { "\($0.action):\($0.outcome)" }
        #expect(
            trail == [
                "register:ok", "mfa_enroll:ok", "mfa_verify:ok", "mfa_remove:ok", "password:ok", "session_revoke:ok",
                "account_export:ok", "account_delete:ok",
            ], "sessions_list is routine and not recorded")
    }

    @Test func anOperatorsDeletionOutlivesTheAccount() async throws {
        let harness = try await service()
        let guest = try #require(try await send(harness, .guest) { _ in })
        let text = try #require(guest.user?.id)
        let id = try #require(UUID(uuidString: text))
        let deleted = try await AccountDeletion.deleteUser(
            id, reason: "operator", store: harness.store, configuration: harness.configuration, clock: clock)
        #expect(deleted != nil)
        #expect(try await harness.count("users") == 0)
        let trail = try await harness.store.auditTrail(userID: id, since: nil, tenant: "default")
        #expect(trail.map(\.action) == ["guest", "user_deleted"])
        #expect(trail.last?.actor == "operator" && trail.last?.outcome == "operator")
    }

    @Test func rowsPastTheRetentionArePurged() async throws {
        let harness = try await service()
        _ = try await send(harness, .guest) { _ in }
        let now = clock.now()
        let kept = try await harness.store.purgeExpired(
            at: now + 86_400, throttleWindow: 86_400, rateLimitWindow: 3600, auditRetention: 2 * 86_400)
        #expect(kept.auditRows == 0)
        let purged = try await harness.store.purgeExpired(
            at: now + 3 * 86_400, throttleWindow: 86_400, rateLimitWindow: 3600, auditRetention: 2 * 86_400)
        #expect(purged.auditRows == 1)
        #expect(try await harness.count("audit_log") == 0)
    }
}
