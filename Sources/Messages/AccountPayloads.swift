import StrictJSON

/// One of a user's live sessions, as `sessions_list` shows it: what an app's "devices" screen
/// lists. Metadata only: no token.
public struct SessionInfoPayload: Decodable, Sendable, Equatable {
    public var id: String
    public var device: LoginRequestData.Device?
    /// How it signed in: `apple`, `google`, an OIDC provider's name, `password`, `email`, `guest`.
    public var method: String
    public var createdAt: String
    /// The last refresh (its creation when never refreshed).
    public var lastUsedAt: String
    public var expiresAt: String
    /// The session whose access token asked.
    public var current: Bool

    public init(
        id: String, device: LoginRequestData.Device?, method: String, createdAt: String, lastUsedAt: String,
        expiresAt: String, current: Bool
    ) {
        self.id = id
        self.device = device
        self.method = method
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.expiresAt = expiresAt
        self.current = current
    }

    enum CodingKeys: String, CodingKey {
        case id, device, method, current
        case createdAt = "created_at"
        case lastUsedAt = "last_used_at"
        case expiresAt = "expires_at"
    }
}

/// Everything stored about a user (`account_export`, GDPR articles 15 and 20), as one JSON
/// document: sealed to the request's `reply_key`, never published in clear. Its schema is
/// `contract/schemas/account-export.json`. No secret: no token, no hash, no TOTP secret.
public struct AccountExportPayload: Decodable, Sendable, Equatable {
    public var exportedAt: String
    public var user: UserPayload
    public var identities: [Identity]
    public var sessions: [Session]
    public var secondFactor: SecondFactor?
    public var oneTimeCodes: [OneTimeCode]
    public var requests: [Request]
    /// The audit trail: every sign-in and change recorded for the user.
    public var audit: [AuditRecord]
    /// The user's passkeys (public metadata; the public keys stay with the service).
    public var passkeys: [PasskeyPayload]?
    /// The random handle the user's passkeys carry as their `user.id` (base64url), if one was made.
    public var passkeyHandle: String?
    /// Passkey ceremonies asked for and not answered yet.
    public var passkeyChallenges: [PasskeyChallenge]?
    /// The admin console role an operator granted the account (`support`, `admin`), if any.
    public var consoleRole: String?
    /// When support or an operator disabled the account, if it is disabled.
    public var disabledAt: String?
    /// The admin console's sign-ins the account holds open (a console user's own).
    public var consoleSessions: [ConsoleSession]?

    /// A sign-in to the admin console: from where, opened and last seen (never its id).
    public struct ConsoleSession: Decodable, Sendable, Equatable {
        public var client: String
        public var createdAt: String
        public var lastSeenAt: String

        public init(client: String, createdAt: String, lastSeenAt: String) {
            self.client = client
            self.createdAt = createdAt
            self.lastSeenAt = lastSeenAt
        }

        enum CodingKeys: String, CodingKey {
            case client
            case createdAt = "created_at"
            case lastSeenAt = "last_seen_at"
        }
    }

    /// A passkey ceremony's challenge, pending: what for and until when (never the challenge).
    public struct PasskeyChallenge: Decodable, Sendable, Equatable {
        public var purpose: String
        public var createdAt: String
        public var expiresAt: String

        public init(purpose: String, createdAt: String, expiresAt: String) {
            self.purpose = purpose
            self.createdAt = createdAt
            self.expiresAt = expiresAt
        }

        enum CodingKeys: String, CodingKey {
            case purpose
            case createdAt = "created_at"
            case expiresAt = "expires_at"
        }
    }

    public init(
        exportedAt: String, user: UserPayload, identities: [Identity], sessions: [Session],
        secondFactor: SecondFactor?, oneTimeCodes: [OneTimeCode], requests: [Request], audit: [AuditRecord]
    ) {
        self.exportedAt = exportedAt
        self.user = user
        self.identities = identities
        self.sessions = sessions
        self.secondFactor = secondFactor
        self.oneTimeCodes = oneTimeCodes
        self.requests = requests
        self.audit = audit
    }

    /// One row of the audit trail.
    public struct AuditRecord: Decodable, Sendable, Equatable {
        public var at: String
        public var action: String
        public var outcome: String
        public var requestId: String?
        public var clientId: String?
        public var device: LoginRequestData.Device?
        public var ip: String?
        public var userAgent: String?
        public var actor: String

