import Foundation
import Messages

/// One item of a batch's transaction, as the store's batch writer runs it: the transaction's body
/// is this domain code alone (the store calls in, the item writes through the `UnitOfWork`).
public enum WriteItem: Sendable {
    case login(PreparedRequest)
    case notification(AppleNotification)
    /// A refusal's audit row: the refusal wrote nothing else.
    case audit(AuditEntry)

    /// The tenant the item reads and writes as.
    public var tenant: String {
        switch self {
        case .login(let work): work.tenant
        case .notification(let notification): notification.tenant
        case .audit(let entry): entry.tenant
        }
    }

    /// Writes the item: a request's effects, its answer sealed and kept; a notification's; an
    /// audit row.
    public func write(_ unit: any UnitOfWork, resultsKey: [UInt8]?, rememberedUntil: Date, at now: Date) throws
        -> WriteOutput
    {
        switch self {
        case .notification(let notification):
            return .notification(events: try notification.write(unit))
        case .login(let work):
            let (result, json) = try work.write(unit, resultsKey: resultsKey, rememberedUntil: rememberedUntil, at: now)
            return .login(result, json: json)
        case .audit(let entry):
            try unit.recordAudit(entry)
            return .audited
        }
    }

    /// What the item leaves in the transaction when it was refused, its own writes dropped: a
    /// login's audit row.
    public func recordRefusal(_ error: any Error, in unit: any UnitOfWork, at now: Date) throws {
        if case .login(let work) = self { try work.recordRefusal(error, in: unit, at: now) }
    }
}

/// What writing a `WriteItem` gave.
public enum WriteOutput: Sendable {
    /// The answer, with its JSON (written once, for keeping and for publishing).
    case login(LoginResultData, json: [UInt8])
    case notification(events: Int)
    case audited
}
