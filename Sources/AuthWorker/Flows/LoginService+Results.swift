import AuthCrypto
import Foundation
import JOSE
import Messages
import Synchronization

/// The result a write built inside its transaction, handed back to the flow.
final class BuiltResult: Sendable {
    private let value = Mutex<LoginResultData?>(nil)

    func set(_ result: LoginResultData) { value.withLock { $0 = result } }

    var result: LoginResultData? { value.withLock { $0 } }
}

extension LoginService {
    /// A keeper that builds the answer, seals the session to the request's `reply_key` if it has
    /// one, records it in `box`, and seals the whole answer with the results key for redeliveries.
    func keeper(
        for request: LoginRequest, box: BuiltResult,
        build: @escaping @Sendable (StoredUser, KeepDetails) throws -> LoginResultData
    ) throws -> ResultKeeper {
        let replyKey = try replyKey(request)
        let resultsKey = configuration.resultsKey
        let requestID = request.id
        return { user, details in
            var result = try build(user, details)
            if let replyKey, let session = result.session {
                result.sealedSession = try JWE.sealECDHES(try MessageCoding.encode(session), to: replyKey)
                result.session = nil
            }
            box.set(result)
            guard let resultsKey else { return nil }
            let sealed = try AESGCM.seal(try MessageCoding.encode(result), key: resultsKey, aad: Array(requestID.utf8))
            return sealed.combined
        }
    }

    /// Opens a result kept by `keeper`; nil when it cannot be opened with the results key.
    public static func openKeptResult(_ sealed: [UInt8], requestID: String, key: [UInt8]) -> LoginResultData? {
        guard let box = AESGCM.Sealed(combined: sealed),
            let json = AESGCM.open(box, key: key, aad: Array(requestID.utf8))
        else { return nil }
        return try? MessageCoding.decode(LoginResultData.self, from: json)
    }
}
