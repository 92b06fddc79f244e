import Foundation
import Messages
import Passwords
import ServiceKit

/// Everything the worker needs to run, read from the environment in one place.
///
/// Names follow the operator interface of the contract. Secrets come from the environment or
/// files, never from the command line.
public struct WorkerConfiguration: Sendable {
    /// PostgreSQL URL. Env: `AUTH_DATABASE_URL`. Required, like the brokers.
    public var databaseURL: String
    /// Topic names. Env: `AUTH_TOPIC_*`.
    public var topics = Topics()
    /// Access token format. Env: `AUTH_ACCESS_TOKEN_FORMAT` (`jwt` or `opaque`). Default: `jwt`.
    public var accessTokenFormat: AccessTokenFormat = .jwt
    /// Private key files of JWT access tokens: the first signs (current), the others are
    /// published until their tokens expire (previous). Env: `AUTH_SIGNING_KEYS`.
    public var signingKeyPaths: [String] = []
    /// Keys published in the JWK Set before they sign (next), so cached key sets hold them by the
    /// time they do. Env: `AUTH_SIGNING_KEYS_NEXT`. Default: none.
    public var nextSigningKeyPaths: [String] = []
    /// `Cache-Control: max-age` of `/.well-known/jwks.json` and the discovery document.
    /// Env: `AUTH_JWKS_MAX_AGE_SECONDS`. Default: 300.
    public var keySetMaxAge: Int = 300
    /// The `jwks_uri` the discovery document announces. Env: `AUTH_JWKS_URI`. Default: the
    /// issuer followed by `/.well-known/jwks.json` when the issuer is an http(s) URL.
    public var jwksURI: String?
    /// X25519 private keys (PEM) gateways seal credentials to, the current one first; the others
    /// still open what was sealed to them. Env: `AUTH_CREDENTIAL_KEYS`, comma-separated. Default: none.
    public var credentialKeyPaths: [String] = []
    /// Refuse passwords and tokens sent in clear: each must arrive under `data.sealed_credentials`.
    /// Env: `AUTH_REQUIRE_SEALED_CREDENTIALS`. Default: false.
    public var requireSealedCredentials = false
    /// `iss` of issued JWT access tokens. Env: `AUTH_TOKEN_ISSUER`. Default: `auth-worker`.
    public var tokenIssuer = "auth-worker"
    /// `aud` of issued JWT access tokens. Env: `AUTH_TOKEN_AUDIENCE`. Default: `api`.
    public var tokenAudience = "api"
    /// Minimum log level. Env: `AUTH_LOG_LEVEL`. Default: `info`.
    public var logLevel: Logger.Level = .info
    /// Accepted audiences per built-in provider; a provider without audiences is disabled.
    /// Env: `AUTH_APPLE_AUDIENCES`, `AUTH_GOOGLE_AUDIENCES`.
    public var appleAudiences: [String] = []
    public var googleAudiences: [String] = []
    /// Env: `AUTH_APPLE_KEYS_URL`, `AUTH_GOOGLE_KEYS_URL`.
    public var appleKeysURL = "https://appleid.apple.com/auth/keys"
    public var googleKeysURL = "https://www.googleapis.com/oauth2/v3/certs"
    /// Google Workspace domains accepted in `hd`. Env: `AUTH_GOOGLE_HOSTED_DOMAINS`. Default: any.
    public var googleHostedDomains: [String] = []
    /// Provider key sets: cache bounds and refetch limits.
    public var keySets = KeySetSettings()
    /// Env: `AUTH_OIDC_PROVIDERS`: path of a JSON file describing further providers.
    public var oidcProvidersPath: String?
    /// The tenants file (`TenantsFile`); nil: the default tenant only. Env: `AUTH_TENANTS_FILE`.
    public var tenantsFilePath: String?
    /// How provider key sets are fetched and cached.
    public struct KeySetSettings: Sendable, Equatable {
        /// Shortest time a fetched set is trusted, whatever `Cache-Control` says.
        /// Env: `AUTH_KEYS_MIN_TTL_SECONDS`. Default: 300.
        public var minimumLifetime: TimeInterval = 300
        /// Longest time a fetched set is trusted. Env: `AUTH_KEYS_MAX_TTL_SECONDS`. Default: 86400.
        public var maximumLifetime: TimeInterval = 86400
        /// Lifetime when the response has no `max-age`. Default: 3600.
        public var defaultLifetime: TimeInterval = 3600
        /// A token with an unknown `kid` triggers a refetch at most this often.
        /// Env: `AUTH_KEYS_REFETCH_INTERVAL_SECONDS`. Default: 60.
        public var unknownKeyRefetchInterval: TimeInterval = 60
        /// After a failed fetch, wait this long before trying again. Default: 5.
        public var failureBackoff: TimeInterval = 5
        /// Per-request timeout. Env: `AUTH_KEYS_FETCH_TIMEOUT_SECONDS`. Default: 5.
        public var fetchTimeout: TimeInterval = 5
        public init() {}
    }

