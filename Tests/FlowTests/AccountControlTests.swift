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

/// What users control of their own account, through the flows and PostgreSQL: their sessions,
/// deleting the account, and a copy of everything stored about them.
@Suite(.requiresDatabase, .requiresIndependentJOSE) struct AccountControlTests {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
    let passwords: PasswordService
    let mail: (privateKey: [UInt8], publicKey: [UInt8])

    init() throws {
        passwords = try PasswordService(parameters: fastArgon2, threads: 2)
        mail = try X25519.generateKeyPair()
    }

    func service() async throws -> FlowHarness {
        let resultsKey = try SecureRandom.bytes(32)
        return try await FlowHarness(clock: clock, passwords: passwords) { [mail] config in
            config.resultsKey = resultsKey
            config.emailCodes.mailKey = mail.publicKey
        }
    }

    func handle(_ harness: FlowHarness, _ method: LoginMethod, _ fill: (inout LoginRequestData) -> Void) async throws
        -> FlowHarness.Outcome
    {
        try #require(try await harness.handle(makeRequest(method, fill)))
    }

    func refusal(_ harness: FlowHarness, _ method: LoginMethod, _ fill: (inout LoginRequestData) -> Void) async throws
        -> ErrorPayload
    {
        do {
            let outcome = try await harness.handle(makeRequest(method, fill))
            if let error = outcome?.result.error { return error }
            Issue.record("expected a refusal, got \(String(describing: outcome?.result.status))")
        } catch let error as LoginError {
            return error.payload
        }
        return LoginError(.internalError, "none").payload
    }

    /// A member signed in on two devices: the registration's session (a phone) and a password
    /// sign-in (a laptop).
    func member(_ harness: FlowHarness, _ email: String = "ada@example.com") async throws -> (
        phone: SessionPayload, laptop: SessionPayload, userID: String
    ) {
        let registered = try await handle(harness, .register) {
            $0.email = email
            $0.password = "correct horse battery"
            $0.device = .init(name: "iPhone 15", platform: "ios")
        }
        let laptop = try await handle(harness, .password) {
            $0.email = email
            $0.password = "correct horse battery"
            $0.device = .init(name: "Firefox on Linux", platform: "web")
        }
        return (
            try #require(registered.result.session), try #require(laptop.result.session),
            try #require(registered.result.user?.id)
        )
    }

    // MARK: - Sessions

    @Test func theSessionsListShowsEachLiveSessionAndWhichIsAsking() async throws {
        let harness = try await service()
        let (phone, laptop, _) = try await member(harness)
        clock.advance(by: 120)
        let refreshed = try await handle(harness, .refresh) { $0.refreshToken = laptop.refreshToken }
        #expect(refreshed.result.session != nil)
        let listed = try await handle(harness, .sessionsList) { $0.accessToken = phone.accessToken }
        let sessions = try #require(listed.result.sessions)
        #expect(sessions.count == 2)
        let current = try #require(sessions.first { $0.current })
        #expect(current.device == .init(name: "iPhone 15", platform: "ios"))
        #expect(current.method == "password")
        #expect(current.lastUsedAt == current.createdAt, "never refreshed")
        let other = try #require(sessions.first { !$0.current })
        #expect(other.device?.name == "Firefox on Linux")
        #expect(other.lastUsedAt == Timestamp.format(clock.now()), "the last refresh")
        #expect(!String(decoding: listed.result.jsonBytes, as: UTF8.self).contains(try #require(laptop.refreshToken)))
    }

    @Test func aUserEndsOneOfTheirSessionsAndNoOneElses() async throws {
        let harness = try await service()
        let (phone, laptop, _) = try await member(harness)
        let (strangerPhone, _, _) = try await member(harness, "eve@example.com")
        let listed = try await handle(harness, .sessionsList) { $0.accessToken = phone.accessToken }
        let laptopID = try #require(listed.result.sessions?.first { !$0.current }?.id)
        let strangers = try #require(
            try await handle(harness, .sessionsList) { $0.accessToken = strangerPhone.accessToken }.result.sessions)

        // Another user's session id answers exactly as an id nobody has.
        let foreign = try await refusal(harness, .sessionRevoke) {
            $0.accessToken = phone.accessToken
            $0.sessionID = strangers[0].id
        }
        let unknown = try await refusal(harness, .sessionRevoke) {
            $0.accessToken = phone.accessToken
            $0.sessionID = UUID().uuidString.lowercased()
        }
        #expect(foreign.code == .unknownSession)
        #expect(foreign == unknown)

