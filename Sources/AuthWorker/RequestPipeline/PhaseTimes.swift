import ServiceKit

/// Where a message's time goes on its way through the loop, by phase:
/// `auth_request_phase_seconds{phase}`.
///
/// Each timed phase runs from one mark to the next the job reached, and is named by where it
/// starts; a job that skips a phase (a replay needs no preparation, an invalid request no lookup)
/// gives that time to the phase before. `batched` is split at the commit into writing and
/// publishing. Together they add up to the message's `auth_request_duration_seconds`.
enum TimedPhase: String, CaseIterable, Sendable {
    /// Taken from the broker, until its lookup began: waiting for the lookup in flight, its
    /// lane, an earlier copy of its id, or a linger.
    case toLookUp = "to_look_up"
    /// Its id looked up (with the guest ceiling), until its preparation began.
    case lookingUp = "looking_up"
    /// Checked and prepared: a token's signature, a password's hash, the session signed.
    case preparing
    /// Ready, until its batch's transaction began on a writer's thread.
    case ready
    /// The batch's transaction, to its commit.
    case writing
    /// Under light load: looked up, prepared and written in one task and one transaction, to
    /// its commit.
    case writingWithLookup = "looking_up_and_writing"
    /// From the commit (or, with nothing to write, from being ready) until the broker
    /// acknowledged its answer and events.
    case publishing

    /// Its place in `allCases`.
    var index: Int {
        switch self {
        case .toLookUp: 0
        case .lookingUp: 1
        case .preparing: 2
        case .ready: 3
        case .writing: 4
        case .writingWithLookup: 5
        case .publishing: 6
        }
    }
}

/// Phase times counted by the loop as its jobs finish, without a lock, and added to
/// `auth_request_phase_seconds` once a pass (`WorkerMetrics.add`).
struct PhaseTally {
    /// By `TimedPhase.index`.
    var tallies = TimedPhase.allCases.map { _ in Histogram.Tally(bounds: WorkerMetrics.phaseBounds) }

    /// Counts each phase of a finished job's way.
    mutating func observe(_ marks: PhaseTimestamps, admitted: UInt64, finished: UInt64) {
        marks.forEach(admitted: admitted, finished: finished) { phase, took in
            tallies[phase.index].observe(nanoseconds: took)
        }
    }
}

/// When a job reached each mark that begins a timed phase (`TimedPhase`), in `MonotonicNanos`;
/// nil for those it did not reach. Set by `LoopState` as the job changes phase, and from its
/// batch's `WrittenBatch`.
struct PhaseTimestamps {
    var lookupBegan: UInt64?
    var prepareBegan: UInt64?
    var ready: UInt64?
    var writeBegan: UInt64?
    var committed: UInt64?
    /// Looked up, prepared and written in the lookup's task (`writeWithLookup`).
    private(set) var writtenWithLookup = false

    /// The lookup's task wrote it: from its lookup to the commit is one phase.
    mutating func wroteWithLookup(committed: UInt64) {
        writtenWithLookup = true
        prepareBegan = nil
        ready = nil
        writeBegan = nil
        self.committed = committed
    }

    /// Each phase the job went through, with its nanoseconds, in order (`body` once a phase). A
    /// mark out of order (a clock read on another thread a moment behind the loop's) ends the
    /// phase before at no time, never a negative one.
    func forEach(admitted: UInt64, finished: UInt64, _ body: (TimedPhase, UInt64) -> Void) {
        var phase = TimedPhase.toLookUp
        var since = admitted
        func reach(_ next: TimedPhase, _ mark: UInt64?) {
            guard let mark else { return }
            body(phase, mark > since ? mark - since : 0)
            phase = next
            since = max(mark, since)
        }
        reach(writtenWithLookup ? .writingWithLookup : .lookingUp, lookupBegan)
        reach(.preparing, prepareBegan)
        reach(.ready, ready)
        reach(.writing, writeBegan)
        reach(.publishing, committed)
        body(phase, finished > since ? finished - since : 0)
    }
}
