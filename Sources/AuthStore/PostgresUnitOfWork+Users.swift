import AuthDomain
import Foundation
import PGStore

/// Users and their identities: what signs in, and what the account export reads of it.
extension PostgresUnitOfWork {
    func identity(provider: String, subject: String) throws -> IdentityRecord? {
        let key = IdentityKey(provider: provider, subject: subject)
        if usesCache, let cached = cache.identities[key] { return cached }
        let found = try query(
            """
            SELECT provider, subject, user_id, email, email_verified, is_private_email, password_hash
            FROM identities WHERE provider = \(provider) AND subject = \(subject) AND tenant = \(tenant) FOR UPDATE
            """
        ).first.map(Decode.identity)
        cache.identities[key] = .some(found)
        return found
    }

    func identities(userID: UUID) throws -> [IdentityRecord] {
        let found = try query(
            """
            SELECT provider, subject, user_id, email, email_verified, is_private_email, password_hash
            FROM identities WHERE user_id = \(userID) AND tenant = \(tenant) ORDER BY provider, subject FOR UPDATE
            """
        ).map(Decode.identity)
        for identity in found {
            cache.identities[IdentityKey(provider: identity.provider, subject: identity.subject)] = .some(identity)
        }
        return found
    }

    func user(id: UUID) throws -> StoredUser? {
        if usesCache, let cached = cache.users[id] { return cached }
        let found = try query(
            "\(unsafeRaw: PrefetchQueries.userColumns) WHERE u.id = \(id) AND u.tenant = \(tenant) FOR UPDATE OF u"
        ).first.map(Decode.user)
        cache.users[id] = .some(found)
        return found
    }

    func usersWithVerifiedEmail(_ email: String) throws -> [UUID] {
        try query(
            """
            SELECT id FROM users
            WHERE lower(email) = lower(\(email)) AND email_verified AND NOT is_private_email AND NOT is_guest
              AND tenant = \(tenant)
            ORDER BY id LIMIT 2 FOR UPDATE
            """
        ).map { try $0.decode("id", as: UUID.self) }
    }

    func accountRecords(userID: UUID) throws -> AccountRecords {
        let identities = try query(
            """
            SELECT provider, subject, user_id, email, email_verified, is_private_email, password_hash, created_at,
                   last_login_at
            FROM identities WHERE user_id = \(userID) AND tenant = \(tenant) ORDER BY created_at, provider, subject
            """
        ).map { row in
            AccountRecords.Identity(
                record: try Decode.identity(row), createdAt: try row.decode("created_at"),
                lastLoginAt: try row.decode("last_login_at", as: Date?.self))
        }
        let unused =
            try query(
                "SELECT count(*) AS n FROM mfa_recovery_codes WHERE user_id = \(userID) AND used_at IS NULL"
            ).first?.decode("n", as: Int.self) ?? 0
        let codes = try query(
            """
            SELECT purpose, email, created_at, expires_at, used_at FROM one_time_codes
            WHERE user_id = \(userID) AND tenant = \(tenant) ORDER BY created_at, id
            """
        ).map { row in
            AccountRecords.Code(
                purpose: try row.decode("purpose"), email: try row.decode("email"),
                createdAt: try row.decode("created_at"), expiresAt: try row.decode("expires_at"),
                usedAt: try row.decode("used_at", as: Date?.self))
        }
        let requests = try query(
            """
            SELECT method, status, processed_at FROM processed_requests
            WHERE user_id = \(userID) AND tenant = \(tenant) ORDER BY processed_at, request_id
            """
        ).map { row in
            AccountRecords.Request(
                method: try row.decode("method"), status: try row.decode("status"),
                processedAt: try row.decode("processed_at"))
        }
        let audit = try query(
            "\(unsafeRaw: Self.auditColumns) WHERE user_id = \(userID) AND tenant = \(tenant) ORDER BY at, id"
        ).map(
            Decode.audit)
        var records = AccountRecords(
            identities: identities, factor: try mfaFactor(userID: userID), unusedRecoveryCodes: unused, codes: codes,
            requests: requests, audit: audit)
        records.passkeyChallenges = try query(
            """
            SELECT purpose, created_at, expires_at FROM webauthn_challenges
            WHERE user_id = \(userID) AND tenant = \(tenant) ORDER BY created_at, challenge_hash
            """
        ).map { row in
            (try row.decode("purpose"), try row.decode("created_at"), try row.decode("expires_at"))
        }
        records.consoleRole = try query("SELECT role FROM admin_roles WHERE user_id = \(userID)").first?.decode("role")
        records.consoleSessions = try query(
            """
            SELECT client, created_at, last_seen_at FROM console_sessions
            WHERE user_id = \(userID) ORDER BY created_at, id_hash
            """
        ).map { row in
            (try row.decode("client"), try row.decode("created_at"), try row.decode("last_seen_at"))
        }
        records.disabledAt = try query("SELECT disabled_at FROM users WHERE id = \(userID) AND tenant = \(tenant)")
            .first?.decode(
                "disabled_at", as: Date?.self)
        return records
    }

