import Foundation
import Messages

/// One security-relevant outcome, for the audit trail (`audit_log`): who, what, how it ended,
/// from where. Written in the transaction of its effect; never a secret (no token, password or
/// code: the request's credentials are not even in reach here).
public struct AuditEntry: Sendable, Equatable {
    public var at: Date
    /// The account, when known (a refused sign-in for an unknown address has none).
    public var userID: UUID?
    /// The request's method (`password`, `account_delete`, …), or `operator.*`, `apple.*`.
    public var action: String
    /// `ok`, or the error code it was answered with.
    public var outcome: String
    public var requestID: String?
    public var clientID: String?
    public var deviceName: String?
    public var devicePlatform: String?
    public var ip: String?
    public var userAgent: String?
    /// Who acted: `user` (a request), `operator` (the CLI), `console:<user id>` (a console user),
    /// `console` (the console itself, at sign-out), `apple` (a notification), `account_claimed`.
    public var actor: String
    /// The tenant of the account or request.
    public var tenant = Tenant.defaultName

    public init(
        at: Date, userID: UUID?, action: String, outcome: String, requestID: String? = nil, clientID: String? = nil,
        deviceName: String? = nil, devicePlatform: String? = nil, ip: String? = nil, userAgent: String? = nil,
        actor: String
    ) {
        self.at = at
        self.userID = userID
        self.action = action
        self.outcome = outcome
        self.requestID = requestID
        self.clientID = clientID
        self.deviceName = deviceName
        self.devicePlatform = devicePlatform
        self.ip = ip
        self.userAgent = userAgent
        self.actor = actor
    }

    /// A request's outcome, with what the gateway told of its client.
    public init(_ request: LoginRequest, userID: UUID?, outcome: String, at now: Date) {
        self.init(
            at: now, userID: userID, action: request.method.rawValue, outcome: outcome, requestID: request.id,
            clientID: (request.data.clientID ?? request.partitionKey).map { String($0.prefix(256)) },
            deviceName: request.data.device?.name, devicePlatform: request.data.device?.platform,
            ip: request.data.context?.ip, userAgent: request.data.context?.userAgent, actor: "user")
        tenant = request.tenant ?? Tenant.defaultName
    }

    /// The actor recorded for a console user: their account's id, never their sign-in address
    /// (half of their console credential).
    public static func consoleActor(_ userID: UUID) -> String { "console:" + userID.lowercasedString }

    /// Who acted, as the account's own user reads it (the export): support staff and operators
    /// are `support`, never named; `user`, `apple` and the rest as recorded.
    public static func actorShownToUser(_ actor: String) -> String {
        if actor == "operator" || actor == "console" || actor.hasPrefix("console:") || actor.hasPrefix("admin:") {
            return "support"
        }
        return actor
    }

    /// A refused request's entry, when its method is audited.
    public static func refused(_ request: LoginRequest, error: any Error, at now: Date) -> AuditEntry? {
        guard request.method.isAudited else { return nil }
        let login = error as? LoginError
        return AuditEntry(
            request, userID: login?.accountID, outcome: login?.code.rawValue ?? ErrorCode.internalError.rawValue,
            at: now)
    }
}
