import ServiceKit

extension Setting {
    // MARK: - Kafka topics (the Kafka client's own settings: `KafkaSettings`, AuthWorker)

    public static let topicRequests = Setting(
        "AUTH_TOPIC_REQUESTS", .kafka,
        "the topic gateways publish login requests on",
        default: "`auth.login.requests`")
    public static let topicResults = Setting(
        "AUTH_TOPIC_RESULTS", .kafka,
        "the topic the worker answers on, keyed by the request id",
        default: "`auth.login.results`")
    public static let topicEvents = Setting(
        "AUTH_TOPIC_EVENTS", .kafka,
        "the topic of lifecycle events, keyed by the user id",
        default: "`auth.user.events`")
    public static let topicNotifications = Setting(
        "AUTH_TOPIC_NOTIFICATIONS", .kafka,
        "the topic gateways forward Apple's server-to-server notifications on",
        default: "`auth.provider.notifications`")
    public static let topicDLQ = Setting(
        "AUTH_TOPIC_DLQ", .kafka,
        "the dead-letter topic: requests that cannot be answered (not JSON, no usable `id`)",
        default: "`auth.login.requests.dlq`")
    public static let dlqMaxBytes = Setting(
        "AUTH_DLQ_MAX_BYTES", .kafka,
        "a dead letter's value is cut at this many bytes (1 – 900,000)",
        default: "`262144`")
    public static let eventSource = Setting(
        "AUTH_EVENT_SOURCE", .kafka,
        "CloudEvents `source` of what the worker emits",
        default: "`/auth-worker`")
    public static let eventsContentMode = Setting(
        "AUTH_EVENTS_CONTENT_MODE", .kafka,
        "how events are published: `structured` (one CloudEvents JSON value) or `binary` (the attributes in `ce_` headers, the data as the value); results always answer in their request's mode",
        default: "`structured`")

    // MARK: - PostgreSQL

    public static let databaseURL = Setting(
        "AUTH_DATABASE_URL", .database,
        "PostgreSQL URL (`postgres://…`)",
        default: "none: required, or `AUTH_DATABASE_URL_FILE` (`scripts/run` sets the local setup's)")
    public static let databaseURLFile = Setting(
        "AUTH_DATABASE_URL_FILE", .database,
        "a file holding the URL (a mounted Secret: the URL carries the password); not with `AUTH_DATABASE_URL`",
        default: "none")
    public static let databasePasswordFile = Setting(
        "AUTH_DATABASE_PASSWORD_FILE", .database,
        "a file holding the database password (a mounted Secret), for a URL without one: added to the URL's parameters, never logged; wins over a password in the URL",
        default: "none")
    public static let dbPoolSize = Setting(
        "AUTH_DB_POOL_SIZE", .database,
        "PostgreSQL connections: the writers, one for password attempts, the rest for lookups, the relay and readiness; at least `AUTH_DB_WRITERS` + 2",
        default: "`5`")
    public static let dbWriters = Setting(
        "AUTH_DB_WRITERS", .database,
        "batches written at once, each on its own connection; a key's requests are written by one writer at a time, in order; the first free writer takes what is ready, the next only behind a backlog worth a transaction of its own (64 ready requests, or the batch size if smaller) or once the one before has been writing for 20 ms, and a free writer also serves the request-id lookups (light load uses one connection)",
        default: "`2`")
    public static let dbPreparedStatements = Setting(
        "AUTH_DB_PREPARED_STATEMENTS", .database,
        "each connection prepares a statement the first time it runs it, then only binds and runs it; `false` behind a transaction-mode pooler that does not carry prepared statements (PgBouncer before 1.21, or `max_prepared_statements = 0`)",
        default: "`true`")
    public static let migrateOnStart = Setting(
        "AUTH_MIGRATE_ON_START", .database,
        "apply migrations when `run` starts",
        default: "`true`")

    // MARK: - Tokens and keys

