import AuthCrypto
import AuthDomain
import AuthStore
import Foundation
import JOSE
import Kafka
import Messages
import PGStore
import ServiceKit
import Synchronization

/// The consume loop: login requests and provider notifications, in batches, through stages.
///
/// Per poll (whatever is there, up to `AUTH_BATCH_MAX`; it never waits to fill a batch):
/// 1. decode every message; what cannot be answered goes to the dead-letter topic, what is
///    invalid is answered `malformed_request`;
/// 2. look up every request id in one query: a processed request is answered again with its kept
///    result, a reused id with other content is refused, a late request is refused;
/// 3. prepare the rest in parallel (token checks, signing, password hashing on its own pool);
/// 4. write every prepared request in one PostgreSQL transaction (`PostgresStore.runBatch`);
/// 5. publish results, events and dead letters in one producer batch;
/// 6. store the offsets of what finished.
///
/// Under light load, steps 2 to 5 run in one task on a free writer's thread, the lookup in the
/// write transaction's first round trip (`writeWithLookup`), the records published as soon as it
/// commits.
///
/// Work that is slow (a password hash, a key fetch, a retry) does not hold the batch: it joins a
/// later batch when done. Per partition and key, requests are still written in order, and a
/// partition's stored offset never passes a message that is not finished.
public final class RequestPipeline: Service {
    let configuration: WorkerConfiguration
    let consumer: KafkaConsumer
    let producer: KafkaProducer
    let flows: LoginFlows
    let notifications: AppleNotificationFlow?
    let store: PostgresStore
    let clock: any WorkerClock
    let metrics: WorkerMetrics
    let logger: Logger
    let decoder: RequestDecoder
    /// The key of request digests: the results key, so digests are stable across replicas.
    let digestKey: [UInt8]
    let board: CompletionBoard<Prepared>
    /// Where the loop waits while work is under way: rung by finished stages, posted
    /// preparations, arrivals at the consumer and shutdown (`Doorbell`).
    let doorbell = Doorbell()
    let stopping = Atomic<Bool>(false)
    /// When the loop last showed progress (a poll, or a retry attempt), as Unix seconds.
    let heartbeat = Atomic<Int>(Int(Date().timeIntervalSince1970))

    public init(
        configuration: WorkerConfiguration, consumer: KafkaConsumer, producer: KafkaProducer, flows: LoginFlows,
        notifications: AppleNotificationFlow?, store: PostgresStore, clock: any WorkerClock, metrics: WorkerMetrics,
        logger: Logger
    ) throws {
        self.configuration = configuration
        self.consumer = consumer
        self.producer = producer
        self.flows = flows
        self.notifications = notifications
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
        digestKey = try configuration.resultsKey ?? SecureRandom.bytes(32)
        var decoder = RequestDecoder()
        if !configuration.credentialKeyPaths.isEmpty {
            decoder.credentials = try CredentialKeys(paths: configuration.credentialKeyPaths)
        }
        decoder.requireSealedCredentials = configuration.requireSealedCredentials
        self.decoder = decoder
        board = CompletionBoard(onPost: { [doorbell] in doorbell.ring() })
    }

    /// Ends the loop's wait: background work finished.
    var wake: @Sendable () -> Void { { [doorbell] in doorbell.ring() } }

    /// Seconds since the consume loop last showed progress: liveness.
    public var secondsSinceHeartbeat: Int { Int(Date().timeIntervalSince1970) - heartbeat.load(ordering: .relaxed) }

    func beat() { heartbeat.store(Int(Date().timeIntervalSince1970), ordering: .relaxed) }

    public func triggerGracefulShutdown() {
        stopping.store(true, ordering: .releasing)
        consumer.wake()
        doorbell.ring()
    }

    var isStopping: Bool { stopping.load(ordering: .acquiring) }

    // MARK: - The loop

