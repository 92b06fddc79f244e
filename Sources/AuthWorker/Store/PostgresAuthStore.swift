import Foundation
import PGStore

/// `AuthStore` on PostgreSQL: every write is one transaction, so a crash leaves all or nothing.
public struct PostgresAuthStore: AuthStore {
    private let pool: PGPool

    public init(pool: PGPool) {
        self.pool = pool
    }

    public func createAccount(_ plan: NewAccount) async throws -> AccountWrite {
        try await pool.withTransaction { connection in
            let recorded = try connection.query(
                """
                INSERT INTO processed_requests (request_id, method, status, user_id, session_id, processed_at, expires_at)
                VALUES (\(plan.requestID), \(plan.method), 'ok', \(plan.user.id), \(plan.session.id),
                        \(plan.user.createdAt), \(plan.idempotencyExpiresAt))
                ON CONFLICT (request_id) DO NOTHING
                """)
            guard recorded.affectedRows == 1 else { return .duplicate }

            let user = plan.user
            var handle: String?
            for candidate in plan.handleCandidates {
                let inserted = try connection.query(
                    """
                    INSERT INTO users (id, handle, name, email, email_verified, is_private_email, is_guest,
                                       created_at, updated_at)
                    VALUES (\(user.id), \(candidate), \(user.name), \(user.email), \(user.emailVerified),
                            \(user.isPrivateEmail), \(user.isGuest), \(user.createdAt), \(user.createdAt))
                    ON CONFLICT (handle) DO NOTHING
                    """)
                if inserted.affectedRows == 1 {
                    handle = candidate
                    break
                }
            }
            guard let handle else {
                throw PGError(.query, serverMessage: "every handle candidate is taken", step: "INSERT users")
            }

            var providers: [String] = []
            if let identity = plan.identity {
                try connection.query(
                    """
                    INSERT INTO identities (provider, subject, user_id, email, email_verified, is_private_email,
                                            password_hash, created_at, last_login_at)
                    VALUES (\(identity.provider), \(identity.subject), \(user.id), \(identity.email),
                            \(identity.emailVerified), \(identity.isPrivateEmail), \(identity.passwordHash),
                            \(user.createdAt), \(user.createdAt))
                    """)
                providers.append(identity.provider)
            }

            let session = plan.session
            try connection.query(
                """
                INSERT INTO sessions (id, user_id, provider, device_name, device_platform, abilities, created_at, expires_at)
                VALUES (\(session.id), \(user.id), \(session.provider), \(session.deviceName), \(session.devicePlatform),
                        \(session.abilities), \(session.createdAt), \(session.expiresAt))
                """)
            try connection.query(
                """
                INSERT INTO access_tokens (id, session_id, token_hash, name, abilities, created_at, expires_at)
                VALUES (\(session.accessTokenID), \(session.id), \(PGBytes(session.accessTokenHash)), \(session.deviceName),
                        \(session.abilities), \(session.createdAt), \(session.accessTokenExpiresAt))
                """)
            try connection.query(
                """
                INSERT INTO refresh_tokens (id, session_id, token_hash, created_at, expires_at)
                VALUES (\(session.refreshTokenID), \(session.id), \(PGBytes(session.refreshTokenHash)),
                        \(session.createdAt), \(session.refreshTokenExpiresAt))
                """)

            let stored = StoredUser(
                id: user.id, handle: handle, name: user.name, email: user.email, emailVerified: user.emailVerified,
                isPrivateEmail: user.isPrivateEmail, isGuest: user.isGuest, providers: providers,
                createdAt: user.createdAt)
            let events = try plan.events(stored)
            for event in events {
                try connection.query(
                    """
                    INSERT INTO outbox (event_id, topic, message_key, payload, created_at)
                    VALUES (\(event.id), \(event.topic), \(event.key), \(PGBytes(event.payload)), \(event.createdAt))
                    """)
            }
            return .created(stored, events: events)
        }
    }

    public func markPublished(_ eventIDs: [UUID], at date: Date) async throws {
        guard !eventIDs.isEmpty else { return }
        let ids = eventIDs.map(\.pgText)
        try await pool.withConnection { connection in
            try connection.query(
                "UPDATE outbox SET published_at = \(date) WHERE event_id = ANY(\(ids)::uuid[]) AND published_at IS NULL"
            )
        }
    }

    public func unpublishedEvents(olderThan date: Date, limit: Int) async throws -> [OutboxEvent] {
        try await pool.withConnection { connection in
            try connection.query(
                """
                SELECT event_id, topic, message_key, payload, created_at FROM outbox
                WHERE published_at IS NULL AND created_at < \(date)
                ORDER BY seq LIMIT \(limit)
                """
            ).map { row in
                OutboxEvent(
                    id: try row.decode("event_id"), topic: try row.decode("topic"), key: try row.decode("message_key"),
                    payload: try row.decode("payload", as: PGBytes.self).bytes, createdAt: try row.decode("created_at"))
            }
        }
    }
}