    public static let accessTokenFormat = Setting(
        "AUTH_ACCESS_TOKEN_FORMAT", .tokens,
        "`jwt` or `opaque`",
        default: "`jwt`")
    public static let signingKeys = Setting(
        "AUTH_SIGNING_KEYS", .tokens,
        "PEM private key files (P-256 or Ed25519), comma-separated: the first signs (current), the others are published (previous)",
        default: "none: required for `jwt` (`scripts/run` makes a development key)")
    public static let signingKeysNext = Setting(
        "AUTH_SIGNING_KEYS_NEXT", .tokens,
        "key files published in the JWK Set before they sign (next)",
        default: "none")
    public static let jwksMaxAgeSeconds = Setting(
        "AUTH_JWKS_MAX_AGE_SECONDS", .tokens,
        "`Cache-Control: max-age` of `/.well-known/jwks.json` and the discovery document",
        default: "`300`")
    public static let jwksUri = Setting(
        "AUTH_JWKS_URI", .tokens,
        "the `jwks_uri` the discovery document announces",
        default: "the issuer + `/.well-known/jwks.json` when `AUTH_TOKEN_ISSUER` is an http(s) URL")
    public static let tokenIssuer = Setting(
        "AUTH_TOKEN_ISSUER", .tokens,
        "`iss` of JWT access tokens (an http(s) URL also names the discovery document and key set)",
        default: "`auth-worker`")
    public static let tokenAudience = Setting(
        "AUTH_TOKEN_AUDIENCE", .tokens,
        "`aud` of JWT access tokens",
        default: "`api`")
    public static let credentialKeys = Setting(
        "AUTH_CREDENTIAL_KEYS", .tokens,
        "X25519 PEM private key files gateways seal credentials to, comma-separated, current first",
        default: "none")
    public static let requireSealedCredentials = Setting(
        "AUTH_REQUIRE_SEALED_CREDENTIALS", .tokens,
        "refuse passwords and tokens sent in clear",
        default: "`false`")
    public static let resultsKeyFile = Setting(
        "AUTH_RESULTS_KEY_FILE", .tokens,
        "file with 64 hex digits (`openssl rand -hex 32`): seals kept answers so redeliveries are answered again",
        default: "none (redeliveries then go unanswered)")
    public static let requireReplyKey = Setting(
        "AUTH_REQUIRE_REPLY_KEY", .tokens,
        "refuse token-issuing requests without `reply_key`",
        default: "`false`")

    // MARK: - Sessions

    public static let accessTokenTTLSeconds = Setting(
        "AUTH_ACCESS_TOKEN_TTL_SECONDS", .sessions,
        "access token lifetime",
        default: "`900`")
    public static let refreshTokenTTLSeconds = Setting(
        "AUTH_REFRESH_TOKEN_TTL_SECONDS", .sessions,
        "refresh token lifetime",
        default: "`2592000` (30 days)")
    public static let sessionTTLSeconds = Setting(
        "AUTH_SESSION_TTL_SECONDS", .sessions,
        "absolute session lifetime",
        default: "`7776000` (90 days)")
    public static let guestAbilities = Setting(
        "AUTH_GUEST_ABILITIES", .sessions,
        "abilities of guest sessions, comma-separated",
        default: "`guest`")
    public static let refreshReuseGraceSeconds = Setting(
        "AUTH_REFRESH_REUSE_GRACE_SECONDS", .sessions,
        "a reused refresh token within this gets the same successor; later, the session ends",
        default: "`5`")
    public static let reauthMaxAgeSeconds = Setting(
        "AUTH_REAUTH_MAX_AGE_SECONDS", .sessions,
        "how recent a sign-in must be for `mfa_enroll`, `mfa_verify`, `link_to` onto a full account, `passkey_register` on a full account and `passkey_remove` without the password in the request (`reauthentication_required`)",
        default: "`300`")

    // MARK: - Identity providers

