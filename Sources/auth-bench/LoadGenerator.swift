import Foundation
import Kafka
import ServiceKit
import Synchronization

// The end-to-end benchmark's paced load and its echo floor, on the worker's own Kafka client:
// Debian's librdkafka, as the worker links it (the Python client bundles a newer one of its own),
// so the floor the worker is compared with is what the same client gets from the same broker.
// (Not to save CPU: at 5,600 requests/s, producing with a 1 ms linger costs a third of a core in
// librdkafka's thread wake-ups from either language.)

/// Milliseconds since the epoch: the clock librdkafka stamps a record's create time with.
private func wallClockMilliseconds() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
}

private func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

private func benchLogger() -> Logger { Logger(label: "bench", level: .error, handler: InMemoryLogHandler()) }

/// `auth-bench pace BROKERS REQUESTS RESULTS RATE BODIES OUT`
///
/// BODIES holds one request a line, `key<TAB>value`. The first is sent at once and its result
/// awaited (the responder has joined its group); then `ready` is printed and a line is read from
/// standard input (the benchmark reads its CPU counters in between). The rest are sent at RATE a
/// second, each when it is due (sleeping only when a millisecond or more ahead), and `sent
/// ACHIEVED_RATE` is printed once they all are. When every one has a result, or a minute after
/// the last was sent, OUT gets a line a paced request in the order sent, `SENT_MS RESULT_MS`
/// (the result's create time; -1 when none came), and `done DUPLICATES UNANSWERED CPU_SECONDS` is
/// printed (the CPU this process used, user and system).
func runPacedLoad(_ arguments: [String]) async throws {
    guard arguments.count == 6, let rate = Double(arguments[3]), rate > 0 else {
        throw BenchmarkFailure(reason: "usage: auth-bench pace BROKERS REQUESTS RESULTS RATE BODIES OUT")
    }
    let (brokers, requestsTopic, resultsTopic, bodiesPath, outPath) =
        (arguments[0], arguments[1], arguments[2], arguments[4], arguments[5])
    let (keys, values) = try readBodies(bodiesPath)
    let index = Dictionary(keys.enumerated().map { ($0.element, $0.offset) }, uniquingKeysWith: { first, _ in first })

    let (consumer, producer) = try pacedClients(brokers: brokers, resultsTopic: resultsTopic)

    // Results' create times by request, read on a task of their own.
    let board = ResultBoard(count: keys.count)
    let reader = Task {
        while board.reading.load(ordering: .relaxed) {
            for message in try await consumer.poll(maxMessages: 1000, timeout: .milliseconds(100)) {
                guard let key = message.key, let position = index[key] else { continue }
                let stamp = message.timestamp ?? wallClockMilliseconds()
                board.results.withLock { results in
                    if results.stamps[position] < 0 {
                        results.stamps[position] = stamp
                        results.answered += 1
                    } else {
                        results.duplicates += 1
                    }
                }
            }
        }
    }
    func answered() -> Int { board.results.withLock { $0.answered } }
    func send(_ position: Int) -> Int64 {
        let stamp = wallClockMilliseconds()
        producer.deliver([ProducerRecord(topic: requestsTopic, key: keys[position], value: values[position])]) { _ in }
        return stamp
    }

    var sent = [Int64](repeating: -1, count: keys.count)
    sent[0] = send(0)
    let warmDeadline = ContinuousClock.now + .seconds(60)
    while answered() == 0 {
        guard ContinuousClock.now < warmDeadline else { throw BenchmarkFailure(reason: "the responder never answered") }
        try await Task.sleep(for: .milliseconds(10))
    }
    say("ready")
    _ = readLine()

    let interval = 1 / rate
    let start = ContinuousClock.now
    func secondsSinceStart() -> Double {
        let elapsed = ContinuousClock.now - start
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }
    for position in 1..<keys.count {
        // In steps of at most a second: a slow rate's delay would not fit `usleep`'s microseconds.
        var delay = Double(position - 1) * interval - secondsSinceStart()
        while delay > 0.001 {
            usleep(useconds_t(min(delay, 1) * 1_000_000))
            delay = Double(position - 1) * interval - secondsSinceStart()
        }
        sent[position] = send(position)
    }
    try producer.flush(timeout: .seconds(30))
    say("sent \(Double(keys.count - 1) / max(secondsSinceStart(), 1e-9))")

    let deadline = ContinuousClock.now + .seconds(60)
    while answered() < keys.count, ContinuousClock.now < deadline {
        try await Task.sleep(for: .milliseconds(20))
    }
    board.reading.store(false, ordering: .relaxed)
    try await reader.value
    await consumer.close()
    producer.close()
    try report(board.results.withLock { $0 }, sent: sent, count: keys.count, to: outPath)
}

/// The results the paced load has read: each request's result's create time (-1 until it came).
private final class ResultBoard: Sendable {
    let results: Mutex<(stamps: [Int64], answered: Int, duplicates: Int)>
    let reading = Atomic(true)

