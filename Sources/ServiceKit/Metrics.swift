import Foundation
import Synchronization

/// A monotonically increasing count.
public final class Counter: Sendable {
    private let value = Atomic<Int>(0)

    public init() {}

    public func increment(by amount: Int = 1) { value.add(amount, ordering: .relaxed) }
    public var count: Int { value.load(ordering: .relaxed) }
}

/// A value that goes up and down.
public final class Gauge: Sendable {
    private let value = Mutex<Double>(0)

    public init() {}

    public func set(_ newValue: Double) { value.withLock { $0 = newValue } }
    public var current: Double { value.withLock { $0 } }
}

/// Observations counted into cumulative buckets, with their sum and count.
public final class Histogram: Sendable {
    /// The upper bounds, ascending; `+Inf` is implied.
    public let bounds: [Double]
    private let state: Mutex<(buckets: [Int], sum: Double, count: Int)>

    public init(bounds: [Double]) {
        self.bounds = bounds
        state = Mutex((Array(repeating: 0, count: bounds.count), 0, 0))
    }

    public func observe(_ value: Double) {
        // Buckets are stored per bound, not cumulatively: one increment per observation.
        let index = bounds.firstIndex { value <= $0 }
        state.withLock { state in
            if let index { state.buckets[index] += 1 }
            state.sum += value
            state.count += 1
        }
    }

    public func observe(_ duration: Duration) {
        let parts = duration.components
        observe(Double(parts.seconds) + Double(parts.attoseconds) / 1e18)
    }

    /// Observations counted apart, without the lock (a loop pass's, say), for `add(_:)` to add
    /// at once: one lock for many observations. Durations are counted in nanoseconds
    /// (`MonotonicNanos`), compared with the bounds as integers.
    public struct Tally: Sendable {
        let bounds: [Double]
        /// The bounds in nanoseconds.
        private let nanosecondBounds: [UInt64]
        private(set) var buckets: [Int]
        private(set) var sum: Double = 0
        private(set) var count = 0

        public init(bounds: [Double]) {
            self.bounds = bounds
            nanosecondBounds = bounds.map { UInt64(($0 * 1e9).rounded()) }
            buckets = Array(repeating: 0, count: bounds.count)
        }

        public mutating func observe(nanoseconds: UInt64) {
            if let index = nanosecondBounds.firstIndex(where: { nanoseconds <= $0 }) { buckets[index] += 1 }
            sum += Double(nanoseconds) / 1e9
            count += 1
        }

        /// Back to no observations, keeping its storage.
        mutating func reset() {
            for index in buckets.indices { buckets[index] = 0 }
            sum = 0
            count = 0
        }
    }

    /// Adds what `tally` counted (taken with the same bounds) and empties it.
    public func add(_ tally: inout Tally) {
        guard tally.count > 0 else { return }
        precondition(tally.bounds == bounds, "a tally adds only to a histogram of its bounds")
        state.withLock { state in
            for index in tally.buckets.indices { state.buckets[index] += tally.buckets[index] }
            state.sum += tally.sum
            state.count += tally.count
        }
        tally.reset()
    }

    /// The cumulative count per bound, the sum and the count.
    public var snapshot: (cumulative: [Int], sum: Double, count: Int) {
        let (buckets, sum, count) = state.withLock { $0 }
        var running = 0
        return (
            buckets.map {
                running += $0; return running
            }, sum, count
        )
    }
}

/// One metric family in the Prometheus text format: a name, a help line, a type, and children by
/// label values (one unlabelled child when there are no labels).
public final class MetricFamily<Child: Sendable>: Sendable {
    public let name: String
    public let help: String
    public let labelNames: [String]
    private let make: @Sendable () -> Child
    private let children = Mutex<[[String]: Child]>([:])

    init(name: String, help: String, labelNames: [String], make: @escaping @Sendable () -> Child) {
        self.name = name
        self.help = help
        self.labelNames = labelNames
        self.make = make
    }

