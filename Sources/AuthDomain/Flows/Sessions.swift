import AuthCrypto
import Foundation
import Messages

extension LoginFlows {
    // MARK: - Refresh

    /// `refresh`: every use rotates the refresh token; a reuse within the grace interval gets the
    /// same successor back, a later one ends the session.
    func prepareRefresh(_ request: LoginRequest) throws -> any PreparedWrite {
        let token = request.data.refreshToken ?? ""
        let now = clock.now()
        return RefreshRotation(
            requestID: request.id, tokenHash: SHA256.hash(token), replayKey: Self.replayKey(parentToken: token),
            accessTokenID: try identifiers.uuid(), successorID: try identifiers.uuid(),
            successorToken: "rt_" + (try identifiers.secret(characters: 48)), lifetimes: configuration.sessions,
            issuer: accessTokens, events: events(for: request, at: now), now: now)
    }

    /// The key that seals a rotation's successor: derived from the parent token, which only its
    /// holder has (the database keeps its hash, never the token).
    static func replayKey(parentToken: String) -> [UInt8] {
        SHA256.hash(Array("auth-worker refresh successor\u{0}".utf8) + Array(parentToken.utf8))
    }

    // MARK: - Logout

    /// `logout`: ends the access token's session, or (`scope: all`) every session of its user.
    func prepareLogout(_ request: LoginRequest) throws -> any PreparedWrite {
        let now = clock.now()
        return Logout(
            requestID: request.id,
            token: try presentedToken(
                request.data.accessToken ?? "", field: "data.access_token", allowExpired: true, at: now),
            allSessions: request.data.scope == "all", events: events(for: request, at: now), now: now)
    }
}

/// A refresh, ready to write.
struct RefreshRotation: PreparedWrite {
    let requestID: String
    let tokenHash: [UInt8]
    let replayKey: [UInt8]
    let accessTokenID: UUID
    let successorID: UUID
    let successorToken: String
    let lifetimes: WorkerConfiguration.Sessions
    let issuer: any AccessTokenIssuer
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch {
        var prefetch = Prefetch()
        prefetch.refreshTokens = [tokenHash]
        return prefetch
    }

    private var invalid: LoginError {
        LoginError(.invalidRefreshToken, "the refresh token is unknown, expired, or its session has ended")
    }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        guard let token = try unit.refreshToken(hash: tokenHash) else { throw invalid }
        // Disabling ended the account's sessions; their holders learn why.
        if token.session.userIsDisabled { throw LoginError.accountDisabled }
        // An ended session's tokens are refused alike, used or not: a rotated token presented after
        // the session's absolute lifetime is no theft to act on (nothing is left to end).
        guard token.session.revokedAt == nil, token.session.expiresAt > now else { throw invalid }
        let session = token.session
        if let usedAt = token.usedAt {
            // Two tabs refreshing at once, or a retry after a lost answer: the same successor.
            if now.timeIntervalSince(usedAt) <= lifetimes.refreshReuseGrace, let sealed = token.successorSealed,
                let box = AESGCM.Sealed(combined: sealed), let json = AESGCM.open(box, key: replayKey)
            {
                guard let user = try unit.user(id: session.userID) else { throw invalid }
                return FlowAnswer(
                    result: .ok(
                        requestID: requestID, user: user.payload, newUser: false,
                        session: try MessageCoding.decode(SessionPayload.self, from: json)),
                    userID: user.id, sessionID: session.id)
            }
            // Used again after that: the token leaked, or a client misbehaves. End the family; the
            // answer is an error, but the session's end is written and announced.
            try unit.revokeSessions([session.id], reason: "refresh_reuse", at: now)
            try unit.appendEvent(
                try events.sessionRevoked(user: session.userID, session: session.id, reason: "refresh_reuse"))
            return FlowAnswer(
                result: .failure(
                    requestID: requestID,
                    error: LoginError(
                        .refreshTokenReused, "the refresh token was already used; the session has been ended"
                    ).payload),
                userID: session.userID, sessionID: session.id)
        }
        guard token.expiresAt > now else { throw invalid }
        let accessExpiry = min(now + lifetimes.accessTokenLifetime, session.expiresAt)
        let refreshExpiry = min(now + lifetimes.refreshTokenLifetime, session.expiresAt)
        let accessToken = try issuer.issue(
            AccessTokenClaims(
                tokenID: accessTokenID, userID: session.userID, sessionID: session.id, abilities: session.abilities,
                isGuest: session.userIsGuest, issuedAt: now, expiresAt: accessExpiry))
        let payload = SessionPayload(
            accessToken: accessToken, expiresAt: Timestamp.format(accessExpiry), refreshToken: successorToken,
            refreshExpiresAt: Timestamp.format(refreshExpiry), abilities: session.abilities)
        try unit.rotate(
            TokenRotation(
                sessionID: session.id, usedTokenID: token.id, successorID: successorID,
                successorHash: SHA256.hash(successorToken), successorExpiresAt: refreshExpiry,
                successorSealed: try AESGCM.seal(MessageCoding.encode(payload), key: replayKey).combined,
                accessTokenID: accessTokenID, accessTokenHash: issuer.isSelfContained ? nil : SHA256.hash(accessToken),
                accessTokenExpiresAt: accessExpiry, abilities: session.abilities, deviceName: session.deviceName,
                at: now))
        guard let user = try unit.user(id: session.userID) else { throw invalid }
        return FlowAnswer(
            result: .ok(requestID: requestID, user: user.payload, newUser: false, session: payload), userID: user.id,
            sessionID: session.id)
    }
}