    init(count: Int) { results = Mutex((stamps: [Int64](repeating: -1, count: count), answered: 0, duplicates: 0)) }
}

/// Set until standard input closes.
private final class RunningFlag: Sendable {
    let value = Atomic(true)
}

/// `auth-bench echo BROKERS REQUESTS RESULTS FETCH_WAIT_MS`: answers each request on RESULTS at
/// once, with the same key and no work, through the same broker and fetch wait as the worker,
/// until standard input closes. Its latency is the broker's floor: what any consumer gets here.
func runEcho(_ arguments: [String]) async throws {
    guard arguments.count == 4, let fetchWait = Int64(arguments[3]), fetchWait >= 0 else {
        throw BenchmarkFailure(reason: "usage: auth-bench echo BROKERS REQUESTS RESULTS FETCH_WAIT_MS")
    }
    let kafka = KafkaConfiguration(bootstrapServers: arguments[0].split(separator: ",").map(String.init))
    var consumerConfiguration = KafkaConsumerConfiguration(kafka: kafka, groupID: "echo-\(UUID().uuidString)")
    consumerConfiguration.fetchWaitMax = .milliseconds(fetchWait)
    consumerConfiguration.sessionTimeout = .seconds(6)
    let consumer = try KafkaConsumer(
        configuration: consumerConfiguration, topics: [arguments[1]], logger: benchLogger())
    var producerConfiguration = KafkaProducerConfiguration(kafka: kafka)
    producerConfiguration.linger = .zero
    producerConfiguration.compression = "none"
    let producer = try KafkaProducer(configuration: producerConfiguration, logger: benchLogger())
    let answer = Array(#"{"data":{"status":"ok"}}"#.utf8)
    let running = RunningFlag()
    Thread.detachNewThread {
        while readLine() != nil {}
        running.value.store(false, ordering: .relaxed)
    }
    while running.value.load(ordering: .relaxed) {
        let records = try await consumer.poll(maxMessages: 500, timeout: .milliseconds(50)).map {
            ProducerRecord(topic: arguments[2], key: $0.key, value: answer)
        }
        if !records.isEmpty { producer.deliver(records) { _ in } }
    }
    try? producer.flush(timeout: .seconds(10))
    await consumer.close()
    producer.close()
}

/// The paced load's bodies: one request a line, `key<TAB>value`, a warm-up and at least one more.
private func readBodies(_ path: String) throws -> (keys: [[UInt8]], values: [[UInt8]]) {
    var keys: [[UInt8]] = []
    var values: [[UInt8]] = []
    for line in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n") {
        guard let tab = line.firstIndex(of: "\t") else {
            throw BenchmarkFailure(reason: "\(path): a line without a tab")
        }
        keys.append(Array(line[..<tab].utf8))
        values.append(Array(line[line.index(after: tab)...].utf8))
    }
    guard keys.count >= 2 else {
        throw BenchmarkFailure(reason: "\(path): a warm-up and paced requests expected")
    }
    return (keys, values)
}

/// The paced load's reader of results and its producer of requests.
private func pacedClients(brokers: String, resultsTopic: String) throws -> (KafkaConsumer, KafkaProducer) {
    let kafka = KafkaConfiguration(bootstrapServers: brokers.split(separator: ",").map(String.init))
    var consumerConfiguration = KafkaConsumerConfiguration(kafka: kafka, groupID: "pace-\(UUID().uuidString)")
    // The reader's own latency does not count (results are timed by their create time), so it
    // waits long on fetches and leaves the broker's CPU to the system under test.
    consumerConfiguration.fetchWaitMax = .milliseconds(200)
    consumerConfiguration.sessionTimeout = .seconds(6)
    let consumer = try KafkaConsumer(
        configuration: consumerConfiguration, topics: [resultsTopic], logger: benchLogger())
    var producerConfiguration = KafkaProducerConfiguration(kafka: kafka)
    // A gateway's own batching counts as latency: kept to a millisecond.
    producerConfiguration.linger = .milliseconds(1)
    producerConfiguration.compression = "none"
    let producer = try KafkaProducer(configuration: producerConfiguration, logger: benchLogger())
    return (consumer, producer)
}

/// Writes each paced request's send and result times to `path`, and says what came of them.
private func report(
    _ final: (stamps: [Int64], answered: Int, duplicates: Int), sent: [Int64], count: Int, to path: String
) throws {
    var out = ""
    for position in 1..<count { out += "\(sent[position]) \(final.stamps[position])\n" }
    try out.write(toFile: path, atomically: true, encoding: .utf8)
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    let cpu = [usage.ru_utime, usage.ru_stime].reduce(0.0) { $0 + Double($1.tv_sec) + Double($1.tv_usec) / 1e6 }
    say("done \(final.duplicates) \(count - final.answered) \(cpu)")
}
