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

        // Another process holds a port: the one PostgreSQL is asked to take. It holds it until its
        // standard input closes (the test ends, or its process dies), not for a fixed time: on a
        // loaded machine `dev-env up` once took longer than the holder's minute, found the port
        // free and started the copy's services, whose broker kept the test's output open.
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        holder.arguments = [
            "-c",
            "import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
                + "print(s.getsockname()[1], flush=True); sys.stdin.read()",
        ]
        let portPipe = Pipe()
        let lifeline = Pipe()
        holder.standardOutput = portPipe
        holder.standardInput = lifeline
        holder.standardError = FileHandle.nullDevice
        try holder.run()
        defer {
            try? lifeline.fileHandleForWriting.close()
            holder.terminate()
            holder.waitUntilExit()
        }
        let line = String(decoding: portPipe.fileHandleForReading.availableData, as: UTF8.self)
        let port = try #require(Int(line.trimmingCharacters(in: .whitespacesAndNewlines)))

        // The broker and its proxy are asked for the same port: should the check ever pass,
        // nothing of the copy's starts and stays behind.
        let (status, output) = try await shell(
            ["scripts/dev-env", "up"], in: copy,
            environment: [
                "AUTH_DEV_PG_PORT": String(port), "AUTH_DEV_BROKER_PORT": String(port),
                "AUTH_DEV_PROXY_PORT": String(port),
            ])
        #expect(status != 0, "\(output)")
        #expect(output.contains("port \(port), wanted for PostgreSQL, is taken by"), "\(output)")
        #expect(output.contains("python3"), "the holder is named: \(output)")
        #expect(output.contains("AUTH_DEV_PG_PORT"), "and the variable that moves it")
        _ = try await shell(["scripts/dev-env", "down"], in: copy)
    }
}
