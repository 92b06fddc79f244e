import Foundation
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Collects a child process's output as it arrives, so tests can wait for a log line.
final class LogCollector: Sendable {
    private let text = Mutex("")

    init(_ pipe: Pipe) {
        pipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            if data.isEmpty {
                handle.readabilityHandler = nil
                return
            }
            self?.append(String(decoding: data, as: UTF8.self))
        }
    }

    private func append(_ chunk: String) {
        text.withLock { $0 += chunk }
    }

    func all() async -> String {
        try? await Task.sleep(for: .milliseconds(200))
        return text.withLock { $0 }
    }

    /// The value of a JSON log field in the first line containing `marker`, waiting up to `timeout`.
    func value(of field: String, inLineWith marker: String, timeout: Duration = .seconds(20)) async -> String? {
        let deadline = ContinuousClock.now + timeout
        // Read once more after the deadline: a sleep can end late on a busy machine.
        while true {
            let looked = ContinuousClock.now
            let lines = text.withLock { $0 }.split(separator: "\n")
            if let line = lines.first(where: { $0.contains(marker) }),
                let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                let value = object[field] as? String
            {
                return value
            }
            if looked >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(100))
        }
    }
}

/// A plain HTTP GET for probing the worker's health endpoint.
enum HTTP {
    static func get(_ url: String) async throws -> (status: Int, body: String) {
        guard let url = URL(string: url) else { throw URLError(.badURL) }
        let (data, response) = try await URLSession.shared.data(from: url)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }

    /// The response headers of a GET.
    static func head(_ url: String) async throws -> [String: String] {
        guard let url = URL(string: url) else { throw URLError(.badURL) }
        let (_, response) = try await URLSession.shared.data(from: url)
        var headers: [String: String] = [:]
        for (name, value) in (response as? HTTPURLResponse)?.allHeaderFields ?? [:] {
            if let name = name as? String, let value = value as? String { headers[name] = value }
        }
        return headers
    }
}

/// Checks a `/metrics` answer: every sample belongs to a family announced with `# HELP` and
/// `# TYPE`, and `promtool check metrics` (Debian's `prometheus` package, installed by
/// `scripts/dev-env`) finds nothing to report. Without promtool the check is required only where
/// the integration environment is (`AUTH_TEST_REQUIRE_INTEGRATION=1`).
enum MetricsExposition {
    struct Problem: Error, CustomStringConvertible {
        let description: String
    }

    static func check(_ text: String) async throws {
        var helped = Set<String>()
        var typed: [String: String] = [:]
        for line in text.split(separator: "\n") {
            let words = line.split(separator: " ", maxSplits: 3)
            if line.hasPrefix("# HELP "), words.count >= 3 {
                helped.insert(String(words[2]))
            } else if line.hasPrefix("# TYPE "), words.count == 4 {
                typed[String(words[2])] = String(words[3])
            } else if !line.hasPrefix("#") {
                let name = String(line.prefix { $0 != "{" && $0 != " " })
                let family =
                    typed[name] != nil
                    ? name
                    : ["_bucket", "_sum", "_count"].lazy
                        .filter { name.hasSuffix($0) }.map { String(name.dropLast($0.count)) }.first ?? name
                guard helped.contains(family), typed[family] != nil else {
                    throw Problem(description: "\(name) has no # HELP and # TYPE before it")
                }
            }
        }
        let promtool = ["/usr/bin/promtool", "/usr/local/bin/promtool"].first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
        guard let promtool else {
            if ProcessInfo.processInfo.environment["AUTH_TEST_REQUIRE_INTEGRATION"] == "1" {
                throw Problem(description: "promtool is not installed (scripts/dev-env install)")
            }
            return
        }
        let outcome = try await Subprocess.run([promtool, "check", "metrics"], input: text)
        guard outcome.status == 0, outcome.output.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
            throw Problem(description: "promtool check metrics: \(outcome.output)")
        }
    }
}

/// Runs blocking work (waiting for a process to exit, starting a server) on a thread of its
/// own, so an async test never holds one of the machine's few cooperative threads while it waits:
/// with two cores, two such waits stall every other test's timers.
enum Blocking {
    static func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try work() }) }.start()
        }
    }
}

extension Process {
    /// `waitUntilExit()` for async tests: the wait runs on a thread of its own.
    /// - Returns: when the process was seen to end, on that thread (the test itself may resume
    ///   later, when the cooperative pool is busy).
    @discardableResult
    func exited() async -> ContinuousClock.Instant {
        (try? await Blocking.run { [self] in
            waitUntilExit()
            return ContinuousClock.now
        }) ?? .now
    }
}

enum Subprocess {
    struct Outcome: Sendable {
        let status: Int32
        /// Standard output and error together.
        let output: String
    }

    /// Runs `arguments` (through `env`, so the first may be a name on the PATH) and waits for it on
    /// a thread of its own.
    /// - Parameter input: written to its standard input, which is then closed; nil: none.
    static func run(
        _ arguments: [String], environment: [String: String]? = nil, in directory: URL? = nil, input: String? = nil
    ) async throws -> Outcome {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        if let environment { process.environment = environment }
        if let directory { process.currentDirectoryURL = directory }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        let stdin = input.map { _ in Pipe() }
        if let stdin { process.standardInput = stdin }
        try process.run()
        return await withCheckedContinuation { continuation in
            let thread = Thread {
                if let stdin, let input {
                    stdin.fileHandleForWriting.write(Data(input.utf8))
                    try? stdin.fileHandleForWriting.close()
                }
                let data = pipe.fileHandleForReading.readDataToEndOfFile()
                process.waitUntilExit()
                continuation.resume(
                    returning: Outcome(status: process.terminationStatus, output: String(decoding: data, as: UTF8.self))
                )
            }
            thread.start()
        }
    }
}
