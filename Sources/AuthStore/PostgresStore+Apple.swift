import AuthDomain
import Foundation
import PGStore

/// Sign in with Apple's REST API: the durable jobs that exchange codes and revoke tokens.
extension PostgresStore {
    // MARK: - Apple's REST API

    /// Takes up to `limit` due jobs, each leased for `lease` (another replica skips them, and
    /// takes them again if this one dies before it finishes).
    public func claimAppleJobs(limit: Int, at date: Date, lease: TimeInterval) async throws -> [AppleJob] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                UPDATE apple_jobs SET next_attempt_at = \(date + lease)
                WHERE id IN (SELECT id FROM apple_jobs WHERE finished_at IS NULL AND next_attempt_at <= \(date)
                             ORDER BY next_attempt_at, id LIMIT \(limit) FOR UPDATE SKIP LOCKED)
                RETURNING id, kind, subject, client_id, secret_sealed, attempts, created_at, tenant
                """
            ).map { row in
                var job = AppleJob(
                    id: try row.decode("id"), kind: AppleJob.Kind(rawValue: try row.decode("kind")) ?? .revoke,
                    subject: try row.decode("subject"), clientID: try row.decode("client_id"),
                    secretSealed: try row.decode("secret_sealed", as: PGBytes.self).bytes,
                    attempts: try row.decode("attempts"), createdAt: try row.decode("created_at"))
                job.tenant = try row.decode("tenant")
                return job
            }
        }
    }

    /// Ends a job for good (done, or definitely refused), with its audit row.
    public func finishAppleJob(_ job: AppleJob, outcome: String, at date: Date) async throws {
        var entry = AuditEntry(
            at: date, userID: nil, action: "apple_" + job.kind.rawValue, outcome: outcome,
            requestID: job.id.lowercasedString, actor: "worker")
        entry.tenant = job.tenant
        let audit = entry
        try await pool.withConnection { connection in
            try connection.withTransaction { connection in
                try connection.pipeline(
                    [
                        """
                        UPDATE apple_jobs SET finished_at = \(date), outcome = \(outcome), secret_sealed = ''::bytea
                        WHERE id = \(job.id) AND tenant = \(job.tenant)
                        """
                    ] + [Writes.auditInsert([audit])].compactMap { $0 })
            }
        }
    }

    /// Tries a job again at `next`.
    public func retryAppleJob(_ job: AppleJob, at next: Date) async throws {
        try await pool.withConnection { connection in
            _ = try connection.query(
                """
                UPDATE apple_jobs SET attempts = attempts + 1, next_attempt_at = \(next)
                WHERE id = \(job.id) AND tenant = \(job.tenant)
                """)
        }
    }

    /// Keeps the refresh token an exchange brought, and finishes the exchange, in one
    /// transaction. The token is kept only for the account whose sign-in brought the code: when
    /// the Apple identity is gone meanwhile, or is a newer one (the account was deleted and the
    /// same Apple user signed up again before the exchange ran), its revocation is queued instead.
    /// A token it replaces that a deleted account left behind for the same subject is revoked
    /// too, never dropped while Apple still honours it.
    /// - Parameters:
    ///   - revocationID: the id of the job that revokes the exchanged token, if it is not kept.
    ///   - replacedRevocationID: the id of the job that revokes the token it replaces, if any.
    /// - Returns: true when kept, false when its revocation was queued.
    public func keepAppleToken(
        from exchange: AppleJob, refreshTokenSealed: [UInt8], revocationID: UUID, replacedRevocationID: UUID,
        at date: Date
    ) async throws -> Bool {
        try await pool.withConnection { connection in
            try connection.withTransaction { connection in
                let kept = try !connection.query(
                    """
                    SELECT 1 AS found FROM identities
                    WHERE provider = 'apple' AND subject = \(exchange.subject) AND tenant = \(exchange.tenant)
                      AND created_at <= (SELECT created_at FROM apple_jobs WHERE id = \(exchange.id))
                    FOR UPDATE
                    """
                ).isEmpty
                var statements: [PGQuery] = [
                    """
                    UPDATE apple_jobs
                    SET finished_at = \(date), outcome = \(kept ? "exchanged" : "exchanged_after_deletion"),
                        secret_sealed = ''::bytea
                    WHERE id = \(exchange.id) AND tenant = \(exchange.tenant)
                    """
                ]
                if kept {
                    // A token kept before this account's identity was made is a deleted account's:
                    // revoked. The same account's earlier token is replaced without a revocation:
                    // Apple's revocation ends the user's authorization of the app, the new token's too.
                    let replaced = try connection.query(
                        """
                        SELECT t.client_id, t.refresh_token_sealed
                        FROM apple_tokens t
                        JOIN identities i ON i.provider = 'apple' AND i.subject = t.subject AND i.tenant = t.tenant
                        WHERE t.subject = \(exchange.subject) AND t.tenant = \(exchange.tenant)
                          AND t.updated_at < i.created_at
                        FOR UPDATE OF t
                        """
                    ).first
                    if let replaced {
                        statements.append(
                            """
                            INSERT INTO apple_jobs (id, kind, subject, client_id, secret_sealed, next_attempt_at, created_at,
                                                    tenant)
                            VALUES (\(replacedRevocationID), 'revoke', \(exchange.subject),
                                    \(try replaced.decode("client_id", as: String.self)),
                                    \(try replaced.decode("refresh_token_sealed", as: PGBytes.self)), \(date), \(date),
                                    \(exchange.tenant))
                            """)
                    }
                    statements.append(
                        """
                        INSERT INTO apple_tokens (subject, client_id, refresh_token_sealed, updated_at, tenant)
                        VALUES (\(exchange.subject), \(exchange.clientID), \(PGBytes(refreshTokenSealed)), \(date),
                                \(exchange.tenant))
                        ON CONFLICT (subject, tenant) DO UPDATE SET client_id = EXCLUDED.client_id,
                            refresh_token_sealed = EXCLUDED.refresh_token_sealed, updated_at = EXCLUDED.updated_at
                        """)
                } else {
                    statements.append(
                        """
                        INSERT INTO apple_jobs (id, kind, subject, client_id, secret_sealed, next_attempt_at, created_at,
                                                tenant)
                        VALUES (\(revocationID), 'revoke', \(exchange.subject), \(exchange.clientID),
                                \(PGBytes(refreshTokenSealed)), \(date), \(date), \(exchange.tenant))
                        """)
                }
                try connection.pipeline(statements)
                return kept
            }
        }
    }

    /// Jobs not finished, and the age of the oldest: the backlog an alert watches.
    public func appleJobBacklog(at date: Date) async throws -> (count: Int, oldest: TimeInterval) {
        try await pool.withConnection { connection in
            let row = try connection.query(
                """
                SELECT count(*) AS n, COALESCE(EXTRACT(EPOCH FROM \(date) - min(created_at)), 0)::float8 AS oldest
                FROM apple_jobs WHERE finished_at IS NULL
                """
            ).first
            return (try row?.decode("n", as: Int.self) ?? 0, try row?.decode("oldest", as: Double.self) ?? 0)
        }
    }

    /// A user's audit trail, oldest first (`auth-worker users audit`).
    public func auditTrail(
        userID: UUID, since: Date?, tenant: String
    ) async throws -> [AuditEntry] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                \(unsafeRaw: PostgresUnitOfWork.auditColumns)
                WHERE user_id = \(userID) AND tenant = \(tenant) AND at >= \(since ?? Date(timeIntervalSince1970: 0))
                ORDER BY at, id
                """
            ).map(Decode.audit)
        }
    }
}
