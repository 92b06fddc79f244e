import AuthCrypto
import Foundation
import JOSE
import Messages
import Passwords
import ServiceKit

extension LoginFlows {
    // MARK: - Provider sign-in (Apple, Google, OpenID Connect)

    /// `apple`, `google`, `oidc`: the provider's ID token names the identity; its first sign-in
    /// creates the user.
    func prepareProviderSignIn(_ request: LoginRequest) async throws -> any PreparedWrite {
        let start = try providerSignInStart(request)
        let verified: VerifiedIdentity
        do {
            verified = try await start.provider.verify(
                token: request.data.identityToken ?? "", nonce: request.data.nonce
            ).identity
        } catch let error as JOSEError {
            throw LoginError(error)
        }
        return try providerSignIn(request, verified: verified, linkTo: start.linkTo, at: start.now)
    }

    /// `prepareProviderSignIn` when the provider's keys are cached and fresh: no wait.
    /// - Returns: nil when the token's verification would wait for the key set.
    func prepareProviderSignInAtOnce(_ request: LoginRequest) throws -> (any PreparedWrite)? {
        let start = try providerSignInStart(request)
        let found: (claims: IDTokenClaims, identity: VerifiedIdentity)?
        do {
            found = try start.provider.verifyAtOnce(token: request.data.identityToken ?? "", nonce: request.data.nonce)
        } catch let error as JOSEError {
            throw LoginError(error)
        }
        guard let found else { return nil }
        return try providerSignIn(request, verified: found.identity, linkTo: start.linkTo, at: start.now)
    }

    /// What a provider sign-in checks before its token: the provider it names (enabled), the time,
    /// and the session it links to, if any.
    private func providerSignInStart(_ request: LoginRequest) throws -> (
        provider: IdentityProvider, now: Date, linkTo: PresentedAccessToken?
    ) {
        let provider = try identityProvider(for: request)
        let now = clock.now()
        let linkTo = try request.data.linkTo.map {
            try presentedToken($0, field: "data.link_to", allowExpired: false, at: now)
        }
        return (provider, now, linkTo)
    }

    /// The provider a sign-in names, enabled.
    private func identityProvider(for request: LoginRequest) throws -> IdentityProvider {
        let name = request.method == .oidc ? (request.data.provider ?? "") : request.method.rawValue
        guard let provider = providers[name] else {
            if request.method == .oidc {
                throw LoginError(
                    .unknownProvider, "provider \(name.prefix(64)) is not configured", field: "data.provider")
            }
            throw LoginError(.unsupportedMethod, "\(name) sign-in is not enabled (no audiences configured)")
        }
        return provider
    }

    /// A verified provider identity's sign-in: found, linked or created.
    func providerSignIn(
        _ request: LoginRequest, verified: VerifiedIdentity, linkTo: PresentedAccessToken?, at now: Date
    ) throws -> any PreparedWrite {
        let data = request.data
        let profileName = Self.profileName(data.profile)
        let identity = NewIdentity(
            provider: verified.provider, subject: verified.subject, email: verified.email,
            emailVerified: verified.emailVerified, isPrivateEmail: verified.isPrivateEmail, passwordHash: nil)
        var signIn = try identitySignIn(
            request, mode: .findOrCreate, identity: identity, name: profileName ?? verified.name,
            newUserName: profileName ?? verified.name ?? Self.fallbackName(verified), linkTo: linkTo, at: now,
            linkByVerifiedEmail: configuration.accounts.linkByVerifiedEmail,
            sharedName: profileName == nil && verified.name == nil)
        // Sign in with Apple's authorization code: exchanged after the login, never on its path,
        // so the account's deletion can revoke Apple's tokens.
        if request.method == .apple, let code = data.authorizationCode, let keys = appleTokenKeys,
            let clientID = verified.audience
        {
            signIn.appleExchange = AppleJob(
                id: try identifiers.uuid(), kind: .exchange, subject: verified.subject, clientID: clientID,
                secretSealed: try keys.seal(code, .authorizationCode, subject: verified.subject), createdAt: now)
        }
        return signIn
    }

