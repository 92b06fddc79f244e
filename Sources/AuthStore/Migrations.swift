import AuthDomain
import PGStore

/// The database schema, as ordered migrations. Released versions are never edited: add a new one.
public enum Migrations {
    public static let all: [PGMigration] = [
        initialSchema, refreshSuccessors, storedResults, batchedPipeline, sharedRateLimits, gatewayTokenView,
        oneTimeCodes, secondFactors, reservationsThatLock, auditTrail, appleTokens, passkeys,
        accountAdministration, consoleSessions, outboxWithoutPartialIndex, foreignKeysServedByIndexes,
        requestsByUser, finishedAppleJobs, refreshTokensBySessionAndTime, endedSessionsForgetTheirTokens,
        usersFoundByIndex, staffNamedByID,
    ]

    /// The audit trail named the console user who acted by their sign-in address
    /// (`admin:<email>`), which the account's export showed its user: half of the agent's
    /// console credential. Console users are now recorded by their account's id
    /// (`console:<user id>`); the rows written before are rewritten so, or to `console` where
    /// the address no longer has an account.
    static let staffNamedByID = PGMigration(
        version: 22, name: "staff named by id",
        sql: """
            UPDATE audit_log a SET actor = 'console:' || i.user_id
            FROM identities i
            WHERE a.actor LIKE 'admin:%' AND i.provider = 'password' AND i.subject = lower(substr(a.actor, 7));
            UPDATE audit_log SET actor = 'console' WHERE actor LIKE 'admin:%';
            """)

    /// The console's user search and `auth-worker users show` read `users` and `identities` whole:
    /// a handle or an address matched by prefix (`LIKE 'abc%'`) or in lower case, which no index
    /// served, 0.7 s of PostgreSQL a search at a million accounts. A B-tree serves a prefix only
    /// in bytewise order (`text_pattern_ops`) where the database's collation is not `C`, so:
    /// handles' unique index is rebuilt in that order (it serves the sign-ups' equality checks as
    /// before, at no extra entry); users' lower-case addresses likewise, in place of `users_email`;
    /// and identities' lower-case addresses get one (an entry for each identity with an address:
    /// provider sign-ups, not guests). Built `CONCURRENTLY`; the unique constraint and the old
    /// index go in the recorded transaction, so a run stopped between the builds never leaves
    /// handles without a unique index.
    static let usersFoundByIndex = PGMigration(
        version: 21, name: "users found by index",
        outsideTransaction: [
            "DROP INDEX CONCURRENTLY IF EXISTS users_handle",
            "CREATE UNIQUE INDEX CONCURRENTLY users_handle ON users (handle text_pattern_ops)",
            "DROP INDEX CONCURRENTLY IF EXISTS users_email_prefix",
            """
            CREATE INDEX CONCURRENTLY users_email_prefix ON users (lower(email) text_pattern_ops)
                WHERE email IS NOT NULL
            """,
            "DROP INDEX CONCURRENTLY IF EXISTS identities_email",
            """
            CREATE INDEX CONCURRENTLY identities_email ON identities (lower(email) text_pattern_ops)
                WHERE email IS NOT NULL
            """,
        ],
        sql: """
            ALTER TABLE users DROP CONSTRAINT IF EXISTS users_handle_key;
            DROP INDEX IF EXISTS users_email;
            """)

    /// A session that has ended (expired or revoked) answers every token of its own as if it were
    /// unknown (`invalid_refresh_token`; an access token is inactive), yet its tokens were kept
    /// for good: a refresh-token row (724 bytes with its indexes) for every sign-in and every
    /// refresh, about 60 GB a day at 1,000 refreshes/s. A week after a session ends the relay's
    /// purge now deletes its refresh and access tokens and keeps the session, with its last use
    /// (its newest refresh token's time) in `last_used_at`, for the devices list and the export.
    /// The index finds ended sessions not yet purged by when they ended; it costs a sign-in one
    /// entry (a revocation moves it), and a purged session leaves it.
    static let endedSessionsForgetTheirTokens = PGMigration(
        version: 20, name: "ended sessions forget their tokens",
        outsideTransaction: [
            "ALTER TABLE sessions ADD COLUMN IF NOT EXISTS last_used_at timestamptz",
            "DROP INDEX CONCURRENTLY IF EXISTS sessions_ended",
            """
            CREATE INDEX CONCURRENTLY sessions_ended ON sessions (least(expires_at, revoked_at))
                WHERE last_used_at IS NULL
            """,
        ])

