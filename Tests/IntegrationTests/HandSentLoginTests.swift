import Foundation
import Testing

@testable import TestSupport

/// The README's "Send a login by hand", run as written: the worker started by `scripts/run` (the
/// local setup's topics, database and keys), then each shell block between the README's
/// `hand-sent-login` markers in bash, as a newcomer pastes them. A README whose example stops
/// working fails here.
@Suite(.requiresServices, .serialized, .timeLimit(.minutes(5))) struct HandSentLoginTests {
    static let root = ProjectPaths.root

    /// The `sh` blocks between the markers, in order.
    static func blocks() throws -> [String] {
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        guard let start = readme.range(of: "<!-- hand-sent-login:"),
            let end = readme.range(of: "<!-- hand-sent-login: end -->", range: start.upperBound..<readme.endIndex)
        else { return [] }
        var blocks: [String] = []
        var current: [Substring]?
        for line in readme[start.upperBound..<end.lowerBound].split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line == "```sh" {
                current = []
            } else if current != nil, line == "```" {
                blocks.append(current.map { $0.joined(separator: "\n") } ?? "")
                current = nil
            } else {
                current?.append(line)
            }
        }
        return blocks
    }

    @Test func theREADMEsHandSentLoginWorksAsWritten() async throws {
        let blocks = try Self.blocks()
        try #require(blocks.count == 2, "the README's two blocks between the hand-sent-login markers")
        let binary = try #require(ProcessIntegrationTests.binary, "build the auth-worker product first")

        let worker = Process()
        worker.executableURL = URL(fileURLWithPath: "/bin/bash")
        worker.arguments = [Self.root.appendingPathComponent("scripts/run").path]
        worker.currentDirectoryURL = Self.root
        worker.environment = ProcessInfo.processInfo.environment.merging([
            "AUTH_DEV_WORKER_BINARY": binary.path, "AUTH_HEALTH_PORT": "0",
            "AUTH_KAFKA_GROUP": IntegrationEnvironment.uniqueName("readme"), "AUTH_KAFKA_SESSION_TIMEOUT_MS": "6000",
        ]) { $1 }
        let output = Pipe()
        worker.standardOutput = output
        worker.standardError = FileHandle.nullDevice
        try worker.run()
        defer {
            worker.terminate()
            worker.waitUntilExit()
        }
        let logs = LogCollector(output)
        let assigned = await logs.value(of: "msg", inLineWith: "Partitions assigned", timeout: .seconds(150))
        try #require(assigned != nil, "the worker scripts/run started joined its group")

        // The two blocks pasted into one shell, as a newcomer does: the second uses what the
        // first's `eval` set.
        let pasted = try await Subprocess.run(
            ["timeout", "180", "bash", "-eo", "pipefail", "-c", blocks.joined(separator: "\n")], in: Self.root)
        #expect(pasted.status == 0, "\(pasted.output)")
        let printed = try #require(
            pasted.output.split(separator: "\n").first { $0.hasPrefix("{\"new_user\"") }, "\(pasted.output)")
        let result = try #require(try JSONSerialization.jsonObject(with: Data(printed.utf8)) as? [String: Any])
        #expect(result["status"] as? String == "ok")
        #expect((result["user"] as? [String: Any])?["is_guest"] as? Bool == true)
        #expect((result["session"] as? [String: Any])?["access_token"] != nil, "the sealed session opened")
        #expect(pasted.output.contains("\"type\":\"auth.login.result\""), "kcat found the answer by its request id")
        #expect(pasted.output.contains("auth.user.created"), "kcat found the event by the user id")
        #expect(pasted.output.contains("guest_"), "users show printed the stored user: \(pasted.output)")
    }
}