    public func run() async throws {
        logger.info(
            "Consuming",
            metadata: [
                LogKey.topic: [configuration.topics.requests, configuration.topics.notifications].joined(separator: ",")
            ])
        defer { logger.info("Consumer stopped") }
        await warmUp()
        // While work is under way the loop waits on the doorbell and polls only when something
        // arrived; a tick bounds that wait, so the consumer is still polled now and then (the
        // group's `max.poll.interval.ms`, the lag metric) whatever the stages do. The ticker
        // parks while the loop waits in the consumer's poll (idle).
        consumer.onArrival { [doorbell] in doorbell.ringForArrival() }
        let ticker = Task { [doorbell] in await doorbell.runTicker(every: Self.waitTick) }
        defer {
            doorbell.close()
            ticker.cancel()
            consumer.onArrival(nil)
        }
        var state = LoopState()
        do {
            // The loop runs on the consumer's thread: its polls are calls on that thread, not hops
            // there and back. Its stages run elsewhere (`Stage`), and nothing else of the loop waits
            // for that thread while an idle poll blocks it.
            try await withTaskExecutorPreference(consumer.taskExecutor) { try await loop(&state) }
            // The last batch's events were acknowledged: say so, or the relay publishes them again.
            try await markPublishedWhileIdle(&state, after: .zero)
        } catch is ShutdownDuringRetry {
            logger.warning(
                "Work abandoned during shutdown; it will be replayed",
                metadata: [LogKey.count: String(state.jobs.count)])
        } catch {
            await consumer.close()
            throw error
        }
        // Leaving the group commits the stored offsets.
        await consumer.close()
    }

