import AuthDomain
import Foundation

/// The operator's account chores (`auth-worker users delete`, `guests purge`), each in a
/// transaction of its own through the same unit of work the flows use.
extension AccountDeletion {
    /// Deletes one user (`auth-worker users delete`, reason `operator`; the console, reason `admin`
    /// with the console user as `actor`).
    /// - Returns: nil when there is no such user.
    public static func deleteUser(
        _ id: UUID, reason: String, actor: String? = nil, store: PostgresStore, configuration: WorkerConfiguration,
        clock: any WorkerClock, tenant: String = TenantScope.defaultName
    ) async throws -> Summary? {
        let events = EventFactory.operator(configuration, clock, tenant: tenant)
        return try await store.transaction(tenant: tenant) { unit in
            guard try unit.user(id: id) != nil else { return nil }
            return try delete([id], reason: reason, revokeSessions: true, actor: actor, unit: unit, events: events)
        }
    }

    /// Deletes guests created before `cutoff` that never became members, in batches
    /// (`auth-worker guests purge`); each is announced with reason `guest_expired`.
    public static func purgeGuests(
        createdBefore cutoff: Date, batchSize: Int = 500, store: PostgresStore, configuration: WorkerConfiguration,
        clock: any WorkerClock, tenant: String = TenantScope.defaultName
    ) async throws -> Summary {
        var total = Summary()
        while true {
            let ids = try await store.staleGuests(createdBefore: cutoff, limit: batchSize, tenant: tenant)
            guard !ids.isEmpty else { return total }
            let events = EventFactory.operator(configuration, clock, tenant: tenant)
            let summary = try await store.transaction(tenant: tenant) { unit in
                // Only those still guests without an identity now, inside the transaction.
                let still = try ids.filter { id in
                    guard let user = try unit.user(id: id) else { return false }
                    return user.isGuest && user.providers.isEmpty
                }
                return try delete(still, reason: "guest_expired", revokeSessions: false, unit: unit, events: events)
            }
            total.users += summary.users
            total.events += summary.events
            if ids.count < batchSize { return total }
        }
    }
}

extension AccountAdministration {
    /// Disables or enables one user (`auth-worker users disable|enable`).
    /// - Returns: nil when there is no such user.
    public static func setDisabled(
        _ id: UUID, disabled: Bool, actor: String, store: PostgresStore, configuration: WorkerConfiguration,
        clock: any WorkerClock, tenant: String = TenantScope.defaultName
    ) async throws -> Change? {
        let events = EventFactory.operator(configuration, clock, tenant: tenant)
        return try await store.transaction(tenant: tenant) { unit in
            try setDisabled(id, disabled: disabled, actor: actor, unit: unit, events: events)
        }
    }
}

extension AccountAdministration {
    /// Ends one session of a user's, or all of them (the console; `auth-worker users end-sessions`).
    /// - Returns: how many ended; nil when there is no such user.
    public static func endSessions(
        _ id: UUID, only: UUID?, actor: String, reason: String = "admin", store: PostgresStore,
        configuration: WorkerConfiguration, clock: any WorkerClock, tenant: String = TenantScope.defaultName
    ) async throws -> Int? {
        let events = EventFactory.operator(configuration, clock, tenant: tenant)
        return try await store.transaction(tenant: tenant) { unit in
            try endSessions(id, only: only, actor: actor, reason: reason, unit: unit, events: events)
        }
    }

    /// Removes a user's second factor (the console; `auth-worker users remove-factor`).
    /// - Returns: whether there was one; nil when there is no such user.
    public static func removeFactor(
        _ id: UUID, actor: String, store: PostgresStore, configuration: WorkerConfiguration, clock: any WorkerClock,
        tenant: String = TenantScope.defaultName
    ) async throws -> Bool? {
        let events = EventFactory.operator(configuration, clock, tenant: tenant)
        return try await store.transaction(tenant: tenant) { unit in
            try removeFactor(id, actor: actor, unit: unit, events: events)
        }
    }

    /// Removes one of a user's passkeys, or all (the console; `auth-worker users remove-passkeys`).
    /// - Returns: how many were removed; nil when there is no such user.
    public static func removePasskeys(
        _ id: UUID, only: UUID?, actor: String, store: PostgresStore, configuration: WorkerConfiguration,
        clock: any WorkerClock, tenant: String = TenantScope.defaultName
    ) async throws -> Int? {
        let events = EventFactory.operator(configuration, clock, tenant: tenant)
        return try await store.transaction(tenant: tenant) { unit in
            try removePasskeys(id, only: only, actor: actor, unit: unit, events: events)
        }
    }

    /// Resends a user's verification code with `tenant`'s flows (its codes' settings and mail
    /// keys). - Returns: whether one was sent; nil when there is no such user.
    /// - Throws: `LoginError` (no address, codes not enabled, the account's limit reached).
    public static func resendVerification(
        _ id: UUID, actor: String, flows: LoginFlows, store: PostgresStore, tenant: String = TenantScope.defaultName
    ) async throws -> Bool? {
        let resend = try flows.verificationResend(userID: id, actor: actor, tenant: tenant)
        return try await store.transaction(tenant: tenant) { unit in try resend.write(unit) }
    }
}
