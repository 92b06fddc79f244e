import AuthDomain
import Messages
import Synchronization

/// The flows of each tenant the worker serves: the default tenant's (the deployment's own
/// configuration) and those of the tenants file, by name. The tenants file's are replaced whole
/// when it is read again (SIGHUP); a request being prepared keeps the flows it was given.
public final class TenantFlows: Sendable {
    /// The default tenant's.
    public let main: LoginFlows
    private let others: Mutex<[String: LoginFlows]>

    public init(main: LoginFlows, others: [String: LoginFlows] = [:]) {
        self.main = main
        self.others = Mutex(others)
    }

    /// The flows of the tenant a request names (the default tenant's without one); nil for a
    /// tenant the worker does not serve.
    public func flows(for tenant: String?) -> LoginFlows? {
        guard let tenant, tenant != Tenant.defaultName else { return main }
        return others.withLock { $0[tenant] }
    }

    /// Whether a request of `tenant` must carry a reply key: its tenant's `AUTH_REQUIRE_REPLY_KEY`
    /// (the default tenant's is the deployment's, and so is that of a tenant not served, which is
    /// refused anyway).
    public func requiresReplyKey(_ tenant: String?) -> Bool {
        guard let tenant, tenant != Tenant.defaultName, let flows = flows(for: tenant) else {
            return main.configuration.sessions.requireReplyKey
        }
        return flows.configuration.sessions.requireReplyKey
    }

    /// The tenants served besides the default one, by name.
    public var names: [String] { others.withLock { $0.keys.sorted() } }

    /// Serves `flows` in place of the tenants served so far (the default tenant's stay).
    public func replace(with flows: [String: LoginFlows]) {
        others.withLock { $0 = flows }
    }

    /// The refusal of a request for a tenant not served.
    static func unknown(_ tenant: String) -> LoginError {
        LoginError(.unknownTenant, "this deployment serves no tenant \"\(tenant)\"", field: "tenant")
    }
}
