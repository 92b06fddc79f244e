import AuthCrypto
import Foundation
import JOSE
import Messages

extension LoginService {
    // MARK: - Provider sign-in (Apple, Google, OpenID Connect)

    func providerSignIn(_ request: LoginRequest) async throws -> LoginOutcome? {
        let data = request.data
        let name = request.method == .oidc ? (data.provider ?? "") : request.method.rawValue
        guard let provider = providers[name] else {
            if request.method == .oidc {
                throw LoginError(
                    .unknownProvider, "provider \(name.prefix(64)) is not configured", field: "data.provider")
            }
            throw LoginError(.unsupportedMethod, "\(name) sign-in is not enabled (no audiences configured)")
        }
        let linkTo = try await linkTarget(request)
        let verified: VerifiedIdentity
        do {
            verified = try await provider.verify(token: data.identityToken ?? "", nonce: data.nonce).identity
        } catch let error as JOSEError {
            throw LoginError(error)
        }
        let profileName = Self.profileName(data.profile)
        let identity = NewIdentity(
            provider: verified.provider, subject: verified.subject, email: verified.email,
            emailVerified: verified.emailVerified, isPrivateEmail: verified.isPrivateEmail, passwordHash: nil)
        var (plan, pending) = try signInPlan(
            request, mode: .findOrCreate, identity: identity, name: profileName ?? verified.name,
            newUserName: profileName ?? verified.name ?? Self.fallbackName(verified), linkTo: linkTo)
        plan.linkByVerifiedEmail = configuration.accounts.linkByVerifiedEmail
        return try await complete(request, plan: plan, pending: pending)
    }

    /// Apple's first-authorization name, as the app received it.
    static func profileName(_ profile: LoginRequestData.Profile?) -> String? {
        let parts = [profile?.givenName, profile?.familyName].compactMap {
            $0?.trimmingCharacters(in: .whitespacesAndNewlines)
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

    // MARK: - Shared by every identity sign-in

    /// A plan with fresh ids, handles, session and the events each outcome announces.
    func signInPlan(
        _ request: LoginRequest, mode: SignInMode, identity: NewIdentity, name: String?, newUserName: String,
        linkTo: UUID?
    ) throws -> (plan: SignInPlan, pending: PendingSession) {
        let now = clock.now()
        let user = NewUser(
            id: try identifiers.uuid(), name: newUserName, email: identity.email, emailVerified: identity.emailVerified,
            isPrivateEmail: identity.isPrivateEmail, isGuest: false, createdAt: now)
        let handles = try (0..<3).map { _ in try identifiers.handle(name: newUserName, isGuest: false) }
        let pending = try PendingSession(identifiers: identifiers, configuration: configuration, now: now)
        var plan = SignInPlan(
            requestID: request.id, method: request.method.rawValue, mode: mode, identity: identity, name: name,
            newUser: user, handleCandidates: handles,
            session: pending.session(provider: identity.provider, device: request.data.device, isGuest: false),
            now: now, idempotencyExpiresAt: now + configuration.sessions.idempotencyLifetime,
            issueAccessToken: { [accessTokens] userID in
                try pending.accessToken(accessTokens: accessTokens, userID: userID, isGuest: false)
            }
        ) { [identifiers, configuration] user, kind in
            try Self.events(
                for: kind, user: user, identity: identity, request: request, identifiers: identifiers,
                configuration: configuration, now: now)
        }
        plan.linkTo = linkTo
        return (plan, pending)
    }

    /// Writes the plan and turns the store's answer into the result.
    func complete(_ request: LoginRequest, plan: SignInPlan, pending: PendingSession) async throws -> LoginOutcome? {
        var plan = plan
        let box = BuiltResult()
        let build: @Sendable (StoredUser, KeepDetails) throws -> LoginResultData = { user, details in
            guard case .signIn(let kind, let accessToken) = details else {
                throw LoginError(.internalError, "a sign-in kept something else", retriable: true)
            }
            return .ok(
                requestID: request.id, user: Self.payload(user), newUser: kind == .created,
                session: pending.payload(accessToken: accessToken, isGuest: false))
        }
        plan.keep = try keeper(for: request, box: box, build: build)
        switch try await store.signIn(plan) {
        case .duplicate:
            return nil
        case .identityTaken:
            throw LoginError(.emailTaken, "an account with this e-mail address exists", field: "data.email")
        case .identityMissing:
            throw LoginError(.invalidCredentials, "wrong e-mail address or password")
        case .linkConflict:
            throw LoginError(
                .linkConflict, "this \(plan.identity.provider) identity already belongs to another account",
                field: "data.link_to")
        case .signedIn(let user, let kind, let events, let accessToken):
            logger.info(
                Self.logMessage(kind),
                metadata: [
                    LogKey.requestID: request.id, LogKey.userID: user.id.lowercasedString,
                    LogKey.method: request.method.rawValue, "auth.provider": plan.identity.provider,
                ])
            return LoginOutcome(
                result: try box.result ?? build(user, .signIn(kind, accessToken: accessToken)), events: events)
        }
    }

    private static func logMessage(_ kind: SignInKind) -> String {
        switch kind {
        case .existing: "User signed in"
        case .created: "User created"
        case .upgraded: "Guest upgraded"
        case .linked: "Identity linked"
        }
    }

    /// What each kind of sign-in announces on the events topic.
    static func events(
        for kind: SignInKind, user: StoredUser, identity: NewIdentity, request: LoginRequest, identifiers: Identifiers,
        configuration: WorkerConfiguration, now: Date
    ) throws -> [OutboxEvent] {
        let key = user.id.lowercasedString
        switch kind {
        case .existing:
            return []
        case .created:
            let data = UserCreatedData(
                userId: key, handle: user.handle, name: user.name, email: user.email, emailVerified: user.emailVerified,
                isPrivateEmail: user.isPrivateEmail, isGuest: user.isGuest, provider: identity.provider,
                createdAt: Timestamp.format(user.createdAt))
            return [
                try event(
                    type: UserEventType.created, data: data, key: key, request: request, identifiers: identifiers,
                    configuration: configuration, now: now)
            ]
        case .upgraded:
            let data = UserUpgradedData(userId: key, provider: identity.provider, email: user.email, name: user.name)
            return [
                try event(
                    type: UserEventType.upgraded, data: data, key: key, request: request, identifiers: identifiers,
                    configuration: configuration, now: now)
            ]
        case .linked:
            let data = IdentityLinkedData(userId: key, provider: identity.provider, subject: identity.subject)
            return [
                try event(
                    type: UserEventType.identityLinked, data: data, key: key, request: request,
                    identifiers: identifiers, configuration: configuration, now: now)
            ]
        }
    }
}
