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

/// The `auth-worker` command: parses arguments, runs one command, returns the exit status.
///
/// Every command prints a usage line for `--help` and a one-line reason on error, with a non-zero
/// exit status. Configuration comes from the environment (docs/operations.md), never from arguments.
public struct CommandLineInterface: Sendable {
    /// One command: its words, what it takes, and what it does.
    struct Command: Sendable {
        /// `["keys", "generate"]`.
        let words: [String]
        /// What follows the words in the usage line.
        let arguments: String
        let summary: String
        /// Options that take a value (`--alg ES256`).
        var options: [String] = []
        /// Options that stand alone (`--status`); at most one of them.
        var flags: [String] = []
        /// How many positional arguments.
        var positionals: ClosedRange<Int> = 0...0

        var usage: String {
            "usage: auth-worker " + (words + [arguments]).filter { !$0.isEmpty }.joined(separator: " ")
        }
    }

    static let commands: [Command] = [
        Command(words: ["run"], arguments: "", summary: "consume and answer login requests until SIGTERM"),
        Command(
            words: ["admin"], arguments: "",
            summary:
                "serve the admin console (pages and JSON API) on AUTH_CONSOLE_ADDRESS:AUTH_CONSOLE_PORT until SIGTERM"),
        Command(
            words: ["migrate"], arguments: "[--status | --dry-run]",
            summary: "bring the database schema up to date, then exit; with an option, only say what would be applied",
            flags: ["--status", "--dry-run"]),
        Command(
            words: ["config", "check"], arguments: "",
            summary:
                "check the whole AUTH_* environment (keys, providers file, limits) without connecting to anything"),
        Command(
            words: ["config", "reference"], arguments: "",
            summary: "print every AUTH_* variable with its meaning and default, as Markdown (docs/operations.md)"),
        Command(
            words: ["version"], arguments: "", summary: "print the version, the commit and the C libraries' versions"),
        Command(
            words: ["probe"], arguments: "[livez | readyz]",
            summary: "ask this machine's health endpoint (a container HEALTHCHECK); exit 0 when it answers 200",
            positionals: 0...1),
        Command(
            words: ["keys", "generate"], arguments: "FILE [--alg ES256|EdDSA|X25519]",
            summary: "make a signing key, or with X25519 a credential key (PEM, mode 0600, never overwritten)",
            options: ["--alg"], positionals: 1...1),
        Command(
            words: ["keys", "jwks"], arguments: "[--tenant NAME]",
            summary:
                "print the public JWK Set of AUTH_SIGNING_KEYS and AUTH_CREDENTIAL_KEYS (a tenant's with --tenant)",
            options: ["--tenant"]),
        Command(
            words: ["request", "guest"],
            arguments: "[--device NAME] [--platform P] [--timeout SECONDS] [--tenant NAME]",
            summary: "publish a guest login and print its result",
            options: ["--device", "--platform", "--timeout", "--tenant"]),
        Command(
            words: ["topics", "create"], arguments: "[--partitions N]",
            summary:
                "create the AUTH_TOPIC_* topics that do not exist yet (default 4 partitions, the cluster's replication)",
            options: ["--partitions"]),
        Command(
            words: ["users", "show"], arguments: "ID_OR_EMAIL [--tenant NAME]",
            summary: "print a user, its identities and sessions (no secrets)", options: ["--tenant"], positionals: 1...1
        ),
        Command(
            words: ["users", "audit"], arguments: "ID_OR_EMAIL [--since DURATION] [--tenant NAME]",
            summary: "print a user's audit trail, one JSON line a row, oldest first (--since 30d: only newer)",
            options: ["--tenant", "--since"], positionals: 1...1),
        Command(
            words: ["users", "delete"], arguments: "ID [--tenant NAME]",
            summary: "delete a user and its sessions; emits auth.user.deleted", options: ["--tenant"],
            positionals: 1...1),
        Command(
            words: ["users", "disable"], arguments: "ID_OR_EMAIL [--tenant NAME]",
            summary: "disable a user: its sessions end, its sign-ins and refreshes answer account_disabled",
            options: ["--tenant"], positionals: 1...1),
        Command(
            words: ["users", "enable"], arguments: "ID_OR_EMAIL [--tenant NAME]",
            summary: "enable a disabled user again",
            options: ["--tenant"], positionals: 1...1),
        Command(
            words: ["users", "end-sessions"], arguments: "ID_OR_EMAIL [SESSION_ID] [--tenant NAME]",
            summary: "end one session of a user's, or all of them; emits auth.session.revoked (reason admin)",
            options: ["--tenant"], positionals: 1...2),
        Command(
            words: ["users", "remove-factor"], arguments: "ID_OR_EMAIL [--tenant NAME]",
            summary: "remove a user's second factor (a lost phone); emits auth.mfa.disabled", options: ["--tenant"],
            positionals: 1...1),
        Command(
            words: ["users", "remove-passkeys"], arguments: "ID_OR_EMAIL [PASSKEY_ID] [--tenant NAME]",
            summary: "remove one of a user's passkeys, or all; emits auth.passkey.removed (reason admin)",
            options: ["--tenant"], positionals: 1...2),
        Command(
            words: ["admins", "grant"], arguments: "EMAIL --role support|admin [--tenant NAME] | --role operator",
            summary:
                "let a password account use the admin console: for one tenant's users as support (read, end sessions) or admin (all), for every tenant's as operator",
            options: ["--role", "--tenant"], positionals: 1...1),
        Command(
            words: ["admins", "revoke"], arguments: "EMAIL", summary: "take an account's console role away",
            positionals: 1...1),
        Command(words: ["admins", "list"], arguments: "", summary: "print the console's users, one JSON line each"),
        Command(
            words: ["guests", "purge"], arguments: "--older-than DURATION [--tenant NAME]",
            summary: "delete guests older than DURATION (30d, 12h) that never signed up",
            options: ["--tenant", "--older-than"]),
        Command(
            words: ["token", "verify"],
            arguments: "--provider NAME [--keys FILE] [--at UNIX_TIME] [--nonce RAW] [--tenant NAME] TOKEN",
            summary:
                "verify a provider token as a login would (at a tenant with --tenant); print its header and claims, or the error code and why",
            options: ["--provider", "--keys", "--at", "--nonce", "--tenant"], positionals: 1...1),
    ]

