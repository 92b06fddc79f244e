import AuthDomain
import AuthWorker
import Foundation
import Messages
import Passwords
import ServiceKit

/// Where the project is checked out (this file is Tests/TestSupport/TestWorker.swift).
enum ProjectPaths {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
}

/// Cheap parameters so unit tests stay fast; production defaults are tested for their values.
let fastArgon2 = Argon2Parameters(memoryKiB: 256, iterations: 2, parallelism: 1)

/// The calling thread's name as the kernel has it (what `top -H` shows).
func currentThreadName() -> String {
    (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8))?
        .trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
}

/// A worker running in this process until `stop()`.
final class RunningWorker: Sendable {
    let application: WorkerApplication
    let group: ServiceGroup
    let task: Task<Void, any Error>

    init(_ setup: WorkerSetup, logger: Logger = IntegrationEnvironment.quietLogger) async throws {
        application = try await WorkerApplication.build(
            configuration: setup.worker, kafka: setup.kafka, logger: logger)
        group = application.makeServiceGroup(signals: [])
        task = Task { [application, group] in try await application.run(group) }
    }

    func stop() async throws {
        group.startGracefulShutdown(reason: "test")
        try await task.value
    }
}

/// Login requests as a gateway publishes them.
enum TestRequests {
    static func request(id: String, data: String, time: Date? = nil) -> [UInt8] {
        let timeMember = time.map { #","time":"\#(Timestamp.format($0))""# } ?? ""
        return Array(
            #"{"specversion":"1.0","id":"\#(id)","source":"/gateway/test","type":"auth.login.request"\#(timeMember),"data":\#(data)}"#
                .utf8)
    }

    static func passwordData(_ email: String, _ password: String) -> String {
        #"{"method":"password","email":"\#(email)","password":"\#(password)"}"#
    }
}
