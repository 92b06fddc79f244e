import Foundation
import Messages
import Synchronization

/// Counters and a latency summary, in swift-metrics' shape, exported as Prometheus text.
public final class WorkerMetrics: Sendable {
    /// A monotonically increasing count.
    public final class Counter: Sendable {
        public let name: String
        public let labels: [String: String]
        private let value = Atomic<Int>(0)

        init(name: String, labels: [String: String] = [:]) {
            self.name = name
            self.labels = labels
        }

        public func increment(by amount: Int = 1) { value.add(amount, ordering: .relaxed) }
        public var count: Int { value.load(ordering: .relaxed) }
    }

    public let duplicates = Counter(name: "auth_requests_duplicate_total")
    public let deadLettered = Counter(name: "auth_requests_dead_lettered_total")
    public let retries = Counter(name: "auth_transient_retries_total")
    public let expired = Counter(name: "auth_requests_expired_total")
    /// Argon2/bcrypt verifications, read from the password service.
    public var passwordVerifications: Counter { passwordCounter.withLock { $0 } ?? Counter(name: "") }
    private let passwordCounter = Mutex<Counter?>(nil)

    /// Counts the verifications of `passwords` as `auth_password_verifications_total`.
    func track(_ passwords: PasswordService?) {
        passwordCounter.withLock { $0 = passwords?.verifications }
    }
    private let results = Mutex<[String: Int]>([:])
    private let latency = Mutex<(count: Int, sumSeconds: Double)>((0, 0))

    public init() {}

    func count(_ result: LoginResultData) {
        let code = result.error?.code.rawValue ?? "ok"
        results.withLock { $0[code, default: 0] += 1 }
    }

    func observeLatency(_ duration: Duration) {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        latency.withLock { $0 = ($0.count + 1, $0.sumSeconds + seconds) }
    }

    /// Results answered so far by status or error code.
    public var resultsByCode: [String: Int] { results.withLock { $0 } }

    /// The Prometheus text exposition of every metric.
    public func prometheusText() -> String {
        var lines: [String] = []
        lines.append("# TYPE auth_results_total counter")
        for (code, count) in resultsByCode.sorted(by: { $0.key < $1.key }) {
            lines.append("auth_results_total{code=\"\(code)\"} \(count)")
        }
        for counter in [duplicates, deadLettered, retries, expired]
            + [passwordCounter.withLock { $0 }].compactMap({ $0 })
        {
            lines.append("# TYPE \(counter.name) counter")
            lines.append("\(counter.name) \(counter.count)")
        }
        let (count, sum) = latency.withLock { $0 }
        lines.append("# TYPE auth_request_duration_seconds summary")
        lines.append("auth_request_duration_seconds_count \(count)")
        lines.append("auth_request_duration_seconds_sum \(sum)")
        return lines.joined(separator: "\n") + "\n"
    }
}
