import AuthDomain
import Foundation
import Kafka
import Messages
import PGStore
import ServiceKit

/// What the worker counts and measures, served as Prometheus text on `/metrics`.
///
/// Every family has its `# HELP` and `# TYPE`; `promtool check metrics` passes on a live scrape
/// (tested). Names and labels are documented in deploy/README.md, "Metrics".
public final class WorkerMetrics: Sendable {
    public let registry = MetricsRegistry()

    /// `auth_results_total{code}`: every result published, by `ok` or error code (invalid requests too).
    public let results: MetricFamily<Counter>
    /// `auth_tenant_results_total{tenant,code}`: the same by tenant, for the tenants served only
    /// (`default` and the tenants file's: a bounded set); a request naming another is counted in
    /// `auth_results_total` alone.
    public let tenantResults: MetricFamily<Counter>
    /// `auth_request_duration_seconds{method,outcome}`: from the message entering the pipeline to
    /// its offset being released, one observation per message.
    public let requestDuration: MetricFamily<Histogram>
    /// `auth_request_phase_seconds{phase}`: the same time by phase (`TimedPhase`), one
    /// observation per phase a message went through.
    public let requestPhases: MetricFamily<Histogram>
    /// Its children, resolved once, by `TimedPhase.index`.
    private let phaseHistograms: [Histogram]
    public let duplicates: Counter
    public let retries: Counter
    /// Write transactions of requests, by where they started (`lookup`: prepared and written in
    /// the lookup's own task at light load; `loop`: a batch the loop started).
    public let writeBatches: MetricFamily<Counter>
    public let expired: Counter
    /// `auth_requests_dead_lettered_total{reason}`.
    public let deadLetters: MetricFamily<Counter>
    /// `auth_consumer_lag{topic,partition}`: messages behind the partition's end, per assigned partition.
    public let consumerLag: MetricFamily<Gauge>
    /// `auth_requests_in_flight`: messages taken from the broker and not yet finished.
    public let inFlight: Gauge
    /// `auth_outbox_backlog_events`: events written but not yet acknowledged by the broker.
    public let outboxBacklog: Gauge
    /// Argon2/bcrypt verifications, counted by the password service.
    public let passwordVerifications: Counter
    /// `auth_apple_jobs_total{kind,outcome}`: Sign in with Apple code exchanges and revocations.
    public let appleJobs: MetricFamily<Counter>
    /// `auth_apple_jobs_backlog`: Apple token jobs not finished.
    public let appleJobBacklog: Gauge
    /// `auth_apple_jobs_oldest_seconds`: the age of the oldest unfinished Apple token job.
    public let appleJobOldest: Gauge

    /// The request duration buckets: 1 ms to 10 s.
    public static let durationBounds: [Double] = [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
    ]
    /// The phase buckets: 0.1 ms to 10 s (a phase is often well under a millisecond).
    public static let phaseBounds: [Double] = [0.0001, 0.00025, 0.0005] + durationBounds

