import AuthCrypto
import Foundation
import JOSE
import Messages
import PGStore
import Passwords
import ServiceKit
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// TOTP itself, against RFC 6238's SHA-1 vectors (their last six digits).
@Suite struct TOTPTests {
    @Test(arguments: [
        (59, "287082"), (1_111_111_109, "081804"), (1_111_111_111, "050471"), (1_234_567_890, "005924"),
        (2_000_000_000, "279037"), (20_000_000_000, "353130"),
    ])
    func rfc6238Vectors(time: Int64, code: String) {
        let secret = Array("12345678901234567890".utf8)
        #expect(TOTP.code(secret: secret, step: time / 30) == code)
        let date = Date(timeIntervalSince1970: TimeInterval(time))
        #expect(TOTP.matchingStep(code, secret: secret, at: date) == time / 30)
        let stepStart = Date(timeIntervalSince1970: TimeInterval(time / 30 * 30))
        #expect(TOTP.matchingStep(code, secret: secret, at: stepStart + 30) == time / 30, "a step late is accepted")
        #expect(TOTP.matchingStep(code, secret: secret, at: stepStart - 30) == time / 30, "a step early too")
        #expect(TOTP.matchingStep(code, secret: secret, at: stepStart + 60) == nil, "two steps late is not")
    }

    @Test func base32IsRFC4648() {
        #expect(Base32.encode(Array("foobar".utf8)) == "MZXW6YTBOI")
        #expect(Base32.encode(Array("f".utf8)) == "MY")
        #expect(Base32.encode([]) == "")
    }
}

/// The second factor through the flows, against PostgreSQL, with codes made by an independent
/// TOTP implementation (PyPI `pyotp`) from the secret and URI the enrolment answered.
@Suite(.requiresDatabase, .requiresIndependentJOSE) struct SecondFactorFlowTests {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
    let logs = InMemoryLogHandler()
    let passwords: PasswordService

    init() throws {
        passwords = try PasswordService(parameters: fastArgon2, threads: 2)
    }

    func service(configure: (inout WorkerConfiguration) -> Void = { _ in }) async throws -> FlowHarness {
        let logger = Logger(label: "test", level: .debug, handler: logs)
        let resultsKey = try SecureRandom.bytes(32)
        return try await FlowHarness(clock: clock, passwords: passwords, logger: logger) { config in
            config.resultsKey = resultsKey
            config.mfa.issuer = "Example App"
            configure(&config)
        }
    }

