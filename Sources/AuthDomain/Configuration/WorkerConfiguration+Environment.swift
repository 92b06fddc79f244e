import AuthCrypto
import Foundation
import Messages
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
        try readDatabaseAndTopics(reader, into: &config)
        try readProviders(reader, into: &config)
        try readTokens(reader, into: &config)
        try readProcessing(reader, into: &config)
        try readAccounts(reader, into: &config)
        try readPasskeys(reader, into: &config)
        try readFactors(reader, into: &config)
        return config
    }

    /// PostgreSQL and the topics.
    private static func readDatabaseAndTopics(_ reader: EnvironmentReader, into config: inout WorkerConfiguration)
        throws
    {
        if let url = reader.string(.databaseURL) { config.databaseURL = url }
        // The URL carries the password: it may come from a file (a mounted Secret) instead.
        if let path = reader.string(.databaseURLFile) {
            guard reader.string(.databaseURL) == nil else {
                throw ConfigurationError(
                    variable: Setting.databaseURLFile.name, reason: "and AUTH_DATABASE_URL are both set; keep one")
            }
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigurationError(variable: Setting.databaseURLFile.name, reason: "cannot read \(path)")
            }
            config.databaseURL = text.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        if let path = reader.string(.databasePasswordFile) {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigurationError(variable: Setting.databasePasswordFile.name, reason: "cannot read \(path)")
            }
            // The file's one line; a trailing line break is the editor's, not the password's.
            let password = String(text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).first ?? "")
            guard !password.isEmpty else {
                throw ConfigurationError(variable: Setting.databasePasswordFile.name, reason: "\(path) is empty")
            }
            config.databaseURL = Self.connectionString(config.databaseURL, password: password)
        }
        if let value = reader.string(.topicRequests) { config.topics.requests = value }
        if let value = reader.string(.topicResults) { config.topics.results = value }
        if let value = reader.string(.topicEvents) { config.topics.events = value }
        if let value = reader.string(.topicNotifications) { config.topics.notifications = value }
        if let value = reader.string(.topicDLQ) { config.topics.deadLetters = value }
    }

    /// The identity providers and their key sets.
    private static func readProviders(_ reader: EnvironmentReader, into config: inout WorkerConfiguration) throws {
        if let value = reader.list(.appleAudiences) { config.appleAudiences = value }
        if let value = reader.list(.googleAudiences) { config.googleAudiences = value }
        if let value = reader.string(.appleKeysURL) { config.appleKeysURL = value }
        if let value = reader.string(.googleKeysURL) { config.googleKeysURL = value }
        if let value = reader.string(.oidcProviders) { config.oidcProvidersPath = value }
        if let value = reader.string(.tenantsFile) { config.tenantsFilePath = value }
        if let value = reader.list(.googleHostedDomains) { config.googleHostedDomains = value }
        if let value = try reader.seconds(.keysMinTTLSeconds) { config.keySets.minimumLifetime = value }
        if let value = try reader.seconds(.keysMaxTTLSeconds) { config.keySets.maximumLifetime = value }
        if let value = try reader.seconds(.keysRefetchIntervalSeconds) {
            config.keySets.unknownKeyRefetchInterval = value
        }
        if let value = try reader.seconds(.keysFetchTimeoutSeconds) { config.keySets.fetchTimeout = value }
    }

    /// Tokens, keys, sessions and the log.
    private static func readTokens(_ reader: EnvironmentReader, into config: inout WorkerConfiguration) throws {
        if let value = reader.string(.accessTokenFormat) {
            guard let format = AccessTokenFormat(rawValue: value) else {
                throw ConfigurationError(variable: Setting.accessTokenFormat.name, reason: "must be jwt or opaque")
            }
            config.accessTokenFormat = format
        }
        if let value = reader.list(.signingKeys) { config.signingKeyPaths = value }
        if let value = reader.list(.signingKeysNext) { config.nextSigningKeyPaths = value }
        if let value = try reader.integer(.jwksMaxAgeSeconds) { config.keySetMaxAge = value }
        if let value = reader.string(.jwksUri) {
            guard let url = URL(string: value), ["https", "http"].contains(url.scheme ?? ""), url.host != nil else {
                throw ConfigurationError(variable: Setting.jwksUri.name, reason: "must be an http(s) URL")
            }
            config.jwksURI = value
        }
        if let value = reader.list(.credentialKeys) { config.credentialKeyPaths = value }
        if let value = try reader.bool(.requireSealedCredentials) { config.requireSealedCredentials = value }
        if let value = reader.string(.tokenIssuer) { config.tokenIssuer = value }
        if let value = reader.string(.tokenAudience) { config.tokenAudience = value }
        if let value = reader.string(.logLevel) {
            guard let level = Logger.Level(rawValue: value) else {
                throw ConfigurationError(
                    variable: Setting.logLevel.name, reason: "must be debug, info, warning or error")
            }
            config.logLevel = level
        }
        if let value = reader.string(.eventSource) { config.eventSource = value }
        switch reader.string(.eventsContentMode) {
        case nil, "structured": break
        case "binary": config.eventsContentMode = .binary
        default:
            throw ConfigurationError(variable: Setting.eventsContentMode.name, reason: "must be structured or binary")
        }
        if let value = try reader.seconds(.accessTokenTTLSeconds) {
            config.sessions.accessTokenLifetime = value
        }
        if let value = try reader.seconds(.refreshTokenTTLSeconds) {
            config.sessions.refreshTokenLifetime = value
        }
        if let value = try reader.seconds(.sessionTTLSeconds) { config.sessions.sessionLifetime = value }
        if let value = try reader.seconds(.idempotencyTTLSeconds) {
            config.sessions.idempotencyLifetime = value
        }
        if let value = reader.list(.guestAbilities) { config.sessions.guestAbilities = value }
        if let value = try reader.seconds(.refreshReuseGraceSeconds) {
            config.sessions.refreshReuseGrace = value
        }
        if let value = try reader.bool(.requireReplyKey) { config.sessions.requireReplyKey = value }
    }

    /// Batches, connections, the broker client, retries, the results key, timers and health.
    private static func readProcessing(_ reader: EnvironmentReader, into config: inout WorkerConfiguration) throws {
        // AUTH_BATCH_SIZE is the name of earlier releases.
        if let value = try reader.integer(.batchMax) ?? reader.integer(.batchSize) {
            config.processing.batchMax = value
        }
        if let value = try reader.integer(.maxInFlight) { config.processing.maxInFlight = value }
        if let value = try reader.integer(.batchWaitMS) { config.processing.batchWait = .milliseconds(value) }
        if let value = try reader.integer(.batchLingerMS) {
            config.processing.batchLinger = .milliseconds(value)
        }
        if let value = try reader.integer(.dbPoolSize) { config.processing.databasePoolSize = value }
        if let value = try reader.integer(.dbWriters) { config.processing.writers = value }
        if let value = try reader.bool(.dbPreparedStatements) { config.processing.preparedStatements = value }
        if let value = try reader.integer(.dlqMaxBytes) { config.processing.deadLetterMaxBytes = value }
        if let value = try reader.integer(.maxRetryDelayMS) {
            config.processing.maxRetryDelay = .milliseconds(value)
        }
        if let value = try reader.bool(.migrateOnStart) { config.migrateOnStart = value }
        if let path = reader.string(.resultsKeyFile) {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigurationError(variable: Setting.resultsKeyFile.name, reason: "cannot read \(path)")
            }
            let hex = text.trimmingCharacters(in: .whitespacesAndNewlines)
            let bytes = stride(from: 0, to: hex.count, by: 2).compactMap { offset -> UInt8? in
                let start = hex.index(hex.startIndex, offsetBy: offset)
                let end = hex.index(start, offsetBy: 2, limitedBy: hex.endIndex) ?? hex.endIndex
                return UInt8(hex[start..<end], radix: 16)
            }
            guard hex.count == 64, bytes.count == 32 else {
                throw ConfigurationError(
                    variable: Setting.resultsKeyFile.name, reason: "must hold 64 hex digits (openssl rand -hex 32)")
            }
            config.resultsKey = bytes
        }
        if let value = try reader.seconds(.requestDeadlineSeconds) { config.requestDeadline = value }
        if let value = try reader.seconds(.outboxRelayGraceSeconds) { config.outboxRelayGrace = value }
        if let value = try reader.seconds(.purgeIntervalSeconds) { config.purgeInterval = value }
        if let text = reader.string(.healthAddress) {
            var address = in_addr()
            guard inet_pton(AF_INET, text, &address) == 1 else {
                throw ConfigurationError(variable: Setting.healthAddress.name, reason: "must be an IPv4 address")
            }
            config.healthAddress = text
        }
        if let text = reader.string(.healthPort) {
            if text == "off" {
                config.healthPort = nil
            } else {
                guard let port = UInt16(text) else {
                    throw ConfigurationError(variable: Setting.healthPort.name, reason: "must be a port number or off")
                }
                config.healthPort = port
            }
        }
    }

    /// Passwords, throttles, rate limits, e-mail codes, Apple's REST API and the audit trail.
    private static func readAccounts(_ reader: EnvironmentReader, into config: inout WorkerConfiguration) throws {
        if let value = try reader.integer(.argon2MemoryKiB) {
            guard value >= 8, value <= 4_194_304 else {
                throw ConfigurationError(variable: Setting.argon2MemoryKiB.name, reason: "must be 8 to 4194304")
            }
            config.accounts.argon2.memoryKiB = UInt32(value)
        }
        if let value = try reader.integer(.argon2Iterations) {
            guard value >= 1, value <= 64 else {
                throw ConfigurationError(variable: Setting.argon2Iterations.name, reason: "must be 1 to 64")
            }
            config.accounts.argon2.iterations = UInt32(value)
        }
        if let value = try reader.integer(.argon2Parallelism) {
            guard value >= 1, value <= 64 else {
                throw ConfigurationError(variable: Setting.argon2Parallelism.name, reason: "must be 1 to 64")
            }
            config.accounts.argon2.parallelism = UInt32(value)
        }
        if let value = try reader.integer(.passwordHashThreads) {
            config.accounts.hashingThreads = max(value, 1)
        }
        if let value = try reader.integer(.loginMaxFailures) {
            config.accounts.throttle.threshold = max(value, 1)
        }
        if let value = try reader.seconds(.loginLockSeconds) { config.accounts.throttle.baseDelay = value }
        if let value = try reader.seconds(.loginLockMaxSeconds) {
            config.accounts.throttle.maximumDelay = value
        }
        if let limit = try reader.rateLimit(.guestRateLimit) { config.accounts.guestRateLimit = limit }
        if let limit = try reader.rateLimit(.guestGlobalRateLimit) {
            config.accounts.guestGlobalRateLimit = limit
        }
        if let limit = try reader.rateLimit(.registerRateLimit) { config.accounts.registerRateLimit = limit }
        if let limit = try reader.rateLimit(.registerGlobalRateLimit) {
            config.accounts.registerGlobalRateLimit = limit
        }
        if let words = reader.list(.passwordContextWords) { config.accounts.passwordContextWords = words }
        if let value = try reader.bool(.linkByVerifiedEmail) { config.accounts.linkByVerifiedEmail = value }
        if let value = try reader.integer(.shutdownTimeoutSeconds) { config.shutdownTimeout = .seconds(value) }
        if let text = reader.string(.mailKey) {
            guard let key = Base64URL.decode(text), key.count == 32, X25519.isUsablePublicKey(key) else {
                throw ConfigurationError(
                    variable: Setting.mailKey.name, reason: "must be the mail service's X25519 public key, base64url")
            }
            config.emailCodes.mailKey = key
        }
        if let value = try reader.seconds(.emailCodeTTLSeconds) {
            guard value >= 60 else {
                throw ConfigurationError(variable: Setting.emailCodeTTLSeconds.name, reason: "must be at least 60")
            }
            config.emailCodes.lifetime = value
        }
        if let value = try reader.integer(.emailCodeMaxAttempts) {
            guard value >= 1, value <= 10 else {
                throw ConfigurationError(variable: Setting.emailCodeMaxAttempts.name, reason: "must be 1 to 10")
            }
            config.emailCodes.maxAttempts = value
        }
        if let limit = try reader.rateLimit(.emailCodeRateLimit) { config.emailCodes.sendLimit = limit }
        if let limit = try reader.rateLimit(.passwordResetRateLimit) { config.emailCodes.resetLimit = limit }
        if let value = try reader.bool(.emailCodeSignup) { config.emailCodes.signUp = value }
        try readPhoneCodes(reader, into: &config.phoneCodes)
        if let value = try reader.bool(.requireVerifiedEmail) { config.accounts.requireVerifiedEmail = value }
        if let value = try reader.seconds(.reauthMaxAgeSeconds) { config.accounts.reauthMaxAge = value }
        config.appleTokens.teamID = reader.string(.appleTeamID)
        config.appleTokens.keyID = reader.string(.appleKeyID)
        config.appleTokens.privateKeyPath = reader.string(.applePrivateKeyFile)
        if let url = reader.string(.appleTokenURL) { config.appleTokens.tokenURL = url }
        if let url = reader.string(.appleRevokeURL) { config.appleTokens.revokeURL = url }
        if let days = try reader.integer(.auditRetentionDays) {
            config.auditRetention = TimeInterval(days) * 86_400
        }
    }

    /// Passkeys.
    private static func readPasskeys(_ reader: EnvironmentReader, into config: inout WorkerConfiguration) throws {
        if let rpID = reader.string(.webauthnRPID) {
            guard !rpID.contains("/"), !rpID.contains(":"), rpID == rpID.lowercased() else {
                throw ConfigurationError(
                    variable: Setting.webauthnRPID.name,
                    reason: "must be a lower-case domain name, without scheme or port")
            }
            config.passkeys.rpID = rpID
            config.passkeys.origins = ["https://\(rpID)"]
        }
        config.passkeys.rpName = reader.string(.webauthnRPName)
        if let origins = reader.list(.webauthnOrigins) {
            for origin in origins
            where
                !(origin.hasPrefix("https://") || origin.hasPrefix("http://localhost")
                || origin.hasPrefix("android:apk-key-hash:"))
            {
                throw ConfigurationError(
                    variable: Setting.webauthnOrigins.name,
                    reason: "\(origin) is not an https origin, http://localhost, or android:apk-key-hash:…")
            }
            config.passkeys.origins = origins
        }
        if let value = reader.string(.webauthnUserVerification) {
            guard ["required", "preferred", "discouraged"].contains(value) else {
                throw ConfigurationError(
                    variable: Setting.webauthnUserVerification.name,
                    reason: "must be required, preferred or discouraged")
            }
            config.passkeys.userVerification = value
        }
        if let value = try reader.seconds(.webauthnChallengeTTLSeconds) {
            guard value >= 30, value <= 3600 else {
                throw ConfigurationError(
                    variable: Setting.webauthnChallengeTTLSeconds.name, reason: "must be between 30 and 3600")
            }
            config.passkeys.challengeLifetime = value
        }
        if let limit = try reader.rateLimit(.webauthnOptionsRateLimit) {
            guard limit.window <= 3600 else {
                throw ConfigurationError(
                    variable: Setting.webauthnOptionsRateLimit.name, reason: "the window must be an hour or less")
            }
            config.passkeys.optionsRateLimit = limit
        }
        if let limit = try reader.rateLimit(.webauthnOptionsGlobalRateLimit) {
            guard limit.window <= 3600 else {
                throw ConfigurationError(
                    variable: Setting.webauthnOptionsGlobalRateLimit.name, reason: "the window must be an hour or less")
            }
            config.passkeys.optionsGlobalRateLimit = limit
        }
        if let value = reader.string(.webauthnAttestation) {
            guard value == "none" || value == "direct" else {
                throw ConfigurationError(variable: Setting.webauthnAttestation.name, reason: "must be none or direct")
            }
            config.passkeys.attestation = value
        }
    }

    /// The second factor.
    private static func readFactors(_ reader: EnvironmentReader, into config: inout WorkerConfiguration)
        throws
    {
        if let issuer = reader.string(.mfaIssuer) { config.mfa.issuer = issuer }
        if let value = try reader.seconds(.mfaTokenTTLSeconds) {
            guard value >= 30 else {
                throw ConfigurationError(variable: Setting.mfaTokenTTLSeconds.name, reason: "must be at least 30")
            }
            config.mfa.challengeLifetime = value
        }
        if let limit = try reader.rateLimit(.mfaRateLimit) { config.mfa.attempts = limit }
        if let value = try reader.bool(.passwordChangeEndsSessions) {
            config.emailCodes.changeEndsOtherSessions = value
        }
    }
}

