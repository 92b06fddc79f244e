import Foundation
import StrictJSON
import Synchronization

/// A structured logger in swift-log's shape: a label, a level, metadata, and a handler that writes.
///
/// Metadata keys are dot-separated (`auth.method`). Never put a secret in a message or in metadata.
public struct Logger: Sendable {
    /// Severity, ordered from the most verbose.
    public enum Level: String, Sendable, Comparable, CaseIterable {
        case debug, info, warning, error

        private var rank: Int {
            switch self {
            case .debug: 0
            case .info: 1
            case .warning: 2
            case .error: 3
            }
        }

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rank < rhs.rank }
    }

    /// Structured values attached to a log line.
    public typealias Metadata = [String: String]

    /// The component that logs (`auth.worker`, `kafka.consumer`, …).
    public let label: String
    /// Lines below this level are dropped. Default: `.info`.
    public var logLevel: Level
    /// Metadata added to every line of this logger.
    public var metadata: Metadata = [:]
    private let handler: any LogHandler

    /// - Parameters:
    ///   - label: the component name.
    ///   - level: the minimum level written.
    ///   - handler: where lines go; default JSON lines on standard output.
    public init(label: String, level: Level = .info, handler: any LogHandler = JSONLinesLogHandler.standardOutput) {
        self.label = label
        self.logLevel = level
        self.handler = handler
    }

    /// A copy with a different label and the same handler, level and metadata.
    public func child(label: String) -> Logger {
        var copy = Logger(label: label, level: logLevel, handler: handler)
        copy.metadata = metadata
        return copy
    }

    /// Writes a line at `level` when enabled.
    public func log(_ level: Level, _ message: @autoclosure () -> String, metadata extra: Metadata = [:]) {
        guard level >= logLevel else { return }
        handler.write(
            LogRecord(date: Date(), level: level, label: label, message: message(), metadata: withLoggers(extra)))
    }

    /// Writes one line for each of `lines` at `level`, when enabled, all stamped now and handed
    /// to the handler at once (`JSONLinesLogHandler` writes them in one call): for a loop that
    /// finishes many requests in a pass and logs a line for each.
    public func log(_ level: Level, lines: [(message: String, metadata: Metadata)]) {
        guard level >= logLevel, !lines.isEmpty else { return }
        let now = Date()
        handler.write(
            lines.map { line in
                LogRecord(
                    date: now, level: level, label: label, message: line.message,
                    metadata: withLoggers(line.metadata))
            })
    }

    /// A line's metadata over this logger's.
    private func withLoggers(_ line: Metadata) -> Metadata {
        guard !metadata.isEmpty else { return line }
        return metadata.merging(line) { _, own in own }
    }

    public func debug(_ message: @autoclosure () -> String, metadata: Metadata = [:]) {
        log(.debug, message(), metadata: metadata)
    }

    public func info(_ message: @autoclosure () -> String, metadata: Metadata = [:]) {
        log(.info, message(), metadata: metadata)
    }

    public func warning(_ message: @autoclosure () -> String, metadata: Metadata = [:]) {
        log(.warning, message(), metadata: metadata)
    }

    public func error(_ message: @autoclosure () -> String, metadata: Metadata = [:]) {
        log(.error, message(), metadata: metadata)
    }
}

/// One log line before formatting.
public struct LogRecord: Sendable {
    public var date: Date
    public var level: Logger.Level
    public var label: String
    public var message: String
    public var metadata: Logger.Metadata
}

/// Where log records go.
public protocol LogHandler: Sendable {
    /// Formats and writes one record; must be safe to call from any thread.
    func write(_ record: LogRecord)
    /// Formats and writes records in their order; by default one `write` each.
    func write(_ records: [LogRecord])
}

extension LogHandler {
    public func write(_ records: [LogRecord]) {
        for record in records { write(record) }
    }
}