    /// Session and token lifetimes.
    public var sessions = Sessions()
    /// Password accounts, throttling, guest limits, linking.
    public var accounts = Accounts()
    /// One-time codes sent by e-mail (verification, password reset).
    public var emailCodes = EmailCodes()
    /// One-time codes texted to phone numbers.
    public var phoneCodes = PhoneCodes()

    /// The longest window any rate limit counts over: the purge keeps `rate_limits` rows this long
    /// (a shorter keep would restart a daily budget every hour).
    public var longestRateLimitWindow: TimeInterval {
        let phone = [
            phoneCodes.perNumber, phoneCodes.perPrefix, phoneCodes.perCountry, phoneCodes.perClient, phoneCodes.perIP,
            phoneCodes.dailyBudget,
        ]
        let others = [
            emailCodes.sendLimit, emailCodes.resetLimit, mfa.attempts, passkeys.optionsRateLimit,
            passkeys.optionsGlobalRateLimit,
        ]
        return max(accounts.longestRateLimitWindow, mfa.lockoutHorizon, (phone + others).map(\.window).max() ?? 0)
    }
    /// TOTP second factors.
    public var mfa = MFA()
    /// The key that seals stored results, so a redelivered request gets the same answer.
    /// Env: `AUTH_RESULTS_KEY_FILE` (a file holding 32 random bytes as 64 hex digits). Default: none,
    /// in which case a redelivered request is not answered again (its effects are still never repeated).
    public var resultsKey: [UInt8]?
    /// Requests older than this when finally processed are answered with a retriable error instead
    /// of acted on late. Env: `AUTH_REQUEST_DEADLINE_SECONDS` (0 turns it off). Default: 300.
    public var requestDeadline: TimeInterval = 300
    /// Port of the health endpoint (`/livez`, `/readyz`, `/metrics`); nil turns it off, 0 picks one.
    /// Env: `AUTH_HEALTH_PORT` (`off` turns it off). Default: 8080.
    public var healthPort: UInt16? = 8080
    /// The IPv4 address the health endpoint listens on. Env: `AUTH_HEALTH_ADDRESS`. Default:
    /// `0.0.0.0` (every interface: an orchestrator probes the pod's address).
    public var healthAddress = "0.0.0.0"
    /// Outbox events older than this and still unpublished (a crash came between commit and
    /// publish) are published by the relay. At least 2 (`validate`): published events wait up to a
    /// second to leave the outbox. Env: `AUTH_OUTBOX_RELAY_GRACE_SECONDS`. Default: 30.
    public var outboxRelayGrace: TimeInterval = 30
    /// How often the relay starts a purge cycle, forgetting what has expired a slice at a time
    /// (`OutboxRelay`). 10 seconds to a day (`validate`). Env: `AUTH_PURGE_INTERVAL_SECONDS`.
    /// Default: 600.
    public var purgeInterval: TimeInterval = 600
    /// Batching and parallelism.
    public var processing = Processing()
    /// Apply migrations when `run` starts. Env: `AUTH_MIGRATE_ON_START` (`true`/`false`). Default: true.
    public var migrateOnStart = true
    /// How long SIGTERM may take before the worker exits non-zero. Env: `AUTH_SHUTDOWN_TIMEOUT_SECONDS`.
    /// Default: 30 s.
    public var shutdownTimeout: Duration = .seconds(30)
    /// `source` of emitted CloudEvents. Env: `AUTH_EVENT_SOURCE`. Default: `/auth-worker`.
    public var eventSource = "/auth-worker"
    /// How events are published: structured (one JSON value, the default) or binary (attributes
    /// in `ce_` headers, the data as the value). Env: `AUTH_EVENTS_CONTENT_MODE`.
    public var eventsContentMode: CloudEventMode = .structured

