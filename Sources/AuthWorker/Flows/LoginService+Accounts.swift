import AuthCrypto
import Foundation
import JOSE
import Messages
import Passwords

extension LoginService {
    // MARK: - Registration and password login

    func register(_ request: LoginRequest) async throws -> LoginOutcome? {
        let passwords = try passwordService()
        let data = request.data
        guard let email = EmailAddress.normalize(data.email ?? "") else {
            throw LoginError(.malformedRequest, "not a valid e-mail address", field: "data.email")
        }
        let password = data.password ?? ""
        do {
            try passwords.policy.check(password, email: email)
        } catch let weakness as PasswordPolicy.Weakness {
            throw LoginError(.weakPassword, "the password \(weakness.reason)", field: "data.password")
        }
        let linkTo = try await linkTarget(request)
        let hash = try await passwords.hash(password)
        let name = data.name?.trimmingCharacters(in: .whitespacesAndNewlines).nilIfEmpty
        // The address is unverified: nobody has proven they receive mail there.
        let identity = NewIdentity(
            provider: "password", subject: email, email: email, emailVerified: false, isPrivateEmail: false,
            passwordHash: hash)
        let (plan, pending) = try signInPlan(
            request, mode: .createOnly, identity: identity, name: name,
            newUserName: name ?? String(email.split(separator: "@").first ?? "user"), linkTo: linkTo)
        return try await complete(request, plan: plan, pending: pending)
    }

    func passwordLogin(_ request: LoginRequest) async throws -> LoginOutcome? {
        let passwords = try passwordService()
        let data = request.data
        // An implausible address is answered like a wrong one: the same code, the same work.
        let email = EmailAddress.normalize(data.email ?? "")
        let throttleKey = "password:" + (email ?? (data.email ?? "").lowercased())
        let now = clock.now()
        let (credential, throttle) = try await store.passwordLogin(email: email, throttleKey: throttleKey)
        if let lockedUntil = throttle?.lockedUntil, lockedUntil > now {
            throw LoginError.tooManyAttempts(until: lockedUntil)
        }
        // Unknown e-mails are checked against a dummy hash: the same code and a similar time.
        let verification = try await passwords.verify(data.password ?? "", against: credential?.passwordHash)
        guard let email, credential != nil, verification.matches else {
            let state = try await store.recordFailedAttempt(
                key: throttleKey, at: now, policy: configuration.accounts.throttle)
            logger.info(
                "Password login refused",
                metadata: [LogKey.requestID: request.id, "auth.failures": String(state.failures)])
            throw LoginError(.invalidCredentials, "wrong e-mail address or password")
        }
        let identity = NewIdentity(
            provider: "password", subject: email, email: nil, emailVerified: false, isPrivateEmail: false,
            passwordHash: nil)
        var (plan, pending) = try signInPlan(
            request, mode: .findOnly, identity: identity, name: nil, newUserName: email, linkTo: nil)
        if throttle != nil { plan.resetThrottleKey = throttleKey }
        if verification.needsRehash {
            plan.replacementPasswordHash = try await passwords.hash(data.password ?? "")
        }
        return try await complete(request, plan: plan, pending: pending)
    }

    func passwordService() throws -> PasswordService {
        guard let passwords else {
            throw LoginError(.unsupportedMethod, "password accounts are not enabled on this worker")
        }
        return passwords
    }

    // MARK: - Guest rate limit

    /// Guests are limited per client (the request's `client_id`, else its Kafka key), so guest mode
    /// cannot be used to fill the database.
    func checkGuestRateLimit(_ request: LoginRequest, now: Date) async throws {
        let limit = configuration.accounts.guestRateLimit
        guard limit.count > 0, let client = request.data.clientID ?? request.partitionKey, !client.isEmpty else {
            return
        }
        let count = try await store.countRateLimited(bucket: "guest:" + client, at: now, window: limit.window)
        if count > limit.count {
            throw LoginError.tooManyAttempts(
                until: now + limit.window, message: "too many guest sign-ups from this client")
        }
    }

    // MARK: - Linking

    /// The user a request's `link_to` access token signs in as, or nil without `link_to`.
    /// - Throws: `invalid_token` (field `data.link_to`) for a token that is not a live session's.
    func linkTarget(_ request: LoginRequest) async throws -> UUID? {
        guard let token = request.data.linkTo else { return nil }
        return try await resolveAccessToken(token, field: "data.link_to", allowExpired: false).userID
    }
}

extension LoginError {
    /// `too_many_attempts`, saying when to try again.
    static func tooManyAttempts(until date: Date, message: String = "too many failed attempts for this account")
        -> LoginError
    {
        var error = LoginError(.tooManyAttempts, message)
        error.retryAfter = Timestamp.format(date)
        return error
    }
}

extension String {
    var nilIfEmpty: String? { isEmpty ? nil : self }
}
