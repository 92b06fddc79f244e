import Foundation
import Messages

/// What a change to how an account signs in asks of the one making it, beside the access token:
/// a sign-in no older than `AUTH_REAUTH_MAX_AGE_SECONDS`, or the account's password in the same
/// request. A stolen access token alone can then not add a second factor or another way in and
/// lock the owner out.
struct Reauthentication: Sendable {
    /// The password the request carried, checked before the write (counted like a login).
    struct PasswordProof: Sendable {
        let email: String
        let verifiedHash: String
    }

    let maxAge: TimeInterval
    let password: PasswordProof?

    var prefetch: Prefetch {
        var prefetch = Prefetch()
        if let password { prefetch.identities = [IdentityKey(provider: "password", subject: password.email)] }
        return prefetch
    }

    /// Whether the session's sign-in is recent enough, or the password proves its user.
    func holds(for session: SessionRecord, in unit: any UnitOfWork, at now: Date) throws -> Bool {
        if now.timeIntervalSince(session.createdAt) <= maxAge { return true }
        guard let password, let identity = try unit.identity(provider: "password", subject: password.email) else {
            return false
        }
        return identity.userID == session.userID && identity.passwordHash == password.verifiedHash
    }

    /// - Throws: `reauthentication_required` naming `field` unless it `holds`.
    func require(for session: SessionRecord, in unit: any UnitOfWork, at now: Date, field: String) throws {
        guard try holds(for: session, in: unit, at: now) else { throw Self.refusal(field: field) }
    }

    static func refusal(field: String) -> LoginError {
        LoginError(
            .reauthenticationRequired,
            "this change needs a recent sign-in: sign in again, or send the account's password with it",
            field: field)
    }
}

extension LoginFlows {
    /// The re-authentication a request brings for the account its access token signs in to: the
    /// password, when given, is checked here (throttled like a login).
    /// - Throws: `invalid_credentials` naming `data.password` for a wrong one.
    func reauthentication(_ request: LoginRequest, token: PresentedAccessToken, at now: Date) async throws
        -> Reauthentication
    {
        let maxAge = configuration.accounts.reauthMaxAge
        guard let password = request.data.password else { return Reauthentication(maxAge: maxAge, password: nil) }
        var sessionID: UUID?
        var tokenHash: [UInt8]?
        switch token {
        case .jwt(let claims): sessionID = claims.sessionID
        case .opaque(let hash): tokenHash = hash
        }
        guard let email = try await attempts.passwordEmail(sessionID: sessionID, accessTokenHash: tokenHash) else {
            throw LoginError(.invalidCredentials, "this account has no password", field: "data.password")
        }
        let verifiedHash = try await verifiedPassword(password, email: email, at: now)
        return Reauthentication(maxAge: maxAge, password: .init(email: email, verifiedHash: verifiedHash))
    }
}