    /// A session's "last used" (the devices list, the account export) is its newest refresh
    /// token's time; by `refresh_tokens_session` that read every token of the session, a row for
    /// each refresh of its life: a user with ten devices refreshing every quarter of an hour for a
    /// month has 30,000 (0.14 s, in a batch writer's transaction). With the time in the index it
    /// reads one entry a session. The new index replaces the old one (it serves the session's
    /// foreign key as well), built `CONCURRENTLY`: on a large table that takes a while, with the
    /// logins going on.
    static let refreshTokensBySessionAndTime = PGMigration(
        version: 19, name: "refresh tokens by session and time",
        outsideTransaction: [
            "DROP INDEX CONCURRENTLY IF EXISTS refresh_tokens_session_time",
            "CREATE INDEX CONCURRENTLY refresh_tokens_session_time ON refresh_tokens (session_id, created_at)",
            "DROP INDEX CONCURRENTLY IF EXISTS refresh_tokens_session",
        ])

    /// A Sign in with Apple job (a code's exchange, a token's revocation) was kept for good once
    /// finished, with its sealed secret (the code, or the refresh token revoked): a row for
    /// every Apple sign-in that brings a code, and a secret kept that nothing would read again.
    /// A finished job now drops its secret, and the relay purges it once its audit row would go
    /// (`AUTH_AUDIT_RETENTION_DAYS`), a slice at a time by this index; the jobs finished before
    /// drop theirs here.
    static let finishedAppleJobs = PGMigration(
        version: 18, name: "finished Apple jobs",
        outsideTransaction: [
            "DROP INDEX CONCURRENTLY IF EXISTS apple_jobs_finished",
            "CREATE INDEX CONCURRENTLY apple_jobs_finished ON apple_jobs (finished_at) WHERE finished_at IS NOT NULL",
        ],
        sql: """
            UPDATE apple_jobs SET secret_sealed = ''::bytea
            WHERE finished_at IS NOT NULL AND octet_length(secret_sealed) > 0;
            """)

    /// The account export lists the user's kept requests (`requests`), and `processed_requests`
    /// had no index by user: each export read the whole table, a row for every request of the
    /// last `AUTH_IDEMPOTENCY_TTL_SECONDS` (seven days), in a batch writer's transaction. 0.4 s at
    /// two million rows; at 1,000 logins/s a week holds 600 million. Built `CONCURRENTLY`, so an
    /// upgrade does not hold every login's insert up while it reads the table; a build that
    /// failed or was stopped leaves an invalid index, which the next run drops first.
    static let requestsByUser = PGMigration(
        version: 17, name: "kept requests by user",
        outsideTransaction: [
            "DROP INDEX CONCURRENTLY IF EXISTS processed_requests_user",
            """
            CREATE INDEX CONCURRENTLY processed_requests_user ON processed_requests (user_id, processed_at)
                WHERE user_id IS NOT NULL
            """,
        ])

    /// Deleting a row runs a check of every foreign key that references its table; where the
    /// referencing column had no index of its own, that check read the whole referencing table once
    /// for each row deleted. So deleting a user (the owner's deletion, Apple's notification, the
    /// console, `users delete`, `guests purge`) read every refresh token once for each of the
    /// user's refresh tokens: 0.1 s each in a table of 1.5 million, and a guest purge of 100 guests
    /// took 51 s. Each referencing column is now indexed, but one: `refresh_tokens.parent_id`
    /// loses its constraint instead. A refresh token is only ever deleted with its session, and so
    /// with its whole family, so `ON DELETE SET NULL` never had a row to change; an index for it
    /// would cost every sign-in and every refresh one more entry. The column stays, the family's
    /// lineage. The three tables indexed here are small (codes and challenges are purged once
    /// expired; console sessions are support staff's), so building their indexes takes moments.
    static let foreignKeysServedByIndexes = PGMigration(
        version: 16, name: "foreign keys served by indexes",
        sql: """
            ALTER TABLE refresh_tokens DROP CONSTRAINT IF EXISTS refresh_tokens_parent_id_fkey;
            DROP INDEX IF EXISTS one_time_codes_user;
            CREATE INDEX one_time_codes_user ON one_time_codes (user_id, purpose);
            CREATE INDEX webauthn_challenges_user ON webauthn_challenges (user_id);
            CREATE INDEX console_sessions_session ON console_sessions (session_id);
            """)