    /// Access token formats.
    public enum AccessTokenFormat: String, Sendable {
        case jwt, opaque
    }

    /// Topic names; defaults are the contract's.
    public struct Topics: Sendable, Equatable {
        public var requests = "auth.login.requests"
        public var results = "auth.login.results"
        public var events = "auth.user.events"
        public var notifications = "auth.provider.notifications"
        public var deadLetters = "auth.login.requests.dlq"
        public init() {}

        /// Every topic the worker reads or writes.
        public var all: [String] { [requests, results, events, notifications, deadLetters] }
    }

    /// Lifetimes of what a login issues.
    public struct Sessions: Sendable, Equatable {
        /// Env: `AUTH_ACCESS_TOKEN_TTL_SECONDS`. Default: 900 (15 minutes).
        public var accessTokenLifetime: TimeInterval = 900
        /// Env: `AUTH_REFRESH_TOKEN_TTL_SECONDS`. Default: 30 days.
        public var refreshTokenLifetime: TimeInterval = 30 * 86400
        /// Absolute session lifetime. Env: `AUTH_SESSION_TTL_SECONDS`. Default: 90 days.
        public var sessionLifetime: TimeInterval = 90 * 86400
        /// Abilities of guest sessions. Env: `AUTH_GUEST_ABILITIES` (comma-separated). Default: `guest`.
        public var guestAbilities = ["guest"]
        /// Abilities of member sessions. Default: `*`.
        public var memberAbilities = ["*"]
        /// A refresh token reused this soon after its rotation gets the same successor (two tabs
        /// refreshing at once); later, a reuse ends the session. Env: `AUTH_REFRESH_REUSE_GRACE_SECONDS`.
        /// Default: 5.
        public var refreshReuseGrace: TimeInterval = 5
        /// Refuse token-issuing requests without `reply_key`, so no readable token is ever published.
        /// Env: `AUTH_REQUIRE_REPLY_KEY`. Default: false.
        public var requireReplyKey = false
        /// How long a request id is remembered for idempotency. Env: `AUTH_IDEMPOTENCY_TTL_SECONDS`.
        /// Default: 7 days.
        public var idempotencyLifetime: TimeInterval = 7 * 86400
        public init() {}
    }

    /// Sign in with Apple's REST API: the client secret's signing key and the endpoints.
    public var appleTokens = AppleTokens()

    /// What the worker needs to exchange Apple authorization codes and revoke Apple's tokens when
    /// an account is deleted (App Store Review Guideline 5.1.1(v)): on when the team id, key id
    /// and key file are all set (and `AUTH_RESULTS_KEY_FILE`, which seals the tokens at rest).
    public struct AppleTokens: Sendable, Equatable {
        /// Env: `AUTH_APPLE_TEAM_ID`. Default: none (off).
        public var teamID: String?
        /// Env: `AUTH_APPLE_KEY_ID`. Default: none (off).
        public var keyID: String?
        /// The Sign in with Apple private key (the `.p8` file, PKCS#8 PEM, P-256).
        /// Env: `AUTH_APPLE_PRIVATE_KEY_FILE`. Default: none (off).
        public var privateKeyPath: String?
        /// Env: `AUTH_APPLE_TOKEN_URL`. Default: Apple's.
        public var tokenURL = "https://appleid.apple.com/auth/token"
        /// Env: `AUTH_APPLE_REVOKE_URL`. Default: Apple's.
        public var revokeURL = "https://appleid.apple.com/auth/revoke"
        /// The longest wait between two tries of a job. Default: an hour.
        public var maxRetryDelay: TimeInterval = 3600

