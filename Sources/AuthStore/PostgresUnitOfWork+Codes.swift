import AuthDomain
import Foundation
import PGStore

/// One-time codes sent by e-mail, and the second factor with its recovery codes.
extension PostgresUnitOfWork {
    func liveCode(email: String, purpose: String) throws -> OneTimeCodeRecord? {
        try query(
            """
            \(unsafeRaw: Self.codeColumns)
            WHERE email = \(email) AND purpose = \(purpose) AND used_at IS NULL AND tenant = \(tenant)
            ORDER BY created_at DESC, id DESC LIMIT 1 FOR UPDATE
            """
        ).first.map(Decode.code)
    }

    func code(linkHash: [UInt8]) throws -> OneTimeCodeRecord? {
        try query(
            "\(unsafeRaw: Self.codeColumns) WHERE link_hash = \(PGBytes(linkHash)) AND tenant = \(tenant) FOR UPDATE"
        ).first.map(Decode.code)
    }

    func mfaFactor(userID: UUID) throws -> MFAFactorRecord? {
        if usesCache, cache.activeFactors[userID] == false { return nil }
        return try query(
            """
            SELECT user_id, secret_sealed, created_at, enabled_at, last_used_step FROM mfa_factors
            WHERE user_id = \(userID) FOR UPDATE
            """
        ).first.map { row in
            MFAFactorRecord(
                userID: try row.decode("user_id"),
                secretSealed: try row.decode("secret_sealed", as: PGBytes.self).bytes,
                createdAt: try row.decode("created_at"),
                enabledAt: try row.decode("enabled_at", as: Date?.self),
                lastUsedStep: try row.decode("last_used_step", as: Int64?.self))
        }
    }

    func hasUnusedRecoveryCode(userID: UUID, hash: [UInt8]) throws -> Bool {
        try !query(
            """
            SELECT 1 AS found FROM mfa_recovery_codes
            WHERE user_id = \(userID) AND code_hash = \(PGBytes(hash)) AND used_at IS NULL FOR UPDATE
            """
        ).isEmpty
    }

    func insertCode(_ code: NewOneTimeCode) throws {
        current.statements.append(
            """
            UPDATE one_time_codes SET used_at = \(code.createdAt)
            WHERE email = \(code.email) AND purpose = \(code.purpose) AND used_at IS NULL AND tenant = \(tenant)
            """)
        current.statements.append(
            """
            INSERT INTO one_time_codes (id, user_id, purpose, email, code_hmac, link_hash, created_at, expires_at,
                                        tenant)
            VALUES (\(code.id), \(code.userID), \(code.purpose), \(code.email), \(PGBytes(code.codeHMAC)),
                    \(PGBytes(code.linkHash)), \(code.createdAt), \(code.expiresAt), \(tenant))
            """)
    }

    func recordCodeAttempt(id: UUID) throws {
        current.statements.append(
            "UPDATE one_time_codes SET attempts = attempts + 1 WHERE id = \(id) AND tenant = \(tenant)")
    }

    func useCode(id: UUID, at date: Date) throws {
        current.statements.append(
            """
            UPDATE one_time_codes SET used_at = \(date) WHERE id = \(id) AND used_at IS NULL AND tenant = \(tenant)
            """)
    }

    func voidCodes(userID: UUID, purposes: [String], at date: Date) throws {
        current.statements.append(
            """
            UPDATE one_time_codes SET used_at = \(date)
            WHERE user_id = \(userID) AND purpose = ANY(\(PGArray(purposes))) AND used_at IS NULL AND tenant = \(tenant)
            """)
    }

    func savePendingFactor(userID: UUID, secretSealed: [UInt8], at date: Date) throws {
        cache.activeFactors[userID] = nil
        current.statements.append(
            """
            INSERT INTO mfa_factors (user_id, secret_sealed, created_at) VALUES (\(userID), \(PGBytes(secretSealed)), \(date))
            ON CONFLICT (user_id) DO UPDATE SET secret_sealed = EXCLUDED.secret_sealed, created_at = EXCLUDED.created_at
            WHERE mfa_factors.enabled_at IS NULL
            """)
    }

    func enableFactor(userID: UUID, step: Int64, recoveryHashes: [[UInt8]], at date: Date) throws {
        cache.activeFactors[userID] = nil
        current.statements.append(
            "UPDATE mfa_factors SET enabled_at = \(date), last_used_step = \(step) WHERE user_id = \(userID)")
        current.statements.append("DELETE FROM mfa_recovery_codes WHERE user_id = \(userID)")
        for hash in recoveryHashes {
            current.statements.append(
                "INSERT INTO mfa_recovery_codes (user_id, code_hash) VALUES (\(userID), \(PGBytes(hash)))")
        }
    }

    func recordFactorStep(userID: UUID, step: Int64) throws {
        current.statements.append("UPDATE mfa_factors SET last_used_step = \(step) WHERE user_id = \(userID)")
    }

    func useRecoveryCode(userID: UUID, hash: [UInt8], at date: Date) throws {
        current.statements.append(
            """
            UPDATE mfa_recovery_codes SET used_at = \(date)
            WHERE user_id = \(userID) AND code_hash = \(PGBytes(hash)) AND used_at IS NULL
            """)
    }

    func deleteFactor(userID: UUID) throws {
        cache.activeFactors[userID] = nil
        current.statements.append("DELETE FROM mfa_factors WHERE user_id = \(userID)")
        current.statements.append("DELETE FROM mfa_recovery_codes WHERE user_id = \(userID)")
    }
}
