import AuthDomain
import AuthStore
import Foundation
import Messages

extension PostgresStore {
    /// Handles one request at once, outside the pipeline (the console's sign-in): prepared and
    /// written by the same flow as from Kafka, audited the same, refused the same.
    /// - Returns: the flow's answer; a refusal comes back as the answer's error, with its audit row kept.
    func answer(_ request: LoginRequest, flows: LoginFlows, clock: any WorkerClock) async throws -> FlowAnswer {
        let now = clock.now()
        let prepared: PreparedRequest
        do {
            prepared = PreparedRequest(
                request: request, digest: [], replyKey: nil, prepared: try await flows.prepare(request))
        } catch {
            if let audit = AuditEntry.refused(request, error: error, at: now) {
                try await transaction(tenant: audit.tenant) { unit in try unit.recordAudit(audit) }
            }
            return try Self.refusal(error, request: request)
        }
        let outcome = try await runBatch(
            [prepared], prefetch: prepared.prefetch, tenant: { $0.tenant },
            onRefusal: { item, error, unit in try item.recordRefusal(error, in: unit, at: now) }
        ) { item, unit in try item.writeAnswer(unit, at: now) }
        switch outcome.first {
        case .written(let answer, _): return answer
        case .refused(let error): return try Self.refusal(error, request: request)
        case .conflict, nil: throw DirectRequestConflict()
        }
    }

    fileprivate static func refusal(_ error: any Error, request: LoginRequest) throws -> FlowAnswer {
        guard let refusal = error as? LoginError else { throw error }
        return FlowAnswer(
            result: .failure(requestID: request.id, error: refusal.payload), userID: nil, sessionID: nil)
    }
}

/// The request's writes collided twice with another transaction's (a retry is the caller's).
struct DirectRequestConflict: Error, CustomStringConvertible {
    var description: String { "the write collided with another transaction's; try again" }
}
