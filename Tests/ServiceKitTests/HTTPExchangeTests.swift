import Foundation
import ServiceKit
import Synchronization
import Testing

@testable import TestSupport

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

#if canImport(Glibc)
    import Glibc
#endif

/// One HTTP exchange as the key fetcher, Apple's endpoints and the client library make them:
/// answered, timed out, cancelled, and cancelled while failing, thousands of times, without the
/// deadlock `URLSession.data(for:)` has on Linux when a cancellation meets the request's end.
@Suite(.timeLimit(.minutes(2))) struct HTTPExchangeTests {
    static let session = URLSession(configuration: .ephemeral)

    @Test func anAnswerComesBackWhole() async throws {
        let server = try KeyServer()
        defer { server.stop() }
        server.serve("/doc", .init(body: Data(#"{"keys":[]}"#.utf8), headers: ["Cache-Control": "max-age=60"]))
        let (data, response) = try await HTTPExchange.data(
            for: URLRequest(url: server.url("/doc")), session: Self.session, timeout: .seconds(5))
        #expect(String(decoding: data, as: UTF8.self) == #"{"keys":[]}"#)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Cache-Control") == "max-age=60")
    }

    @Test func aSlowServerTimesOutWhenTheDeadlinePasses() async throws {
        let server = try KeyServer()
        defer { server.stop() }
        server.serve("/slow", .init(body: Data("{}".utf8), delay: .seconds(3)))
        let started = ContinuousClock.now
        await #expect(throws: HTTPExchange.TimedOut.self) {
            _ = try await HTTPExchange.data(
                for: URLRequest(url: server.url("/slow")), session: Self.session, timeout: .milliseconds(200))
        }
        let took = ContinuousClock.now - started
        #expect(took >= .milliseconds(200) && took < .seconds(2), "\(took)")
    }

    @Test func aCancelledCallerIsResumedAtOnce() async throws {
        let server = try KeyServer()
        defer { server.stop() }
        server.serve("/slow", .init(body: Data("{}".utf8), delay: .seconds(3)))
        let started = ContinuousClock.now
        let exchange = Task {
            try await HTTPExchange.data(
                for: URLRequest(url: server.url("/slow")), session: Self.session, timeout: .seconds(10))
        }
        try await Task.sleep(for: .milliseconds(100))
        exchange.cancel()
        do {
            let (_, response) = try await exchange.value
            Issue.record(
                "answered \((response as? HTTPURLResponse)?.statusCode ?? 0) after \(ContinuousClock.now - started)")
        } catch {
            #expect(error is CancellationError, "\(error)")
        }
        #expect(ContinuousClock.now - started < .seconds(2))
        // Cancelled before it began: resumed without a request.
        let before = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await HTTPExchange.data(
                for: URLRequest(url: server.url("/slow")), session: Self.session, timeout: .seconds(10))
        }
        await #expect(throws: CancellationError.self) { _ = try await before.value }
    }

    /// Cancellations racing the request's own failure (a refused connection), and deadlines
    /// racing both, 3,000 times on 16 tasks at once. With `URLSession.data(for:)` and a task
    /// cancelled at its deadline, as the key fetcher did, this stopped the whole process after
    /// 41 exchanges (the cancelling thread and the session's queue each waiting for the other;
    /// checked); with `cancel()` called on the data task instead, it ended the process in
    /// Foundation's `TaskRegistry` within a few runs. A watchdog thread, which needs no free
    /// thread of the cooperative pool, reports a deadlock instead of letting the run hang.
    @Test func cancellationsRacingFailuresNeverDeadlock() async throws {
        let refused = try Self.refusedPort()
        let url = try #require(URL(string: "http://127.0.0.1:\(refused)/keys"))
        let finished = Counter()
        let watchdog = Watchdog(seconds: 60) { "stuck after \(finished.value) of 3,000 exchanges: a deadlock" }
        defer { watchdog.stop() }
        let outcomes = await withTaskGroup(of: String.self) { group in
            for index in 0..<3_000 {
                if index >= 16 { _ = await group.next() }
                group.addTask {
                    let exchange = Task {
                        try await HTTPExchange.data(
                            for: URLRequest(url: url), session: Self.session,
                            timeout: .microseconds(Int64(index % 7) * 150 + 50))
                    }
                    // Cancelled at once, or about when the refusal comes back.
                    if index % 3 != 0 { try? await Task.sleep(for: .microseconds(Int64(index % 5) * 100)) }
                    exchange.cancel()
                    defer { finished.increment() }
                    do {
                        _ = try await exchange.value
                        return "answered"
                    } catch is CancellationError {
                        return "cancelled"
                    } catch is HTTPExchange.TimedOut {
                        return "timed out"
                    } catch {
                        return "failed"
                    }
                }
            }
            var outcomes: [String: Int] = [:]
            for await outcome in group { outcomes[outcome, default: 0] += 1 }
            return outcomes
        }
        #expect(finished.value == 3_000)
        #expect(outcomes["answered"] == nil, "nothing listens there: \(outcomes)")
        #expect(watchdog.stop(), "the watchdog fired")
    }

    final class Counter: Sendable {
        private let count = Atomic<Int>(0)
        var value: Int { count.load(ordering: .relaxed) }
        func increment() { count.add(1, ordering: .relaxed) }
    }

    /// A loopback port nothing listens on: bound, then closed.
    static func refusedPort() throws -> UInt16 {
        let server = try KeyServer()
        let port = server.port
        server.stop()
        return port
    }

    /// Reports on its own thread when not stopped within `seconds`: the message goes to standard
    /// error and the process ends, since a deadlocked cooperative pool could run no test code to
    /// record a failure.
    final class Watchdog: Sendable {
        private let stopped = Atomic<Bool>(false)
        private let fired = Atomic<Bool>(false)

        init(seconds: Int, message: @escaping @Sendable () -> String) {
            let thread = Thread { [self] in
                for _ in 0..<(seconds * 10) {
                    if self.stopped.load(ordering: .acquiring) { return }
                    usleep(100_000)
                }
                guard !self.stopped.load(ordering: .acquiring) else { return }
                self.fired.store(true, ordering: .releasing)
                FileHandle.standardError.write(Data("HTTPExchangeTests watchdog: \(message())\n".utf8))
                exit(70)
            }
            thread.start()
        }

        /// Stops it; whether it had not fired.
        @discardableResult func stop() -> Bool {
            stopped.store(true, ordering: .releasing)
            return !fired.load(ordering: .acquiring)
        }
    }
}
