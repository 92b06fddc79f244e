import AuthCrypto
import Foundation
import JOSE
import Messages

/// A request prepared for the batch's transaction, with what was decided about it before: the
/// keyed digest of its content (its id is bound to it) and the gateway's reply key. The
/// transaction calls `write` and nothing else: what a request means, how its answer is sealed
/// and how it is kept are the domain's.
///
/// A class, immutable: a prepared request moves through the loop's phases, a batch's steps and
/// its write items, and each copy of a struct this size (the request's strings, the digest, the
/// flow's write) retained and released every reference it holds.
public final class PreparedRequest: Sendable {
    public let request: LoginRequest
    public let digest: [UInt8]
    public let replyKey: [UInt8]?
    public let prepared: any PreparedWrite

    /// The tenant whose rows the request reads and writes: the one it names, or the default one.
    public var tenant: String { request.tenant ?? Tenant.defaultName }

    /// The rows the flow's write will read, as its tenant's.
    public var prefetch: Prefetch {
        var prefetch = prepared.prefetch
        prefetch.tenant = tenant
        return prefetch
    }

    public init(request: LoginRequest, digest: [UInt8], replyKey: [UInt8]?, prepared: any PreparedWrite) {
        self.request = request
        self.digest = digest
        self.replyKey = replyKey
        self.prepared = prepared
    }

    /// The flow's write, then the answer sealed to the reply key (a session, a factor's secret or
    /// recovery codes, an `mfa_token`) and kept, sealed with the results key, with the request id:
    /// a redelivery is answered with it and never acted on twice.
    /// - Returns: the answer and its JSON (written once: kept here, published as the result's data).
    /// - Throws: the flow's refusal (nothing it wrote is kept).
    public func write(_ unit: any UnitOfWork, resultsKey: [UInt8]?, rememberedUntil: Date, at now: Date) throws
        -> (result: LoginResultData, json: [UInt8])
    {
        let answer = try prepared.write(unit)
        var result = answer.result
        if request.method.isAudited {
            try unit.recordAudit(
                AuditEntry(request, userID: answer.userID, outcome: result.error?.code.rawValue ?? "ok", at: now))
        }
        if let replyKey {
            result = try Self.sealed(result, to: replyKey)
        }
        let json = result.jsonBytes
        let sealed = try resultsKey.map { key in
            try AESGCM.seal(json, key: key, aad: Array(request.id.utf8)).combined
        }
        try unit.recordRequest(
            RequestRecord(
                requestID: request.id, method: request.method.rawValue, status: result.status,
                digest: resultsKey == nil ? nil : digest, userID: answer.userID, sessionID: answer.sessionID,
                resultSealed: sealed, processedAt: now, expiresAt: rememberedUntil))
        return (result, json)
    }

    /// What a refusal of the write leaves, after its own writes were dropped: its audit row.
    public func recordRefusal(_ error: any Error, in unit: any UnitOfWork, at now: Date) throws {
        if let entry = AuditEntry.refused(request, error: error, at: now) { try unit.recordAudit(entry) }
    }

    /// `result` with every secret it carries sealed to `replyKey` in its place: whoever reads the
    /// results topic can use none of them.
    static func sealed(_ result: LoginResultData, to replyKey: [UInt8]) throws -> LoginResultData {
        var result = result
        do {
            if let session = result.session {
                result.sealedSession = try JWE.sealECDHES(MessageCoding.encode(session), to: replyKey)
                result.session = nil
            }
            if let mfa = result.mfa {
                result.sealedMFA = try JWE.sealECDHES(MessageCoding.encode(mfa), to: replyKey)
                result.mfa = nil
            }
            if let token = result.error?.mfaToken {
                result.error?.sealedMFAToken = try JWE.sealECDHES(Array(token.utf8), to: replyKey)
                result.error?.mfaToken = nil
            }
        } catch {
            throw LoginError(
                .malformedRequest, "reply_key is not a usable X25519 public key", field: "data.reply_key")
        }
        return result
    }
}

extension LoginRequest {
    /// The request's X25519 `reply_key`, checked before anything is prepared; required (when
    /// `required`) for every method whose answer carries a secret.
    /// - Throws: `malformed_request` naming `data.reply_key`.
    public func replyKey(required: Bool) throws -> [UInt8]? {
        guard let text = data.replyKey else {
            if required, method.answerCarriesSecret {
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

    /// Whether preparing it reads the account (a password to verify against the stored hash), so
    /// it must not start before the earlier requests of its key are written (a registration, a
    /// password change).
    public var readsAccountWhilePreparing: Bool {
        switch method.handler.accountRead {
        case .never: false
        case .always: true
        case .withPassword: data.password != nil
        }
    }
}

extension PreparedRequest {
    /// The flow's write and its audit row, for a door that answers at once (the admin console's
    /// sign-in): nothing is kept for a redelivery, since nothing redelivers it.
    package func writeAnswer(_ unit: any UnitOfWork, at now: Date) throws -> FlowAnswer {
        let answer = try prepared.write(unit)
        if request.method.isAudited {
            try unit.recordAudit(
                AuditEntry(request, userID: answer.userID, outcome: answer.result.error?.code.rawValue ?? "ok", at: now)
            )
        }
        return answer
    }
}
