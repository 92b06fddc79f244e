import Foundation
import Messages
import ServiceKit
import StrictJSON

/// The tenants a deployment serves besides the default one, from a JSON file:
///
/// ```json
/// {"tenants": {"acme": {"AUTH_APPLE_AUDIENCES": "com.acme.app", "AUTH_TOKEN_ISSUER": "https://auth.acme.example"}}}
/// ```
///
/// Each tenant is named as requests name it (`Tenant.isValidName`) and sets, by the variables'
/// own names and in their own syntax, the settings that are a tenant's (`perTenant`): its
/// providers and audiences, token issuer, audience and keys, WebAuthn relying party, policies,
/// lifetimes and the mail and SMS keys. What it does not set is the deployment's. Settings of the
/// deployment as a whole (Kafka, PostgreSQL, processing, health) are refused in a tenant.
///
/// Every mistake is reported, each on a line of its own naming the tenant and the variable.
public struct TenantsFile: Sendable, Equatable {
    /// Each tenant's settings, by variable name.
    public var tenants: [String: [String: String]]

    public init(tenants: [String: [String: String]]) {
        self.tenants = tenants
    }

    /// The mistakes of a file, one line each.
    public struct Mistakes: Error, CustomStringConvertible, Equatable {
        public var lines: [String]
        public var description: String { lines.joined(separator: "\n") }
    }

    /// Reads a file's bytes; throws `Mistakes` naming every entry that is not a tenant's setting.
    public static func parse(_ bytes: [UInt8]) throws(Mistakes) -> TenantsFile {
        let document: [String: JSONValue]
        do {
            document = try JSONReader.object(bytes)
        } catch {
            throw Mistakes(lines: ["the tenants file is not a JSON object: \(error)"])
        }
        var lines: [String] = []
        for key in document.keys.sorted() where key != "tenants" {
            lines.append("the tenants file has \"\(key.prefix(64))\": only \"tenants\" is read")
        }
        guard case .object(let entries)? = document["tenants"] else {
            throw Mistakes(lines: lines + ["the tenants file needs \"tenants\": an object of tenants by name"])
        }
        var tenants: [String: [String: String]] = [:]
        for name in entries.keys.sorted() {
            guard Tenant.isValidName(name) else {
                lines.append("tenant \"\(name.prefix(64))\": a name is 1 to 32 of a-z, 0-9 and -")
                continue
            }
            guard name != Tenant.defaultName else {
                lines.append("tenant default: the default tenant is the deployment's own settings; name another")
                continue
            }
            guard case .object(let members)? = entries[name] else {
                lines.append("tenant \(name): must be an object of settings by variable name")
                continue
            }
            var settings: [String: String] = [:]
            for variable in members.keys.sorted() {
                guard let setting = Self.declared[variable] else {
                    lines.append("tenant \(name): \(variable.prefix(64)) is not a setting")
                    continue
                }
                guard Self.perTenant.contains(setting.name) else {
                    lines.append(
                        "tenant \(name): \(variable) is the deployment's, not a tenant's (\(setting.section.rawValue))")
                    continue
                }
                switch members[variable] {
                case .string(let value): settings[variable] = value
                case .number(let value) where value == value.rounded() && abs(value) < 1e15:
                    settings[variable] = String(Int64(value))
                case .bool(let value): settings[variable] = value ? "true" : "false"
                default: lines.append("tenant \(name): \(variable) must be a string, a whole number or true/false")
                }
            }
            tenants[name] = settings
        }
        guard lines.isEmpty else { throw Mistakes(lines: lines) }
        return TenantsFile(tenants: tenants)
    }

