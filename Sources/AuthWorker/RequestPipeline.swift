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
/// Work that is slow (a password hash, a key fetch, a retry) does not hold the batch: it joins a
/// later batch when done. Per partition and key, requests are still written in order, and a
/// partition's stored offset never passes a message that is not finished.
public final class RequestPipeline: Service {
    private let configuration: WorkerConfiguration
    private let consumer: KafkaConsumer
    private let producer: KafkaProducer
    private let flows: LoginFlows
    private let notifications: AppleNotificationFlow?
    private let store: PostgresStore
    private let clock: any WorkerClock
    private let metrics: WorkerMetrics
    private let logger: Logger
    private let decoder: RequestDecoder
    /// The key of request digests: the results key, so digests are stable across replicas.
    private let digestKey: [UInt8]
    private let board: CompletionBoard<Prepared>
    private let stopping = Atomic<Bool>(false)
    /// When the loop last showed progress (a poll, or a retry attempt), as Unix seconds.
    private let heartbeat = Atomic<Int>(Int(Date().timeIntervalSince1970))

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
        board = CompletionBoard(onPost: { [consumer] in consumer.wake() })
    }

    /// Ends the loop's wait for messages: background work finished, or shutdown began.
    private var wake: @Sendable () -> Void { { [consumer] in consumer.wake() } }

    /// Seconds since the consume loop last showed progress: liveness.
    public var secondsSinceHeartbeat: Int { Int(Date().timeIntervalSince1970) - heartbeat.load(ordering: .relaxed) }

    private func beat() { heartbeat.store(Int(Date().timeIntervalSince1970), ordering: .relaxed) }

    public func triggerGracefulShutdown() {
        stopping.store(true, ordering: .releasing)
        consumer.wake()
    }

    private var isStopping: Bool { stopping.load(ordering: .acquiring) }

    // MARK: - The loop

    public func run() async throws {
        logger.info(
            "Consuming",
            metadata: [
                LogKey.topic: [configuration.topics.requests, configuration.topics.notifications].joined(separator: ",")
            ])
        defer { logger.info("Consumer stopped") }
        await warmUp()
        var state = LoopState()
        do {
            try await loop(&state)
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

    private func loop(_ state: inout LoopState) async throws {
        let processing = configuration.processing
        // The stages overlap: while batches are written, the next requests are decoded and
        // prepared and the batches before are published. Each writer writes one batch at a time,
        // of the lanes that hash to it, in order: per-key order holds across batches.
        let writers = max(processing.writers, 1)
        var writing: [Stage<WrittenBatch>?] = Array(repeating: nil, count: writers)
        // Publishes overlap (a topic's first record can wait on the broker), finishing in any order:
        // the offset watermark and the per-partition order of the producer keep what matters.
        var publishing: [(stage: Stage<[UUID]>, jobs: [JobRecords])] = []
        var toPublish: [JobRecords] = []
        var looking: Lookup?
        var nextDrainReport: ContinuousClock.Instant?
        var nextLagReading = ContinuousClock.now
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
                // Background work that finishes wakes the poll, so it is picked up at once; the
                // timeout only bounds the wait for messages.
                let messages = try await consumer.poll(
                    maxMessages: min(processing.batchMax, processing.maxInFlight - state.jobs.count),
                    timeout: state.jobs.isEmpty && !busy ? processing.batchWait : .milliseconds(50))
                for (partition, assignment) in consumer.takeRevokedPartitions() {
                    state.watermark.revoke(partition, assignment: assignment)
                }
                admit(messages, &state)
                if ContinuousClock.now >= nextLagReading {
                    nextLagReading = .now + .seconds(1)
                    metrics.recordLag(await consumer.lag())
                    metrics.inFlight.set(Double(state.jobs.count))
                }
            } else if busy || !state.jobs.isEmpty {
                try await Task.sleep(for: .milliseconds(1))
            }
            if let lookup = looking, lookup.stage.isDone {
                let found = try await lookup.stage.value()
                start(lookup.jobs, kept: found.kept, guests: found.guests, &state)
                looking = nil
            }
            if looking == nil { looking = beginLookup(&state) }
            collect(&state)
            startParked(&state)

            // Each publish is finished exactly when it is seen done: a stage that completes while
            // this runs waits for the next turn (removing "whatever is done now" afterwards would
            // drop it unfinished, its jobs stuck and its partition's offsets with them).
            let (donePublishing, stillPublishing) = Self.split(publishing) { $0.stage.isDone }
            publishing = stillPublishing
            for entry in donePublishing {
                state.acknowledged(try await entry.stage.value())
                finish(entry.jobs, &state)
            }
            if !donePublishing.isEmpty {
                await consumer.storeOffsets(state.watermark.advance())
                // A finished job may leave a parked one first in its lane: start it now, not after
                // the next poll's wait.
                startParked(&state)
            }
            for shard in 0..<writers {
                guard let stage = writing[shard], stage.isDone else { continue }
                toPublish += records(for: try await stage.value(), &state)
                writing[shard] = nil
            }
            if publishing.count < 4, !toPublish.isEmpty {
                let jobs = toPublish
                toPublish = []
                let entries = Self.entries(jobs)
                publishing.append((Stage(wake: wake) { try await self.publish(entries) }, jobs))
            }
            var wrote = false
            for shard in 0..<writers where writing[shard] == nil {
                let ready = state.readyJobs(shard: shard, of: writers, limit: max(processing.batchMax, 1))
                guard !ready.isEmpty else { continue }
                writing[shard] = beginWrite(ready, writer: shard, &state)
                wrote = true
            }
            if !wrote, !busy { try await markPublishedWhileIdle(&state, after: Self.idleMarkDelay) }
        }
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
    private func warmUp() async {
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

    // MARK: - 1. Decode

    private func admit(_ messages: [KafkaMessage], _ state: inout LoopState) {
        for message in messages {
            if state.reading[message.topicPartition] != message.assignment {
                state.reading[message.topicPartition] = message.assignment
                // Where this member starts in a partition after each assignment: with the
                // offsets committed at revocations, the trail of every hand-over.
                logger.info(
                    "Reading a partition",
                    metadata: [
                        LogKey.topic: message.topic, LogKey.partition: String(message.partition),
                        LogKey.offset: String(message.offset),
                    ])
            }
            let epoch = state.watermark.read(message)
            let job = Job(seq: state.nextSeq(), message: message, epoch: epoch)
            if message.topic == configuration.topics.notifications {
                job.phase = .lookup
            } else {
                decode(job, &state)
            }
            state.add(job)
        }
    }

    private func decode(_ job: Job, _ state: inout LoopState) {
        let message = job.message
        switch decoder.decode(message.value) {
        case .unanswerable(let reason, let text):
            logger.warning(
                "Request sent to the dead-letter topic",
                metadata: [
                    "dlq.reason": reason, LogKey.topic: message.topic, LogKey.partition: String(message.partition),
                    LogKey.offset: String(message.offset),
                ])
            job.phase = .ready(.publish([deadLetter(message, reason: reason, text: text)], outcome: "dead_letter"))
        case .invalid(let id, let traceparent, let error):
            let failure = LoginError(error.code, error.description, field: error.field)
            job.phase = .ready(
                .publish(
                    [
                        resultRecord(
                            .failure(requestID: id, error: failure.payload), requestID: id, traceparent,
                            tag: Self.refusalTag(
                                failure, digest: HMACSHA256.mac(key: digestKey, message: message.value)))
                    ], outcome: failure.code.rawValue))
        case .valid(var request):
            request.partitionKey = message.key.flatMap { String(validating: $0, as: UTF8.self) }
            let digest = (try? MessageCoding.encode(request.data)).map { HMACSHA256.mac(key: digestKey, message: $0) }
            job.request = request
            job.digest = digest ?? HMACSHA256.mac(key: digestKey, message: message.value)
            job.phase = state.hold(request.id, for: job) ? .lookup : .waitingForID
        }
    }

    // MARK: - 2. Look up, 3. prepare

    /// Starts looking up the request ids of every job admitted since the last lookup: one query
    /// in the background, while the loop goes on polling. The global guest ceiling is reserved
    /// for the new guests among them in the same stage.
    private func beginLookup(_ state: inout LoopState) -> Lookup? {
        let starting = state.toStart.compactMap { seq -> Job? in
            guard let job = state.jobs[seq], job.kind == .lookup else { return nil }
            return job
        }
        state.toStart = []
        guard !starting.isEmpty else { return nil }
        for job in starting { job.phase = .lookingUp }
        let ids = starting.compactMap { $0.request?.id }
        let guestIDs = starting.compactMap { $0.request?.method == .guest ? $0.request?.id : nil }
        let guestCeiling = configuration.accounts.guestGlobalRateLimit
        let stage = Stage(wake: wake) {
            let kept =
                ids.isEmpty
                ? [:]
                : try await self.retrying("look up request ids", requestIDs: ids) {
                    try await self.store.keptRequests(ids)
                }
            // The global guest ceiling is taken for the batch's new guests at once, before any
            // work: one atomic step per lookup, not a contended row in every write transaction.
            let wanted = guestIDs.count { kept[$0] == nil }
            guard guestCeiling.count > 0, wanted > 0 else { return LookupResult(kept: kept, guests: nil) }
            let grant = try await self.retrying("reserve guest sign-ups", requestIDs: guestIDs) {
                try await self.store.reserveRateLimits(
                    [RateLimitReservation(bucket: Self.guestCeilingBucket, limit: guestCeiling, wanted: wanted)],
                    at: self.clock.now())
            }
            return LookupResult(kept: kept, guests: grant.first)
        }
        return Lookup(stage: stage, jobs: starting.map(\.seq))
    }

    /// The bucket of the global guest ceiling (per-client buckets are `guest:<client>`).
    static let guestCeilingBucket = "guest-all"

    /// What a lookup found: the kept answers, and the guest sign-ups the global ceiling allows.
    struct LookupResult: Sendable {
        let kept: [String: KeptRequest]
        /// Nil when no ceiling applies.
        let guests: RateLimitGrant?
    }

    /// Answers the looked-up jobs that need no work, and starts preparing the rest.
    private func start(
        _ seqs: [Int], kept: [String: KeptRequest], guests: RateLimitGrant?, _ state: inout LoopState
    ) {
        let starting = seqs.compactMap { state.jobs[$0] }
        var cheap: [Preparation] = []
        let now = clock.now()
        var guestsAllowed = guests?.granted ?? Int.max
        for job in starting {
            guard let request = job.request else {
                startNotification(job)
                continue
            }
            // The kept answer comes first: a processed request is answered again, however late.
            if let kept = kept[request.id] {
                job.phase = .ready(.publish(replay(kept, job: job, request: request), outcome: "replayed"))
                continue
            }
            let sent = request.time ?? job.message.timestamp.map { Date(timeIntervalSince1970: Double($0) / 1000) }
            if configuration.requestDeadline > 0, let sent, now.timeIntervalSince(sent) > configuration.requestDeadline
            {
                // The gateway has given up on it: acting now would create a session nobody receives.
                metrics.expired.increment()
                job.phase = .ready(
                    .publish(
                        refusal(
                            LoginError(
                                .internalError, "the request expired before it could be processed; send a new one",
                                retriable: true), job: job, request: request), outcome: "expired"))
                continue
            }
            if request.method == .guest, let guests {
                guard guestsAllowed > 0 else {
                    let error = LoginError.tooManyAttempts(
                        until: guests.windowEnd, now: now,
                        message: "too many guest sign-ups right now; try again later")
                    job.phase = .ready(
                        .publish(refusal(error, job: job, request: request), outcome: Self.outcome(of: error)))
                    continue
                }
                guestsAllowed -= 1
            }
            let replyKey: [UInt8]?
            do {
                replyKey = try Self.replyKey(request, required: configuration.sessions.requireReplyKey)
            } catch {
                job.phase = .ready(
                    .publish(refusal(error, job: job, request: request), outcome: Self.outcome(of: error)))
                continue
            }
            let preparation = Preparation(seq: job.seq, request: request, digest: job.digest, replyKey: replyKey)
            if Self.readsAccountWhilePreparing(request.method), !state.isFirstInLane(job) {
                // It reads the account before its write (the password to verify): it waits for
                // the requests before it on its key, so it sees what they did (a registration).
                job.phase = .waitingForLane(preparation)
                state.parked.insert(job.seq)
                continue
            }
            job.phase = .preparing
            // Password hashing waits on its own pool: each such request on its own, so none waits
            // for another's hash. The rest is CPU work of tens of microseconds: in a few chunks, one
            // task each, spread over the cores.
            if request.method == .password || request.method == .register {
                prepare([preparation])
            } else {
                cheap.append(preparation)
            }
        }
        let chunk = max(16, (cheap.count + 7) / 8)
        for start in stride(from: 0, to: cheap.count, by: chunk) {
            prepare(Array(cheap[start..<min(start + chunk, cheap.count)]))
        }
        for job in starting { state.changed(job) }
    }

    /// Whether a method's preparation reads the account (the password hash it verifies), so it
    /// must not start before the earlier requests of its lane are written.
    static func readsAccountWhilePreparing(_ method: LoginMethod) -> Bool {
        method == .password || method == .changePassword
    }

    /// Starts the parked preparations whose lane has emptied before them.
    private func startParked(_ state: inout LoopState) {
        guard !state.parked.isEmpty else { return }
        for seq in state.parked.sorted() {
            guard let job = state.jobs[seq], case .waitingForLane(let preparation) = job.phase else {
                state.parked.remove(seq)
                continue
            }
            guard state.isFirstInLane(job) else { continue }
            state.parked.remove(seq)
            job.phase = .preparing
            prepare([preparation])
            state.changed(job)
        }
    }

    /// A lookup of request ids running in the background, and the jobs waiting for it.
    struct Lookup {
        let stage: Stage<LookupResult>
        let jobs: [Int]
    }

    /// Prepares requests one after the other in a task of their own, posting each outcome.
    private func prepare(_ preparations: [Preparation]) {
        Task {
            for preparation in preparations {
                let outcome: Prepared
                do {
                    let prepared = try await self.retrying(
                        "prepare request", requestIDs: [preparation.request.id]
                    ) {
                        try await self.flows.prepare(preparation.request)
                    }
                    outcome = .login(
                        LoginWork(
                            request: preparation.request, digest: preparation.digest, replyKey: preparation.replyKey,
                            prepared: prepared))
                } catch is ShutdownDuringRetry {
                    outcome = .abandoned
                } catch {
                    outcome = .refused(error)
                }
                self.board.post(preparation.seq, outcome)
            }
        }
    }

    private func startNotification(_ job: Job) {
        job.phase = .preparing
        let seq = job.seq
        let value = job.message.value
        Task {
            let outcome: Prepared
            guard let notifications = self.notifications else {
                self.board.post(seq, .notificationRefused("Sign in with Apple is not enabled"))
                return
            }
            do {
                // Apple's keys unreachable: this notification waits in its own lane; logins go on.
                let notification = try await self.retrying("verify a provider notification") {
                    try await notifications.prepare(value)
                }
                outcome = .notification(notification)
            } catch is ShutdownDuringRetry {
                outcome = .abandoned
            } catch let refusal as AppleNotificationFlow.Refusal {
                outcome = .notificationRefused(refusal.description)
            } catch {
                outcome = .notificationRefused(ErrorPolicy.loggable(error))
            }
            self.board.post(seq, outcome)
        }
    }

    /// Moves finished preparations into their jobs.
    private func collect(_ state: inout LoopState) {
        for (seq, outcome) in board.take() {
            guard let job = state.jobs[seq] else { continue }
            job.phase = step(for: outcome, job: job)
            state.changed(job)
        }
    }

    private func step(for outcome: Prepared, job: Job) -> Phase {
        switch outcome {
        case .login(let work):
            return .ready(.writeLogin(work))
        case .refused(let error):
            guard let request = job.request else { return .abandoned }
            return .ready(.publish(refusal(error, job: job, request: request), outcome: Self.outcome(of: error)))
        case .notification(let notification):
            return .ready(.writeNotification(notification))
        case .notificationRefused(let reason):
            logger.warning(
                "Provider notification refused",
                metadata: [
                    LogKey.error: reason, LogKey.partition: String(job.message.partition),
                    LogKey.offset: String(job.message.offset),
                ])
            return .ready(
                .publish(
                    [deadLetter(job.message, reason: "notification_refused", text: String(reason.prefix(200)))],
                    outcome: "dead_letter"))
        case .abandoned:
            return .abandoned
        }
    }

    // MARK: - 4. Write

    /// Starts writing every ready job that changes something in one transaction. The jobs are the
    /// batch's until their records are published.
    private func beginWrite(_ ready: [Job], writer: Int, _ state: inout LoopState) -> Stage<WrittenBatch> {
        var items: [WriteItem] = []
        var prefetch = Prefetch()
        for job in ready {
            switch job.phase {
            case .ready(.writeLogin(let work)):
                items.append(.login(work))
                prefetch.merge(work.prepared.prefetch)
            case .ready(.writeNotification(let notification)):
                items.append(.notification(notification))
                prefetch.merge(notification.prefetch)
            default:
                break
            }
        }
        let steps = ready.map { job -> (Int, Step?) in
            guard case .ready(let step) = job.phase else { return (job.seq, nil) }
            return (job.seq, step)
        }
        for job in ready { job.phase = .batched }
        guard !items.isEmpty else {
            // No transaction to carry the acknowledged events' marks: they wait for the next one.
            return Stage(wake: wake) { WrittenBatch(steps: steps, outcomes: [], marked: []) }
        }
        let marks = state.takeMarks()
        let head = marks.isEmpty ? [] : [PostgresStore.markPublished(marks)]
        let resultsKey = configuration.resultsKey
        let idempotencyLifetime = configuration.sessions.idempotencyLifetime
        let now = clock.now()
        let batchItems = items
        let batchPrefetch = prefetch
        let batchIDs = ready.compactMap { $0.request?.id }
        return Stage(wake: wake) {
            let outcomes = try await self.retrying("write the batch", requestIDs: batchIDs) {
                try await self.store.runBatch(batchItems, head: head, prefetch: batchPrefetch, writer: writer) {
                    item, unit in
                    try Self.write(
                        item, unit, resultsKey: resultsKey, rememberedUntil: now + idempotencyLifetime, at: now)
                }
            }
            return WrittenBatch(steps: steps, outcomes: outcomes, marked: marks)
        }
    }

    /// Turns a written batch into the records each of its jobs publishes.
    private func records(for written: WrittenBatch, _ state: inout LoopState) -> [JobRecords] {
        var records: [JobRecords] = []
        var next = written.outcomes.makeIterator()
        for (seq, step) in written.steps {
            guard let job = state.jobs[seq] else { continue }
            switch step {
            case .publish(let published, let outcome):
                records.append(JobRecords(job: job, records: published, events: [], outcome: outcome))
            case .writeLogin(let work):
                guard let outcome = next.next() else { continue }
                if case .refused(let error as PGError) = outcome, error.isUniqueViolation, !job.lookedUpAgain {
                    // Most likely written already: a commit that reached the server while the
                    // connection died before its acknowledgement, then retried. Looked up again,
                    // it is answered with what was kept; a real conflict comes back here and is
                    // answered as before.
                    job.lookedUpAgain = true
                    job.phase = .lookup
                    state.changed(job)
                    continue
                }
                records.append(loginRecords(outcome, job: job, work: work))
            case .writeNotification(let notification):
                guard let outcome = next.next() else { continue }
                records.append(notificationRecords(outcome, job: job, notification: notification))
            case nil:
                continue
            }
        }
        return records
    }

    /// The records of jobs, with the ids of the events among them.
    private static func entries(_ jobs: [JobRecords]) -> [(record: ProducerRecord, event: UUID?)] {
        var entries: [(record: ProducerRecord, event: UUID?)] = []
        for job in jobs {
            entries += job.records.map { ($0, nil) }
            entries += job.events.map { ($0.record, $0.id) }
        }
        return entries
    }

    /// One item of the batch's transaction: the flow's write, then the answer sealed (to the
    /// gateway's `reply_key`, and with the results key) and kept with the request id.
    static func write(
        _ item: WriteItem, _ unit: any UnitOfWork, resultsKey: [UInt8]?, rememberedUntil: Date, at now: Date
    ) throws -> WriteOutput {
        switch item {
        case .notification(let notification):
            return .notification(events: try notification.write(unit))
        case .login(let work):
            let answer = try work.prepared.write(unit)
            var result = answer.result
            if let replyKey = work.replyKey, let session = result.session {
                do {
                    result.sealedSession = try JWE.sealECDHES(try MessageCoding.encode(session), to: replyKey)
                } catch {
                    throw LoginError(
                        .malformedRequest, "reply_key is not a usable X25519 public key", field: "data.reply_key")
                }
                result.session = nil
            }
            // A second factor's secret or recovery codes go to the gateway's key the same way.
            if let replyKey = work.replyKey, let mfa = result.mfa {
                do {
                    result.sealedMFA = try JWE.sealECDHES(try MessageCoding.encode(mfa), to: replyKey)
                } catch {
                    throw LoginError(
                        .malformedRequest, "reply_key is not a usable X25519 public key", field: "data.reply_key")
                }
                result.mfa = nil
            }
            // And an `mfa_required` answer's token: whoever reads the results topic cannot finish
            // the sign-in with it.
            if let replyKey = work.replyKey, let token = result.error?.mfaToken {
                do {
                    result.error?.sealedMFAToken = try JWE.sealECDHES(Array(token.utf8), to: replyKey)
                } catch {
                    throw LoginError(
                        .malformedRequest, "reply_key is not a usable X25519 public key", field: "data.reply_key")
                }
                result.error?.mfaToken = nil
            }
            // Encoded once: kept (sealed) here, and published as the result event's data.
            let json = result.jsonBytes
            let sealed = try resultsKey.map { key in
                try AESGCM.seal(json, key: key, aad: Array(work.request.id.utf8)).combined
            }
            try unit.recordRequest(
                RequestRecord(
                    requestID: work.request.id, method: work.request.method.rawValue, status: result.status,
                    digest: resultsKey == nil ? nil : work.digest, userID: answer.userID, sessionID: answer.sessionID,
                    resultSealed: sealed, processedAt: now, expiresAt: rememberedUntil))
            return .login(result, json: json)
        }
    }

    private func loginRecords(_ outcome: PostgresStore.ItemOutcome<WriteOutput>, job: Job, work: LoginWork)
        -> JobRecords
    {
        let request = work.request
        switch outcome {
        case .written(.login(let result, let json), let events):
            return JobRecords(
                job: job,
                records: [
                    resultRecord(
                        result, json: json, requestID: request.id, request.traceparent,
                        tag: Self.answerTag(digest: work.digest))
                ], events: events, outcome: result.error?.code.rawValue ?? "ok")
        case .written(.notification, _):
            return JobRecords(job: job, records: [], events: [], outcome: "internal_error")
        case .refused(let error):
            return JobRecords(
                job: job, records: refusal(error, job: job, request: request), events: [],
                outcome: Self.outcome(of: error))
        }
    }

    private func notificationRecords(
        _ outcome: PostgresStore.ItemOutcome<WriteOutput>, job: Job, notification: AppleNotification
    ) -> JobRecords {
        switch outcome {
        case .written(_, let events):
            logger.info(
                "Apple notification applied",
                metadata: ["apple.event": notification.type, LogKey.count: String(events.count)])
            return JobRecords(job: job, records: [], events: events, outcome: "applied")
        case .refused(let error):
            logger.error(
                "Provider notification could not be applied",
                metadata: [LogKey.error: ErrorPolicy.loggable(error), LogKey.offset: String(job.message.offset)])
            return JobRecords(
                job: job,
                records: [deadLetter(job.message, reason: "notification_failed", text: ErrorPolicy.loggable(error))],
                events: [], outcome: "dead_letter")
        }
    }

    // MARK: - 5. Publish

    /// Publishes records in one producer batch; transient failures are sent again.
    /// - Returns: the ids of the events acknowledged.
    private func publish(_ entries: [(record: ProducerRecord, event: UUID?)]) async throws -> [UUID] {
        func requestIDs(_ entries: [(record: ProducerRecord, event: UUID?)]) -> [String] {
            entries.compactMap { entry in
                entry.record.topic == configuration.topics.results
                    ? entry.record.key.map { String(decoding: $0, as: UTF8.self) } : nil
            }
        }
        var pending = entries
        var acknowledged: [UUID] = []
        var delay = configuration.processing.initialRetryDelay
        while !pending.isEmpty {
            let outcomes = await producer.deliver(pending.map(\.record))
            var again: [(record: ProducerRecord, event: UUID?)] = []
            for (entry, outcome) in zip(pending, outcomes) {
                switch outcome {
                case .success:
                    if let event = entry.event { acknowledged.append(event) }
                case .failure(let error) where ErrorPolicy.classify(error) == .transient:
                    again.append(entry)
                case .failure(let error)
                where entry.record.topic == configuration.topics.deadLetters && !entry.record.value.isEmpty:
                    // The broker's own limit is lower than ours: publish the record of it instead.
                    logger.warning(
                        "A dead letter was refused; publishing the record of it",
                        metadata: [LogKey.topic: entry.record.topic, LogKey.error: error.description])
                    again.append((Self.recordOf(entry.record), entry.event))
                case .failure(let error):
                    // A record the broker will never take: that record's problem, not the worker's.
                    logger.error(
                        "A record could not be published",
                        metadata: [LogKey.topic: entry.record.topic, LogKey.error: error.description])
                }
            }
            guard !again.isEmpty else { break }
            if isStopping { throw ShutdownDuringRetry() }
            beat()
            metrics.retries.increment()
            logger.warning(
                "Transient failure; retrying",
                metadata: [
                    "retry.operation": "publish", LogKey.count: String(again.count),
                    LogKey.requestIDs: Self.listed(requestIDs(again)),
                ])
            try await Task.sleep(for: Self.jitter(delay))
            delay = min(delay * 2, configuration.processing.maxRetryDelay)
            pending = again
        }
        return acknowledged
    }

    /// How long acknowledged events wait for a batch's transaction to mark them published before
    /// they are marked on their own. Under steady traffic the next batch comes well within it, so
    /// marking costs no statement and no commit of its own (at 100 logins/s it was a third of the
    /// commits); it is far below the relay's grace (30 s), so the relay never takes them meanwhile.
    static let idleMarkDelay: Duration = .seconds(1)

    /// Marks the acknowledged events published in a statement of their own, once the oldest has
    /// waited `delay` for a batch to carry it.
    private func markPublishedWhileIdle(_ state: inout LoopState, after delay: Duration) async throws {
        guard let since = state.marksWaitingSince, ContinuousClock.now - since >= delay else { return }
        let marks = state.eventsToMark
        try await retrying("mark events published") { try await self.store.markPublished(marks) }
        _ = state.takeMarks()
    }

    // MARK: - 6. Finish

    private func finish(_ done: [JobRecords], _ state: inout LoopState) {
        let now = ContinuousClock.now
        for finished in done {
            let job = finished.job
            state.watermark.finish(job.message.topicPartition, offset: job.message.offset, epoch: job.epoch)
            state.remove(job)
            let took = now - job.admittedAt
            let method =
                job.request?.method.rawValue
                ?? (job.message.topic == configuration.topics.notifications ? "notification" : "unknown")
            metrics.requestDuration.labels(method, finished.outcome).observe(took)
            guard let request = job.request else { continue }
            // One line per request, so an operator can follow any of them by id or trace.
            var metadata: Logger.Metadata = [
                LogKey.requestID: request.id, LogKey.method: request.method.rawValue, LogKey.outcome: finished.outcome,
                LogKey.duration: String(took.wholeMilliseconds), LogKey.partition: String(job.message.partition),
                LogKey.offset: String(job.message.offset),
            ]
            if let trace = request.traceparent?.split(separator: "-").dropFirst().first {
                metadata[LogKey.traceID] = String(trace)
            }
            logger.info("Request handled", metadata: metadata)
        }
    }

    // MARK: - Answers

    /// The answer a redelivered request gets: its kept result, with the same event id.
    private func replay(_ kept: KeptRequest, job: Job, request: LoginRequest) -> [ProducerRecord] {
        metrics.duplicates.increment()
        guard let key = configuration.resultsKey, let sealed = kept.resultSealed,
            let box = AESGCM.Sealed(combined: sealed),
            let json = AESGCM.open(box, key: key, aad: Array(request.id.utf8)),
            let result = try? MessageCoding.decode(LoginResultData.self, from: json)
        else {
            // No results key, or another one than sealed it: the request was acted on, and its
            // answer cannot be given again (nor its content compared).
            logger.warning(
                "Request already processed; its answer cannot be given again", metadata: [LogKey.requestID: request.id])
            return refusal(
                LoginError(
                    .internalError, "the request was processed, but its answer cannot be given again; send a new one",
                    retriable: true), job: job, request: request)
        }
        // A reused id with other content never gets the first request's answer. The digests are
        // keyed with the key that opened the answer, so they compare.
        if let stored = kept.digest, !ConstantTime.equals(stored, job.digest) {
            logger.warning("Request id reused with other content", metadata: [LogKey.requestID: request.id])
            return refusal(
                LoginError(.malformedRequest, "this id belongs to another request; send a new id", field: "id"),
                job: job, request: request)
        }
        logger.info("Request already processed; publishing its result again", metadata: [LogKey.requestID: request.id])
        return [
            resultRecord(result, requestID: request.id, request.traceparent, tag: Self.answerTag(digest: job.digest))
        ]
    }

    /// The answer of a refused request (nothing written); unexpected errors are logged and
    /// answered `internal_error`.
    private func refusal(_ error: any Error, job: Job, request: LoginRequest) -> [ProducerRecord] {
        let failure: LoginError
        if let error = error as? LoginError {
            failure = error
        } else {
            logger.error(
                "Request failed unexpectedly",
                metadata: [LogKey.requestID: request.id, LogKey.error: ErrorPolicy.loggable(error)])
            failure = LoginError(.internalError, "internal error; see the worker's log", retriable: true)
        }
        return [
            resultRecord(
                .failure(requestID: request.id, error: failure.payload), requestID: request.id, request.traceparent,
                tag: Self.refusalTag(failure, digest: job.digest))
        ]
    }

    private static func outcome(of error: any Error) -> String {
        (error as? LoginError)?.code.rawValue ?? ErrorCode.internalError.rawValue
    }

    /// The request's X25519 `reply_key`, checked before anything is prepared; required (when
    /// configured so) for every method whose answer carries a secret.
    static func replyKey(_ request: LoginRequest, required: Bool) throws -> [UInt8]? {
        guard let text = request.data.replyKey else {
            if required, request.method.answerCarriesSecret {
                throw LoginError(
                    .malformedRequest, "reply_key is required: results are sealed to the gateway's key",
                    field: "data.reply_key")
            }
            return nil
        }
        guard let key = Base64URL.decode(text), key.count == 32 else {
            throw LoginError(
                .malformedRequest, "reply_key must be a base64url X25519 public key", field: "data.reply_key")
        }
        guard X25519.isUsablePublicKey(key) else {
            throw LoginError(
                .malformedRequest, "reply_key is not a usable X25519 public key (small order or not canonical)",
                field: "data.reply_key")
        }
        return key
    }

    // MARK: - Records

    /// The result's CloudEvent id: every copy of one answer has the same id (so a gateway can
    /// deduplicate), and two different answers to one id never do.
    static func resultEventID(requestID: String, tag: String) -> String {
        var bytes = Array(SHA256.hash("auth.login.result:" + requestID + "\u{0}" + tag).prefix(16))
        bytes[6] = 0x80 | (bytes[6] & 0x0F)  // UUIDv8: custom
        bytes[8] = 0x80 | (bytes[8] & 0x3F)
        let hex = Hex.encode(bytes)
        let parts = [
            hex.prefix(8), hex.dropFirst(8).prefix(4), hex.dropFirst(12).prefix(4), hex.dropFirst(16).prefix(4),
            hex.dropFirst(20),
        ]
        return parts.joined(separator: "-")
    }

    static func answerTag(digest: [UInt8]) -> String { "answer:" + Hex.encode(digest) }

    static func refusalTag(_ error: LoginError, digest: [UInt8]) -> String {
        "refused:\(error.code.rawValue):" + Hex.encode(digest)
    }

    private func resultRecord(
        _ result: LoginResultData, json: [UInt8]? = nil, requestID: String, _ traceparent: String?, tag: String
    ) -> ProducerRecord {
        let value = CloudEvent<LoginResultData>.json(
            id: Self.resultEventID(requestID: requestID, tag: tag), source: configuration.eventSource,
            type: LoginResultData.eventType, time: clock.now(), traceparent: traceparent,
            data: json ?? result.jsonBytes)
        metrics.count(result)
        return ProducerRecord(
            topic: configuration.topics.results, key: Array(requestID.utf8), value: value,
            headers: [KafkaHeader(key: "content-type", string: CloudEvent<LoginResultData>.contentType)])
    }

    /// The dead letter of a message: a copy without the credentials the worker can find, cut to
    /// `AUTH_DLQ_MAX_BYTES`, with `dlq-*` headers saying why and where it came from.
    private func deadLetter(_ message: KafkaMessage, reason: String, text: String) -> ProducerRecord {
        metrics.deadLetters.labels(reason).increment()
        let copy = DeadLetters.copy(of: message.value, limit: configuration.processing.deadLetterMaxBytes)
        var headers =
            message.headers.filter { !$0.key.hasPrefix("dlq-") } + [
                KafkaHeader(key: "dlq-reason", string: reason),
                KafkaHeader(key: "dlq-message", string: text),
                KafkaHeader(key: "dlq-source-topic", string: message.topic),
                KafkaHeader(key: "dlq-source-partition", string: String(message.partition)),
                KafkaHeader(key: "dlq-source-offset", string: String(message.offset)),
            ]
        if copy.redacted { headers.append(KafkaHeader(key: "dlq-redacted", string: "credentials")) }
        if let size = copy.truncatedFrom { headers.append(KafkaHeader(key: "dlq-truncated", string: String(size))) }
        // Headers are the gateway's: a message with megabytes of them is cut to its dlq-* headers.
        if headers.reduce(0, { $0 + $1.key.utf8.count + ($1.value?.count ?? 0) }) > 64 << 10 {
            headers = headers.filter { $0.key.hasPrefix("dlq-") }
        }
        return ProducerRecord(
            topic: configuration.topics.deadLetters, key: message.key.map { Array($0.prefix(4096)) }, value: copy.value,
            headers: headers)
    }

    /// What is published when the broker refuses a dead letter for good (too large for the
    /// topic's own limit): the record of it, headers only.
    static func recordOf(_ deadLetter: ProducerRecord) -> ProducerRecord {
        var headers = deadLetter.headers.filter { $0.key.hasPrefix("dlq-") }
        if !headers.contains(where: { $0.key == "dlq-truncated" }) {
            headers.append(KafkaHeader(key: "dlq-truncated", string: String(deadLetter.value.count)))
        }
        return ProducerRecord(topic: deadLetter.topic, key: deadLetter.key, value: [], headers: headers)
    }

    // MARK: - Retries

    /// Up to 20 ids, comma-separated, and how many more.
    static func listed(_ ids: [String]) -> String {
        ids.count <= 20
            ? ids.joined(separator: ",") : ids.prefix(20).joined(separator: ",") + " and \(ids.count - 20) more"
    }

    /// Runs `body` until it succeeds or fails definitely; transient failures wait with capped
    /// exponential backoff and full jitter. Gives up only when the worker is stopping.
    ///
    /// Each retry's log line names the requests waiting on it (`auth.request_ids`, the first 20 and
    /// how many more), so an operator following one request id sees its retries.
    func retrying<T: Sendable>(
        _ what: String, requestIDs: [String] = [], _ body: @Sendable () async throws -> T
    ) async throws -> T {
        var delay = configuration.processing.initialRetryDelay
        var attempt = 1
        while true {
            do {
                return try await body()
            } catch let error where ErrorPolicy.classify(error) == .transient {
                if isStopping { throw ShutdownDuringRetry() }
                beat()
                metrics.retries.increment()
                let jittered = Self.jitter(delay)
                var metadata: Logger.Metadata = [
                    "retry.operation": what, LogKey.attempt: String(attempt),
                    LogKey.delay: String(jittered.wholeMilliseconds), LogKey.error: ErrorPolicy.loggable(error),
                ]
                if !requestIDs.isEmpty { metadata[LogKey.requestIDs] = Self.listed(requestIDs) }
                logger.warning("Transient failure; retrying", metadata: metadata)
                try await Task.sleep(for: jittered)
                delay = min(delay * 2, configuration.processing.maxRetryDelay)
                attempt += 1
            }
        }
    }

    private static func jitter(_ delay: Duration) -> Duration {
        .milliseconds(Int64.random(in: 0...max(delay.wholeMilliseconds, 1)))
    }
}

// MARK: - State of the loop

/// A consumed message on its way through the pipeline. Owned by the loop.
final class Job {
    let seq: Int
    let message: KafkaMessage
    /// The assignment of its partition when it was read.
    let epoch: Int
    let admittedAt = ContinuousClock.now
    var request: LoginRequest?
    /// The keyed digest of the request's content (or of the raw value).
    var digest: [UInt8] = []
    var phase: Phase = .lookup {
        didSet { kind = phase.kind }
    }
    /// The case of `phase` without its payload: what the loop's scans test, several times a
    /// pass, without copying the payload (a prepared write, its strings and arrays) each time.
    private(set) var kind: Phase.Kind = .lookup
    /// Set when a write conflict sent the job back to look its id up (once at most).
    var lookedUpAgain = false

    /// Messages with the same partition and key are written in order; messages without a key
    /// are ordered against nothing.
    let lane: LaneKey

    init(seq: Int, message: KafkaMessage, epoch: Int) {
        self.seq = seq
        self.message = message
        self.epoch = epoch
        lane = LaneKey(
            topic: message.topic, partition: message.partition, key: message.key ?? [],
            offset: message.key == nil ? message.offset : -1)
    }
}

/// Where a job is ordered: its partition and key (or, without a key, its own offset).
///
/// The loop hashes a lane several times a pass (the lane table, the changed set, the writer it
/// goes to), so its hash is computed once, with the key's bytes hashed as one buffer (an array
/// of bytes hashes them one by one).
struct LaneKey: Hashable {
    let topic: String
    let partition: Int32
    let key: [UInt8]
    let offset: Int64
    /// The hash of the four fields, with this process's seed.
    let digest: Int

    init(topic: String, partition: Int32, key: [UInt8], offset: Int64) {
        self.topic = topic
        self.partition = partition
        self.key = key
        self.offset = offset
        var hasher = Hasher()
        hasher.combine(topic)
        hasher.combine(partition)
        key.withUnsafeBytes { hasher.combine(bytes: $0) }
        hasher.combine(offset)
        digest = hasher.finalize()
    }

    static func == (lhs: LaneKey, rhs: LaneKey) -> Bool {
        lhs.digest == rhs.digest && lhs.partition == rhs.partition && lhs.offset == rhs.offset && lhs.key == rhs.key
            && lhs.topic == rhs.topic
    }

    func hash(into hasher: inout Hasher) { hasher.combine(digest) }

    /// Which of `shards` writers the lane's jobs go to (always the same one for a lane).
    func shard(of shards: Int) -> Int { Int(UInt(bitPattern: digest) % UInt(max(shards, 1))) }
}

/// A request to prepare in the background, with what the pipeline decided about it.
struct Preparation: Sendable {
    let seq: Int
    let request: LoginRequest
    let digest: [UInt8]
    let replyKey: [UInt8]?
}

enum Phase {
    /// Another job with the same request id is in flight: this one waits for its outcome.
    case waitingForID
    /// Its preparation reads the account: it waits until it is first in its lane.
    case waitingForLane(Preparation)
    /// To be looked up (and started) in the next pass.
    case lookup
    /// Its request id is being looked up.
    case lookingUp
    /// Its preparation runs in the background.
    case preparing
    /// Its preparation gave up (shutdown): it and the jobs behind it in its lane are replayed later.
    case abandoned
    case ready(Step)
    /// In a batch being written or published.
    case batched

    /// The cases without their payloads.
    enum Kind {
        case waitingForID, waitingForLane, lookup, lookingUp, preparing, abandoned, ready, batched
    }

    var kind: Kind {
        switch self {
        case .waitingForID: .waitingForID
        case .waitingForLane: .waitingForLane
        case .lookup: .lookup
        case .lookingUp: .lookingUp
        case .preparing: .preparing
        case .abandoned: .abandoned
        case .ready: .ready
        case .batched: .batched
        }
    }
}

/// What a ready job still needs.
enum Step: Sendable {
    /// Nothing to write: publish these records.
    case publish([ProducerRecord], outcome: String)
    case writeLogin(LoginWork)
    case writeNotification(AppleNotification)
}

/// A prepared login request.
struct LoginWork: Sendable {
    let request: LoginRequest
    let digest: [UInt8]
    let replyKey: [UInt8]?
    let prepared: any PreparedWrite
}

/// What a background preparation posts.
enum Prepared: Sendable {
    case login(LoginWork)
    case refused(any Error)
    case notification(AppleNotification)
    case notificationRefused(String)
    case abandoned
}

/// What the batch's transaction writes, per item.
enum WriteItem: Sendable {
    case login(LoginWork)
    case notification(AppleNotification)
}

enum WriteOutput: Sendable {
    /// The answer, with its JSON (written once, for keeping and for publishing).
    case login(LoginResultData, json: [UInt8])
    case notification(events: Int)
}

/// A stage of the loop running in the background: a batch being written, or published.
final class Stage<Output: Sendable>: Sendable {
    private final class Flag: Sendable {
        let value = Atomic<Bool>(false)
    }

    private let task: Task<Output, any Error>
    private let done = Flag()

    /// Runs `body` in a task of its own; `wake` is called when it has finished.
    init(wake: @escaping @Sendable () -> Void, _ body: @escaping @Sendable () async throws -> Output) {
        let done = done
        task = Task {
            defer {
                done.value.store(true, ordering: .releasing)
                wake()
            }
            return try await body()
        }
    }

    /// True once the stage has finished (its value is then available at once).
    var isDone: Bool { done.value.load(ordering: .acquiring) }

    func value() async throws -> Output { try await task.value }
}

/// A batch as written: each job's step (in the order of the batch) and the outcome of each write.
struct WrittenBatch: Sendable {
    let steps: [(Int, Step?)]
    let outcomes: [PostgresStore.ItemOutcome<WriteOutput>]
    /// The events this batch's transaction marked published.
    let marked: [UUID]
}

/// What one job publishes: its answer or dead letter, and the events its write caused.
struct JobRecords {
    let job: Job
    let records: [ProducerRecord]
    let events: [OutboxEvent]
    let outcome: String
}

struct LoopState {
    var jobs: [Int: Job] = [:]
    /// Job seqs per lane, in the order they were read.
    var lanes: [LaneKey: [Int]] = [:]
    /// Lanes whose jobs changed since they were last looked at for ready jobs.
    private var changedLanes: Set<LaneKey> = []
    /// Jobs to look up and start in the next pass, in read order.
    var toStart: [Int] = []
    var watermark = OffsetWatermark()
    /// Per partition, the assignment its last message was read under.
    var reading: [TopicPartition: Int] = [:]
    /// Request ids held by a job in flight, and the jobs with the same id waiting for it.
    private var heldIDs: [String: Int] = [:]
    private var waitingForID: [String: [Int]] = [:]
    /// Events acknowledged by the broker, to mark published in the next transaction.
    var eventsToMark: [UUID] = []
    /// When the oldest of `eventsToMark` was acknowledged; nil when there are none.
    var marksWaitingSince: ContinuousClock.Instant?

    /// Notes events the broker acknowledged, to be marked published.
    mutating func acknowledged(_ events: [UUID]) {
        guard !events.isEmpty else { return }
        if eventsToMark.isEmpty { marksWaitingSince = .now }
        eventsToMark += events
    }

    /// The events to mark published in the transaction about to begin.
    mutating func takeMarks() -> [UUID] {
        defer {
            eventsToMark = []
            marksWaitingSince = nil
        }
        return eventsToMark
    }
    private var seq = 0

    mutating func nextSeq() -> Int {
        seq += 1
        return seq
    }

    /// Jobs parked until they are first in their lane (`Phase.waitingForLane`).
    var parked: Set<Int> = []

    func isFirstInLane(_ job: Job) -> Bool { lanes[job.lane]?.first == job.seq }

    mutating func add(_ job: Job) {
        jobs[job.seq] = job
        lanes[job.lane, default: []].append(job.seq)
        changed(job)
    }

    /// Notes that a job's phase changed: its lane is looked at again, and a job to look up is queued.
    mutating func changed(_ job: Job) {
        changedLanes.insert(job.lane)
        if job.kind == .lookup { toStart.append(job.seq) }
    }

    /// True when `job` may go ahead with `id`: no other job in flight holds it. Otherwise the job
    /// waits for the holder to finish.
    mutating func hold(_ id: String, for job: Job) -> Bool {
        guard heldIDs[id] == nil else {
            waitingForID[id, default: []].append(job.seq)
            return false
        }
        heldIDs[id] = job.seq
        return true
    }

    mutating func remove(_ job: Job) {
        jobs[job.seq] = nil
        if var lane = lanes[job.lane] {
            if lane.first == job.seq { lane.removeFirst() } else { lane.removeAll { $0 == job.seq } }
            lanes[job.lane] = lane.isEmpty ? nil : lane
        }
        changedLanes.insert(job.lane)
        guard let id = job.request?.id, heldIDs[id] == job.seq else { return }
        heldIDs[id] = nil
        // The next job with this id goes ahead now, and will find this one's answer.
        guard var waiting = waitingForID[id], !waiting.isEmpty else { return }
        let next = waiting.removeFirst()
        waitingForID[id] = waiting.isEmpty ? nil : waiting
        if let job = jobs[next] {
            heldIDs[id] = next
            job.phase = .lookup
            changed(job)
        }
    }

    /// Each changed lane's jobs that are ready, after those already in a batch and up to the
    /// first that is not ready, in read order: of the lanes that hash to `shard`, `limit` at most.
    mutating func readyJobs(shard: Int, of shards: Int, limit: Int = .max) -> [Job] {
        var ready: [Job] = []
        var looked: [LaneKey] = []
        for lane in changedLanes where shards == 1 || lane.shard(of: shards) == shard {
            looked.append(lane)
            for seq in lanes[lane] ?? [] {
                guard let job = jobs[seq] else { break }
                if job.kind == .batched { continue }
                guard job.kind == .ready else { break }
                ready.append(job)
            }
        }
        for lane in looked { changedLanes.remove(lane) }
        ready.sort { $0.seq < $1.seq }
        guard ready.count > limit else { return ready }
        // Cut in read order, which keeps each lane's prefix; the lanes cut short are looked at again.
        for job in ready[limit...] { changedLanes.insert(job.lane) }
        return Array(ready.prefix(limit))
    }

    /// How many jobs are in each phase, for a drain's log line: `ready=3 abandoned=1`.
    var phaseSummary: String {
        var counts: [String: Int] = [:]
        for job in jobs.values {
            let name =
                switch job.phase {
                case .lookup: "lookup"
                case .lookingUp: "looking_up"
                case .preparing: "preparing"
                case .ready: "ready"
                case .batched: "batched"
                case .waitingForID: "waiting_for_id"
                case .waitingForLane: "waiting_for_lane"
                case .abandoned: "abandoned"
                }
            counts[name, default: 0] += 1
        }
        return counts.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
    }

    /// False when nothing in flight can finish any more: only abandoned jobs, jobs waiting for
    /// an id another job holds, and ready jobs behind either in their lane (a lane is written in
    /// order, so those can never be batched). A drain ends there instead of waiting for ever.
    var canProgress: Bool {
        for job in jobs.values {
            switch job.kind {
            case .lookup, .lookingUp, .preparing, .batched: return true
            case .ready, .waitingForID, .waitingForLane, .abandoned: continue
            }
        }
        for seqs in lanes.values {
            lane: for seq in seqs {
                guard let job = jobs[seq] else { break lane }
                switch job.kind {
                case .batched: continue lane
                // A parked job at the head of its lane is started on the next turn.
                case .ready, .waitingForLane: return true
                default: break lane
                }
            }
        }
        return false
    }
}

extension OutboxEvent {
    /// The Kafka record that publishes this event.
    var record: ProducerRecord {
        ProducerRecord(
            topic: topic, key: Array(key.utf8), value: payload,
            headers: [KafkaHeader(key: "content-type", string: CloudEvent<UserCreatedData>.contentType)])
    }
}
