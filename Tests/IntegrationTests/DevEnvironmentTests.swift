import Foundation
import Testing

@testable import TestSupport

/// `scripts/dev-env` on a copy of the repository's scripts: a port another process holds is
/// refused, naming the port, its holder and the variable that moves it (it used to exit 0 and let
/// clients reach another checkout's broker).
@Suite(.requiresServices, .serialized, .timeLimit(.minutes(4))) struct DevEnvironmentTests {
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

    /// `scripts/dev-env up`, killed with everything it started in the foreground (its process
    /// group) after 60 s: a regression fails the test instead of hanging the suite (a child of the
    /// test runner starts with SIGTERM blocked, so only SIGKILL is sure to reach it).
    static let boundedUp = ["-c", "exec timeout -s KILL 60 bash scripts/dev-env up"]

    /// A copy of the repository's scripts in a folder of its own, the broker binary linked in.
    func scriptsCopy() throws -> URL {
        let broker = Self.root.appendingPathComponent(".local/tansu/tansu")
        try #require(FileManager.default.isExecutableFile(atPath: broker.path), "scripts/dev-env install first")
        let copy = FileManager.default.temporaryDirectory.appendingPathComponent("dev-env-\(UUID())")
        try FileManager.default.createDirectory(
            at: copy.appendingPathComponent("scripts"), withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o755])
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: copy.path)
        for script in ["dev-env", "kafka-compat-proxy.py"] {
            try FileManager.default.copyItem(
                at: Self.root.appendingPathComponent("scripts/\(script)"),
                to: copy.appendingPathComponent("scripts/\(script)"))
        }
        try FileManager.default.createDirectory(
            at: copy.appendingPathComponent(".local/tansu"), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(
            at: copy.appendingPathComponent(".local/tansu/tansu"), withDestinationURL: broker)
        return copy
    }

    @Test func aTakenPortIsRefusedWithItsHolderNamed() async throws {
        let copy = try scriptsCopy()
        defer { try? FileManager.default.removeItem(at: copy) }

        // Another process holds a port: the one PostgreSQL is asked to take. It holds it until its
        // standard input closes (the test ends, or its process dies), not for a fixed time: on a
        // loaded machine `dev-env up` once took longer than the holder's minute, found the port
        // free and started the copy's services, whose broker kept the test's output open.
        let holder = try StandIn(
            "import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
                + "print(s.getsockname()[1], flush=True); sys.stdin.read()")
        defer { holder.stop() }
        let reading = holder.output.fileHandleForReading
        let printed = try await Blocking.run { reading.availableData }
        let line = String(decoding: printed, as: UTF8.self)
        let port = try #require(Int(line.trimmingCharacters(in: .whitespacesAndNewlines)))

        // The broker and its proxy are asked for the same port: should the check ever pass,
        // nothing of the copy's starts and stays behind.
        let (status, output) = try await shell(
            Self.boundedUp, in: copy,
            environment: [
                "AUTH_DEV_PG_PORT": String(port), "AUTH_DEV_BROKER_PORT": String(port),
                "AUTH_DEV_PROXY_PORT": String(port),
            ])
        #expect(status != 0, "\(output)")
        #expect(output.contains("port \(port), wanted for PostgreSQL, is taken by"), "\(output)")
        #expect(output.contains("python3"), "the holder is named: \(output)")
        #expect(output.contains("AUTH_DEV_PG_PORT"), "and the variable that moves it")
        // Refused before anything was set up: no data folder initialised, no service started.
        #expect(!FileManager.default.fileExists(atPath: copy.appendingPathComponent(".local/pg").path), "\(output)")
        #expect(!FileManager.default.fileExists(atPath: copy.appendingPathComponent(".local/run").path), "\(output)")
        _ = try await shell(["scripts/dev-env", "down"], in: copy)
    }

    /// A service of this checkout already running on one port, asked for on another: `up` says
    /// where it runs, before it installs or initialises anything (it used to wait on the new port,
    /// ten minutes for PostgreSQL, for ever for the broker's topics).
    @Test func aServiceRunningOnAnotherPortIsNamedBeforeAnythingStarts() async throws {
        let copy = try scriptsCopy()
        defer { try? FileManager.default.removeItem(at: copy) }
        // Stands in for the copy's running broker: a live process whose pid the copy keeps, started
        // (by its record) on port 1.
        let stand = try StandIn("import sys; sys.stdin.read()")
        defer { stand.stop() }
        let run = copy.appendingPathComponent(".local/run")
        try FileManager.default.createDirectory(at: run, withIntermediateDirectories: true)
        try "\(stand.process.processIdentifier)\n".write(
            to: run.appendingPathComponent("broker.pid"), atomically: true, encoding: .utf8)
        try "1\n".write(to: run.appendingPathComponent("broker.port"), atomically: true, encoding: .utf8)

        let (status, output) = try await shell(
            Self.boundedUp, in: copy,
            environment: ["AUTH_DEV_PG_PORT": String(try IsolatedCluster.freePort()), "AUTH_DEV_BROKER_PORT": "2"])
        #expect(status != 0, "\(output)")
        #expect(
            output.contains("this checkout's broker already runs on port 1, not 2 (AUTH_DEV_BROKER_PORT)"), "\(output)")
        #expect(!output.contains("initialising"), "\(output)")
        #expect(!FileManager.default.fileExists(atPath: copy.appendingPathComponent(".local/pg").path), "\(output)")
        #expect(stand.process.isRunning, "the running service is left alone")
    }
}

/// A Python process that stands in for another one (a port's holder, a running service) and lives
/// until `stop()` closes its standard input, or the test runner dies: a signal would not reach it
/// (a child of the test runner starts with SIGTERM blocked), and a fixed lifetime can end too soon
/// on a loaded machine.
final class StandIn {
    let process = Process()
    /// What it prints.
    let output = Pipe()
    private let lifeline = Pipe()

    init(_ code: String) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = ["-c", code]
        process.standardOutput = output
        process.standardInput = lifeline
        process.standardError = FileHandle.nullDevice
        try process.run()
    }

    /// Closes its standard input, which ends it; not waited for (a test's cooperative thread
    /// must not block, and Foundation reaps the process when it exits).
    func stop() {
        try? lifeline.fileHandleForWriting.close()
    }
}