    func loop(_ state: inout LoopState) async throws {
        let processing = configuration.processing
        // The stages overlap: while batches are written, the next requests are decoded and
        // prepared and the batches before are published. Each writer writes one batch at a time;
        // a lane's jobs are written by one writer at a time, in order: per-key order holds across
        // batches. The first free writer takes what is ready (a later one only behind a backlog),
        // and a lookup reads on a writer with nothing to write: light load uses one connection.
        let writers = max(processing.writers, 1)
        var writing: [Stage<WrittenBatch>?] = Array(repeating: nil, count: writers)
        var writingSince: [ContinuousClock.Instant] = Array(repeating: .now, count: writers)
        // Publishes overlap (a topic's first record can wait on the broker), finishing in any order:
        // the offset watermark and the per-partition order of the producer keep what matters.
        var publishing: [(stage: Stage<[UUID]>, jobs: [JobRecords])] = []
        var toPublish: [JobRecords] = []
        var looking: Lookup?
        var nextDrainReport: ContinuousClock.Instant?
        var nextLagReading = ContinuousClock.now
        // Whether the consumer may hold messages the loop has not taken: the last poll stopped at
        // its limit (no arrival rings for a queue that never emptied).
        var mayHoldMore = true
        var lastPoll = ContinuousClock.now
        // With `AUTH_BATCH_LINGER_MS`: when the loop is to look again at requests held for more.
        var lingerAlarm: ContinuousClock.Instant?
        while true {
            beat()
            let busy =
                writing.contains { $0 != nil } || !publishing.isEmpty || looking != nil || !toPublish.isEmpty
            if isStopping, !busy, !state.canProgress { break }
            if isStopping {
                // A drain that takes long says what it waits for, every five seconds.
                let now = ContinuousClock.now
                if let report = nextDrainReport {
                    if now >= report {
                        logger.warning(
                            "Draining: still waiting",
                            metadata: [
                                LogKey.count: String(state.jobs.count),
                                "drain.phases": state.phaseSummary,
                                "drain.writing": String(writing.count { $0 != nil }),
                                "drain.publishing": String(publishing.count),
                                "drain.looking_up": String(looking != nil),
                            ])
                        nextDrainReport = now + .seconds(5)
                    }
                } else {
                    nextDrainReport = now + .seconds(5)
                }
            }
            if !isStopping, state.jobs.count < processing.maxInFlight {
                let limit = min(processing.batchMax, processing.maxInFlight - state.jobs.count)
                let idle = state.jobs.isEmpty && !busy
                var messages: [KafkaMessage] = []
                var polled = true
                if idle {
                    // Idle, the poll sleeps on the consumer's thread until a message arrives (it
                    // returns at the first one) or `batchWait` passes, sooner when acknowledged
                    // events wait to be marked published. Nothing else can finish meanwhile.
                    _ = doorbell.take()
                    let timeout =
                        state.marksWaitingSince == nil
                        ? processing.batchWait : min(processing.batchWait, Self.idleMarkDelay / 4)
                    messages = try await consumer.poll(maxMessages: limit, timeout: timeout)
                } else {
                    // Busy, the loop waits here, on whichever thread finishes something, and
                    // visits the consumer's thread only to take what arrived: a pass for a finished
                    // stage costs no hop there and back.
                    if !mayHoldMore { await doorbell.wait() }
                    let rings = doorbell.take()
                    let now = ContinuousClock.now
                    polled = mayHoldMore || rings.arrival || rings.timeout || now - lastPoll >= Self.waitTick
                    if polled { messages = try await consumer.poll(maxMessages: limit, timeout: .zero) }
                }
                if polled {
                    mayHoldMore = messages.count >= limit
                    lastPoll = .now
                    for (partition, assignment) in consumer.takeRevokedPartitions() {
                        state.watermark.revoke(partition, assignment: assignment)
                    }
                    admit(messages, &state)
                }
                if ContinuousClock.now >= nextLagReading {
                    nextLagReading = .now + .seconds(1)
                    metrics.recordLag(await consumer.lag())
                    metrics.inFlight.set(Double(state.jobs.count))
                }
            } else if busy || !state.jobs.isEmpty {
                // Full (or draining): wait for something to finish.
                await doorbell.wait()
                _ = doorbell.take()
            }
            if let lookup = looking, lookup.stage.isDone {
                let found = try lookup.stage.value()
                if let written = found.written, let writer = lookup.writer {
                    // Written in the lookup's task: the jobs enter the batch they were in, and
                    // their records are published as any written batch's.
                    for (seq, step) in written.steps {
                        guard let job = state.jobs[seq], let step else { continue }
                        state.move(job, to: .ready(step))
                        state.batch(job, on: writer)
                        // Looked up, prepared and written in one task: one timed phase, to its commit.
                        job.phaseMarks.wroteWithLookup(committed: written.committed)
                    }
                    if let published = found.published {
                        // Published by that task already: finished below when delivered.
                        var jobs: [JobRecords] = []
                        for answer in published.answers {
                            guard let job = state.jobs[answer.seq] else { continue }
                            state.written(job)
                            jobs.append(
                                JobRecords(
                                    job: job, records: answer.records, events: answer.events, outcome: answer.outcome))
                        }
                        publishing.append((published.stage, jobs))
                    } else {
                        toPublish += records(for: written, &state)
                    }
                } else {
                    state.handBack(lookup.marks)
                    start(lookup.jobs, kept: found.kept, guests: found.guests, &state)
                }
                looking = nil
            }
            collect(&state)
            startParked(&state)

            // Each publish is finished exactly when it is seen done: a stage that completes while
            // this runs waits for the next turn (removing "whatever is done now" afterwards would
            // drop it unfinished, its jobs stuck and its partition's offsets with them).
            let (donePublishing, stillPublishing) = Self.split(publishing) { $0.stage.isDone }
            publishing = stillPublishing
            for entry in donePublishing {
                state.acknowledged(try entry.stage.value())
                finish(entry.jobs, &state)
            }
            if !donePublishing.isEmpty {
                consumer.storeOffsets(state.watermark.advance())
                // A finished job may leave a parked one first in its lane: start it now, not after
                // the next poll's wait.
                startParked(&state)
            }
            for writer in 0..<writers {
                guard let stage = writing[writer], stage.isDone else { continue }
                toPublish += records(for: try stage.value(), &state)
                writing[writer] = nil
            }
            if publishing.count < 4, !toPublish.isEmpty {
                let jobs = toPublish
                toPublish = []
                let entries = Self.entries(jobs)
                publishing.append((beginPublish(entries), jobs))
            }
            var wrote = false
            // In the writers' order. A writer after a busy one (writing, or reading a lookup)
            // starts only behind a backlog (`spillBacklog`), or when the one before has been
            // writing for long: requests short of a batch worth its own transaction wait for the
            // busy writer rather than pay for a second transaction and wake another connection
            // and its server process, both gone cold.
            let now = ContinuousClock.now
            var busyBefore = false
            for writer in 0..<writers {
                if looking?.writer == writer {
                    busyBefore = true
                    continue
                }
                guard writing[writer] == nil else {
                    if now - writingSince[writer] < Self.spillAfter { busyBefore = true }
                    continue
                }
                let limit = max(processing.batchMax, 1)
                let ready = state.readyJobs(
                    for: writer, limit: limit, minimum: busyBefore ? min(Self.spillBacklog, limit) : 1)
                guard !ready.isEmpty else { continue }
                writing[writer] = beginWrite(ready, writer: writer, &state)
                writingSince[writer] = now
                wrote = true
            }
            if looking == nil {
                if let until = lingersUntil(state) {
                    // Held for more to join (arrivals still wake the loop, which takes them in and
                    // asks again): the doorbell rings when the oldest has waited enough.
                    if lingerAlarm.map({ $0 > until || $0 < .now }) ?? true {
                        lingerAlarm = until
                        // On the pool, said so: the loop runs on the consumer's thread.
                        Task(executorPreference: globalConcurrentExecutor) { [doorbell] in
                            try? await Task.sleep(until: until, clock: .continuous)
                            doorbell.ring()
                        }
                    }
                } else {
                    // Writes first: a lookup reads on a writer only when it writes nothing even so
                    // (under light load a request's lookup and write then share one connection,
                    // `PostgresStore.ReadConnection`), on the pool's connections otherwise.
                    looking = beginLookup(
                        &state, writer: (0..<writers).first { writing[$0] == nil },
                        publishesWritten: toPublish.isEmpty)
                }
            }
            if !wrote, !busy { try await markPublishedWhileIdle(&state, after: Self.idleMarkDelay) }
        }
    }