        let revoked = try await handle(harness, .sessionRevoke) {
            $0.accessToken = phone.accessToken
            $0.sessionID = laptopID
        }
        #expect(revoked.result.status == "ok")
        let event = try MessageCoding.decode(
            CloudEvent<SessionRevokedData>.self, from: try #require(revoked.events.first).payload)
        #expect(event.data.reason == "user" && event.data.sessionId == laptopID)
        let refresh = try await refusal(harness, .refresh) { $0.refreshToken = laptop.refreshToken }
        #expect(refresh.code == .invalidRefreshToken)
        let introspected = try await handle(harness, .introspect) { $0.accessToken = laptop.accessToken }
        #expect(introspected.result.introspection?.active == false)
        let again = try await refusal(harness, .sessionRevoke) {
            $0.accessToken = phone.accessToken
            $0.sessionID = laptopID
        }
        #expect(again.code == .unknownSession, "an ended session is no live one")
        #expect(try await harness.count("sessions", where: "revoked_at IS NULL") == 3)
    }

    // MARK: - Deletion

    @Test func deletingTheAccountNeedsARecentSignInThePasswordOrACode() async throws {
        let harness = try await service()
        let (phone, _, userID) = try await member(harness)
        clock.advance(by: 301)
        let stale = try await refusal(harness, .accountDelete) { $0.accessToken = phone.accessToken }
        #expect(stale.code == .reauthenticationRequired)
        let wrong = try await refusal(harness, .accountDelete) {
            $0.accessToken = phone.accessToken
            $0.password = "a stolen token's guess"
        }
        #expect(wrong.code == .invalidCredentials)
        let noFactor = try await refusal(harness, .accountDelete) {
            $0.accessToken = phone.accessToken
            $0.code = "123456"
        }
        #expect(noFactor.code == .reauthenticationRequired, "a code proves nothing without a factor")
        #expect(try await harness.count("users") == 1)

        let deleted = try await handle(harness, .accountDelete) {
            $0.accessToken = phone.accessToken
            $0.password = "correct horse battery"
        }
        #expect(deleted.result.status == "ok")
        #expect(deleted.result.user?.id == userID)
        let revoked = deleted.events.compactMap {
            try? MessageCoding.decode(CloudEvent<SessionRevokedData>.self, from: $0.payload)
        }.filter { $0.type == UserEventType.sessionRevoked }
        #expect(revoked.count == 2 && revoked.allSatisfy { $0.data.reason == "user_deleted" })
        let gone = try #require(
            deleted.events.compactMap { try? MessageCoding.decode(CloudEvent<UserDeletedData>.self, from: $0.payload) }
                .first { $0.type == UserEventType.deleted })
        #expect(gone.data.reason == "user_request" && gone.data.userId == userID)
        for table in ["users", "identities", "sessions", "access_tokens", "refresh_tokens", "one_time_codes"] {
            #expect(try await harness.count(table) == 0, "\(table) keeps nothing")
        }
        let after = try await refusal(harness, .sessionsList) { $0.accessToken = phone.accessToken }
        #expect(after.code == .invalidToken)
    }

    @Test func aGuestDeletesItselfWithItsTokenAlone() async throws {
        let harness = try await service()
        let guest = try await handle(harness, .guest) { $0.clientID = "install-1" }
        clock.advance(by: 600)
        let deleted = try await handle(harness, .accountDelete) { $0.accessToken = guest.result.session?.accessToken }
        #expect(deleted.result.status == "ok")
        #expect(try await harness.count("users") == 0)
    }

    // MARK: - Export

    /// The export against what PostgreSQL holds for the user, table by table: every table that
    /// refers to a user must be in the export (a new one fails here until it is), with as many
    /// rows; and the export carries no secret.
    @Test func theExportHoldsEveryTableAboutTheUserAndNoSecret() async throws {
        let harness = try await service()
        let (phone, laptop, userID) = try await member(harness)
        _ = try await handle(harness, .logout) { $0.accessToken = laptop.accessToken }
        _ = try await handle(harness, .mfaEnroll) { $0.accessToken = phone.accessToken }
        _ = try await handle(harness, .emailCodeRequest) { $0.email = "ada@example.com" }
        // A passkey, the user's WebAuthn handle, and a ceremony not answered yet.
        let user = try #require(UUID(uuidString: userID))
        _ = try await harness.query(
            """
            INSERT INTO passkey_users (user_id, handle) VALUES (\(user), '\\x0102');
            """)
        _ = try await harness.query(
            """
            INSERT INTO passkeys (id, user_id, credential_id, public_key, algorithm, sign_count, transports, aaguid,
                                  attestation, backup_eligible, backed_up, name, created_at)
            VALUES (\(UUID()), \(user), '\\x0a0b', '\\x00', -7, 0, '{internal}', '\\x00', 'none', true, true, 'Key',
                    now())
            """)
        _ = try await harness.query(
            """
            INSERT INTO webauthn_challenges (challenge_hash, purpose, user_id, created_at, expires_at)
            VALUES ('\\x0c', 'register', \(user), now(), now() + interval '5 minutes')
            """)

        let unsealed = try await refusal(harness, .accountExport) { $0.accessToken = phone.accessToken }
        #expect(unsealed.code == .malformedRequest && unsealed.field == "data.reply_key")
        let gateway = try X25519.generateKeyPair()
        let answered = try await handle(harness, .accountExport) {
            $0.accessToken = phone.accessToken
            $0.replyKey = Base64URL.encode(gateway.publicKey)
        }
        let sealed = try #require(answered.result.sealedExport)
        let json = try JWE.openECDHES(sealed, privateKey: gateway.privateKey).plaintext
        let export = try MessageCoding.decode(AccountExportPayload.self, from: json)
        #expect(export.user.id == userID)

        // Every table with a column that names a user, and how the export shows its rows.
        let tables = try await harness.query(
            """
            SELECT DISTINCT c.table_name FROM information_schema.columns c
            JOIN information_schema.tables t ON t.table_name = c.table_name AND t.table_schema = c.table_schema
            WHERE c.table_schema = 'public' AND c.column_name = 'user_id' AND t.table_type = 'BASE TABLE'
            ORDER BY c.table_name
            """
        ).map { try $0.decode("table_name", as: String.self) }
        let exported: [String: Int] = [
            "identities": export.identities.count, "sessions": export.sessions.count,
            "mfa_factors": export.secondFactor == nil ? 0 : 1,
            "mfa_recovery_codes": export.secondFactor?.recoveryCodesLeft ?? 0,
            "one_time_codes": export.oneTimeCodes.count, "processed_requests": export.requests.count,
            "audit_log": export.audit.count, "passkeys": export.passkeys?.count ?? 0,
            "passkey_users": export.passkeyHandle == nil ? 0 : 1,
            "webauthn_challenges": export.passkeyChallenges?.count ?? 0,
            "admin_roles": export.consoleRole == nil ? 0 : 1,
            "console_sessions": export.consoleSessions?.count ?? 0,
        ]
        for table in tables {
            // The export's own request is kept (and audited) after its document is made.
            let own = table == "processed_requests" || table == "audit_log" ? 1 : 0
            let stored = try await harness.count(table, where: "user_id = '\(userID)'") - own
            let shown = try #require(exported[table], "table \(table) refers to users but is not in the export")
            #expect(shown == stored, "\(table): \(stored) rows, \(shown) exported")
        }
        #expect(try await harness.count("users", where: "id = '\(userID)'") == 1)
        #expect(export.sessions.count == 2 && export.sessions.contains { $0.revokedReason == "logout" })
        #expect(export.secondFactor?.active == false, "enrolled, not verified")
        #expect(export.identities.map(\.provider) == ["password"] && export.identities[0].hasPassword)
        #expect(export.passkeys?.map(\.name) == ["Key"] && export.passkeyHandle == "AQI")
        #expect(export.passkeyChallenges?.map(\.purpose) == ["register"])

        // No secret: no hash, no token, no code.
        let text = String(decoding: json, as: UTF8.self)
        let hash = try #require(try await harness.passwordHash(email: "ada@example.com"))
        for secret in [hash, phone.accessToken, phone.refreshToken ?? "-", laptop.refreshToken ?? "-", "$argon2id"] {
            #expect(!text.contains(secret))
        }

        // And it is what contract/schemas/sealed/account-export.json says.
        let schema = ProjectPaths.root.appendingPathComponent("contract/schemas/sealed/account-export.json").path
        let checked = try await Subprocess.run([
            "python3", "-c",
            """
            import json, sys, jsonschema
            schema = json.load(open(sys.argv[1]))
            jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(json.loads(sys.argv[2]))
            print("valid")
            """, schema, text,
        ])
        #expect(checked.output.contains("valid"), "\(checked.output)")
    }
}
