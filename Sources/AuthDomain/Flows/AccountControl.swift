import AuthCrypto
import Foundation
import JOSE
import Messages

/// What users control of their own account, through the same request/result contract: their
/// sessions (`sessions_list`, `session_revoke`), deleting the account (`account_delete`) and a
/// copy of everything stored about them (`account_export`).
extension LoginFlows {
    /// `sessions_list`: the live sessions of the access token's user, the asking one marked.
    func prepareSessionsList(_ request: LoginRequest) throws -> any PreparedWrite {
        let now = clock.now()
        return SessionsList(requestID: request.id, token: try accountToken(request, at: now), now: now)
    }

    /// `session_revoke`: ends one session of the access token's user.
    func prepareSessionRevoke(_ request: LoginRequest) throws -> any PreparedWrite {
        let now = clock.now()
        guard let sessionID = request.data.sessionID.flatMap(UUID.init(uuidString:)) else {
            throw LoginError(.malformedRequest, "session_id must be a session id", field: "data.session_id")
        }
        return SessionRevoke(
            requestID: request.id, token: try accountToken(request, at: now), sessionID: sessionID,
            events: events(for: request, at: now), now: now)
    }

    /// `account_delete`: the user, with everything of theirs, after a recent sign-in, the
    /// password or a second factor's code (a guest's token is all a guest has).
    func prepareAccountDelete(_ request: LoginRequest) async throws -> any PreparedWrite {
        let now = clock.now()
        let token = try accountToken(request, at: now)
        let factorCode = try request.data.code.map { code -> (String, FactorCheck) in
            (code, factorCheck(try factorKeys(), request: request, at: now))
        }
        return AccountDelete(
            requestID: request.id, token: token,
            reauthentication: try await reauthentication(request, token: token, at: now),
            factorCode: factorCode, events: events(for: request, at: now), now: now)
    }

    /// `account_export`: everything stored about the user, sealed to the request's `reply_key`
    /// (required: the export never crosses the results topic in clear).
    func prepareAccountExport(_ request: LoginRequest) throws -> any PreparedWrite {
        let now = clock.now()
        guard let replyKey = try request.replyKey(required: false) else {
            throw LoginError(
                .malformedRequest, "reply_key is required: the export is sealed to it", field: "data.reply_key")
        }
        return AccountExport(
            requestID: request.id, token: try accountToken(request, at: now), replyKey: replyKey, now: now)
    }

    /// The signed-in user's `data.access_token`, checked as far as it can be without the database.
    func accountToken(_ request: LoginRequest, at now: Date) throws -> PresentedAccessToken {
        try presentedToken(request.data.accessToken ?? "", field: "data.access_token", allowExpired: false, at: now)
    }
}

/// The live session an access token (`data.access_token`) stands for, and its user.
/// - Throws: `invalid_token` naming `data.access_token`.
func signedIn(_ token: PresentedAccessToken, in unit: any UnitOfWork, at now: Date) throws -> (
    SessionRecord, StoredUser
) {
    let session = try token.session(in: unit, at: now, allowExpired: false, field: "data.access_token")
    guard let user = try unit.user(id: session.userID) else {
        throw PresentedAccessToken.invalid(field: "data.access_token")
    }
    return (session, user)
}

/// `sessions_list`, ready to write (it writes nothing but the token's use).
struct SessionsList: PreparedWrite {
    let requestID: String
    let token: PresentedAccessToken
    let now: Date

    var prefetch: Prefetch { token.prefetch }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let (session, user) = try signedIn(token, in: unit, at: now)
        var result = LoginResultData.accepted(requestID: requestID, user: user.payload)
        result.sessions = try unit.sessionDetails(userID: user.id, live: true, at: now).map { details in
            SessionInfoPayload(
                id: details.id.lowercasedString,
                device: details.deviceName == nil && details.devicePlatform == nil
                    ? nil : .init(name: details.deviceName, platform: details.devicePlatform),
                method: details.provider, createdAt: Timestamp.format(details.createdAt),
                lastUsedAt: Timestamp.format(details.lastUsedAt), expiresAt: Timestamp.format(details.expiresAt),
                current: details.id == session.id)
        }
        return FlowAnswer(result: result, userID: user.id, sessionID: session.id)
    }
}

