import Foundation
import StrictJSON

// MARK: - The messages of every request

extension LoginResultData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.error, error)
            out.member(CodingKeys.introspection, introspection)
            out.member(CodingKeys.mfa, mfa)
            out.member(CodingKeys.newUser, newUser)
            out.member(CodingKeys.passkey, passkey)
            out.member(CodingKeys.passkeyOptions, passkeyOptions)
            out.member(CodingKeys.passkeys, passkeys)
            out.member(CodingKeys.requestId, requestId)
            out.member(CodingKeys.sealedExport, sealedExport)
            out.member(CodingKeys.sealedMFA, sealedMFA)
            out.member(CodingKeys.sealedSession, sealedSession)
            out.member(CodingKeys.session, session)
            out.member(CodingKeys.sessions, sessions)
            out.member(CodingKeys.status, status)
            out.member(CodingKeys.user, user)
        }
    }
}

extension MFAPayload: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.otpauthURI, otpauthURI)
            if let recoveryCodes { out.member(CodingKeys.recoveryCodes, recoveryCodes) }
            out.member(CodingKeys.secret, secret)
        }
    }
}

extension UserPayload: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.createdAt, createdAt)
            out.member(CodingKeys.email, email)
            out.member(CodingKeys.emailVerified, emailVerified)
            out.member(CodingKeys.handle, handle)
            out.member(CodingKeys.id, id)
            out.member(CodingKeys.isGuest, isGuest)
            out.member(CodingKeys.isPrivateEmail, isPrivateEmail)
            out.member(CodingKeys.name, name)
            out.member(CodingKeys.phone, phone)
            out.member(CodingKeys.phoneVerified, phoneVerified)
            out.member(CodingKeys.providers, providers)
        }
    }
}

extension SessionPayload: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.abilities, abilities)
            out.member(CodingKeys.accessToken, accessToken)
            out.member(CodingKeys.expiresAt, expiresAt)
            out.member(CodingKeys.refreshExpiresAt, refreshExpiresAt)
            out.member(CodingKeys.refreshToken, refreshToken)
            out.member(CodingKeys.tokenType, tokenType)
        }
    }
}

extension IntrospectionPayload: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            if let abilities { out.member(CodingKeys.abilities, abilities) }
            out.member(CodingKeys.active, active)
            if let exp { out.member(CodingKeys.exp, exp) }
            out.member(CodingKeys.guest, guest)
            out.member(CodingKeys.sid, sid)
            out.member(CodingKeys.sub, sub)
            out.member(CodingKeys.tokenType, tokenType)
        }
    }
}

extension ErrorPayload: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.code, code.rawValue)
            out.member(CodingKeys.field, field)
            out.member(CodingKeys.message, message)
            out.member(CodingKeys.mfaToken, mfaToken)
            out.member(CodingKeys.retriable, retriable)
            out.member(CodingKeys.retryAfter, retryAfter)
            if let retryAfterSeconds { out.member(CodingKeys.retryAfterSeconds, retryAfterSeconds) }
            out.member(CodingKeys.sealedMFAToken, sealedMFAToken)
        }
    }
}

extension UserCreatedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.createdAt, createdAt)
            out.member(CodingKeys.email, email)
            out.member(CodingKeys.emailVerified, emailVerified)
            out.member(CodingKeys.handle, handle)
            out.member(CodingKeys.isGuest, isGuest)
            out.member(CodingKeys.isPrivateEmail, isPrivateEmail)
            out.member(CodingKeys.name, name)
            out.member(CodingKeys.phone, phone)
            out.member(CodingKeys.provider, provider)
            out.member(CodingKeys.userId, userId)
        }
    }
}

extension UserUpgradedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.email, email)
            out.member(CodingKeys.name, name)
            out.member(CodingKeys.provider, provider)
            out.member(CodingKeys.userId, userId)
        }
    }
}

extension IdentityLinkedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.provider, provider)
            out.member(CodingKeys.subject, subject)
            out.member(CodingKeys.userId, userId)
        }
    }
}

extension SessionRevokedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.reason, reason)
            out.member(CodingKeys.sessionId, sessionId)
            out.member(CodingKeys.userId, userId)
        }
    }
}

extension UserDeletedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.reason, reason)
            out.member(CodingKeys.userId, userId)
        }
    }
}

extension LoginRequestData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.accessToken, accessToken)
            out.member(CodingKeys.authorizationCode, authorizationCode)
            out.member(CodingKeys.clientID, clientID)
            out.member(CodingKeys.code, code)
            out.member(CodingKeys.codeVerifier, codeVerifier)
            out.member(CodingKeys.context, context)
            out.member(CodingKeys.credential, credential)
            out.member(CodingKeys.device, device)
            out.member(CodingKeys.email, email)
            out.member(CodingKeys.identityToken, identityToken)
            out.member(CodingKeys.linkTo, linkTo)
            out.member(CodingKeys.linkToken, linkToken)
            out.member(CodingKeys.locale, locale)
            out.member(CodingKeys.method, method)
            out.member(CodingKeys.mfaToken, mfaToken)
            out.member(CodingKeys.name, name)
            out.member(CodingKeys.newPassword, newPassword)
            out.member(CodingKeys.nonce, nonce)
            out.member(CodingKeys.passkeyID, passkeyID)
            out.member(CodingKeys.password, password)
            out.member(CodingKeys.phone, phone)
            out.member(CodingKeys.profile, profile)
            out.member(CodingKeys.provider, provider)
            out.member(CodingKeys.recoveryCode, recoveryCode)
            out.member(CodingKeys.redirectURI, redirectURI)
            out.member(CodingKeys.refreshToken, refreshToken)
            out.member(CodingKeys.replyKey, replyKey)
            out.member(CodingKeys.scope, scope)
            out.member(CodingKeys.sessionID, sessionID)
        }
    }
}

extension LoginRequestData.Context: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.ip, ip)
            out.member(CodingKeys.userAgent, userAgent)
        }
    }
}

extension LoginRequestData.Profile: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member(CodingKeys.familyName, familyName)
            out.member(CodingKeys.givenName, givenName)
        }
    }
}
