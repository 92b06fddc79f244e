import AuthCrypto
import Foundation
import JOSE
import Messages

extension LoginService {
    // MARK: - Refresh

    func refresh(_ request: LoginRequest) async throws -> LoginOutcome? {
        let token = request.data.refreshToken ?? ""
        let now = clock.now()
        let lifetimes = configuration.sessions
        let replayKey = Self.replayKey(parentToken: token)
        var plan = RefreshPlan(
            requestID: request.id, tokenHash: SHA256.hash(token), now: now, grace: lifetimes.refreshReuseGrace,
            idempotencyExpiresAt: now + lifetimes.idempotencyLifetime,
            issue: { [identifiers, accessTokens] context in
                let accessID = try identifiers.uuid()
                let accessExpiry = min(now + lifetimes.accessTokenLifetime, context.sessionExpiresAt)
                let refreshExpiry = min(now + lifetimes.refreshTokenLifetime, context.sessionExpiresAt)
                let accessToken = try accessTokens.issue(
                    AccessTokenClaims(
                        tokenID: accessID, userID: context.userID, sessionID: context.sessionID,
                        abilities: context.abilities, isGuest: context.isGuest, issuedAt: now, expiresAt: accessExpiry))
                let refreshToken = "rt_" + (try identifiers.secret(characters: 48))
                let payload = SessionPayload(
                    accessToken: accessToken, expiresAt: Timestamp.format(accessExpiry), refreshToken: refreshToken,
                    refreshExpiresAt: Timestamp.format(refreshExpiry), abilities: context.abilities)
                let json = try MessageCoding.encode(payload)
                let sealed = try AESGCM.seal(json, key: replayKey)
                return IssuedTokens(
                    accessTokenID: accessID, accessTokenHash: SHA256.hash(accessToken),
                    accessTokenExpiresAt: accessExpiry,
                    refreshTokenID: try identifiers.uuid(), refreshTokenHash: SHA256.hash(refreshToken),
                    refreshTokenExpiresAt: refreshExpiry, payload: SessionPayloadSecrets(json: json),
                    sealedForReplay: sealed.combined)
            },
            reuseEvents: { [identifiers, configuration] context in
                [
                    try OutboxEvent.make(
                        type: UserEventType.sessionRevoked,
                        data: SessionRevokedData(
                            userId: context.userID.lowercasedString, sessionId: context.sessionID.lowercasedString,
                            reason: "refresh_reuse"),
                        key: context.userID.lowercasedString, traceparent: request.traceparent,
                        identifiers: identifiers,
                        configuration: configuration, now: now)
                ]
            })
        let box = BuiltResult()
        let build: @Sendable (StoredUser, KeepDetails) throws -> LoginResultData = { user, details in
            guard case .refresh(let issued) = details else {
                throw LoginError(.internalError, "a refresh kept something else", retriable: true)
            }
            return .ok(
                requestID: request.id, user: Self.payload(user), newUser: false,
                session: try MessageCoding.decode(SessionPayload.self, from: issued.payload.json))
        }
        plan.keep = try keeper(for: request, box: box, build: build)
        switch try await store.refresh(plan) {
        case .duplicate:
            return nil
        case .invalid:
            throw LoginError(.invalidRefreshToken, "the refresh token is unknown, expired, or its session has ended")
        case .reused(let events):
            logger.warning(
                "Refresh token reused after rotation; session ended", metadata: [LogKey.requestID: request.id])
            // The session's end is announced, though the answer is an error.
            throw RefreshReuse(events: events)
        case .rotated(let user, let issued):
            return LoginOutcome(result: try box.result ?? build(user, .refresh(issued)), events: [])
        case .replayed(let user, let sealed):
            guard let box = AESGCM.Sealed(combined: sealed), let json = AESGCM.open(box, key: replayKey)
            else {
                throw LoginError(
                    .invalidRefreshToken, "the refresh token is unknown, expired, or its session has ended")
            }
            return LoginOutcome(
                result: .ok(
                    requestID: request.id, user: Self.payload(user), newUser: false,
                    session: try MessageCoding.decode(SessionPayload.self, from: json)),
                events: [])
        }
    }