/// `session_revoke`, ready to write.
struct SessionRevoke: PreparedWrite {
    let requestID: String
    let token: PresentedAccessToken
    let sessionID: UUID
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch {
        var prefetch = token.prefetch
        prefetch.sessions.append(sessionID)
        return prefetch
    }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let (session, user) = try signedIn(token, in: unit, at: now)
        // Another user's session answers as an unknown one: ids cannot be probed.
        guard let target = try unit.session(id: sessionID), target.userID == user.id, target.isLive(at: now) else {
            throw LoginError(
                .unknownSession, "no live session of this account has that id", field: "data.session_id")
        }
        try unit.revokeSessions([target.id], reason: "user", at: now)
        try unit.appendEvent(try events.sessionRevoked(user: user.id, session: target.id, reason: "user"))
        return FlowAnswer(
            result: .accepted(requestID: requestID, user: user.payload), userID: user.id, sessionID: session.id)
    }
}

/// `account_delete`, ready to write.
struct AccountDelete: PreparedWrite {
    let requestID: String
    let token: PresentedAccessToken
    let reauthentication: Reauthentication
    /// A second factor's code given as proof, and how it is checked (counted like any guess).
    let factorCode: (code: String, check: FactorCheck)?
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch {
        var prefetch = token.prefetch
        prefetch.merge(reauthentication.prefetch)
        return prefetch
    }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let (session, user) = try signedIn(token, in: unit, at: now)
        if !user.isGuest, try !reauthentication.holds(for: session, in: unit, at: now) {
            guard let factorCode, let factor = try unit.mfaFactor(userID: user.id), factor.enabledAt != nil else {
                throw Reauthentication.refusal(field: "data.password")
            }
            switch try factorCode.check.check(.totp(factorCode.code), factor: factor, in: unit, at: now) {
            case .wrong(let error):
                return .refused(error, requestID: requestID, userID: user.id)
            case .accepted(let step, let recovery):
                try FactorCheck.spend((step, recovery), userID: user.id, in: unit, at: now)
            }
        }
        _ = try AccountDeletion.endWaysIn(
            of: user.id, revokingSessions: true, sessionReason: "user_deleted", revokingAppleTokens: true, unit: unit,
            events: events)
        try unit.deleteUsers([user.id])
        try unit.appendEvent(try events.userDeleted(user: user.id, reason: "user_request"))
        return FlowAnswer(
            result: .accepted(requestID: requestID, user: user.payload), userID: user.id, sessionID: session.id)
    }
}

/// `account_export`, ready to write (it writes nothing but the token's use).
struct AccountExport: PreparedWrite {
    let requestID: String
    let token: PresentedAccessToken
    let replyKey: [UInt8]
    let now: Date