    /// The child for these label values (in the order of `labelNames`), created on first use.
    public func labels(_ values: String...) -> Child { labels(values) }

    public func labels(_ values: [String]) -> Child {
        children.withLock { children in
            if let child = children[values] { return child }
            let child = make()
            children[values] = child
            return child
        }
    }

    /// Replaces every child (for gauges whose label sets come and go, like a consumer's partitions).
    public func replaceAll(_ values: [[String]: Child]) { children.withLock { $0 = values } }

    /// Every child with its label values, sorted by them.
    public var members: [(labels: [String], child: Child)] {
        children.withLock { $0.map { ($0.key, $0.value) } }.sorted { $0.labels.lexicographicallyPrecedes($1.labels) }
    }
}

/// A set of metric families exposed as Prometheus text (version 0.0.4): every family with its
/// `# HELP` and `# TYPE` lines, families in registration order, children sorted by labels.
public final class MetricsRegistry: Sendable {
    private enum Entry: Sendable {
        case counter(MetricFamily<Counter>)
        case gauge(MetricFamily<Gauge>)
        case histogram(MetricFamily<Histogram>)
        /// Values read when scraped (process figures, a pool's connections in use).
        case collected(
            name: String, help: String, type: String, labelNames: [String], read: @Sendable () -> [([String], Double)])
    }

    private let entries = Mutex<[Entry]>([])

    public init() {}

    public func counter(_ name: String, help: String, labels: [String] = []) -> MetricFamily<Counter> {
        let family = MetricFamily(name: name, help: help, labelNames: labels) { Counter() }
        entries.withLock { $0.append(.counter(family)) }
        return family
    }

    public func gauge(_ name: String, help: String, labels: [String] = []) -> MetricFamily<Gauge> {
        let family = MetricFamily(name: name, help: help, labelNames: labels) { Gauge() }
        entries.withLock { $0.append(.gauge(family)) }
        return family
    }

    public func histogram(_ name: String, help: String, labels: [String] = [], bounds: [Double])
        -> MetricFamily<Histogram>
    {
        let family = MetricFamily(name: name, help: help, labelNames: labels) { Histogram(bounds: bounds) }
        entries.withLock { $0.append(.histogram(family)) }
        return family
    }

    /// A family whose samples are read at each scrape; `type` is `counter` or `gauge`.
    public func collect(
        _ name: String, help: String, type: String, labels: [String] = [],
        _ read: @escaping @Sendable () -> [([String], Double)]
    ) {
        entries.withLock {
            $0.append(.collected(name: name, help: help, type: type, labelNames: labels, read: read))
        }
    }

