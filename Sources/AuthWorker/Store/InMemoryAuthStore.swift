import AuthCrypto
import Foundation
import Synchronization

/// `AuthStore` in memory, for unit tests of the flows. Same semantics as the PostgreSQL store.
public final class InMemoryAuthStore: AuthStore {
    private struct State {
        var requests: Set<String> = []
        var users: [UUID: StoredUser] = [:]
        var handles: Set<String> = []
        var identities: [String: (identity: NewIdentity, userID: UUID)] = [:]
        var sessions: [UUID: (session: NewSession, userID: UUID)] = [:]
        var outbox: [(event: OutboxEvent, published: Date?)] = []
        var throttles: [String: (failures: Int, last: Date, lockedUntil: Date?)] = [:]
        var rateLimits: [String: (start: Date, count: Int)] = [:]
        var refreshTokens: [[UInt8]: RefreshRecord] = [:]
        var revokedSessions: Set<UUID> = []
        var results: [String: [UInt8]] = [:]

        /// Registers a session's first refresh token with it.
        mutating func insert(_ session: NewSession, userID: UUID) {
            sessions[session.id] = (session, userID)
            refreshTokens[session.refreshTokenHash] = RefreshRecord(
                sessionID: session.id, expiresAt: session.refreshTokenExpiresAt, usedAt: nil, sealed: nil)
        }
    }

    struct RefreshRecord {
        var sessionID: UUID
        var expiresAt: Date
        var usedAt: Date?
        var sealed: [UInt8]?
    }

    private let state = Mutex(State())

    public init() {}

    public func createAccount(_ plan: NewAccount) async throws -> AccountWrite {
        try state.withLock { state in
            guard !state.requests.contains(plan.requestID) else { return .duplicate }
            guard let handle = plan.handleCandidates.first(where: { !state.handles.contains($0) }) else {
                throw InMemoryStoreError.handlesTaken
            }
            if let identity = plan.identity, state.identities[Self.key(identity)] != nil {
                throw InMemoryStoreError.identityExists
            }
            let user = StoredUser(
                id: plan.user.id, handle: handle, name: plan.user.name, email: plan.user.email,
                emailVerified: plan.user.emailVerified, isPrivateEmail: plan.user.isPrivateEmail,
                isGuest: plan.user.isGuest, providers: plan.identity.map { [$0.provider] } ?? [],
                createdAt: plan.user.createdAt)
            let events = try plan.events(user)
            state.requests.insert(plan.requestID)
            state.handles.insert(handle)
            state.users[user.id] = user
            if let identity = plan.identity { state.identities[Self.key(identity)] = (identity, user.id) }
            state.insert(plan.session, userID: user.id)
            state.outbox += events.map { ($0, nil) }
            if let sealed = try plan.keep?(user, .account) { state.results[plan.requestID] = sealed }
            return .created(user, events: events)
        }
    }

    public func signIn(_ plan: SignInPlan) async throws -> SignInWrite {
        try state.withLock { state in
            let key = Self.key(plan.identity)
            let existing = state.identities[key]?.userID
            switch (plan.mode, existing) {
            case (.createOnly, .some): return .identityTaken
            case (.findOnly, nil): return .identityMissing
            default: break
            }
            if let existing, let target = plan.linkTo, existing != target { return .linkConflict }
            var target: UUID?
            if existing == nil, let linkTo = plan.linkTo {
                guard state.users[linkTo] != nil else { return .linkConflict }
                target = linkTo
            } else if existing == nil, plan.linkByVerifiedEmail, let email = plan.identity.email,
                plan.identity.emailVerified, !plan.identity.isPrivateEmail
            {
                let matches = state.users.values.filter {
                    $0.email?.lowercased() == email.lowercased() && $0.emailVerified && !$0.isPrivateEmail
                        && !$0.isGuest
                }
                if matches.count == 1 { target = matches.first?.id }
            }
            guard !state.requests.contains(plan.requestID) else { return .duplicate }

            var scratch = state
            let kind: SignInKind
            let userID: UUID
            if let existing {
                userID = existing
                var identity = scratch.identities[key]?.identity ?? plan.identity
                if let email = plan.identity.email {
                    identity.email = email
                    identity.emailVerified = plan.identity.emailVerified
                    identity.isPrivateEmail = plan.identity.isPrivateEmail
                }
                if let hash = plan.replacementPasswordHash { identity.passwordHash = hash }
                scratch.identities[key] = (identity, existing)
                Self.fill(&scratch, existing, identity: plan.identity, name: plan.name)
                kind = .existing
            } else if let target, var user = scratch.users[target] {
                userID = target
                scratch.identities[key] = (plan.identity, target)
                if user.isGuest {
                    user.isGuest = false
                    scratch.users[target] = user
                    kind = .upgraded
                } else {
                    kind = .linked
                }
                Self.fill(&scratch, target, identity: plan.identity, name: plan.name)
            } else {
                guard let handle = plan.handleCandidates.first(where: { !scratch.handles.contains($0) }) else {
                    throw InMemoryStoreError.handlesTaken
                }
                let new = plan.newUser
                userID = new.id
                scratch.users[new.id] = StoredUser(
                    id: new.id, handle: handle, name: new.name, email: new.email, emailVerified: new.emailVerified,
                    isPrivateEmail: new.isPrivateEmail, isGuest: new.isGuest, providers: [],
                    createdAt: new.createdAt)
                scratch.handles.insert(handle)
                scratch.identities[key] = (plan.identity, new.id)
                kind = .created
            }
            if let throttleKey = plan.resetThrottleKey { scratch.throttles[throttleKey] = nil }
            var user = scratch.users[userID]
            user?.providers = scratch.identities.values.filter { $0.userID == userID }.map(\.identity.provider).sorted()
            guard let user else { throw InMemoryStoreError.identityExists }
            scratch.users[userID] = user
            let token = try plan.issueAccessToken(userID)
            var session = plan.session
            session.accessTokenHash = SHA256.hash(token)
            scratch.insert(session, userID: userID)
            let events = try plan.events(user, kind)
            scratch.outbox += events.map { ($0, nil) }
            scratch.requests.insert(plan.requestID)
            if let sealed = try plan.keep?(user, .signIn(kind, accessToken: token)) {
                scratch.results[plan.requestID] = sealed
            }
            state = scratch
            return .signedIn(user, kind: kind, events: events, accessToken: token)
        }
    }