        public init() {}

        /// All three identity settings are there.
        public var isEnabled: Bool { teamID != nil && keyID != nil && privateKeyPath != nil }
    }

    /// Passkeys (WebAuthn): off until the relying party's id is set.
    public var passkeys = Passkeys()

    /// The relying party passkeys are registered to, and the ceremonies' rules.
    public struct Passkeys: Sendable, Equatable {
        /// The RP ID: the registrable domain passkeys are bound to (`example.com`); iOS apps name
        /// it in their associated domains. Env: `AUTH_WEBAUTHN_RP_ID`. Default: none (passkey
        /// methods answer `unsupported_method`).
        public var rpID: String?
        /// Shown by the authenticator when a passkey is made. Env: `AUTH_WEBAUTHN_RP_NAME`.
        /// Default: the RP ID.
        public var rpName: String?
        /// Origins a ceremony may run in: web origins (`https://example.com`) and Android apps
        /// (`android:apk-key-hash:…`), comma-separated. Env: `AUTH_WEBAUTHN_ORIGINS`. Default:
        /// `https://` and the RP ID.
        public var origins: [String] = []
        /// Whether the user must be verified (PIN, biometrics): `required`, `preferred` or
        /// `discouraged`. Env: `AUTH_WEBAUTHN_USER_VERIFICATION`. Default: `required`.
        public var userVerification = "required"
        /// How long a ceremony's challenge can be answered. Env:
        /// `AUTH_WEBAUTHN_CHALLENGE_TTL_SECONDS`. Default: 300.
        public var challengeLifetime: TimeInterval = 300
        /// The attestation asked for: `none` (the default: no authenticator make is judged) or
        /// `direct`. Env: `AUTH_WEBAUTHN_ATTESTATION`.
        public var attestation = "none"
        /// Passkeys one account may hold. Default: 20.
        public var maximumPerUser = 20
        /// `passkey_login_options` per client (the gateway's `client_id`, else the request's Kafka
        /// key) per window: each writes a challenge row, and asks for no credential. A count of 0
        /// turns it off. Env: `AUTH_WEBAUTHN_OPTIONS_RATE_LIMIT` as `COUNT/SECONDS` (at most an
        /// hour). Default: 30 per minute.
        public var optionsRateLimit = RateLimit(count: 30, window: 60)
        /// `passkey_login_options` per window from all clients together, shared by every replica:
        /// the ceiling for what per-client limits cannot see (no client id, rotating client ids).
        /// A count of 0 turns it off. Env: `AUTH_WEBAUTHN_OPTIONS_GLOBAL_RATE_LIMIT` as
        /// `COUNT/SECONDS` (at most an hour). Default: 3000 per minute.
        public var optionsGlobalRateLimit = RateLimit(count: 3000, window: 60)

        public init() {}

        public var isEnabled: Bool { rpID != nil }
    }

    /// How long the audit trail keeps a row; the outbox relay purges older ones.
    /// Env: `AUTH_AUDIT_RETENTION_DAYS`. Default: 400 days.
    public var auditRetention: TimeInterval = 400 * 86_400

