import AuthCrypto
import Foundation
import JOSE
import Messages
import Passwords

// MARK: - Signing in with a code

extension LoginFlows {
    /// `email_code_request`: a sign-in code for an address's account (or, with
    /// `AUTH_EMAIL_CODE_SIGNUP`, for an address with none); answered the same either way.
    func prepareEmailCodeRequest(_ request: LoginRequest) throws -> any PreparedWrite {
        let keys = try codeKeys()
        guard let email = EmailAddress.normalize(request.data.email ?? "") else {
            throw LoginError(.malformedRequest, "not a valid e-mail address", field: "data.email")
        }
        let now = clock.now()
        return EmailCodeRequest(
            requestID: request.id, email: email, code: try pendingCode(.signIn, keys: keys, at: now),
            limit: configuration.emailCodes.sendLimit, signUp: configuration.emailCodes.signUp,
            events: events(for: request, at: now), now: now)
    }

    /// `email_code`: the code (with the address) or link token signs in, creating the account when
    /// the code was sent to an address without one.
    func prepareEmailCodeSignIn(_ request: LoginRequest) throws -> any PreparedWrite {
        let keys = try codeKeys()
        let now = clock.now()
        let name = (request.data.email ?? "").split(separator: "@").first.map(String.init) ?? "user"
        return EmailCodeSignIn(
            requestID: request.id, presented: try presentedCode(request, purpose: .signIn, keys: keys),
            newUserID: try identifiers.uuid(), handles: try handleCandidates(name: name, isGuest: false),
            pending: try pendingSession(at: now, isGuest: false), device: request.data.device, mfa: mfaGate(),
            events: events(for: request, at: now), now: now)
    }
}

/// `email_code_request`, ready to write.
struct EmailCodeRequest: PreparedWrite {
    let requestID: String
    let email: String
    let code: PendingCode
    let limit: WorkerConfiguration.RateLimit
    let signUp: Bool
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch {
        var prefetch = Prefetch()
        prefetch.identities = [
            IdentityKey(provider: "email", subject: email), IdentityKey(provider: "password", subject: email),
        ]
        return prefetch
    }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let answer = FlowAnswer(result: .accepted(requestID: requestID, user: nil), userID: nil, sessionID: nil)
        let owner = MailboxProof.user(try MailboxProof.reach(email, in: unit, detaching: nil))?.id
        guard owner != nil || signUp else { return answer }
        let bucket = owner.map { PendingCode.bucket(.signIn, userID: $0) } ?? "code:email_sign_in:" + email
        if limit.count > 0 {
            guard try unit.rateLimitUsage(bucket: bucket, at: now, window: limit.window) < limit.count else {
                return answer
            }
            try unit.recordRateLimitedUse(bucket: bucket, at: now, window: limit.window)
        }
        try code.issue(to: owner, email: email, in: unit, events: events)
        return answer
    }
}

/// `email_code`, ready to write.
struct EmailCodeSignIn: PreparedWrite {
    let requestID: String
    let presented: PresentedCode
    let newUserID: UUID
    let handles: [String]
    let pending: PendingSession
    let device: LoginRequestData.Device?
    let mfa: MFAGate?
    let events: EventFactory
    let now: Date

    var prefetch: Prefetch { Prefetch() }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let record: OneTimeCodeRecord
        switch try presented.spend(in: unit, at: now, requestID: requestID) {
        case .refused(let answer): return answer
        case .spent(let found): record = found
        }
        let email = record.email
        let proof = NewIdentity(
            provider: "email", subject: email, email: email, emailVerified: true, isPrivateEmail: false,
            passwordHash: nil)
        var user: StoredUser
        var created = false
        // The account the address reaches now: the one the code was sent for, or (a sign-up
        // code) one made since; else a new one for a sign-up code.
        let reach = try MailboxProof.reach(email, in: unit, detaching: events)
        if let existing = MailboxProof.user(reach) {
            if let owner = record.userID, owner != existing.id { throw presented.refusal }
            user = existing
            if case .unproven = reach {
                // Somebody registered this address without proving it: its owner takes the
                // account over, and nothing the other party set up survives.
                user = try MailboxProof.claim(existing, email: email, in: unit, events: events, at: now)
            } else {
                if var password = try unit.identity(provider: "password", subject: email),
                    password.userID == existing.id, !password.emailVerified
                {
                    password.emailVerified = true
                    try unit.updateIdentity(password, lastLoginAt: now)
                }
                try unit.markVerified(email: email, user: &user, at: now)
            }
            if try unit.identity(provider: "email", subject: email) == nil {
                try unit.insertIdentity(proof, userID: user.id, at: now)
                if !user.providers.contains("email") { user.providers.append("email") }
            }
            // A claimed account's factor was the other party's, and is gone (a flow's reads do
            // not see its own writes: the gate is not asked).
            if case .proven = reach, let mfa,
                let stop = try mfa.answer(
                    requestID: requestID, user: user.id, provider: "email", device: device, in: unit, at: now)
            {
                return stop
            }
        } else if record.userID == nil {
            user = try unit.insertUser(
                NewUser(
                    id: newUserID, name: String(email.split(separator: "@").first ?? "user"), email: email,
                    emailVerified: true, isPrivateEmail: false, isGuest: false, createdAt: now),
                handles: handles)
            try unit.insertIdentity(proof, userID: user.id, at: now)
            user.providers = ["email"]
            try unit.appendEvent(try events.userCreated(user, provider: "email"))
            created = true
        } else {
            throw presented.refusal
        }
        return try pending.open(
            for: user, provider: "email", device: device, newUser: created, requestID: requestID, in: unit)
    }
}

// MARK: - Handlers (registered in `LoginMethod.handler`)

extension MethodHandler {
    static let emailCodeRequest = MethodHandler(audited: false, .atOnce { try $0.prepareEmailCodeRequest($1) })
    static let emailCode = MethodHandler(audited: true, .atOnce { try $0.prepareEmailCodeSignIn($1) })
}