    private static func fill(_ state: inout State, _ id: UUID, identity: NewIdentity, name: String?) {
        guard var user = state.users[id] else { return }
        user.name = user.name ?? name
        if user.email == nil, let email = identity.email {
            user.email = email
            user.emailVerified = identity.emailVerified
            user.isPrivateEmail = identity.isPrivateEmail
        }
        state.users[id] = user
    }

    private static func key(_ identity: NewIdentity) -> String { "\(identity.provider)|\(identity.subject)" }

    public func passwordCredential(email: String) async throws -> PasswordCredential? {
        state.withLock { state in
            guard let (identity, userID) = state.identities["password|\(email)"], let hash = identity.passwordHash
            else {
                return nil
            }
            return PasswordCredential(userID: userID, passwordHash: hash)
        }
    }

    public func throttle(key: String) async throws -> ThrottleState? {
        state.withLock { state in
            state.throttles[key].map { ThrottleState(failures: $0.failures, lockedUntil: $0.lockedUntil) }
        }
    }

    public func recordFailedAttempt(key: String, at date: Date, policy: ThrottlePolicy) async throws -> ThrottleState {
        state.withLock { state in
            var failures = 1
            if let previous = state.throttles[key], previous.last >= date - policy.window {
                failures = previous.failures + 1
            }
            let lockedUntil = policy.lock(afterFailures: failures).map { date + $0 }
            state.throttles[key] = (failures, date, lockedUntil)
            return ThrottleState(failures: failures, lockedUntil: lockedUntil)
        }
    }

    public func countRateLimited(bucket: String, at date: Date, window: TimeInterval) async throws -> Int {
        state.withLock { state in
            if let current = state.rateLimits[bucket], current.start > date - window {
                state.rateLimits[bucket] = (current.start, current.count + 1)
                return current.count + 1
            }
            state.rateLimits[bucket] = (date, 1)
            return 1
        }
    }

    public func accessToken(hash: [UInt8]) async throws -> AccessTokenRecord? {
        state.withLock { state in
            guard let (session, userID) = state.sessions.values.first(where: { $0.session.accessTokenHash == hash })
            else {
                return nil
            }
            return AccessTokenRecord(
                userID: userID, sessionID: session.id, expiresAt: min(session.accessTokenExpiresAt, session.expiresAt),
                sessionRevoked: state.revokedSessions.contains(session.id),
                isGuest: state.users[userID]?.isGuest ?? false)
        }
    }

    public func session(id: UUID) async throws -> AccessTokenRecord? {
        state.withLock { state in
            guard let (session, userID) = state.sessions[id] else { return nil }
            return AccessTokenRecord(
                userID: userID, sessionID: id, expiresAt: session.expiresAt,
                sessionRevoked: state.revokedSessions.contains(id),
                isGuest: state.users[userID]?.isGuest ?? false)
        }
    }