    /// The account rules.
    public struct Accounts: Sendable, Equatable {
        /// Argon2id parameters of new password hashes. Env: `AUTH_ARGON2_MEMORY_KIB` (19456),
        /// `AUTH_ARGON2_ITERATIONS` (2), `AUTH_ARGON2_PARALLELISM` (1).
        public var argon2 = Argon2Parameters()
        /// Threads that hash passwords. Env: `AUTH_PASSWORD_HASH_THREADS`. Default: the number of cores.
        public var hashingThreads = ProcessInfo.processInfo.activeProcessorCount
        /// Failed-attempt throttling per account.
        public var throttle = ThrottlePolicy()
        /// Guest sign-ups per client per window; a count of 0 disables the limit.
        /// Env: `AUTH_GUEST_RATE_LIMIT` as `COUNT/SECONDS`. Default: 20 per hour.
        public var guestRateLimit = RateLimit(count: 20, window: 3600)
        /// Guest sign-ups per window from all clients together, shared by every replica: the
        /// ceiling for what per-client limits cannot see (no client id, rotating client ids).
        /// Env: `AUTH_GUEST_GLOBAL_RATE_LIMIT`. Default: 3000 per minute.
        public var guestGlobalRateLimit = RateLimit(count: 3000, window: 60)
        /// Registrations per client per window (`client_id`, else the Kafka key).
        /// Env: `AUTH_REGISTER_RATE_LIMIT`. Default: 10 per hour.
        public var registerRateLimit = RateLimit(count: 10, window: 3600)
        /// Registrations per window from all clients together. Env: `AUTH_REGISTER_GLOBAL_RATE_LIMIT`.
        /// Default: 600 per minute.
        public var registerGlobalRateLimit = RateLimit(count: 600, window: 60)
        /// Words a new password must not be built on (the service's name, say), beside the e-mail.
        /// Env: `AUTH_PASSWORD_CONTEXT_WORDS`, comma-separated. Default: none.
        public var passwordContextWords: [String] = []

        /// The longest window of any rate limit: buckets older than it can be forgotten.
        public var longestRateLimitWindow: TimeInterval {
            [guestRateLimit, guestGlobalRateLimit, registerRateLimit, registerGlobalRateLimit].map(\.window).max() ?? 0
        }
        /// Attach a new provider identity to the one full account whose verified, non-relay e-mail
        /// matches the provider's verified e-mail. Env: `AUTH_LINK_BY_VERIFIED_EMAIL`. Default: false.
        public var linkByVerifiedEmail = false
        /// Password accounts sign in only once their address is verified: `register` answers the
        /// user without a session, `password` answers `email_not_verified` (after the password is
        /// checked). Env: `AUTH_REQUIRE_VERIFIED_EMAIL`. Default: false.
        public var requireVerifiedEmail = false
        /// How recent a sign-in must be for a change to how the account signs in (`mfa_enroll`,
        /// `mfa_verify`, `link_to` onto a full account) without the password in the request.
        /// Env: `AUTH_REAUTH_MAX_AGE_SECONDS`. Default: 300.
        public var reauthMaxAge: TimeInterval = 300
        public init() {}
    }

    /// One-time codes the mail service sends: `send_verification`, `verify_email`,
    /// `password_reset_request`, `password_reset`. On only with both keys: codes leave the worker
    /// sealed to `mailKey`, and are stored as HMACs under a key derived from `resultsKey`.
    public struct EmailCodes: Sendable, Equatable {
        /// The mail service's X25519 public key (base64url, 32 bytes, as a `reply_key`): the
        /// events carry codes and link tokens sealed to it. Env: `AUTH_MAIL_KEY`. Default: none
        /// (the code methods answer `unsupported_method`; `register` sends no code).
        public var mailKey: [UInt8]?
        /// How long a code and its link token work. Env: `AUTH_EMAIL_CODE_TTL_SECONDS`. Default: 900.
        public var lifetime: TimeInterval = 900
        /// Wrong codes one code survives; then it is spent. Env: `AUTH_EMAIL_CODE_MAX_ATTEMPTS`.
        /// Default: 5 (a guess succeeds with odds of 5 in a million per code sent).
        public var maxAttempts = 5
        /// Codes sent per account and purpose per window. Env: `AUTH_EMAIL_CODE_RATE_LIMIT`.
        /// Default: 5 per hour.
        public var sendLimit = RateLimit(count: 5, window: 3600)
        /// `password_reset` attempts per address per window: each costs a password hash.
        /// Env: `AUTH_PASSWORD_RESET_RATE_LIMIT`. Default: 10 per hour.
        public var resetLimit = RateLimit(count: 10, window: 3600)
        /// `change_password` ends the user's other sessions. Env: `AUTH_PASSWORD_CHANGE_ENDS_SESSIONS`.
        /// Default: true.
        public var changeEndsOtherSessions = true
        /// `email_code_request` to an address with no account sends a code, and `email_code`
        /// creates the account. Env: `AUTH_EMAIL_CODE_SIGNUP`. Default: false (codes only for
        /// existing accounts; the answer is the same either way).
        public var signUp = false
        public init() {}
    }

