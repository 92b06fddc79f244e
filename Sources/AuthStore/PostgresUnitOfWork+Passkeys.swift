import AuthDomain
import Foundation
import PGStore

/// Passkeys, their user handles and the ceremonies' challenges.
extension PostgresUnitOfWork {
    func passkeyHandle(userID: UUID) throws -> [UInt8]? {
        try query("SELECT handle FROM passkey_users WHERE user_id = \(userID) FOR UPDATE").first.map {
            try $0.decode("handle", as: PGBytes.self).bytes
        }
    }

    func userID(passkeyHandle handle: [UInt8]) throws -> UUID? {
        try query(
            """
            SELECT p.user_id FROM passkey_users p JOIN users u ON u.id = p.user_id
            WHERE p.handle = \(PGBytes(handle)) AND u.tenant = \(tenant)
            """
        ).first.map { try $0.decode("user_id") }
    }

    func insertPasskeyHandle(userID: UUID, handle: [UInt8]) throws {
        current.statements.append(
            "INSERT INTO passkey_users (user_id, handle) VALUES (\(userID), \(PGBytes(handle)))")
    }

    func passkeyChallenge(hash: [UInt8]) throws -> PasskeyChallengeRecord? {
        try query(
            """
            SELECT purpose, user_id, expires_at FROM webauthn_challenges
            WHERE challenge_hash = \(PGBytes(hash)) AND tenant = \(tenant) FOR UPDATE
            """
        ).first.flatMap { row in
            guard let purpose = PasskeyChallengeRecord.Purpose(rawValue: try row.decode("purpose")) else { return nil }
            return PasskeyChallengeRecord(
                hash: hash, purpose: purpose, userID: try row.decode("user_id", as: UUID?.self),
                expiresAt: try row.decode("expires_at"))
        }
    }

    func insertPasskeyChallenge(_ challenge: PasskeyChallengeRecord, at date: Date) throws {
        current.statements.append(
            """
            INSERT INTO webauthn_challenges (challenge_hash, purpose, user_id, created_at, expires_at, tenant)
            VALUES (\(PGBytes(challenge.hash)), \(challenge.purpose.rawValue), \(challenge.userID), \(date),
                    \(challenge.expiresAt), \(tenant))
            """)
    }

    func consumePasskeyChallenge(hash: [UInt8]) throws {
        current.statements.append(
            """
            DELETE FROM webauthn_challenges WHERE challenge_hash = \(PGBytes(hash)) AND tenant = \(tenant)
            """)
    }

    private static let passkeyColumns = """
        SELECT id, user_id, credential_id, public_key, algorithm, sign_count, transports, aaguid, attestation,
               backup_eligible, backed_up, name, created_at, last_used_at
        FROM passkeys
        """

    private static func passkey(_ row: PGRow) throws -> PasskeyRecord {
        PasskeyRecord(
            id: try row.decode("id"), userID: try row.decode("user_id"),
            credentialID: try row.decode("credential_id", as: PGBytes.self).bytes,
            publicKey: try row.decode("public_key", as: PGBytes.self).bytes,
            algorithm: try row.decode("algorithm", as: Int64.self),
            signCount: UInt32(clamping: try row.decode("sign_count", as: Int64.self)),
            transports: try row.decode("transports", as: [String].self),
            aaguid: try row.decode("aaguid", as: PGBytes.self).bytes, attestation: try row.decode("attestation"),
            backupEligible: try row.decode("backup_eligible"), backedUp: try row.decode("backed_up"),
            name: try row.decode("name"), createdAt: try row.decode("created_at"),
            lastUsedAt: try row.decode("last_used_at", as: Date?.self))
    }

    func passkeys(userID: UUID) throws -> [PasskeyRecord] {
        try query(
            "\(unsafeRaw: Self.passkeyColumns) WHERE user_id = \(userID) AND tenant = \(tenant) ORDER BY created_at, id"
        ).map(
            Self.passkey)
    }

    func passkey(credentialID: [UInt8]) throws -> PasskeyRecord? {
        try query(
            """
            \(unsafeRaw: Self.passkeyColumns)
            WHERE credential_id = \(PGBytes(credentialID)) AND tenant = \(tenant) FOR UPDATE
            """
        ).first.map(Self.passkey)
    }

    func passkey(id: UUID) throws -> PasskeyRecord? {
        try query("\(unsafeRaw: Self.passkeyColumns) WHERE id = \(id) AND tenant = \(tenant) FOR UPDATE").first.map(
            Self.passkey)
    }

    func insertPasskey(_ passkey: PasskeyRecord) throws {
        current.statements.append(
            """
            INSERT INTO passkeys (id, user_id, credential_id, public_key, algorithm, sign_count, transports, aaguid,
                                  attestation, backup_eligible, backed_up, name, created_at, tenant)
            VALUES (\(passkey.id), \(passkey.userID), \(PGBytes(passkey.credentialID)), \(PGBytes(passkey.publicKey)),
                    \(passkey.algorithm), \(Int64(passkey.signCount)), \(passkey.transports), \(PGBytes(passkey.aaguid)),
                    \(passkey.attestation), \(passkey.backupEligible), \(passkey.backedUp), \(passkey.name),
                    \(passkey.createdAt), \(tenant))
            """)
    }

    func recordPasskeyUse(id: UUID, signCount: UInt32, backedUp: Bool, at date: Date) throws {
        current.statements.append(
            """
            UPDATE passkeys SET sign_count = \(Int64(signCount)), backed_up = \(backedUp), last_used_at = \(date)
            WHERE id = \(id) AND tenant = \(tenant)
            """)
    }

    func renamePasskey(id: UUID, name: String) throws {
        current.statements.append("UPDATE passkeys SET name = \(name) WHERE id = \(id) AND tenant = \(tenant)")
    }

    func deletePasskey(id: UUID) throws {
        current.statements.append("DELETE FROM passkeys WHERE id = \(id) AND tenant = \(tenant)")
    }

    func deletePasskeyHandle(userID: UUID) throws {
        current.statements.append("DELETE FROM passkey_users WHERE user_id = \(userID)")
    }

    func deletePasskeyChallenges(userID: UUID) throws {
        current.statements.append("DELETE FROM webauthn_challenges WHERE user_id = \(userID) AND tenant = \(tenant)")
    }
}
