import Foundation
import Messages

/// A definite answer that is not a success: becomes an error result with the contract's code.
public struct LoginError: Error, Equatable, CustomStringConvertible {
    public var code: ErrorCode
    /// For logs and the result's `message`; never contains a secret.
    public var message: String
    public var retriable: Bool
    public var field: String?
    /// For throttling: when to try again (RFC 3339).
    public var retryAfter: String?
    /// The same, in seconds from the answer (at least 1).
    public var retryAfterSeconds: Int64?
    /// The account the refused attempt was for, when known (a wrong password for an existing
    /// account): for the audit trail only, never in the answer.
    public var accountID: UUID?

    /// A disabled account's sign-in or refresh.
    static let accountDisabled = LoginError(
        .accountDisabled, "this account is disabled: no sign-in until support enables it again")

    public init(_ code: ErrorCode, _ message: String, retriable: Bool = false, field: String? = nil) {
        self.code = code
        self.message = message
        self.retriable = retriable
        self.field = field
    }

    public var description: String { "\(code): \(message)" }

    /// Equal by code: what clients branch on.
    public static func == (lhs: LoginError, rhs: LoginError) -> Bool { lhs.code == rhs.code }

    /// The result's error object.
    public var payload: ErrorPayload {
        ErrorPayload(
            code: code, message: message, retriable: retriable, field: field, retryAfter: retryAfter,
            retryAfterSeconds: retryAfterSeconds)
    }
}

extension LoginError {
    /// `too_many_attempts`, saying when to try again: at `date`, which is so many seconds after `now`.
    package static func tooManyAttempts(
        until date: Date, now: Date, message: String = "too many failed attempts for this account"
    ) -> LoginError {
        var error = LoginError(.tooManyAttempts, message)
        error.retryAfter = Timestamp.format(date)
        error.retryAfterSeconds = max(1, Int64(date.timeIntervalSince(now).rounded(.up)))
        return error
    }
}
