import Foundation
import ServiceKit

#if canImport(Glibc)
    import Glibc
#endif

/// The admin console (`auth-worker admin`): where it listens and how long its sign-ins last. Its
/// settings are declared and read here, by the console.
public struct ConsoleSettings: Sendable, Equatable {
    /// The IPv4 address it listens on. Default: 127.0.0.1.
    public var address = "127.0.0.1"
    /// Default: 8090.
    public var port: UInt16 = 8090
    /// Set when TLS ends in front of the console (an ingress, a proxy): required to listen on
    /// anything but loopback, since its cookies are `Secure`.
    public var behindTLS = false
    /// A sign-in unused this long ends. Default: 15 minutes.
    public var idleLifetime: TimeInterval = 15 * 60
    /// A sign-in ends this long after it began, used or not. Default: 8 hours.
    public var absoluteLifetime: TimeInterval = 8 * 3600

    public init() {}

    /// Whether the address is a loopback one (plain HTTP there is for development).
    public var isLoopback: Bool { address.hasPrefix("127.") }

    /// Every setting of the console, in the reference's order.
    public static let declared: [Setting] = [
        .consoleAddress, .consolePort, .consoleBehindTLS, .consoleIdleSeconds, .consoleAbsoluteSeconds,
    ]

    /// Reads the console's settings from environment variables (tests pass a dictionary).
    /// - Throws: `ConfigurationError` naming the first variable that does not parse.
    public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) throws
        -> ConsoleSettings
    {
        let reader = EnvironmentReader(environment: environment)
        var settings = ConsoleSettings()
        if let text = reader.string(.consoleAddress) {
            var address = in_addr()
            guard inet_pton(AF_INET, text, &address) == 1 else {
                throw ConfigurationError(variable: Setting.consoleAddress.name, reason: "must be an IPv4 address")
            }
            settings.address = text
        }
        if let text = reader.string(.consolePort) {
            guard let port = UInt16(text) else {
                throw ConfigurationError(variable: Setting.consolePort.name, reason: "must be a port number")
            }
            settings.port = port
        }
        if let value = try reader.bool(.consoleBehindTLS) { settings.behindTLS = value }
        if let value = try reader.seconds(.consoleIdleSeconds) {
            guard value >= 1, value <= 86400 else {
                throw ConfigurationError(
                    variable: Setting.consoleIdleSeconds.name, reason: "must be between 1 and 86400")
            }
            settings.idleLifetime = value
        }
        if let value = try reader.seconds(.consoleAbsoluteSeconds) {
            guard value >= 60, value <= 7 * 86400 else {
                throw ConfigurationError(
                    variable: Setting.consoleAbsoluteSeconds.name, reason: "must be between 60 and 604800")
            }
            settings.absoluteLifetime = value
        }
        return settings
    }
}

extension Setting {
    public static let consoleAddress = Setting(
        "AUTH_CONSOLE_ADDRESS", .console,
        "the IPv4 address `auth-worker admin` listens on",
        default: "`127.0.0.1`")
    public static let consolePort = Setting(
        "AUTH_CONSOLE_PORT", .console,
        "the admin console's port",
        default: "`8090`")
    public static let consoleBehindTLS = Setting(
        "AUTH_CONSOLE_BEHIND_TLS", .console,
        "TLS ends in front of the console (an ingress, a proxy): required to listen on anything but loopback, since its cookies are `Secure`",
        default: "`false`")
    public static let consoleIdleSeconds = Setting(
        "AUTH_CONSOLE_IDLE_SECONDS", .console,
        "a console sign-in unused this long ends (1–86400)",
        default: "`900`")
    public static let consoleAbsoluteSeconds = Setting(
        "AUTH_CONSOLE_ABSOLUTE_SECONDS", .console,
        "a console sign-in ends this long after it began, used or not (60–604800)",
        default: "`28800`")
}
