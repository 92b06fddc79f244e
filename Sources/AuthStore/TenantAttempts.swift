import AuthDomain
import Foundation
import PGStore

/// What flows ask the store before a batch (password attempts counted with their credential,
/// rate limits reserved, a token's password address), as one tenant's: its throttles and rate
/// limits are counted apart from the other tenants' (`TenantScope.scoped`), and it reads the
/// tenant's accounts only. A tenant's flows are given its own (`PostgresStore.attempts(for:)`).
public struct TenantAttempts: PasswordAttempts {
    let store: PostgresStore
    public let tenant: String

    /// Counts a password attempt before it is verified, and reads the credential to verify it
    /// against, in one round trip. Counting first is what holds the limit when many attempts for
    /// one account arrive at once, on one replica or several.
    /// - Parameter email: the normalised address, nil when implausible (counted all the same).
    public func reservePasswordAttempt(key: String, email: String?, at date: Date, policy: ThrottlePolicy)
        async throws -> PasswordAttempt
    {
        let key = TenantScope.scoped(key, in: tenant)
        let tenant = tenant
        let results = try await store.attempts.withConnection { connection in
            try connection.pipeline([
                """
                SELECT allowed, failures, locked_until FROM auth_reserve_password_attempt(
                    \(key), \(date), make_interval(secs => \(policy.window)), \(PostgresStore.integer(policy.threshold)),
                    make_interval(secs => \(policy.baseDelay)), make_interval(secs => \(policy.maximumDelay)))
                """,
                """
                SELECT user_id, password_hash FROM identities
                WHERE provider = 'password' AND subject = \(email) AND tenant = \(tenant) AND password_hash IS NOT NULL
                """,
            ])
        }
        guard results.count == 2, let reservation = results[0].first else {
            throw PGError(.decoding, detail: "the attempt was not counted")
        }
        let credential = try results[1].first.map {
            PasswordCredential(userID: try $0.decode("user_id"), passwordHash: try $0.decode("password_hash"))
        }
        return PasswordAttempt(
            allowed: try reservation.decode("allowed"), failures: try reservation.decode("failures"),
            lockedUntil: try reservation.decode("locked_until", as: Date?.self), credential: credential)
    }

    public func reserveRateLimits(_ reservations: [RateLimitReservation], at date: Date) async throws
        -> [RateLimitGrant]
    {
        guard !reservations.isEmpty else { return [] }
        let tenant = tenant
        return try await store.attempts.withConnection { connection in
            var grants: [RateLimitGrant] = []
            for reservation in reservations {
                let row = try connection.query(
                    """
                    SELECT granted, window_end FROM auth_reserve_rate_limit(
                        \(TenantScope.scoped(reservation.bucket, in: tenant)), \(date),
                        make_interval(secs => \(reservation.limit.window)),
                        \(PostgresStore.integer(reservation.limit.count)), \(PostgresStore.integer(reservation.wanted)))
                    """
                ).first
                guard let row else { throw PGError(.decoding, detail: "a rate limit was not reserved") }
                let grant = RateLimitGrant(granted: try row.decode("granted"), windowEnd: try row.decode("window_end"))
                grants.append(grant)
                // A refusal takes nothing from the buckets after it.
                if grant.granted < reservation.wanted { break }
            }
            return grants
        }
    }

    /// The address of the password identity of the user an access token signs in as (by its
    /// session, or an opaque token's SHA-256): what `change_password` throttles and verifies.
    /// Nil when the token is unknown, its user has no password, or is another tenant's.
    public func passwordEmail(sessionID: UUID?, accessTokenHash: [UInt8]?) async throws -> String? {
        let tenant = tenant
        return try await store.attempts.withConnection { connection in
            if let sessionID {
                return try connection.query(
                    """
                    SELECT i.subject FROM sessions s
                    JOIN identities i ON i.user_id = s.user_id AND i.provider = 'password' AND i.tenant = \(tenant)
                    WHERE s.id = \(sessionID)
                    """
                ).first?.decode("subject")
            }
            guard let accessTokenHash else { return nil }
            return try connection.query(
                """
                SELECT i.subject FROM access_tokens a
                JOIN sessions s ON s.id = a.session_id
                JOIN identities i ON i.user_id = s.user_id AND i.provider = 'password' AND i.tenant = \(tenant)
                WHERE a.token_hash = \(PGBytes(accessTokenHash))
                """
            ).first?.decode("subject")
        }
    }
}

extension PostgresStore: PasswordAttempts {
    /// The flows' questions before a batch, as `tenant`'s.
    public func attempts(for tenant: String) -> TenantAttempts { TenantAttempts(store: self, tenant: tenant) }

    /// `TenantAttempts.reservePasswordAttempt`, as the default tenant's.
    public func reservePasswordAttempt(key: String, email: String?, at date: Date, policy: ThrottlePolicy)
        async throws -> PasswordAttempt
    {
        try await attempts(for: TenantScope.defaultName).reservePasswordAttempt(
            key: key, email: email, at: date, policy: policy)
    }

    /// `TenantAttempts.reserveRateLimits`, as the default tenant's.
    public func reserveRateLimits(_ reservations: [RateLimitReservation], at date: Date) async throws
        -> [RateLimitGrant]
    {
        try await attempts(for: TenantScope.defaultName).reserveRateLimits(reservations, at: date)
    }

    /// `TenantAttempts.passwordEmail`, as the default tenant's.
    public func passwordEmail(sessionID: UUID?, accessTokenHash: [UInt8]?) async throws -> String? {
        try await attempts(for: TenantScope.defaultName).passwordEmail(
            sessionID: sessionID, accessTokenHash: accessTokenHash)
    }
}