    public static let appleAudiences = Setting(
        "AUTH_APPLE_AUDIENCES", .providers,
        "accepted `aud` values of Sign in with Apple tokens (bundle ids, Services IDs), comma-separated; none disables `apple`",
        default: "none")
    public static let googleAudiences = Setting(
        "AUTH_GOOGLE_AUDIENCES", .providers,
        "accepted `aud` values of Google ID tokens (OAuth client ids), comma-separated; none disables `google`",
        default: "none")
    public static let googleHostedDomains = Setting(
        "AUTH_GOOGLE_HOSTED_DOMAINS", .providers,
        "accepted Google Workspace `hd` values",
        default: "any")
    public static let oidcProviders = Setting(
        "AUTH_OIDC_PROVIDERS", .providers,
        "JSON file describing further OpenID Connect providers ([sign-in methods](sign-in-methods.md#configuring-providers))",
        default: "none")
    public static let appleKeysURL = Setting(
        "AUTH_APPLE_KEYS_URL", .providers,
        "Apple's key set URL",
        default: "`https://appleid.apple.com/auth/keys`")
    public static let googleKeysURL = Setting(
        "AUTH_GOOGLE_KEYS_URL", .providers,
        "Google's key set URL",
        default: "`https://www.googleapis.com/oauth2/v3/certs`")
    public static let keysMinTTLSeconds = Setting(
        "AUTH_KEYS_MIN_TTL_SECONDS", .providers,
        "the shortest a fetched key set is trusted, whatever its `Cache-Control`",
        default: "`300`")
    public static let keysMaxTTLSeconds = Setting(
        "AUTH_KEYS_MAX_TTL_SECONDS", .providers,
        "the longest a fetched key set is trusted, whatever its `Cache-Control`",
        default: "`86400`")
    public static let keysRefetchIntervalSeconds = Setting(
        "AUTH_KEYS_REFETCH_INTERVAL_SECONDS", .providers,
        "least time between refetches caused by unknown `kid`s",
        default: "`60`")
    public static let keysFetchTimeoutSeconds = Setting(
        "AUTH_KEYS_FETCH_TIMEOUT_SECONDS", .providers,
        "key set fetch timeout",
        default: "`5`")
    public static let appleTeamID = Setting(
        "AUTH_APPLE_TEAM_ID", .providers,
        "Sign in with Apple's REST API (code exchange, token revocation at deletion): the team id; with `AUTH_APPLE_KEY_ID`, `AUTH_APPLE_PRIVATE_KEY_FILE` and `AUTH_RESULTS_KEY_FILE`",
        default: "none (off)")
    public static let appleKeyID = Setting(
        "AUTH_APPLE_KEY_ID", .providers,
        "Sign in with Apple's REST API: the key id of the private key",
        default: "none (off)")
    public static let applePrivateKeyFile = Setting(
        "AUTH_APPLE_PRIVATE_KEY_FILE", .providers,
        "Sign in with Apple's REST API: the P-256 private key (PEM) that signs the client secret",
        default: "none (off)")
    public static let appleTokenURL = Setting(
        "AUTH_APPLE_TOKEN_URL", .providers,
        "Apple's token endpoint (tests point it at a stand-in)",
        default: "`https://appleid.apple.com/auth/token`")
    public static let appleRevokeURL = Setting(
        "AUTH_APPLE_REVOKE_URL", .providers,
        "Apple's revocation endpoint (tests point it at a stand-in)",
        default: "`https://appleid.apple.com/auth/revoke`")
    public static let linkByVerifiedEmail = Setting(
        "AUTH_LINK_BY_VERIFIED_EMAIL", .providers,
        "attach new provider identities to the account with the same verified e-mail",
        default: "`false`")

    // MARK: - Accounts and passwords

