import AuthDomain
import Foundation
import PGStore

/// What a request leaves besides its effects: rate-limit counts, the outbox, the audit trail, Apple's jobs and the kept answer.
extension PostgresUnitOfWork {
    func rateLimitWindow(bucket: String, at date: Date, window: TimeInterval) throws -> RateLimitWindow {
        let bucket = scoped(bucket)
        let stored: RateLimitRow?
        if usesCache, let cached = cache.rateLimits[bucket] {
            stored = cached
        } else {
            stored = try query(
                "SELECT bucket, window_start, count FROM rate_limits WHERE bucket = \(bucket) FOR UPDATE"
            ).first.map(Decode.rateLimit)
            cache.rateLimits[bucket] = .some(stored)
        }
        // A window that has passed (or none yet) starts again with this request.
        guard let stored, stored.windowStart > date - window else {
            return RateLimitWindow(count: rateLimitUses[bucket, default: 0], endsAt: date + window)
        }
        return RateLimitWindow(
            count: stored.count + rateLimitUses[bucket, default: 0], endsAt: stored.windowStart + window)
    }

    func isRecorded(requestID: String) throws -> Bool {
        try !query("SELECT 1 AS found FROM processed_requests WHERE request_id = \(requestID) AND tenant = \(tenant)")
            .isEmpty
    }

    func appleToken(subject: String) throws -> AppleTokenRecord? {
        try query(
            """
            SELECT subject, client_id, refresh_token_sealed FROM apple_tokens
            WHERE subject = \(subject) AND tenant = \(tenant) FOR UPDATE
            """
        )
        .first.map { row in
            AppleTokenRecord(
                subject: try row.decode("subject"), clientID: try row.decode("client_id"),
                refreshTokenSealed: try row.decode("refresh_token_sealed", as: PGBytes.self).bytes)
        }
    }

    func recordRateLimitedUse(bucket: String, at date: Date, window: TimeInterval) throws {
        let bucket = scoped(bucket)
        current.rateLimitCounts[bucket, default: 0] += 1
        current.rateLimitWindows[bucket] = (date, window)
    }

    func resetThrottle(key: String) throws {
        current.statements.append("DELETE FROM login_throttle WHERE account_key = \(scoped(key))")
    }

    func appendEvent(_ event: OutboxEvent) throws {
        current.events.append(event)
    }

    func recordAudit(_ entry: AuditEntry) throws {
        var entry = entry
        entry.tenant = tenant
        current.audits.append(entry)
    }

    func enqueueAppleJob(_ job: AppleJob) throws {
        current.statements.append(
            """
            INSERT INTO apple_jobs (id, kind, subject, client_id, secret_sealed, attempts, next_attempt_at, created_at,
                                    tenant)
            VALUES (\(job.id), \(job.kind.rawValue), \(job.subject), \(job.clientID), \(PGBytes(job.secretSealed)),
                    \(job.attempts), \(job.createdAt), \(job.createdAt), \(tenant))
            """)
    }

    func deleteAppleToken(subject: String) throws {
        current.statements.append("DELETE FROM apple_tokens WHERE subject = \(subject) AND tenant = \(tenant)")
    }

    func recordRequest(_ record: RequestRecord) throws {
        current.requests.append(Owned(tenant: tenant, row: record))
    }
}
