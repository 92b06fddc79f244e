import AdminConsole
import AuthClient
import AuthCrypto
import AuthDomain
import AuthStore
import AuthWorker
import Foundation
import JOSE
import Kafka
import Messages
import PGStore
import Passwords
import ServiceKit

#if canImport(Glibc)
    import Glibc
#endif

/// The operator's account chores: `users`, `admins`, `guests`.
extension CommandLineInterface {
    // MARK: - users delete, guests purge

    func deleteUser(_ argument: String, tenant: String) async throws -> Int32 {
        guard let id = UUID(uuidString: argument) else {
            throw UsageError(message: "usage: auth-worker users delete ID (a user id)")
        }
        let configuration = try configuration(needs: [.database])
        let store = operatorStore(configuration)
        guard
            let deletion = try await AccountDeletion.deleteUser(
                id, reason: "operator", store: store, configuration: configuration, clock: SystemClock(),
                tenant: tenant)
        else {
            errorOutput("auth-worker: no user \(argument)")
            return 1
        }
        await publishNow(store: store, configuration: configuration)
        output("deleted user \(id.lowercasedString); revoked \(deletion.sessionsRevoked) session(s)")
        return 0
    }

    // MARK: - users disable|enable, admins

    func setDisabled(_ argument: String, disabled: Bool, tenant: String) async throws -> Int32 {
        let configuration = try configuration(needs: [.database])
        let store = operatorStore(configuration)
        guard let id = try await store.userReport(argument, tenant: tenant)?.userID,
            let change = try await AccountAdministration.setDisabled(
                id, disabled: disabled, actor: "operator", store: store, configuration: configuration,
                clock: SystemClock(), tenant: tenant)
        else {
            errorOutput("auth-worker: no user \(argument)")
            return 1
        }
        await publishNow(store: store, configuration: configuration)
        let state = disabled ? "disabled" : "enabled"
        output(
            change.changed
                ? "\(state) user \(id.lowercasedString); ended \(change.sessionsEnded) session(s)"
                : "user \(id.lowercasedString) was \(state) already")
        return 0
    }

    func endSessions(_ positionals: [String], tenant: String, usage: String) async throws -> Int32 {
        let only = try Self.optionalID(positionals, usage: usage)
        return try await onUser(positionals[0], tenant: tenant) { id, store, configuration in
            try await AccountAdministration.endSessions(
                id, only: only, actor: "operator", store: store, configuration: configuration, clock: SystemClock(),
                tenant: tenant)
        } done: { id, ended in
            "ended \(ended) session(s) of user \(id.lowercasedString)"
        }
    }

    func removeFactor(_ argument: String, tenant: String) async throws -> Int32 {
        try await onUser(argument, tenant: tenant) { id, store, configuration in
            try await AccountAdministration.removeFactor(
                id, actor: "operator", store: store, configuration: configuration, clock: SystemClock(),
                tenant: tenant)
        } done: { id, removed in
            removed
                ? "removed the second factor of user \(id.lowercasedString)"
                : "user \(id.lowercasedString) has no second factor"
        }
    }

    func removePasskeys(_ positionals: [String], tenant: String, usage: String) async throws -> Int32 {
        let only = try Self.optionalID(positionals, usage: usage)
        return try await onUser(positionals[0], tenant: tenant) { id, store, configuration in
            try await AccountAdministration.removePasskeys(
                id, only: only, actor: "operator", store: store, configuration: configuration, clock: SystemClock(),
                tenant: tenant)
        } done: { id, removed in
            "removed \(removed) passkey(s) of user \(id.lowercasedString)"
        }
    }

    /// An operator's chore on one of `tenant`'s users (by id or address): `act` in its own
    /// transaction (nil: no such user), the events it caused published at once, and `done`'s line
    /// printed.
    private func onUser<Outcome>(
        _ argument: String, tenant: String,
        _ act: (UUID, PostgresStore, WorkerConfiguration) async throws -> Outcome?,
        done: (UUID, Outcome) -> String
    ) async throws -> Int32 {
        let configuration = try configuration(needs: [.database])
        let store = operatorStore(configuration)
        guard let id = try await store.userReport(argument, tenant: tenant)?.userID,
            let outcome = try await act(id, store, configuration)
        else {
            errorOutput("auth-worker: no user \(argument)")
            return 1
        }
        await publishNow(store: store, configuration: configuration)
        output(done(id, outcome))
        return 0
    }