/// Writes one JSON object per line: `{"ts":…,"level":…,"logger":…,"msg":…,<metadata>}`.
public final class JSONLinesLogHandler: LogHandler, Sendable {
    /// The process's standard output.
    public static let standardOutput = JSONLinesLogHandler(fileDescriptor: STDOUT_FILENO)
    /// The process's standard error.
    public static let standardError = JSONLinesLogHandler(fileDescriptor: STDERR_FILENO)

    private let fileDescriptor: Int32
    private let lock = Mutex(())

    /// - Parameter fileDescriptor: an open descriptor the handler writes to; it is not closed.
    public init(fileDescriptor: Int32) {
        self.fileDescriptor = fileDescriptor
    }

    public func write(_ record: LogRecord) {
        var line = Self.format(record)
        line.append(0x0A)
        output(line)
    }

    /// The records' lines in one buffer and one `write` (a pass of the request loop logs a line
    /// for each request it finished); records stamped alike share one formatted timestamp.
    public func write(_ records: [LogRecord]) {
        var lines: [UInt8] = []
        lines.reserveCapacity(records.count * 256)
        var stamp: (date: Date, text: String)?
        for record in records {
            if stamp?.date != record.date { stamp = (record.date, Self.timestamp(record.date)) }
            lines.append(contentsOf: Self.format(record, timestamp: stamp?.text))
            lines.append(0x0A)
        }
        output(lines)
    }

    private func output(_ bytes: [UInt8]) {
        lock.withLock { _ in
            bytes.withUnsafeBytes { raw in
                guard let base = raw.baseAddress else { return }
                var offset = 0
                while offset < raw.count {
                    let written = Glibc.write(fileDescriptor, base + offset, raw.count - offset)
                    if written <= 0 { break }
                    offset += written
                }
            }
        }
    }

    /// The JSON bytes of one record, without the newline: members in sorted key order, written
    /// directly (a line per request is on the hot path).
    /// - Parameter timestamp: the record's date formatted, when the caller has it already.
    public static func format(_ record: LogRecord, timestamp formatted: String? = nil) -> [UInt8] {
        // The metadata sorted by key, the four members of every line merged in at their places
        // (they win over metadata of the same name): a line per request is on the hot path, so
        // no set of the four names to hash each key against, and only the metadata sorted.
        var sorted: [(key: String, value: String)] = []
        sorted.reserveCapacity(record.metadata.count)
        for (key, value) in record.metadata where !isFixed(key) { sorted.append((key, value)) }
        sorted.sort { $0.key < $1.key }
        var next = 0
        var writer = JSONWriter(capacity: 256)
        writer.object { out in
            func metadata(before fixed: String) {
                while next < sorted.count, sorted[next].key < fixed {
                    out.key(sorted[next].key)
                    out.string(sorted[next].value)
                    next += 1
                }
            }
            metadata(before: "level")
            out.member("level", record.level.rawValue)
            metadata(before: "logger")
            out.member("logger", record.label)
            metadata(before: "msg")
            out.member("msg", record.message)
            metadata(before: "ts")
            out.member("ts", formatted ?? timestamp(record.date))
            while next < sorted.count {
                out.key(sorted[next].key)
                out.string(sorted[next].value)
                next += 1
            }
        }
        return writer.bytes
    }

    /// The names of the four members every line has, in sorted order: level, logger, msg, ts.
    private static func isFixed(_ key: String) -> Bool {
        switch key {
        case "level", "logger", "msg", "ts": true
        default: false
        }
    }

    /// `2026-11-29T12:00:00.123Z`.
    static func timestamp(_ date: Date) -> String { RFC3339.format(date, milliseconds: true) }
}

/// Keeps records in memory, for tests that assert on what was logged.
public final class InMemoryLogHandler: LogHandler, Sendable {
    private let storage = Mutex<[LogRecord]>([])

    public init() {}

    public func write(_ record: LogRecord) {
        storage.withLock { $0.append(record) }
    }

    /// Every record written so far, oldest first.
    public var records: [LogRecord] { storage.withLock { $0 } }

    /// Every record as its JSON line, for searching the formatted output.
    public var lines: [String] {
        records.map { String(decoding: JSONLinesLogHandler.format($0), as: UTF8.self) }
    }
}