    static let auditColumns = """
        SELECT at, user_id, action, outcome, request_id, client_id, device_name, device_platform, ip, user_agent, actor
        FROM audit_log
        """

    static let codeColumns =
        "SELECT id, user_id, purpose, email, code_hmac, attempts, expires_at, used_at FROM one_time_codes"

    func insertUser(_ user: NewUser, handles: [String]) throws -> StoredUser {
        // The first candidate was fetched with the batch and is nearly always free; the longer
        // ones are asked about only when it is not.
        var chosen: String?
        for (index, candidate) in handles.enumerated() where !handlesInUse.contains(candidate) {
            if cache.takenHandles[candidate] == nil {
                // No flush needed: the batch's own new handles are known without the server.
                let unknown = handles[index...].filter { cache.takenHandles[$0] == nil }
                let taken = Set(
                    try connection.query(
                        "SELECT handle FROM users WHERE handle = ANY(\(PGArray(Array(unknown)))) AND tenant = \(tenant)"
                    ).map { try $0.decode("handle", as: String.self) })
                for handle in unknown { cache.takenHandles[handle] = taken.contains(handle) }
            }
            if cache.takenHandles[candidate] == false {
                chosen = candidate
                break
            }
        }
        guard let handle = chosen else { throw StoreError.handlesExhausted }
        handlesInUse.insert(handle)
        current.users.append(NewUserRow(user: user, handle: handle, tenant: tenant))
        cache.users[user.id] = nil
        var stored = StoredUser(
            id: user.id, handle: handle, name: user.name, email: user.email, emailVerified: user.emailVerified,
            isPrivateEmail: user.isPrivateEmail, isGuest: user.isGuest, providers: [], createdAt: user.createdAt)
        stored.phone = user.phone
        return stored
    }

    func insertIdentity(_ identity: NewIdentity, userID: UUID, at date: Date) throws {
        current.identities.append(NewIdentityRow(identity: identity, userID: userID, at: date, tenant: tenant))
        cache.identities[IdentityKey(provider: identity.provider, subject: identity.subject)] = nil
        cache.users[userID] = nil
    }

    func deleteIdentity(provider: String, subject: String) throws {
        current.statements.append(
            "DELETE FROM identities WHERE provider = \(provider) AND subject = \(subject) AND tenant = \(tenant)")
        cache.identities[IdentityKey(provider: provider, subject: subject)] = .some(nil)
    }

    func updateIdentity(_ identity: IdentityRecord, lastLoginAt: Date) throws {
        current.statements.append(
            """
            UPDATE identities SET email = \(identity.email), email_verified = \(identity.emailVerified),
                is_private_email = \(identity.isPrivateEmail), password_hash = \(identity.passwordHash),
                last_login_at = \(lastLoginAt)
            WHERE provider = \(identity.provider) AND subject = \(identity.subject) AND tenant = \(tenant)
            """)
        cache.identities[IdentityKey(provider: identity.provider, subject: identity.subject)] = nil
    }

    func updateUser(_ user: StoredUser, upgradedAt: Date?, at date: Date) throws {
        current.statements.append(
            """
            UPDATE users SET name = \(user.name), email = \(user.email), email_verified = \(user.emailVerified),
                is_private_email = \(user.isPrivateEmail), is_guest = \(user.isGuest), phone = \(user.phone),
                upgraded_at = COALESCE(\(upgradedAt), upgraded_at), updated_at = \(date)
            WHERE id = \(user.id) AND tenant = \(tenant)
            """)
        cache.users[user.id] = nil
    }

    func deleteUsers(_ ids: [UUID]) throws {
        guard !ids.isEmpty else { return }
        current.statements.append("DELETE FROM users WHERE id = ANY(\(PGArray(ids))) AND tenant = \(tenant)")
        // Deleting cascades through identities, sessions and tokens: trust no cached row after it.
        cache = Cache(takenHandles: cache.takenHandles)
    }

    func setEmailStatus(provider: String, subject: String, status: String) throws {
        current.statements.append(
            """
            UPDATE identities SET email_status = \(status)
            WHERE provider = \(provider) AND subject = \(subject) AND tenant = \(tenant)
            """)
    }

    func setUserDisabled(_ id: UUID, at date: Date?) throws {
        current.statements.append("UPDATE users SET disabled_at = \(date) WHERE id = \(id) AND tenant = \(tenant)")
        cache.users[id] = nil
    }

    func consoleRole(userID: UUID) throws -> String? {
        try query("SELECT role FROM admin_roles WHERE user_id = \(userID)").first?.decode("role")
    }

    func deleteConsoleRole(userID: UUID) throws {
        current.statements.append("DELETE FROM admin_roles WHERE user_id = \(userID)")
    }

    func deleteConsoleSessions(userID: UUID) throws {
        current.statements.append("DELETE FROM console_sessions WHERE user_id = \(userID)")
    }
}
