import AuthDomain
import PGStore

/// The database schema, as ordered migrations. Released versions are never edited: add a new one.
public enum Migrations {
    public static let all: [PGMigration] = [
        initialSchema, refreshSuccessors, storedResults, batchedPipeline, sharedRateLimits, gatewayTokenView,
        oneTimeCodes, secondFactors, reservationsThatLock, auditTrail, appleTokens, passkeys,
        accountAdministration, consoleSessions, outboxWithoutPartialIndex, foreignKeysServedByIndexes,
        requestsByUser, finishedAppleJobs, refreshTokensBySessionAndTime, endedSessionsForgetTheirTokens,
        usersFoundByIndex, staffNamedByID, phoneNumbers, usersFoundByPhone, roomForUpdatesInPlace, tenants,
        consoleRolesPerTenant,
    ]

    /// The tables whose rows are a tenant's, each with a `tenant` column: the accounts and what
    /// is found by a value that two tenants may share (an identity's subject, a handle, a request
    /// id, a passkey's credential id, a code's address, an Apple subject). Sessions, tokens,
    /// factors, passkey handles and console rows belong to their user, and are reached through it.
    public static let tenantTables = [
        "users", "identities", "processed_requests", "one_time_codes", "passkeys", "webauthn_challenges",
        "apple_tokens", "apple_jobs", "audit_log",
    ]

    /// A console role serves one tenant's users (`support` or `admin`, its `tenant`), or every
    /// tenant's (`operator`, no tenant). The roles granted so far are the default tenant's. The
    /// table holds a row a console user: adding a column with a constant default rewrites none.
    static let consoleRolesPerTenant = PGMigration(
        version: 27, name: "console roles per tenant",
        sql: """
            ALTER TABLE admin_roles ADD COLUMN tenant text DEFAULT 'default';
            ALTER TABLE admin_roles DROP CONSTRAINT IF EXISTS admin_roles_role_check;
            ALTER TABLE admin_roles ADD CONSTRAINT admin_roles_role_check
                CHECK (role IN ('support', 'admin', 'operator'));
            ALTER TABLE admin_roles ADD CONSTRAINT admin_roles_tenant_check
                CHECK ((role = 'operator') = (tenant IS NULL));
            """)

    /// Every row is a tenant's; those written so far are the default tenant's (`'default'`).
    ///
    /// A column with a constant default is added without rewriting a row (PostgreSQL 11 and
    /// later), each table in a transaction of its own under the migrator's bounded lock wait, so no
    /// table's logins wait on more than one `ALTER` at a time. The keys a tenant owns gain the
    /// tenant as their last column, built `CONCURRENTLY` beside the old ones and swapped in under
    /// the old names, each swap a statement of its own (and skipped when done, should the
    /// migration run again): a lookup by the old columns (a replica of the release before, during
    /// a rolling upgrade) is still a probe of the key's leading columns.
    ///
    /// `apple_tokens` keeps its key on `subject` alone one release longer, beside the one with the
    /// tenant: the release before stores a token with `ON CONFLICT (subject)`, which needs it.
    /// Until it goes, two tenants cannot keep a token for one Apple subject; tenants are not
    /// served before it does.
    static let tenants: PGMigration = {
        let keys = [
            ("identities_key_by_tenant", "identities (provider, subject, tenant)", "identities_pkey"),
            ("users_handle_by_tenant", "users (handle text_pattern_ops, tenant)", "users_handle"),
            ("processed_requests_key_by_tenant", "processed_requests (request_id, tenant)", "processed_requests_pkey"),
            ("passkeys_credential_by_tenant", "passkeys (credential_id, tenant)", "passkeys_credential_id_key"),
            ("apple_tokens_key_by_tenant", "apple_tokens (subject, tenant)", nil),
        ]
        var migration = PGMigration(
            version: 26, name: "tenants",
            outsideTransaction: tenantTables.map {
                "ALTER TABLE \($0) ADD COLUMN IF NOT EXISTS tenant text NOT NULL DEFAULT 'default'"
            }
                + keys.flatMap { name, key, _ in
                    [
                        // An index a stopped build left invalid is built again from scratch.
                        """
                        DO $$ BEGIN
                            IF (SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass('\(name)')) THEN
                                EXECUTE 'DROP INDEX \(name)';
                            END IF;
                        END $$
                        """,
                        build(name, key),
                    ]
                } + [
                    swap(
                        "identities_key_by_tenant",
                        "ALTER TABLE identities DROP CONSTRAINT identities_pkey, "
                            + "ADD CONSTRAINT identities_pkey PRIMARY KEY USING INDEX identities_key_by_tenant"),
                    swap(
                        "users_handle_by_tenant",
                        "DROP INDEX users_handle; ALTER INDEX users_handle_by_tenant RENAME TO users_handle"),
                    swap(
                        "processed_requests_key_by_tenant",
                        "ALTER TABLE processed_requests DROP CONSTRAINT processed_requests_pkey, "
                            + "ADD CONSTRAINT processed_requests_pkey PRIMARY KEY USING INDEX "
                            + "processed_requests_key_by_tenant"),
                    swap(
                        "passkeys_credential_by_tenant",
                        "ALTER TABLE passkeys DROP CONSTRAINT passkeys_credential_id_key, "
                            + "ADD CONSTRAINT passkeys_credential_id_key UNIQUE USING INDEX passkeys_credential_by_tenant"
                    ),
                ])
        // A key swapped in already has the tenant as its last column under the old name: its
        // index is not built again.
        for (name, key, swapped) in keys {
            guard let swapped else { continue }
            migration.skipWhen[build(name, key)] =
                """
                SELECT EXISTS (SELECT 1 FROM pg_index x JOIN pg_attribute a
                                   ON a.attrelid = x.indrelid AND a.attnum = x.indkey[x.indnatts - 1]
                               WHERE x.indexrelid = to_regclass('\(swapped)') AND a.attname = 'tenant') AS done
                """
        }
        return migration
    }()