    /// pyotp's code for `uri` (as an authenticator app scans it) at `date`.
    func appCode(uri: String, at date: Date) async throws -> String {
        let outcome = try await Subprocess.run([
            "python3", "-c",
            "import pyotp, sys; print(pyotp.parse_uri(sys.argv[1]).at(int(sys.argv[2])))", uri,
            String(Int64(date.timeIntervalSince1970)),
        ])
        #expect(outcome.status == 0, "\(outcome.output)")
        return outcome.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func handle(_ harness: FlowHarness, _ method: LoginMethod, _ fill: (inout LoginRequestData) -> Void) async throws
        -> FlowHarness.Outcome
    {
        try #require(try await harness.handle(makeRequest(method, fill)))
    }

    func refusal(_ harness: FlowHarness, _ method: LoginMethod, _ fill: (inout LoginRequestData) -> Void) async throws
        -> LoginError
    {
        do {
            let outcome = try await harness.handle(makeRequest(method, fill))
            if let error = outcome?.result.error { return LoginError(error.code, error.message) }
            Issue.record("expected a refusal")
        } catch let error as LoginError {
            return error
        }
        return LoginError(.internalError, "none")
    }

    func login(_ harness: FlowHarness) async throws -> LoginResultData {
        try await handle(harness, .password) {
            $0.email = "ada@example.com"
            $0.password = "correct horse battery"
        }.result
    }

    /// A member with an active factor: its access token, the URI the app scanned, the recovery codes.
    func enrolled(_ harness: FlowHarness) async throws -> (token: String, uri: String, recovery: [String]) {
        let registered = try await handle(harness, .register) {
            $0.email = "ada@example.com"
            $0.password = "correct horse battery"
        }
        let token = try #require(registered.result.session?.accessToken)
        let enrolment = try await handle(harness, .mfaEnroll) { $0.accessToken = token }
        let mfa = try #require(enrolment.result.mfa)
        let uri = try #require(mfa.otpauthURI)
        #expect(uri.hasPrefix("otpauth://totp/Example%20App:ada@example.com?secret=\(mfa.secret ?? "-")"))
        #expect(uri.contains("&issuer=Example%20App&algorithm=SHA1&digits=6&period=30"))
        #expect(try await login(harness).session != nil, "pending until verified: sign-ins go on as before")

        let code = try await appCode(uri: uri, at: clock.now())
        let verified = try await handle(harness, .mfaVerify) {
            $0.accessToken = token
            $0.code = code
        }
        let recovery = try #require(verified.result.mfa?.recoveryCodes)
        #expect(recovery.count == 10 && Set(recovery).count == 10)
        #expect(verified.events.count == 1)
        clock.advance(by: 30)
        return (token, uri, recovery)
    }

    @Test func aSignInWithAFactorStopsAtMFARequiredAndFinishesWithTheAppsCode() async throws {
        let harness = try await service()
        let (_, uri, _) = try await enrolled(harness)
        let sessionsBefore = try await harness.count("sessions")
        let stopped = try await login(harness)
        #expect(stopped.status == "error")
        #expect(stopped.error?.code == .mfaRequired)
        #expect(stopped.session == nil)
        let ticket = try #require(stopped.error?.mfaToken)
        #expect(try await harness.count("sessions") == sessionsBefore, "no session before the second factor")

        let code = try await appCode(uri: uri, at: clock.now())
        let finished = try await handle(harness, .mfaChallenge) {
            $0.mfaToken = ticket
            $0.code = code
        }
        #expect(finished.result.status == "ok")
        #expect(finished.result.session != nil)

        // The same code again, with a new ticket: refused (a code works once).
        let again = try #require(try await login(harness).error?.mfaToken)
        let replay = try await refusal(harness, .mfaChallenge) {
            $0.mfaToken = again
            $0.code = code
        }
        #expect(replay.code == .invalidCode)
        clock.advance(by: 30)
        let next = try await appCode(uri: uri, at: clock.now())
        let later = try await handle(harness, .mfaChallenge) {
            $0.mfaToken = again
            $0.code = next
        }
        #expect(later.result.session != nil)
    }

    /// A factor enabled by a request earlier in the same batch stops a sign-in later in it (the
    /// sign-ins read the factor through the batch's cache of users, which must not hide it).
    @Test func aFactorEnabledEarlierInTheBatchStopsALaterSignIn() async throws {
        let harness = try await service()
        let registered = try await handle(harness, .register) {
            $0.email = "ada@example.com"
            $0.password = "correct horse battery"
        }
        let token = try #require(registered.result.session?.accessToken)
        let uri = try #require(try await handle(harness, .mfaEnroll) { $0.accessToken = token }.result.mfa?.otpauthURI)
        let code = try await appCode(uri: uri, at: clock.now())
        let outcomes = try await harness.handleBatch([
            makeRequest(.password) {
                $0.email = "ada@example.com"
                $0.password = "correct horse battery"
            },
            makeRequest(.mfaVerify) {
                $0.accessToken = token
                $0.code = code
            },
            makeRequest(.password) {
                $0.email = "ada@example.com"
                $0.password = "correct horse battery"
            },
        ])
        let results = try outcomes.map { try $0.get().result }
        #expect(results[0].session != nil, "before the factor is active")
        #expect(results[1].mfa?.recoveryCodes?.count == 10)
        #expect(results[2].error?.code == .mfaRequired, "after it, in the same transaction")
    }

    @Test func recoveryCodesWorkOnceAndGuessesAreLimited() async throws {
        let harness = try await service()
        let (_, _, recovery) = try await enrolled(harness)
        let ticket = try #require(try await login(harness).error?.mfaToken)
        let recovered = try await handle(harness, .mfaChallenge) {
            $0.mfaToken = ticket
            $0.recoveryCode = recovery[3].uppercased()
        }
        #expect(recovered.result.session != nil, "case and dashes do not matter")
        let spentTicket = try await refusal(harness, .mfaChallenge) {
            $0.mfaToken = ticket
            $0.recoveryCode = recovery[4]
        }
        #expect(spentTicket.code == .invalidToken, "an mfa_token finishes one sign-in")
        let next = try #require(try await login(harness).error?.mfaToken)
        let reused = try await refusal(harness, .mfaChallenge) {
            $0.mfaToken = next
            $0.recoveryCode = recovery[3]
        }
        #expect(reused.code == .invalidCode)
        // Four more wrong codes reach the limit of five per five minutes.
        for guess in ["000000", "111111", "222222", "333333"] {
            let wrong = try await refusal(harness, .mfaChallenge) {
                $0.mfaToken = next
                $0.code = guess
            }
            #expect(wrong.code == .invalidCode)
        }
        let limited = try await refusal(harness, .mfaChallenge) {
            $0.mfaToken = next
            $0.code = "444444"
        }
        #expect(limited.code == .tooManyAttempts)
    }

    @Test func ticketsExpireAndCannotBeForged() async throws {
        let harness = try await service()
        _ = try await enrolled(harness)
        let ticket = try #require(try await login(harness).error?.mfaToken)
        let forged = try await refusal(harness, .mfaChallenge) {
            $0.mfaToken = "mt_" + String(ticket.dropFirst(3).reversed())
            $0.code = "123456"
        }
        #expect(forged.code == .invalidToken)
        clock.advance(by: 301)
        let expired = try await refusal(harness, .mfaChallenge) {
            $0.mfaToken = ticket
            $0.code = "123456"
        }
        #expect(expired.code == .tokenExpired)
    }

    @Test func aPasswordResetStillNeedsTheSecondFactor() async throws {
        let mail = try X25519.generateKeyPair()
        let harness = try await service { $0.emailCodes.mailKey = mail.publicKey }
        _ = try await enrolled(harness)
        // A verified account (a never-verified one is claimed by the reset, factor and all).
        _ = try await harness.query("UPDATE identities SET email_verified = true RETURNING 1")
        _ = try await harness.query("UPDATE users SET email_verified = true RETURNING 1")
        let requested = try await handle(harness, .passwordResetRequest) { $0.email = "ada@example.com" }
        let event = try MessageCoding.decode(
            CloudEvent<EmailCodeRequestedData>.self, from: try #require(requested.events.first).payload)
        let secret = try MessageCoding.decode(
            EmailCodeSecret.self,
            from: try JWE.openECDHES(event.data.sealedSecret, privateKey: mail.privateKey).plaintext)
        let reset = try await handle(harness, .passwordReset) {
            $0.linkToken = secret.linkToken
            $0.newPassword = "a brand new secret"
        }
        #expect(reset.result.error?.code == .mfaRequired)
        #expect(reset.result.error?.mfaToken != nil)
        #expect(try await harness.count("sessions", where: "revoked_at IS NULL") == 0)
    }

    @Test func removingTheFactorNeedsACodeAndEndsTheStop() async throws {
        let harness = try await service()
        let (token, uri, _) = try await enrolled(harness)
        let wrong = try await refusal(harness, .mfaRemove) {
            $0.accessToken = token
            $0.code = "000000"
        }
        #expect(wrong.code == .invalidCode)
        let code = try await appCode(uri: uri, at: clock.now())
        let removed = try await handle(harness, .mfaRemove) {
            $0.accessToken = token
            $0.code = code
        }
        #expect(removed.result.status == "ok")
        #expect(try await login(harness).session != nil)
        #expect(try await harness.count("mfa_factors") == 0)
        #expect(try await harness.count("mfa_recovery_codes") == 0)
    }

    /// The secret is sealed at rest (AES-256-GCM, bound to its user), recovery codes are hashes,
    /// and neither is logged.
    @Test func secretsAreSealedAtRestAndNeverLogged() async throws {
        let harness = try await service()
        let (_, uri, recovery) = try await enrolled(harness)
        let secret = try #require(URLComponents(string: uri)?.queryItems?.first { $0.name == "secret" }?.value)
        let stored = try #require(
            try await harness.query("SELECT secret_sealed FROM mfa_factors").first?.decode(
                "secret_sealed", as: PGBytes.self
            ).bytes)
        #expect(stored.count == 12 + 20 + 16, "nonce, sealed 20-byte secret, tag")
        let rawSecret = try #require(Self.base32Decode(secret))
        #expect(!stored.windows(ofCount: 20).contains { Array($0) == rawSecret })
        let hashes = try await harness.query("SELECT code_hash FROM mfa_recovery_codes").map {
            try $0.decode("code_hash", as: PGBytes.self).bytes
        }
        #expect(hashes.count == 10)
        #expect(!logs.lines.contains { $0.contains(secret) || recovery.contains(where: $0.contains) })
    }

    static func base32Decode(_ text: String) -> [UInt8]? {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
        var buffer: UInt32 = 0
        var bits = 0
        var out: [UInt8] = []
        for character in text {
            guard let value = alphabet.firstIndex(of: character) else { return nil }
            buffer = buffer << 5 | UInt32(value)
            bits += 5
            if bits >= 8 {
                out.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits - 8)))
                bits -= 8
            }
        }
        return out
    }
}

extension Array {
    fileprivate func windows(ofCount count: Int) -> [ArraySlice<Element>] {
        guard self.count >= count else { return [] }
        return (0...(self.count - count)).map { self[$0..<($0 + count)] }
    }
}