    public static let argon2MemoryKiB = Setting(
        "AUTH_ARGON2_MEMORY_KIB", .accounts,
        "Argon2id memory (KiB) of new password hashes",
        default: "`19456`")
    public static let argon2Iterations = Setting(
        "AUTH_ARGON2_ITERATIONS", .accounts,
        "Argon2id iterations of new password hashes",
        default: "`2`")
    public static let argon2Parallelism = Setting(
        "AUTH_ARGON2_PARALLELISM", .accounts,
        "Argon2id lanes of new password hashes",
        default: "`1`")
    public static let passwordHashThreads = Setting(
        "AUTH_PASSWORD_HASH_THREADS", .accounts,
        "threads that hash passwords",
        default: "the number of cores")
    public static let loginMaxFailures = Setting(
        "AUTH_LOGIN_MAX_FAILURES", .accounts,
        "password throttling: an account's failures before the first lock",
        default: "`5`")
    public static let loginLockSeconds = Setting(
        "AUTH_LOGIN_LOCK_SECONDS", .accounts,
        "password throttling: the first lock's length, doubling with each further failure",
        default: "`15`")
    public static let loginLockMaxSeconds = Setting(
        "AUTH_LOGIN_LOCK_MAX_SECONDS", .accounts,
        "password throttling: the longest lock",
        default: "`900`")
    public static let guestRateLimit = Setting(
        "AUTH_GUEST_RATE_LIMIT", .accounts,
        "guest sign-ups per client, `COUNT/SECONDS`; `0/…` disables",
        default: "`20/3600`")
    public static let guestGlobalRateLimit = Setting(
        "AUTH_GUEST_GLOBAL_RATE_LIMIT", .accounts,
        "guest sign-ups from all clients together, shared by every replica",
        default: "`3000/60`")
    public static let registerRateLimit = Setting(
        "AUTH_REGISTER_RATE_LIMIT", .accounts,
        "registrations per client (`client_id`, else the Kafka key)",
        default: "`10/3600`")
    public static let registerGlobalRateLimit = Setting(
        "AUTH_REGISTER_GLOBAL_RATE_LIMIT", .accounts,
        "registrations from all clients together",
        default: "`600/60`")
    public static let passwordContextWords = Setting(
        "AUTH_PASSWORD_CONTEXT_WORDS", .accounts,
        "comma-separated words new passwords must not be built on (the service's name)",
        default: "none")
    public static let passwordChangeEndsSessions = Setting(
        "AUTH_PASSWORD_CHANGE_ENDS_SESSIONS", .accounts,
        "`change_password` ends the user's other sessions",
        default: "`true`")
    public static let requireVerifiedEmail = Setting(
        "AUTH_REQUIRE_VERIFIED_EMAIL", .accounts,
        "password accounts get sessions only once their address is verified (`email_not_verified`)",
        default: "`false`")
    public static let auditRetentionDays = Setting(
        "AUTH_AUDIT_RETENTION_DAYS", .accounts,
        "how long the audit trail keeps a row (purged by the relay)",
        default: "`400`")

    // MARK: - E-mail codes

    public static let mailKey = Setting(
        "AUTH_MAIL_KEY", .emailCodes,
        "the mail service's X25519 public key (base64url): turns e-mail codes on (with `AUTH_RESULTS_KEY_FILE`); codes leave sealed to it",
        default: "none (codes off)")
    public static let emailCodeTTLSeconds = Setting(
        "AUTH_EMAIL_CODE_TTL_SECONDS", .emailCodes,
        "how long a code and its link token work",
        default: "`900`")
    public static let emailCodeMaxAttempts = Setting(
        "AUTH_EMAIL_CODE_MAX_ATTEMPTS", .emailCodes,
        "wrong guesses a code survives (1 to 10)",
        default: "`5`")
    public static let emailCodeRateLimit = Setting(
        "AUTH_EMAIL_CODE_RATE_LIMIT", .emailCodes,
        "codes sent per account and purpose",
        default: "`5/3600`")
    public static let passwordResetRateLimit = Setting(
        "AUTH_PASSWORD_RESET_RATE_LIMIT", .emailCodes,
        "`password_reset` attempts per address (each costs a hash)",
        default: "`10/3600`")
    public static let emailCodeSignup = Setting(
        "AUTH_EMAIL_CODE_SIGNUP", .emailCodes,
        "`email_code_request` to an address with no account sends a code that creates one",
        default: "`false`")

    // MARK: - Phone codes

