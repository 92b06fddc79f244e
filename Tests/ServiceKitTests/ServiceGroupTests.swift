import ServiceKit
import Synchronization
import Testing

@testable import TestSupport

/// A service that runs until asked to stop, optionally ignoring the request.
final class SleepyService: Service {
    let stop = Atomic<Bool>(false)
    let ignoresShutdown: Bool
    let finished = Atomic<Bool>(false)

    init(ignoresShutdown: Bool = false) { self.ignoresShutdown = ignoresShutdown }

    func run() async throws {
        while ignoresShutdown || !stop.load(ordering: .acquiring) {
            try await Task.sleep(for: .milliseconds(10))
        }
        finished.store(true, ordering: .releasing)
    }

    func triggerGracefulShutdown() { stop.store(true, ordering: .releasing) }
}

struct Boom: Error {}

final class FailingService: Service {
    func run() async throws {
        try await Task.sleep(for: .milliseconds(20))
        throw Boom()
    }

    func triggerGracefulShutdown() {}
}

@Suite(.timeLimit(.minutes(3))) struct ServiceGroupTests {
    let logger = Logger(label: "test", handler: InMemoryLogHandler())
    /// The shutdown deadline of the tests that are not about it: far above the services' few
    /// milliseconds of work, since in the suite's parallel run on a 2-core machine a sleeping
    /// service can wait a minute for a thread of the cooperative pool (the 30 s default was
    /// exceeded once so, failing a test of the shutdown's order).
    static let patient: Duration = .seconds(150)

    @Test func gracefulShutdownStopsEveryService() async throws {
        let first = SleepyService()
        let second = SleepyService()
        let group = ServiceGroup(
            services: [first, second], signals: [], gracefulShutdownTimeout: Self.patient, logger: logger)
        async let running: Void = group.run()
        try await Task.sleep(for: .milliseconds(50))
        group.startGracefulShutdown(reason: "test")
        try await running
        let bothFinished = first.finished.load(ordering: .acquiring) && second.finished.load(ordering: .acquiring)
        #expect(bothFinished)
    }

    @Test func aFailingServiceStopsTheOthersAndSurfacesItsError() async throws {
        let sleepy = SleepyService()
        let group = ServiceGroup(
            services: [sleepy, FailingService()], signals: [], gracefulShutdownTimeout: Self.patient, logger: logger)
        await #expect(throws: Boom.self) { try await group.run() }
        let finished = sleepy.finished.load(ordering: .acquiring)
        #expect(finished)
    }

    @Test func aServiceThatWillNotStopHitsTheDeadline() async throws {
        let stubborn = SleepyService(ignoresShutdown: true)
        let group = ServiceGroup(
            services: [stubborn], signals: [], gracefulShutdownTimeout: .milliseconds(100), logger: logger)
        let running = Task { try await group.run() }
        try await Task.sleep(for: .milliseconds(30))
        group.startGracefulShutdown(reason: "test")
        await #expect(throws: ServiceGroup.Failure.deadlineExceeded) { try await running.value }
    }
}

/// Records when it was asked to stop and when it returned, on a shared log, and takes a while.
final class Journal: Sendable {
    let entries = Mutex<[String]>([])
    func append(_ entry: String) { entries.withLock { $0.append(entry) } }
}

final class RecordingService: Service {
    let name: String
    let journal: Journal
    let stop = Atomic<Bool>(false)

    init(_ name: String, journal: Journal) {
        self.name = name
        self.journal = journal
    }

    func run() async throws {
        while !stop.load(ordering: .acquiring) { try await Task.sleep(for: .milliseconds(5)) }
        try await Task.sleep(for: .milliseconds(50))  // draining
        journal.append("\(name) returned")
    }

    func triggerGracefulShutdown() {
        journal.append("\(name) asked")
        stop.store(true, ordering: .releasing)
    }
}

@Suite(.timeLimit(.minutes(3))) struct ServiceGroupOrderTests {
    /// The newest service is asked first, and each next one only once the previous has returned:
    /// the consume loop has drained before the relay, readiness and health are asked to stop.
    @Test func shutdownWaitsForEachServiceBeforeAskingTheNext() async throws {
        let journal = Journal()
        let services = ["health", "relay", "worker"].map { RecordingService($0, journal: journal) }
        let group = ServiceGroup(
            services: services, signals: [], gracefulShutdownTimeout: ServiceGroupTests.patient,
            logger: Logger(label: "test", handler: InMemoryLogHandler()))
        let running = Task { try await group.run() }
        try await Task.sleep(for: .milliseconds(50))
        group.startGracefulShutdown(reason: "test")
        try await running.value
        #expect(
            journal.entries.withLock { $0 } == [
                "worker asked", "worker returned", "relay asked", "relay returned", "health asked", "health returned",
            ])
    }
}
