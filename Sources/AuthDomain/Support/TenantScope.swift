import Messages

/// How the store keeps tenants apart where a row has no `tenant` column of its own: the keys of
/// rate-limit windows and password throttles, which flows name without a tenant.
public enum TenantScope {
    /// The default tenant's name (`Tenant.defaultName`), for modules that see no messages.
    public static let defaultName = Tenant.defaultName

    /// `key` as the tenant's: unchanged for the default tenant (so the keys written before
    /// tenants keep counting), `@<tenant>/<key>` for another. No key a flow names starts with `@`.
    public static func scoped(_ key: String, in tenant: String) -> String {
        tenant == defaultName ? key : "@" + tenant + "/" + key
    }

    /// `name` with its tenant, for what people read (an audit outcome, a log line): unchanged for
    /// the default tenant, `<name>@<tenant>` for another.
    public static func named(_ name: String, in tenant: String) -> String {
        tenant == defaultName ? name : name + "@" + tenant
    }
}
