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

/// Stages 1 to 3 of the loop: decode what was polled, look the request ids up, prepare the
/// requests in the background.
extension RequestPipeline {
    // MARK: - 1. Decode

    func admit(_ messages: [KafkaMessage], _ state: inout LoopState) {
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
            let phase = message.topic == configuration.topics.notifications ? .lookup : decode(job, &state)
            state.add(job, in: phase)
        }
    }

    /// Reads a message's request into its job; the phase it starts in.
    func decode(_ job: Job, _ state: inout LoopState) -> Phase {
        let message = job.message
        // CloudEvents' binary content mode when the headers say so (`ce_specversion`, and no
        // `application/cloudevents` content type); the structured mode otherwise.
        let binary =
            message.headers.isEmpty
            ? nil : CloudEventMode.binaryAttributes(message.headers.lazy.map { (key: $0.key, value: $0.value) })
        let decoded =
            binary.map { decoder.decode(message.value, binaryAttributes: $0) } ?? decoder.decode(message.value)
        switch decoded {
        case .unanswerable(let reason, let text):
            logger.warning(
                "Request sent to the dead-letter topic",
                metadata: [
                    "dlq.reason": reason, LogKey.topic: message.topic, LogKey.partition: String(message.partition),
                    LogKey.offset: String(message.offset),
                ])
            return .ready(
                .publish([deadLetter(message, reason: reason, text: text)], outcome: "dead_letter", audit: nil))
        case .invalid(let id, let traceparent, let error):
            return refusedUnread(
                LoginError(error.code, error.description, field: error.field), requestID: id, traceparent,
                tenant: nil, mode: binary == nil ? .structured : .binary, message: message)
        case .valid(var request):
            if let tenant = request.tenant, tenants.flows(for: tenant) == nil {
                // A tenant this deployment does not serve: refused before anything is read or
                // written, answered in the tenant's name.
                return refusedUnread(
                    TenantFlows.unknown(tenant), requestID: request.id, request.traceparent, tenant: tenant,
                    mode: request.mode, message: message)
            }
            request.partitionKey = message.key.flatMap { String(validating: $0, as: UTF8.self) }
            job.request = request
            job.digest = HMACSHA256.mac(key: digestKey, message: MessageCoding.encode(request.data))
            return state.hold(request.key, for: job) ? .lookup : .waitingForID
        }
    }

    /// The phase of a request refused as it is read (nothing looked up, written or audited): its
    /// error result, tagged by the message's own bytes.
    private func refusedUnread(
        _ failure: LoginError, requestID: String, _ traceparent: String?, tenant: String?, mode: CloudEventMode,
        message: KafkaMessage
    ) -> Phase {
        .ready(
            .publish(
                [
                    resultRecord(
                        .failure(requestID: requestID, error: failure.payload), requestID: requestID, traceparent,
                        tenant: tenant, mode: mode,
                        tag: Self.refusalTag(failure, digest: HMACSHA256.mac(key: digestKey, message: message.value)))
                ], outcome: failure.code.rawValue, audit: nil))
    }

    // MARK: - 2. Look up, 3. prepare

    /// Starts looking up the request ids the plan names (`LoopState.next` decided it): one query
    /// in the background, while the loop goes on polling. The global guest ceiling is reserved
    /// for the new guests among them in the same stage.
    ///
    /// Under light load (a lookup read on a free writer, a few requests) the requests that need
    /// nothing but a preparation that waits for nothing are also prepared and written in the
    /// lookup's task, on that writer's thread (`writeWithLookup`): the loop is not woken between
    /// the lookup and the write, nor the writer's thread woken again for the write. When that
    /// write commits, the same task publishes its answers and events (`publishesWritten`), and
    /// the loop is woken once, when they are delivered, not first by the write's end.
    func beginLookup(_ plan: LookupPlan) -> Lookup {
        let ids = plan.requestIDs
        let guestIDs = plan.guestIDs
        let guestCeiling = configuration.accounts.guestGlobalRateLimit
        let connection: PostgresStore.ReadConnection = plan.writer.map { .writer($0) } ?? .pool
        let withLookup = plan.writer.flatMap { writer in plan.writeToo.map { (requests: $0, writer: writer) } }
        let marks = plan.marks
        let publishesWritten = plan.publishesWritten
        let stage = Stage(
            on: plan.writer.map { store.executor(ofWriter: $0) } ?? globalConcurrentExecutor, wake: wake,
            rings: { found in found.published?.stage.isDone ?? true }
        ) {
            guard !ids.isEmpty else { return LookupResult(kept: [:], guests: nil) }
            if let withLookup,
                let written = try await self.writeWithLookup(
                    withLookup.requests, guests: guestIDs, marks: marks.ids, writer: withLookup.writer)
            {
                var result = LookupResult(kept: [:], guests: nil)
                result.written = written
                if publishesWritten, let answers = self.writtenAnswers(written) {
                    // Delivered, it wakes the loop, which then takes this stage's end too.
                    let entries = self.entries(answers.lazy.map { ($0.records, $0.events) })
                    result.published = PublishedByLookup(stage: self.beginPublish(entries), answers: answers)
                }
                return result
            }
            guard guestCeiling.count > 0, !guestIDs.isEmpty else {
                let kept = try await self.retrying("look up request ids", requestIDs: ids.map(\.id)) {
                    try await self.store.keptRequests(ids, on: connection)
                }
                return LookupResult(kept: kept, guests: nil)
            }
            // The global guest ceiling is taken for the batch's new guests at once, before any
            // work, in the lookup's round trip: one atomic step per lookup, not a contended row in
            // every write transaction, and no second round trip for a batch of one.
            let found = try await self.retrying(
                "look up request ids and reserve guest sign-ups", requestIDs: ids.map(\.id)
            ) {
                try await self.store.lookUp(
                    ids, guests: guestIDs, bucket: Self.guestCeilingBucket, limit: guestCeiling, at: self.clock.now(),
                    on: connection)
            }
            return LookupResult(kept: found.kept, guests: found.guests)
        }
        return Lookup(stage: stage, jobs: plan.jobs, writer: plan.writer, marks: marks)
    }

    /// A request the lookup's own task may prepare and write, with when it was sent.
    struct WritableWithLookup: Sendable {
        let preparation: PendingPreparation
        let sent: Date?
    }

    /// Prepares requests and writes them in a transaction that looks their ids up in its first
    /// round trip (`PostgresStore.lookUpAndWrite`), in the lookup's task: one transaction, as the
    /// loop's batch would be, and one round trip fewer.
    /// - Returns: the written batch; nil, with nothing written, when any of them needs the loop
    ///   after all (an expired request, a preparation that waits or is refused, a kept answer, a
    ///   guest over the ceiling): the lookup then runs on its own and the loop starts them all,
    ///   as any looked-up jobs.
    func writeWithLookup(_ requests: [WritableWithLookup], guests: [RequestKey], marks: [UUID], writer: Int)
        async throws -> WrittenBatch?
    {
        let began = MonotonicNanos.now()
        let now = clock.now()
        var items: [WriteItem] = []
        var steps: [(Int, Step?)] = []
        var prefetch = Prefetch()
        for entry in requests {
            guard !hasExpired(sent: entry.sent, at: now),
                case .login(let work)? = prepareAtOnce(entry.preparation)
            else { return nil }
            items.append(.login(work))
            steps.append((entry.preparation.seq, .writeLogin(work)))
            prefetch.merge(work.prefetch)
        }
        let ids = requests.map(\.preparation.request.key)
        let ceiling = configuration.accounts.guestGlobalRateLimit
        let head = marks.isEmpty ? [] : [PostgresStore.deletePublished(marks)]
        let resultsKey = configuration.resultsKey
        let rememberedUntil = now + configuration.sessions.idempotencyLifetime
        let batchItems = items
        let batchPrefetch = prefetch
        let done = try await retrying("look up and write the batch", requestIDs: ids.map(\.id)) {
            try await self.store.lookUpAndWrite(
                batchItems, ids: ids, guests: guests, bucket: Self.guestCeilingBucket, limit: ceiling, head: head,
                prefetch: batchPrefetch, writer: writer, resultsKey: resultsKey, rememberedUntil: rememberedUntil,
                at: now
            ) { kept, grant in
                // Each request new, each guest within the ceiling; anything else is the loop's to answer.
                kept.isEmpty && (grant?.granted ?? guests.count) >= guests.count
            }
        }
        guard case .written(let outcomes) = done else { return nil }
        metrics.writeBatches.labels("lookup").increment()
        return WrittenBatch(
            steps: steps, outcomes: outcomes, marked: marks, began: began, committed: MonotonicNanos.now())
    }

    /// The records of a batch written in the lookup's task, published by that task as soon as
    /// it committed: the delivery under way, and each job's answer.
    struct PublishedByLookup: Sendable {
        let stage: Stage<[UUID]>
        let answers: [WrittenAnswer]
    }

    /// The bucket of the global guest ceiling (per-client buckets are `guest:<client>`).
    static let guestCeilingBucket = "guest-all"

    /// What a lookup found: the kept answers, and the guest sign-ups the global ceiling allows.
    struct LookupResult: Sendable {
        let kept: [RequestKey: KeptRequest]
        /// Nil when no ceiling applies.
        let guests: RateLimitGrant?
        /// The jobs written in the lookup's task (`writeWithLookup`); nil when the loop starts them.
        var written: WrittenBatch?
        /// Their records, published by that task; nil when the loop publishes them.
        var published: PublishedByLookup?

        init(kept: [RequestKey: KeptRequest], guests: RateLimitGrant?) {
            self.kept = kept
            self.guests = guests
        }
    }

    /// Answers the looked-up jobs that need no work, and starts preparing the rest.
    func start(
        _ seqs: [Int], kept: [RequestKey: KeptRequest], guests: RateLimitGrant?, _ state: inout LoopState
    ) {
        let starting = seqs.compactMap { state.jobs[$0] }
        var cheap: [PendingPreparation] = []
        // A few requests whose preparation waits for nothing are prepared here, in the loop: a
        // task each would cost a wake-up of the pool and another of the loop when it ends, more
        // than the work. More than a few go to tasks, spread over the cores.
        let preparesHere = starting.count <= Self.preparedInLoop
        let now = clock.now()
        var guestsAllowed = guests?.granted ?? Int.max
        for job in starting {
            guard let request = job.request else {
                startNotification(job, &state)
                continue
            }
            // The kept answer comes first: a processed request is answered again, however late.
            if let kept = kept[request.key] {
                state.move(
                    job, to: .ready(.publish(replay(kept, job: job, request: request), outcome: "replayed", audit: nil))
                )
                continue
            }
            if hasExpired(sent: Self.sent(job), at: now) {
                // The gateway has given up on it: acting now would create a session nobody receives.
                metrics.expired.increment()
                let expired = LoginError(
                    .internalError, "the request expired before it could be processed; send a new one",
                    retriable: true)
                state.move(
                    job,
                    to: .ready(
                        .publish(
                            refusal(expired, job: job, request: request), outcome: "expired",
                            audit: AuditEntry.refused(request, error: expired, at: now))))
                continue
            }
            if request.method.handler.isGuestSignUp, let guests {
                guard guestsAllowed > 0 else {
                    let error = LoginError.tooManyAttempts(
                        until: guests.windowEnd, now: now,
                        message: "too many guest sign-ups right now; try again later")
                    state.move(job, to: .ready(refused(error, job: job, request: request)))
                    continue
                }
                guestsAllowed -= 1
            }
            let replyKey: [UInt8]?
            do {
                replyKey = try request.replyKey(required: tenants.requiresReplyKey(request.tenant))
            } catch {
                state.move(job, to: .ready(refused(error, job: job, request: request)))
                continue
            }
            let preparation = PendingPreparation(seq: job.seq, request: request, digest: job.digest, replyKey: replyKey)
            if request.readsAccountWhilePreparing, !state.isFirstInLane(job) {
                // It reads the account before its write (the password to verify): it waits for
                // the requests before it on its key, so it sees what they did (a registration).
                state.move(job, to: .waitingForLane(preparation))
                continue
            }
            state.move(job, to: .preparing)
            // Password hashing waits on its own pool, a provider's call for its answer: each such
            // request in a task of its own, so none waits for another's hash or provider. The rest
            // is CPU work of tens of microseconds: in a few chunks, one task each, spread over the
            // cores.
            if request.method.handler.preparesAlone {
                prepare([preparation])
            } else if preparesHere, let outcome = prepareAtOnce(preparation) {
                state.move(job, to: step(for: outcome, job: job))
            } else {
                cheap.append(preparation)
            }
        }
        let chunk = max(16, (cheap.count + 7) / 8)
        for start in stride(from: 0, to: cheap.count, by: chunk) {
            prepare(Array(cheap[start..<min(start + chunk, cheap.count)]))
        }
    }

    /// When a job's request was sent: its own time, else its message's.
    static func sent(_ job: Job) -> Date? {
        job.request?.time ?? job.message.timestamp.map { Date(timeIntervalSince1970: Double($0) / 1000) }
    }

    /// True when a request sent at `sent` waited past the deadline: the gateway has given up on it.
    func hasExpired(sent: Date?, at now: Date) -> Bool {
        guard configuration.requestDeadline > 0, let sent else { return false }
        return now.timeIntervalSince(sent) > configuration.requestDeadline
    }

    /// Requests in flight from which none waits for others to join it (`lingersUntil`).
    static let lingerFill = 64

    /// How many requests starting together the loop prepares itself (when their preparation waits
    /// for nothing).
    static let preparedInLoop = 4

    /// Prepares a request in the loop when its preparation waits for nothing.
    /// - Returns: its outcome; nil when it waits, or failed in a way worth another try (a task
    ///   then prepares it, retrying as it does).
    func prepareAtOnce(_ preparation: PendingPreparation) -> PreparationOutcome? {
        do {
            guard let flows = tenants.flows(for: preparation.request.tenant) else {
                return .refused(TenantFlows.unknown(preparation.request.tenant ?? Tenant.defaultName))
            }
            guard let prepared = try flows.prepareAtOnce(preparation.request) else { return nil }
            return .login(
                PreparedRequest(
                    request: preparation.request, digest: preparation.digest, replyKey: preparation.replyKey,
                    prepared: prepared))
        } catch  where ErrorPolicy.classify(error) == .transient {
            return nil
        } catch {
            return .refused(error)
        }
    }

    /// A lookup of request ids running in the background, and the jobs waiting for it.
    struct Lookup {
        let stage: Stage<LookupResult>
        let jobs: [Int]
        /// The batch writer it reads on, nil for the pool.
        let writer: Int?
        /// The acknowledged events taken for a write in the lookup's task: marked by it, or
        /// handed back to the loop when the loop starts the jobs.
        let marks: PendingMarks
    }

    /// Prepares requests one after the other in a task of their own on the cooperative pool (not
    /// on the loop's thread, which is the consumer's), posting each outcome. In a chunk of several,
    /// one whose preparation would wait (a provider's keys to fetch, a read) is handed a task of its
    /// own, so the rest of the chunk does not wait for it.
    func prepare(_ preparations: [PendingPreparation]) {
        Task(executorPreference: globalConcurrentExecutor) {
            for preparation in preparations {
                if preparations.count > 1 {
                    if let outcome = self.prepareAtOnce(preparation) {
                        self.board.post(preparation.seq, outcome)
                    } else {
                        self.prepare([preparation])
                    }
                    continue
                }
                let outcome: PreparationOutcome
                do {
                    // A tenant dropped by a reload since the request was read is refused as unknown.
                    let tenant = preparation.request.tenant
                    guard let flows = self.tenants.flows(for: tenant) else {
                        throw TenantFlows.unknown(tenant ?? Tenant.defaultName)
                    }
                    let prepared = try await self.retrying(
                        "prepare request", requestIDs: [preparation.request.id]
                    ) {
                        try await flows.prepare(preparation.request)
                    }
                    outcome = .login(
                        PreparedRequest(
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

    func startNotification(_ job: Job, _ state: inout LoopState) {
        state.move(job, to: .preparing)
        let seq = job.seq
        let value = job.message.value
        Task(executorPreference: globalConcurrentExecutor) {
            let outcome: PreparationOutcome
            let envelope: AppleNotificationFlow.Envelope
            do {
                envelope = try AppleNotificationFlow.envelope(value)
            } catch {
                self.board.post(seq, .notificationRefused(String(describing: error)))
                return
            }
            guard let notifications = self.notificationFlow(for: envelope.tenant) else {
                self.board.post(
                    seq,
                    .notificationRefused(
                        envelope.tenant.map { "this deployment serves no tenant \"\($0)\"" }
                            ?? "Sign in with Apple is not enabled"))
                return
            }
            do {
                // Apple's keys unreachable: this notification waits in its own lane; logins go on.
                let notification = try await self.retrying("verify a provider notification") {
                    try await notifications.prepare(envelope)
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

    /// The flow that verifies and applies a notification of `tenant` (nil: the default one's),
    /// with that tenant's Apple audiences; nil for a tenant not served or the default tenant
    /// without Sign in with Apple.
    func notificationFlow(for tenant: String?) -> AppleNotificationFlow? {
        guard let tenant else { return notifications }
        guard let flows = tenants.flows(for: tenant) else { return nil }
        return AppleNotificationFlow(
            provider: flows.providers["apple"], configuration: flows.configuration, clock: clock, tenant: tenant)
    }

    /// Moves finished preparations into their jobs.
    func collect(_ state: inout LoopState) {
        for (seq, outcome) in board.take() {
            guard let job = state.jobs[seq] else { continue }
            state.move(job, to: step(for: outcome, job: job))
        }
    }

    func step(for outcome: PreparationOutcome, job: Job) -> Phase {
        switch outcome {
        case .login(let work):
            return .ready(.writeLogin(work))
        case .refused(let error):
            guard let request = job.request else { return .abandoned }
            return .ready(refused(error, job: job, request: request))
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
                    outcome: "dead_letter", audit: nil))
        case .abandoned:
            return .abandoned
        }
    }

}
