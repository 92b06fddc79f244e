import AuthCrypto
import Foundation
import ServiceKit

#if canImport(Glibc)
    import Glibc
#endif

extension WorkerConfiguration {
    /// Reads the configuration from environment variables (tests pass a dictionary).
    /// - Throws: `ConfigurationError` naming the first variable that does not parse.
    public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) throws
        -> WorkerConfiguration
    {
        var config = WorkerConfiguration()
        let reader = EnvironmentReader(environment: environment)
        if let brokers = reader.list("AUTH_KAFKA_BROKERS") { config.kafkaBrokers = brokers }
        if let group = reader.string("AUTH_KAFKA_GROUP") { config.kafkaGroup = group }
        if let path = reader.string("AUTH_KAFKA_PROPERTIES_FILE") {
            config.kafkaProperties = try Self.readProperties(path: path)
        }
        if let url = reader.string("AUTH_DATABASE_URL") { config.databaseURL = url }
        // The URL carries the password: it may come from a file (a mounted Secret) instead.
        if let path = reader.string("AUTH_DATABASE_URL_FILE") {
            guard reader.string("AUTH_DATABASE_URL") == nil else {
                throw ConfigurationError(
                    variable: "AUTH_DATABASE_URL_FILE", reason: "and AUTH_DATABASE_URL are both set; keep one")
            }
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigurationError(variable: "AUTH_DATABASE_URL_FILE", reason: "cannot read \(path)")
            }
            config.databaseURL = text.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        if let value = reader.string("AUTH_TOPIC_REQUESTS") { config.topics.requests = value }
        if let value = reader.string("AUTH_TOPIC_RESULTS") { config.topics.results = value }
        if let value = reader.string("AUTH_TOPIC_EVENTS") { config.topics.events = value }
        if let value = reader.string("AUTH_TOPIC_NOTIFICATIONS") { config.topics.notifications = value }
        if let value = reader.string("AUTH_TOPIC_DLQ") { config.topics.deadLetters = value }
        if let value = reader.list("AUTH_APPLE_AUDIENCES") { config.appleAudiences = value }
        if let value = reader.list("AUTH_GOOGLE_AUDIENCES") { config.googleAudiences = value }
        if let value = reader.string("AUTH_APPLE_KEYS_URL") { config.appleKeysURL = value }
        if let value = reader.string("AUTH_GOOGLE_KEYS_URL") { config.googleKeysURL = value }
        if let value = reader.string("AUTH_OIDC_PROVIDERS") { config.oidcProvidersPath = value }
        if let value = reader.list("AUTH_GOOGLE_HOSTED_DOMAINS") { config.googleHostedDomains = value }
        if let value = try reader.seconds("AUTH_KEYS_MIN_TTL_SECONDS") { config.keySets.minimumLifetime = value }
        if let value = try reader.seconds("AUTH_KEYS_MAX_TTL_SECONDS") { config.keySets.maximumLifetime = value }
        if let value = try reader.seconds("AUTH_KEYS_REFETCH_INTERVAL_SECONDS") {
            config.keySets.unknownKeyRefetchInterval = value
        }
        if let value = try reader.seconds("AUTH_KEYS_FETCH_TIMEOUT_SECONDS") { config.keySets.fetchTimeout = value }
        if let value = reader.string("AUTH_ACCESS_TOKEN_FORMAT") {
            guard let format = AccessTokenFormat(rawValue: value) else {
                throw ConfigurationError(variable: "AUTH_ACCESS_TOKEN_FORMAT", reason: "must be jwt or opaque")
            }
            config.accessTokenFormat = format
        }
        if let value = reader.list("AUTH_SIGNING_KEYS") { config.signingKeyPaths = value }
        if let value = reader.list("AUTH_SIGNING_KEYS_NEXT") { config.nextSigningKeyPaths = value }
        if let value = try reader.integer("AUTH_JWKS_MAX_AGE_SECONDS") { config.keySetMaxAge = value }
        if let value = reader.string("AUTH_JWKS_URI") {
            guard let url = URL(string: value), ["https", "http"].contains(url.scheme ?? ""), url.host != nil else {
                throw ConfigurationError(variable: "AUTH_JWKS_URI", reason: "must be an http(s) URL")
            }
            config.jwksURI = value
        }
        if let value = reader.list("AUTH_CREDENTIAL_KEYS") { config.credentialKeyPaths = value }
        if let value = try reader.bool("AUTH_REQUIRE_SEALED_CREDENTIALS") { config.requireSealedCredentials = value }
        if let value = reader.string("AUTH_TOKEN_ISSUER") { config.tokenIssuer = value }
        if let value = reader.string("AUTH_TOKEN_AUDIENCE") { config.tokenAudience = value }
        if let value = reader.string("AUTH_LOG_LEVEL") {
            guard let level = Logger.Level(rawValue: value) else {
                throw ConfigurationError(variable: "AUTH_LOG_LEVEL", reason: "must be debug, info, warning or error")
            }
            config.logLevel = level
        }
        if let value = reader.string("AUTH_EVENT_SOURCE") { config.eventSource = value }
        if let value = try reader.seconds("AUTH_ACCESS_TOKEN_TTL_SECONDS") {
            config.sessions.accessTokenLifetime = value
        }
        if let value = try reader.seconds("AUTH_REFRESH_TOKEN_TTL_SECONDS") {
            config.sessions.refreshTokenLifetime = value
        }
        if let value = try reader.seconds("AUTH_SESSION_TTL_SECONDS") { config.sessions.sessionLifetime = value }
        if let value = try reader.seconds("AUTH_IDEMPOTENCY_TTL_SECONDS") {
            config.sessions.idempotencyLifetime = value
        }
        if let value = reader.list("AUTH_GUEST_ABILITIES") { config.sessions.guestAbilities = value }
        if let value = try reader.seconds("AUTH_REFRESH_REUSE_GRACE_SECONDS") {
            config.sessions.refreshReuseGrace = value
        }
        if let value = try reader.bool("AUTH_REQUIRE_REPLY_KEY") { config.sessions.requireReplyKey = value }
        // AUTH_BATCH_SIZE is the name of earlier releases.
        if let value = try reader.integer("AUTH_BATCH_MAX") ?? reader.integer("AUTH_BATCH_SIZE") {
            config.processing.batchMax = value
        }
        if let value = try reader.integer("AUTH_MAX_IN_FLIGHT") { config.processing.maxInFlight = value }
        if let value = try reader.integer("AUTH_KAFKA_FETCH_WAIT_MS") {
            config.processing.kafkaFetchWait = .milliseconds(value)
        }
        if let value = try reader.integer("AUTH_KAFKA_LINGER_MS") {
            config.processing.kafkaLinger = .milliseconds(value)
        }
        if let value = try reader.integer("AUTH_BATCH_WAIT_MS") { config.processing.batchWait = .milliseconds(value) }
        if let value = try reader.integer("AUTH_BATCH_LINGER_MS") {
            config.processing.batchLinger = .milliseconds(value)
        }
        if let value = try reader.integer("AUTH_DB_POOL_SIZE") { config.processing.databasePoolSize = value }
        if let value = try reader.integer("AUTH_DB_WRITERS") { config.processing.writers = value }
        if let value = try reader.bool("AUTH_DB_PREPARED_STATEMENTS") { config.processing.preparedStatements = value }
        if let value = try reader.integer("AUTH_DLQ_MAX_BYTES") { config.processing.deadLetterMaxBytes = value }
        if let value = try reader.integer("AUTH_MAX_RETRY_DELAY_MS") {
            config.processing.maxRetryDelay = .milliseconds(value)
        }
        if let value = try reader.integer("AUTH_KAFKA_SESSION_TIMEOUT_MS") {
            config.processing.kafkaSessionTimeout = .milliseconds(value)
        }
        if let value = try reader.integer("AUTH_KAFKA_MAX_POLL_INTERVAL_MS") {
            config.processing.kafkaMaxPollInterval = .milliseconds(value)
        }
        if let value = try reader.bool("AUTH_MIGRATE_ON_START") { config.migrateOnStart = value }
        if let path = reader.string("AUTH_RESULTS_KEY_FILE") {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigurationError(variable: "AUTH_RESULTS_KEY_FILE", reason: "cannot read \(path)")
            }
            let hex = text.trimmingCharacters(in: .whitespacesAndNewlines)
            let bytes = stride(from: 0, to: hex.count, by: 2).compactMap { offset -> UInt8? in
                let start = hex.index(hex.startIndex, offsetBy: offset)
                let end = hex.index(start, offsetBy: 2, limitedBy: hex.endIndex) ?? hex.endIndex
                return UInt8(hex[start..<end], radix: 16)
            }
            guard hex.count == 64, bytes.count == 32 else {
                throw ConfigurationError(
                    variable: "AUTH_RESULTS_KEY_FILE", reason: "must hold 64 hex digits (openssl rand -hex 32)")
            }
            config.resultsKey = bytes
        }
        if let value = try reader.seconds("AUTH_REQUEST_DEADLINE_SECONDS") { config.requestDeadline = value }
        if let value = try reader.seconds("AUTH_OUTBOX_RELAY_GRACE_SECONDS") { config.outboxRelayGrace = value }
        if let value = try reader.seconds("AUTH_PURGE_INTERVAL_SECONDS") { config.purgeInterval = value }
        if let text = reader.string("AUTH_HEALTH_ADDRESS") {
            var address = in_addr()
            guard inet_pton(AF_INET, text, &address) == 1 else {
                throw ConfigurationError(variable: "AUTH_HEALTH_ADDRESS", reason: "must be an IPv4 address")
            }
            config.healthAddress = text
        }
        if let text = reader.string("AUTH_HEALTH_PORT") {
            if text == "off" {
                config.healthPort = nil
            } else {
                guard let port = UInt16(text) else {
                    throw ConfigurationError(variable: "AUTH_HEALTH_PORT", reason: "must be a port number or off")
                }
                config.healthPort = port
            }
        }
        if let value = try reader.integer("AUTH_ARGON2_MEMORY_KIB") {
            guard value >= 8, value <= 4_194_304 else {
                throw ConfigurationError(variable: "AUTH_ARGON2_MEMORY_KIB", reason: "must be 8 to 4194304")
            }
            config.accounts.argon2.memoryKiB = UInt32(value)
        }
        if let value = try reader.integer("AUTH_ARGON2_ITERATIONS") {
            guard value >= 1, value <= 64 else {
                throw ConfigurationError(variable: "AUTH_ARGON2_ITERATIONS", reason: "must be 1 to 64")
            }
            config.accounts.argon2.iterations = UInt32(value)
        }
        if let value = try reader.integer("AUTH_ARGON2_PARALLELISM") {
            guard value >= 1, value <= 64 else {
                throw ConfigurationError(variable: "AUTH_ARGON2_PARALLELISM", reason: "must be 1 to 64")
            }
            config.accounts.argon2.parallelism = UInt32(value)
        }
        if let value = try reader.integer("AUTH_PASSWORD_HASH_THREADS") {
            config.accounts.hashingThreads = max(value, 1)
        }
        if let value = try reader.integer("AUTH_LOGIN_MAX_FAILURES") {
            config.accounts.throttle.threshold = max(value, 1)
        }
        if let value = try reader.seconds("AUTH_LOGIN_LOCK_SECONDS") { config.accounts.throttle.baseDelay = value }
        if let value = try reader.seconds("AUTH_LOGIN_LOCK_MAX_SECONDS") {
            config.accounts.throttle.maximumDelay = value
        }
        if let limit = try reader.rateLimit("AUTH_GUEST_RATE_LIMIT") { config.accounts.guestRateLimit = limit }
        if let limit = try reader.rateLimit("AUTH_GUEST_GLOBAL_RATE_LIMIT") {
            config.accounts.guestGlobalRateLimit = limit
        }
        if let limit = try reader.rateLimit("AUTH_REGISTER_RATE_LIMIT") { config.accounts.registerRateLimit = limit }
        if let limit = try reader.rateLimit("AUTH_REGISTER_GLOBAL_RATE_LIMIT") {
            config.accounts.registerGlobalRateLimit = limit
        }
        if let words = reader.list("AUTH_PASSWORD_CONTEXT_WORDS") { config.accounts.passwordContextWords = words }
        if let value = try reader.bool("AUTH_LINK_BY_VERIFIED_EMAIL") { config.accounts.linkByVerifiedEmail = value }
        if let value = try reader.integer("AUTH_SHUTDOWN_TIMEOUT_SECONDS") { config.shutdownTimeout = .seconds(value) }
        if let text = reader.string("AUTH_MAIL_KEY") {
            guard let key = Base64URL.decode(text), key.count == 32, X25519.isUsablePublicKey(key) else {
                throw ConfigurationError(
                    variable: "AUTH_MAIL_KEY", reason: "must be the mail service's X25519 public key, base64url")
            }
            config.emailCodes.mailKey = key
        }
        if let value = try reader.seconds("AUTH_EMAIL_CODE_TTL_SECONDS") {
            guard value >= 60 else {
                throw ConfigurationError(variable: "AUTH_EMAIL_CODE_TTL_SECONDS", reason: "must be at least 60")
            }
            config.emailCodes.lifetime = value
        }
        if let value = try reader.integer("AUTH_EMAIL_CODE_MAX_ATTEMPTS") {
            guard value >= 1, value <= 10 else {
                throw ConfigurationError(variable: "AUTH_EMAIL_CODE_MAX_ATTEMPTS", reason: "must be 1 to 10")
            }
            config.emailCodes.maxAttempts = value
        }
        if let limit = try reader.rateLimit("AUTH_EMAIL_CODE_RATE_LIMIT") { config.emailCodes.sendLimit = limit }
        if let limit = try reader.rateLimit("AUTH_PASSWORD_RESET_RATE_LIMIT") { config.emailCodes.resetLimit = limit }
        if let value = try reader.bool("AUTH_EMAIL_CODE_SIGNUP") { config.emailCodes.signUp = value }
        if let value = try reader.bool("AUTH_REQUIRE_VERIFIED_EMAIL") { config.accounts.requireVerifiedEmail = value }
        if let value = try reader.seconds("AUTH_REAUTH_MAX_AGE_SECONDS") { config.accounts.reauthMaxAge = value }
        config.appleTokens.teamID = reader.string("AUTH_APPLE_TEAM_ID")
        config.appleTokens.keyID = reader.string("AUTH_APPLE_KEY_ID")
        config.appleTokens.privateKeyPath = reader.string("AUTH_APPLE_PRIVATE_KEY_FILE")
        if let url = reader.string("AUTH_APPLE_TOKEN_URL") { config.appleTokens.tokenURL = url }
        if let url = reader.string("AUTH_APPLE_REVOKE_URL") { config.appleTokens.revokeURL = url }
        if let days = try reader.integer("AUTH_AUDIT_RETENTION_DAYS") {
            config.auditRetention = TimeInterval(days) * 86_400
        }
        if let rpID = reader.string("AUTH_WEBAUTHN_RP_ID") {
            guard !rpID.contains("/"), !rpID.contains(":"), rpID == rpID.lowercased() else {
                throw ConfigurationError(
                    variable: "AUTH_WEBAUTHN_RP_ID", reason: "must be a lower-case domain name, without scheme or port")
            }
            config.passkeys.rpID = rpID
            config.passkeys.origins = ["https://\(rpID)"]
        }
        config.passkeys.rpName = reader.string("AUTH_WEBAUTHN_RP_NAME")
        if let origins = reader.list("AUTH_WEBAUTHN_ORIGINS") {
            for origin in origins
            where
                !(origin.hasPrefix("https://") || origin.hasPrefix("http://localhost")
                || origin.hasPrefix("android:apk-key-hash:"))
            {
                throw ConfigurationError(
                    variable: "AUTH_WEBAUTHN_ORIGINS",
                    reason: "\(origin) is not an https origin, http://localhost, or android:apk-key-hash:…")
            }
            config.passkeys.origins = origins
        }
        if let value = reader.string("AUTH_WEBAUTHN_USER_VERIFICATION") {
            guard ["required", "preferred", "discouraged"].contains(value) else {
                throw ConfigurationError(
                    variable: "AUTH_WEBAUTHN_USER_VERIFICATION", reason: "must be required, preferred or discouraged")
            }
            config.passkeys.userVerification = value
        }
        if let value = try reader.seconds("AUTH_WEBAUTHN_CHALLENGE_TTL_SECONDS") {
            guard value >= 30, value <= 3600 else {
                throw ConfigurationError(
                    variable: "AUTH_WEBAUTHN_CHALLENGE_TTL_SECONDS", reason: "must be between 30 and 3600")
            }
            config.passkeys.challengeLifetime = value
        }
        if let limit = try reader.rateLimit("AUTH_WEBAUTHN_OPTIONS_RATE_LIMIT") {
            guard limit.window <= 3600 else {
                throw ConfigurationError(
                    variable: "AUTH_WEBAUTHN_OPTIONS_RATE_LIMIT", reason: "the window must be an hour or less")
            }
            config.passkeys.optionsRateLimit = limit
        }
        if let limit = try reader.rateLimit("AUTH_WEBAUTHN_OPTIONS_GLOBAL_RATE_LIMIT") {
            guard limit.window <= 3600 else {
                throw ConfigurationError(
                    variable: "AUTH_WEBAUTHN_OPTIONS_GLOBAL_RATE_LIMIT", reason: "the window must be an hour or less")
            }
            config.passkeys.optionsGlobalRateLimit = limit
        }
        if let value = reader.string("AUTH_WEBAUTHN_ATTESTATION") {
            guard value == "none" || value == "direct" else {
                throw ConfigurationError(variable: "AUTH_WEBAUTHN_ATTESTATION", reason: "must be none or direct")
            }
            config.passkeys.attestation = value
        }
        if let text = reader.string("AUTH_CONSOLE_ADDRESS") {
            var address = in_addr()
            guard inet_pton(AF_INET, text, &address) == 1 else {
                throw ConfigurationError(variable: "AUTH_CONSOLE_ADDRESS", reason: "must be an IPv4 address")
            }
            config.console.address = text
        }
        if let text = reader.string("AUTH_CONSOLE_PORT") {
            guard let port = UInt16(text) else {
                throw ConfigurationError(variable: "AUTH_CONSOLE_PORT", reason: "must be a port number")
            }
            config.console.port = port
        }
        if let value = try reader.bool("AUTH_CONSOLE_BEHIND_TLS") { config.console.behindTLS = value }
        if let value = try reader.seconds("AUTH_CONSOLE_IDLE_SECONDS") {
            guard value >= 1, value <= 86400 else {
                throw ConfigurationError(variable: "AUTH_CONSOLE_IDLE_SECONDS", reason: "must be between 1 and 86400")
            }
            config.console.idleLifetime = value
        }
        if let value = try reader.seconds("AUTH_CONSOLE_ABSOLUTE_SECONDS") {
            guard value >= 60, value <= 7 * 86400 else {
                throw ConfigurationError(
                    variable: "AUTH_CONSOLE_ABSOLUTE_SECONDS", reason: "must be between 60 and 604800")
            }
            config.console.absoluteLifetime = value
        }
        if let issuer = reader.string("AUTH_MFA_ISSUER") { config.mfa.issuer = issuer }
        if let value = try reader.seconds("AUTH_MFA_TOKEN_TTL_SECONDS") {
            guard value >= 30 else {
                throw ConfigurationError(variable: "AUTH_MFA_TOKEN_TTL_SECONDS", reason: "must be at least 30")
            }
            config.mfa.challengeLifetime = value
        }
        if let limit = try reader.rateLimit("AUTH_MFA_RATE_LIMIT") { config.mfa.attempts = limit }
        if let value = try reader.bool("AUTH_PASSWORD_CHANGE_ENDS_SESSIONS") {
            config.emailCodes.changeEndsOtherSessions = value
        }
        return config
    }

    /// Parses a librdkafka properties file: `key=value` lines, `#` comments.
    static func readProperties(path: String) throws -> [String: String] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw ConfigurationError(variable: "AUTH_KAFKA_PROPERTIES_FILE", reason: "cannot read \(path)")
        }
        var properties: [String: String] = [:]
        for line in text.split(whereSeparator: \.isNewline) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            guard let equals = trimmed.firstIndex(of: "=") else {
                throw ConfigurationError(variable: "AUTH_KAFKA_PROPERTIES_FILE", reason: "has a line without '='")
            }
            properties[trimmed[..<equals].trimmingCharacters(in: .whitespaces)] =
                trimmed[trimmed.index(after: equals)...].trimmingCharacters(in: .whitespaces)
        }
        return properties
    }
}

