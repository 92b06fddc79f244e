import Foundation
import Messages

extension LoginFlows {
    /// `guest`: a user with no identity, and a session with the guest abilities.
    func prepareGuest(_ request: LoginRequest) throws -> any PreparedWrite {
        let now = clock.now()
        let user = NewUser(
            id: try identifiers.uuid(), name: nil, email: nil, emailVerified: false, isPrivateEmail: false,
            isGuest: true, createdAt: now)
        let pending = try pendingSession(at: now, isGuest: true)
        // The user id is decided here, so the token can be signed off the database's thread.
        let accessToken = try pending.accessToken(for: user.id)
        let limit = configuration.accounts.guestRateLimit
        // Per client: the gateway's client id for the app install, else the request's Kafka key.
        let client = request.data.clientID ?? request.partitionKey
        return GuestSignUp(
            requestID: request.id, user: user, handles: try handleCandidates(name: nil, isGuest: true),
            session: pending.session(provider: "guest", device: request.data.device, accessToken: accessToken),
            tokens: pending.payload(accessToken: accessToken),
            limitBucket: limit.count > 0 ? client.flatMap(\.nilIfEmpty).map { "guest:" + $0 } : nil, limit: limit,
            events: events(for: request, at: now))
    }
}

/// A guest sign-up, ready to write.
struct GuestSignUp: PreparedWrite {
    let requestID: String
    let user: NewUser
    let handles: [String]
    let session: NewSession
    let tokens: SessionPayload
    /// The rate-limit bucket of the client, when it is limited.
    let limitBucket: String?
    let limit: WorkerConfiguration.RateLimit
    let events: EventFactory

    var prefetch: Prefetch {
        var prefetch = Prefetch()
        prefetch.handles = Array(handles.prefix(1))
        prefetch.rateLimitBuckets = limitBucket.map { [$0] } ?? []
        return prefetch
    }

    func write(_ unit: any UnitOfWork) throws -> FlowAnswer {
        let now = user.createdAt
        if let limitBucket {
            // Counted with the sign-up it allows: a redelivered request, answered from its kept
            // result, never counts again.
            guard try unit.rateLimitUsage(bucket: limitBucket, at: now, window: limit.window) < limit.count else {
                throw LoginError.tooManyAttempts(
                    until: now + limit.window, now: now, message: "too many guest sign-ups from this client")
            }
            try unit.recordRateLimitedUse(bucket: limitBucket, at: now, window: limit.window)
        }
        let stored = try unit.insertUser(user, handles: handles)
        try unit.insertSession(session, userID: stored.id)
        try unit.appendEvent(try events.userCreated(stored, provider: "guest"))
        return FlowAnswer(
            result: .ok(requestID: requestID, user: stored.payload, newUser: true, session: tokens),
            userID: stored.id, sessionID: session.id)
    }
}

// MARK: - Handlers (registered in `LoginMethod.handler`)

extension MethodHandler {
    static let guest = MethodHandler(audited: true, .atOnce { try $0.prepareGuest($1) }, guestSignUp: true)
}