    private static func build(_ name: String, _ key: String) -> String {
        "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS \(name) ON \(key)"
    }

    /// A key's swap, run when the index built for it is still there under its own name.
    private static func swap(_ index: String, _ statements: String) -> String {
        """
        DO $$ BEGIN
            IF to_regclass('\(index)') IS NOT NULL THEN
                EXECUTE '\(statements.replacingOccurrences(of: "; ", with: "'; EXECUTE '"))';
            END IF;
        END $$
        """
    }

    /// A refresh marks the token it rotates (`used_at`, `replaced_by`, `successor_sealed`), and a
    /// returning sign-in stamps its identity's `last_login_at`: updates of rows written long before,
    /// on pages the inserts after them filled. With no room left on its page the new version of a
    /// row goes to another one, and every index of the table gets an entry for it (three for a
    /// token, three for an identity), each a page of its own to change and, after a checkpoint, to
    /// write whole to the WAL. Pages filled to 80 % (tokens, which grow by their sealed successor)
    /// and 90 % (identities) keep room for the new version beside the old one, where PostgreSQL
    /// writes it without touching an index (a heap-only tuple). Setting it rewrites no existing
    /// page and takes a lock writes go on under; the pages written from now on get the room
    /// (`docs/operations.md` says how to give it to the old ones).
    static let roomForUpdatesInPlace = PGMigration(
        version: 25, name: "room for updates in place",
        sql: """
            ALTER TABLE refresh_tokens SET (fillfactor = 80);
            ALTER TABLE identities SET (fillfactor = 90);
            """)

    /// Accounts have a phone number, proven by a texted code (`phone_code`): the number is the
    /// `phone` identity's subject (which signs in, and keeps two accounts from one number) and the
    /// user's `phone`, which results show. Adding a column without a default rewrites nothing.
    /// Texted codes share `one_time_codes`: its `email` column holds a code's destination, a
    /// number for the phone purposes.
    static let phoneNumbers = PGMigration(
        version: 23, name: "phone numbers",
        sql: """
            ALTER TABLE users ADD COLUMN IF NOT EXISTS phone text;
            COMMENT ON COLUMN one_time_codes.email IS
                'where the code was sent: an e-mail address, or an E.164 number for the phone purposes';
            """)

    /// The console and `auth-worker users show` find accounts by a number's prefix; built
    /// `CONCURRENTLY`, so sign-ins go on while it is.
    static let usersFoundByPhone = PGMigration(
        version: 24, name: "users found by phone",
        outsideTransaction: [
            "DROP INDEX CONCURRENTLY IF EXISTS users_phone",
            "CREATE INDEX CONCURRENTLY users_phone ON users (phone text_pattern_ops) WHERE phone IS NOT NULL",
        ])

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
}