    /// Published events leave the outbox (version 4), so every row in it is unpublished and the
    /// partial index on `seq` for unpublished rows only repeated the primary key: one more index
    /// entry written, and its WAL, for every event. The relay reads by the primary key instead.
    static let outboxWithoutPartialIndex = PGMigration(
        version: 15, name: "outbox without its partial index",
        sql: """
            DROP INDEX IF EXISTS outbox_unpublished;
            """)

    /// The admin console's sign-in sessions: the SHA-256 of the cookie's random id (never the id),
    /// its holder, the login session its sign-in opened, and both timeouts' clocks.
    static let consoleSessions = PGMigration(
        version: 14, name: "console sessions",
        sql: """
            CREATE TABLE console_sessions (
                id_hash      bytea PRIMARY KEY CHECK (octet_length(id_hash) = 32),
                user_id      uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
                session_id   uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                client       text NOT NULL,
                created_at   timestamptz NOT NULL,
                last_seen_at timestamptz NOT NULL
            );
            CREATE INDEX console_sessions_user ON console_sessions (user_id);
            """)

    /// What support staff and operators need: a disabled account (its sign-ins and refreshes
    /// refused with `account_disabled`), and the roles that open the admin console.
    static let accountAdministration = PGMigration(
        version: 13, name: "account administration",
        sql: """
            ALTER TABLE users ADD COLUMN disabled_at timestamptz;
            CREATE TABLE admin_roles (
                user_id    uuid PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
                role       text NOT NULL CHECK (role IN ('support', 'admin')),
                granted_at timestamptz NOT NULL,
                granted_by text NOT NULL
            );
            """)

    /// Passkeys (WebAuthn): each user's random handle (the `user.id` authenticators keep, never
    /// the user id), the credentials with their public keys and counters, and the ceremonies'
    /// challenges, by their SHA-256, until answered once or expired (the relay purges those).
    static let passkeys = PGMigration(
        version: 12, name: "passkeys",
        sql: """
            CREATE TABLE passkey_users (
                user_id uuid PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
                handle  bytea NOT NULL UNIQUE
            );
            CREATE TABLE passkeys (
                id              uuid PRIMARY KEY,
                user_id         uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
                credential_id   bytea NOT NULL UNIQUE CHECK (octet_length(credential_id) BETWEEN 1 AND 1023),
                public_key      bytea NOT NULL,
                algorithm       integer NOT NULL,
                sign_count      bigint NOT NULL,
                transports      text[] NOT NULL,
                aaguid          bytea NOT NULL,
                attestation     text NOT NULL,
                backup_eligible boolean NOT NULL,
                backed_up       boolean NOT NULL,
                name            text NOT NULL,
                created_at      timestamptz NOT NULL,
                last_used_at    timestamptz
            );
            CREATE INDEX passkeys_user ON passkeys (user_id);
            CREATE TABLE webauthn_challenges (
                challenge_hash bytea PRIMARY KEY,
                purpose        text NOT NULL CHECK (purpose IN ('register', 'login')),
                user_id        uuid REFERENCES users (id) ON DELETE CASCADE,
                created_at     timestamptz NOT NULL,
                expires_at     timestamptz NOT NULL
            );
            CREATE INDEX webauthn_challenges_expiry ON webauthn_challenges (expires_at);
            """)