    /// Apple's first-authorization name, as the app received it.
    static func profileName(_ profile: LoginRequestData.Profile?) -> String? {
        let parts = [profile?.givenName, profile?.familyName].compactMap {
            $0?.trimmedOfWhitespace
        }.filter { !$0.isEmpty }
        return parts.isEmpty ? nil : parts.joined(separator: " ")
    }

    /// A display name for someone the provider gave no name: the e-mail's local part when it is a
    /// real address, else "<Provider> user".
    static func fallbackName(_ identity: VerifiedIdentity) -> String {
        if let email = identity.email, !identity.isPrivateEmail, let local = email.split(separator: "@").first,
            !local.isEmpty
        {
            return String(local)
        }
        return identity.provider.prefix(1).uppercased() + identity.provider.dropFirst() + " user"
    }

    // MARK: - Registration and password login

    /// `register`: a new e-mail and password account (or a guest keeping its id, with `link_to`).
    func prepareRegistration(_ request: LoginRequest) async throws -> any PreparedWrite {
        let passwords = try passwordService()
        let data = request.data
        guard let email = EmailAddress.normalize(data.email ?? "") else {
            throw LoginError(.malformedRequest, "not a valid e-mail address", field: "data.email")
        }
        let password = data.password ?? ""
        do {
            try passwordPolicy.check(password, email: email)
        } catch let weakness as PasswordPolicy.Weakness {
            throw LoginError(.weakPassword, "the password \(weakness.reason)", field: "data.password")
        }
        let now = clock.now()
        let linkTo = try data.linkTo.map {
            try presentedToken($0, field: "data.link_to", allowExpired: false, at: now)
        }
        // Counted before the hash is made: a flood of registrations costs no Argon2 time.
        try await reserveRegistration(request, at: now)
        let hash = try await passwords.hash(password)
        let name = data.name?.trimmedOfWhitespace.nilIfEmpty
        // The address is unverified: nobody has proven they receive mail there.
        let identity = NewIdentity(
            provider: "password", subject: email, email: email, emailVerified: false, isPrivateEmail: false,
            passwordHash: hash)
        var signIn = try identitySignIn(
            request, mode: .createOnly, identity: identity, name: name,
            newUserName: name ?? String(email.split(separator: "@").first ?? "user"), linkTo: linkTo, at: now)
        // With e-mail codes on, the new address gets its verification code.
        if let keys = emailCodeKeys { signIn.verification = try pendingCode(.verifyEmail, keys: keys, at: now) }
        return signIn
    }

    /// Takes one registration from the client's bucket (`client_id`, else the Kafka key) and one
    /// from the global ceiling, or refuses with `too_many_attempts` until the window ends.
    func reserveRegistration(_ request: LoginRequest, at now: Date) async throws {
        let accounts = configuration.accounts
        var reservations: [RateLimitReservation] = []
        if accounts.registerRateLimit.count > 0,
            let client = (request.data.clientID ?? request.partitionKey).flatMap(\.nilIfEmpty)
        {
            reservations.append(
                RateLimitReservation(bucket: "register:" + client, limit: accounts.registerRateLimit, wanted: 1))
        }
        if accounts.registerGlobalRateLimit.count > 0 {
            reservations.append(
                RateLimitReservation(bucket: "register-all", limit: accounts.registerGlobalRateLimit, wanted: 1))
        }
        let grants = try await attempts.reserveRateLimits(reservations, at: now)
        for (reservation, grant) in zip(reservations, grants) where grant.granted < 1 {
            throw LoginError.tooManyAttempts(
                until: grant.windowEnd, now: now,
                message: reservation.bucket == "register-all"
                    ? "too many registrations right now; try again later" : "too many registrations from this client")
        }
    }