    public static let smsKey = Setting(
        "AUTH_SMS_KEY", .phoneCodes,
        "the SMS service's X25519 public key (base64url): turns phone codes on (with `AUTH_RESULTS_KEY_FILE`); codes leave sealed to it",
        default: "none (phone codes off)")
    public static let phoneCodeTTLSeconds = Setting(
        "AUTH_PHONE_CODE_TTL_SECONDS", .phoneCodes,
        "how long a texted code works (60 to 900)",
        default: "`300`")
    public static let phoneCodeMaxAttempts = Setting(
        "AUTH_PHONE_CODE_MAX_ATTEMPTS", .phoneCodes,
        "wrong guesses a texted code survives (1 to 10)",
        default: "`3`")
    public static let phoneCodeSignup = Setting(
        "AUTH_PHONE_CODE_SIGNUP", .phoneCodes,
        "`phone_code_request` to a number with no account sends a code that creates one",
        default: "`false`")
    public static let smsCountries = Setting(
        "AUTH_SMS_COUNTRIES", .phoneCodes,
        "comma-separated country calling codes texts may go to (`1,44,82`); numbers of others are refused; `*` allows every country",
        default: "`*`")
    public static let smsNumberRateLimit = Setting(
        "AUTH_SMS_NUMBER_RATE_LIMIT", .phoneCodes,
        "codes texted to one number",
        default: "`3/3600`")
    public static let smsPrefixRateLimit = Setting(
        "AUTH_SMS_PREFIX_RATE_LIMIT", .phoneCodes,
        "codes texted to one block of a thousand numbers (the number without its last three digits): pumping walks a premium range",
        default: "`10/3600`")
    public static let smsCountryRateLimit = Setting(
        "AUTH_SMS_COUNTRY_RATE_LIMIT", .phoneCodes,
        "codes texted to one country calling code",
        default: "`200/3600`")
    public static let smsClientRateLimit = Setting(
        "AUTH_SMS_CLIENT_RATE_LIMIT", .phoneCodes,
        "codes asked for by one client (`client_id`, else the Kafka key)",
        default: "`5/3600`")
    public static let smsIPRateLimit = Setting(
        "AUTH_SMS_IP_RATE_LIMIT", .phoneCodes,
        "codes asked for from one IP address, when the gateway sends `context.ip`",
        default: "`10/3600`")
    public static let smsDailyBudget = Setting(
        "AUTH_SMS_DAILY_BUDGET", .phoneCodes,
        "codes texted by all replicas together in 24 hours from the first; `0` turns the budget off",
        default: "`1000`")

    // MARK: - Second factor

    public static let mfaIssuer = Setting(
        "AUTH_MFA_ISSUER", .secondFactor,
        "the issuer authenticator apps show for a second factor",
        default: "`auth-worker`")
    public static let mfaTokenTTLSeconds = Setting(
        "AUTH_MFA_TOKEN_TTL_SECONDS", .secondFactor,
        "how long the `mfa_token` of an `mfa_required` answer works",
        default: "`300`")
    public static let mfaRateLimit = Setting(
        "AUTH_MFA_RATE_LIMIT", .secondFactor,
        "wrong second-factor codes per account",
        default: "`5/300`")

    // MARK: - Passkeys

    public static let webauthnRPID = Setting(
        "AUTH_WEBAUTHN_RP_ID", .passkeys,
        "passkeys' relying party: the registrable domain they are bound to (`example.com`); unset, the passkey methods answer `unsupported_method`",
        default: "none (off)")
    public static let webauthnRPName = Setting(
        "AUTH_WEBAUTHN_RP_NAME", .passkeys,
        "the name an authenticator shows",
        default: "the RP ID")
    public static let webauthnOrigins = Setting(
        "AUTH_WEBAUTHN_ORIGINS", .passkeys,
        "comma-separated origins a ceremony may run in: `https://…` (or `http://localhost…` for development) and `android:apk-key-hash:…`",
        default: "`https://` + the RP ID")
    public static let webauthnUserVerification = Setting(
        "AUTH_WEBAUTHN_USER_VERIFICATION", .passkeys,
        "`required`, `preferred` or `discouraged`",
        default: "`required`")
    public static let webauthnChallengeTTLSeconds = Setting(
        "AUTH_WEBAUTHN_CHALLENGE_TTL_SECONDS", .passkeys,
        "how long a ceremony's options can be answered (30–3600)",
        default: "`300`")
    public static let webauthnAttestation = Setting(
        "AUTH_WEBAUTHN_ATTESTATION", .passkeys,
        "the attestation asked for: `none` or `direct`",
        default: "`none`")
    public static let webauthnOptionsRateLimit = Setting(
        "AUTH_WEBAUTHN_OPTIONS_RATE_LIMIT", .passkeys,
        "`passkey_login_options` per client (`client_id`, else the Kafka key) as `COUNT/SECONDS` (window at most an hour; `0/60` off): each writes a challenge row and needs no credential",
        default: "`30/60`")
    public static let webauthnOptionsGlobalRateLimit = Setting(
        "AUTH_WEBAUTHN_OPTIONS_GLOBAL_RATE_LIMIT", .passkeys,
        "`passkey_login_options` from all clients together, shared by every replica (rotating `client_id`s do not get past it)",
        default: "`3000/60`")