extension WorkerConfiguration {
    /// `conninfo` with `password` added as the last parameter (libpq takes the last of a repeated
    /// keyword): to a `postgres://` URL's query, percent-encoded; to a `key=value` string, quoted.
    static func connectionString(_ conninfo: String, password: String) -> String {
        if conninfo.hasPrefix("postgres://") || conninfo.hasPrefix("postgresql://") {
            let allowed = CharacterSet(
                charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
            let encoded = password.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
            return conninfo + (conninfo.contains("?") ? "&" : "?") + "password=" + encoded
        }
        let quoted = password.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'")
        return conninfo + " password='" + quoted + "'"
    }

    private static func readPhoneCodes(_ reader: EnvironmentReader, into phone: inout PhoneCodes) throws {
        if let text = reader.string(.smsKey) {
            guard let key = Base64URL.decode(text), key.count == 32, X25519.isUsablePublicKey(key) else {
                throw ConfigurationError(
                    variable: Setting.smsKey.name, reason: "must be the SMS service's X25519 public key, base64url")
            }
            phone.smsKey = key
        }
        if let value = try reader.seconds(.phoneCodeTTLSeconds) {
            guard value >= 60, value <= 900 else {
                throw ConfigurationError(variable: Setting.phoneCodeTTLSeconds.name, reason: "must be 60 to 900")
            }
            phone.lifetime = value
        }
        if let value = try reader.integer(.phoneCodeMaxAttempts) {
            guard value >= 1, value <= 10 else {
                throw ConfigurationError(variable: Setting.phoneCodeMaxAttempts.name, reason: "must be 1 to 10")
            }
            phone.maxAttempts = value
        }
        if let value = try reader.bool(.phoneCodeSignup) { phone.signUp = value }
        if let text = reader.string(.smsCountries), text != "*" {
            var codes = Set<UInt16>()
            for part in text.split(separator: ",") {
                let trimmed = part.trimmingCharacters(in: .whitespaces)
                let digits = trimmed.hasPrefix("+") ? String(trimmed.dropFirst()) : trimmed
                guard let code = UInt16(digits), PhoneNumber.isCallingCode(code) else {
                    throw ConfigurationError(
                        variable: Setting.smsCountries.name,
                        reason: "\"\(trimmed)\" is not a country calling code (e.g. 1,44,82; * for every country)")
                }
                codes.insert(code)
            }
            guard !codes.isEmpty else {
                throw ConfigurationError(
                    variable: Setting.smsCountries.name,
                    reason: "name at least one calling code, or * for every country")
            }
            phone.countries = codes
        }
        if let limit = try reader.rateLimit(.smsNumberRateLimit) { phone.perNumber = limit }
        if let limit = try reader.rateLimit(.smsPrefixRateLimit) { phone.perPrefix = limit }
        if let limit = try reader.rateLimit(.smsCountryRateLimit) { phone.perCountry = limit }
        if let limit = try reader.rateLimit(.smsClientRateLimit) { phone.perClient = limit }
        if let limit = try reader.rateLimit(.smsIPRateLimit) { phone.perIP = limit }
        if let count = try reader.integer(.smsDailyBudget) {
            guard count >= 0 else {
                throw ConfigurationError(variable: Setting.smsDailyBudget.name, reason: "must be 0 or more")
            }
            phone.dailyBudget = RateLimit(count: count, window: 86_400)
        }
    }
}

extension EnvironmentReader {
    /// `COUNT/SECONDS`, e.g. `20/3600`; a count of 0 turns the limit off.
    func rateLimit(_ setting: Setting) throws -> WorkerConfiguration.RateLimit? {
        guard let text = string(setting) else { return nil }
        let parts = text.split(separator: "/")
        guard parts.count == 2, let count = Int(parts[0]), let window = Int(parts[1]), count >= 0, window > 0 else {
            throw ConfigurationError(
                variable: setting.name, reason: "must be COUNT/SECONDS, e.g. 20/3600 (0/60 turns it off)")
        }
        return WorkerConfiguration.RateLimit(count: count, window: TimeInterval(window))
    }
}