    /// `password`: the attempt is counted before the hash is checked, so a burst of guesses for
    /// one account, however parallel, gets no more verifications than the limit allows.
    func preparePasswordLogin(_ request: LoginRequest) async throws -> any PreparedWrite {
        let passwords = try passwordService()
        let data = request.data
        // An implausible address is answered like a wrong one: the same code, the same work.
        let email = EmailAddress.normalize(data.email ?? "")
        let throttleKey = "password:" + (email ?? (data.email ?? "").lowercased())
        let now = clock.now()
        let attempt = try await attempts.reservePasswordAttempt(
            key: throttleKey, email: email, at: now, policy: configuration.accounts.throttle)
        guard attempt.allowed else {
            throw LoginError.tooManyAttempts(until: attempt.lockedUntil ?? now, now: now)
        }
        // Unknown e-mails are checked against a dummy hash: the same code and a similar time.
        let password = data.password ?? ""
        let verification = try await passwords.verify(password, against: attempt.credential?.passwordHash)
        guard let email, attempt.credential != nil, verification.matches else {
            logger.info(
                "Password login refused",
                metadata: [LogKey.requestID: request.id, "auth.failures": String(attempt.failures)])
            var wrong = LoginError(.invalidCredentials, "wrong e-mail address or password")
            // The audit trail names the account a wrong password was tried for; the answer never does.
            wrong.accountID = attempt.credential?.userID
            throw wrong
        }
        let identity = NewIdentity(
            provider: "password", subject: email, email: nil, emailVerified: false, isPrivateEmail: false,
            passwordHash: nil)
        var signIn = try identitySignIn(
            request, mode: .findOnly, identity: identity, name: nil, newUserName: email, linkTo: nil, at: now)
        signIn.throttleKey = throttleKey
        if verification.needsRehash { signIn.replacementPasswordHash = try await passwords.hash(password) }
        return signIn
    }

    func passwordService() throws -> PasswordService {
        guard let passwords else {
            throw LoginError(.unsupportedMethod, "password accounts are not enabled on this worker")
        }
        return passwords
    }

    // MARK: - Shared by every identity sign-in

    func identitySignIn(
        _ request: LoginRequest, mode: SignInMode, identity: NewIdentity, name: String?, newUserName: String,
        linkTo: PresentedAccessToken?, at now: Date, linkByVerifiedEmail: Bool = false, sharedName: Bool = false
    ) throws -> IdentitySignIn {
        var signIn = IdentitySignIn(
            requestID: request.id, mode: mode, identity: identity, name: name,
            newUser: NewUser(
                id: try identifiers.uuid(), name: newUserName, email: identity.email,
                emailVerified: identity.emailVerified, isPrivateEmail: identity.isPrivateEmail, isGuest: false,
                createdAt: now),
            handles: try handleCandidates(name: newUserName, isGuest: false, shared: sharedName), linkTo: linkTo,
            linkByVerifiedEmail: linkByVerifiedEmail, pending: try pendingSession(at: now, isGuest: false),
            device: request.data.device, events: events(for: request, at: now), now: now)
        signIn.mfa = mfaGate()
        signIn.requireVerifiedEmail = configuration.accounts.requireVerifiedEmail
        signIn.reauthMaxAge = configuration.accounts.reauthMaxAge
        return signIn
    }
}

/// How a sign-in may treat the identity it names.
enum SignInMode: Sendable, Equatable {
    /// Find the identity's user, or create one (provider logins).
    case findOrCreate
    /// The identity must already exist (password logins).
    case findOnly
    /// The identity must not exist yet (registration).
    case createOnly
}

/// What a sign-in did to the account, for the events and the result.
enum SignInKind: Sendable, Equatable {
    /// An existing identity signed in.
    case existing
    /// A new user was created with the identity.
    case created
    /// A guest got the identity and became a full account.
    case upgraded
    /// The identity was added to an existing full account.
    case linked
}

/// A sign-in with an identity (provider, password or registration), ready to write.
struct IdentitySignIn: PreparedWrite {
    let requestID: String
    let mode: SignInMode
    /// The identity as the request proves it now.
    let identity: NewIdentity
    /// A name for the user: set on a new user, and on an existing one that has none.
    let name: String?
    /// The user to create if the identity is new and not linked.
    let newUser: NewUser
    let handles: [String]
    /// Attach a new identity to the account this token signs in to (typically a guest).
    let linkTo: PresentedAccessToken?
    /// Attach a new identity to the one full account with the same verified, non-relay e-mail.
    let linkByVerifiedEmail: Bool
    let pending: PendingSession
    let device: LoginRequestData.Device?
    let events: EventFactory
    let now: Date
    /// Password logins: the throttle row to clear on success.
    var throttleKey: String?
    /// Password logins: a fresh hash to store (the old one was outdated).
    var replacementPasswordHash: String?
    /// Registration: the code that proves the new address, sent when the identity is added.
    var verification: PendingCode?
    /// Stops a sign-in to an account with a second factor at `mfa_required`.
    var mfa: MFAGate?
    /// Password identities sign in only with a verified address (`AUTH_REQUIRE_VERIFIED_EMAIL`).
    var requireVerifiedEmail = false
    /// How recent the `link_to` session's sign-in must be to add a way into a full account.
    var reauthMaxAge: TimeInterval = 300
    /// Apple: the exchange of the login's authorization code, queued with the sign-in.
    var appleExchange: AppleJob?