    // MARK: - Processing

    public static let batchMax = Setting(
        "AUTH_BATCH_MAX", .processing,
        "messages taken from one poll, and requests written in one transaction, at most; a batch is whatever is there, never waited for (earlier name )",
        default: "`500`")
    public static let batchSize = Setting(
        "AUTH_BATCH_SIZE", .processing,
        "the earlier name of `AUTH_BATCH_MAX`, still read when that is unset",
        default: "none")
    public static let maxInFlight = Setting(
        "AUTH_MAX_IN_FLIGHT", .processing,
        "messages read and not yet finished (slow password logins, waits for provider keys) at most; past it, polling pauses",
        default: "`5000`")
    public static let batchWaitMS = Setting(
        "AUTH_BATCH_WAIT_MS", .processing,
        "how long an idle poll waits for the first message: the first to arrive ends the wait at once, so this sets only how often an idle worker wakes",
        default: "`1000`")
    public static let batchLingerMS = Setting(
        "AUTH_BATCH_LINGER_MS", .processing,
        "how long a request may wait for others to join its batch before it is looked up and written (0 – 1000): fewer transactions, and less CPU a login on PostgreSQL and in the worker, under a light load, for up to this much more latency; nothing waits while 64 requests are in flight (under load batches fill anyway); `0` never waits",
        default: "`0`")
    public static let maxRetryDelayMS = Setting(
        "AUTH_MAX_RETRY_DELAY_MS", .processing,
        "cap of the backoff between retries of a transient failure",
        default: "`10000`")
    public static let idempotencyTTLSeconds = Setting(
        "AUTH_IDEMPOTENCY_TTL_SECONDS", .processing,
        "how long a request id (and its sealed answer) is remembered",
        default: "`604800` (7 days)")
    public static let requestDeadlineSeconds = Setting(
        "AUTH_REQUEST_DEADLINE_SECONDS", .processing,
        "older requests are answered with a retriable error instead of acted on; `0` disables",
        default: "`300`")
    public static let outboxRelayGraceSeconds = Setting(
        "AUTH_OUTBOX_RELAY_GRACE_SECONDS", .processing,
        "age after which unpublished outbox events are published by the relay (at least 2: published events wait up to a second to leave the outbox)",
        default: "`30`")
    public static let purgeIntervalSeconds = Setting(
        "AUTH_PURGE_INTERVAL_SECONDS", .processing,
        "how often the relay starts a purge cycle, forgetting what has expired (kept answers, codes, passkey challenges, audit rows past retention) at most 50,000 rows a table a round until it is through; 10 to 86400 (deploy/README.md, \"PostgreSQL\")",
        default: "`600`")
    public static let shutdownTimeoutSeconds = Setting(
        "AUTH_SHUTDOWN_TIMEOUT_SECONDS", .processing,
        "how long a SIGTERM drain may take",
        default: "`30`")

    // MARK: - Health, logs and the build

