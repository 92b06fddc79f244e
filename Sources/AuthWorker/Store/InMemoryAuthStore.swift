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
        var sessions: [UUID: NewSession] = [:]
        var outbox: [(event: OutboxEvent, published: Date?)] = []
    }

    private let state = Mutex(State())

    public init() {}

    public func createAccount(_ plan: NewAccount) async throws -> AccountWrite {
        try state.withLock { state in
            guard !state.requests.contains(plan.requestID) else { return .duplicate }
            guard let handle = plan.handleCandidates.first(where: { !state.handles.contains($0) }) else {
                throw InMemoryStoreError.handlesTaken
            }
            if let identity = plan.identity, state.identities["\(identity.provider)|\(identity.subject)"] != nil {
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
            if let identity = plan.identity {
                state.identities["\(identity.provider)|\(identity.subject)"] = (identity, user.id)
            }
            state.sessions[plan.session.id] = plan.session
            state.outbox += events.map { ($0, nil) }
            return .created(user, events: events)
        }
    }

    public func signIn(_ plan: ProviderSignIn) async throws -> SignInWrite {
        try state.withLock { state in
            guard !state.requests.contains(plan.requestID) else { return .duplicate }
            let key = "\(plan.identity.provider)|\(plan.identity.subject)"
            if let (stored, userID) = state.identities[key], var user = state.users[userID] {
                var identity = stored
                if let email = plan.identity.email {
                    identity.email = email
                    identity.emailVerified = plan.identity.emailVerified
                    identity.isPrivateEmail = plan.identity.isPrivateEmail
                }
                state.identities[key] = (identity, userID)
                user.name = user.name ?? plan.name
                if user.email == nil, let email = plan.identity.email {
                    user.email = email
                    user.emailVerified = plan.identity.emailVerified
                    user.isPrivateEmail = plan.identity.isPrivateEmail
                }
                state.users[userID] = user
                state.requests.insert(plan.requestID)
                let token = try plan.issueAccessToken(userID)
                var session = plan.session
                session.accessTokenHash = SHA256.hash(token)
                state.sessions[plan.session.id] = session
                return .signedIn(user, created: false, events: [], accessToken: token)
            }
            guard let handle = plan.handleCandidates.first(where: { !state.handles.contains($0) }) else {
                throw InMemoryStoreError.handlesTaken
            }
            let user = StoredUser(
                id: plan.newUser.id, handle: handle, name: plan.newUser.name, email: plan.newUser.email,
                emailVerified: plan.newUser.emailVerified, isPrivateEmail: plan.newUser.isPrivateEmail,
                isGuest: plan.newUser.isGuest, providers: [plan.identity.provider], createdAt: plan.newUser.createdAt)
            let events = try plan.eventsForNewUser(user)
            state.requests.insert(plan.requestID)
            state.handles.insert(handle)
            state.users[user.id] = user
            state.identities[key] = (plan.identity, user.id)
            let token = try plan.issueAccessToken(user.id)
            var session = plan.session
            session.accessTokenHash = SHA256.hash(token)
            state.sessions[plan.session.id] = session
            state.outbox += events.map { ($0, nil) }
            return .signedIn(user, created: true, events: events, accessToken: token)
        }
    }

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

    /// Test inspection: every user.
    public var users: [StoredUser] { state.withLock { Array($0.users.values) } }
    /// Test inspection: every session.
    public var sessions: [NewSession] { state.withLock { Array($0.sessions.values) } }
    /// Test inspection: ids of events not yet published.
    public var unpublishedIDs: [UUID] { state.withLock { $0.outbox.filter { $0.published == nil }.map(\.event.id) } }
}

enum InMemoryStoreError: Error {
    case handlesTaken, identityExists
}