        public init(
            at: String, action: String, outcome: String, requestId: String?, clientId: String?,
            device: LoginRequestData.Device?, ip: String?, userAgent: String?, actor: String
        ) {
            self.at = at
            self.action = action
            self.outcome = outcome
            self.requestId = requestId
            self.clientId = clientId
            self.device = device
            self.ip = ip
            self.userAgent = userAgent
            self.actor = actor
        }

        enum CodingKeys: String, CodingKey {
            case at, action, outcome, device, ip, actor
            case requestId = "request_id"
            case clientId = "client_id"
            case userAgent = "user_agent"
        }
    }

    /// A way of signing in: provider, its subject, its e-mail; never a password hash or token.
    public struct Identity: Decodable, Sendable, Equatable {
        public var provider: String
        public var subject: String
        public var email: String?
        public var emailVerified: Bool
        public var hasPassword: Bool
        public var createdAt: String
        public var lastLoginAt: String?

        public init(
            provider: String, subject: String, email: String?, emailVerified: Bool, hasPassword: Bool,
            createdAt: String, lastLoginAt: String?
        ) {
            self.provider = provider
            self.subject = subject
            self.email = email
            self.emailVerified = emailVerified
            self.hasPassword = hasPassword
            self.createdAt = createdAt
            self.lastLoginAt = lastLoginAt
        }

        enum CodingKeys: String, CodingKey {
            case provider, subject, email
            case emailVerified = "email_verified"
            case hasPassword = "has_password"
            case createdAt = "created_at"
            case lastLoginAt = "last_login_at"
        }
    }

    /// A session, live or ended: its metadata.
    public struct Session: Decodable, Sendable, Equatable {
        public var id: String
        public var device: LoginRequestData.Device?
        public var method: String
        public var createdAt: String
        public var expiresAt: String
        public var revokedAt: String?
        public var revokedReason: String?

        public init(
            id: String, device: LoginRequestData.Device?, method: String, createdAt: String, expiresAt: String,
            revokedAt: String?, revokedReason: String?
        ) {
            self.id = id
            self.device = device
            self.method = method
            self.createdAt = createdAt
            self.expiresAt = expiresAt
            self.revokedAt = revokedAt
            self.revokedReason = revokedReason
        }

        enum CodingKeys: String, CodingKey {
            case id, device, method
            case createdAt = "created_at"
            case expiresAt = "expires_at"
            case revokedAt = "revoked_at"
            case revokedReason = "revoked_reason"
        }
    }

    /// Whether a TOTP factor is enrolled (never its secret).
    public struct SecondFactor: Decodable, Sendable, Equatable {
        public var kind: String
        public var active: Bool
        public var createdAt: String
        public var enabledAt: String?
        public var recoveryCodesLeft: Int

        public init(kind: String, active: Bool, createdAt: String, enabledAt: String?, recoveryCodesLeft: Int) {
            self.kind = kind
            self.active = active
            self.createdAt = createdAt
            self.enabledAt = enabledAt
            self.recoveryCodesLeft = recoveryCodesLeft
        }

        enum CodingKeys: String, CodingKey {
            case kind, active
            case createdAt = "created_at"
            case enabledAt = "enabled_at"
            case recoveryCodesLeft = "recovery_codes_left"
        }
    }

    /// An e-mail code sent to the user: when and what for (never the code).
    public struct OneTimeCode: Decodable, Sendable, Equatable {
        public var purpose: String
        public var email: String
        public var createdAt: String
        public var expiresAt: String
        public var usedAt: String?

        public init(purpose: String, email: String, createdAt: String, expiresAt: String, usedAt: String?) {
            self.purpose = purpose
            self.email = email
            self.createdAt = createdAt
            self.expiresAt = expiresAt
            self.usedAt = usedAt
        }

        enum CodingKeys: String, CodingKey {
            case purpose, email
            case createdAt = "created_at"
            case expiresAt = "expires_at"
            case usedAt = "used_at"
        }
    }

    /// A request the worker processed for the user (kept for idempotency): its method and outcome.
    public struct Request: Decodable, Sendable, Equatable {
        public var method: String
        public var status: String
        public var processedAt: String

        public init(method: String, status: String, processedAt: String) {
            self.method = method
            self.status = status
            self.processedAt = processedAt
        }

        enum CodingKeys: String, CodingKey {
            case method, status
            case processedAt = "processed_at"
        }
    }