    /// Reads and checks the file at `path` and makes each tenant's configuration from the
    /// deployment's `environment` (`configurations`).
    /// - Throws: `ConfigurationError` for `AUTH_TENANTS_FILE`, its reason every mistake, a line each.
    public static func configurations(path: String, environment: [String: String]) throws(ConfigurationError)
        -> [String: WorkerConfiguration]
    {
        let variable = Setting.tenantsFile.name
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError(variable: variable, reason: "cannot read \(path)")
        }
        do {
            return try parse(Array(data)).configurations(environment: environment)
        } catch {
            throw ConfigurationError(variable: variable, reason: "(\(path)):\n" + error.description)
        }
    }

    /// Each tenant's configuration: the deployment's `environment` with the tenant's settings in
    /// place of its own, read and checked as the deployment's is. Throws `Mistakes` with the
    /// first mistake of each tenant whose settings do not make a configuration.
    public func configurations(environment: [String: String]) throws(Mistakes) -> [String: WorkerConfiguration] {
        var configurations: [String: WorkerConfiguration] = [:]
        var lines: [String] = []
        for (name, settings) in tenants.sorted(by: { $0.key < $1.key }) {
            do {
                configurations[name] = try WorkerConfiguration.fromEnvironment(
                    environment.merging(settings) { _, tenant in tenant }.filter {
                        !Self.defaultTenantOnly.contains($0.key)
                    })
            } catch {
                lines.append("tenant \(name): \(error)")
            }
        }
        guard lines.isEmpty else { throw Mistakes(lines: lines) }
        return configurations
    }

    /// Settings a tenant neither sets nor inherits: its configuration goes without them.
    public static let defaultTenantOnly: Set<String> = Set(
        [Setting.appleTeamID, .appleKeyID, .applePrivateKeyFile].map(\.name))

    /// The domain's settings by name.
    static let declared: [String: Setting] = Dictionary(
        Setting.domain.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })

    /// The settings a tenant may set: what its apps and users see and the policies they are held
    /// to. The rest (topics, the database, batching, the key-set cache, password hashing, the
    /// purge) is one for the deployment, and so is the guests' global ceiling (it guards the
    /// database every tenant shares; each tenant has its own per-client guest limit). Sign in with
    /// Apple's token exchange is the default tenant's alone for now (`defaultTenantOnly`).
    ///
    /// Sign in with Apple's token exchange and revocation (`AUTH_APPLE_TEAM_ID`, …) serve the
    /// default tenant only: `apple_tokens` keeps one token a subject until the release after
    /// migration 26, and one Apple team's apps share their users' subjects.
    public static let perTenant: Set<String> = Set(
        [
            Setting.accessTokenFormat, .signingKeys, .signingKeysNext, .jwksUri, .tokenIssuer, .tokenAudience,
            .accessTokenTTLSeconds, .refreshTokenTTLSeconds, .sessionTTLSeconds, .guestAbilities, .requireReplyKey,
            .refreshReuseGraceSeconds, .reauthMaxAgeSeconds, .appleAudiences, .googleAudiences, .googleHostedDomains,
            .oidcProviders, .linkByVerifiedEmail, .loginMaxFailures,
            .loginLockSeconds, .loginLockMaxSeconds, .guestRateLimit, .registerRateLimit,
            .registerGlobalRateLimit, .passwordContextWords, .passwordChangeEndsSessions, .requireVerifiedEmail,
            .mailKey, .emailCodeTTLSeconds, .emailCodeMaxAttempts, .emailCodeRateLimit, .passwordResetRateLimit,
            .emailCodeSignup, .smsKey, .phoneCodeTTLSeconds, .phoneCodeMaxAttempts, .phoneCodeSignup, .smsCountries,
            .smsNumberRateLimit, .smsPrefixRateLimit, .smsCountryRateLimit, .smsClientRateLimit, .smsIPRateLimit,
            .smsDailyBudget, .mfaIssuer, .mfaTokenTTLSeconds, .mfaRateLimit, .webauthnRPID, .webauthnRPName,
            .webauthnOrigins, .webauthnUserVerification, .webauthnChallengeTTLSeconds, .webauthnAttestation,
            .webauthnOptionsRateLimit, .webauthnOptionsGlobalRateLimit,
        ].map(\.name))
}