    /// Sign in with Apple's refresh tokens (sealed), by the Apple subject they belong to, and the
    /// durable jobs that exchange authorization codes for them and revoke them at deletion.
    /// Neither names a user: a revocation outlives the account it was for.
    static let appleTokens = PGMigration(
        version: 11, name: "apple tokens",
        sql: """
            CREATE TABLE apple_tokens (
                subject              text PRIMARY KEY,
                client_id            text NOT NULL,
                refresh_token_sealed bytea NOT NULL,
                updated_at           timestamptz NOT NULL
            );
            CREATE TABLE apple_jobs (
                id              uuid PRIMARY KEY,
                kind            text NOT NULL CHECK (kind IN ('exchange', 'revoke')),
                subject         text NOT NULL,
                client_id       text NOT NULL,
                secret_sealed   bytea NOT NULL,
                attempts        integer NOT NULL DEFAULT 0,
                next_attempt_at timestamptz NOT NULL,
                created_at      timestamptz NOT NULL,
                finished_at     timestamptz,
                outcome         text
            );
            CREATE INDEX apple_jobs_due ON apple_jobs (next_attempt_at) WHERE finished_at IS NULL;
            """)

    /// Who signed in when, and every other security-relevant outcome, written in the transaction
    /// of its effect. `user_id` is no foreign key: an account's rows outlive its deletion (the
    /// deletion is one of them); the relay purges rows past `AUTH_AUDIT_RETENTION_DAYS`.
    static let auditTrail = PGMigration(
        version: 10, name: "audit trail",
        sql: """
            CREATE TABLE audit_log (
                id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                at              timestamptz NOT NULL,
                user_id         uuid,
                action          text NOT NULL,
                outcome         text NOT NULL,
                request_id      text,
                client_id       text,
                device_name     text,
                device_platform text,
                ip              text,
                user_agent      text,
                actor           text
            );
            CREATE INDEX audit_log_user ON audit_log (user_id, at) WHERE user_id IS NOT NULL;
            CREATE INDEX audit_log_at ON audit_log (at);
            """)

    /// The two reservation functions insert their row or lock the one there in a single step.
    /// They inserted (or found) it, then read it with `FOR UPDATE` in a second statement; a row
    /// deleted in between (a successful sign-in resets its account's throttle, the purge drops
    /// ended windows) was read as nothing: NULL failures, a NULL window end, and the request that
    /// asked was answered `internal_error`. `INSERT … ON CONFLICT DO UPDATE` always ends with one
    /// row, inserted or locked, whatever the other sessions do meanwhile.
    static let reservationsThatLock = PGMigration(
        version: 9, name: "reservations that lock",
        sql: """
            CREATE OR REPLACE FUNCTION auth_reserve_password_attempt(
                p_key text, p_at timestamptz, p_window interval, p_threshold integer, p_base interval,
                p_max interval)
            RETURNS TABLE (allowed boolean, failures integer, locked_until timestamptz)
            LANGUAGE plpgsql AS $$
            DECLARE
                current login_throttle%ROWTYPE;
                counted integer;
                lock_end timestamptz;
            BEGIN
                INSERT INTO login_throttle AS t (account_key, failures, last_failure_at)
                VALUES (p_key, 0, p_at)
                ON CONFLICT (account_key) DO UPDATE SET failures = t.failures
                RETURNING t.* INTO current;
                IF current.locked_until IS NOT NULL AND current.locked_until > p_at THEN
                    RETURN QUERY SELECT false, current.failures, current.locked_until;
                    RETURN;
                END IF;
                counted := CASE WHEN current.last_failure_at < p_at - p_window THEN 1 ELSE current.failures + 1 END;
                lock_end := CASE WHEN counted >= p_threshold
                                 THEN p_at + LEAST(p_base * power(2, LEAST(counted - p_threshold, 30)), p_max) END;
                UPDATE login_throttle SET failures = counted, last_failure_at = p_at, locked_until = lock_end
                WHERE account_key = p_key;
                RETURN QUERY SELECT true, counted, lock_end;
            END
            $$;

            CREATE OR REPLACE FUNCTION auth_reserve_rate_limit(
                p_bucket text, p_at timestamptz, p_window interval, p_limit integer, p_wanted integer)
            RETURNS TABLE (granted integer, window_end timestamptz)
            LANGUAGE plpgsql AS $$
            DECLARE
                current rate_limits%ROWTYPE;
                used integer;
                started timestamptz;
                given integer;
            BEGIN
                INSERT INTO rate_limits AS r (bucket, window_start, count)
                VALUES (p_bucket, p_at, 0)
                ON CONFLICT (bucket) DO UPDATE SET count = r.count
                RETURNING r.* INTO current;
                IF current.window_start <= p_at - p_window THEN
                    used := 0;
                    started := p_at;
                ELSE
                    used := current.count;
                    started := current.window_start;
                END IF;
                given := GREATEST(0, LEAST(p_wanted, p_limit - used));
                UPDATE rate_limits SET count = used + given, window_start = started WHERE bucket = p_bucket;
                RETURN QUERY SELECT given, started + p_window;
            END
            $$;
            """)

