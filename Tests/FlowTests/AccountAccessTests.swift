import AuthCrypto
import Foundation
import JOSE
import Messages
import PGStore
import Testing

@testable import AuthDomain
@testable import AuthStore
@testable import TestSupport

/// The one list of ways into an account (`AccountAccess`), held to the schema, and walked whole by
/// a mailbox claim and a deletion. The fourth security review's first defect: an attacker's
/// passkey outlived the claim of the mailbox by its owner.
@Suite(.requiresDatabase, .requiresSoftAuthenticator, .requiresIndependentJOSE, .serialized)
struct AccountAccessTests {
    let review: SecurityReviewTests
    let passkeys: PasskeyFlowTests

    init() throws {
        review = try SecurityReviewTests()
        passkeys = try PasskeyFlowTests()
    }

    func service(configure: @escaping (inout WorkerConfiguration) -> Void = { _ in }) async throws -> FlowHarness {
        try await review.service { config in
            config.passkeys.rpID = "example.com"
            config.passkeys.rpName = "Example"
            config.passkeys.origins = [PasskeyFlowTests.origin]
            configure(&config)
        }
    }

    /// The rows of each way in that `user` holds, by case: for tables without a user column,
    /// through the user's sessions.
    func waysIn(_ harness: FlowHarness, _ user: UUID, sessions: [UUID]? = nil) async throws -> [String: Int] {
        let sessionIDs: [UUID]
        if let sessions {
            sessionIDs = sessions
        } else {
            sessionIDs = try await harness.query("SELECT id FROM sessions WHERE user_id = \(user)").map {
                try $0.decode("id")
            }
        }
        var rows: [String: Int] = [:]
        for table in AccountAccess.allTables {
            let byUser =
                try await harness.query(
                    """
                    SELECT count(*) > 0 AS found FROM information_schema.columns
                    WHERE table_schema = 'public' AND table_name = \(table) AND column_name = 'user_id'
                    """
                ).first?.decode("found", as: Bool.self) ?? false
            let condition =
                byUser
                ? "user_id = '\(user.lowercasedString)'"
                : "session_id = ANY('{\(sessionIDs.map(\.lowercasedString).joined(separator: ","))}'::uuid[])"
            rows[table] = try await harness.count(table, where: condition)
        }
        return rows
    }

    // MARK: - The list and the schema

