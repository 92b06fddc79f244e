import AuthCrypto
import Foundation
import JOSE
import JOSEFixtures
import Kafka
import Messages
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// Every message type of the contract, produced for real (requests as a gateway sends them,
/// results and events as the worker publishes them, an Apple notification as a gateway forwards
/// it), checked against `contract/schemas` by an independent JSON Schema validator, and the
/// AsyncAPI document checked too (`scripts/check-contract.py`).
@Suite(.requiresServices, .requiresIndependentJOSE, .requiresSoftAuthenticator, .serialized, .timeLimit(.minutes(3)))
struct ContractConformanceTests {
    static let root = ProjectPaths.root

    @Test func everyMessageTypeMatchesItsSchema() async throws {
        let server = try KeyServer()
        defer { server.stop() }
        server.serve("/apple/keys", .init(body: TestSigner.keySet([Signers.rsa2048])))
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let topics = try await IntegrationEnvironment.makeTopics()
        var config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        config.appleAudiences = ["com.example.app"]
        config.appleKeysURL = server.url("/apple/keys").absoluteString
        config.accounts.argon2 = fastArgon2
        config.accounts.guestRateLimit = .init(count: 1, window: 3600)
        let mail = try X25519.generateKeyPair()
        config.emailCodes.mailKey = mail.publicKey
        let sms = try X25519.generateKeyPair()
        config.phoneCodes.smsKey = sms.publicKey
        config.phoneCodes.signUp = true
        config.resultsKey = try SecureRandom.bytes(32)
        config.passkeys.rpID = "example.com"
        config.passkeys.origins = ["https://example.com"]
        // One wrong factor code locks for two seconds (auth.mfa.locked), not five minutes.
        config.mfa.attempts = .init(count: 1, window: 1)
        let github = try await OAuthStandIn(.github)
        defer { github.stop() }
        config.oidcProvidersPath = try github.providersFile()
        let worker = try await RunningWorker(config)
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        let events = try TopicReader(topic: topics.events)
        let results = try TopicReader(topic: topics.results)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("contract-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var written = 0
        func keep(_ schema: String, _ role: String, _ bytes: [UInt8]) throws {
            written += 1
            try Data(bytes).write(to: directory.appendingPathComponent("\(schema)--\(role)-\(written).json"))
        }
        /// Sends `data` as a gateway does, keeps the request and its result, returns the result.
        func send(_ data: LoginRequestData) async throws -> LoginResultData {
            let id = UUID().uuidString.lowercased()
            let request = CloudEvent(
                id: id, source: "/gateway/contract-test", type: "auth.login.request", time: Date(),
                traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", data: data)
            let bytes = MessageCoding.encode(request)
            try keep("login-request", "request", bytes)
            try await gateway.publishRaw(key: Array(id.utf8), value: bytes)
            let answer = try #require(try await gateway.awaitResult(requestID: id, timeout: .seconds(30)))
            try keep("login-result", "worker", answer)
            return try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: answer).data
        }
        let now = Int(Date().timeIntervalSince1970)
        func appleToken(_ subject: String) -> String {
            Signers.rsa2048.token(
                [
                    "iss": "https://appleid.apple.com", "aud": "com.example.app", "sub": subject, "iat": now - 5,
                    "exp": now + 600, "email": "\(subject)@privaterelay.appleid.com", "email_verified": "true",
                    "is_private_email": "true", "nonce": Hex.encode(SHA256.hash("n-1")),
                ], algorithm: .rs256)
        }

        // Guests: a plain session, a sealed one, and one over the client's limit (retry_after).
        var guest = LoginRequestData(method: "guest")
        guest.clientID = "install-1"
        guest.device = .init(name: "Pixel 9", platform: "android")
        let plain = try await send(guest)
        #expect(plain.session != nil)
        var sealed = LoginRequestData(method: "guest")
        sealed.replyKey = Base64URL.encode(try X25519.generateKeyPair().publicKey)
        #expect(try await send(sealed).sealedSession != nil)
        let limited = try await send(guest)
        #expect(limited.error?.retryAfterSeconds != nil)
        // A registration, a failed password login, and a guest upgraded by registering.
        var register = LoginRequestData(method: "register")
        register.email = "ada@example.com"
        register.password = "correct horse battery"
        register.name = "Ada"
        let ada = try await send(register)
        var wrong = LoginRequestData(method: "password")
        wrong.email = "ada@example.com"
        wrong.password = "wrong horse battery"
        #expect(try await send(wrong).error?.code == .invalidCredentials)
        var upgrade = LoginRequestData(method: "register")
        upgrade.email = "grace@example.com"
        upgrade.password = "correct horse battery"
        upgrade.linkTo = plain.session?.accessToken
        let grace = try await send(upgrade)
        #expect(grace.user?.isGuest == false)
        // Apple linked to Ada's account (identity linked), a refresh, a malformed request, a logout.
        var apple = LoginRequestData(method: "apple")
        apple.identityToken = appleToken("001.ada")
        apple.nonce = "n-1"
        apple.profile = .init(givenName: "Ada", familyName: "Lovelace")
        apple.linkTo = ada.session?.accessToken
        let linked = try await send(apple)
        #expect(linked.user?.id == ada.user?.id)
        // An OAuth 2.0 sign-in: the provider's code is not a six-digit one.
        let pkce = OAuthStandIn.pkce()
        var oauth = LoginRequestData(method: "oauth")
        oauth.provider = "github"
        oauth.code = try await github.authorize(
            user: ["id": 583_231, "name": "The Octocat"],
            emails: [["email": "octocat@example.com", "primary": true, "verified": true]], challenge: pkce.challenge)
        oauth.codeVerifier = pkce.verifier
        oauth.redirectURI = OAuthStandIn.redirectURI
        #expect(try await send(oauth).status == "ok")
        #expect(try await send(oauth).error?.code == .invalidCode, "a code is single use")

        var refresh = LoginRequestData(method: "refresh")
        refresh.refreshToken = linked.session?.refreshToken
        #expect(try await send(refresh).status == "ok")
        var malformed = LoginRequestData(method: "oidc")
        malformed.provider = "nowhere"
        #expect(try await send(malformed).status == "error")
        var introspect = LoginRequestData(method: "introspect")
        introspect.accessToken = ada.session?.accessToken
        #expect(try await send(introspect).introspection?.active == true)
        introspect.accessToken = "not a token"
        #expect(try await send(introspect).introspection?.active == false)
        var logout = LoginRequestData(method: "logout")
        logout.accessToken = ada.session?.accessToken
        #expect(try await send(logout).status == "ok")
        // E-mail codes, taken from the events as the mail service does: Ada verifies her address
        // with the code sent at registration; Grace asks again; Ada resets her password with the
        // link, then changes it.
        func codeSecret(_ type: String, email: String) async throws -> EmailCodeSecret {
            func matches(_ message: KafkaMessage) -> Bool {
                message.json["type"] as? String == type
                    && (message.json["data"] as? [String: Any])?["email"] as? String == email
            }
            let seen = try await events.waitUntil { $0.contains(where: matches) }
            let event = try MessageCoding.decode(
                CloudEvent<EmailCodeRequestedData>.self, from: try #require(seen.last(where: matches)).value)
            let opened = try JWE.openECDHES(event.data.sealedSecret, privateKey: mail.privateKey)
            return try MessageCoding.decode(EmailCodeSecret.self, from: opened.plaintext)
        }
        var verify = LoginRequestData(method: "verify_email")
        verify.email = "ada@example.com"
        verify.code = try await codeSecret("auth.email.verification_requested", email: "ada@example.com").code
        #expect(try await send(verify).error?.code == .reauthenticationRequired, "the registrant's proof is needed")
        verify.password = "correct horse battery"
        #expect(try await send(verify).user?.emailVerified == true)
        #expect(try await send(verify).error?.code == .invalidCode, "a code works once")
        // Phone numbers, the code taken from the event as the SMS service does: a sign-up by
        // number, then a guest proving another number and becoming a member.
        func textedCode(to phone: String) async throws -> String {
            func matches(_ message: KafkaMessage) -> Bool {
                message.json["type"] as? String == "auth.phone.code_requested"
                    && (message.json["data"] as? [String: Any])?["phone"] as? String == phone
            }
            let seen = try await events.waitUntil { $0.contains(where: matches) }
            let event = try MessageCoding.decode(
                CloudEvent<PhoneCodeRequestedData>.self, from: try #require(seen.last(where: matches)).value)
            let opened = try JWE.openECDHES(event.data.sealedSecret, privateKey: sms.privateKey)
            return try MessageCoding.decode(PhoneCodeSecret.self, from: opened.plaintext).code
        }
        var phoneRequest = LoginRequestData(method: "phone_code_request")
        phoneRequest.phone = "+821012345678"
        phoneRequest.locale = "ko-KR"
        phoneRequest.clientID = "install-phone"
        let phoneRequested = try await send(phoneRequest)
        #expect(phoneRequested.status == "ok", "\(String(describing: phoneRequested.error))")
        var phoneSignIn = LoginRequestData(method: "phone_code")
        phoneSignIn.phone = "+821012345678"
        phoneSignIn.code = try await textedCode(to: "+821012345678")
        let byPhone = try await send(phoneSignIn)
        #expect(byPhone.user?.phone == "+821012345678" && byPhone.newUser == true)
        #expect(try await send(phoneSignIn).error?.code == .invalidCode, "a texted code works once")
        var phoneGuest = LoginRequestData(method: "guest")
        phoneGuest.clientID = "install-phone-guest"
        let phoneGuestToken = try await send(phoneGuest).session?.accessToken
        var addPhone = LoginRequestData(method: "phone_code_request")
        addPhone.phone = "+14155550100"
        addPhone.accessToken = phoneGuestToken
        addPhone.clientID = "install-phone-guest"
        #expect(try await send(addPhone).status == "ok")
        var provePhone = LoginRequestData(method: "phone_code")
        provePhone.phone = "+14155550100"
        provePhone.accessToken = phoneGuestToken
        provePhone.code = try await textedCode(to: "+14155550100")
        #expect(try await send(provePhone).user?.isGuest == false)
        var resend = LoginRequestData(method: "send_verification")
        resend.accessToken = grace.session?.accessToken
        #expect(try await send(resend).status == "ok")
        var resetRequest = LoginRequestData(method: "password_reset_request")
        resetRequest.email = "ada@example.com"
        #expect(try await send(resetRequest).user == nil)
        var reset = LoginRequestData(method: "password_reset")
        reset.linkToken = try await codeSecret("auth.password.reset_requested", email: "ada@example.com").linkToken
        reset.newPassword = "a brand new secret"
        let afterReset = try await send(reset)
        #expect(afterReset.session != nil)
        var change = LoginRequestData(method: "change_password")
        change.accessToken = afterReset.session?.accessToken
        change.password = "a brand new secret"
        change.newPassword = "another new secret"
        #expect(try await send(change).status == "ok")
        // A second factor: enrolled (once sealed to a reply key), verified with pyotp's code from
        // the URI, then a password sign-in stops at mfa_required and mfa_challenge finishes it.
        var enroll = LoginRequestData(method: "mfa_enroll")
        enroll.accessToken = afterReset.session?.accessToken
        enroll.replyKey = Base64URL.encode(try X25519.generateKeyPair().publicKey)
        #expect(try await send(enroll).sealedMFA != nil)
        enroll.replyKey = nil
        let uri = try #require(try await send(enroll).mfa?.otpauthURI)
        func appCode(at date: Date) async throws -> String {
            try await Subprocess.run([
                "python3", "-c", "import pyotp, sys; print(pyotp.parse_uri(sys.argv[1]).at(int(sys.argv[2])))", uri,
                String(Int(date.timeIntervalSince1970)),
            ]).output.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        var mfaVerify = LoginRequestData(method: "mfa_verify")
        mfaVerify.accessToken = afterReset.session?.accessToken
        mfaVerify.code = try await appCode(at: Date())
        let recoveryCodes = try #require(try await send(mfaVerify).mfa?.recoveryCodes)
        #expect(recoveryCodes.count == 10)
        var signIn = LoginRequestData(method: "password")
        signIn.email = "ada@example.com"
        signIn.password = "another new secret"
        let stopped = try await send(signIn)
        #expect(stopped.error?.code == .mfaRequired)
        var challenge = LoginRequestData(method: "mfa_challenge")
        challenge.mfaToken = stopped.error?.mfaToken
        // A wrong code locks the factor (auth.mfa.locked) until its window ends; then the app's.
        challenge.code = "000000" == (try await appCode(at: Date())) ? "111111" : "000000"
        #expect(try await send(challenge).error?.code == .invalidCode)
        try await Task.sleep(for: .milliseconds(2500))
        challenge.code = try await appCode(at: Date() + 30)
        #expect(try await send(challenge).session != nil)
        var remove = LoginRequestData(method: "mfa_remove")
        remove.accessToken = afterReset.session?.accessToken
        // The app's codes up to the challenge's are spent: a recovery code removes the factor.
        remove.recoveryCode = recoveryCodes.first
        #expect(try await send(remove).status == "ok")
        // Signing in with a code from an e-mail.
        var codeRequest = LoginRequestData(method: "email_code_request")
        codeRequest.email = "ada@example.com"
        #expect(try await send(codeRequest).status == "ok")
        var emailCode = LoginRequestData(method: "email_code")
        emailCode.email = "ada@example.com"
        emailCode.code = try await codeSecret("auth.email.sign_in_requested", email: "ada@example.com").code
        #expect(try await send(emailCode).session != nil)
        // Somebody registers Eve's address from a guest and links an Apple identity; Eve signs in
        // with a code and claims the account: the Apple identity is taken off it.
        var eveGuest = LoginRequestData(method: "guest")
        eveGuest.clientID = "install-eve"
        let squatter = try await send(eveGuest)
        var squat = LoginRequestData(method: "register")
        squat.email = "eve@example.com"
        squat.password = "squatter's password"
        squat.linkTo = squatter.session?.accessToken
        #expect(try await send(squat).status == "ok")
        var squatApple = LoginRequestData(method: "apple")
        squatApple.identityToken = appleToken("001.squatter")
        squatApple.nonce = "n-1"
        squatApple.linkTo = squatter.session?.accessToken
        #expect(try await send(squatApple).user?.id == squatter.user?.id)
        codeRequest.email = "eve@example.com"
        #expect(try await send(codeRequest).status == "ok")
        emailCode.email = "eve@example.com"
        emailCode.code = try await codeSecret("auth.email.sign_in_requested", email: "eve@example.com").code
        let eve = try await send(emailCode)
        #expect(eve.user?.id == squatter.user?.id && eve.user?.providers == ["email"])
        // The user's own account: the sessions listed and one ended, the export (sealed), and an
        // account deleted by its owner.
        var list = LoginRequestData(method: "sessions_list")
        list.accessToken = afterReset.session?.accessToken
        let listed = try #require(try await send(list).sessions)
        #expect(listed.contains { $0.current })
        var revokeOne = LoginRequestData(method: "session_revoke")
        revokeOne.accessToken = afterReset.session?.accessToken
        revokeOne.sessionID = try #require(listed.first { !$0.current }?.id)
        #expect(try await send(revokeOne).status == "ok")
        revokeOne.sessionID = UUID().uuidString.lowercased()
        #expect(try await send(revokeOne).error?.code == .unknownSession)
        var export = LoginRequestData(method: "account_export")
        export.accessToken = afterReset.session?.accessToken
        export.replyKey = Base64URL.encode(try X25519.generateKeyPair().publicKey)
        #expect(try await send(export).sealedExport != nil)
        var leaver = LoginRequestData(method: "guest")
        leaver.clientID = "install-leaver"
        var delete = LoginRequestData(method: "account_delete")
        delete.accessToken = try await send(leaver).session?.accessToken
        #expect(try await send(delete).status == "ok")

        // Passkeys: a guest adds one (options, registration), signs in with it, a clone is
        // refused, a second is added, listed, renamed, and the first removed.
        func authenticator(_ command: [String: Any]) async throws -> (PasskeyCredential, [String: Any]) {
            var command = command
            command["origin"] = "https://example.com"
            let answer = try SoftAuthenticator.object(
                try await SoftAuthenticator.run(try JSONSerialization.data(withJSONObject: command)))
            let response = try JSONSerialization.data(withJSONObject: try #require(answer["response"]))
            return (try JSONDecoder().decode(PasskeyCredential.self, from: response), answer)
        }
        func addPasskey(token: String?) async throws -> (LoginResultData, [String: Any]) {
            var options = LoginRequestData(method: "passkey_register_options")
            options.accessToken = token
            let creation = try #require(try await send(options).passkeyOptions)
            let (made, answer) = try await authenticator([
                "op": "create", "options": try SoftAuthenticator.json(creation), "attestation": "packed-self",
            ])
            var register = LoginRequestData(method: "passkey_register")
            register.accessToken = token
            register.credential = made
            register.name = "Phone"
            return (try await send(register), try #require(answer["credential"] as? [String: Any]))
        }
        func passkeySignIn(_ credential: [String: Any], count: Int) async throws -> LoginResultData {
            let request = try #require(try await send(LoginRequestData(method: "passkey_login_options")).passkeyOptions)
            let (assertion, _) = try await authenticator([
                "op": "get", "options": try SoftAuthenticator.json(request), "credential": credential,
                "sign_count": count,
            ])
            var login = LoginRequestData(method: "passkey_login")
            login.credential = assertion
            return try await send(login)
        }
        var passkeyGuest = LoginRequestData(method: "guest")
        passkeyGuest.clientID = "install-passkey"
        let (added, firstKey) = try await addPasskey(token: try await send(passkeyGuest).session?.accessToken)
        let memberToken = try #require(added.session?.accessToken)
        #expect(try await passkeySignIn(firstKey, count: 5).session != nil)
        #expect(try await passkeySignIn(firstKey, count: 4).error?.code == .invalidCredentials)
        let (second, _) = try await addPasskey(token: memberToken)
        var passkeyList = LoginRequestData(method: "passkey_list")
        passkeyList.accessToken = memberToken
        #expect(try await send(passkeyList).passkeys?.count == 2)
        var rename = LoginRequestData(method: "passkey_rename")
        rename.accessToken = memberToken
        rename.passkeyID = second.passkey?.id
        rename.name = "Laptop"
        #expect(try await send(rename).passkey?.name == "Laptop")
        var removePasskey = LoginRequestData(method: "passkey_remove")
        removePasskey.accessToken = memberToken
        removePasskey.passkeyID = added.passkey?.id
        #expect(try await send(removePasskey).status == "ok")
        // Apple deletes the account: the user and its sessions go.
        let token = Signers.rsa2048.token(
            [
                "iss": "https://appleid.apple.com", "aud": "com.example.app", "iat": now - 1, "exp": now + 600,
                "events": #"{"type":"account-delete","sub":"001.ada","event_time":\#(now)000}"#,
            ], algorithm: .rs256)
        let notification = MessageCoding.encode(
            CloudEvent(
                id: UUID().uuidString, source: "/gateway/apple", type: "auth.provider.notification", time: Date(),
                data: ProviderNotificationData(payload: token)))
        try keep("provider-notification", "request", notification)
        try await gateway.publishRaw(topic: topics.notifications, key: nil, value: notification)

        // CloudEvents' binary content mode: the request's attributes in headers, its data the
        // value; the answer comes back so. Each is kept as the structured event its headers and
        // value make, and checked against the same schema.
        func structured(_ headers: [KafkaHeader], data: [UInt8]) throws -> [UInt8] {
            var envelope: [String: Any] = ["data": try JSONSerialization.jsonObject(with: Data(data))]
            for header in headers {
                guard let value = header.value.map({ String(decoding: $0, as: UTF8.self) }) else { continue }
                if header.key.hasPrefix("ce_") { envelope[String(header.key.dropFirst(3))] = value }
                if header.key == "content-type" { envelope["datacontenttype"] = value }
            }
            return Array(try JSONSerialization.data(withJSONObject: envelope))
        }
        let binaryID = UUID().uuidString.lowercased()
        var binaryGuest = LoginRequestData(method: "guest")
        binaryGuest.clientID = "install-binary"
        let binaryHeaders = [
            KafkaHeader(key: "ce_specversion", string: "1.0"), KafkaHeader(key: "ce_id", string: binaryID),
            KafkaHeader(key: "ce_source", string: "/gateway/contract-test"),
            KafkaHeader(key: "ce_type", string: "auth.login.request"),
            KafkaHeader(key: "ce_traceparent", string: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            KafkaHeader(key: "content-type", string: "application/json"),
        ]
        let binaryData = MessageCoding.encode(binaryGuest)
        try keep("login-request", "request", try structured(binaryHeaders, data: binaryData))
        try await gateway.publishRaw(key: Array(binaryID.utf8), value: binaryData, headers: binaryHeaders)
        let binaryAnswer = try #require(
            try await results.waitUntil { $0.contains { $0.keyString == binaryID } }.first { $0.keyString == binaryID })
        #expect(binaryAnswer.headers.string("ce_type") == "auth.login.result")
        try keep("login-result", "worker", try structured(binaryAnswer.headers, data: binaryAnswer.value))

        // A request for a tenant the deployment does not serve, and its refusal naming it.
        let tenantID = UUID().uuidString.lowercased()
        let tenantRequest = MessageCoding.encode(
            CloudEvent(
                id: tenantID, source: "/gateway/contract-test", type: "auth.login.request", time: Date(),
                tenant: "another-app", data: LoginRequestData(method: "guest")))
        try keep("login-request", "request", tenantRequest)
        try await gateway.publishRaw(key: Array(tenantID.utf8), value: tenantRequest)
        let tenantAnswer = try #require(try await gateway.awaitResult(requestID: tenantID, timeout: .seconds(30)))
        try keep("login-result", "worker", tenantAnswer)
        let tenantRefusal = try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: tenantAnswer)
        #expect(tenantRefusal.tenant == "another-app" && tenantRefusal.data.error?.code == .unknownTenant)
        await results.close()

        let types = [
            "auth.user.created", "auth.user.upgraded", "auth.identity.linked", "auth.session.revoked",
            "auth.user.deleted", "auth.email.verification_requested", "auth.password.reset_requested",
            "auth.user.email_verified", "auth.password.changed", "auth.mfa.enabled", "auth.mfa.disabled",
            "auth.email.sign_in_requested", "auth.mfa.locked", "auth.identity.unlinked", "auth.passkey.added",
            "auth.passkey.removed", "auth.passkey.clone_suspected", "auth.phone.code_requested",
            "auth.user.phone_verified",
        ]
        let seen = try await events.waitUntil { messages in
            Set(messages.compactMap { $0.json["type"] as? String }).isSuperset(of: types)
        }
        let files = [
            "auth.user.created": "user-created", "auth.user.upgraded": "user-upgraded",
            "auth.identity.linked": "identity-linked", "auth.session.revoked": "session-revoked",
            "auth.user.deleted": "user-deleted", "auth.email.verification_requested": "verification-requested",
            "auth.password.reset_requested": "password-reset-requested", "auth.user.email_verified": "email-verified",
            "auth.password.changed": "password-changed", "auth.mfa.enabled": "mfa-enabled",
            "auth.mfa.disabled": "mfa-disabled", "auth.email.sign_in_requested": "sign-in-requested",
            "auth.mfa.locked": "mfa-locked", "auth.identity.unlinked": "identity-unlinked",
            "auth.passkey.added": "passkey-added", "auth.passkey.removed": "passkey-removed",
            "auth.passkey.clone_suspected": "passkey-clone-suspected",
            "auth.phone.code_requested": "phone-code-requested", "auth.user.phone_verified": "phone-verified",
        ]
        for message in seen {
            let type = message.json["type"] as? String ?? "?"
            try keep(
                try #require(files[type], "an event type the contract does not list: \(type)"), "worker", message.value)
        }
        await events.close()
        gateway.close()
        try await worker.stop()

        let checked = try await Subprocess.run([
            "python3", Self.root.appendingPathComponent("scripts/check-contract.py").path, "--messages", directory.path,
        ])
        let report = checked.output
        #expect(checked.status == 0, "\(report)")
        #expect(report.contains("real messages match them"), "\(report)")
        print(report.trimmingCharacters(in: .whitespacesAndNewlines))
    }
}
