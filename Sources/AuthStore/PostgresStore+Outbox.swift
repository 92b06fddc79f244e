import AuthDomain
import Foundation
import PGStore

/// The outbox: events published after their transaction, deleted once the broker has them.
extension PostgresStore {
    // MARK: - The outbox

    /// Takes published events out of the outbox.
    public func deletePublished(_ eventIDs: [UUID]) async throws {
        guard !eventIDs.isEmpty else { return }
        try await pool.withConnection { try $0.query(Self.deletePublished(eventIDs)) }
    }

    /// How many events wait in the outbox (written, not yet acknowledged by the broker).
    public static let outboxBacklog: PGQuery = "SELECT count(*) AS backlog FROM outbox WHERE published_at IS NULL"

    /// Events left unpublished (oldest first), for the relay that runs after a crash.
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