    /// Every table whose rows belong to a user (a foreign key to `users`, or to `sessions`) is a
    /// way in the list names, and goes with the user when the user is deleted. A new table that
    /// holds a credential fails here until it joins `AccountAccess`.
    @Test func everyTableThatReferencesAUserIsAWayInTheListNames() async throws {
        let harness = try await service()
        let references = try await harness.query(
            """
            SELECT c.conrelid::regclass::text AS table_name, c.confrelid::regclass::text AS referenced,
                   c.confdeltype::text AS on_delete
            FROM pg_constraint c
            WHERE c.contype = 'f' AND c.confrelid IN ('users'::regclass, 'sessions'::regclass)
            ORDER BY 1
            """
        ).map {
            (
                table: try $0.decode("table_name", as: String.self),
                referenced: try $0.decode("referenced", as: String.self),
                onDelete: try $0.decode("on_delete", as: String.self)
            )
        }
        #expect(references.count >= 10, "the schema's references were read: \(references)")
        let listed = Set(AccountAccess.allTables)
        for reference in references {
            #expect(
                listed.contains(reference.table),
                "\(reference.table) references \(reference.referenced): a way into an account AccountAccess does not list"
            )
            #expect(reference.onDelete == "c", "\(reference.table) must go with its user (ON DELETE CASCADE)")
        }
        let referencing = Set(references.map(\.table))
        for table in listed {
            #expect(referencing.contains(table), "\(table) is listed but references no user or session")
        }
    }

    /// A user holding every way in, deleted by an operator: nothing of any of them is left.
    @Test func aDeletionLeavesNoWayInOfAnyKind() async throws {
        // Opaque access tokens: their rows are a way in of their own.
        let harness = try await service { $0.accessTokenFormat = .opaque }
        let registered = try await review.register(harness, "full@example.com", "correct horse battery")
        let user = try #require(registered.result.user.flatMap { UUID(uuidString: $0.id) })
        let token = try #require(registered.result.session?.accessToken)
        _ = try await passkeys.registered(harness, token: token)
        _ = try await review.enrol(harness, token: token)
        _ = try await passkeys.registerOptions(harness, token: token)  // a challenge left unanswered
        let session: UUID = try #require(
            try await harness.query("SELECT id FROM sessions WHERE user_id = \(user) LIMIT 1").first?.decode("id"))
        _ = try await harness.query(
            """
            INSERT INTO admin_roles (user_id, role, granted_at, granted_by) VALUES (\(user), 'support', now(), 'operator');
            """)
        _ = try await harness.query(
            """
            INSERT INTO console_sessions (id_hash, user_id, session_id, client, created_at, last_seen_at)
            VALUES (\(PGBytes(SHA256.hash([1, 2, 3]))), \(user), \(session), '127.0.0.1', now(), now())
            """)
        let sessions: [UUID] = try await harness.query("SELECT id FROM sessions WHERE user_id = \(user)").map {
            try $0.decode("id")
        }
        let before = try await waysIn(harness, user, sessions: sessions)
        for table in AccountAccess.allTables {
            #expect(before[table, default: 0] > 0, "the test gave the user no row of \(table)")
        }

        let deleted = try await AccountDeletion.deleteUser(
            user, reason: "operator", store: harness.store, configuration: harness.configuration,
            clock: SystemClock())
        #expect(deleted?.users == 1)
        let after = try await waysIn(harness, user, sessions: sessions)
        #expect(after.values.allSatisfy { $0 == 0 }, "left behind: \(after.filter { $0.value > 0 })")
    }

    // MARK: - The claim walks the list

    /// Route one: the attacker registers the victim's address, adds a passkey in that session, and
    /// waits. The owner proves the mailbox by a code: the passkey goes with everything else, is
    /// announced, and signs nobody in afterwards, not even once the owner turns TOTP on.
    @Test func anAttackersPasskeyEndsWhenTheOwnerClaimsTheMailbox() async throws {
        let harness = try await service()
        let attacker = try await review.register(harness, "victim@example.com", "attacker's own password")
        let attackerToken = try #require(attacker.result.session?.accessToken)
        let (added, _, credential) = try await passkeys.registered(harness, token: attackerToken)
        #expect(added.status == "ok", "\(String(describing: added.error))")
        _ = try await passkeys.registerOptions(harness, token: attackerToken)  // a ceremony left pending
        let user = try #require(attacker.result.user.flatMap { UUID(uuidString: $0.id) })
        _ = try await harness.query(
            "INSERT INTO admin_roles (user_id, role, granted_at, granted_by) VALUES (\(user), 'admin', now(), 'operator')"
        )

        let owner = try await claimByCode(harness, "victim@example.com")
        #expect(owner.result.user?.id == user.lowercasedString, "the same account, claimed")
        #expect(owner.result.user?.providers == ["email"], "the owner's answer lists only what is theirs")
        let removed = owner.events.compactMap {
            try? MessageCoding.decode(CloudEvent<PasskeyEventData>.self, from: $0.payload)
        }.filter { $0.type == UserEventType.passkeyRemoved }
        #expect(removed.map(\.data.reason) == ["account_claimed"], "the passkey's removal is announced")
        let left = try await waysIn(harness, user)
        #expect(left["passkeys"] == 0 && left["passkey_users"] == 0, "\(left)")
        #expect(left["webauthn_challenges"] == 0 && left["admin_roles"] == 0 && left["mfa_factors"] == 0, "\(left)")
        #expect(
            try await harness.count("sessions", where: "user_id = '\(user.lowercasedString)' AND revoked_at IS NULL")
                == 1)

        let ownerToken = try #require(owner.result.session?.accessToken)
        review.clock.advance(by: 1)
        _ = try await review.enrol(harness, token: ownerToken)
        let replay = try await passkeys.signIn(harness, credential: credential, bends: ["sign_count": 5])
        #expect(replay.result.error?.code == .invalidCredentials, "the attacker's passkey opens nothing")
        #expect(replay.result.session == nil)
    }

    /// Route two needs no unverified registration: a guest adds a passkey and becomes a member,
    /// then puts the victim's address on that account with `register` and `link_to`. Requiring
    /// verified addresses does not stop it; the owner's claim does.
    @Test func aPasskeyMembersLinkedAddressIsClaimedWithoutThePasskey() async throws {
        let harness = try await service { $0.accounts.requireVerifiedEmail = true }
        let (guestAnswer, _) = try await passkeys.send(harness, .guest, [:])
        let guestToken = try #require(guestAnswer.session?.accessToken)
        let (member, _, credential) = try await passkeys.registered(harness, token: guestToken)
        let memberToken = try #require(member.session?.accessToken)
        let linked = try await review.handle(harness, .register) {
            $0.email = "second@example.com"
            $0.password = "attacker's own password"
            $0.linkTo = memberToken
        }
        #expect(linked.result.status == "ok", "\(String(describing: linked.result.error))")
        let user = try #require(member.user.flatMap { UUID(uuidString: $0.id) })

        let owner = try await claimByCode(harness, "second@example.com")
        let ownerUser = try #require(owner.result.user)
        let left = try await waysIn(harness, user)
        if ownerUser.id == user.lowercasedString {
            #expect(left["passkeys"] == 0, "claimed: the passkey went with the rest")
        } else {
            #expect(
                try await harness.count(
                    "identities", where: "user_id = '\(user.lowercasedString)' AND provider = 'password'") == 0,
                "not merged: the unproven address was taken off the passkey account")
        }
        let replay = try await passkeys.signIn(harness, credential: credential, bends: ["sign_count": 5])
        #expect(replay.result.user?.id != ownerUser.id, "the attacker's passkey never opens the owner's account")
    }

    /// Staff remove a user's passkeys (a lost authenticator, one the user does not know): announced
    /// with reason `admin`, audited, and no longer a way in.
    @Test func staffRemoveAUsersPasskeys() async throws {
        let harness = try await service()
        let (guestAnswer, _) = try await passkeys.send(harness, .guest, [:])
        let (member, _, credential) = try await passkeys.registered(
            harness, token: try #require(guestAnswer.session?.accessToken))
        let user = try #require(member.user.flatMap { UUID(uuidString: $0.id) })
        let removed = try await AccountAdministration.removePasskeys(
            user, only: nil, actor: "operator", store: harness.store, configuration: harness.configuration,
            clock: SystemClock())
        #expect(removed == 1)
        #expect(try await harness.count("passkeys") == 0)
        #expect(try await harness.count("passkey_users") == 0)
        let events = try await harness.query("SELECT payload FROM outbox").compactMap {
            try? MessageCoding.decode(
                CloudEvent<PasskeyEventData>.self, from: try $0.decode("payload", as: PGBytes.self).bytes)
        }.filter { $0.type == UserEventType.passkeyRemoved }
        #expect(events.map(\.data.reason) == ["admin"])
        #expect(try await harness.count("audit_log", where: "action = 'operator.passkeys_remove'") == 1)
        let replay = try await passkeys.signIn(harness, credential: credential, bends: ["sign_count": 5])
        #expect(replay.result.error?.code == .invalidCredentials)
        let none = try await AccountAdministration.removePasskeys(
            UUID(), only: nil, actor: "operator", store: harness.store, configuration: harness.configuration,
            clock: SystemClock())
        #expect(none == nil, "no such user")
    }

    // MARK: - Staff in what a user reads

    /// A console user is recorded by their account's id, and the account's own export says
    /// "support": their sign-in address is half of their console credential (and the console's
    /// sign-in shares the public per-address throttle, so a named agent could be locked out).
    @Test func theExportSaysSupportNeverTheStaffMember() async throws {
        let harness = try await service()
        let registered = try await review.register(harness, "kim@example.com", "correct horse battery")
        let user = try #require(registered.result.user.flatMap { UUID(uuidString: $0.id) })
        let agent = UUID()
        _ = try await AccountAdministration.removePasskeys(
            user, only: nil, actor: AuditEntry.consoleActor(agent), store: harness.store,
            configuration: harness.configuration, clock: SystemClock())
        // A row written before the upgrade, by address, as the console wrote them.
        _ = try await review.register(harness, "agent@example.com", "the agent's password")
        let agentAccount: UUID = try #require(
            try await harness.query("SELECT user_id FROM identities WHERE subject = 'agent@example.com'").first?
                .decode("user_id"))
        _ = try await harness.query(
            """
            INSERT INTO audit_log (at, user_id, action, outcome, actor)
            VALUES (now(), \(user), 'operator.session_end', 'ok', 'admin:agent@example.com'),
                   (now(), \(user), 'operator.session_end', 'ok', 'admin:gone@example.com')
            """)
        try await harness.connection.withConnection { _ = try $0.execute(unsafeSQL: Migrations.staffNamedByID.sql) }
        let actors: [String] = try await harness.query(
            "SELECT actor FROM audit_log WHERE user_id = \(user) AND action LIKE 'operator.%' ORDER BY id"
        ).map { try $0.decode("actor") }
        #expect(
            actors == [
                "console:\(agent.lowercasedString)", "console:\(agentAccount.lowercasedString)", "console",
            ])

        let gateway = try X25519.generateKeyPair()
        let answered = try await review.handle(harness, .accountExport) {
            $0.accessToken = registered.result.session?.accessToken
            $0.replyKey = Base64URL.encode(gateway.publicKey)
        }
        let sealed = try #require(answered.result.sealedExport)
        let export = try MessageCoding.decode(
            AccountExportPayload.self, from: try JWE.openECDHES(sealed, privateKey: gateway.privateKey).plaintext)
        let staff = export.audit.filter { $0.action.hasPrefix("operator.") }
        #expect(staff.count == 3 && staff.allSatisfy { $0.actor == "support" }, "\(staff)")
        #expect(export.audit.contains { $0.actor == "user" }, "the user's own requests stay theirs")
        let text = String(decoding: try JWE.openECDHES(sealed, privateKey: gateway.privateKey).plaintext, as: UTF8.self)
        #expect(!text.contains("agent@example.com") && !text.contains(agentAccount.lowercasedString))
    }

    /// A guest's access token after the guest became a member by a passkey: it still grants a
    /// guest's abilities (the member's sign-in has tokens of its own), and introspection says one
    /// thing about it, not `guest: false` beside `["guest"]`.
    @Test(arguments: [WorkerConfiguration.AccessTokenFormat.jwt, .opaque])
    func aGuestsOldTokenIntrospectsAsAGuestsAfterTheUpgrade(format: WorkerConfiguration.AccessTokenFormat)
        async throws
    {
        let harness = try await service { $0.accessTokenFormat = format }
        let (guestAnswer, _) = try await passkeys.send(harness, .guest, [:])
        let guestToken = try #require(guestAnswer.session?.accessToken)
        let (member, _, _) = try await passkeys.registered(harness, token: guestToken)
        #expect(member.user?.isGuest == false)
        let old = try await review.handle(harness, .introspect) { $0.accessToken = guestToken }
        let seen = try #require(old.result.introspection)
        #expect(seen.active && seen.abilities == ["guest"] && seen.guest == true, "\(seen)")
        let new = try await review.handle(harness, .introspect) { $0.accessToken = member.session?.accessToken }
        let memberSeen = try #require(new.result.introspection)
        #expect(memberSeen.active && memberSeen.abilities == ["*"] && memberSeen.guest == false, "\(memberSeen)")
    }

    /// The owner of `email` proves the mailbox with a sign-in code.
    func claimByCode(_ harness: FlowHarness, _ email: String) async throws -> FlowHarness.Outcome {
        let requested = try await review.handle(harness, .emailCodeRequest) { $0.email = email }
        let code = try review.codeSecret(requested.events, UserEventType.signInRequested).code
        return try await review.handle(harness, .emailCode) {
            $0.email = email
            $0.code = code
        }
    }
}
