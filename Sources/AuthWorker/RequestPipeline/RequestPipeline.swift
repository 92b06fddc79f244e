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
    /// Each served tenant's flows: a request is prepared by its tenant's.
    public let tenants: TenantFlows
    let notifications: AppleNotificationFlow?
    let store: PostgresStore
    let clock: any WorkerClock
    let metrics: WorkerMetrics
    let logger: Logger
    let decoder: RequestDecoder
    /// The key of request digests: the results key, so digests are stable across replicas.
    let digestKey: [UInt8]
    let board: CompletionBoard<PreparationOutcome>
    /// Where the loop waits while work is under way: rung by finished stages, posted
    /// preparations, arrivals at the consumer and shutdown (`Doorbell`).
    let doorbell = Doorbell()
    /// Told when a write or a lookup loses PostgreSQL, so `/readyz` says so at once.
    public let databaseLoss = DatabaseLossSignal()
    let stopping = Atomic<Bool>(false)
    /// When the loop last showed progress (a poll, or a retry attempt), as Unix seconds.
    let heartbeat = Atomic<Int>(Int(Date().timeIntervalSince1970))

    public init(
        configuration: WorkerConfiguration, consumer: KafkaConsumer, producer: KafkaProducer, flows: LoginFlows,
        tenants: [String: LoginFlows] = [:], notifications: AppleNotificationFlow?, store: PostgresStore,
        clock: any WorkerClock, metrics: WorkerMetrics, logger: Logger
    ) throws {
        self.configuration = configuration
        self.consumer = consumer
        self.producer = producer
        self.tenants = TenantFlows(main: flows, others: tenants)
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
        state.stages = Stages(writers: configuration.processing.writers)
        state.policy = policy
        do {
            // The loop runs on the consumer's thread: its polls are calls on that thread, not hops
            // there and back. Its stages run elsewhere (`Stage`), and nothing else of the loop waits
            // for that thread while an idle poll blocks it.
            try await withTaskExecutorPreference(consumer.taskExecutor) { try await loop(&state) }
            // The last batch's events were acknowledged: say so, or the relay publishes them again.
            try await deletePublishedWhileIdle(&state, after: .zero)
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

    /// One pass a turn: take in what arrived (or wait for something to finish), take in what
    /// finished (lookups, preparations, publishes, writes), then carry out what `LoopState.next`
    /// decides to start. Everything the loop knows is `state`'s; this function and the ones it
    /// calls only move events in and carry actions out.
    ///
    /// The stages overlap: while batches are written, the next requests are decoded and prepared
    /// and the batches before are published. Each writer writes one batch at a time; a lane's jobs
    /// are written by one writer at a time, in order: per-key order holds across batches. The
    /// first free writer takes what is ready (a later one only behind a backlog), and a lookup
    /// reads on a writer with nothing to write: light load uses one connection.
    func loop(_ state: inout LoopState) async throws {
        while true {
            beat()
            let busy = state.stages.isBusy
            if isStopping, !busy, !state.canProgress { break }
            if isStopping, state.stages.drainReportDue(at: .now) { reportDrain(state) }
            try await takeIn(&state, busy: busy)
            try finishLookup(&state)
            collect(&state)
            try finishPublishes(&state)
            for written in try state.stages.takeDoneWrites() { state.stages.toPublish += records(for: written, &state) }
            var wrote = false
            for action in state.next(at: .now, stopping: isStopping) {
                if case .write = action { wrote = true }
                perform(action, &state)
            }
            if !wrote, !busy { try await deletePublishedWhileIdle(&state, after: Self.idleMarkDelay) }
        }
    }

    /// The settings the loop's decisions read (`LoopState.next`).
    var policy: LoopPolicy {
        let processing = configuration.processing
        return LoopPolicy(
            batchMax: processing.batchMax, batchLinger: processing.batchLinger,
            requiresReplyKey: tenants.requiresReplyKey)
    }

    /// Starts what `LoopState.next` decided; the stages started are the state's to follow.
    func perform(_ action: LoopAction, _ state: inout LoopState) {
        switch action {
        case .prepare(let preparations):
            for preparation in preparations { prepare([preparation]) }
        case .publish(let jobs):
            state.stages.publishing.append((beginPublish(entries(jobs)), jobs))
        case .write(let plan):
            state.stages.writing[plan.writer] = beginWrite(plan)
            state.stages.writingSince[plan.writer] = .now
        case .lookUp(let plan):
            state.stages.looking = beginLookup(plan)
        case .armLinger(let until):
            // On the pool, said so: the loop runs on the consumer's thread.
            Task(executorPreference: globalConcurrentExecutor) { [doorbell] in
                try? await Task.sleep(until: until, clock: .continuous)
                doorbell.ring()
            }
        }
    }

    /// Polls the consumer when there is room in flight and takes in what came; waits for
    /// something to finish otherwise. Idle, the poll sleeps on the consumer's thread until a
    /// message arrives (it returns at the first one) or `batchWait` passes, sooner when
    /// acknowledged events wait to be marked published: nothing else can finish meanwhile. Busy,
    /// the loop waits on its doorbell, on whichever thread finishes something, and visits the
    /// consumer's thread only to take what arrived: a pass for a finished stage costs no hop there
    /// and back.
    func takeIn(_ state: inout LoopState, busy: Bool) async throws {
        let processing = configuration.processing
        guard !isStopping, state.jobs.count < processing.maxInFlight else {
            if busy || !state.jobs.isEmpty {
                // Full (or draining): wait for something to finish.
                await doorbell.wait()
                _ = doorbell.take()
            }
            return
        }
        let limit = min(processing.batchMax, processing.maxInFlight - state.jobs.count)
        var messages: [KafkaMessage] = []
        var polled = true
        if state.jobs.isEmpty && !busy {
            _ = doorbell.take()
            let timeout = Stages.pollTimeout(
                batchWait: processing.batchWait, marksWaiting: state.marksWaitingSince != nil,
                markDelay: Self.idleMarkDelay)
            messages = try await consumer.poll(maxMessages: limit, timeout: timeout)
        } else {
            if !state.stages.mayHoldMore { await doorbell.wait() }
            let rings = doorbell.take()
            polled =
                state.stages.mayHoldMore || rings.arrival || rings.timeout
                || ContinuousClock.now - state.stages.lastPoll >= Self.waitTick
            if polled { messages = try await consumer.poll(maxMessages: limit, timeout: .zero) }
        }
        if polled {
            state.stages.mayHoldMore = messages.count >= limit
            state.stages.lastPoll = .now
            for (partition, assignment) in consumer.takeRevokedPartitions() {
                state.watermark.revoke(partition, assignment: assignment)
            }
            admit(messages, &state)
        }
        if ContinuousClock.now >= state.stages.nextLagReading {
            state.stages.nextLagReading = .now + .seconds(1)
            metrics.recordLag(await consumer.lag())
            metrics.inFlight.set(Double(state.jobs.count))
        }
    }

    /// A drain that takes long says what it waits for (every five seconds).
    func reportDrain(_ state: LoopState) {
        logger.warning(
            "Draining: still waiting",
            metadata: [
                LogKey.count: String(state.jobs.count),
                "drain.phases": state.phaseSummary,
                "drain.writing": String(state.stages.writing.count { $0 != nil }),
                "drain.publishing": String(state.stages.publishing.count),
                "drain.looking_up": String(state.stages.looking != nil),
            ])
    }

    /// Takes a finished lookup: its jobs start (prepare), or, when its task also wrote them
    /// (light load), they join the batch they were in and are published as any written batch's.
    func finishLookup(_ state: inout LoopState) throws {
        guard let lookup = state.stages.looking, lookup.stage.isDone else { return }
        state.stages.looking = nil
        let found = try lookup.stage.value()
        guard let written = found.written, let writer = lookup.writer else {
            state.handBack(lookup.marks)
            start(lookup.jobs, kept: found.kept, guests: found.guests, &state)
            return
        }
        for (seq, step) in written.steps {
            guard let job = state.jobs[seq], let step else { continue }
            state.move(job, to: .ready(step))
            state.batch(job, on: writer)
            // Looked up, prepared and written in one task: one timed phase, to its commit.
            job.phaseTimestamps.wroteWithLookup(committed: written.committed)
        }
        guard let published = found.published else {
            state.stages.toPublish += records(for: written, &state)
            return
        }
        // Published by that task already: finished when delivered.
        var jobs: [JobRecords] = []
        for answer in published.answers {
            guard let job = state.jobs[answer.seq] else { continue }
            state.written(job)
            jobs.append(JobRecords(job: job, records: answer.records, events: answer.events, outcome: answer.outcome))
        }
        state.stages.publishing.append((published.stage, jobs))
    }

    /// Finishes the publishes the broker acknowledged: their jobs leave, their offsets are stored.
    func finishPublishes(_ state: inout LoopState) throws {
        let done = state.stages.takeDonePublishes()
        guard !done.isEmpty else { return }
        for entry in done {
            state.acknowledged(try entry.stage.value())
            finish(entry.jobs, &state)
        }
        consumer.storeOffsets(state.watermark.advance())
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