    public func refresh(_ plan: RefreshPlan) async throws -> RefreshWrite {
        try state.withLock { state in
            guard let record = state.refreshTokens[plan.tokenHash],
                let (session, userID) = state.sessions[record.sessionID],
                let user = state.users[userID], !state.revokedSessions.contains(record.sessionID)
            else { return .invalid }
            let context = RefreshContext(
                userID: userID, sessionID: session.id, isGuest: user.isGuest, abilities: session.abilities,
                deviceName: session.deviceName, sessionExpiresAt: session.expiresAt)
            if let usedAt = record.usedAt {
                if plan.now.timeIntervalSince(usedAt) <= plan.grace, let sealed = record.sealed {
                    guard state.requests.insert(plan.requestID).inserted else { return .duplicate }
                    return .replayed(user, sealed: sealed)
                }
                state.revokedSessions.insert(session.id)
                let events = try plan.reuseEvents(context)
                state.outbox += events.map { ($0, nil) }
                return .reused(events: events)
            }
            guard record.expiresAt > plan.now, session.expiresAt > plan.now else { return .invalid }
            guard !state.requests.contains(plan.requestID) else { return .duplicate }
            let issued = try plan.issue(context)
            state.requests.insert(plan.requestID)
            state.refreshTokens[plan.tokenHash]?.usedAt = plan.now
            state.refreshTokens[plan.tokenHash]?.sealed = issued.sealedForReplay
            state.refreshTokens[issued.refreshTokenHash] = RefreshRecord(
                sessionID: session.id, expiresAt: issued.refreshTokenExpiresAt, usedAt: nil, sealed: nil)
            var updated = session
            updated.accessTokenHash = issued.accessTokenHash
            state.sessions[session.id] = (updated, userID)
            if let sealed = try plan.keep?(user, .refresh(issued)) { state.results[plan.requestID] = sealed }
            return .rotated(user, issued)
        }
    }

    public func logout(_ plan: LogoutPlan) async throws -> LogoutWrite {
        try state.withLock { state in
            guard let (_, userID) = state.sessions[plan.sessionID], let user = state.users[userID] else {
                return .unknownSession
            }
            guard state.requests.insert(plan.requestID).inserted else { return .duplicate }
            let candidates =
                plan.allSessions ? state.sessions.filter { $0.value.userID == userID }.map(\.key) : [plan.sessionID]
            let revoked = candidates.filter { id in
                guard let session = state.sessions[id]?.session else { return false }
                return !state.revokedSessions.contains(id) && session.expiresAt > plan.now
            }.sorted { $0.uuidString < $1.uuidString }
            state.revokedSessions.formUnion(revoked)
            let events = try plan.events(userID, revoked)
            state.outbox += events.map { ($0, nil) }
            if let sealed = try plan.keep?(user, .logout(revoked: revoked)) { state.results[plan.requestID] = sealed }
            return .loggedOut(user, revoked: revoked, events: events)
        }
    }

    public func storedResult(requestID: String) async throws -> [UInt8]? {
        state.withLock { $0.results[requestID] }
    }

    public func purgeExpiredRequests(before date: Date) async throws -> Int { 0 }

    public func markPublished(_ eventIDs: [UUID], at date: Date) async throws {
        state.withLock { state in
            for index in state.outbox.indices where eventIDs.contains(state.outbox[index].event.id) {
                state.outbox[index].published = state.outbox[index].published ?? date
            }
        }
    }

    public func unpublishedEvents(olderThan date: Date, limit: Int) async throws -> [OutboxEvent] {
        state.withLock { state in
            Array(state.outbox.filter { $0.published == nil && $0.event.createdAt < date }.prefix(limit).map(\.event))
        }
    }

    /// Test inspection: identities as (provider, subject, user id, e-mail).
    public var identities: [(provider: String, subject: String, userID: UUID, email: String?)] {
        state.withLock { state in
            state.identities.values.map { ($0.identity.provider, $0.identity.subject, $0.userID, $0.identity.email) }
        }
    }

    /// Test setup: a full account with a password identity whose hash is `hash` (a legacy one, say).
    public func seedPasswordAccount(email: String, hash: String, at date: Date) -> UUID {
        state.withLock { state in
            let id = UUID()
            state.users[id] = StoredUser(
                id: id, handle: "seeded_\(state.users.count)", name: nil, email: email, emailVerified: false,
                isPrivateEmail: false, isGuest: false, providers: ["password"], createdAt: date)
            let identity = NewIdentity(
                provider: "password", subject: email, email: email, emailVerified: false, isPrivateEmail: false,
                passwordHash: hash)
            state.identities["password|\(email)"] = (identity, id)
            return id
        }
    }

    /// Test inspection: a password identity's stored hash.
    public func storedPasswordHash(email: String) -> String? {
        state.withLock { $0.identities["password|\(email)"]?.identity.passwordHash }
    }

    /// Test inspection: every user.
    public var users: [StoredUser] { state.withLock { Array($0.users.values) } }
    /// Test inspection: ids of ended sessions.
    public var revokedSessions: Set<UUID> { state.withLock { $0.revokedSessions } }
    /// Test inspection: every session.
    public var sessions: [NewSession] { state.withLock { $0.sessions.values.map(\.session) } }
    /// Test inspection: ids of events not yet published.
    public var unpublishedIDs: [UUID] { state.withLock { $0.outbox.filter { $0.published == nil }.map(\.event.id) } }
    /// Test inspection: every event written, oldest first.
    public var events: [OutboxEvent] { state.withLock { $0.outbox.map(\.event) } }
}

enum InMemoryStoreError: Error {
    case handlesTaken, identityExists
}