    /// TOTP second factors: the secret sealed (AES-256-GCM under a key derived from the results
    /// key, bound to the user), the last step used (a code is never accepted twice), and the
    /// recovery codes as SHA-256 hashes.
    static let secondFactors = PGMigration(
        version: 8, name: "second factors",
        sql: """
            CREATE TABLE mfa_factors (
                user_id         uuid PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
                secret_sealed   bytea NOT NULL,
                created_at      timestamptz NOT NULL,
                enabled_at      timestamptz,
                last_used_step  bigint
            );
            CREATE TABLE mfa_recovery_codes (
                user_id    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
                code_hash  bytea NOT NULL CHECK (length(code_hash) = 32),
                used_at    timestamptz,
                PRIMARY KEY (user_id, code_hash)
            );
            """)

    /// One-time codes sent by e-mail (address verification, password reset). Neither the code
    /// nor the link token is stored: the code as an HMAC under a worker key (six digits would fall
    /// to a plain hash at once), the link token (256 random bits) as its SHA-256.
    static let oneTimeCodes = PGMigration(
        version: 7, name: "one-time codes",
        sql: """
            CREATE TABLE one_time_codes (
                id           uuid PRIMARY KEY,
                user_id      uuid REFERENCES users (id) ON DELETE CASCADE,  -- null: a sign-up code
                purpose      text NOT NULL,
                email        text NOT NULL,
                code_hmac    bytea NOT NULL CHECK (length(code_hmac) = 32),
                link_hash    bytea NOT NULL UNIQUE CHECK (length(link_hash) = 32),
                attempts     integer NOT NULL DEFAULT 0,
                created_at   timestamptz NOT NULL,
                expires_at   timestamptz NOT NULL,
                used_at      timestamptz
            );
            CREATE INDEX one_time_codes_live ON one_time_codes (email, purpose, created_at DESC)
                WHERE used_at IS NULL;
            CREATE INDEX one_time_codes_user ON one_time_codes (user_id, purpose) WHERE used_at IS NULL;
            CREATE INDEX one_time_codes_expiry ON one_time_codes (expires_at);
            """)

    /// A read-only view for gateways that look access tokens up in PostgreSQL themselves
    /// (Sanctum-style) instead of asking the worker (`introspect`): by the token's SHA-256, what it
    /// stands for and whether it is active now. Grant a gateway role SELECT on this view only.
    static let gatewayTokenView = PGMigration(
        version: 6, name: "gateway token view",
        sql: """
            CREATE VIEW gateway_access_tokens AS
            SELECT t.token_hash,
                   s.user_id,
                   t.session_id,
                   t.abilities,
                   u.is_guest,
                   least(t.expires_at, s.expires_at) AS expires_at,
                   s.revoked_at IS NULL AND least(t.expires_at, s.expires_at) > now() AS active
            FROM access_tokens t
            JOIN sessions s ON s.id = t.session_id
            JOIN users u ON u.id = s.user_id;
            COMMENT ON VIEW gateway_access_tokens IS
                'Read-only lookup of access tokens by SHA-256 (token_hash = sha256(token)); active says whether the token is accepted now.';
            """)

