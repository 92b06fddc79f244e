import Foundation
import Messages

/// How the worker handles a login method: how its request is prepared (and so whether that may
/// wait), whether its outcomes go to the audit trail, when preparing it reads the account, and
/// whether it signs a guest up. Each flow file declares its methods' handlers beside their
/// `prepare` and the write it returns; `LoginMethod.handler` is the one table that registers them.
///
/// The wire's half of a method (its name, the fields it requires, whether its answer carries a
/// secret) is `MethodTraits`, in Messages, since clients read it too. Nothing else compares
/// method names: the decoder, the pipeline, the audit and the sealing of answers read these two.
public struct MethodHandler: Sendable {
    /// Prepares a request of the method (see `LoginFlows.prepare`).
    public enum Preparer: Sendable {
        /// CPU work of microseconds (a guest's session, a refresh): the loop prepares it in place.
        case atOnce(@Sendable (LoginFlows, LoginRequest) throws -> any PreparedWrite)
        /// A provider token: at once when the provider's keys are cached (the first answers nil
        /// when they are not), in a task otherwise.
        case atOnceWithCachedKeys(
            @Sendable (LoginFlows, LoginRequest) throws -> (any PreparedWrite)?,
            otherwise: @Sendable (LoginFlows, LoginRequest) async throws -> any PreparedWrite)
        /// A password to hash or verify, on the hashing pool: in a task of its own.
        case hashing(@Sendable (LoginFlows, LoginRequest) async throws -> any PreparedWrite)
        /// A read before the transaction, or a password only sometimes: in a task.
        case waits(@Sendable (LoginFlows, LoginRequest) async throws -> any PreparedWrite)
        /// A call to a provider over the network, which may take up to its timeout: in a task of
        /// its own, so no other request waits for the provider.
        case callsOut(@Sendable (LoginFlows, LoginRequest) async throws -> any PreparedWrite)
    }

    /// When preparing reads the account (a password verified against the stored hash), so the
    /// request waits for the requests before it on its key.
    public enum AccountRead: Sendable, Equatable {
        case never
        case always
        /// Only when the request carries a `password`.
        case withPassword
    }

    public let preparation: Preparer
    /// Its outcomes go to the audit trail: sign-ins (succeeded and refused), registrations,
    /// changes to how an account signs in, sessions ended, the account deleted or exported; not
    /// the frequent, routine ones nor those that only send a code.
    public let isAudited: Bool
    public let accountRead: AccountRead
    /// A guest sign-up: counted against the global guest ceiling when it is looked up.
    public let isGuestSignUp: Bool

    init(audited: Bool, _ preparation: Preparer, reads accountRead: AccountRead = .never, guestSignUp: Bool = false) {
        self.preparation = preparation
        self.isAudited = audited
        self.accountRead = accountRead
        self.isGuestSignUp = guestSignUp
    }

    /// Its preparation hashes or verifies a password.
    public var hashes: Bool {
        if case .hashing = preparation { true } else { false }
    }

    /// Its preparation may take long (a password hash, a provider's answer): the loop gives it a
    /// task of its own, never a share of one that prepares other requests after it.
    public var preparesAlone: Bool {
        switch preparation {
        case .hashing, .callsOut: true
        case .atOnce, .atOnceWithCachedKeys, .waits: false
        }
    }

    /// Its preparation may wait (a hash, a read): the loop never prepares it in place.
    public var mayWait: Bool {
        switch preparation {
        case .atOnce, .atOnceWithCachedKeys: false
        case .hashing, .waits, .callsOut: true
        }
    }
}

extension LoginMethod {
    /// The method's handler: the one table of them, each declared beside its flow.
    public var handler: MethodHandler {
        switch self {
        case .guest: .guest
        case .apple, .google, .oidc: .providerSignIn
        case .oauth: .oauthSignIn
        case .register: .register
        case .password: .password
        case .refresh: .refresh
        case .logout: .logout
        case .introspect: .introspect
        case .sendVerification: .sendVerification
        case .verifyEmail: .verifyEmail
        case .passwordResetRequest: .passwordResetRequest
        case .passwordReset: .passwordReset
        case .changePassword: .changePassword
        case .emailCodeRequest: .emailCodeRequest
        case .emailCode: .emailCode
        case .phoneCodeRequest: .phoneCodeRequest
        case .phoneCode: .phoneCode
        case .mfaEnroll: .mfaEnroll
        case .mfaVerify: .mfaVerify
        case .mfaChallenge: .mfaChallenge
        case .mfaRemove: .mfaRemove
        case .sessionsList: .sessionsList
        case .sessionRevoke: .sessionRevoke
        case .accountExport: .accountExport
        case .accountDelete: .accountDelete
        case .passkeyRegisterOptions: .passkeyRegisterOptions
        case .passkeyRegister: .passkeyRegister
        case .passkeyLoginOptions: .passkeyLoginOptions
        case .passkeyLogin: .passkeyLogin
        case .passkeyList: .passkeyList
        case .passkeyRename: .passkeyRename
        case .passkeyRemove: .passkeyRemove
        }
    }

    /// Whether its outcomes go to the audit trail (`MethodHandler.isAudited`).
    public var isAudited: Bool { handler.isAudited }
}

extension LoginFlows {
    /// Validates and computes everything `request` needs before its write, as its method's
    /// handler says, waiting where that may.
    /// - Throws: `LoginError` for a definite refusal; other errors are transient.
    public func prepare(_ request: LoginRequest) async throws -> any PreparedWrite {
        switch request.method.handler.preparation {
        case .atOnce(let prepare):
            return try prepare(self, request)
        case .atOnceWithCachedKeys(let atOnce, let otherwise):
            if let prepared = try atOnce(self, request) { return prepared }
            return try await otherwise(self, request)
        case .hashing(let prepare), .waits(let prepare), .callsOut(let prepare):
            return try await prepare(self, request)
        }
    }

    /// Prepares `request` on the caller's thread when its preparation waits for nothing: CPU work
    /// of microseconds (a guest's session, a refresh, a passkey assertion), which a loop may do in
    /// place rather than hand to a task and be woken when it ends.
    /// - Returns: nil for a method whose preparation may wait (a password hash on its pool, a
    ///   provider's keys, a PostgreSQL read): `prepare` does those.
    /// - Throws: as `prepare`.
    public func prepareAtOnce(_ request: LoginRequest) throws -> (any PreparedWrite)? {
        switch request.method.handler.preparation {
        case .atOnce(let prepare): try prepare(self, request)
        case .atOnceWithCachedKeys(let atOnce, _): try atOnce(self, request)
        case .hashing, .waits, .callsOut: nil
        }
    }
}