    var prefetch: Prefetch {
        var prefetch = Prefetch()
        prefetch.identities = [IdentityKey(provider: identity.provider, subject: identity.subject)]
        prefetch.handles = Array(handles.prefix(1))
        if let linkTo { prefetch.merge(linkTo.prefetch) }
        return prefetch
    }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let existing = try unit.identity(provider: identity.provider, subject: identity.subject)
        switch (mode, existing) {
        case (.createOnly, .some):
            throw LoginError(.emailTaken, "an account with this e-mail address exists", field: "data.email")
        case (.findOnly, nil):
            throw LoginError(.invalidCredentials, "wrong e-mail address or password")
        default:
            break
        }
        let linkSession = try linkTo?.session(in: unit, at: now, allowExpired: false, field: "data.link_to")
        let linkUser = linkSession?.userID
        if let existing, let linkUser, existing.userID != linkUser { throw linkConflict }
        // Another way into a full account is a change to how it signs in: a recent sign-in only.
        // (A guest has no other credential to ask for: its token is the account.)
        if let linkSession, existing == nil, !linkSession.userIsGuest,
            now.timeIntervalSince(linkSession.createdAt) > reauthMaxAge
        {
            throw Reauthentication.refusal(field: "data.link_to")
        }

        var user: StoredUser
        let kind: SignInKind
        if let existing {
            try unit.updateIdentity(
                existing.updated(with: identity, passwordHash: replacementPasswordHash), lastLoginAt: now)
            guard let stored = try unit.user(id: existing.userID) else { throw linkConflict }
            user = stored.filledIn(name: name, from: identity)
            if user != stored { try unit.updateUser(user, upgradedAt: nil, at: now) }
            kind = .existing
        } else if let target = try linkTarget(linkUser, unit) {
            try unit.insertIdentity(identity, userID: target.id, at: now)
            kind = target.isGuest ? .upgraded : .linked
            user = target.filledIn(name: name, from: identity)
            user.isGuest = false
            if !user.providers.contains(identity.provider) { user.providers.append(identity.provider) }
            try unit.updateUser(user, upgradedAt: kind == .upgraded ? now : nil, at: now)
        } else {
            user = try unit.insertUser(newUser, handles: handles)
            try unit.insertIdentity(identity, userID: user.id, at: now)
            user.providers = [identity.provider]
            kind = .created
        }
        if let throttleKey { try unit.resetThrottle(key: throttleKey) }
        if let appleExchange { try unit.enqueueAppleJob(appleExchange) }
        if let verification, kind != .existing, let email = identity.email, !identity.emailVerified {
            try verification.issue(to: user.id, email: email, in: unit, events: events)
        }

