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

/// A request to prepare in the background, with what the pipeline decided about it.
struct PendingPreparation: Sendable {
    let seq: Int
    let request: LoginRequest
    let digest: [UInt8]
    let replyKey: [UInt8]?
}

enum Phase {
    /// Another job with the same request id is in flight: this one waits for its outcome.
    case waitingForID
    /// Its preparation reads the account: it waits until it is first in its lane.
    case waitingForLane(PendingPreparation)
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
    /// Nothing to write but its audit row, if any (in the next batch's transaction): publish
    /// these records.
    case publish([ProducerRecord], outcome: String, audit: AuditEntry?)
    case writeLogin(PreparedRequest)
    case writeNotification(AppleNotification)
}

/// What a background preparation posts.
enum PreparationOutcome: Sendable {
    case login(PreparedRequest)
    case refused(any Error)
    case notification(AppleNotification)
    case notificationRefused(String)
    case abandoned
}
