import Foundation

/// An environment variable the service reads, declared once, by the module that uses it (the
/// domain's in AuthDomain, the Kafka client's in AuthWorker, the console's in AdminConsole): the
/// reader takes it by this declaration (`EnvironmentReader`), errors name it by it, and
/// `auth-worker config reference` prints the configuration reference of `docs/operations.md` from
/// the modules' lists (`scripts/check-docs.py` checks the two are the same, and that every `AUTH_*`
/// name in the code is declared once).
public struct Setting: Sendable, Hashable {
    /// The variable's name, `AUTH_…`.
    public let name: String
    /// Where the reference lists it.
    public let section: Section
    /// What it sets, in the reference's words (Markdown).
    public let meaning: String
    /// Its default, as the reference shows it (Markdown).
    public let defaultValue: String

    public init(_ name: String, _ section: Section, _ meaning: String, default defaultValue: String) {
        self.name = name
        self.section = section
        self.meaning = meaning
        self.defaultValue = defaultValue
    }

    /// The reference's sections, in order.
    public enum Section: String, CaseIterable, Sendable {
        case kafka = "Kafka"
        case database = "PostgreSQL"
        case tokens = "Tokens and keys"
        case sessions = "Sessions"
        case providers = "Identity providers"
        case accounts = "Accounts and passwords"
        case emailCodes = "E-mail codes"
        case phoneCodes = "Phone codes"
        case secondFactor = "Second factor"
        case passkeys = "Passkeys"
        case console = "Admin console"
        case processing = "Processing"
        case operations = "Health, logs and the build"
    }
}

/// Typed access to environment variables; empty values count as unset.
/// Reads settings by their declarations (`Setting`): no variable is read by a name spelt here.
public struct EnvironmentReader: Sendable {
    public let environment: [String: String]

    public init(environment: [String: String]) {
        self.environment = environment
    }

    public func string(_ setting: Setting) -> String? {
        guard let value = environment[setting.name]?.trimmingCharacters(in: .whitespaces), !value.isEmpty else {
            return nil
        }
        return value
    }

    public func list(_ setting: Setting) -> [String]? {
        string(setting).map {
            $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
    }

    public func integer(_ setting: Setting) throws -> Int? {
        guard let text = string(setting) else { return nil }
        guard let value = Int(text), value >= 0 else {
            throw ConfigurationError(variable: setting.name, reason: "must be a non-negative whole number")
        }
        return value
    }

    public func seconds(_ setting: Setting) throws -> TimeInterval? {
        try integer(setting).map(TimeInterval.init)
    }

    public func bool(_ setting: Setting) throws -> Bool? {
        guard let text = string(setting)?.lowercased() else { return nil }
        switch text {
        case "true", "1", "yes": return true
        case "false", "0", "no": return false
        default: throw ConfigurationError(variable: setting.name, reason: "must be true or false")
        }
    }
}

/// A setting that is missing or cannot work; says which environment variable.
public struct ConfigurationError: Error, CustomStringConvertible, Equatable {
    public var variable: String
    public var reason: String

    public init(variable: String, reason: String) {
        self.variable = variable
        self.reason = reason
    }

    public var description: String { "\(variable) \(reason)" }

    /// Equal by variable: the reason's wording may change.
    public static func == (lhs: ConfigurationError, rhs: ConfigurationError) -> Bool { lhs.variable == rhs.variable }
}