    /// Rate limits reserved ahead of the work they allow, in one atomic step shared by every
    /// replica: global ceilings for guest sign-ups and registrations, and registrations per client.
    static let sharedRateLimits = PGMigration(
        version: 5, name: "shared rate limits",
        sql: """
            -- Grants up to p_wanted uses of a bucket's window, as many as its limit still allows,
            -- and says when the window ends. A window older than p_window starts over.
            CREATE FUNCTION auth_reserve_rate_limit(
                p_bucket text, p_at timestamptz, p_window interval, p_limit integer, p_wanted integer)
            RETURNS TABLE (granted integer, window_end timestamptz)
            LANGUAGE plpgsql AS $$
            DECLARE
                current rate_limits%ROWTYPE;
                used integer;
                started timestamptz;
                given integer;
            BEGIN
                INSERT INTO rate_limits (bucket, window_start, count)
                VALUES (p_bucket, p_at, 0) ON CONFLICT (bucket) DO NOTHING;
                SELECT * INTO current FROM rate_limits WHERE bucket = p_bucket FOR UPDATE;
                IF current.window_start <= p_at - p_window THEN
                    used := 0;
                    started := p_at;
                ELSE
                    used := current.count;
                    started := current.window_start;
                END IF;
                given := GREATEST(0, LEAST(p_wanted, p_limit - used));
                UPDATE rate_limits SET count = used + given, window_start = started WHERE bucket = p_bucket;
                RETURN QUERY SELECT given, started + p_window;
            END
            $$;
            """)

    /// A request id is bound to a digest of its request, so a second request reusing the id is
    /// refused instead of answered with the first one's result; password attempts are counted
    /// before they are verified, in one atomic step shared by every replica; published events
    /// are deleted from the outbox rather than marked (one dead tuple instead of a new version
    /// and its index entries, for every event).
    static let batchedPipeline = PGMigration(
        version: 4, name: "batched pipeline",
        sql: """
            ALTER TABLE processed_requests ADD COLUMN request_digest bytea;
            -- sessions_user_all (version 2) serves every lookup by user; this one only cost inserts.
            DROP INDEX sessions_user;
            -- Published events now leave the outbox; those marked published before go too.
            DELETE FROM outbox WHERE published_at IS NOT NULL;

            -- Counts an attempt for an account before its password is checked. A locked account's
            -- attempt is refused and not counted; failures older than the window start over; reaching
            -- the threshold locks the account for base * 2^(failures - threshold), at most max.
            CREATE FUNCTION auth_reserve_password_attempt(
                p_key text, p_at timestamptz, p_window interval, p_threshold integer, p_base interval,
                p_max interval)
            RETURNS TABLE (allowed boolean, failures integer, locked_until timestamptz)
            LANGUAGE plpgsql AS $$
            DECLARE
                current login_throttle%ROWTYPE;
                counted integer;
                lock_end timestamptz;
            BEGIN
                INSERT INTO login_throttle (account_key, failures, last_failure_at)
                VALUES (p_key, 0, p_at) ON CONFLICT (account_key) DO NOTHING;
                SELECT * INTO current FROM login_throttle WHERE account_key = p_key FOR UPDATE;
                IF current.locked_until IS NOT NULL AND current.locked_until > p_at THEN
                    RETURN QUERY SELECT false, current.failures, current.locked_until;
                    RETURN;
                END IF;
                counted := CASE WHEN current.last_failure_at < p_at - p_window THEN 1 ELSE current.failures + 1 END;
                lock_end := CASE WHEN counted >= p_threshold
                                 THEN p_at + LEAST(p_base * power(2, LEAST(counted - p_threshold, 30)), p_max) END;
                UPDATE login_throttle SET failures = counted, last_failure_at = p_at, locked_until = lock_end
                WHERE account_key = p_key;
                RETURN QUERY SELECT true, counted, lock_end;
            END
            $$;
            """)

    /// The answer to each processed request, sealed with the results key, so a redelivered request
    /// is answered with the same result (tokens included) without any token stored readable.
    static let storedResults = PGMigration(
        version: 3, name: "stored results",
        sql: """
            ALTER TABLE processed_requests ADD COLUMN result_sealed bytea;
            """)

    /// The successor a refresh made, sealed with a key only the presenter of the parent token can
    /// derive, so a retry within the grace interval gets the same tokens back.
    static let refreshSuccessors = PGMigration(
        version: 2, name: "refresh successors",
        sql: """
            ALTER TABLE refresh_tokens ADD COLUMN successor_sealed bytea;
            CREATE INDEX sessions_user_all ON sessions (user_id);
            """)