    enum CodingKeys: String, CodingKey {
        case user, identities, sessions, requests, audit
        case exportedAt = "exported_at"
        case secondFactor = "second_factor"
        case oneTimeCodes = "one_time_codes"
        case passkeys
        case passkeyHandle = "passkey_handle"
        case passkeyChallenges = "passkey_challenges"
        case consoleRole = "console_role"
        case disabledAt = "disabled_at"
        case consoleSessions = "console_sessions"
    }
}

extension SessionInfoPayload: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.createdAt, createdAt)
            out.member(CodingKeys.current, current)
            out.member(CodingKeys.device, device)
            out.member(CodingKeys.expiresAt, expiresAt)
            out.member(CodingKeys.id, id)
            out.member(CodingKeys.lastUsedAt, lastUsedAt)
            out.member(CodingKeys.method, method)
        }
    }
}

extension AccountExportPayload: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.audit, audit)
            out.member(CodingKeys.consoleRole, consoleRole)
            out.member(CodingKeys.consoleSessions, consoleSessions)
            out.member(CodingKeys.disabledAt, disabledAt)
            out.member(CodingKeys.exportedAt, exportedAt)
            out.member(CodingKeys.identities, identities)
            out.member(CodingKeys.oneTimeCodes, oneTimeCodes)
            out.member(CodingKeys.passkeyChallenges, passkeyChallenges)
            out.member(CodingKeys.passkeyHandle, passkeyHandle)
            out.member(CodingKeys.passkeys, passkeys)
            out.member(CodingKeys.requests, requests)
            out.member(CodingKeys.secondFactor, secondFactor)
            out.member(CodingKeys.sessions, sessions)
            out.member(CodingKeys.user, user)
        }
    }
}

extension AccountExportPayload.ConsoleSession: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.client, client)
            out.member(CodingKeys.createdAt, createdAt)
            out.member(CodingKeys.lastSeenAt, lastSeenAt)
        }
    }
}

extension AccountExportPayload.PasskeyChallenge: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.createdAt, createdAt)
            out.member(CodingKeys.expiresAt, expiresAt)
            out.member(CodingKeys.purpose, purpose)
        }
    }
}

extension AccountExportPayload.AuditRecord: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.action, action)
            out.member(CodingKeys.actor, actor)
            out.member(CodingKeys.at, at)
            out.member(CodingKeys.clientId, clientId)
            out.member(CodingKeys.device, device)
            out.member(CodingKeys.ip, ip)
            out.member(CodingKeys.outcome, outcome)
            out.member(CodingKeys.requestId, requestId)
            out.member(CodingKeys.userAgent, userAgent)
        }
    }
}

extension AccountExportPayload.Identity: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.createdAt, createdAt)
            out.member(CodingKeys.email, email)
            out.member(CodingKeys.emailVerified, emailVerified)
            out.member(CodingKeys.hasPassword, hasPassword)
            out.member(CodingKeys.lastLoginAt, lastLoginAt)
            out.member(CodingKeys.provider, provider)
            out.member(CodingKeys.subject, subject)
        }
    }
}

extension AccountExportPayload.Session: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.createdAt, createdAt)
            out.member(CodingKeys.device, device)
            out.member(CodingKeys.expiresAt, expiresAt)
            out.member(CodingKeys.id, id)
            out.member(CodingKeys.method, method)
            out.member(CodingKeys.revokedAt, revokedAt)
            out.member(CodingKeys.revokedReason, revokedReason)
        }
    }
}

extension AccountExportPayload.SecondFactor: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.active, active)
            out.member(CodingKeys.createdAt, createdAt)
            out.member(CodingKeys.enabledAt, enabledAt)
            out.member(CodingKeys.kind, kind)
            out.member(CodingKeys.recoveryCodesLeft, Int64(recoveryCodesLeft))
        }
    }
}

extension AccountExportPayload.OneTimeCode: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.createdAt, createdAt)
            out.member(CodingKeys.email, email)
            out.member(CodingKeys.expiresAt, expiresAt)
            out.member(CodingKeys.purpose, purpose)
            out.member(CodingKeys.usedAt, usedAt)
        }
    }
}

extension AccountExportPayload.Request: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.method, method)
            out.member(CodingKeys.processedAt, processedAt)
            out.member(CodingKeys.status, status)
        }
    }
}