    var prefetch: Prefetch { token.prefetch }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let (session, user) = try signedIn(token, in: unit, at: now)
        let records = try unit.accountRecords(userID: user.id)
        var export = AccountExportPayload(
            exportedAt: Timestamp.format(now), user: user.payload, identities: [], sessions: [], secondFactor: nil,
            oneTimeCodes: [],
            requests: records.requests.map {
                .init(method: $0.method, status: $0.status, processedAt: Timestamp.format($0.processedAt))
            },
            audit: records.audit.map(Self.auditRecord))
        export.disabledAt = records.disabledAt.map(Timestamp.format)
        // Every way into the account, from the one list of them.
        for access in AccountAccess.allCases {
            switch access {
            case .sessions:
                export.sessions = try unit.sessionDetails(userID: user.id, live: false, at: now).map(Self.session)
            case .identities:
                export.identities = records.identities.map(Self.identity)
            case .passkeys:
                export.passkeys = try unit.passkeys(userID: user.id).map(\.payload)
                export.passkeyHandle = try unit.passkeyHandle(userID: user.id).map(Base64URL.encode)
            case .secondFactor:
                export.secondFactor = records.factor.map { factor in
                    .init(
                        kind: "totp", active: factor.enabledAt != nil, createdAt: Timestamp.format(factor.createdAt),
                        enabledAt: factor.enabledAt.map(Timestamp.format),
                        recoveryCodesLeft: records.unusedRecoveryCodes)
                }
            case .pendingCodes:
                export.oneTimeCodes = records.codes.map { code in
                    .init(
                        purpose: code.purpose, email: code.email, createdAt: Timestamp.format(code.createdAt),
                        expiresAt: Timestamp.format(code.expiresAt), usedAt: code.usedAt.map(Timestamp.format))
                }
            case .passkeyChallenges:
                export.passkeyChallenges = records.passkeyChallenges.map {
                    AccountExportPayload.PasskeyChallenge(
                        purpose: $0.purpose, createdAt: Timestamp.format($0.createdAt),
                        expiresAt: Timestamp.format($0.expiresAt))
                }
            case .consoleRole:
                export.consoleRole = records.consoleRole
            case .consoleSessions:
                export.consoleSessions = records.consoleSessions.map {
                    AccountExportPayload.ConsoleSession(
                        client: $0.client, createdAt: Timestamp.format($0.createdAt),
                        lastSeenAt: Timestamp.format($0.lastSeenAt))
                }
            }
        }
        var result = LoginResultData.accepted(requestID: requestID, user: user.payload)
        result.sealedExport = try JWE.sealECDHES(MessageCoding.encode(export), to: replyKey)
        return FlowAnswer(result: result, userID: user.id, sessionID: session.id)
    }
    static func identity(_ identity: AccountRecords.Identity) -> AccountExportPayload.Identity {
        .init(
            provider: identity.record.provider, subject: identity.record.subject, email: identity.record.email,
            emailVerified: identity.record.emailVerified, hasPassword: identity.record.passwordHash != nil,
            createdAt: Timestamp.format(identity.createdAt), lastLoginAt: identity.lastLoginAt.map(Timestamp.format))
    }

    static func session(_ details: SessionDetails) -> AccountExportPayload.Session {
        .init(
            id: details.id.lowercasedString,
            device: details.deviceName == nil && details.devicePlatform == nil
                ? nil : .init(name: details.deviceName, platform: details.devicePlatform),
            method: details.provider, createdAt: Timestamp.format(details.createdAt),
            expiresAt: Timestamp.format(details.expiresAt), revokedAt: details.revokedAt.map(Timestamp.format),
            revokedReason: details.revokedReason)
    }

    /// An audit row as the user reads it: staff who acted are `support`, never named.
    static func auditRecord(_ entry: AuditEntry) -> AccountExportPayload.AuditRecord {
        .init(
            at: Timestamp.format(entry.at), action: entry.action, outcome: entry.outcome, requestId: entry.requestID,
            clientId: entry.clientID,
            device: entry.deviceName == nil && entry.devicePlatform == nil
                ? nil : .init(name: entry.deviceName, platform: entry.devicePlatform),
            ip: entry.ip, userAgent: entry.userAgent, actor: AuditEntry.actorShownToUser(entry.actor))
    }
}

// MARK: - Handlers (registered in `LoginMethod.handler`)

extension MethodHandler {
    static let sessionsList = MethodHandler(audited: false, .atOnce { try $0.prepareSessionsList($1) })
    static let sessionRevoke = MethodHandler(audited: true, .atOnce { try $0.prepareSessionRevoke($1) })
    static let accountExport = MethodHandler(audited: true, .atOnce { try $0.prepareAccountExport($1) })
    static let accountDelete = MethodHandler(
        audited: true, .waits { try await $0.prepareAccountDelete($1) }, reads: .withPassword)
}
