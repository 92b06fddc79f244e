import Foundation
import Testing

/// An independent JOSE implementation (Python's jwcrypto and PyJWT) to check what the worker
/// emits: if ours and theirs agree, a gateway's library will too. `scripts/dev-env install`
/// installs them; without them these tests are skipped (a failure when integration is required).
enum IndependentJOSE {
    static let isAvailable = canImport("jwcrypto, jwt")

    /// Whether `python3` can import these modules (a comma-separated list).
    static func canImport(_ modules: String) -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", "import \(modules)"]
        process.standardError = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        do {
            try process.run()
            process.waitUntilExit()
            return process.terminationStatus == 0
        } catch {
            return false
        }
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Runs a Python script with `input` on standard input; returns standard output, trimmed. The
    /// wait runs on a thread of its own, never on a cooperative thread.
    static func run(_ script: String, input: String) async throws -> String {
        try await Blocking.run { try runToEnd(script, input: input) }
    }

    private static func runToEnd(_ script: String, input: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script]
        let stdin = Pipe()
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        stdin.fileHandleForWriting.write(Data(input.utf8))
        try stdin.fileHandleForWriting.close()
        let output = stdout.fileHandleForReading.readDataToEndOfFile()
        let errors = stderr.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw Failure(description: String(decoding: errors, as: UTF8.self))
        }
        return String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

extension Trait where Self == ConditionTrait {
    static var requiresIndependentJOSE: Self {
        .enabled(
            if: IntegrationEnvironment.isRequired || IndependentJOSE.isAvailable,
            "python3 with jwcrypto and PyJWT is not installed")
    }
}