/// A logout, ready to write.
struct Logout: PreparedWrite {
    let requestID: String
    let token: PresentedAccessToken
    let allSessions: Bool
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch { token.prefetch }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let session = try token.session(in: unit, at: now, allowExpired: true, field: "data.access_token")
        let reason = allSessions ? "logout_all" : "logout"
        let ending =
            allSessions
            ? try unit.liveSessions(userID: session.userID, at: now) : (session.isLive(at: now) ? [session.id] : [])
        try unit.revokeSessions(ending, reason: reason, at: now)
        for id in ending {
            try unit.appendEvent(try events.sessionRevoked(user: session.userID, session: id, reason: reason))
        }
        guard let user = try unit.user(id: session.userID) else {
            throw PresentedAccessToken.invalid(field: "data.access_token")
        }
        return FlowAnswer(
            result: .signedOut(requestID: requestID, user: user.payload), userID: user.id, sessionID: session.id)
    }
}

// MARK: - Introspection

extension LoginFlows {
    /// `introspect`: what an access token stands for now (RFC 7662). A token that is malformed,
    /// badly signed, expired or of an ended session is `active: false`, never an error: the
    /// question has an answer.
    func prepareIntrospection(_ request: LoginRequest) -> any PreparedWrite {
        let now = clock.now()
        let token = try? presentedToken(
            request.data.accessToken ?? "", field: "data.access_token", allowExpired: false, at: now)
        let sessions = configuration.sessions
        return Introspection(
            requestID: request.id, token: token,
            guestAbilities: sessions.guestAbilities == sessions.memberAbilities ? nil : sessions.guestAbilities,
            now: now)
    }
}

/// An introspection, ready to answer: reads the session (and records an opaque token's use).
struct Introspection: PreparedWrite {
    let requestID: String
    /// Nil when the token is already known to be inactive (a JWT that does not verify).
    let token: PresentedAccessToken?
    /// A guest session's abilities, when they tell one apart from a member's.
    let guestAbilities: [String]?
    let now: Date

    var prefetch: Prefetch { token?.prefetch ?? Prefetch() }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        guard let token else { return answer(.inactive) }
        let session: SessionRecord
        do {
            session = try token.session(in: unit, at: now, allowExpired: false, field: "data.access_token")
        } catch is LoginError {
            return answer(.inactive)
        }
        let expiresAt: Date
        switch token {
        case .jwt(let claims):
            expiresAt = min(claims.expiresAt, session.expiresAt)
        case .opaque(let hash):
            expiresAt = min(try unit.accessToken(hash: hash)?.expiresAt ?? session.expiresAt, session.expiresAt)
        }
        // What the token grants, said one way: a guest's token keeps a guest's grant after its
        // user becomes a member (the member's sign-in has tokens of its own), and says so.
        let abilities: [String]
        let guest: Bool
        if case .jwt(let claims) = token {
            abilities = claims.abilities
            guest = claims.isGuest
        } else {
            abilities = session.abilities
            guest = session.userIsGuest || guestAbilities == session.abilities
        }
        return FlowAnswer(
            result: .introspected(
                requestID: requestID,
                IntrospectionPayload(
                    active: true, sub: session.userID.lowercasedString, sid: session.id.lowercasedString,
                    abilities: abilities, exp: Int64(expiresAt.timeIntervalSince1970), guest: guest)),
            userID: session.userID, sessionID: session.id)
    }

    private func answer(_ payload: IntrospectionPayload) -> FlowAnswer {
        FlowAnswer(result: .introspected(requestID: requestID, payload), userID: nil, sessionID: nil)
    }
}

// MARK: - Handlers (registered in `LoginMethod.handler`)

extension MethodHandler {
    static let refresh = MethodHandler(audited: false, .atOnce { try $0.prepareRefresh($1) })
    static let logout = MethodHandler(audited: true, .atOnce { try $0.prepareLogout($1) })
    static let introspect = MethodHandler(audited: false, .atOnce { $0.prepareIntrospection($1) })
}
