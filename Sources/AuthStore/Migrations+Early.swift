import AuthDomain
import PGStore

/// The first nine migrations: the schema as it began, and how it grew to codes and factors.
extension Migrations {
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
