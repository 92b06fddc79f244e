import Foundation
import Testing

@testable import TestSupport

/// `scripts/dev-env` on a copy of the repository's scripts: a port another process holds is
/// refused, naming the port, its holder and the variable that moves it (it used to exit 0 and let
/// clients reach another checkout's broker).
@Suite(.requiresServices, .serialized, .timeLimit(.minutes(2))) struct DevEnvironmentTests {
    static let root = ProjectPaths.root

    /// Runs `command` with `environment` added; returns its status and its output and errors together.
    func shell(_ arguments: [String], in directory: URL, environment: [String: String] = [:]) async throws
        -> (Int32, String)
    {
        let outcome = try await Subprocess.run(
            ["bash"] + arguments, environment: ProcessInfo.processInfo.environment.merging(environment) { $1 },
            in: directory)
        return (outcome.status, outcome.output)
    }

    @Test func aTakenPortIsRefusedWithItsHolderNamed() async throws {
        let broker = Self.root.appendingPathComponent(".local/tansu/tansu")
        try #require(FileManager.default.isExecutableFile(atPath: broker.path), "scripts/dev-env install first")
        let copy = FileManager.default.temporaryDirectory.appendingPathComponent("dev-env-\(UUID())")
        try FileManager.default.createDirectory(
            at: copy.appendingPathComponent("scripts"), withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o755])
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: copy.path)
        defer { try? FileManager.default.removeItem(at: copy) }
        for script in ["dev-env", "kafka-compat-proxy.py"] {
            try FileManager.default.copyItem(
                at: Self.root.appendingPathComponent("scripts/\(script)"),
                to: copy.appendingPathComponent("scripts/\(script)"))
        }
        try FileManager.default.createDirectory(
            at: copy.appendingPathComponent(".local/tansu"), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(
            at: copy.appendingPathComponent(".local/tansu/tansu"), withDestinationURL: broker)

        // Another process holds a port: the one PostgreSQL is asked to take.
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        holder.arguments = [
            "-c",
            "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
                + "print(s.getsockname()[1], flush=True); time.sleep(60)",
        ]
        let portPipe = Pipe()
        holder.standardOutput = portPipe
        try holder.run()
        defer { holder.terminate() }
        let line = String(decoding: portPipe.fileHandleForReading.availableData, as: UTF8.self)
        let port = try #require(Int(line.trimmingCharacters(in: .whitespacesAndNewlines)))

        let (status, output) = try await shell(
            ["scripts/dev-env", "up"], in: copy,
            environment: ["AUTH_DEV_PG_PORT": String(port), "AUTH_DEV_BROKER_PORT": "1", "AUTH_DEV_PROXY_PORT": "1"])
        #expect(status != 0, "\(output)")
        #expect(output.contains("port \(port), wanted for PostgreSQL, is taken by"), "\(output)")
        #expect(output.contains("python3"), "the holder is named: \(output)")
        #expect(output.contains("AUTH_DEV_PG_PORT"), "and the variable that moves it")
        _ = try await shell(["scripts/dev-env", "down"], in: copy)
    }
}
