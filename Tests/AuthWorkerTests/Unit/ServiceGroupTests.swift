import ServiceKit
import Synchronization
import Testing

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

@Suite(.timeLimit(.minutes(1))) struct ServiceGroupTests {
    let logger = Logger(label: "test", handler: InMemoryLogHandler())

    @Test func gracefulShutdownStopsEveryService() async throws {
        let first = SleepyService()
        let second = SleepyService()
        let group = ServiceGroup(services: [first, second], signals: [], logger: logger)
        async let running: Void = group.run()
        try await Task.sleep(for: .milliseconds(50))
        group.startGracefulShutdown(reason: "test")
        try await running
        let bothFinished = first.finished.load(ordering: .acquiring) && second.finished.load(ordering: .acquiring)
        #expect(bothFinished)
    }

    @Test func aFailingServiceStopsTheOthersAndSurfacesItsError() async throws {
        let sleepy = SleepyService()
        let group = ServiceGroup(services: [sleepy, FailingService()], signals: [], logger: logger)
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