        // An address that must be verified first: the account exists, no session yet.
        if requireVerifiedEmail, identity.provider == "password" {
            if kind == .existing, existing?.emailVerified == false {
                return .refused(
                    LoginError(
                        .emailNotVerified, "verify the e-mail address first (verify_email; send_verification resends)"),
                    requestID: requestID, userID: user.id)
            }
            if kind != .existing, !identity.emailVerified {
                try appendSignUpEvent(kind, user: user, unit)
                var result = LoginResultData.accepted(requestID: requestID, user: user.payload)
                result.newUser = kind == .created
                return FlowAnswer(result: result, userID: user.id, sessionID: nil)
            }
        }
        // An account with a second factor, however the sign-in reached it (its identity, or one
        // linked just now): the first factor passed, the session waits.
        if kind != .created, let mfa,
            let stop = try mfa.answer(
                requestID: requestID, user: user.id, provider: identity.provider, device: device, in: unit, at: now)
        {
            try appendSignUpEvent(kind, user: user, unit)
            return stop
        }
        let answer = try pending.open(
            for: user, provider: identity.provider, device: device, newUser: kind == .created, requestID: requestID,
            in: unit)
        try appendSignUpEvent(kind, user: user, unit)
        return answer
    }

    /// The event of what the sign-in did to the account.
    private func appendSignUpEvent(_ kind: SignInKind, user: StoredUser, _ unit: any UnitOfWork) throws {
        switch kind {
        case .existing: break
        case .created: try unit.appendEvent(try events.userCreated(user, provider: identity.provider))
        case .upgraded: try unit.appendEvent(try events.userUpgraded(user, provider: identity.provider))
        case .linked:
            try unit.appendEvent(
                try events.identityLinked(user: user.id, provider: identity.provider, subject: identity.subject))
        }
    }

    /// The account a new identity joins instead of a new user: the `link_to` account, or the one
    /// full account with the same verified e-mail when that is enabled.
    private func linkTarget(_ linkUser: UUID?, _ unit: any UnitOfWork) throws -> StoredUser? {
        if let linkUser {
            guard let target = try unit.user(id: linkUser) else { throw linkConflict }
            return target
        }
        guard linkByVerifiedEmail, let email = identity.email, identity.emailVerified, !identity.isPrivateEmail
        else { return nil }
        let matches = try unit.usersWithVerifiedEmail(email)
        guard matches.count == 1, let match = matches.first else { return nil }
        return try unit.user(id: match)
    }

    private var linkConflict: LoginError {
        LoginError(
            .linkConflict, "this \(identity.provider) identity already belongs to another account",
            field: "data.link_to")
    }
}

// MARK: - What a sign-in changes

extension IdentityRecord {
    /// The identity updated with what a sign-in proves now: a newer e-mail and its verification
    /// (a missing e-mail never erases the stored one) and a replacement password hash.
    func updated(with proof: NewIdentity, passwordHash replacement: String?) -> IdentityRecord {
        var updated = self
        if let email = proof.email {
            updated.email = email
            updated.emailVerified = proof.emailVerified
            updated.isPrivateEmail = proof.isPrivateEmail
        }
        if let replacement { updated.passwordHash = replacement }
        return updated
    }
}

extension StoredUser {
    /// The user with what it lacks filled in from a sign-in: a name or an e-mail is never
    /// overwritten, nor erased. An e-mail the user already has becomes verified when the
    /// identity's copy of it is.
    func filledIn(name newName: String?, from identity: NewIdentity) -> StoredUser {
        var filled = self
        if filled.name == nil { filled.name = newName }
        if let current = email {
            if let proven = identity.email, proven.lowercased() == current.lowercased(), identity.emailVerified {
                filled.emailVerified = true
            }
        } else if let proven = identity.email {
            filled.email = proven
            filled.emailVerified = identity.emailVerified
            filled.isPrivateEmail = identity.isPrivateEmail
        }
        return filled
    }
}

extension String {
    /// `trimmingCharacters(in: .whitespacesAndNewlines)`, skipping Foundation (which bridges
    /// through `NSString`, a few microseconds) when both ends are visible ASCII and there is
    /// nothing to trim, as with nearly every name.
    var trimmedOfWhitespace: String {
        if let first = utf8.first, let last = utf8.last, (0x21...0x7E).contains(first), (0x21...0x7E).contains(last) {
            return self
        }
        return trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

// MARK: - Handlers (registered in `LoginMethod.handler`)

extension MethodHandler {
    static let providerSignIn = MethodHandler(
        audited: true,
        .atOnceWithCachedKeys(
            { try $0.prepareProviderSignInAtOnce($1) }, otherwise: { try await $0.prepareProviderSignIn($1) }))
    static let register = MethodHandler(audited: true, .hashing { try await $0.prepareRegistration($1) })
    static let password = MethodHandler(
        audited: true, .hashing { try await $0.preparePasswordLogin($1) }, reads: .always)
}
