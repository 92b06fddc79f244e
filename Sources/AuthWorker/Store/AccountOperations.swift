import Foundation
import Messages
import PGStore

/// Operator chores on accounts: deleting a user, purging stale guests. Each deletion and its
/// events are one transaction; the events go out through the outbox.
public struct AccountOperations: Sendable {
    private let configuration: WorkerConfiguration
    private let identifiers: Identifiers
    private let clock: any WorkerClock

    public init(configuration: WorkerConfiguration, clock: any WorkerClock = SystemClock()) {
        self.configuration = configuration
        self.clock = clock
        self.identifiers = Identifiers(clock: clock)
    }

    /// What a deletion did.
    public struct Deletion: Sendable, Equatable {
        public var users: [UUID]
        public var sessionsRevoked: Int
        public var events: [OutboxEvent]
    }

    /// Deletes a user with its identities, sessions and tokens; writes `auth.session.revoked` for
    /// each live session and `auth.user.deleted`.
    /// - Returns: nil when there is no such user.
    public func deleteUser(_ id: UUID, reason: String, connection: PGConnection) throws -> Deletion? {
        try connection.withTransaction { connection in
            guard try connection.query("SELECT id FROM users WHERE id = \(id) FOR UPDATE").first != nil else {
                return nil
            }
            return try delete([id], reason: reason, revokeSessions: true, connection: connection)
        }
    }

    /// Deletes guests created before `cutoff` that never became members, in batches; writes
    /// `auth.user.deleted` (reason `guest_expired`) for each.
    public func purgeGuests(createdBefore cutoff: Date, batchSize: Int = 500, connection: PGConnection) throws
        -> Deletion
    {
        var total = Deletion(users: [], sessionsRevoked: 0, events: [])
        while true {
            let batch = try connection.withTransaction { connection -> Deletion in
                let ids = try connection.query(
                    """
                    SELECT id FROM users
                    WHERE is_guest AND created_at < \(cutoff)
                      AND NOT EXISTS (SELECT 1 FROM identities WHERE identities.user_id = users.id)
                    ORDER BY created_at LIMIT \(batchSize) FOR UPDATE SKIP LOCKED
                    """
                ).map { try $0.decode("id", as: UUID.self) }
                return try delete(ids, reason: "guest_expired", revokeSessions: false, connection: connection)
            }
            total.users += batch.users
            total.events += batch.events
            if batch.users.count < batchSize { return total }
        }
    }

    func delete(_ ids: [UUID], reason: String, revokeSessions: Bool, connection: PGConnection) throws
        -> Deletion
    {
        guard !ids.isEmpty else { return Deletion(users: [], sessionsRevoked: 0, events: []) }
        let now = clock.now()
        let idTexts = ids.map(\.lowercasedString)
        var events: [OutboxEvent] = []
        var revoked = 0
        if revokeSessions {
            let sessions = try connection.query(
                """
                SELECT id, user_id FROM sessions
                WHERE user_id = ANY(\(idTexts)::uuid[]) AND revoked_at IS NULL AND expires_at > \(now)
                """)
            for row in sessions {
                let user: UUID = try row.decode("user_id")
                let session: UUID = try row.decode("id")
                events.append(
                    try OutboxEvent.make(
                        type: UserEventType.sessionRevoked,
                        data: SessionRevokedData(
                            userId: user.lowercasedString, sessionId: session.lowercasedString, reason: "user_deleted"),
                        key: user.lowercasedString, traceparent: nil, identifiers: identifiers,
                        configuration: configuration, now: now))
                revoked += 1
            }
        }
        try connection.query("DELETE FROM users WHERE id = ANY(\(idTexts)::uuid[])")
        for id in ids {
            events.append(
                try OutboxEvent.make(
                    type: UserEventType.deleted, data: UserDeletedData(userId: id.lowercasedString, reason: reason),
                    key: id.lowercasedString, traceparent: nil, identifiers: identifiers, configuration: configuration,
                    now: now))
        }
        try PostgresAuthStore.insertOutbox(connection, events)
        return Deletion(users: ids, sessionsRevoked: revoked, events: events)
    }

    /// Parses `30d`, `12h`, `90m`, `3600s` (or plain seconds).
    public static func duration(_ text: String) -> TimeInterval? {
        let units: [Character: TimeInterval] = ["s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604_800]
        guard let last = text.last else { return nil }
        if let unit = units[last], let value = Double(text.dropLast()), value > 0 { return value * unit }
        if let value = Double(text), value > 0 { return value }
        return nil
    }
}
