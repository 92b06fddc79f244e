import Foundation
import Messages
import Testing

@testable import AuthDomain
@testable import TestSupport

/// A request is prepared either at once (on the loop's thread, `LoginFlows.prepareAtOnce`) or by a
/// task that may wait (`LoginFlows.prepare`): every method takes exactly one of the two, and both
/// answer it alike.
@Suite(.requiresDatabase) struct PreparationPathTests {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))

    /// The methods whose preparation may wait: a password hash on its pool, a read of PostgreSQL
    /// (a texted code's limits are reserved there; a member's password beside an access token is
    /// checked), a call to an OAuth provider. Anything else must
    /// not wait, since the loop prepares it in place.
    static let waiting: Set<LoginMethod> = [
        .register, .password, .verifyEmail, .passwordReset, .changePassword, .mfaEnroll, .mfaVerify, .accountDelete,
        .passkeyRemove, .oauth, .phoneCodeRequest, .phoneCode,
    ]

    /// The provider sign-ins: prepared at once when they wait for nothing (the provider's keys
    /// cached and fresh, or a refusal that needs no keys), by the task otherwise
    /// (`ProviderSignInTests.signInsPreparedAtOnceAnswerAsThoseThatWait` covers the keys).
    static let atOnceWithCachedKeys: Set<LoginMethod> = [.apple, .google, .oidc]

    /// What a preparation came to, comparable across the two paths.
    enum Ending: Equatable {
        case prepared
        case refused(String)
        case notPreparedAtOnce
    }

    static func ending(_ body: () async throws -> (any PreparedWrite)?) async -> Ending {
        do {
            return try await body() == nil ? .notPreparedAtOnce : .prepared
        } catch {
            let code = (error as? LoginError)?.code.rawValue ?? "other"
            return .refused("\(code): \(error)")
        }
    }

    /// The handler table (`LoginMethod.handler`) declares the same paths the flows take.
    @Test func theHandlerTableDeclaresEachMethodsPath() {
        let declaredWaiting = Set(LoginMethod.allCases.filter { $0.handler.mayWait })
        #expect(declaredWaiting == Self.waiting)
        let declaredProviders = Set(
            LoginMethod.allCases.filter {
                if case .atOnceWithCachedKeys = $0.handler.preparation { true } else { false }
            })
        #expect(declaredProviders == Self.atOnceWithCachedKeys)
        #expect(Set(LoginMethod.allCases.filter { $0.handler.hashes }) == [.register, .password])
        #expect(Set(LoginMethod.allCases.filter { $0.handler.preparesAlone }) == [.register, .password, .oauth])
        #expect(Set(LoginMethod.allCases.filter { $0.handler.isGuestSignUp }) == [.guest])
    }

    @Test(arguments: LoginMethod.allCases) func everyMethodIsPreparedByExactlyOnePath(_ method: LoginMethod)
        async throws
    {
        let harness = try await FlowHarness(clock: clock)
        // A bare request (no fields): most methods refuse it, which is an answer like any other.
        let request = makeRequest(method)
        let atOnce = await Self.ending { try harness.flows.prepareAtOnce(request) }
        let waited = await Self.ending { try await harness.flows.prepare(request) }
        if Self.waiting.contains(method) {
            #expect(atOnce == .notPreparedAtOnce, "\(method.rawValue) may wait: the loop must not prepare it")
        } else if Self.atOnceWithCachedKeys.contains(method) {
            // No provider is configured here: refused alike at once, with no key to wait for.
            #expect(atOnce == waited, "both paths answer \(method.rawValue) alike")
            #expect(atOnce != .prepared)
        } else {
            #expect(atOnce != .notPreparedAtOnce, "\(method.rawValue) waits for nothing: the loop prepares it")
            #expect(atOnce == waited, "both paths answer \(method.rawValue) alike")
        }
        if case .refused(let reason) = waited {
            #expect(!reason.contains("no preparation"), "\(method.rawValue) has a preparation")
        }
    }
}