    public init(passwordVerifications: Counter = Counter()) {
        self.passwordVerifications = passwordVerifications
        let registry = registry
        registry.collect(
            "auth_build_info", help: "The running build: version and the commit it was built from.", type: "gauge",
            labels: ["version", "commit"]
        ) { [([BuildInfo.version, BuildInfo.commit], 1)] }
        results = registry.counter(
            "auth_results_total", help: "Results published, by status (ok) or error code; invalid requests included.",
            labels: ["code"])
        tenantResults = registry.counter(
            "auth_tenant_results_total",
            help:
                "Results published for the tenants served (default included), by tenant and status (ok) or error code.",
            labels: ["tenant", "code"])
        requestDuration = registry.histogram(
            "auth_request_duration_seconds",
            help: "Time from a message entering the pipeline to its outcome being durable and published.",
            labels: ["method", "outcome"], bounds: Self.durationBounds)
        let phases = registry.histogram(
            "auth_request_phase_seconds",
            help:
                "The same time by phase: to_look_up, looking_up, preparing, ready (for a writer), writing, looking_up_and_writing (light load: one task and transaction), publishing.",
            labels: ["phase"], bounds: Self.phaseBounds)
        requestPhases = phases
        phaseHistograms = TimedPhase.allCases.map { phases.labels($0.rawValue) }
        duplicates = registry.counter(
            "auth_requests_duplicate_total", help: "Requests seen again and answered with the kept result."
        ).labels()
        expired = registry.counter(
            "auth_requests_expired_total", help: "Requests refused because they waited longer than the deadline."
        ).labels()
        retries = registry.counter(
            "auth_transient_retries_total", help: "Retries after a transient PostgreSQL or broker failure."
        ).labels()
        writeBatches = registry.counter(
            "auth_write_batches_total",
            help:
                "Write transactions of requests, by path: lookup (looked up, prepared and written in one task, at light load) or loop (a batch the loop started).",
            labels: ["path"])
        deadLetters = registry.counter(
            "auth_requests_dead_lettered_total", help: "Messages sent to the dead-letter topic, by reason.",
            labels: ["reason"])
        consumerLag = registry.gauge(
            "auth_consumer_lag", help: "Messages between this member's position and the partition's end.",
            labels: ["topic", "partition"])
        inFlight = registry.gauge(
            "auth_requests_in_flight",
            help: "Messages taken from the broker and not yet finished (sampled each second)."
        ).labels()
        outboxBacklog = registry.gauge(
            "auth_outbox_backlog_events", help: "Events written to the outbox and not yet acknowledged by the broker."
        ).labels()
        appleJobs = registry.counter(
            "auth_apple_jobs_total",
            help:
                "Sign in with Apple jobs run: code exchanges and revocations, by outcome (retried, exchanged, revoked, refused).",
            labels: ["kind", "outcome"])
        appleJobBacklog = registry.gauge(
            "auth_apple_jobs_backlog", help: "Sign in with Apple jobs (exchanges, revocations) not finished yet."
        ).labels()
        appleJobOldest = registry.gauge(
            "auth_apple_jobs_oldest_seconds", help: "Age of the oldest unfinished Sign in with Apple job."
        ).labels()
        let verifications = passwordVerifications
        registry.collect(
            "auth_password_verifications_total", help: "Argon2id and bcrypt verifications performed.",
            type: "counter"
        ) { [([], Double(verifications.count))] }
    }

    /// Adds the phase times the loop counted (`PhaseTally`), and empties the tally.
    func add(_ tally: inout PhaseTally) {
        for phase in TimedPhase.allCases { phaseHistograms[phase.index].add(&tally.tallies[phase.index]) }
    }

    /// Adds `auth_key_set_fetch_failures_total{provider}`.
    func track(_ providers: IdentityProviders) {
        let caches = providers.names.compactMap { name in providers[name].map { (name, $0.keySet) } }
        registry.collect(
            "auth_key_set_fetch_failures_total", help: "Failed fetches of a provider's signing keys, by provider.",
            type: "counter", labels: ["provider"]
        ) { caches.map { ([$0.0], Double($0.1.failures.count)) } }
    }

    /// Adds the pool's connection figures.
    func track(_ pool: PGPool) {
        registry.collect("auth_db_pool_connections", help: "Connections of the shared pool.", type: "gauge") {
            [([], Double(pool.size))]
        }
        registry.collect(
            "auth_db_pool_connections_in_use", help: "Connections of the shared pool lent out now.", type: "gauge"
        ) { [([], Double(pool.inUse))] }
    }

    /// Counts a result; `tenant`: the tenant served that it answers, nil for a tenant not served.
    func count(_ result: LoginResultData, tenant: String?) {
        let code = result.error?.code.rawValue ?? "ok"
        results.labels(code).increment()
        if let tenant { tenantResults.labels(tenant, code).increment() }
    }

    /// Replaces the lag figures with a fresh reading (partitions no longer assigned disappear).
    func recordLag(_ lag: [TopicPartition: Int64]) {
        var gauges: [[String]: Gauge] = [:]
        for (partition, behind) in lag {
            let gauge = Gauge()
            gauge.set(Double(behind))
            gauges[[partition.topic, String(partition.partition)]] = gauge
        }
        consumerLag.replaceAll(gauges)
    }

    /// The Prometheus text exposition of every metric, process figures included.
    public func prometheusText() -> String { registry.text() }

    /// Registers the `process_*` families (once per application).
    func trackProcess() { ProcessMetrics.register(in: registry) }
}

/// What this build is.
public enum BuildInfo {
    /// This release's version.
    public static let version = "0.3.0"
    /// The commit the binary was built from: `AUTH_BUILD_COMMIT`, set by the image build
    /// (`--build-arg COMMIT=$(git rev-parse HEAD)`), else `unknown`.
    public static var commit: String {
        let value = ProcessInfo.processInfo.environment[Setting.buildCommit.name] ?? ""
        return value.isEmpty ? "unknown" : String(value.prefix(64))
    }
}
