import AuthCrypto
import Foundation
import Messages
import PGStore
import Passwords
import Testing

@testable import AuthDomain
@testable import AuthStore
@testable import TestSupport

/// Disabling an account and the console's roles, through the store code the CLI (and the admin
/// console) call: a disabled account's sessions end, its sign-ins and refreshes answer
/// `account_disabled` until it is enabled again; roles go to password accounts only.
@Suite(.requiresDatabase) struct AccountAdministrationTests {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
    let passwords: PasswordService

    init() throws {
        passwords = try PasswordService(parameters: fastArgon2, threads: 2)
    }

    func service() async throws -> FlowHarness {
        let resultsKey = try SecureRandom.bytes(32)
        return try await FlowHarness(clock: clock, passwords: passwords) { config in config.resultsKey = resultsKey }
    }

    func answer(_ harness: FlowHarness, _ method: LoginMethod, _ fill: (inout LoginRequestData) -> Void) async throws
        -> LoginResultData
    {
        do {
            return try #require(try await harness.handle(makeRequest(method, fill))).result
        } catch let error as LoginError {
            return .failure(requestID: "-", error: error.payload)
        }
    }

    func login(_ harness: FlowHarness) async throws -> LoginResultData {
        try await answer(harness, .password) {
            $0.email = "ada@example.com"
            $0.password = "correct horse battery"
        }
    }

    @Test func aDisabledAccountIsSignedOutAndRefusedUntilEnabledAgain() async throws {
        let harness = try await service()
        let registered = try await answer(harness, .register) {
            $0.email = "ada@example.com"
            $0.password = "correct horse battery"
        }
        let second = try await login(harness)
        let userID = try #require(registered.user.flatMap { UUID(uuidString: $0.id) })

        let disabled = try await AccountAdministration.setDisabled(
            userID, disabled: true, actor: "operator", store: harness.store, configuration: harness.configuration,
            clock: clock)
        #expect(disabled == .init(changed: true, sessionsEnded: 2))
        #expect(try await harness.count("sessions", where: "revoked_reason = 'account_disabled'") == 2)
        #expect(
            try await harness.count("outbox", where: "convert_from(payload, 'UTF8') LIKE '%account_disabled%'") == 2)
        #expect(try await harness.count("audit_log", where: "action = 'operator.account_disable'") == 1)

        let refused = try await login(harness)
        #expect(refused.error?.code == .accountDisabled)
        #expect(refused.session == nil)
        let refresh = try await answer(harness, .refresh) { $0.refreshToken = second.session?.refreshToken }
        #expect(refresh.error?.code == .accountDisabled)
        let wrongPassword = try await answer(harness, .password) {
            $0.email = "ada@example.com"
            $0.password = "not the password at all"
        }
        #expect(wrongPassword.error?.code == .invalidCredentials, "the password is checked first: no oracle")

        let again = try await AccountAdministration.setDisabled(
            userID, disabled: true, actor: "operator", store: harness.store, configuration: harness.configuration,
            clock: clock)
        #expect(again == .init(changed: false, sessionsEnded: 0))

        let enabled = try await AccountAdministration.setDisabled(
            userID, disabled: false, actor: "operator", store: harness.store, configuration: harness.configuration,
            clock: clock)
        #expect(enabled?.changed == true)
        #expect(try await login(harness).session != nil)
        let ended = try await answer(harness, .refresh) { $0.refreshToken = second.session?.refreshToken }
        #expect(ended.error?.code == .invalidRefreshToken, "the sessions it ended stay ended")
        #expect(
            try await AccountAdministration.setDisabled(
                UUID(), disabled: true, actor: "operator", store: harness.store, configuration: harness.configuration,
                clock: clock) == nil)
    }

    @Test func consoleRolesGoToPasswordAccountsAndAreRecorded() async throws {
        let harness = try await service()
        _ = try await answer(harness, .register) {
            $0.email = "Support@Example.com"
            $0.password = "correct horse battery"
        }
        _ = try await answer(harness, .guest) { _ in }
        let now = clock.now()
        #expect(
            try await harness.store.grantAdminRole(email: "nobody@example.com", role: .admin, by: "operator", at: now)
                == .noPasswordAccount)
        #expect(
            try await harness.store.grantAdminRole(
                email: "support@example.com", role: .support, by: "operator", at: now)
                == .addressNotVerified, "whoever registered an address first is not its owner until it is proven")
        #expect(try await harness.store.adminGrants().isEmpty)
        _ = try await harness.query(
            "UPDATE identities SET email_verified = true WHERE provider = 'password' AND subject = 'support@example.com'"
        )
        guard
            case .granted(let id) = try await harness.store.grantAdminRole(
                email: "support@example.com", role: .support, by: "operator", at: now)
        else {
            Issue.record("not granted")
            return
        }
        _ = try await harness.store.grantAdminRole(email: "SUPPORT@example.com", role: .admin, by: "operator", at: now)
        let grants = try await harness.store.adminGrants()
        #expect(grants.map(\.role) == ["admin"] && grants.map(\.userID) == [id])
        #expect(grants.first?.email == "support@example.com" && grants.first?.emailVerified == true)
        #expect(try await harness.store.revokeAdminRole(email: "support@example.com", by: "operator", at: now))
        #expect(try await harness.store.revokeAdminRole(email: "support@example.com", by: "operator", at: now) == false)
        #expect(try await harness.store.adminGrants().isEmpty)
        #expect(
            try await harness.count("audit_log", where: "action IN ('operator.admin_grant', 'operator.admin_revoke')")
                == 3)
    }
}
