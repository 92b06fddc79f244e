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
