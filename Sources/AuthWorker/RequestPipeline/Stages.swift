import Foundation

/// The loop's work in the background and its own clocks, in one place: the batch each writer is
/// writing (and since when), the publishes under way and the records waiting for one, the lookup,
/// and when the loop last polled, read the lag, reported a drain or armed a linger. `LoopState`
/// keeps the jobs; this keeps the stages. Its decisions that need no broker and no database
/// (`writeSlots`, `lookupWriter`, `pollTimeout`) are pure, read by `LoopState.next`,, and tested as such
/// (`PipelineStateTests`).
struct Stages {
    /// Per writer, the batch it is writing; nil when it is free.
    var writing: [Stage<WrittenBatch>?]
    /// Per writer, when it began its batch.
    var writingSince: [ContinuousClock.Instant]
    /// Publishes overlap (a topic's first record can wait on the broker), finishing in any
    /// order: the offset watermark and the per-partition order of the producer keep what matters.
    var publishing: [(stage: Stage<[UUID]>, jobs: [JobRecords])] = []
    /// Written jobs' records, for the next publish.
    var toPublish: [JobRecords] = []
    var looking: RequestPipeline.Lookup?
    /// While draining, when to say again what the drain waits for.
    var nextDrainReport: ContinuousClock.Instant?
    var nextLagReading = ContinuousClock.now
    /// Whether the consumer may hold messages the loop has not taken: the last poll stopped at
    /// its limit (no arrival rings for a queue that never emptied).
    var mayHoldMore = true
    var lastPoll = ContinuousClock.now
    /// With `AUTH_BATCH_LINGER_MS`: when the loop is to look again at requests held for more.
    var lingerAlarm: ContinuousClock.Instant?

    /// How many publishes may be under way at once.
    static let publishesInFlight = 4

    init(writers: Int) {
        writing = Array(repeating: nil, count: max(writers, 1))
        writingSince = Array(repeating: .now, count: max(writers, 1))
    }

    var writers: Int { writing.count }

    /// Something runs in the background, or waits to be published.
    var isBusy: Bool {
        writing.contains { $0 != nil } || !publishing.isEmpty || looking != nil || !toPublish.isEmpty
    }

    /// The free writers that may start a batch now, in the writers' order, each with the fewest
    /// ready jobs worth its transaction. A writer after a busy one (writing, or reading a lookup)
    /// starts only behind a backlog (`spillBacklog`), or when the one before has been writing for
    /// long (`spillAfter`): requests short of a batch worth its own transaction wait for the busy
    /// writer rather than pay for a second transaction and wake another connection and its server
    /// process, both gone cold.
    func writeSlots(
        now: ContinuousClock.Instant, batchMax: Int, spillBacklog: Int, spillAfter: Duration
    ) -> [(writer: Int, minimum: Int)] {
        let limit = max(batchMax, 1)
        var slots: [(writer: Int, minimum: Int)] = []
        var busyBefore = false
        for writer in 0..<writers {
            if looking?.writer == writer {
                busyBefore = true
                continue
            }
            guard writing[writer] == nil else {
                if now - writingSince[writer] < spillAfter { busyBefore = true }
                continue
            }
            slots.append((writer, busyBefore ? min(spillBacklog, limit) : 1))
        }
        return slots
    }

    /// The writer a lookup reads on: the first with nothing to write, nor `given` a batch just
    /// now (under light load a request's lookup and write then share one connection,
    /// `PostgresStore.ReadConnection`); nil for the pool's connections.
    func lookupWriter(excluding given: Set<Int> = []) -> Int? {
        (0..<writers).first { writing[$0] == nil && !given.contains($0) }
    }

    /// How long an idle poll may sleep: `batchWait`, shorter while acknowledged events wait to be
    /// marked published (`markDelay` is when they are marked on their own).
    static func pollTimeout(batchWait: Duration, marksWaiting: Bool, markDelay: Duration) -> Duration {
        marksWaiting ? min(batchWait, markDelay / 4) : batchWait
    }

    /// Takes the publishes that are done, each exactly once: a stage that completes while this
    /// runs stays for the next turn (removing "whatever is done now" afterwards would drop it
    /// unfinished, its jobs stuck and its partition's offsets with them).
    mutating func takeDonePublishes() -> [(stage: Stage<[UUID]>, jobs: [JobRecords])] {
        let (done, pending) = RequestPipeline.split(publishing) { $0.stage.isDone }
        publishing = pending
        return done
    }

    /// Takes the written batches that are done, freeing their writers.
    mutating func takeDoneWrites() throws -> [WrittenBatch] {
        var done: [WrittenBatch] = []
        for writer in 0..<writers {
            guard let stage = writing[writer], stage.isDone else { continue }
            done.append(try stage.value())
            writing[writer] = nil
        }
        return done
    }

    /// The records to publish now, when a publish may start: all that wait, in one publish.
    mutating func takeToPublish() -> [JobRecords]? {
        guard publishing.count < Self.publishesInFlight, !toPublish.isEmpty else { return nil }
        defer { toPublish = [] }
        return toPublish
    }

    /// True once per `interval` while draining (the first call only starts the clock).
    mutating func drainReportDue(at now: ContinuousClock.Instant, interval: Duration = .seconds(5)) -> Bool {
        guard let report = nextDrainReport else {
            nextDrainReport = now + interval
            return false
        }
        guard now >= report else { return false }
        nextDrainReport = now + interval
        return true
    }
}
