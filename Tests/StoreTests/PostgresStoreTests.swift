import AuthCrypto
import Foundation
import Kafka
import PGStore
import ServiceKit
import Synchronization
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// The store's batch transaction: one round trip of reads, writes collected per item, one of
/// writes; a refused item leaves nothing; a conflict on the server retries the batch item by item.
@Suite(.requiresDatabase, .timeLimit(.minutes(4))) struct PostgresStoreTests {
    let now = Date(timeIntervalSince1970: 1_795_953_600)

    func store() async throws -> (PostgresStore, PGConnection) {
        let url = try await IntegrationEnvironment.makeMigratedDatabase()
        return (PostgresStore(pool: PGPool(conninfo: url, size: 2)), try PGConnection(conninfo: url))
    }

    func user(_ seed: UInt8) -> NewUser {
        NewUser(
            id: UUID(uuid: (seed, 0, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, seed)), name: nil, email: nil,
            emailVerified: false, isPrivateEmail: false, isGuest: true, createdAt: now)
    }

    func count(_ connection: PGConnection, _ table: String) throws -> Int {
        try connection.query(PGQuery(unsafeSQL: "SELECT count(*) AS n FROM \(table)")).first?.decode("n") ?? -1
    }

    @Test func aTakenHandleFallsThroughToTheNextCandidate() async throws {
        let (store, connection) = try await store()
        var prefetch = Prefetch()
        prefetch.handles = ["guest_a", "guest_b"]
        let outcomes = try await store.runBatch([user(1), user(2), user(3)], prefetch: prefetch) { user, unit in
            try unit.insertUser(user, handles: ["guest_a", "guest_b", "guest_c"]).handle
        }
        let handles = outcomes.compactMap { if case .written(let handle, _) = $0 { handle } else { nil } }
        #expect(handles == ["guest_a", "guest_b", "guest_c"], "one batch never hands out a handle twice")
        let later = try await store.runBatch([user(4)], prefetch: Prefetch()) { user, unit in
            try unit.insertUser(user, handles: ["guest_b", "guest_d"]).handle
        }
        guard case .written(let handle, _) = later.first else { throw Failure("not written") }
        #expect(handle == "guest_d")
        #expect(try count(connection, "users") == 4)
    }

    /// A row another transaction committed under the same unique key (here: the same user id
    /// written twice, as a retried commit whose acknowledgement was lost would): the store says
    /// `conflict`, so the worker looks the request up again instead of reading a SQLSTATE.
    @Test func aUniqueKeyWrittenMeanwhileIsAConflict() async throws {
        let (store, connection) = try await store()
        let identity = NewIdentity(
            provider: "apple", subject: "001.same", email: nil, emailVerified: false, isPrivateEmail: false,
            passwordHash: nil)
        _ = try await store.runBatch([user(1)], prefetch: Prefetch()) { user, unit in
            let stored = try unit.insertUser(user, handles: ["first"])
            try unit.insertIdentity(identity, userID: stored.id, at: self.now)
            return stored.id
        }
        // Written without reading it first (as a retry of an unacknowledged commit would).
        let outcomes = try await store.runBatch([user(2), user(3)], prefetch: Prefetch()) { user, unit in
            let stored = try unit.insertUser(user, handles: ["h_\(user.id.uuidString.prefix(4))"])
            if user.id == self.user(2).id { try unit.insertIdentity(identity, userID: stored.id, at: self.now) }
            return stored.id
        }
        guard case .conflict = outcomes[0] else { throw Failure("not a conflict: \(outcomes[0])") }
        guard case .written = outcomes[1] else { throw Failure("the other item was not written") }
        #expect(try count(connection, "users") == 2)
    }

    @Test func aRefusedItemLeavesNothingAndTheOthersCommit() async throws {
        let (store, connection) = try await store()
        struct Refused: Error {}
        let outcomes = try await store.runBatch([user(1), user(2), user(3)], prefetch: Prefetch()) { user, unit in
            let stored = try unit.insertUser(user, handles: ["h_\(user.id.uuidString.prefix(4))"])
            if user.id == self.user(2).id { throw Refused() }
            return stored.id
        }
        #expect(outcomes.count == 3)
        if case .refused(let error) = outcomes[1] { #expect(error is Refused) } else { Issue.record("not refused") }
        #expect(try count(connection, "users") == 2)
    }

    @Test func aConflictOnTheServerIsRetriedItemByItem() async throws {
        let (store, connection) = try await store()
        // Another replica inserts a user whose handle this batch is about to take, after the
        // batch read the handles: the batch's insert fails on the server, then goes item by item.
        // (The other connection is only used from inside the batch, on the batch's thread.)
        nonisolated(unsafe) let replica = connection
        let outcomes = try await store.runBatch([user(1), user(2)], prefetch: Prefetch()) { user, unit in
            if user.id == self.user(2).id {
                try replica.query(
                    """
                    INSERT INTO users (id, handle, is_guest, created_at, updated_at)
                    VALUES (\(UUID()), 'guest_taken', true, now(), now())
                    """)
            }
            return try unit.insertUser(
                user, handles: [user.id == self.user(1).id ? "guest_one" : "guest_taken", "guest_two"]
            )
            .handle
        }
        let handles = outcomes.map { outcome -> String in
            switch outcome {
            case .written(let handle, _): handle
            case .refused(let error): "refused: \(error)"
            case .conflict: "conflict"
            }
        }
        // The careful retry reads the handle as taken and falls through to the next candidate.
        #expect(handles == ["guest_one", "guest_two"])
        #expect(try count(connection, "users") == 3)
    }

    @Test func readsSeeTheWritesOfEarlierItems() async throws {
        let (store, _) = try await store()
        let identity = NewIdentity(
            provider: "apple", subject: "s-1", email: nil, emailVerified: false, isPrivateEmail: false,
            passwordHash: nil)
        var prefetch = Prefetch()
        prefetch.identities = [IdentityKey(provider: "apple", subject: "s-1")]
        // Both items read the identity in the batch's prefetch; the second must see the first's insert.
        let outcomes = try await store.runBatch([user(1), user(2)], prefetch: prefetch) { user, unit in
            if let existing = try unit.identity(provider: "apple", subject: "s-1") { return existing.userID }
            _ = try unit.insertUser(user, handles: ["h_\(user.id.uuidString.prefix(4))"])
            try unit.insertIdentity(identity, userID: user.id, at: self.now)
            return user.id
        }
        let owners = outcomes.compactMap { if case .written(let id, _) = $0 { id } else { nil } }
        #expect(owners == [user(1).id, user(1).id])
    }

    @Test func aBatchRotatesItsTokensInOneUpdateAsIfOneByOne() async throws {
        let (store, connection) = try await store()
        let users = (1...4).map { _ in UUID() }
        let sessions = (1...4).map { _ in UUID() }
        let tokens = (1...4).map { _ in UUID() }
        let hashes = (1...4).map { SHA256.hash(Array("r\($0)".utf8)) }
        try connection.query(
            """
            INSERT INTO users (id, handle, email_verified, is_private_email, is_guest, created_at, updated_at)
            SELECT id, 'user_' || id, false, false, true, now(), now() FROM unnest(\(PGArray(users))) AS id
            """)
        try connection.query(
            """
            INSERT INTO sessions (id, user_id, provider, abilities, created_at, expires_at)
            SELECT id, user_id, 'guest', '{guest}', now(), now() + interval '1 day'
            FROM unnest(\(PGArray(sessions)), \(PGArray(users))) AS t(id, user_id)
            """)
        try connection.query(
            """
            INSERT INTO refresh_tokens (id, session_id, token_hash, created_at, expires_at)
            SELECT id, session_id, hash, now(), now() + interval '1 day'
            FROM unnest(\(PGArray(tokens)), \(PGArray(sessions)), \(PGArray(hashes.map(PGBytes.init))))
                AS t(id, session_id, hash)
            """)
        struct Item: Sendable {
            var used: Int
            var successor: UUID
            var at: Date
        }
        // Tokens 0 and 1 are rotated, and then token 0 again by a request that did not read it
        // first: the last rotation of a token stands, as when each was its own statement. Token 3
        // is read and left alone, token 2 neither read nor rotated.
        let items = [
            Item(used: 0, successor: UUID(), at: now), Item(used: 1, successor: UUID(), at: now + 1),
            Item(used: 0, successor: UUID(), at: now + 2),
        ]
        var prefetch = Prefetch()
        prefetch.refreshTokens = [hashes[0], hashes[1], hashes[3]]
        let outcomes = try await store.runBatch(items, prefetch: prefetch) { item, unit in
            try unit.rotate(
                TokenRotation(
                    sessionID: sessions[item.used], usedTokenID: tokens[item.used], successorID: item.successor,
                    successorHash: SHA256.hash(Array(item.successor.uuidString.utf8)),
                    successorExpiresAt: item.at + 86_400, successorSealed: Array(item.successor.uuidString.utf8),
                    accessTokenID: UUID(), accessTokenHash: nil, accessTokenExpiresAt: item.at + 900,
                    abilities: ["guest"], deviceName: nil, at: item.at))
            return item.successor
        }
        #expect(outcomes.count == 3)
        for outcome in outcomes {
            if case .written = outcome { continue }
            Issue.record("not written: \(outcome)")
        }
        var byID: [UUID: (usedAt: Date?, replacedBy: UUID?, sealed: [UInt8]?)] = [:]
        for row in try connection.query(
            "SELECT id, used_at, replaced_by, successor_sealed FROM refresh_tokens WHERE id = ANY(\(PGArray(tokens)))")
        {
            byID[try row.decode("id")] = (
                try row.decode("used_at", as: Date?.self), try row.decode("replaced_by", as: UUID?.self),
                try row.decode("successor_sealed", as: PGBytes?.self)?.bytes
            )
        }
        for (token, item) in [(tokens[0], items[2]), (tokens[1], items[1])] {
            let row = try #require(byID[token])
            #expect(row.usedAt == item.at)
            #expect(row.replacedBy == item.successor)
            #expect(row.sealed == Array(item.successor.uuidString.utf8))
        }
        for untouched in [tokens[2], tokens[3]] {
            let row = try #require(byID[untouched])
            #expect(row.usedAt == nil && row.replacedBy == nil && row.sealed == nil)
        }
        // The three successors, each a child of the token it replaced.
        let children = try connection.query(
            """
            SELECT count(*) AS n FROM refresh_tokens
            WHERE parent_id IS NOT NULL AND id = ANY(\(PGArray(items.map(\.successor))))
            """)
        #expect(try children.first?.decode("n", as: Int.self) == 3)
        // One update statement for a batch's rotations (it was one a rotation), which meets each
        // token once: the last rotation of token 0, not the first (which of two rows an update
        // meeting a row twice applies depends on its plan, so the check above alone could pass).
        var writes = Writes()
        for item in items {
            writes.rotations.append(
                RotationRow(
                    usedTokenID: tokens[item.used], at: item.at, successorID: item.successor, successorSealed: []))
        }
        let updates = writes.queries().filter { $0.sql.contains("UPDATE refresh_tokens") }
        #expect(updates.count == 1)
        // A successor's id is among the update's parameters, in binary or as text.
        func sends(_ id: UUID) -> Bool {
            let raw = withUnsafeBytes(of: id.uuid) { Array($0) }
            let text = Array(id.uuidString.lowercased().utf8)
            return updates.flatMap(\.parameters).contains { parameter in
                guard let bytes = parameter?.bytes else { return false }
                return bytes.firstRange(of: raw) != nil || bytes.firstRange(of: text) != nil
            }
        }
        #expect(sends(items[2].successor) && sends(items[1].successor))
        #expect(!sends(items[0].successor))
    }

    @Test func rateLimitsCountWithinTheBatchAndAcrossBatches() async throws {
        let (store, connection) = try await store()
        var prefetch = Prefetch()
        prefetch.rateLimitBuckets = ["guest:a"]
        let first = try await store.runBatch(Array(0..<3), prefetch: prefetch) { _, unit in
            let used = try unit.rateLimitUsage(bucket: "guest:a", at: self.now, window: 60)
            try unit.recordRateLimitedUse(bucket: "guest:a", at: self.now, window: 60)
            return used
        }
        let usages = first.compactMap { if case .written(let used, _) = $0 { used } else { nil } }
        #expect(usages == [0, 1, 2])
        let second = try await store.runBatch([0], prefetch: prefetch) { _, unit in
            try unit.rateLimitUsage(bucket: "guest:a", at: self.now + 1, window: 60)
        }
        guard case .written(let used, _) = second.first else { throw Failure("not written") }
        #expect(used == 3)
        let stored = try connection.query("SELECT count FROM rate_limits WHERE bucket = 'guest:a'").first
        #expect(try stored?.decode("count", as: Int.self) == 3)
        let afterWindow = try await store.runBatch([0], prefetch: prefetch) { _, unit in
            try unit.rateLimitUsage(bucket: "guest:a", at: self.now + 61, window: 60)
        }
        guard case .written(let fresh, _) = afterWindow.first else { throw Failure("not written") }
        #expect(fresh == 0, "a new window starts over")
    }

    /// Throttle rows and rate-limit buckets are keyed by what clients send (e-mails, client keys):
    /// without a purge, a stream of distinct keys grows them for ever. Expired ones go; live ones
    /// (a lock still running, a window still open) stay.
    @Test func expiredThrottlesAndBucketsArePurgedAndLiveOnesKept() async throws {
        let (store, connection) = try await store()
        let hour: TimeInterval = 3600
        try connection.query(
            """
            INSERT INTO login_throttle (account_key, failures, last_failure_at, locked_until) VALUES
              ('old', 3, \(now - 2 * hour), NULL),
              ('old-lock-over', 9, \(now - 2 * hour), \(now - hour)),
              ('locked', 9, \(now - 2 * hour), \(now + hour)),
              ('recent', 1, \(now - 60), NULL)
            """)
        try connection.query(
            """
            INSERT INTO rate_limits (bucket, window_start, count) VALUES
              ('guest:old', \(now - 2 * hour), 5), ('guest:now', \(now - 10), 5)
            """)
        try connection.query(
            """
            INSERT INTO users (id, handle, is_guest, created_at, updated_at)
            VALUES ('00000000-0000-7000-8000-000000000001', 'u1', false, \(now), \(now))
            """)
        try connection.query(
            """
            INSERT INTO one_time_codes (id, user_id, purpose, email, code_hmac, link_hash, created_at, expires_at)
            VALUES ('00000000-0000-7000-8000-000000000002', '00000000-0000-7000-8000-000000000001', 'verify_email',
                    'a@example.com', \(PGBytes(Array(repeating: 1, count: 32))), \(PGBytes(Array(repeating: 2, count: 32))),
                    \(now - 2 * hour), \(now - hour)),
                   ('00000000-0000-7000-8000-000000000003', '00000000-0000-7000-8000-000000000001', 'verify_email',
                    'a@example.com', \(PGBytes(Array(repeating: 3, count: 32))), \(PGBytes(Array(repeating: 4, count: 32))),
                    \(now - 60), \(now + 840))
            """)
        let purge = try await store.purgeExpired(at: now, throttleWindow: hour, rateLimitWindow: hour)
        #expect(purge.throttles == 2)
        #expect(purge.rateLimits == 1)
        #expect(purge.codes == 1, "the expired code goes, the live one stays")
        let throttles = try connection.query("SELECT account_key FROM login_throttle ORDER BY account_key")
            .map { try $0.decode("account_key", as: String.self) }
        #expect(throttles == ["locked", "recent"])
        let buckets = try connection.query("SELECT bucket FROM rate_limits").map {
            try $0.decode("bucket", as: String.self)
        }
        #expect(buckets == ["guest:now"])
    }

    /// Expired kept answers and audit rows go a slice at a time, oldest first: a purge takes at
    /// most `limit` rows of a table in its one transaction and says when it took that many, and
    /// the throttles and rate-limit buckets go only in a purge that asks for them (`windows`).
    /// Live rows stay throughout.
    @Test func expiredRowsArePurgedASliceAtATimeOldestFirst() async throws {
        let (store, connection) = try await store()
        let hour: TimeInterval = 3600
        let retention: TimeInterval = 30 * 86_400
        try connection.query(
            """
            INSERT INTO processed_requests (request_id, method, status, processed_at, expires_at)
            SELECT 'old-' || n, 'guest', 'ok', \(now - 2 * hour), \(now - hour)::timestamptz + n * interval '1 second'
            FROM generate_series(1, 25) AS n
            """)
        try connection.query(
            """
            INSERT INTO processed_requests (request_id, method, status, processed_at, expires_at)
            SELECT 'live-' || n, 'guest', 'ok', \(now), \(now + hour) FROM generate_series(1, 3) AS n
            """)
        try connection.query(
            """
            INSERT INTO audit_log (at, action, outcome)
            SELECT \(now - retention)::timestamptz - n * interval '1 second', 'guest', 'ok' FROM generate_series(1, 7) AS n
            """)
        try connection.query(
            "INSERT INTO audit_log (at, action, outcome) SELECT \(now - 60), 'guest', 'ok' FROM generate_series(1, 2)")
        try connection.query(
            "INSERT INTO login_throttle (account_key, failures, last_failure_at) VALUES ('old', 3, \(now - 2 * hour))")
        // Sign in with Apple jobs: three finished before the retention, one since, one never.
        try connection.query(
            """
            INSERT INTO apple_jobs (id, kind, subject, client_id, secret_sealed, next_attempt_at, created_at, finished_at)
            SELECT gen_random_uuid(), 'exchange', 'apple-' || n, 'client', ''::bytea, \(now - retention - 3600),
                   \(now - retention - 3600), CASE WHEN n <= 3 THEN \(now - retention - 60)::timestamptz
                                                  WHEN n = 4 THEN \(now - 60)::timestamptz END
            FROM generate_series(1, 5) AS n
            """)
        func purge(windows: Bool) async throws -> PostgresStore.Purge {
            try await store.purgeExpired(
                at: now, throttleWindow: hour, rateLimitWindow: hour, auditRetention: retention, limit: 10,
                windows: windows)
        }
        func kept() throws -> [String] {
            try connection.query("SELECT request_id FROM processed_requests ORDER BY expires_at, request_id").map {
                try $0.decode("request_id", as: String.self)
            }
        }

        let first = try await purge(windows: false)
        #expect(first.requests == 10 && first.auditRows == 7 && first.throttles == 0 && first.isPartial)
        #expect(first.appleJobs == 3)
        let jobs = try connection.query("SELECT subject FROM apple_jobs ORDER BY subject").map {
            try $0.decode("subject", as: String.self)
        }
        #expect(jobs == ["apple-4", "apple-5"], "the one finished since and the one still to run stay")
        #expect(try kept().first == "old-11", "the oldest ten went first")
        #expect(try count(connection, "login_throttle") == 1, "no windows asked for, none purged")
        #expect(try count(connection, "audit_log") == 2)

        let second = try await purge(windows: true)
        #expect(second.requests == 10 && second.auditRows == 0 && second.throttles == 1 && second.isPartial)
        #expect(second.appleJobs == 0)
        let third = try await purge(windows: false)
        #expect(third.requests == 5 && !third.isPartial)
        #expect(try kept() == ["live-1", "live-2", "live-3"])
        let fourth = try await purge(windows: true)
        #expect(fourth.total == 0 && !fourth.isPartial)
    }

    /// A week after a session ends (expired or revoked) its refresh and access tokens go and the
    /// session stays, with its last use (its newest refresh token's time) kept for the devices
    /// list and the export; sessions ended since, and live ones, keep everything. Sessions go a
    /// slice at a time (a twenty-fifth of `limit`), the oldest end first.
    @Test func aWeekAfterASessionEndsItsTokensAreForgottenAndTheSessionKept() async throws {
        let (store, connection) = try await store()
        let day: TimeInterval = 86_400
        try connection.query(
            "INSERT INTO users (id, handle, is_guest, created_at, updated_at) VALUES (\(Self.user), 'u', true, \(now), \(now))"
        )
        // (name, created, expires, revoked): four ended over a week ago, one since, one live.
        let sessions: [(String, Date, Date, Date?)] = [
            ("expired-long-ago", now - 100 * day, now - 10 * day, nil),
            ("revoked-long-ago", now - 30 * day, now + 60 * day, now - 9 * day),
            ("expired-before-that", now - 100 * day, now - 11 * day, nil),
            ("revoked-and-expired", now - 100 * day, now - 8 * day, now - 50 * day),
            ("ended-recently", now - 100 * day, now - 2 * day, nil),
            ("live", now - 10 * day, now + 80 * day, nil),
        ]
        for (index, (name, created, expires, revoked)) in sessions.enumerated() {
            let id = UUID(uuid: (0, 0, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, UInt8(index)))
            try connection.query(
                """
                INSERT INTO sessions (id, user_id, provider, device_name, abilities, created_at, expires_at, revoked_at)
                VALUES (\(id), \(Self.user), 'guest', \(name), '{}', \(created), \(expires), \(revoked))
                """)
            // Three refresh tokens a day apart from its creation, and an access token.
            try connection.query(
                """
                INSERT INTO refresh_tokens (id, session_id, token_hash, created_at, expires_at)
                SELECT gen_random_uuid(), \(id), sha256(convert_to(\(name) || n, 'UTF8')),
                       \(created)::timestamptz + n * interval '1 day', \(expires)
                FROM generate_series(0, 2) AS n
                """)
            try connection.query(
                """
                INSERT INTO access_tokens (id, session_id, token_hash, abilities, created_at, expires_at)
                VALUES (gen_random_uuid(), \(id), sha256(convert_to(\(name), 'UTF8')), '{}', \(created),
                        \(created + 900))
                """)
        }
        func tokens() throws -> [String] {
            try connection.query(
                """
                SELECT s.device_name || ' ' || (SELECT count(*) FROM refresh_tokens r WHERE r.session_id = s.id)
                       || ' ' || (SELECT count(*) FROM access_tokens a WHERE a.session_id = s.id) AS line
                FROM sessions s ORDER BY s.id
                """
            ).map { try $0.decode("line", as: String.self) }
        }

        // A limit of 50 looks at 2 sessions a round (a twenty-fifth), the oldest ended first.
        let first = try await store.purgeExpired(
            at: now, throttleWindow: 3600, rateLimitWindow: 3600, limit: 50, windows: false)
        #expect(first.endedSessions == 2 && first.isPartial)
        #expect(
            try tokens() == [
                "expired-long-ago 3 1", "revoked-long-ago 3 1", "expired-before-that 0 0", "revoked-and-expired 0 0",
                "ended-recently 3 1", "live 3 1",
            ])
        let second = try await store.purgeExpired(
            at: now, throttleWindow: 3600, rateLimitWindow: 3600, limit: 50, windows: false)
        #expect(second.endedSessions == 2 && second.isPartial, "a whole slice: there may be more")
        #expect(
            try tokens() == [
                "expired-long-ago 0 0", "revoked-long-ago 0 0", "expired-before-that 0 0", "revoked-and-expired 0 0",
                "ended-recently 3 1", "live 3 1",
            ])
        let third = try await store.purgeExpired(at: now, throttleWindow: 3600, rateLimitWindow: 3600, windows: false)
        #expect(third.endedSessions == 0 && !third.isPartial, "a purged session is not taken again")

        // The devices list and the export still say when each was last used.
        try connection.execute(unsafeSQL: "BEGIN")
        defer { _ = try? connection.execute(unsafeSQL: "ROLLBACK") }
        let details = try PostgresUnitOfWork(transaction: PGTransaction(connection: connection)).sessionDetails(
            userID: Self.user, live: false, at: now)
        let lastUse = Dictionary(uniqueKeysWithValues: details.map { ($0.deviceName ?? "", $0.lastUsedAt) })
        for (name, created, _, _) in sessions {
            #expect(lastUse[name] == created + 2 * day, "\(name)")
        }
    }

    static let user = UUID(uuid: (0, 0, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0xbe, 0xef))

    /// A round deletes about `limit` tokens however many the ended sessions hold: of the sessions
    /// it looks at, it takes the oldest ended whose tokens come to at most `limit`, and always the
    /// first, however many it holds.
    @Test func anEndedSessionsSliceIsBoundedByItsTokens() async throws {
        let (store, connection) = try await store()
        try connection.query(
            "INSERT INTO users (id, handle, is_guest, created_at, updated_at) VALUES (\(Self.user), 'u', true, \(now), \(now))"
        )
        // Ended 20, 19, 18 and 17 days ago, with 30, 30, 80 and 5 refresh tokens.
        for (index, tokens) in [30, 30, 80, 5].enumerated() {
            let id = UUID(uuid: (0, 0, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 1, UInt8(index)))
            let ended = now - Double(20 - index) * 86_400
            try connection.query(
                """
                INSERT INTO sessions (id, user_id, provider, abilities, created_at, expires_at)
                VALUES (\(id), \(Self.user), 'guest', '{}', \(ended - 86_400), \(ended))
                """)
            try connection.query(
                """
                INSERT INTO refresh_tokens (id, session_id, token_hash, created_at, expires_at)
                SELECT gen_random_uuid(), \(id), sha256(convert_to(\(index) || '.' || n, 'UTF8')), \(ended - 3600),
                       \(ended)
                FROM generate_series(1, \(tokens)) AS n
                """)
        }
        func round() async throws -> (Int, Bool, Int) {
            // A limit of 75: three sessions looked at, at most 75 tokens taken.
            let purge = try await store.purgeExpired(
                at: now, throttleWindow: 3600, rateLimitWindow: 3600, limit: 75, windows: false)
            return (purge.endedSessions, purge.isPartial, try count(connection, "refresh_tokens"))
        }
        let first = try await round()
        #expect(first.0 == 2 && first.1 && first.2 == 85, "30 + 30 of the three looked at; 30 + 30 + 80 is over")
        let second = try await round()
        #expect(second.0 == 1 && second.1 && second.2 == 5, "80 alone, over the limit, as the first")
        let third = try await round()
        #expect(third.0 == 1 && !third.1 && third.2 == 0)
    }

    /// The typical stored hash is the most common kind among a sample of the password accounts,
    /// the first by e-mail address, read by the primary key: never the whole table (20,000
    /// accounts, analyzed, in the plan), and here the sample's kind, not the table's.
    @Test func theTypicalPasswordHashIsReadFromASample() async throws {
        let url = try await IntegrationEnvironment.makeMigratedDatabase()
        let store = PostgresStore(pool: PGPool(conninfo: url, size: 1))
        let connection = try PGConnection(conninfo: url)
        let old = "$argon2id$v=19$m=4096,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA"
        let new = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA"
        // Three accounts first by address with the old kind, five after with the new one.
        try connection.query(
            """
            INSERT INTO users (id, handle, is_guest, created_at, updated_at)
            SELECT md5('u' || n)::uuid, 'h' || n, false, now(), now() FROM generate_series(1, 8) AS n
            """)
        try connection.query(
            """
            INSERT INTO identities (provider, subject, user_id, password_hash, created_at, last_login_at)
            SELECT 'password', (CASE WHEN n <= 3 THEN 'a' ELSE 'b' END) || n || '@example.com', md5('u' || n)::uuid,
                   CASE WHEN n <= 3 THEN \(old) ELSE \(new) END, now(), now()
            FROM generate_series(1, 8) AS n
            """)
        #expect(try await store.typicalPasswordHash() == new, "the whole table's kind, all eight in the sample")
        #expect(try await store.typicalPasswordHash(sample: 5) == old, "the first five by address: three old")

        try await Blocking.run {
            let connection = try PGConnection(conninfo: url)
            try connection.execute(
                unsafeSQL: """
                    INSERT INTO users (id, handle, is_guest, created_at, updated_at)
                    SELECT md5('v' || n)::uuid, 'v' || n, false, now(), now() FROM generate_series(1, 20000) AS n;
                    INSERT INTO identities (provider, subject, user_id, password_hash, created_at, last_login_at)
                    SELECT 'password', 'v' || n || '@example.com', md5('v' || n)::uuid, 'x', now(), now()
                    FROM generate_series(1, 20000) AS n;
                    ANALYZE users; ANALYZE identities;
                    """)
        }
        let query = PostgresStore.typicalPasswordHashQuery(sample: 10_000)
        let plan = try connection.query(
            PGQuery(unsafeSQL: "EXPLAIN (COSTS OFF) " + query.sql, parameters: query.parameters)
        ).map { try $0.decode("QUERY PLAN", as: String.self) }.joined(separator: "\n")
        #expect(plan.contains("identities_pkey") && !plan.contains("Seq Scan"), "\(plan)")
    }

    /// A purge passes over rows another purge holds (a replica's slice in flight) and takes the
    /// next ones, rather than waiting for that transaction: with the five oldest expired kept
    /// answers locked by an open transaction, a purge of ten takes the ten after them at once.
    /// (The holder ends itself after 3 s idle, so a purge that waited would go on, and take the
    /// five.)
    @Test func aPurgePassesOverTheRowsAnotherPurgeHolds() async throws {
        let url = try await IntegrationEnvironment.makeMigratedDatabase()
        let store = PostgresStore(pool: PGPool(conninfo: url, size: 2))
        let connection = try PGConnection(conninfo: url)
        try connection.query(
            """
            INSERT INTO processed_requests (request_id, method, status, processed_at, expires_at)
            SELECT 'old-' || n, 'guest', 'ok', \(now - 7200), \(now - 3600)::timestamptz + n * interval '1 second'
            FROM generate_series(1, 20) AS n
            """)
        let holder = try PGConnection(conninfo: url)
        try holder.execute(
            unsafeSQL: """
                SET idle_in_transaction_session_timeout = '3s';
                BEGIN;
                SELECT request_id FROM processed_requests
                WHERE request_id IN ('old-1', 'old-2', 'old-3', 'old-4', 'old-5') FOR UPDATE;
                """)
        let purge = try await store.purgeExpired(
            at: now, throttleWindow: 3600, rateLimitWindow: 3600, limit: 10, windows: false)
        #expect(purge.requests == 10 && purge.isPartial)
        let left = try connection.query("SELECT request_id FROM processed_requests ORDER BY expires_at").map {
            try $0.decode("request_id", as: String.self)
        }
        #expect(left == (1...5).map { "old-\($0)" } + (16...20).map { "old-\($0)" })
    }

    /// The relay's purge cycle takes a slice a round and goes on at the next rounds until it is
    /// through, rather than at the next cycle (ten minutes on): 25 expired kept answers at 10 a
    /// round go in three rounds, 10, 10 and 5, the first two saying the cycle goes on; the live
    /// rows stay.
    @Test(.requiresServices) func theRelaysPurgeCycleGoesOnRoundAfterRoundUntilItIsThrough() async throws {
        let (store, connection) = try await store()
        try connection.query(
            """
            INSERT INTO processed_requests (request_id, method, status, processed_at, expires_at)
            SELECT 'old-' || n, 'guest', 'ok', now() - interval '2 days', now() - interval '1 day' + n * interval '1 second'
            FROM generate_series(1, 25) AS n
            """)
        try connection.query(
            """
            INSERT INTO processed_requests (request_id, method, status, processed_at, expires_at)
            SELECT 'live-' || n, 'guest', 'ok', now(), now() + interval '1 day' FROM generate_series(1, 3) AS n
            """)
        let brokers = try #require(IntegrationEnvironment.kafkaBrokers)
        let producer = try KafkaProducer(
            configuration: KafkaProducerConfiguration(kafka: KafkaConfiguration(bootstrapServers: [brokers])),
            logger: IntegrationEnvironment.quietLogger)
        let logs = InMemoryLogHandler()
        let relay = OutboxRelay(
            store: store, producer: producer, clock: SystemClock(), logger: Logger(label: "test", handler: logs),
            interval: .milliseconds(20), purgeLimit: 10)
        let running = Task { try await relay.run() }
        // A bound, not a timing: the rounds come 20 ms apart, but beside the whole suite in
        // parallel on two cores a round has waited tens of seconds for a thread.
        let deadline = ContinuousClock.now + .seconds(90)
        while try count(connection, "processed_requests") > 3, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        relay.triggerGracefulShutdown()
        try await running.value
        await producer.shutdown()
        let rounds = logs.records.filter { $0.message == "Forgot expired rows" }.map {
            "\($0.metadata["purge.requests"] ?? "?") \($0.metadata["purge.more"] ?? "?")"
        }
        #expect(rounds == ["10 true", "10 true", "5 false"])
        #expect(try count(connection, "processed_requests") == 3)
    }

    /// A purge's slice is found by its table's time index and deleted by the rows' addresses, with
    /// no scan of the table, in each of the five tables it slices by rows (20,000 expired rows each,
    /// analyzed): deleted by key instead (`request_id IN (…)`), PostgreSQL joined the slice to
    /// every row of the table by hash, a sequential scan of months of kept answers for each slice.
    @Test func aPurgeSliceReadsNoWholeTable() async throws {
        let url = try await IntegrationEnvironment.makeMigratedDatabase()
        let connection = try PGConnection(conninfo: url)
        // 140,000 rows written on a thread of their own: seconds of statements that would hold one of
        // the few cooperative threads the other tests need.
        let now = now
        try await Blocking.run {
            let connection = try PGConnection(conninfo: url)
            try connection.query(
                """
                INSERT INTO processed_requests (request_id, method, status, processed_at, expires_at)
                SELECT 'r' || n, 'guest', 'ok', \(now - 86_400), \(now - 3600)::timestamptz + n * interval '1 millisecond'
                FROM generate_series(1, 20000) AS n
                """)
            try connection.query(
                """
                INSERT INTO one_time_codes (id, purpose, email, code_hmac, link_hash, created_at, expires_at)
                SELECT gen_random_uuid(), 'sign_up', n || '@example.com', sha256(('c' || n)::bytea),
                       sha256(('l' || n)::bytea), \(now - 86_400), \(now - 3600)::timestamptz + n * interval '1 millisecond'
                FROM generate_series(1, 20000) AS n
                """)
            try connection.query(
                """
                INSERT INTO webauthn_challenges (challenge_hash, purpose, created_at, expires_at)
                SELECT sha256(('w' || n)::bytea), 'login', \(now - 86_400), \(now - 3600)::timestamptz + n * interval '1 millisecond'
                FROM generate_series(1, 20000) AS n
                """)
            try connection.query(
                """
                INSERT INTO audit_log (at, action, outcome)
                SELECT \(now - 2 * 86_400)::timestamptz + n * interval '1 millisecond', 'guest', 'ok'
                FROM generate_series(1, 20000) AS n
                """)
            try connection.query(
                """
                INSERT INTO apple_jobs (id, kind, subject, client_id, secret_sealed, next_attempt_at, created_at, finished_at)
                SELECT gen_random_uuid(), 'exchange', 'a' || n, 'client', ''::bytea, \(now - 3 * 86_400),
                       \(now - 3 * 86_400), \(now - 2 * 86_400)::timestamptz + n * interval '1 millisecond'
                FROM generate_series(1, 20000) AS n
                """)
            // 20,000 sessions ended over a week ago, each with two refresh tokens and an access token.
            try connection.execute(
                unsafeSQL: """
                    INSERT INTO users (id, handle, is_guest, created_at, updated_at)
                    VALUES ('00000000-0000-7000-8000-00000000beef', 'u', true, now(), now());
                    INSERT INTO sessions (id, user_id, provider, abilities, created_at, expires_at)
                    SELECT md5('s' || n)::uuid, '00000000-0000-7000-8000-00000000beef', 'guest', '{}',
                           now() - interval '100 days', now() - interval '30 days' + n * interval '1 millisecond'
                    FROM generate_series(1, 20000) AS n;
                    INSERT INTO refresh_tokens (id, session_id, token_hash, created_at, expires_at)
                    SELECT gen_random_uuid(), md5('s' || n)::uuid, sha256(convert_to('r' || n || '.' || k, 'UTF8')),
                           now() - interval '100 days', now() - interval '30 days'
                    FROM generate_series(1, 20000) AS n, generate_series(1, 2) AS k;
                    INSERT INTO access_tokens (id, session_id, token_hash, abilities, created_at, expires_at)
                    SELECT gen_random_uuid(), md5('s' || n)::uuid, sha256(convert_to('a' || n, 'UTF8')), '{}',
                           now() - interval '100 days', now() - interval '100 days'
                    FROM generate_series(1, 20000) AS n;
                    """)
            try connection.execute(
                unsafeSQL: """
                    ANALYZE processed_requests; ANALYZE one_time_codes; ANALYZE webauthn_challenges; ANALYZE audit_log;
                    ANALYZE apple_jobs; ANALYZE sessions; ANALYZE refresh_tokens; ANALYZE access_tokens
                    """)
        }
        let statements = PostgresStore.purgeStatements(
            at: now, throttleWindow: 3600, rateLimitWindow: 3600, auditRetention: 86_400, limit: 5000, windows: true)
        #expect(statements.count == 8)
        func plan(_ statement: PGQuery) throws -> String {
            try connection.query(
                PGQuery(unsafeSQL: "EXPLAIN (COSTS OFF) " + statement.sql, parameters: statement.parameters)
            ).map { try $0.decode("QUERY PLAN", as: String.self) }.joined(separator: "\n")
        }
        for statement in statements.prefix(5) {
            let plan = try plan(statement)
            #expect(plan.contains("Tid Scan") && !plan.contains("Seq Scan"), "\(statement.sql)\n\(plan)")
        }
        // The ended sessions by their index, their tokens by theirs: a slice of 1,000 sessions.
        let sessions = try plan(statements[5])
        #expect(
            sessions.contains("sessions_ended") && sessions.contains("refresh_tokens_session_time")
                && sessions.contains("access_tokens_session") && !sessions.contains("Seq Scan"), "\(sessions)")
    }

    @Test func passwordAttemptsAreCountedAtomicallyBeforeTheyAreChecked() async throws {
        let (store, _) = try await store()
        var throttle = ThrottlePolicy()
        throttle.threshold = 5
        throttle.baseDelay = 60
        let policy = throttle
        let now = now
        // Forty attempts at once, as from many devices or replicas.
        let attempts = await withTaskGroup(of: PasswordAttempt?.self) { group in
            for _ in 0..<40 {
                group.addTask {
                    try? await store.reservePasswordAttempt(
                        key: "password:x@example.com", email: "x@example.com", at: now, policy: policy)
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        let allowed = attempts.compactMap { $0 }.filter(\.allowed)
        #expect(allowed.count == 5, "only the threshold's worth may be verified")
        #expect(attempts.compactMap { $0 }.count == 40)
        #expect(attempts.compactMap { $0?.lockedUntil }.allSatisfy { $0 == now + 60 })
    }

    /// Limits past PostgreSQL's `integer` (a threshold or a rate of `Int.max`, "never") are
    /// counted against the largest it holds: they once failed every attempt with SQLSTATE 22003
    /// (`scripts/bench passwords` sets the threshold to `Int.max`).
    @Test func limitsPastTheIntegerRangeStillCount() async throws {
        let (store, _) = try await store()
        var throttle = ThrottlePolicy()
        throttle.threshold = .max
        let attempt = try await store.reservePasswordAttempt(
            key: "password:max@example.com", email: "max@example.com", at: now, policy: throttle)
        #expect(attempt.allowed && attempt.failures == 1 && attempt.lockedUntil == nil)
        let grants = try await store.reserveRateLimits(
            [
                RateLimitReservation(
                    bucket: "register-all", limit: WorkerConfiguration.RateLimit(count: .max, window: 60), wanted: 1)
            ], at: now)
        #expect(grants.map(\.granted) == [1])
    }

    /// The batch's lookup: kept requests, and the guest ceiling taken for the new guests only,
    /// in one round trip. A batch whose guests were all processed before leaves the bucket alone;
    /// past the ceiling, what is left is granted and the window's end says when to come back.
    @Test func theLookupTakesTheGuestCeilingForNewGuestsOnly() async throws {
        let (store, connection) = try await store()
        try connection.execute(
            unsafeSQL: """
                INSERT INTO processed_requests (request_id, method, status, processed_at, expires_at, request_digest)
                VALUES ('old-1', 'guest', 'ok', now(), now() + interval '1 day', '\\x0102'),
                       ('old-2', 'guest', 'ok', now(), now() + interval '1 day', NULL)
                """)
        let limit = WorkerConfiguration.RateLimit(count: 3, window: 60)
        let replayed = try await store.lookUp(
            ["old-1", "old-2", "refresh-1"], guests: ["old-1", "old-2"], bucket: "guest-all", limit: limit, at: now)
        #expect(replayed.kept.keys.sorted() == ["old-1", "old-2"])
        #expect(replayed.kept["old-1"]?.digest == [1, 2])
        #expect(replayed.guests == nil)
        #expect(try count(connection, "rate_limits") == 0, "the bucket is not touched")

        let first = try await store.lookUp(
            ["old-1", "new-1", "new-2"], guests: ["old-1", "new-1", "new-2"], bucket: "guest-all", limit: limit,
            at: now)
        #expect(first.kept.keys.sorted() == ["old-1"])
        #expect(first.guests == RateLimitGrant(granted: 2, windowEnd: now + 60))
        // On a batch writer's connection (the pipeline's choice while that writer is free), the same.
        let second = try await store.lookUp(
            ["new-3", "new-4", "old-2"], guests: ["new-3", "new-4"], bucket: "guest-all", limit: limit, at: now + 1,
            on: .writer(0))
        #expect(second.kept.keys.sorted() == ["old-2"])
        #expect(try await store.keptRequests(["old-1", "new-3"], on: .writer(0)).keys.sorted() == ["old-1"])
        #expect(second.guests == RateLimitGrant(granted: 1, windowEnd: now + 60))
        let refused = try await store.lookUp(
            ["new-5"], guests: ["new-5"], bucket: "guest-all", limit: limit, at: now + 2)
        #expect(refused.guests == RateLimitGrant(granted: 0, windowEnd: now + 60))
    }

    /// The reads by key that run from PostgreSQL's plan cache (`KeyedPlans`: the lookup, a
    /// batch's marks and handle and rate-limit reads) keep the index whatever the table's size
    /// when their plan is made: cached while `processed_requests` holds five rows, the read's plan
    /// is an index scan, and still after the table grew to 50,000 rows (no ANALYZE in between).
    /// The same read cached with sequential scans allowed is a sequential scan at five rows: the
    /// hazard the session's per-run planning otherwise guards against. (Each plan is shown under
    /// the settings it runs with: a plan invalidated meanwhile, by a burst of other sessions'
    /// catalog changes, is made again under them.)
    @Test func keyedReadsKeepTheIndexFromACachedPlanAtAnyTableSize() async throws {
        let connection = try PGConnection(conninfo: try await IntegrationEnvironment.makeMigratedDatabase())
        try connection.execute(
            unsafeSQL: """
                ALTER TABLE processed_requests SET (autovacuum_enabled = false);
                INSERT INTO processed_requests (request_id, method, status, processed_at, expires_at)
                SELECT 'r' || n, 'guest', 'ok', now(), now() + interval '1 day' FROM generate_series(1, 5) AS n;
                ANALYZE processed_requests;
                """)
        let ids = PGArray(["r1", "r2"])
        let read: PGQuery = "SELECT request_id FROM processed_requests WHERE request_id = ANY(\(ids))"
        let control: PGQuery =
            "SELECT request_id FROM processed_requests WHERE request_id = ANY(\(ids)) AND true"
        let genericOnly: PGQuery = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"
        for _ in 1...3 {
            #expect(try connection.pipeline([KeyedPlans.cachedKeyedPlans, read]).last?.count == 2)
            #expect(try connection.pipeline([genericOnly, control]).last?.count == 2)
        }
        let prepared = try connection.execute(
            unsafeSQL: """
                SELECT name, statement LIKE '%AND true' AS control, generic_plans, custom_plans
                FROM pg_prepared_statements WHERE statement LIKE 'SELECT request_id FROM processed_requests%'
                """)
        #expect(prepared.count == 2)
        var names: [Bool: String] = [:]
        for statement in prepared {
            names[try statement.decode("control", as: Bool.self)] = try statement.decode("name", as: String.self)
            #expect(try statement.decode("generic_plans", as: Int.self) >= 3)
            #expect(try statement.decode("custom_plans", as: Int.self) == 0)
        }
        let keyedName = try #require(names[false])
        let controlName = try #require(names[true])
        /// The cached plan of statement `name`, under the settings it runs with.
        func plan(_ name: String, settings: PGQuery) throws -> String {
            try connection.execute(unsafeSQL: "BEGIN")
            defer { _ = try? connection.execute(unsafeSQL: "COMMIT") }
            try connection.query(settings)
            return try connection.execute(unsafeSQL: "EXPLAIN EXECUTE \(name)('{r4,r5}')")
                .map { (try? $0.decode("QUERY PLAN", as: String.self)) ?? "" }.joined(separator: "\n")
        }
        let small = try plan(keyedName, settings: KeyedPlans.cachedKeyedPlans)
        #expect(small.contains("Index") && !small.contains("Seq Scan"), "\(small)")
        let hazard = try plan(controlName, settings: genericOnly)
        #expect(hazard.contains("Seq Scan"), "the hazard, shown: \(hazard)")
        try connection.execute(
            unsafeSQL: """
                INSERT INTO processed_requests (request_id, method, status, processed_at, expires_at)
                SELECT 'r' || n, 'guest', 'ok', now(), now() + interval '1 day' FROM generate_series(6, 50000) AS n
                """)
        let grown = try plan(keyedName, settings: KeyedPlans.cachedKeyedPlans)
        #expect(grown.contains("Index") && !grown.contains("Seq Scan"), "\(grown)")
    }

    /// The prefetch's read of users (by id, identity, token or session) runs from a cached plan,
    /// and that plan finds each user by key whatever the table's size: the ids are gathered first
    /// (an init plan of key lookups), then `users_pkey` is probed with them. Written as
    /// `u.id IN (…)`, its generic plan on a fresh database was a merge join over an index scan of
    /// every user.
    @Test func theUserReadProbesByKeyFromACachedPlanAtAnyTableSize() async throws {
        let connection = try PGConnection(conninfo: try await IntegrationEnvironment.makeMigratedDatabase())
        try connection.execute(
            unsafeSQL: """
                ALTER TABLE users SET (autovacuum_enabled = false);
                INSERT INTO users (id, handle, email_verified, is_private_email, is_guest, created_at, updated_at)
                SELECT gen_random_uuid(), 'small_' || n, false, false, true, now(), now()
                FROM generate_series(1, 5) AS n;
                INSERT INTO identities (provider, subject, user_id, email_verified, is_private_email, created_at,
                                        last_login_at)
                SELECT 'apple', 'subject-1', id, false, false, now(), now() FROM users WHERE handle = 'small_1';
                ANALYZE users;
                """)
        var prefetch = Prefetch()
        prefetch.identities = [IdentityKey(provider: "apple", subject: "subject-1")]
        let reads = PrefetchQueries(prefetch)
        let usersRead = try #require(reads.queries.first { $0.sql.contains("FROM users u") }, "a keyed read")
        for _ in 1...3 {
            try connection.execute(unsafeSQL: "BEGIN")
            let rows = try connection.pipeline([KeyedPlans.cachedKeyedPlans, usersRead]).last
            try connection.execute(unsafeSQL: "COMMIT")
            #expect(try rows?.first?.decode("handle", as: String.self) == "small_1")
        }
        let name = try Self.genericallyPlannedStatement(containing: "FROM users u", on: connection)
        func plan() throws -> String {
            try Self.keyedPlan(
                of: name, "('{}', '{apple}', '{subject-1}', 'default', '{}', '{}', '{}', 'default')", on: connection)
        }
        func probesByKey(_ plan: String) -> Bool {
            plan.contains("Index Cond: (id = ANY") && !plan.contains("Seq Scan") && !plan.contains("Merge")
                && !plan.contains("Hash Join")
        }
        let small = try plan()
        #expect(probesByKey(small), "\(small)")
        try connection.execute(
            unsafeSQL: """
                INSERT INTO users (id, handle, email_verified, is_private_email, is_guest, created_at, updated_at)
                SELECT gen_random_uuid(), 'grown_' || n, false, false, true, now(), now()
                FROM generate_series(1, 50000) AS n
                """)
        let grown = try plan()
        #expect(probesByKey(grown), "\(grown)")
    }

    /// The prefetch's read of identities (a provider sign-in's, a password login's) runs from a
    /// cached plan that probes `identities_pkey` once a key, whatever the table's size, and locks
    /// the rows in the server's order of the key, as every other statement that locks them.
    /// Written as a join with the keys, its generic plan on a small table was a merge join over the
    /// whole index, kept until the table was analyzed again.
    @Test func theIdentityReadProbesByKeyFromACachedPlanAtAnyTableSize() async throws {
        let connection = try PGConnection(conninfo: try await IntegrationEnvironment.makeMigratedDatabase())
        try connection.execute(
            unsafeSQL: """
                ALTER TABLE identities SET (autovacuum_enabled = false);
                INSERT INTO users (id, handle, email_verified, is_private_email, is_guest, created_at, updated_at)
                SELECT gen_random_uuid(), 'small_' || n, false, false, false, now(), now()
                FROM generate_series(1, 5) AS n;
                INSERT INTO identities (provider, subject, user_id, email_verified, is_private_email, created_at,
                                        last_login_at)
                SELECT 'apple', 'subject-' || substr(handle, 7), id, false, false, now(), now() FROM users;
                ANALYZE identities;
                """)
        var prefetch = Prefetch()
        // Out of order, and one twice: read once each, in one order.
        prefetch.identities = ["subject-3", "subject-9", "subject-1", "subject-3"].map {
            IdentityKey(provider: "apple", subject: $0)
        }
        let reads = PrefetchQueries(prefetch)
        let identitiesRead = try #require(
            reads.queries.first { $0.sql.contains("FROM identities WHERE provider") }, "a keyed read")
        for _ in 1...3 {
            try connection.execute(unsafeSQL: "BEGIN")
            let rows = try connection.pipeline([KeyedPlans.cachedKeyedPlans, identitiesRead]).last
            try connection.execute(unsafeSQL: "COMMIT")
            #expect(try rows?.map { try $0.decode("subject", as: String.self) } == ["subject-1", "subject-3"])
        }
        let name = try Self.genericallyPlannedStatement(containing: "FROM identities WHERE provider", on: connection)
        func plan() throws -> String {
            try Self.keyedPlan(of: name, "('{apple}', '{subject-1}', 'default')", on: connection)
        }
        func probesByKey(_ plan: String) -> Bool {
            plan.contains("Index Cond: ((provider = keys.provider) AND (subject = keys.subject) AND (tenant = $3))")
                && plan.contains("Nested Loop") && !plan.contains("Seq Scan") && !plan.contains("Merge")
                && !plan.contains("Hash Join")
                // The keys in the server's order: locked in the order every other statement locks.
                && plan.contains("Sort Key: keys.provider, keys.subject")
        }
        let small = try plan()
        #expect(probesByKey(small), "\(small)")
        try connection.execute(
            unsafeSQL: """
                INSERT INTO users (id, handle, email_verified, is_private_email, is_guest, created_at, updated_at)
                SELECT gen_random_uuid(), 'grown_' || n, false, false, false, now(), now()
                FROM generate_series(1, 50000) AS n;
                INSERT INTO identities (provider, subject, user_id, email_verified, is_private_email, created_at,
                                        last_login_at)
                SELECT 'apple', 'grown-' || handle, id, false, false, now(), now() FROM users
                WHERE handle LIKE 'grown_%'
                """)
        let grown = try plan()
        #expect(probesByKey(grown), "\(grown)")
    }

    /// The first round trip locks in one order, whatever the batch reads: identities, then
    /// tokens and sessions, then users, as it always has (a batch locking a session before an
    /// identity could deadlock with one whose body locks them the other way). Every read runs
    /// from a cached plan, `head` after them; the rest of the transaction is planned per run.
    @Test func theFirstRoundTripLocksIdentitiesBeforeSessionsBeforeUsers() throws {
        var prefetch = Prefetch()
        prefetch.identities = [IdentityKey(provider: "apple", subject: "s")]
        prefetch.refreshTokens = [[1, 2, 3]]
        prefetch.sessions = [UUID()]
        prefetch.accessTokens = [[4, 5, 6]]
        prefetch.users = [UUID()]
        let head: [PGQuery] = ["SELECT 'head'"]
        let first: [PGQuery] = ["SELECT 'first'"]
        let trip = PostgresUnitOfWork.FirstRoundTrip(first: first, head: head, reads: PrefetchQueries(prefetch))
        // As the transaction sends it, its BEGIN first.
        let sql = PGTransaction.firstRoundTrip(trip.statements).map(\.sql)
        func index(_ fragment: String) throws -> Int {
            try #require(sql.firstIndex { $0.contains(fragment) }, "\(fragment) in \(sql)")
        }
        let identities = try index("FROM identities WHERE provider")
        let refresh = try index("FROM refresh_tokens\n")
        let sessions = try index("FROM sessions s CROSS JOIN")
        let accessTokens = try index("FROM access_tokens\n")
        let users = try index("FROM users u\n")
        #expect(identities < refresh && refresh < sessions && sessions < accessTokens && accessTokens < users)
        #expect(Array(sql.prefix(3)) == ["BEGIN", "SELECT 'first'", KeyedPlans.cachedKeyedPlans.sql])
        #expect(identities == 3, "the reads from cached plans")
        #expect(sql.count(where: { $0 == KeyedPlans.cachedKeyedPlans.sql }) == 1)
        #expect(try index("SELECT 'head'") > users)
        #expect(Array(sql.suffix(2)) == KeyedPlans.plannedPerRun.map(\.sql))
        // The answers are found where they were sent: first's and head's, and the reads' in
        // their queries' order.
        let statements = trip.statements.map(\.sql)
        #expect(trip.answers.flatMap { statements[$0] } == ["SELECT 'first'", "SELECT 'head'"])
        #expect(Array(statements[trip.reads]) == PrefetchQueries(prefetch).queries.map(\.sql))
        // A lookup alone (nothing read, no head): no switch of settings.
        let lookup = PostgresUnitOfWork.FirstRoundTrip(first: first, head: [], reads: PrefetchQueries(Prefetch()))
        #expect(PGTransaction.firstRoundTrip(lookup.statements).map(\.sql) == ["BEGIN", "SELECT 'first'"])
    }

    /// Every read of the prefetch, as a batch with every kind of key sends them, runs from a
    /// cached plan that finds each row by key whatever the tables' sizes: each scan of a table
    /// has an index condition (a probe), none reads a table or a whole index through a filter,
    /// at 5 rows a table and with the same plan at 50,005. Planned for each run instead, the
    /// reads of tokens and sessions cost PostgreSQL more planning than running (a refresh
    /// token's: 225 µs planning and 92 µs running a refresh at 300/s); joined with the keys
    /// instead, their generic plans on small tables scanned a whole index through a filter.
    @Test func everyPrefetchReadProbesByKeyFromACachedPlanAtAnyTableSize() async throws {
        let connection = try PGConnection(conninfo: try await IntegrationEnvironment.makeMigratedDatabase())
        func addRows(_ range: ClosedRange<Int>) throws {
            try connection.execute(
                unsafeSQL: """
                    INSERT INTO users (id, handle, email_verified, is_private_email, is_guest, created_at, updated_at)
                    SELECT md5('u' || n)::uuid, 'user_' || n, false, false, false, now(), now()
                    FROM generate_series(\(range.lowerBound), \(range.upperBound)) AS n;
                    INSERT INTO identities (provider, subject, user_id, email_verified, is_private_email, created_at,
                                            last_login_at)
                    SELECT 'apple', 'subject-' || n, md5('u' || n)::uuid, false, false, now(), now()
                    FROM generate_series(\(range.lowerBound), \(range.upperBound)) AS n;
                    INSERT INTO sessions (id, user_id, provider, abilities, created_at, expires_at)
                    SELECT md5('s' || n)::uuid, md5('u' || n)::uuid, 'apple', '{*}', now(), now() + interval '1 day'
                    FROM generate_series(\(range.lowerBound), \(range.upperBound)) AS n;
                    INSERT INTO refresh_tokens (id, session_id, token_hash, created_at, expires_at)
                    SELECT md5('r' || n)::uuid, md5('s' || n)::uuid, sha256(convert_to('r' || n, 'UTF8')), now(),
                           now() + interval '1 day'
                    FROM generate_series(\(range.lowerBound), \(range.upperBound)) AS n;
                    INSERT INTO access_tokens (id, session_id, token_hash, name, abilities, created_at, expires_at)
                    SELECT md5('a' || n)::uuid, md5('s' || n)::uuid, sha256(convert_to('a' || n, 'UTF8')), 'bench',
                           '{*}', now(), now() + interval '1 day'
                    FROM generate_series(\(range.lowerBound), \(range.upperBound)) AS n;
                    INSERT INTO rate_limits (bucket, window_start, count)
                    SELECT 'bucket-' || n, now(), 1 FROM generate_series(\(range.lowerBound), \(range.upperBound)) AS n
                    """)
        }
        try connection.execute(
            unsafeSQL: """
                ALTER TABLE users SET (autovacuum_enabled = false);
                ALTER TABLE identities SET (autovacuum_enabled = false);
                ALTER TABLE sessions SET (autovacuum_enabled = false);
                ALTER TABLE refresh_tokens SET (autovacuum_enabled = false);
                ALTER TABLE access_tokens SET (autovacuum_enabled = false);
                ALTER TABLE rate_limits SET (autovacuum_enabled = false)
                """)
        try addRows(1...5)
        try connection.execute(unsafeSQL: "ANALYZE")
        func hash(_ text: String) -> [UInt8] { SHA256.hash(Array(text.utf8)) }
        func id(_ text: String) throws -> UUID {
            try #require(try connection.query("SELECT md5(\(text))::uuid AS id").first?.decode("id", as: UUID.self))
        }
        var prefetch = Prefetch()
        prefetch.identities = [IdentityKey(provider: "apple", subject: "subject-2")]
        prefetch.refreshTokens = [hash("r3"), hash("r1")]
        prefetch.sessions = [try id("s4")]
        prefetch.accessTokens = [hash("a5")]
        prefetch.users = [try id("u1")]
        prefetch.handles = ["user_2", "free"]
        prefetch.rateLimitBuckets = ["bucket-1"]
        let reads = PrefetchQueries(prefetch)
        #expect(reads.queries.count == 7)
        for _ in 1...3 {
            try connection.execute(unsafeSQL: "BEGIN")
            let answers = try connection.pipeline([KeyedPlans.cachedKeyedPlans] + reads.queries).dropFirst()
            try connection.execute(unsafeSQL: "COMMIT")
            // Each read finds what was asked: the identity, both tokens with their sessions, the
            // session, the access token, the users of all of them, the taken handle, the bucket.
            #expect(answers.map(\.count) == [1, 2, 1, 1, 5, 1, 1])
        }
        /// Parameter `number` of `read` as a literal of the type the statement casts it to
        /// (`EXPLAIN EXECUTE` takes no parameters of its own).
        func literal(_ number: Int, of read: PGQuery) throws -> String {
            let cast = try #require(read.sql.firstRange(of: "$\(number)::"), "parameter \(number) is cast")
            let type = read.sql[cast.upperBound...].prefix { $0.isLetter || $0.isNumber || "_[]".contains($0) }
            let quoted = PGQuery(
                unsafeSQL: "SELECT quote_literal($1::\(type)::text) || '::\(type)' AS literal",
                parameters: [read.parameters[number - 1]])
            return try #require(try connection.query(quoted).first?.decode("literal", as: String.self))
        }
        /// Each read's cached plan, as `EXPLAIN EXECUTE` prints it with the read's own values.
        func plans() throws -> [String] {
            try reads.queries.map { read in
                let name = try Self.genericallyPlannedStatement(
                    containing: String(read.sql.prefix(120)), on: connection)
                let arguments = try (1...read.parameters.count).map { try literal($0, of: read) }
                return try Self.keyedPlan(of: name, "(\(arguments.joined(separator: ", ")))", on: connection)
            }
        }
        /// Every scan of an index has an index condition (the next line of the plan); no table
        /// is read whole.
        func probesByKey(_ plan: String) -> Bool {
            let lines = plan.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            let indexScans = lines.indices.filter {
                lines[$0].contains("Index Scan using") || lines[$0].contains("Index Only Scan using")
                    || lines[$0].hasPrefix("->  Bitmap Index Scan on") || lines[$0].hasPrefix("Bitmap Index Scan on")
            }
            return !indexScans.isEmpty && !plan.contains("Seq Scan")
                && indexScans.allSatisfy { $0 + 1 < lines.count && lines[$0 + 1].hasPrefix("Index Cond:") }
        }
        for (read, plan) in zip(reads.queries, try plans()) {
            #expect(probesByKey(plan), "\(read.sql)\n\(plan)")
        }
        try addRows(6...50_005)
        for (read, plan) in zip(reads.queries, try plans()) {
            #expect(probesByKey(plan), "\(read.sql)\n\(plan)")
        }
    }

    /// The name of the one statement prepared on `connection` whose text contains `fragment`,
    /// expecting it ran from generic plans only (three runs or more, no plan for its values).
    static func genericallyPlannedStatement(containing fragment: String, on connection: PGConnection) throws
        -> String
    {
        let prepared = try connection.query(
            "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements WHERE strpos(statement, \(fragment)) > 0"
        )
        #expect(prepared.count == 1)
        #expect(try prepared.first?.decode("generic_plans", as: Int.self) ?? 0 >= 3)
        #expect(try prepared.first?.decode("custom_plans", as: Int.self) == 0)
        return try #require(try prepared.first?.decode("name", as: String.self))
    }

    /// The plan the prepared statement `name` runs with for `arguments` under the keyed reads'
    /// settings (`KeyedPlans`), as `EXPLAIN` prints it.
    static func keyedPlan(of name: String, _ arguments: String, on connection: PGConnection) throws -> String {
        try connection.execute(unsafeSQL: "BEGIN")
        defer { _ = try? connection.execute(unsafeSQL: "ROLLBACK") }
        try connection.query(KeyedPlans.cachedKeyedPlans)
        return try connection.execute(unsafeSQL: "EXPLAIN EXECUTE \(name)\(arguments)")
            .map { (try? $0.decode("QUERY PLAN", as: String.self)) ?? "" }.joined(separator: "\n")
    }

    /// A reservation racing a delete of its row (a successful sign-in resets its account's
    /// throttle; the purge drops ended rate-limit windows) still counts and answers. Both
    /// functions once read nothing when the row went between their insert and their locking
    /// read, answered NULLs, and the request that asked was answered `internal_error` (one
    /// password login in 150 in a test run on a faster machine).
    @Test func reservationsRacingADeleteOfTheirRowStillCount() async throws {
        let url = try await IntegrationEnvironment.makeMigratedDatabase()
        let store = PostgresStore(pool: PGPool(conninfo: url, size: 2), attemptConnections: 2)
        var throttle = ThrottlePolicy()
        throttle.threshold = 1_000_000
        let policy = throttle
        let limit = WorkerConfiguration.RateLimit(count: 1_000_000, window: 3600)
        let now = now
        let failures = try await Self.racingDeletes(
            url: url,
            deletes: [
                "DELETE FROM login_throttle WHERE account_key = 'password:race@example.com'",
                "DELETE FROM rate_limits WHERE bucket = 'register-all'",
            ]
        ) {
            let attempt = try await store.reservePasswordAttempt(
                key: "password:race@example.com", email: "race@example.com", at: now, policy: policy)
            let grants = try await store.reserveRateLimits(
                [RateLimitReservation(bucket: "register-all", limit: limit, wanted: 1)], at: now)
            guard attempt.allowed, attempt.failures >= 1 else { return "attempt: \(attempt)" }
            guard grants.map(\.granted) == [1] else { return "grants: \(grants)" }
            return nil
        }
        #expect(failures.count == 0, "of 3,000 reservations, these failed: \(failures.prefix(3))")
    }

    /// Runs `reserve` 1,500 times on each of two tasks while two other connections run `deletes`
    /// as fast as they can; returns what `reserve` said went wrong, and what it threw.
    static func racingDeletes(
        url: String, deletes: [String], _ reserve: @escaping @Sendable () async throws -> String?
    ) async throws -> [String] {
        let stop = Atomic<Bool>(false)
        for _ in 0..<2 {
            Thread {
                guard let connection = try? PGConnection(conninfo: url) else { return }
                while !stop.load(ordering: .relaxed) {
                    for delete in deletes { _ = try? connection.execute(unsafeSQL: delete) }
                }
            }.start()
        }
        defer { stop.store(true, ordering: .relaxed) }
        return await withTaskGroup(of: [String].self) { group in
            for _ in 0..<2 {
                group.addTask {
                    var failures: [String] = []
                    for _ in 0..<1_500 {
                        do {
                            if let failure = try await reserve() { failures.append(failure) }
                        } catch {
                            failures.append("\(error)")
                        }
                    }
                    return failures
                }
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
    }

    /// The batch's prefetch finds its users through indexes, however many users there are: the
    /// users of a batch of provider sign-ins were once read by a sequential scan of `users` (an
    /// OR of IN-subqueries no index serves), 114 ms a batch at 10,000 users and growing with
    /// the table.
    @Test func thePrefetchReadsUsersThroughIndexes() async throws {
        let connection = try PGConnection(conninfo: try await IntegrationEnvironment.makeMigratedDatabase())
        try connection.execute(
            unsafeSQL: """
                INSERT INTO users (id, handle, email_verified, is_private_email, is_guest, created_at, updated_at)
                SELECT gen_random_uuid(), 'h' || g, false, false, false, now(), now() FROM generate_series(1, 20000) g;
                INSERT INTO identities (provider, subject, user_id, email_verified, is_private_email, created_at,
                                        last_login_at)
                SELECT 'apple', 's' || row_number() OVER (), id, false, false, now(), now() FROM users;
                ANALYZE
                """)
        var prefetch = Prefetch()
        prefetch.identities = (1...100).map { IdentityKey(provider: "apple", subject: "s\($0)") }
        prefetch.users = [UUID()]
        prefetch.sessions = [UUID()]
        let queries = PrefetchQueries(prefetch).queries
        let users = try #require(queries.first { $0.sql.contains("FROM users u") })
        // The plan of the statement with these very parameters, under the settings it runs with
        // (a keyed read: `KeyedPlans`).
        try connection.execute(unsafeSQL: "BEGIN")
        try connection.query(KeyedPlans.cachedKeyedPlans)
        let plan = try connection.query(PGQuery(unsafeSQL: "EXPLAIN " + users.sql, parameters: users.parameters))
            .map { try $0.decode("QUERY PLAN", as: String.self) }.joined(separator: "\n")
        try connection.execute(unsafeSQL: "ROLLBACK")
        // Every scan of `users` looks rows up by key (an index condition, or a bitmap of the key
        // index rechecked by key), none reads the table or its whole index through a filter.
        let lines = plan.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        let scans = lines.indices.filter { lines[$0].contains(" on users u") }
        #expect(!scans.isEmpty, "\(plan)")
        for index in scans {
            let next = index + 1 < lines.count ? lines[index + 1] : ""
            #expect(
                (next.hasPrefix("Index Cond:") || next.hasPrefix("Recheck Cond: (id = ANY"))
                    && !lines[index].hasPrefix("Seq Scan"), "\(plan)")
        }
        #expect(!plan.contains("Seq Scan on identities"), "\(plan)")
        #expect(try connection.query(users).count == 100)
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}