    /// The exposition text.
    public func text() -> String {
        var lines: [String] = []
        for entry in entries.withLock({ $0 }) {
            switch entry {
            case .counter(let family):
                Self.header(&lines, family.name, family.help, "counter")
                for (values, counter) in family.members {
                    lines.append(family.name + Self.labels(family.labelNames, values) + " \(counter.count)")
                }
            case .gauge(let family):
                Self.header(&lines, family.name, family.help, "gauge")
                for (values, gauge) in family.members {
                    lines.append(
                        family.name + Self.labels(family.labelNames, values) + " " + Self.number(gauge.current))
                }
            case .histogram(let family):
                Self.header(&lines, family.name, family.help, "histogram")
                for (values, histogram) in family.members {
                    let (cumulative, sum, count) = histogram.snapshot
                    for (bound, total) in zip(histogram.bounds, cumulative) {
                        let le = Self.labels(family.labelNames + ["le"], values + [Self.number(bound)])
                        lines.append(family.name + "_bucket" + le + " \(total)")
                    }
                    let infinity = Self.labels(family.labelNames + ["le"], values + ["+Inf"])
                    lines.append(family.name + "_bucket" + infinity + " \(count)")
                    let plain = Self.labels(family.labelNames, values)
                    lines.append(family.name + "_sum" + plain + " " + Self.number(sum))
                    lines.append(family.name + "_count" + plain + " \(count)")
                }
            case .collected(let name, let help, let type, let labelNames, let read):
                Self.header(&lines, name, help, type)
                for (values, value) in read() {
                    lines.append(name + Self.labels(labelNames, values) + " " + Self.number(value))
                }
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    private static func header(_ lines: inout [String], _ name: String, _ help: String, _ type: String) {
        let escaped = help.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n")
        lines.append("# HELP \(name) \(escaped)")
        lines.append("# TYPE \(name) \(type)")
    }

    static func labels(_ names: [String], _ values: [String]) -> String {
        guard !names.isEmpty else { return "" }
        let pairs = zip(names, values).map { name, value in
            let escaped =
                value
                .replacingOccurrences(of: "\\", with: "\\\\")
                .replacingOccurrences(of: "\"", with: "\\\"")
                .replacingOccurrences(of: "\n", with: "\\n")
            return "\(name)=\"\(escaped)\""
        }
        return "{" + pairs.joined(separator: ",") + "}"
    }

    static func number(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }
}

/// The standard `process_*` figures of this process, read from `/proc` at each scrape.
public enum ProcessMetrics {
    /// Registers `process_cpu_seconds_total`, `process_resident_memory_bytes`,
    /// `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds` and
    /// `process_start_time_seconds`. Families whose figure cannot be read (no `/proc`) stay empty.
    public static func register(in registry: MetricsRegistry) {
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let pageSize = Double(sysconf(Int32(_SC_PAGESIZE)))
        registry.collect(
            "process_cpu_seconds_total", help: "User and system CPU time spent, in seconds.", type: "counter"
        ) {
            guard let fields = statFields(), fields.count > 14, let user = Double(fields[13]),
                let system = Double(fields[14]), ticks > 0
            else { return [] }
            return [([], (user + system) / ticks)]
        }
        registry.collect("process_resident_memory_bytes", help: "Resident memory size, in bytes.", type: "gauge") {
            guard let fields = statFields(), fields.count > 23, let pages = Double(fields[23]) else { return [] }
            return [([], pages * pageSize)]
        }
        registry.collect("process_virtual_memory_bytes", help: "Virtual memory size, in bytes.", type: "gauge") {
            guard let fields = statFields(), fields.count > 22, let bytes = Double(fields[22]) else { return [] }
            return [([], bytes)]
        }
        registry.collect("process_open_fds", help: "Open file descriptors.", type: "gauge") {
            guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return [] }
            return [([], Double(entries.count))]
        }
        registry.collect("process_max_fds", help: "The limit on open file descriptors.", type: "gauge") {
            var limit = rlimit()
            guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return [] }
            return [([], Double(limit.rlim_cur))]
        }
        let bootTime = bootTimeSeconds()
        registry.collect(
            "process_start_time_seconds", help: "When the process started, in seconds since the Unix epoch.",
            type: "gauge"
        ) {
            guard let bootTime, let fields = statFields(), fields.count > 21, let start = Double(fields[21]), ticks > 0
            else { return [] }
            return [([], bootTime + start / ticks)]
        }
    }

    /// `/proc/self/stat` split into fields, numbered as proc(5) numbers them minus one; the
    /// command name (field 2, in parentheses, may hold spaces) is skipped over.
    static func statFields() -> [Substring]? {
        guard let text = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return nil }
        let rest = text[text.index(after: close)...].split(separator: " ", omittingEmptySubsequences: true)
        // rest[0] is field 3 (state): pad so that index i is field i + 1.
        return ["pid", "comm"] + rest
    }

    private static func bootTimeSeconds() -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("btime ") {
            return Double(line.dropFirst(6).trimmingCharacters(in: .whitespaces))
        }
        return nil
    }
}