    /// The second positional, an id (a session's, a passkey's), when given.
    private static func optionalID(_ positionals: [String], usage: String) throws -> UUID? {
        guard positionals.count > 1 else { return nil }
        guard let id = UUID(uuidString: positionals[1]) else { throw UsageError(message: usage) }
        return id
    }

    func grantAdmin(_ arguments: Arguments, usage: String) async throws -> Int32 {
        guard let role = arguments.values["--role"].flatMap(AccountAdministration.Role.init(rawValue:)) else {
            throw UsageError(message: usage)
        }
        // An operator serves every tenant: naming one is a mistake, not a narrower grant.
        if role.isAcrossTenants && arguments.values["--tenant"] != nil {
            throw UsageError(message: "an operator serves every tenant: grant it without --tenant; \(usage)")
        }
        let tenant = try Self.tenant(arguments, usage: usage)
        let store = operatorStore(try configuration(needs: [.database]))
        let email = arguments.positionals[0]
        switch try await store.grantAdminRole(email: email, role: role, tenant: tenant, by: "operator", at: Date()) {
        case .granted(let id):
            let serves =
                role.isAcrossTenants
                ? "for every tenant's users" : "for the users of tenant \(tenant)"
            output("\(email) (user \(id.lowercasedString)) may use the admin console as \(role.rawValue) \(serves)")
            return 0
        case .noPasswordAccount:
            errorOutput(
                "auth-worker: no account signs in with a password at \(email): the console's sign-in is the password and a second factor"
            )
            return 1
        case .addressNotVerified:
            errorOutput(
                "auth-worker: \(email) was never verified: its owner proves the mailbox first (verify_email, or a code sign-in), then grant again"
            )
            return 1
        }
    }

    func revokeAdmin(_ email: String) async throws -> Int32 {
        let store = operatorStore(try configuration(needs: [.database]))
        guard try await store.revokeAdminRole(email: email, by: "operator", at: Date()) else {
            errorOutput("auth-worker: \(email) has no console role")
            return 1
        }
        output("\(email) may no longer use the admin console")
        return 0
    }

    func listAdmins() async throws -> Int32 {
        let store = operatorStore(try configuration(needs: [.database]))
        for grant in try await store.adminGrants() {
            let line = AdminLine(
                email: grant.email, role: grant.role, tenant: grant.tenant, userID: grant.userID.lowercasedString,
                grantedAt: Timestamp.format(grant.grantedAt), grantedBy: grant.grantedBy,
                emailVerified: grant.emailVerified)
            output(String(decoding: try MessageCoding.encodeDocument(line), as: UTF8.self))
        }
        return 0
    }

    func purgeGuests(_ arguments: Arguments, usage: String) async throws -> Int32 {
        guard let text = arguments.values["--older-than"], let age = Self.duration(text) else {
            throw UsageError(message: usage + " (DURATION: 30d, 12h, 90m)")
        }
        let configuration = try configuration(needs: [.database])
        let store = operatorStore(configuration)
        let cutoff = Date() - age
        let deletion = try await AccountDeletion.purgeGuests(
            createdBefore: cutoff, store: store, configuration: configuration, clock: SystemClock(),
            tenant: try Self.tenant(arguments, usage: usage))
        await publishNow(store: store, configuration: configuration)
        output("purged \(deletion.users) guest(s) created before \(Timestamp.format(cutoff))")
        return 0
    }