    /// Codes texted to phone numbers (`phone_code_request`, `phone_code`). On only with the SMS
    /// service's key and `resultsKey`: codes leave the worker sealed to `smsKey` and are stored
    /// as HMACs. Sending a text costs money, so every limit is on by default (SMS pumping).
    public struct PhoneCodes: Sendable, Equatable {
        /// The SMS service's X25519 public key. Env: `AUTH_SMS_KEY`. Default: none (off).
        public var smsKey: [UInt8]?
        /// How long a code works. Env: `AUTH_PHONE_CODE_TTL_SECONDS`. Default: 300.
        public var lifetime: TimeInterval = 300
        /// Wrong codes one code survives. Env: `AUTH_PHONE_CODE_MAX_ATTEMPTS`. Default: 3.
        public var maxAttempts = 3
        /// A code to a number with no account creates one. Env: `AUTH_PHONE_CODE_SIGNUP`. Default: false.
        public var signUp = false
        /// The country calling codes codes are texted to; nil allows every country.
        /// Env: `AUTH_SMS_COUNTRIES`. Default: nil.
        public var countries: Set<UInt16>?
        /// Per number. Env: `AUTH_SMS_NUMBER_RATE_LIMIT`. Default: 3 an hour.
        public var perNumber = RateLimit(count: 3, window: 3600)
        /// Per block of a thousand numbers. Env: `AUTH_SMS_PREFIX_RATE_LIMIT`. Default: 10 an hour.
        public var perPrefix = RateLimit(count: 10, window: 3600)
        /// Per country calling code. Env: `AUTH_SMS_COUNTRY_RATE_LIMIT`. Default: 200 an hour.
        public var perCountry = RateLimit(count: 200, window: 3600)
        /// Per client. Env: `AUTH_SMS_CLIENT_RATE_LIMIT`. Default: 5 an hour.
        public var perClient = RateLimit(count: 5, window: 3600)
        /// Per IP address the gateway reports. Env: `AUTH_SMS_IP_RATE_LIMIT`. Default: 10 an hour.
        public var perIP = RateLimit(count: 10, window: 3600)
        /// All codes in a day. Env: `AUTH_SMS_DAILY_BUDGET`. Default: 1000.
        public var dailyBudget = RateLimit(count: 1000, window: 86_400)
        public init() {}
    }

    /// TOTP second factors (`mfa_enroll`, `mfa_verify`, `mfa_challenge`, `mfa_remove`): on
    /// whenever `resultsKey` is set (secrets are sealed under a key derived from it).
    public struct MFA: Sendable, Equatable {
        /// The issuer authenticator apps show. Env: `AUTH_MFA_ISSUER`. Default: `auth-worker`.
        public var issuer = "auth-worker"
        /// How long the `mfa_token` of an `mfa_required` answer works. Env:
        /// `AUTH_MFA_TOKEN_TTL_SECONDS`. Default: 300.
        public var challengeLifetime: TimeInterval = 300
        /// Wrong codes per account per window. Env: `AUTH_MFA_RATE_LIMIT`. Default: 5 per 5 minutes.
        /// Each time the limit is reached the factor locks (`auth.mfa.locked`), and every lock in
        /// the last day doubles the next window, up to `lockoutHorizon`.
        public var attempts = RateLimit(count: 5, window: 300)
        /// How long locks are remembered for escalation, and the longest a window grows to.
        /// Default: a day.
        public var lockoutHorizon: TimeInterval = 86_400
        public init() {}
    }