    /// The key that seals a rotation's successor: derived from the parent token, which only its
    /// holder has (the database keeps its hash, never the token).
    static func replayKey(parentToken: String) -> [UInt8] {
        SHA256.hash(Array("auth-worker refresh successor\u{0}".utf8) + Array(parentToken.utf8))
    }

    // MARK: - Logout

    func logout(_ request: LoginRequest) async throws -> LoginOutcome? {
        let record = try await resolveAccessToken(
            request.data.accessToken ?? "", field: "data.access_token", allowExpired: true)
        let now = clock.now()
        let all = request.data.scope == "all"
        var plan = LogoutPlan(
            requestID: request.id, sessionID: record.sessionID, allSessions: all, now: now,
            idempotencyExpiresAt: now + configuration.sessions.idempotencyLifetime
        ) { [identifiers, configuration] userID, sessions in
            try sessions.map { session in
                try OutboxEvent.make(
                    type: UserEventType.sessionRevoked,
                    data: SessionRevokedData(
                        userId: userID.lowercasedString, sessionId: session.lowercasedString,
                        reason: all ? "logout_all" : "logout"),
                    key: userID.lowercasedString, traceparent: request.traceparent, identifiers: identifiers,
                    configuration: configuration, now: now)
            }
        }
        let box = BuiltResult()
        let build: @Sendable (StoredUser, KeepDetails) throws -> LoginResultData = { user, _ in
            .signedOut(requestID: request.id, user: Self.payload(user))
        }
        plan.keep = try keeper(for: request, box: box, build: build)
        switch try await store.logout(plan) {
        case .duplicate:
            return nil
        case .unknownSession:
            throw LoginError(.invalidToken, "access_token is not a valid access token", field: "data.access_token")
        case .loggedOut(let user, let revoked, let events):
            logger.info(
                "Logged out",
                metadata: [
                    LogKey.requestID: request.id, LogKey.userID: user.id.lowercasedString,
                    "auth.sessions_revoked": String(revoked.count),
                ])
            return LoginOutcome(result: try box.result ?? build(user, .logout(revoked: revoked)), events: events)
        }
    }

    // MARK: - Access tokens presented by clients

    /// The live session an access token belongs to (`link_to`, logout).
    /// - Parameter allowExpired: accept a token whose short lifetime has passed while its session lives
    ///   (logging out with a stale token is fine; linking is not).
    /// - Throws: `invalid_token` naming `field`.
    func resolveAccessToken(_ token: String, field: String, allowExpired: Bool) async throws -> AccessTokenRecord {
        let invalid = LoginError(.invalidToken, "\(field.dropFirst(5)) is not a valid access token", field: field)
        let now = clock.now()
        let record: AccessTokenRecord?
        if token.split(separator: ".", omittingEmptySubsequences: false).count == 3,
            let jwt = accessTokens as? JWTAccessTokenIssuer
        {
            guard let claims = try? jwt.verify(token, now: allowExpired ? .distantPast : now) else { throw invalid }
            record = try await store.session(id: claims.sessionID)
            guard record?.userID == claims.userID else { throw invalid }
        } else {
            record = try await store.accessToken(hash: SHA256.hash(token))
        }
        guard let record, !record.sessionRevoked else { throw invalid }
        if !allowExpired, record.expiresAt <= now { throw invalid }
        return record
    }

    // MARK: - Sealed results

    /// The request's X25519 `reply_key`, checked before anything is written.
    func replyKey(_ request: LoginRequest) throws -> [UInt8]? {
        let issuesTokens = request.method != .logout
        guard let text = request.data.replyKey else {
            if issuesTokens, configuration.sessions.requireReplyKey {
                throw LoginError(
                    .malformedRequest, "reply_key is required: results are sealed to the gateway's key",
                    field: "data.reply_key")
            }
            return nil
        }
        guard let key = Base64URL.decode(text), key.count == 32, key.contains(where: { $0 != 0 }) else {
            throw LoginError(
                .malformedRequest, "reply_key must be a base64url X25519 public key", field: "data.reply_key")
        }
        return key
    }
}

/// A refresh token reused after its rotation: the answer is `refresh_token_reused`, and the
/// session's end (already written to the outbox) is published with it.
struct RefreshReuse: Error {
    var events: [OutboxEvent]
    var loginError: LoginError {
        LoginError(.refreshTokenReused, "the refresh token was already used; the session has been ended")
    }
}
