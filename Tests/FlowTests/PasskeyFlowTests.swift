import AuthCrypto
import Foundation
import Messages
import PGStore
import Passwords
import Testing

@testable import AuthDomain
@testable import AuthStore
@testable import TestSupport

/// Passkeys through the flows and PostgreSQL, with a software authenticator making real WebAuthn
/// responses (ES256, EdDSA, RS256; `none`, `packed` self and x5c) from the worker's own options,
/// and py_webauthn judging each response beside the worker: they must agree on every accept and
/// every refusal (where py_webauthn, which keeps no state, cannot know a challenge was used, it is
/// given what a relying party built on it would hold then: another challenge).
@Suite(.requiresDatabase, .requiresSoftAuthenticator, .serialized) struct PasskeyFlowTests {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
    let passwords: PasswordService
    static let origin = "https://example.com"

    init() throws {
        passwords = try PasswordService(parameters: fastArgon2, threads: 2)
    }

    func service(
        userVerification: String = "required", rpID: String? = "example.com", databaseURL: String? = nil,
        tenant: String = TenantScope.defaultName
    ) async throws -> FlowHarness {
        let resultsKey = try SecureRandom.bytes(32)
        return try await FlowHarness(clock: clock, passwords: passwords, databaseURL: databaseURL, tenant: tenant) {
            config in
            config.resultsKey = resultsKey
            config.passkeys.rpID = rpID
            config.passkeys.rpName = "Example"
            config.passkeys.origins = [Self.origin, "android:apk-key-hash:abc"]
            config.passkeys.userVerification = userVerification
        }
    }

    // MARK: - Requests as a gateway sends them

    /// A request's value, decoded as the worker decodes what it consumes.
    func request(_ method: LoginMethod, _ data: [String: Any]) throws -> LoginRequest {
        var body = data
        body["method"] = method.rawValue
        let envelope: [String: Any] = [
            "specversion": "1.0", "type": "auth.login.request", "id": UUID().uuidString, "source": "/test",
            "data": body,
        ]
        switch RequestDecoder().decode(Array(try JSONSerialization.data(withJSONObject: envelope))) {
        case .valid(let request): return request
        case .invalid(_, _, let error): throw LoginError(error.code, error.reason, field: error.field)
        case .unanswerable(let reason, _): throw LoginError(.malformedRequest, reason)
        }
    }

    /// The answer, a refusal included; and the events of an accepted request.
    func send(_ harness: FlowHarness, _ method: LoginMethod, _ data: [String: Any]) async throws -> (
        result: LoginResultData, events: [OutboxEvent]
    ) {
        do {
            let built = try request(method, data)
            let outcome = try await harness.handle(built)
            let handled = try #require(outcome)
            return (handled.result, handled.events)
        } catch let error as LoginError {
            return (.failure(requestID: "-", error: error.payload), [])
        }
    }