/// Typed access to environment variables; empty values count as unset.
struct EnvironmentReader {
    let environment: [String: String]

    func string(_ name: String) -> String? {
        guard let value = environment[name]?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        return value
    }

    func list(_ name: String) -> [String]? {
        string(name).map {
            $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
    }

    func integer(_ name: String) throws -> Int? {
        guard let text = string(name) else { return nil }
        guard let value = Int(text), value >= 0 else {
            throw ConfigurationError(variable: name, reason: "must be a non-negative whole number")
        }
        return value
    }

    /// `COUNT/SECONDS`, e.g. `20/3600`; a count of 0 turns the limit off.
    func rateLimit(_ name: String) throws -> WorkerConfiguration.RateLimit? {
        guard let text = string(name) else { return nil }
        let parts = text.split(separator: "/")
        guard parts.count == 2, let count = Int(parts[0]), let window = Int(parts[1]), count >= 0, window > 0 else {
            throw ConfigurationError(variable: name, reason: "must be COUNT/SECONDS, e.g. 20/3600 (0/60 turns it off)")
        }
        return WorkerConfiguration.RateLimit(count: count, window: TimeInterval(window))
    }

    func seconds(_ name: String) throws -> TimeInterval? {
        try integer(name).map(TimeInterval.init)
    }

    func bool(_ name: String) throws -> Bool? {
        guard let text = string(name)?.lowercased() else { return nil }
        switch text {
        case "true", "1", "yes": return true
        case "false", "0", "no": return false
        default: throw ConfigurationError(variable: name, reason: "must be true or false")
        }
    }
}