    /// A count per window.
    public struct RateLimit: Sendable, Equatable {
        public var count: Int
        public var window: TimeInterval

        public init(count: Int, window: TimeInterval) {
            self.count = count
            self.window = window
        }
    }

    /// How the consume loop batches and parallelises.
    public struct Processing: Sendable, Equatable {
        /// Messages taken from one poll, and requests written in one transaction, at most: a batch
        /// is whatever is there, never waited for. Env: `AUTH_BATCH_MAX`. Default: 500.
        public var batchMax = 500
        /// Messages in flight at most (read and not finished: slow password logins, waits for a
        /// provider's keys); past it, polling pauses. Env: `AUTH_MAX_IN_FLIGHT`. Default: 5000.
        public var maxInFlight = 5000
        /// How long an idle poll waits for the first message: the first to arrive ends the wait, so
        /// this sets only how often an idle worker wakes. Env: `AUTH_BATCH_WAIT_MS`. Default: 1 s.
        public var batchWait: Duration = .seconds(1)
        /// How long a request may wait for others to join its batch before it is looked up and
        /// written: fewer transactions, and less CPU a login, at a light load, for up to this much
        /// more latency. Zero (the default) never waits: a batch is whatever is there. Nothing
        /// waits while 64 requests (or `batchMax`) are in flight: under load, batches fill anyway.
        /// Env: `AUTH_BATCH_LINGER_MS` (0 – 1000). Default: 0.
        public var batchLinger: Duration = .zero
        /// PostgreSQL connections: `writers` write batches, one counts password attempts, the
        /// others serve lookups, the outbox relay and readiness. Env: `AUTH_DB_POOL_SIZE`. Default: 5.
        public var databasePoolSize = 5
        /// Batches written at once, each on its own connection. A key's requests are written by
        /// one writer at a time, in order; the first free writer takes what is ready, a later one
        /// only behind a backlog, and a writer with nothing to write serves the request-id
        /// lookups: under light load one connection reads and writes every batch.
        /// Env: `AUTH_DB_WRITERS`. Default: 2.
        public var writers = 2
        /// Whether PostgreSQL connections prepare each statement once and then only run it. Turn
        /// it off behind a pooler in transaction mode that does not carry prepared statements
        /// between server connections (PgBouncer before 1.21, or `max_prepared_statements = 0`).
        /// Env: `AUTH_DB_PREPARED_STATEMENTS`. Default: true.
        public var preparedStatements = true
        /// The longest value a dead letter carries; a longer one is cut, with a `dlq-truncated`
        /// header giving the original size. Keep it under the producer's `message.max.bytes`
        /// (1,000,000 by default). Env: `AUTH_DLQ_MAX_BYTES`. Default: 256 KiB.
        public var deadLetterMaxBytes = 256 << 10
        /// First delay when retrying a transient failure; doubles up to `maxRetryDelay`. Default: 200 ms.
        public var initialRetryDelay: Duration = .milliseconds(200)
        /// Env: `AUTH_MAX_RETRY_DELAY_MS`. Default: 10 s.
        public var maxRetryDelay: Duration = .seconds(10)
        public init() {}
    }

    /// The database has no default (empty is "not set", refused by `validate()`); everything else
    /// has its documented default. The Kafka client's settings are `KafkaSettings` (AuthWorker).
    public init(databaseURL: String = "") {
        self.databaseURL = databaseURL
    }