    /// Users, identities, sessions and tokens for every login method of DESIGN.md, the idempotency
    /// record, the event outbox, and password-attempt throttling.
    static let initialSchema = PGMigration(
        version: 1, name: "initial schema",
        sql: """
            CREATE TABLE users (
                id               uuid PRIMARY KEY,
                handle           text NOT NULL UNIQUE,
                name             text,
                email            text,
                email_verified   boolean NOT NULL DEFAULT false,
                is_private_email boolean NOT NULL DEFAULT false,
                is_guest         boolean NOT NULL,
                created_at       timestamptz NOT NULL,
                updated_at       timestamptz NOT NULL,
                upgraded_at      timestamptz
            );
            CREATE INDEX users_email ON users (lower(email)) WHERE email IS NOT NULL;
            CREATE INDEX users_guest_created ON users (created_at) WHERE is_guest;

            -- One row per way of signing in. (provider, subject) is the key: for apple, google and oidc
            -- providers the token's `sub`; for `password` the normalised e-mail address.
            CREATE TABLE identities (
                provider         text NOT NULL,
                subject          text NOT NULL,
                user_id          uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
                email            text,
                email_verified   boolean NOT NULL DEFAULT false,
                is_private_email boolean NOT NULL DEFAULT false,
                email_status     text,
                password_hash    text,
                created_at       timestamptz NOT NULL,
                last_login_at    timestamptz NOT NULL,
                PRIMARY KEY (provider, subject)
            );
            CREATE INDEX identities_user ON identities (user_id);

            -- A session is one device's sign-in; its tokens rotate, the session stays.
            CREATE TABLE sessions (
                id               uuid PRIMARY KEY,
                user_id          uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
                provider         text NOT NULL,
                device_name      text,
                device_platform  text,
                abilities        text[] NOT NULL,
                created_at       timestamptz NOT NULL,
                expires_at       timestamptz NOT NULL,
                revoked_at       timestamptz,
                revoked_reason   text
            );
            CREATE INDEX sessions_user ON sessions (user_id) WHERE revoked_at IS NULL;

            -- Access tokens: only the SHA-256 of the token is stored (opaque tokens are looked up by
            -- it; JWT access tokens are recorded by their jti for revocation and audit).
            CREATE TABLE access_tokens (
                id               uuid PRIMARY KEY,
                session_id       uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                token_hash       bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
                name             text,
                abilities        text[] NOT NULL,
                created_at       timestamptz NOT NULL,
                expires_at       timestamptz NOT NULL,
                last_used_at     timestamptz
            );
            CREATE INDEX access_tokens_session ON access_tokens (session_id);

            -- Refresh tokens form one family per session; each use rotates to a successor.
            CREATE TABLE refresh_tokens (
                id               uuid PRIMARY KEY,
                session_id       uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                token_hash       bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
                parent_id        uuid REFERENCES refresh_tokens (id) ON DELETE SET NULL,
                created_at       timestamptz NOT NULL,
                expires_at       timestamptz NOT NULL,
                used_at          timestamptz,
                replaced_by      uuid
            );
            CREATE INDEX refresh_tokens_session ON refresh_tokens (session_id);

            -- Idempotency: one row per request id, written in the transaction of its effect.
            CREATE TABLE processed_requests (
                request_id       text PRIMARY KEY,
                method           text NOT NULL,
                status           text NOT NULL,
                user_id          uuid,
                session_id       uuid,
                processed_at     timestamptz NOT NULL,
                expires_at       timestamptz NOT NULL
            );
            CREATE INDEX processed_requests_expiry ON processed_requests (expires_at);

            -- Transactional outbox: events are written with their cause and published after commit.
            CREATE TABLE outbox (
                seq              bigserial PRIMARY KEY,
                event_id         uuid NOT NULL UNIQUE,
                topic            text NOT NULL,
                message_key      text NOT NULL,
                payload          bytea NOT NULL,
                created_at       timestamptz NOT NULL,
                published_at     timestamptz
            );
            CREATE INDEX outbox_unpublished ON outbox (seq) WHERE published_at IS NULL;

            -- Failed password attempts per account, shared by every replica.
            CREATE TABLE login_throttle (
                account_key      text PRIMARY KEY,
                failures         integer NOT NULL,
                last_failure_at  timestamptz NOT NULL,
                locked_until     timestamptz
            );

            -- Rate limit buckets (guest creation per client key).
            CREATE TABLE rate_limits (
                bucket           text PRIMARY KEY,
                window_start     timestamptz NOT NULL,
                count            integer NOT NULL
            );
            """)
}