    /// The overview `--help` prints.
    public static var usage: String {
        let width = 34
        var lines = ["usage: auth-worker <command> [options]", "", "commands:"]
        for command in commands {
            let head = "  " + (command.words + [command.arguments]).filter { !$0.isEmpty }.joined(separator: " ")
            if head.count < width {
                lines.append(head.padding(toLength: width, withPad: " ", startingAt: 0) + command.summary)
            } else {
                lines.append(head)
                lines.append(String(repeating: " ", count: width) + command.summary)
            }
        }
        lines += [
            "",
            "Every command takes --help. Configuration is read from AUTH_* environment variables: auth-worker config reference lists them.",
        ]
        return lines.joined(separator: "\n")
    }

    /// A command's arguments, parsed against its `Command`.
    struct Arguments {
        var values: [String: String] = [:]
        var flag: String?
        var positionals: [String] = []

        /// Refuses what `command` does not take, with its usage line.
        init(_ arguments: [String], for command: Command) throws {
            var index = 0
            while index < arguments.count {
                let argument = arguments[index]
                if command.options.contains(argument) {
                    guard index + 1 < arguments.count else {
                        throw UsageError(message: "\(argument) needs a value; \(command.usage)")
                    }
                    values[argument] = arguments[index + 1]
                    index += 2
                } else if command.flags.contains(argument) {
                    guard flag == nil else { throw UsageError(message: "one option at most; \(command.usage)") }
                    flag = argument
                    index += 1
                } else if argument.hasPrefix("-"), argument.count > 1 {
                    throw UsageError(message: "unknown option \(argument); \(command.usage)")
                } else {
                    positionals.append(argument)
                    index += 1
                }
            }
            guard command.positionals.contains(positionals.count) else {
                throw UsageError(message: command.usage)
            }
        }
    }

    let environment: [String: String]
    let output: @Sendable (String) -> Void
    let errorOutput: @Sendable (String) -> Void

    public init(
        environment: [String: String] = ProcessInfo.processInfo.environment,
        output: @escaping @Sendable (String) -> Void = { print($0) },
        errorOutput: @escaping @Sendable (String) -> Void = { message in
            FileHandle.standardError.write(Data((message + "\n").utf8))
        }
    ) {
        self.environment = environment
        self.output = output
        self.errorOutput = errorOutput
    }