    /// Throws a `ConfigurationError` naming the setting that cannot work.
    public func validate() throws {
        try validateDatabase()
        if requireSealedCredentials, credentialKeyPaths.isEmpty {
            throw ConfigurationError(
                variable: Setting.requireSealedCredentials.name,
                reason: "needs AUTH_CREDENTIAL_KEYS to open what is sealed"
            )
        }
        if accessTokenFormat == .jwt, signingKeyPaths.isEmpty {
            throw ConfigurationError(
                variable: Setting.signingKeys.name,
                reason:
                    "is required when AUTH_ACCESS_TOKEN_FORMAT is jwt (make one with `auth-worker keys generate FILE`)")
        }
        guard processing.batchMax > 0 else {
            throw ConfigurationError(variable: Setting.batchMax.name, reason: "must be positive")
        }
        guard processing.batchLinger >= .zero, processing.batchLinger <= .seconds(1) else {
            throw ConfigurationError(variable: Setting.batchLingerMS.name, reason: "must be between 0 and 1000")
        }
        guard processing.maxInFlight >= processing.batchMax else {
            throw ConfigurationError(variable: Setting.maxInFlight.name, reason: "must be at least AUTH_BATCH_MAX")
        }
        guard (1...900_000).contains(processing.deadLetterMaxBytes) else {
            throw ConfigurationError(
                variable: Setting.dlqMaxBytes.name,
                reason: "must be between 1 and 900000 (the producer's limit is 1000000)"
            )
        }
        // Acknowledged events leave the outbox with a later transaction, or on their own after a
        // second with none; a relay that took them sooner would publish them a second time.
        guard outboxRelayGrace >= 2 else {
            throw ConfigurationError(
                variable: Setting.outboxRelayGraceSeconds.name,
                reason:
                    "must be at least 2: published events wait up to a second to leave the outbox, and the relay would publish them again"
            )
        }
        guard (10...86_400).contains(purgeInterval) else {
            throw ConfigurationError(
                variable: Setting.purgeIntervalSeconds.name, reason: "must be from 10 seconds to a day (86400)")
        }
        guard processing.writers >= 1 else {
            throw ConfigurationError(variable: Setting.dbWriters.name, reason: "must be at least 1")
        }
        guard processing.databasePoolSize >= processing.writers + 2 else {
            throw ConfigurationError(
                variable: Setting.dbPoolSize.name,
                reason: "must be at least AUTH_DB_WRITERS + 2 (the writers, one for password attempts, one for lookups)"
            )
        }
        guard sessions.accessTokenLifetime > 0, sessions.refreshTokenLifetime > 0, sessions.sessionLifetime > 0 else {
            throw ConfigurationError(variable: Setting.accessTokenTTLSeconds.name, reason: "lifetimes must be positive")
        }
        let apple = [appleTokens.teamID, appleTokens.keyID, appleTokens.privateKeyPath]
        if apple.contains(where: { $0 != nil }), !appleTokens.isEnabled {
            throw ConfigurationError(
                variable: Setting.appleTeamID.name,
                reason: "AUTH_APPLE_TEAM_ID, AUTH_APPLE_KEY_ID and AUTH_APPLE_PRIVATE_KEY_FILE go together")
        }
        if appleTokens.isEnabled, resultsKey == nil {
            throw ConfigurationError(
                variable: Setting.appleTeamID.name,
                reason: "needs AUTH_RESULTS_KEY_FILE: Apple's tokens are sealed at rest"
            )
        }
    }

    /// Throws unless `AUTH_DATABASE_URL` is set to a `postgres://` URL.
    public func validateDatabase() throws {
        guard !databaseURL.isEmpty else {
            throw ConfigurationError(
                variable: Setting.databaseURL.name,
                reason: "is not set: give a postgres:// URL (scripts/run sets the local setup's)")
        }
        guard databaseURL.hasPrefix("postgres://") || databaseURL.hasPrefix("postgresql://") else {
            throw ConfigurationError(variable: Setting.databaseURL.name, reason: "must be a postgres:// URL")
        }
    }
}
