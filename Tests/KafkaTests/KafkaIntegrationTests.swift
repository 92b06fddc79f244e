import Foundation
import Kafka
import Synchronization
import Testing

@testable import TestSupport

@Suite(.requiresServices, .timeLimit(.minutes(4))) struct KafkaIntegrationTests {
    func producer() throws -> KafkaProducer {
        try KafkaProducer(
            configuration: KafkaProducerConfiguration(
                kafka: KafkaConfiguration(bootstrapServers: [try #require(IntegrationEnvironment.kafkaBrokers)])),
            logger: IntegrationEnvironment.quietLogger)
    }

    func consumer(topic: String, group: String) throws -> KafkaConsumer {
        var config = KafkaConsumerConfiguration(
            kafka: KafkaConfiguration(bootstrapServers: [try #require(IntegrationEnvironment.kafkaBrokers)]),
            groupID: group)
        config.sessionTimeout = .seconds(6)
        return try KafkaConsumer(configuration: config, topics: [topic], logger: IntegrationEnvironment.quietLogger)
    }

    func poll(_ consumer: KafkaConsumer, until count: Int, timeout: Duration = .seconds(30)) async throws
        -> [KafkaMessage]
    {
        var messages: [KafkaMessage] = []
        let deadline = ContinuousClock.now + timeout
        while messages.count < count, ContinuousClock.now < deadline {
            messages += try await consumer.poll(maxMessages: 100, timeout: .milliseconds(200))
        }
        return messages
    }

    @Test func producedRecordsArriveWithKeysHeadersAndOrder() async throws {
        let topics = try await IntegrationEnvironment.makeTopics(partitions: 2)
        let producer = try producer()
        let records = (0..<20).map { index in
            ProducerRecord(
                topic: topics.requests, key: Array("key-\(index % 3)".utf8), value: Array("value-\(index)".utf8),
                headers: [KafkaHeader(key: "h", string: "\(index)"), KafkaHeader(key: "empty", value: nil)])
        }
        let reports = try await producer.send(records)
        #expect(reports.count == 20)
        #expect(reports.allSatisfy { $0.topic == topics.requests && $0.offset >= 0 })

        let consumer = try consumer(topic: topics.requests, group: IntegrationEnvironment.uniqueName("g"))
        let messages = try await poll(consumer, until: 20)
        #expect(messages.count == 20)
        let first = try #require(messages.first { $0.value == Array("value-0".utf8) })
        #expect(first.keyString == "key-0")
        #expect(first.headers.string("h") == "0")
        #expect(first.headers.contains(KafkaHeader(key: "empty", value: nil)))
        // Per key, values arrive in the order they were produced.
        for key in ["key-0", "key-1", "key-2"] {
            let values = messages.filter { $0.keyString == key }.map {
                Int(String(decoding: $0.value.dropFirst(6), as: UTF8.self)) ?? -1
            }
            #expect(values == values.sorted())
        }
        await consumer.close()
        await producer.shutdown()
    }

    @Test func aGroupResumesAfterTheLastStoredOffset() async throws {
        let topics = try await IntegrationEnvironment.makeTopics(partitions: 2)
        let group = IntegrationEnvironment.uniqueName("g")
        let producer = try producer()
        try await producer.send((0..<10).map { ProducerRecord(topic: topics.requests, key: nil, value: [UInt8($0)]) })

        // The first member stores offsets for only what it "processed": the first 10.
        let first = try consumer(topic: topics.requests, group: group)
        let firstBatch = try await poll(first, until: 10)
        #expect(firstBatch.count == 10)
        first.storeOffsets(firstBatch)
        await first.close()  // commits what was stored

        try await producer.send((10..<15).map { ProducerRecord(topic: topics.requests, key: nil, value: [UInt8($0)]) })
        let second = try consumer(topic: topics.requests, group: group)
        let secondBatch = try await poll(second, until: 5)
        let extra = try await second.poll(maxMessages: 100, timeout: .seconds(1))
        #expect(Set((secondBatch + extra).map { $0.value[0] }) == Set(10..<15))
        await second.close()
        await producer.shutdown()
    }

    @Test func unstoredMessagesAreRedelivered() async throws {
        let topics = try await IntegrationEnvironment.makeTopics(partitions: 1)
        let group = IntegrationEnvironment.uniqueName("g")
        let producer = try producer()
        try await producer.send((0..<5).map { ProducerRecord(topic: topics.requests, key: nil, value: [UInt8($0)]) })
        let first = try consumer(topic: topics.requests, group: group)
        let seen = try await poll(first, until: 5)
        first.storeOffsets(Array(seen.prefix(2)))
        await first.close()

        let second = try consumer(topic: topics.requests, group: group)
        let replayed = try await poll(second, until: 3)
        #expect(replayed.map { $0.value[0] } == [2, 3, 4])
        await second.close()
        await producer.shutdown()
    }

    /// Messages carry the assignment they were read under: a rebalance ends it (the revocation
    /// reports the number it ended at) and the partition's next assignment reads under a higher
    /// one, so the pipeline can tell a message of a new assignment from one of an old.
    @Test func aRebalanceNumbersTheAssignmentsMessagesAreReadUnder() async throws {
        let topics = try await IntegrationEnvironment.makeTopics(partitions: 2)
        let group = IntegrationEnvironment.uniqueName("g")
        let producer = try producer()
        func send(_ range: Range<Int>) async throws {
            try await producer.send(
                range.map {
                    ProducerRecord(topic: topics.requests, partition: Int32($0 % 2), key: nil, value: [UInt8($0)])
                })
        }
        try await send(0..<4)
        let first = try consumer(topic: topics.requests, group: group)
        let before = try await poll(first, until: 4)
        #expect(Set(before.map(\.partition)) == [0, 1])
        let initial = Dictionary(before.map { ($0.partition, $0.assignment) }) { $1 }
        #expect(initial.values.allSatisfy { $0 >= 1 })

        // A second member joins: the eager rebalance revokes both partitions from the first.
        let second = try consumer(topic: topics.requests, group: group)
        var revoked: [TopicPartition: Int] = [:]
        // Deadlines far above a rebalance's seconds: the test polls from a cooperative pool the
        // parallel run can keep busy for over a minute.
        let deadline = ContinuousClock.now + .seconds(150)
        while revoked.count < 2, ContinuousClock.now < deadline {
            _ = try await second.poll(maxMessages: 100, timeout: .milliseconds(100))
            _ = try await first.poll(maxMessages: 100, timeout: .milliseconds(100))
            revoked.merge(first.takeRevokedPartitions()) { max($0, $1) }
        }
        #expect(revoked.count == 2, "both partitions revoked from the first member")
        for (partition, ended) in revoked {
            #expect(ended > (initial[partition.partition] ?? .max), "the revocation ends the assignment read under")
        }
        // Whatever the first member reads now is of a later assignment than the one that ended.
        try await send(4..<12)
        var after: [KafkaMessage] = []
        let until = ContinuousClock.now + .seconds(150)
        while ContinuousClock.now < until, after.isEmpty {
            _ = try await second.poll(maxMessages: 100, timeout: .milliseconds(100))
            after += try await first.poll(maxMessages: 100, timeout: .milliseconds(100))
        }
        #expect(!after.isEmpty, "the first member keeps one partition")
        for message in after {
            #expect(message.assignment > (revoked[message.topicPartition] ?? .max))
        }
        await first.close()
        await second.close()
        await producer.shutdown()
    }

    /// The pipeline polls with a long timeout and is woken when background work finishes: a wake
    /// must end a waiting poll early, and one sent while nobody polls must end the next poll.
    @Test func wakeEndsAWaitingPoll() async throws {
        let topics = try await IntegrationEnvironment.makeTopics(partitions: 1)
        let consumer = try consumer(topic: topics.requests, group: IntegrationEnvironment.uniqueName("g"))
        // Joining the group happens in the background: let it settle so polls only wait.
        _ = try await consumer.poll(maxMessages: 1, timeout: .seconds(4))

        // The waker sleeps on a thread of its own, not on the cooperative pool, which the parallel
        // suite keeps busy for tens of seconds at its start (10.6 s once, 30 s in CI). The test
        // itself resumes on that pool, so the bounds are loose: what they catch is a poll that
        // waits out its 600 s timeout (the suite's time limit ends it first).
        let waker = Thread {
            usleep(300_000)
            consumer.wake()
        }
        var started = ContinuousClock.now
        waker.start()
        _ = try await consumer.poll(maxMessages: 1, timeout: .seconds(600))
        #expect(ContinuousClock.now - started < .seconds(150))

        consumer.wake()
        started = ContinuousClock.now
        _ = try await consumer.poll(maxMessages: 1, timeout: .seconds(600))
        #expect(ContinuousClock.now - started < .seconds(150))

        await consumer.close()
        consumer.wake()  // After close: nothing to wake, and nothing breaks.
    }

    @Test func badConfigurationIsATypedError() {
        var kafka = KafkaConfiguration(bootstrapServers: ["127.0.0.1:1"])
        kafka.properties = ["no.such.property": "1"]
        #expect(throws: KafkaError.self) {
            try KafkaProducer(
                configuration: KafkaProducerConfiguration(kafka: kafka), logger: IntegrationEnvironment.quietLogger)
        }
        #expect(throws: KafkaError.self) {
            try KafkaProducer(
                configuration: KafkaProducerConfiguration(kafka: KafkaConfiguration(bootstrapServers: [])),
                logger: IntegrationEnvironment.quietLogger)
        }
    }

    /// A metadata request (a readiness probe) under way when the producer closes finishes before
    /// the client is destroyed: `close` returns only after it (after what is left of its 2 s
    /// timeout against a broker that is not there, at least 1.3 s), and a probe after it answers `closed` without touching
    /// the client. (librdkafka's own destroy waited too; the producer now drains its one metadata
    /// thread first, instead of relying on that for threads it started per probe.)
    ///
    /// On a loaded machine the probe's task may not reach librdkafka before `close` begins; it is
    /// then answered `closed` at once, which tests nothing, and the test tries again with a longer
    /// head start. The wait is timed from the probe's own start, not from the sleep before `close`
    /// (which a busy machine can stretch by a second), and a try whose probe had run more than
    /// 1.4 s when `close` began is tried again: a `close` that did not wait could then pass too.
    @Test func closeWaitsForAMetadataRequestUnderWay() async throws {
        let config = KafkaProducerConfiguration(kafka: KafkaConfiguration(bootstrapServers: ["127.0.0.1:1"]))
        for attempt in 1...5 {
            let producer = try KafkaProducer(configuration: config, logger: IntegrationEnvironment.quietLogger)
            let probe = Task {
                () -> (code: KafkaError.Code?, begun: ContinuousClock.Instant, ended: ContinuousClock.Instant) in
                let begun = ContinuousClock.now
                do {
                    _ = try await producer.describeTopics(["auth.login.requests"], timeout: .seconds(2))
                    return (nil, begun, .now)
                } catch let error as KafkaError {
                    return (error.code, begun, .now)
                } catch {
                    return (nil, begun, .now)
                }
            }
            // About 0.3 - 0.7 s of the probe's 2 s has gone when close begins, unless the machine is busy.
            try await Task.sleep(for: .milliseconds(200 + 100 * attempt))
            let started = ContinuousClock.now
            await producer.shutdown(timeout: .milliseconds(100))
            let closed = ContinuousClock.now
            let outcome = await probe.value
            // Not under way when close began: answered `closed` without starting, or already over.
            if outcome.code == .closed || outcome.ended < started { continue }
            if started - outcome.begun > .milliseconds(1_400) { continue }
            // Close waited for the probe: it returned no sooner than most of the probe's 2 s timeout
            // after the probe began (returning at once, it would be at most about 1.5 s after it).
            #expect(
                closed - outcome.begun > .milliseconds(1_700),
                "close returned \(closed - outcome.begun) after the probe began, with the probe still inside librdkafka"
            )
            await #expect(throws: KafkaError.self) {
                _ = try await producer.describeTopics(["auth.login.requests"], timeout: .seconds(1))
            }
            return
        }
        Issue.record("in five tries, no metadata request was under way when close began")
    }

    /// The name of the calling thread, as the kernel knows it.
    static func threadName() -> String {
        let fd = open("/proc/thread-self/comm", O_RDONLY)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        var name = [UInt8](repeating: 0, count: 32)
        let count = name.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        return String(decoding: name.prefix(max(count, 0)), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test func aDeliveryCallsItsCompletionOnceWithEveryOutcomeInOrder() async throws {
        let topics = try await IntegrationEnvironment.makeTopics(partitions: 1)
        let producer = try producer()
        let records = (0..<5).map { ProducerRecord(topic: topics.requests, key: nil, value: Array("value-\($0)".utf8)) }
        let calls = Mutex<[(outcomes: [Result<DeliveryReport, KafkaError>], thread: String)]>([])
        let (ended, end) = AsyncStream<Void>.makeStream()
        producer.deliver(records) { outcomes in
            calls.withLock { $0.append((outcomes, Self.threadName())) }
            end.yield()
        }
        var iterator = ended.makeAsyncIterator()
        await iterator.next()
        // A second call, if there were one, would come with the next delivery reports served.
        try await producer.send(ProducerRecord(topic: topics.requests, key: nil, value: Array("after".utf8)))
        let seen = calls.withLock { $0 }
        #expect(seen.count == 1)
        let offsets = try #require(seen.first).outcomes.map { try $0.get().offset }
        #expect(offsets.count == 5 && offsets == offsets.sorted() && Set(offsets).count == 5)
        // Called where delivery reports are served, not on a task resumed elsewhere.
        #expect(seen.first?.thread == "kafka-producer")

        // Closed, nothing can be queued: the completion is called at once, each record refused.
        producer.close(timeout: .seconds(5))
        let refused = Mutex<[Result<DeliveryReport, KafkaError>]?>(nil)
        producer.deliver(records) { outcomes in refused.withLock { $0 = outcomes } }
        let outcomes = try #require(refused.withLock { $0 })
        #expect(outcomes.count == 5)
        #expect(outcomes.allSatisfy { if case .failure(let error) = $0 { error.code == .closed } else { false } })
    }

    @Test func deliveryToAnUnreachableBrokerFailsRetriably() async throws {
        var config = KafkaProducerConfiguration(kafka: KafkaConfiguration(bootstrapServers: ["127.0.0.1:1"]))
        config.deliveryTimeout = .seconds(1)
        let producer = try KafkaProducer(configuration: config, logger: IntegrationEnvironment.quietLogger)
        do {
            try await producer.send(ProducerRecord(topic: "nowhere", key: nil, value: [1]))
            Issue.record("expected a delivery failure")
        } catch let error as KafkaError {
            #expect(error.code == .delivery)
            #expect(error.isRetriable)
        }
        producer.close(timeout: .seconds(1))
    }
}