    func newGuest(_ harness: FlowHarness) async throws -> (token: String, userID: String) {
        let (result, _) = try await send(harness, .guest, [:])
        return (try #require(result.session?.accessToken), try #require(result.user?.id))
    }

    func member(_ harness: FlowHarness, _ email: String) async throws -> (token: String, userID: String) {
        let (result, _) = try await send(harness, .register, ["email": email, "password": "correct horse battery"])
        return (try #require(result.session?.accessToken), try #require(result.user?.id))
    }

    /// The CloudEvents types of events, in order.
    func types(_ events: [OutboxEvent]) -> [String] {
        events.compactMap { event in
            (try? JSONSerialization.jsonObject(with: Data(event.payload)) as? [String: Any])?["type"] as? String
        }
    }

    func registerOptions(_ harness: FlowHarness, token: String) async throws -> [String: Any] {
        let (result, _) = try await send(harness, .passkeyRegisterOptions, ["access_token": token])
        return try SoftAuthenticator.json(try #require(result.passkeyOptions, "\(String(describing: result.error))"))
    }

    func loginOptions(_ harness: FlowHarness, email: String? = nil) async throws -> [String: Any] {
        let (result, _) = try await send(harness, .passkeyLoginOptions, email.map { ["email": $0] } ?? [:])
        return try SoftAuthenticator.json(try #require(result.passkeyOptions))
    }

    /// Runs the software authenticator: its response and py_webauthn's verdict.
    func authenticator(_ command: [String: Any]) async throws -> (
        response: [String: Any], credential: [String: Any]?, independent: Bool, reason: String
    ) {
        var command = command
        command["origin"] = command["origin"] ?? Self.origin
        // py_webauthn expects what the relying party allows, whatever origin the client claims.
        var verify = command["verify"] as? [String: Any] ?? [:]
        verify["origins"] = verify["origins"] ?? [Self.origin]
        command["verify"] = verify
        let answer = try SoftAuthenticator.object(
            try await SoftAuthenticator.run(try JSONSerialization.data(withJSONObject: command)))
        let verdict = try #require(answer["py_webauthn"] as? [String: Any])
        return (
            try #require(answer["response"] as? [String: Any]), answer["credential"] as? [String: Any],
            verdict["verified"] as? Bool == true, verdict["error"] as? String ?? ""
        )
    }

    /// A passkey registered to the token's user: the credential the authenticator keeps.
    func registered(
        _ harness: FlowHarness, token: String, alg: String = "ES256", attestation: String = "none",
        bends: [String: Any] = [:]
    ) async throws -> (result: LoginResultData, events: [OutboxEvent], credential: [String: Any]) {
        var command: [String: Any] = [
            "op": "create", "options": try await registerOptions(harness, token: token), "alg": alg,
            "attestation": attestation,
        ]
        command.merge(bends) { $1 }
        let made = try await authenticator(command)
        #expect(made.independent, "py_webauthn refuses a response the test meant to be good: \(made.reason)")
        let (result, events) = try await send(
            harness, .passkeyRegister, ["access_token": token, "credential": made.response, "name": "Test key"])
        return (result, events, try #require(made.credential))
    }

    func signIn(
        _ harness: FlowHarness, credential: [String: Any], email: String? = nil, bends: [String: Any] = [:],
        storedCount: Int = 0
    ) async throws -> (result: LoginResultData, events: [OutboxEvent], independent: Bool, reason: String) {
        var command: [String: Any] = [
            "op": "get", "options": try await loginOptions(harness, email: email), "credential": credential,
            "verify": ["public_key": credential["public_key"] ?? "", "sign_count": storedCount],
        ]
        command.merge(bends) { $1 }
        let made = try await authenticator(command)
        let (result, events) = try await send(
            harness, .passkeyLogin,
            ["credential": made.response, "device": ["name": "Pixel 9", "platform": "android"]])
        return (result, events, made.independent, made.reason)
    }

    // MARK: - A guest becomes a member, and signs in

    @Test(arguments: ["ES256", "EdDSA", "RS256"], ["none", "packed-self", "packed-x5c"])
    func aGuestAddsAPasskeyKeepsItsIDAndSignsInWithIt(alg: String, attestation: String) async throws {
        let harness = try await service()
        let guest = try await newGuest(harness)
        let (result, events, credential) = try await registered(
            harness, token: guest.token, alg: alg, attestation: attestation)
        #expect(result.status == "ok", "\(String(describing: result.error))")
        #expect(result.user?.id == guest.userID, "the same user id")
        #expect(result.user?.isGuest == false)
        #expect(result.user?.providers == ["passkey"])
        #expect(result.session?.abilities == ["*"], "a member's session")
        let passkey = try #require(result.passkey)
        #expect(passkey.name == "Test key" && passkey.algorithm == alg)
        #expect(passkey.backupEligible && passkey.backedUp && passkey.transports == ["internal", "hybrid"])
        #expect(types(events) == [UserEventType.passkeyAdded, UserEventType.upgraded])

        let login = try await signIn(harness, credential: credential, bends: ["sign_count": 1])
        #expect(login.independent, "\(login.reason)")
        #expect(login.result.status == "ok", "\(String(describing: login.result.error))")
        #expect(login.result.user?.id == guest.userID)
        #expect(login.result.session?.accessToken != nil)
        #expect(try await harness.count("webauthn_challenges") == 0, "each challenge answered once")
    }

    @Test func aSignInNamedByEMailListsThatAccountsPasskeys() async throws {
        let harness = try await service()
        let ada = try await member(harness, "ada@example.com")
        let (_, _, credential) = try await registered(harness, token: ada.token)
        let anonymous = try await loginOptions(harness, email: "ada@example.com")
        let listed = (anonymous["allowCredentials"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
        #expect(!listed.contains { $0 == credential["credential_id"] as? String }, "an unverified address names nobody")
        let login = try await signIn(harness, credential: credential, bends: ["sign_count": 1])
        #expect(login.result.status == "ok")
        #expect(Set(login.result.user?.providers ?? []) == ["password", "passkey"])
    }

    // MARK: - Registration refused, by the worker and by py_webauthn

    struct Bend: Sendable, CustomTestStringConvertible {
        let name: String
        let bends: [String: String]
        let flags: [String: Bool]
        let alg: String
        let attestation: String
        let code: ErrorCode
        let field: String

        init(
            _ name: String, _ bends: [String: String] = [:], flags: [String: Bool] = [:], alg: String = "ES256",
            attestation: String = "packed-self", code: ErrorCode = .invalidPasskey,
            field: String = "data.credential.response.attestationObject"
        ) {
            self.name = name
            self.bends = bends
            self.flags = flags
            self.alg = alg
            self.attestation = attestation
            self.code = code
            self.field = field
        }

        var testDescription: String { name }
    }

    static let registrationBends: [Bend] = [
        Bend("wrong origin", ["origin": "https://evil.example"], field: "data.credential.response.clientDataJSON"),
        Bend("wrong RP ID hash", ["rp_id": "evil.example"]),
        Bend("type swapped", ["type": "webauthn.get"], field: "data.credential.response.clientDataJSON"),
        Bend("user not present", flags: ["up": false]),
        Bend("user not verified", flags: ["uv": false]),
        Bend("backed up without backup eligibility", flags: ["be": false, "bs": true]),
        Bend("an algorithm not offered", alg: "ES384"),
        Bend("a bad self-attestation signature", ["bad_signature": "1"]),
        Bend("a bad x5c attestation signature", ["bad_signature": "1"], attestation: "packed-x5c"),
    ]

    @Test(arguments: registrationBends)
    func aBentRegistrationIsRefusedByBoth(_ bend: Bend) async throws {
        let harness = try await service()
        let guest = try await newGuest(harness)
        var command: [String: Any] = [
            "op": "create", "options": try await registerOptions(harness, token: guest.token), "alg": bend.alg,
            "attestation": bend.attestation, "flags": bend.flags,
        ]
        for (key, value) in bend.bends { command[key] = key == "bad_signature" ? true : value }
        let made = try await authenticator(command)
        #expect(!made.independent, "py_webauthn accepts it")
        let (result, _) = try await send(
            harness, .passkeyRegister, ["access_token": guest.token, "credential": made.response])
        #expect(result.error?.code == bend.code, "\(String(describing: result.error))")
        #expect(result.error?.field == bend.field)
        #expect(try await harness.count("passkeys") == 0)
    }

    @Test func malformedCBORAndJSONAreMalformedRequestsNamingTheField() async throws {
        let harness = try await service()
        let guest = try await newGuest(harness)
        let made = try await authenticator([
            "op": "create", "options": try await registerOptions(harness, token: guest.token),
        ])
        var response = made.response
        var body = try #require(response["response"] as? [String: Any])
        let encoded = try #require(body["attestationObject"] as? String)
        let object = try #require(Base64URL.decode(encoded))
        for (bytes, why) in [
            (object + [0], "trailing byte"), (Array(object.dropLast()), "cut short"), ([0xBF, 0xFF], "indefinite"),
        ] {
            body["attestationObject"] = Base64URL.encode(bytes)
            response["response"] = body
            let (result, _) = try await send(
                harness, .passkeyRegister, ["access_token": guest.token, "credential": response])
            #expect(result.error?.code == .malformedRequest, "\(why)")
            #expect(result.error?.field == "data.credential.response.attestationObject", "\(why)")
        }
        body["attestationObject"] = Base64URL.encode(object)
        body["clientDataJSON"] = Base64URL.encode(Array("{\"type\":".utf8))
        response["response"] = body
        let (json, _) = try await send(
            harness, .passkeyRegister, ["access_token": guest.token, "credential": response])
        #expect(json.error?.code == .malformedRequest)
        #expect(json.error?.field == "data.credential.response.clientDataJSON")
        body["clientDataJSON"] = "not base64url!"
        response["response"] = body
        let (text, _) = try await send(
            harness, .passkeyRegister, ["access_token": guest.token, "credential": response])
        #expect(text.error?.field == "data.credential.response.clientDataJSON")
        let (missing, _) = try await send(harness, .passkeyRegister, ["access_token": guest.token])
        #expect(missing.error?.code == .malformedRequest && missing.error?.field == "data.credential")
    }

    @Test func anAttestationCertificateOutsideSection8_2_1IsRefusedThoughPyWebAuthnTakesIt() async throws {
        let harness = try await service()
        let guest = try await newGuest(harness)
        let made = try await authenticator([
            "op": "create", "options": try await registerOptions(harness, token: guest.token),
            "attestation": "packed-x5c", "cert_ou": "Marketing",
        ])
        // py_webauthn checks the x5c signature and (with roots) the chain, not the leaf's subject.
        #expect(made.independent)
        let (result, _) = try await send(
            harness, .passkeyRegister, ["access_token": guest.token, "credential": made.response])
        #expect(result.error?.code == .invalidPasskey)
        #expect(result.error?.message.contains("Authenticator Attestation") == true)
    }

    @Test func aChallengeIsAnsweredOnceUnexpiredAndOnlyForItsCeremonyAndUser() async throws {
        let harness = try await service()
        let guest = try await newGuest(harness)
        let other = try await newGuest(harness)
        let options = try await registerOptions(harness, token: guest.token)

        // Another user's challenge.
        let stolen = try await authenticator(["op": "create", "options": options])
        let (foreign, _) = try await send(
            harness, .passkeyRegister, ["access_token": other.token, "credential": stolen.response])
        #expect(foreign.error?.code == .invalidChallenge)

        // Answered once: the second answer, a new credential on the same challenge, is refused.
        let first = try await authenticator(["op": "create", "options": options])
        #expect(
            try await send(harness, .passkeyRegister, ["access_token": guest.token, "credential": first.response])
                .result.status == "ok")
        let again = try await authenticator([
            "op": "create", "options": options, "verify": ["challenge": Base64URL.encode(try SecureRandom.bytes(32))],
        ])
        #expect(!again.independent, "a relying party holding no such challenge refuses it")
        let (replayed, _) = try await send(
            harness, .passkeyRegister, ["access_token": guest.token, "credential": again.response])
        #expect(replayed.error?.code == .invalidChallenge)

        // Another ceremony's: a sign-in challenge in a registration.
        let login = try await loginOptions(harness)
        var mixed = options
        mixed["challenge"] = login["challenge"]
        let crossed = try await authenticator(["op": "create", "options": mixed])
        let (purpose, _) = try await send(
            harness, .passkeyRegister, ["access_token": guest.token, "credential": crossed.response])
        #expect(purpose.error?.code == .invalidChallenge)

        // Expired.
        let late = try await registerOptions(harness, token: guest.token)
        clock.advance(by: 301)
        let expired = try await authenticator(["op": "create", "options": late])
        let (tooLate, _) = try await send(
            harness, .passkeyRegister, ["access_token": guest.token, "credential": expired.response])
        #expect(tooLate.error?.code == .invalidChallenge)
        #expect(tooLate.error?.message.contains("expired") == true)
    }

    @Test func aCredentialIDIsRegisteredOnce() async throws {
        let harness = try await service()
        let ada = try await newGuest(harness)
        let bob = try await newGuest(harness)
        let (_, _, credential) = try await registered(harness, token: ada.token)
        let id = try #require(credential["credential_id"] as? String)
        let (again, _, _) = try await registered(harness, token: bob.token, bends: ["credential_id": id])
        #expect(again.error?.code == .passkeyExists)
        let (twice, _, _) = try await registered(harness, token: ada.token, bends: ["credential_id": id])
        #expect(twice.error?.code == .passkeyExists)
        #expect(try await harness.count("passkeys") == 1)
    }

    // MARK: - Sign-in refused, by the worker and by py_webauthn

    static let signInBends: [Bend] = [
        Bend(
            "wrong origin", ["origin": "https://evil.example"], code: .invalidCredentials,
            field: "data.credential.response.clientDataJSON"),
        Bend(
            "wrong RP ID hash", ["rp_id": "evil.example"], code: .invalidCredentials,
            field: "data.credential.response.authenticatorData"),
        Bend(
            "type swapped", ["type": "webauthn.create"], code: .invalidCredentials,
            field: "data.credential.response.clientDataJSON"),
        Bend(
            "user not present", flags: ["up": false], code: .invalidCredentials,
            field: "data.credential.response.authenticatorData"),
        Bend(
            "user not verified", flags: ["uv": false], code: .invalidCredentials,
            field: "data.credential.response.authenticatorData"),
        Bend(
            "backed up without backup eligibility", flags: ["be": false, "bs": true], code: .invalidCredentials,
            field: "data.credential.response.authenticatorData"),
        Bend("a bad signature", ["bad_signature": "1"], code: .invalidCredentials, field: ""),
    ]

    @Test(arguments: signInBends)
    func aBentSignInIsRefusedByBoth(_ bend: Bend) async throws {
        let harness = try await service()
        let guest = try await newGuest(harness)
        let (_, _, credential) = try await registered(harness, token: guest.token, alg: "EdDSA")
        var bends: [String: Any] = ["flags": bend.flags, "sign_count": 0]
        for (key, value) in bend.bends { bends[key] = key == "bad_signature" ? true : value }
        let login = try await signIn(harness, credential: credential, bends: bends)
        #expect(!login.independent, "py_webauthn accepts it")
        #expect(login.result.error?.code == bend.code, "\(String(describing: login.result.error))")
        #expect((login.result.error?.field ?? "") == bend.field)
        #expect(login.result.session == nil)
    }

    @Test func aSignCountGoingBackwardsIsRefusedAsAPossibleClone() async throws {
        let harness = try await service()
        let guest = try await newGuest(harness)
        let (_, _, credential) = try await registered(harness, token: guest.token, bends: ["sign_count": 5])
        let ok = try await signIn(harness, credential: credential, bends: ["sign_count": 6], storedCount: 5)
        #expect(ok.independent && ok.result.status == "ok")
        let clone = try await signIn(harness, credential: credential, bends: ["sign_count": 6], storedCount: 6)
        #expect(!clone.independent, "py_webauthn refuses a count that does not advance: \(clone.reason)")
        #expect(clone.result.error?.code == .invalidCredentials)
        #expect(clone.result.error?.message.contains("cloned") == true)
        #expect(types(clone.events) == [UserEventType.passkeyCloneSuspected])
    }

    @Test func unknownRemovedAndOtherAccountsPasskeysAndReplayedChallengesAreRefused() async throws {
        let harness = try await service()
        let ada = try await member(harness, "ada@example.com")
        _ = try await harness.query("UPDATE users SET email_verified = true")
        let bob = try await newGuest(harness)
        let (_, _, adas) = try await registered(harness, token: ada.token)
        let (registeredBob, _, bobs) = try await registered(harness, token: bob.token)

        // Unknown: a credential id nobody registered (py_webauthn, given the key it would look up
        // for that id, has none: it is given another key).
        var unknown = adas
        unknown["credential_id"] = Base64URL.encode(try SecureRandom.bytes(32))
        let stranger = try await signIn(harness, credential: unknown)
        #expect(stranger.result.error?.code == .invalidCredentials)

        // Another account's: options naming Ada, answered with Bob's passkey.
        let crossed = try await signIn(harness, credential: bobs, email: "ada@example.com", bends: ["sign_count": 1])
        #expect(crossed.result.error?.code == .invalidCredentials)

        // A replayed assertion: the same response twice.
        let options = try await loginOptions(harness)
        let made = try await authenticator([
            "op": "get", "options": options, "credential": adas, "sign_count": 3,
            "verify": ["public_key": adas["public_key"] ?? ""],
        ])
        #expect(try await send(harness, .passkeyLogin, ["credential": made.response]).result.status == "ok")
        let (replayed, _) = try await send(harness, .passkeyLogin, ["credential": made.response])
        #expect(replayed.error?.code == .invalidChallenge)

        // Removed: Bob removes his passkey (after adding a password so it is not his last way in).
        let passkeyID = try #require(registeredBob.passkey?.id)
        let bobToken = try #require(registeredBob.session?.accessToken)
        let (last, _) = try await send(harness, .passkeyRemove, ["access_token": bobToken, "passkey_id": passkeyID])
        #expect(last.error?.code == .lastSignInMethod)
        _ = try await send(
            harness, .register, ["email": "bob@example.com", "password": "correct horse battery", "link_to": bobToken])
        let (removed, events) = try await send(
            harness, .passkeyRemove, ["access_token": bobToken, "passkey_id": passkeyID])
        #expect(removed.status == "ok", "\(String(describing: removed.error))")
        #expect(types(events) == [UserEventType.passkeyRemoved])
        let gone = try await signIn(harness, credential: bobs, bends: ["sign_count": 2])
        #expect(gone.result.error?.code == .invalidCredentials)
    }

    /// A passkey is its tenant's: the default tenant's, presented at acme (same relying party),
    /// signs nobody in there; the same credential id registered at acme is acme's own passkey of
    /// another account, and each signs in at its own tenant only.
    @Test func aPasskeyIsItsTenantsOwn() async throws {
        let main = try await service()
        let acme = try await service(databaseURL: main.databaseURL, tenant: "acme")
        let guest = try await newGuest(main)
        let (_, _, credential) = try await registered(main, token: guest.token)
        let sessions = try await main.count("sessions")
        let crossed = try await signIn(acme, credential: credential, bends: ["sign_count": 1])
        #expect(crossed.result.error?.code == .invalidCredentials, "\(crossed.result)")
        #expect(try await main.count("sessions") == sessions, "no session opened")
        #expect(try await main.count("passkeys", where: "sign_count > 0") == 0, "its counter not moved")
        // The same credential id at acme: a passkey of acme's own.
        let acmeGuest = try await newGuest(acme)
        let id = try #require(credential["credential_id"] as? String)
        let (again, _, acmeCredential) = try await registered(
            acme, token: acmeGuest.token, bends: ["credential_id": id])
        #expect(again.status == "ok", "\(String(describing: again.error))")
        #expect(try await main.count("passkeys", where: "tenant = 'acme'") == 1)
        #expect(try await main.count("passkeys", where: "tenant = 'default'") == 1)
        let atAcme = try await signIn(acme, credential: acmeCredential, bends: ["sign_count": 2])
        #expect(atAcme.result.user?.id == acmeGuest.userID, "\(String(describing: atAcme.result.error))")
        let atMain = try await signIn(main, credential: credential, bends: ["sign_count": 3])
        #expect(atMain.result.user?.id == guest.userID, "\(String(describing: atMain.result.error))")
    }

    // MARK: - Managing passkeys

    @Test func listRenameAndRemoveTheirOwnPasskeysOnly() async throws {
        let harness = try await service()
        let ada = try await member(harness, "ada@example.com")
        let eve = try await member(harness, "eve@example.com")
        let (added, _, _) = try await registered(harness, token: ada.token)
        let id = try #require(added.passkey?.id)

        let (list, _) = try await send(harness, .passkeyList, ["access_token": ada.token])
        #expect(list.passkeys?.map(\.id) == [id])
        let (renamed, _) = try await send(
            harness, .passkeyRename, ["access_token": ada.token, "passkey_id": id, "name": "  Work laptop "])
        #expect(renamed.passkey?.name == "Work laptop")
        let (theirs, _) = try await send(
            harness, .passkeyRename, ["access_token": eve.token, "passkey_id": id, "name": "mine"])
        #expect(theirs.error?.code == .unknownPasskey)
        let (noName, _) = try await send(harness, .passkeyRename, ["access_token": ada.token, "passkey_id": id])
        #expect(noName.error?.code == .malformedRequest && noName.error?.field == "data.name")
        let (badID, _) = try await send(harness, .passkeyRemove, ["access_token": ada.token, "passkey_id": "nope"])
        #expect(badID.error?.code == .malformedRequest && badID.error?.field == "data.passkey_id")

        // Removing is a change to how the account signs in: a recent sign-in, or the password.
        clock.advance(by: 400)
        let (stale, _) = try await send(harness, .passkeyRemove, ["access_token": ada.token, "passkey_id": id])
        #expect(stale.error?.code == .reauthenticationRequired)
        let (removed, events) = try await send(
            harness, .passkeyRemove, ["access_token": ada.token, "passkey_id": id, "password": "correct horse battery"])
        #expect(removed.status == "ok" && removed.user?.providers == ["password"])
        #expect(types(events) == [UserEventType.passkeyRemoved])
        let (empty, _) = try await send(harness, .passkeyList, ["access_token": ada.token])
        #expect(empty.passkeys == [])
    }

    @Test func aFullAccountAddsAPasskeyOnlyAfterARecentSignIn() async throws {
        let harness = try await service()
        let ada = try await member(harness, "ada@example.com")
        let options = try await registerOptions(harness, token: ada.token)
        clock.advance(by: 301)
        let fresh = try await registerOptions(harness, token: ada.token)
        _ = options
        let made = try await authenticator(["op": "create", "options": fresh])
        let (result, _) = try await send(
            harness, .passkeyRegister, ["access_token": ada.token, "credential": made.response])
        #expect(result.error?.code == .reauthenticationRequired)
    }

    @Test func aVerifiedPasskeySignInIsBothFactorsAndAnUnverifiedOneMeetsTheSecondFactor() async throws {
        let harness = try await service(userVerification: "preferred")
        let ada = try await member(harness, "ada@example.com")
        let (_, _, credential) = try await registered(harness, token: ada.token)
        let user = try #require(UUID(uuidString: ada.userID))
        _ = try await harness.query(
            "INSERT INTO mfa_factors (user_id, secret_sealed, created_at, enabled_at) VALUES (\(user), '\\x00', now(), now())"
        )
        let verified = try await signIn(harness, credential: credential, bends: ["sign_count": 1])
        #expect(verified.result.session != nil, "UV: a PIN or biometric beside the device is two factors")
        let presence = try await signIn(
            harness, credential: credential, bends: ["sign_count": 2, "flags": ["uv": false]],
            storedCount: 1)
        #expect(presence.result.error?.code == .mfaRequired, "presence alone is one factor")
        #expect(presence.result.error?.mfaToken != nil)
    }

    @Test func signInOptionsAreRateLimitedPerClient() async throws {
        let harness = try await service()
        for _ in 0..<30 {
            #expect(try await send(harness, .passkeyLoginOptions, ["client_id": "install-1"]).result.status == "ok")
        }
        let (limited, _) = try await send(harness, .passkeyLoginOptions, ["client_id": "install-1"])
        #expect(limited.error?.code == .tooManyAttempts && limited.error?.retryAfterSeconds != nil)
        #expect(try await send(harness, .passkeyLoginOptions, ["client_id": "install-2"]).result.status == "ok")
        #expect(try await harness.count("webauthn_challenges") == 31, "a refused request writes no challenge")
    }

    /// The ids of `passkey_login_options`' `allowCredentials` for `email`, and their transports.
    func allowed(_ harness: FlowHarness, _ email: String, client: String = "install-1") async throws -> [String:
        [String]]
    {
        let (result, _) = try await send(harness, .passkeyLoginOptions, ["email": email, "client_id": client])
        let options = try SoftAuthenticator.json(
            try #require(result.passkeyOptions, "\(String(describing: result.error))"))
        var ids: [String: [String]] = [:]
        for descriptor in options["allowCredentials"] as? [[String: Any]] ?? [] {
            ids[try #require(descriptor["id"] as? String)] = descriptor["transports"] as? [String] ?? []
        }
        return ids
    }

    /// WebAuthn L3 §14.6.2: an address with no account, or an account without passkeys, gets
    /// stand-in credentials as an account with passkeys gets its own: stable, of the lengths
    /// authenticators use, unguessable without the service's key. The options say nothing of who
    /// has an account; nor do they hand out a real account's credential ids for a wrong address.
    @Test func anAddressWithoutPasskeysIsAnsweredAsOneWithThem() async throws {
        let harness = try await service()
        let ada = try await member(harness, "ada@example.com")
        let (_, _, credential) = try await registered(harness, token: ada.token)
        let user = try #require(UUID(uuidString: ada.userID))
        _ = try await harness.query("UPDATE users SET email_verified = true WHERE id = \(user)")
        let own = try await allowed(harness, "ada@example.com")
        #expect(own.keys.sorted() == [try #require(credential["credential_id"] as? String)], "ada's own passkey")
        _ = try await member(harness, "noah@example.com")  // an account without passkeys

        for address in ["nobody@example.com", "noah@example.com", "Nobody@Example.com "] {
            let first = try await allowed(harness, address)
            let again = try await allowed(harness, address, client: "install-2")
            #expect(!first.isEmpty && first.count <= 2, "\(address): \(first)")
            #expect(first == again, "\(address): the same stand-ins every time, as an account's own would be")
            for (id, transports) in first {
                let bytes = try #require(Base64URL.decode(id))
                #expect([16, 20, 32, 64].contains(bytes.count), "\(address): \(bytes.count) bytes")
                #expect(!transports.isEmpty)
                #expect(own[id] == nil)
            }
        }
        #expect(try await allowed(harness, "nobody@example.com") == allowed(harness, "NOBODY@example.com"))
        #expect(try await allowed(harness, "nobody@example.com") != allowed(harness, "noah@example.com"))

        // Another deployment (another results key) has stand-ins of its own: they come from its secret.
        let other = try await service()
        #expect(try await allowed(other, "nobody@example.com") != allowed(harness, "nobody@example.com"))
    }

    /// Rotating `client_id` gets past the per-client limit, not the ceiling shared by every client.
    @Test func signInOptionsHaveACeilingAcrossClients() async throws {
        let resultsKey = try SecureRandom.bytes(32)
        let harness = try await FlowHarness(clock: clock, passwords: passwords) { config in
            config.resultsKey = resultsKey
            config.passkeys.rpID = "example.com"
            config.passkeys.origins = [Self.origin]
            config.passkeys.optionsGlobalRateLimit = .init(count: 5, window: 60)
        }
        for client in 0..<5 {
            #expect(
                try await send(harness, .passkeyLoginOptions, ["client_id": "install-\(client)"]).result.status == "ok")
        }
        let (limited, _) = try await send(harness, .passkeyLoginOptions, ["client_id": "install-99"])
        #expect(limited.error?.code == .tooManyAttempts && limited.error?.retryAfterSeconds != nil)
        #expect(try await harness.count("webauthn_challenges") == 5, "a refused request writes no challenge")
        clock.advance(by: 61)
        #expect(try await send(harness, .passkeyLoginOptions, ["client_id": "install-99"]).result.status == "ok")
    }

    @Test func withoutAnRPIDThePasskeyMethodsAreUnsupported() async throws {
        let harness = try await service(rpID: nil)
        let (result, _) = try await send(harness, .passkeyLoginOptions, [:])
        #expect(result.error?.code == .unsupportedMethod)
    }
}
