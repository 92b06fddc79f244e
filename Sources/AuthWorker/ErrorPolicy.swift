import AuthDomain
import Foundation
import JOSE
import Kafka
import PGStore

/// What a failure means for the message it happened to, decided in one place.
enum ErrorPolicy {
    enum Kind: Equatable {
        /// Another try may succeed (the database or broker unreachable, a deadlock, a provider's
        /// keys unreachable): retry with backoff; never answer it.
        case transient
        /// A definite answer for the request (its `LoginError`).
        case refusal
        /// Anything else (a bug, a database error no retry fixes): answered `internal_error`,
        /// logged with the details, never stopping the worker.
        case unexpected
    }

    static func classify(_ error: any Error) -> Kind {
        switch error {
        case is LoginError: .refusal
        case let error as PGError: error.isRetriable ? .transient : .unexpected
        case let error as PGTransactionError: error.isRetriable ? .transient : .unexpected
        case let error as KafkaError: error.isRetriable ? .transient : .unexpected
        case let error as JOSEError: error.code == .keySetUnavailable ? .transient : .unexpected
        default: .unexpected
        }
    }

    /// True when `error` says PostgreSQL cannot be reached or has just gone (the connection lost
    /// or refused, the server shutting down or not yet taking connections): no answer is coming
    /// from it until it, or the node that takes over, is back.
    static func isDatabaseUnreachable(_ error: any Error) -> Bool {
        switch error {
        case let error as PGError:
            return error.isConnectionLoss
        case let error as PGTransactionError:
            return isDatabaseUnreachable(error.closureError)
        default:
            return false
        }
    }

    /// An error as the log may show it. PostgreSQL's own messages can quote row values (an
    /// e-mail, a password hash in "failing row contains"), so only the generic description and the
    /// SQLSTATE of a `PGError` are logged.
    static func loggable(_ error: any Error) -> String {
        if let error = error as? PGError { return error.description }
        if let error = error as? PGTransactionError {
            return "\(loggable(error.closureError)); the rollback failed too: \(loggable(error.rollbackError))"
        }
        return String(describing: error)
    }
}

/// Thrown when a shutdown arrives while work is waiting out a transient failure: the work is
/// abandoned, its offset not stored, and its message replayed by whoever consumes next.
struct ShutdownDuringRetry: Error {}

extension Duration {
    var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