    /// Publishes the events the command wrote to the outbox; if the broker is unreachable, the
    /// running worker's outbox relay publishes them later.
    func publishNow(store: PostgresStore, configuration: WorkerConfiguration) async {
        let logger = Logger(label: "auth-worker", level: .error, handler: JSONLinesLogHandler.standardError)
        do {
            var producerConfiguration = try kafka().producerConfiguration
            producerConfiguration.deliveryTimeout = .seconds(10)
            let producer = try KafkaProducer(configuration: producerConfiguration, logger: logger)
            let relay = OutboxRelay(
                store: store, producer: producer, clock: SystemClock(), logger: logger, grace: -60,
                eventMode: configuration.eventsContentMode)
            do {
                while try await relay.publishPending() > 0 {}
            } catch {
                await producer.shutdown(timeout: .seconds(5))
                throw error
            }
            await producer.shutdown(timeout: .seconds(5))
        } catch {
            errorOutput("auth-worker: events stay in the outbox for the worker to publish (\(error))")
        }
    }

    /// Parses `30d`, `12h`, `90m`, `3600s` (or plain seconds).
    static func duration(_ text: String) -> TimeInterval? {
        let units: [Character: TimeInterval] = ["s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604_800]
        guard let last = text.last else { return nil }
        if let unit = units[last], let value = Double(text.dropLast()), value > 0 { return value * unit }
        if let value = Double(text), value > 0 { return value }
        return nil
    }

    // MARK: - users show

    func showAudit(_ arguments: Arguments, usage: String) async throws -> Int32 {
        var since: Date?
        if let text = arguments.values["--since"] {
            guard let age = Self.duration(text) else { throw UsageError(message: usage + " (DURATION: 30d, 12h, 90m)") }
            since = Date() - age
        }
        let configuration = try configuration(needs: [.database])
        let store = operatorStore(configuration)
        let argument = arguments.positionals[0]
        let tenant = try Self.tenant(arguments, usage: usage)
        // An id is looked up as it is: the trail outlives a deleted account.
        var id = UUID(uuidString: argument)
        if id == nil { id = try await store.userReport(argument, tenant: tenant)?.userID }
        guard let id else {
            errorOutput("auth-worker: no user \(argument)")
            return 1
        }
        for entry in try await store.auditTrail(userID: id, since: since, tenant: tenant) {
            let line = AuditLine(
                at: Timestamp.format(entry.at), action: entry.action, outcome: entry.outcome, actor: entry.actor,
                requestId: entry.requestID, clientId: entry.clientID, deviceName: entry.deviceName,
                devicePlatform: entry.devicePlatform, ip: entry.ip, userAgent: entry.userAgent)
            output(String(decoding: try MessageCoding.encodeDocument(line), as: UTF8.self))
        }
        return 0
    }

    /// One line of `users audit`.
    struct AuditLine: Codable {
        var at: String
        var action: String
        var outcome: String
        var actor: String
        var requestId: String?
        var clientId: String?
        var deviceName: String?
        var devicePlatform: String?
        var ip: String?
        var userAgent: String?

        enum CodingKeys: String, CodingKey {
            case at, action, outcome, actor, ip
            case requestId = "request_id"
            case clientId = "client_id"
            case deviceName = "device_name"
            case devicePlatform = "device_platform"
            case userAgent = "user_agent"
        }
    }

    func showUser(_ argument: String, tenant: String) async throws -> Int32 {
        let configuration = try configuration(needs: [.database])
        let store = operatorStore(configuration)
        guard let report = try await store.userReport(argument, tenant: tenant) else {
            errorOutput("auth-worker: no user \(argument)")
            return 1
        }
        output(String(decoding: try MessageCoding.encodeDocument(report), as: UTF8.self))
        return 0
    }
}

/// A line of `auth-worker admins list`.
private struct AdminLine: Encodable {
    var email: String
    var role: String
    /// The tenant whose users the role serves; absent for an operator (every tenant's).
    var tenant: String?
    var userID: String
    var grantedAt: String
    var grantedBy: String
    /// A role on an unproven address opens no console session.
    var emailVerified: Bool

    enum CodingKeys: String, CodingKey {
        case email, role, tenant
        case userID = "user_id"
        case grantedAt = "granted_at"
        case grantedBy = "granted_by"
        case emailVerified = "email_verified"
    }
}