    /// With a linger (`AUTH_BATCH_LINGER_MS`), until when the requests waiting to be looked up
    /// wait for more to join them; nil when they go now: no linger, the oldest (in read order)
    /// waited long enough, the worker stopping, or `lingerFill` requests in flight. That bound
    /// is what keeps a linger to light loads: under load, batches fill while others are
    /// written, and a request held there only adds to a queue the machine has no time to drain
    /// (at 6,000 guest logins/s on the development machine, a first version that held whenever
    /// the writers were free left 5,000 requests standing in flight, 0.9 s each).
    func lingersUntil(_ state: LoopState) -> ContinuousClock.Instant? {
        let processing = configuration.processing
        guard processing.batchLinger > .zero, !isStopping,
            state.jobs.count < min(Self.lingerFill, processing.batchMax),
            let oldest = state.toStart.lazy.compactMap({ state.jobs[$0] }).first
        else { return nil }
        let now = MonotonicNanos.now()
        let waited = Duration.nanoseconds(Int64(clamping: now > oldest.admittedNanos ? now - oldest.admittedNanos : 0))
        let left = processing.batchLinger - waited
        return left > .zero ? ContinuousClock.now + left : nil
    }

    /// Splits `entries` into those `isDone` says are done and the rest, asking once per entry:
    /// every entry lands in exactly one of the two, whenever a background stage completes.
    static func split<Entry>(_ entries: [Entry], isDone: (Entry) -> Bool) -> (done: [Entry], pending: [Entry]) {
        var done: [Entry] = []
        var pending: [Entry] = []
        for entry in entries {
            if isDone(entry) { done.append(entry) } else { pending.append(entry) }
        }
        return (done, pending)
    }

    /// Learns where the output topics live before the first request, so its answer does not
    /// wait for that; says so when one is missing (a typo in `AUTH_TOPIC_*`).
    func warmUp() async {
        let topics = configuration.topics
        do {
            let found = try await producer.describeTopics(
                [topics.results, topics.events, topics.deadLetters], timeout: .seconds(5))
            for (topic, exists) in found.sorted(by: { $0.key < $1.key }) where !exists {
                logger.error("Output topic does not exist", metadata: [LogKey.topic: topic])
            }
        } catch {
            logger.warning(
                "Could not describe the output topics", metadata: [LogKey.error: ErrorPolicy.loggable(error)])
        }
    }
}