    public static let healthPort = Setting(
        "AUTH_HEALTH_PORT", .operations,
        "port of `/livez`, `/readyz`, `/metrics`; `off` disables",
        default: "`8080`")
    public static let healthAddress = Setting(
        "AUTH_HEALTH_ADDRESS", .operations,
        "IPv4 address the health endpoint listens on",
        default: "`0.0.0.0`")
    public static let tenantsFile = Setting(
        "AUTH_TENANTS_FILE", .processing,
        "JSON file of the tenants served besides the default one, each with its own settings ([operations](operations.md#tenants)); read again on SIGHUP",
        default: "none")
    public static let logLevel = Setting(
        "AUTH_LOG_LEVEL", .operations,
        "`debug`, `info`, `warning`, `error`",
        default: "`info`")
    public static let buildCommit = Setting(
        "AUTH_BUILD_COMMIT", .operations,
        "the commit the image was built from, shown by `auth-worker version` and `auth_build_info` (set by the image build, not by operators)",
        default: "none")
    public static let benchDatabaseURL = Setting(
        "AUTH_BENCH_DATABASE_URL", .operations,
        "`auth-bench` only: the PostgreSQL the password benchmark writes to (`scripts/bench` sets it)",
        default: "none")

    /// The domain's settings, in the reference's order (the Kafka client's are
    /// `KafkaSettings.declared`, the console's `ConsoleSettings.declared`).
    public static let domain: [Setting] = [
        .topicRequests, .topicResults, .topicEvents, .topicNotifications, .topicDLQ,
        .dlqMaxBytes, .eventSource, .eventsContentMode,
        .databaseURL, .databaseURLFile, .databasePasswordFile, .dbPoolSize, .dbWriters, .dbPreparedStatements,
        .migrateOnStart,
        .accessTokenFormat, .signingKeys, .signingKeysNext, .jwksMaxAgeSeconds, .jwksUri, .tokenIssuer, .tokenAudience,
        .credentialKeys, .requireSealedCredentials, .resultsKeyFile, .requireReplyKey,
        .accessTokenTTLSeconds, .refreshTokenTTLSeconds, .sessionTTLSeconds, .guestAbilities, .refreshReuseGraceSeconds,
        .reauthMaxAgeSeconds,
        .appleAudiences, .googleAudiences, .googleHostedDomains, .oidcProviders, .appleKeysURL, .googleKeysURL,
        .keysMinTTLSeconds, .keysMaxTTLSeconds, .keysRefetchIntervalSeconds, .keysFetchTimeoutSeconds, .appleTeamID,
        .appleKeyID, .applePrivateKeyFile, .appleTokenURL, .appleRevokeURL, .linkByVerifiedEmail,
        .argon2MemoryKiB, .argon2Iterations, .argon2Parallelism, .passwordHashThreads, .loginMaxFailures,
        .loginLockSeconds, .loginLockMaxSeconds, .guestRateLimit, .guestGlobalRateLimit, .registerRateLimit,
        .registerGlobalRateLimit, .passwordContextWords, .passwordChangeEndsSessions, .requireVerifiedEmail,
        .auditRetentionDays,
        .mailKey, .emailCodeTTLSeconds, .emailCodeMaxAttempts, .emailCodeRateLimit, .passwordResetRateLimit,
        .emailCodeSignup,
        .smsKey, .phoneCodeTTLSeconds, .phoneCodeMaxAttempts, .phoneCodeSignup, .smsCountries, .smsNumberRateLimit,
        .smsPrefixRateLimit, .smsCountryRateLimit, .smsClientRateLimit, .smsIPRateLimit, .smsDailyBudget,
        .mfaIssuer, .mfaTokenTTLSeconds, .mfaRateLimit,
        .webauthnRPID, .webauthnRPName, .webauthnOrigins, .webauthnUserVerification, .webauthnChallengeTTLSeconds,
        .webauthnAttestation, .webauthnOptionsRateLimit, .webauthnOptionsGlobalRateLimit,
        .batchMax, .batchSize, .maxInFlight, .batchWaitMS, .batchLingerMS, .maxRetryDelayMS, .idempotencyTTLSeconds,
        .requestDeadlineSeconds, .outboxRelayGraceSeconds, .purgeIntervalSeconds, .shutdownTimeoutSeconds,
        .tenantsFile, .healthPort, .healthAddress, .logLevel, .buildCommit, .benchDatabaseURL,
    ]
}
