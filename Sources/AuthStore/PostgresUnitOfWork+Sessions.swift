import AuthDomain
import Foundation
import PGStore

/// Sessions with their refresh and access tokens.
extension PostgresUnitOfWork {
    func refreshToken(hash: [UInt8]) throws -> RefreshTokenRecord? {
        if usesCache, let cached = cache.refreshTokens[hash] { return cached }
        let found = try query(
            "\(unsafeRaw: PrefetchQueries.refreshColumns) WHERE r.token_hash = \(PGBytes(hash)) FOR UPDATE OF r, s"
        ).first(where: { try Decode.owned($0, by: tenant) }).map(Decode.refreshToken)
        cache.remember(refreshToken: found, hash: hash)
        return found
    }

    func session(id: UUID) throws -> SessionRecord? {
        if usesCache, let cached = cache.sessions[id] { return cached }
        let found = try query(
            "\(unsafeRaw: PrefetchQueries.sessionColumns) WHERE s.id = \(id) FOR UPDATE OF s"
        ).first(where: { try Decode.owned($0, by: tenant) }).map { try Decode.session($0, idColumn: "id") }
        cache.sessions[id] = .some(found)
        return found
    }

    func accessToken(hash: [UInt8]) throws -> AccessTokenRecord? {
        if usesCache, let cached = cache.accessTokens[hash] { return cached }
        let found = try query(
            "\(unsafeRaw: PrefetchQueries.accessTokenColumns) WHERE a.token_hash = \(PGBytes(hash)) FOR UPDATE OF s"
        ).first(where: { try Decode.owned($0, by: tenant) }).map(Decode.accessToken)
        cache.remember(accessToken: found, hash: hash)
        return found
    }

    func liveSessions(userID: UUID, at date: Date) throws -> [UUID] {
        try query(
            """
            SELECT id FROM sessions WHERE user_id = \(userID) AND revoked_at IS NULL AND expires_at > \(date)
            ORDER BY id FOR UPDATE
            """
        ).map { try $0.decode("id", as: UUID.self) }
    }

    func sessionDetails(userID: UUID, live: Bool, at date: Date) throws -> [SessionDetails] {
        try query(
            """
            SELECT s.id, s.provider, s.device_name, s.device_platform, s.created_at, s.expires_at, s.revoked_at,
                   s.revoked_reason,
                   COALESCE((SELECT max(r.created_at) FROM refresh_tokens r WHERE r.session_id = s.id),
                            s.last_used_at, s.created_at) AS last_used_at
            FROM sessions s
            WHERE s.user_id = \(userID) AND (NOT \(live) OR (s.revoked_at IS NULL AND s.expires_at > \(date)))
            ORDER BY s.created_at DESC, s.id
            """
        ).map { row in
            SessionDetails(
                id: try row.decode("id"), provider: try row.decode("provider"),
                deviceName: try row.decode("device_name", as: String?.self),
                devicePlatform: try row.decode("device_platform", as: String?.self),
                createdAt: try row.decode("created_at"), lastUsedAt: try row.decode("last_used_at"),
                expiresAt: try row.decode("expires_at"), revokedAt: try row.decode("revoked_at", as: Date?.self),
                revokedReason: try row.decode("revoked_reason", as: String?.self))
        }
    }

    func insertSession(_ session: NewSession, userID: UUID) throws {
        current.sessions.append(NewSessionRow(session: session, userID: userID))
        if let hash = session.accessTokenHash {
            current.accessTokens.append(
                NewAccessTokenRow(
                    id: session.accessTokenID, sessionID: session.id, hash: hash, name: session.deviceName,
                    abilities: session.abilities, createdAt: session.createdAt,
                    expiresAt: session.accessTokenExpiresAt))
        }
        current.refreshTokens.append(
            NewRefreshTokenRow(
                id: session.refreshTokenID, sessionID: session.id, hash: session.refreshTokenHash, parentID: nil,
                createdAt: session.createdAt, expiresAt: session.refreshTokenExpiresAt))
        cache.sessions[session.id] = nil
    }

    func rotate(_ rotation: TokenRotation) throws {
        current.rotations.append(
            RotationRow(
                usedTokenID: rotation.usedTokenID, at: rotation.at, successorID: rotation.successorID,
                successorSealed: rotation.successorSealed))
        current.refreshTokens.append(
            NewRefreshTokenRow(
                id: rotation.successorID, sessionID: rotation.sessionID, hash: rotation.successorHash,
                parentID: rotation.usedTokenID, createdAt: rotation.at, expiresAt: rotation.successorExpiresAt))
        if let hash = rotation.accessTokenHash {
            current.accessTokens.append(
                NewAccessTokenRow(
                    id: rotation.accessTokenID, sessionID: rotation.sessionID, hash: hash,
                    name: rotation.deviceName, abilities: rotation.abilities, createdAt: rotation.at,
                    expiresAt: rotation.accessTokenExpiresAt))
        }
        cache.forgetSession(rotation.sessionID)
    }

    func recordAccessTokenUse(tokenID: UUID, at date: Date) throws {
        current.statements.append("UPDATE access_tokens SET last_used_at = \(date) WHERE id = \(tokenID)")
    }

    func revokeSessions(_ ids: [UUID], reason: String, at date: Date) throws {
        guard !ids.isEmpty else { return }
        current.statements.append(
            """
            UPDATE sessions SET revoked_at = \(date), revoked_reason = \(reason)
            WHERE id = ANY(\(PGArray(ids))) AND revoked_at IS NULL
            """)
        for id in ids { cache.forgetSession(id) }
    }
}
