import Foundation
import ServiceKit
import Testing

@testable import AuthWorker
@testable import TestSupport

@Suite struct MetricsTests {
    @Test func everyFamilyHasHelpAndTypeAndLabelsAreEscaped() async throws {
        let registry = MetricsRegistry()
        let counter = registry.counter("things_total", help: "Things.\nSecond line", labels: ["kind"])
        counter.labels("a\"b\\c\nd").increment(by: 3)
        registry.gauge("level", help: "A level.").labels().set(2.5)
        let text = registry.text()
        #expect(text.contains("# HELP things_total Things.\\nSecond line\n# TYPE things_total counter\n"))
        #expect(text.contains("things_total{kind=\"a\\\"b\\\\c\\nd\"} 3\n"))
        #expect(text.contains("# TYPE level gauge\nlevel 2.5\n"))
        try await MetricsExposition.check(text)
    }

    @Test func histogramBucketsAreCumulativeWithInfinityCountAndSum() async throws {
        let registry = MetricsRegistry()
        let family = registry.histogram("took_seconds", help: "Took.", labels: ["m"], bounds: [0.01, 0.1, 1])
        let histogram = family.labels("x")
        for value in [0.005, 0.05, 0.05, 0.5, 20] { histogram.observe(value) }
        let text = registry.text()
        #expect(text.contains("took_seconds_bucket{m=\"x\",le=\"0.01\"} 1\n"))
        #expect(text.contains("took_seconds_bucket{m=\"x\",le=\"0.1\"} 3\n"))
        #expect(text.contains("took_seconds_bucket{m=\"x\",le=\"1\"} 4\n"))
        #expect(text.contains("took_seconds_bucket{m=\"x\",le=\"+Inf\"} 5\n"))
        #expect(text.contains("took_seconds_count{m=\"x\"} 5\n"))
        #expect(text.contains("took_seconds_sum{m=\"x\"} 20.605\n"))
        try await MetricsExposition.check(text)
    }

    /// A tally counts nanoseconds apart and adds them at once, as the histogram would have
    /// counted their seconds one by one (a bound's own value in its bucket); it is empty after.
    @Test func aTallyAddsWhatTheHistogramWouldHaveCounted() {
        let bounds = [0.01, 0.1, 1]
        let direct = Histogram(bounds: bounds)
        let tallied = Histogram(bounds: bounds)
        var tally = Histogram.Tally(bounds: bounds)
        for nanoseconds: UInt64 in [5_000_000, 50_000_000, 50_000_000, 500_000_000, 20_000_000_000, 10_000_000] {
            direct.observe(Double(nanoseconds) / 1e9)
            tally.observe(nanoseconds: nanoseconds)
        }
        tallied.add(&tally)
        #expect(tallied.snapshot.cumulative == direct.snapshot.cumulative)
        #expect(tallied.snapshot.cumulative == [2, 4, 5])
        #expect(tallied.snapshot.count == 6 && abs(tallied.snapshot.sum - 20.615) < 1e-9)
        tallied.add(&tally)
        #expect(tallied.snapshot.count == 6, "the tally was emptied")
        tally.observe(nanoseconds: 10_000_001)  // just over the first bound
        tallied.add(&tally)
        #expect(tallied.snapshot.cumulative == [2, 5, 6] && tallied.snapshot.count == 7)
    }

    @Test func workerMetricsExposeTheDocumentedFamiliesAndProcessFigures() async throws {
        let metrics = WorkerMetrics()
        metrics.trackProcess()
        metrics.requestDuration.labels("guest", "ok").observe(.milliseconds(3))
        metrics.deadLetters.labels("invalid_json").increment()
        let admitted = MonotonicNanos.now()
        var marks = PhaseTimestamps()
        marks.lookupBegan = admitted + 50_000
        var tally = PhaseTally()
        tally.observe(marks, admitted: admitted, finished: admitted + 3_000_000)
        metrics.add(&tally)
        metrics.add(&tally)  // emptied by the first: added once
        let text = metrics.prometheusText()
        #expect(text.contains("auth_request_duration_seconds_bucket{method=\"guest\",outcome=\"ok\",le=\"0.005\"} 1"))
        #expect(text.contains("auth_request_duration_seconds_bucket{method=\"guest\",outcome=\"ok\",le=\"0.0025\"} 0"))
        #expect(WorkerMetrics.durationBounds.first == 0.001 && WorkerMetrics.durationBounds.last == 10)
        // Every phase is exposed from the start, each message in the phases it went through.
        #expect(text.contains("auth_request_phase_seconds_bucket{phase=\"to_look_up\",le=\"0.0001\"} 1"))
        #expect(text.contains("auth_request_phase_seconds_bucket{phase=\"looking_up\",le=\"0.0025\"} 0"))
        #expect(text.contains("auth_request_phase_seconds_bucket{phase=\"looking_up\",le=\"0.005\"} 1"))
        #expect(text.contains("auth_request_phase_seconds_count{phase=\"publishing\"} 0"))
        #expect(
            TimedPhase.allCases.allSatisfy {
                text.contains("auth_request_phase_seconds_count{phase=\"\($0.rawValue)\"}")
            })
        #expect(text.contains("auth_requests_dead_lettered_total{reason=\"invalid_json\"} 1"))
        let rss = try #require(text.split(separator: "\n").first { $0.hasPrefix("process_resident_memory_bytes ") })
        #expect((Double(rss.split(separator: " ")[1]) ?? 0) > 1_000_000)
        let start = try #require(text.split(separator: "\n").first { $0.hasPrefix("process_start_time_seconds ") })
        let started = Double(start.split(separator: " ")[1]) ?? 0
        #expect(abs(started - Date().timeIntervalSince1970) < 86_400 * 7, "a plausible start time")
        try await MetricsExposition.check(text)
    }
}