    /// Runs the command named by `arguments` (without the program name).
    /// - Returns: the exit status: 0 on success, 1 on failure, 2 on a usage error.
    public func run(_ arguments: [String]) async -> Int32 {
        if arguments.isEmpty || ["--help", "-h", "help"].contains(arguments[0]) {
            output(Self.usage)
            return arguments.isEmpty ? 2 : 0
        }
        // The command whose words begin the arguments, the longest first (`keys generate`).
        guard
            let command = Self.commands.filter({ arguments.starts(with: $0.words) }).max(by: {
                $0.words.count < $1.words.count
            })
        else {
            errorOutput(
                "auth-worker: unknown command '\(arguments.prefix(2).joined(separator: " "))'\n"
                    + "usage: auth-worker <command> [options]; see auth-worker --help")
            return 2
        }
        let rest = Array(arguments.dropFirst(command.words.count))
        if rest.contains("--help") || rest.contains("-h") {
            output(command.usage + "\n\n" + command.summary)
            return 0
        }
        do {
            let parsed = try Arguments(rest, for: command)
            return try await dispatch(command, parsed)
        } catch let error as UsageError {
            errorOutput("auth-worker: \(error.message)")
            return 2
        } catch let error as PGError {
            errorOutput("auth-worker: \(error.debugDescription)")
            return 1
        } catch {
            errorOutput("auth-worker: \(error)")
            return 1
        }
    }

    /// Runs one parsed command. - Returns: its exit status.
    private func dispatch(_ command: Command, _ parsed: Arguments) async throws -> Int32 {
        // Whose users an account command reads and acts on (`--tenant`, where a command takes it).
        let tenant = try Self.tenant(parsed, usage: command.usage)
        switch command.words {
        case ["run"]:
            try await runWorker()
        case ["admin"]:
            try await runConsole()
        case ["migrate"]:
            try await migrate(apply: parsed.flag == nil)
        case ["config", "check"]:
            try checkConfiguration()
        case ["config", "reference"]:
            output(Self.configurationReference)
        case ["probe"]:
            let path = parsed.positionals.first ?? "livez"
            guard ["livez", "readyz"].contains(path) else { throw UsageError(message: command.usage) }
            return probe(path)
        case ["version"]:
            output("auth-worker \(Self.version) commit \(BuildInfo.commit) (\(Self.libraryVersions))")
        case ["keys", "generate"]:
            try generateKey(parsed)
        case ["keys", "jwks"]:
            try printJWKS(tenant: tenant)
        case ["request", "guest"]:
            return try await requestGuest(parsed, tenant: parsed.values["--tenant"] == nil ? nil : tenant)
        case ["topics", "create"]:
            return try await createTopics(parsed, usage: command.usage)
        case ["users", "show"]:
            return try await showUser(parsed.positionals[0], tenant: tenant)
        case ["users", "delete"]:
            return try await deleteUser(parsed.positionals[0], tenant: tenant)
        case ["users", "audit"]:
            return try await showAudit(parsed, usage: command.usage)
        case ["guests", "purge"]:
            return try await purgeGuests(parsed, usage: command.usage)
        case ["users", "disable"]:
            return try await setDisabled(parsed.positionals[0], disabled: true, tenant: tenant)
        case ["users", "enable"]:
            return try await setDisabled(parsed.positionals[0], disabled: false, tenant: tenant)
        case ["users", "end-sessions"]:
            return try await endSessions(parsed.positionals, tenant: tenant, usage: command.usage)
        case ["users", "remove-factor"]:
            return try await removeFactor(parsed.positionals[0], tenant: tenant)
        case ["users", "remove-passkeys"]:
            return try await removePasskeys(parsed.positionals, tenant: tenant, usage: command.usage)
        case ["admins", "grant"]:
            return try await grantAdmin(parsed, usage: command.usage)
        case ["admins", "revoke"]:
            return try await revokeAdmin(parsed.positionals[0])
        case ["admins", "list"]:
            return try await listAdmins()
        case ["token", "verify"]:
            return try await verifyToken(parsed, tenant: tenant, usage: command.usage)
        default:
            throw UsageError(message: command.usage)
        }
        return 0
    }

    /// The tenant `--tenant` names (the default tenant without it): whose users a command
    /// reads and acts on. A tenant no longer in the tenants file is still a name: its users can
    /// be shown, disabled and deleted.
    static func tenant(_ parsed: Arguments, usage: String) throws -> String {
        guard let name = parsed.values["--tenant"] else { return Tenant.defaultName }
        guard Tenant.isValidName(name) else {
            throw UsageError(message: "--tenant takes a tenant's name, 1 to 32 of a-z, 0-9 and -; \(usage)")
        }
        return name
    }

    func configuration(needs endpoints: Set<Endpoint> = []) throws -> WorkerConfiguration {
        let configuration = try WorkerConfiguration.fromEnvironment(environment)
        if endpoints.contains(.database) { try configuration.validateDatabase() }
        if endpoints.contains(.brokers) { try kafka().validateBrokers() }
        return configuration
    }

    /// The Kafka client's settings (AuthWorker declares and reads them).
    func kafka() throws -> KafkaSettings {
        try KafkaSettings.fromEnvironment(environment)
    }

    func logger(_ configuration: WorkerConfiguration) -> Logger {
        Logger(label: "auth-worker", level: configuration.logLevel)
    }
}
