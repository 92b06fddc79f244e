import Foundation
import StrictJSON

// MARK: - The messages of every request

extension CloudEvent: JSONWritable where Payload: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("data", data)
            out.member("datacontenttype", datacontenttype)
            out.member("id", id)
            out.member("source", source)
            out.member("specversion", specversion)
            out.member("time", time)
            out.member("traceparent", traceparent)
            out.member("type", type)
        }
    }
}

extension CloudEvent {
    /// The event's JSON with `data` given as JSON already written, the same bytes as encoding the
    /// whole event with `data` would give.
    public static func json(
        id: String, source: String, type: String, time: Date?, traceparent: String?, data: [UInt8]
    ) -> [UInt8] {
        var writer = JSONWriter(capacity: data.count + 256)
        writer.object { out in
            out.member("data", raw: data)
            out.member("datacontenttype", "application/json")
            out.member("id", id)
            out.member("source", source)
            out.member("specversion", "1.0")
            out.member("time", time.map(Timestamp.format))
            out.member("traceparent", traceparent)
            out.member("type", type)
        }
        return writer.bytes
    }
}

extension LoginResultData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("error", error)
            out.member("introspection", introspection)
            out.member("mfa", mfa)
            out.member("new_user", newUser)
            out.member("passkey", passkey)
            out.member("passkey_options", passkeyOptions)
            out.member("passkeys", passkeys)
            out.member("request_id", requestId)
            out.member("sealed_export", sealedExport)
            out.member("sealed_mfa", sealedMFA)
            out.member("sealed_session", sealedSession)
            out.member("session", session)
            out.member("sessions", sessions)
            out.member("status", status)
            out.member("user", user)
        }
    }
}

extension MFAPayload: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("otpauth_uri", otpauthURI)
            if let recoveryCodes { out.member("recovery_codes", recoveryCodes) }
            out.member("secret", secret)
        }
    }
}

extension UserPayload: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("created_at", createdAt)
            out.member("email", email)
            out.member("email_verified", emailVerified)
            out.member("handle", handle)
            out.member("id", id)
            out.member("is_guest", isGuest)
            out.member("is_private_email", isPrivateEmail)
            out.member("name", name)
            out.member("providers", providers)
        }
    }
}

extension SessionPayload: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("abilities", abilities)
            out.member("access_token", accessToken)
            out.member("expires_at", expiresAt)
            out.member("refresh_expires_at", refreshExpiresAt)
            out.member("refresh_token", refreshToken)
            out.member("token_type", tokenType)
        }
    }
}

extension IntrospectionPayload: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            if let abilities { out.member("abilities", abilities) }
            out.member("active", active)
            if let exp { out.member("exp", exp) }
            out.member("guest", guest)
            out.member("sid", sid)
            out.member("sub", sub)
            out.member("token_type", tokenType)
        }
    }
}

extension ErrorPayload: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("code", code.rawValue)
            out.member("field", field)
            out.member("message", message)
            out.member("mfa_token", mfaToken)
            out.member("retriable", retriable)
            out.member("retry_after", retryAfter)
            if let retryAfterSeconds { out.member("retry_after_seconds", retryAfterSeconds) }
            out.member("sealed_mfa_token", sealedMFAToken)
        }
    }
}

extension UserCreatedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("created_at", createdAt)
            out.member("email", email)
            out.member("email_verified", emailVerified)
            out.member("handle", handle)
            out.member("is_guest", isGuest)
            out.member("is_private_email", isPrivateEmail)
            out.member("name", name)
            out.member("provider", provider)
            out.member("user_id", userId)
        }
    }
}

extension UserUpgradedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("email", email)
            out.member("name", name)
            out.member("provider", provider)
            out.member("user_id", userId)
        }
    }
}

extension IdentityLinkedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("provider", provider)
            out.member("subject", subject)
            out.member("user_id", userId)
        }
    }
}

extension SessionRevokedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("reason", reason)
            out.member("session_id", sessionId)
            out.member("user_id", userId)
        }
    }
}

extension UserDeletedData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("reason", reason)
            out.member("user_id", userId)
        }
    }
}

extension LoginRequestData: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("access_token", accessToken)
            out.member("authorization_code", authorizationCode)
            out.member("client_id", clientID)
            out.member("code", code)
            out.member("context", context)
            out.member("credential", credential)
            out.member("device", device)
            out.member("email", email)
            out.member("identity_token", identityToken)
            out.member("link_to", linkTo)
            out.member("link_token", linkToken)
            out.member("method", method)
            out.member("mfa_token", mfaToken)
            out.member("name", name)
            out.member("new_password", newPassword)
            out.member("nonce", nonce)
            out.member("passkey_id", passkeyID)
            out.member("password", password)
            out.member("profile", profile)
            out.member("provider", provider)
            out.member("recovery_code", recoveryCode)
            out.member("refresh_token", refreshToken)
            out.member("reply_key", replyKey)
            out.member("scope", scope)
            out.member("session_id", sessionID)
        }
    }
}

extension LoginRequestData.Context: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("ip", ip)
            out.member("user_agent", userAgent)
        }
    }
}

extension LoginRequestData.Device: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("name", name)
            out.member("platform", platform)
        }
    }
}

extension LoginRequestData.Profile: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object { out in
            out.member("family_name", familyName)
            out.member("given_name", givenName)
        }
    }
}
