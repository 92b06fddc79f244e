import AuthCrypto
import Foundation
import JOSE
import JOSEFixtures
import Messages
import PGStore
import ServiceKit
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

@Suite(.requiresDatabase) struct ProviderSignInTests {
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
    let logs = InMemoryLogHandler()
    let keyPath: String

    init() throws {
        keyPath = try TestKeys.temporaryKeyFile().path
    }

    func service(providers extra: [IdentityProvider] = []) async throws -> FlowHarness {
        let logger = Logger(label: "test", level: .debug, handler: logs)
        let keys = KeySetCache(
            fixed: try JWKSet(json: TestSigner.keySet([Signers.rsa2048, Signers.p256])), clock: clock, logger: logger)
        let apple = IdentityProvider(
            configuration: .apple(audiences: ["com.example.app"], keysURL: URL(fileURLWithPath: "/unused")),
            keySet: keys, clock: clock)
        let google = IdentityProvider(
            configuration: .google(audiences: ["web-client"], keysURL: URL(fileURLWithPath: "/unused")),
            keySet: keys, clock: clock)
        var firebase = IdentityProviderConfiguration(
            name: "firebase", issuers: ["https://securetoken.google.com/demo"],
            keysURL: URL(string: "https://unused.example"),
            audiences: ["demo"])
        firebase.algorithms = [.es256]
        let providers = IdentityProviders(
            [apple, google, IdentityProvider(configuration: firebase, keySet: keys, clock: clock)] + extra)
        return try await FlowHarness(clock: clock, providers: providers, logger: logger) { [keyPath] config in
            config.accessTokenFormat = .jwt
            config.signingKeyPaths = [keyPath]
        }
    }

    func appleToken(
        sub: String = "001234.apple", email: String? = "x7@privaterelay.appleid.com", nonce: String? = "n-1",
        extra: [String: Any] = [:]
    ) -> String {
        var claims: [String: Any] = [
            "iss": "https://appleid.apple.com", "aud": "com.example.app", "sub": sub, "iat": 1_795_953_590,
            "exp": 1_795_953_600 + 600, "email_verified": "true", "is_private_email": "true",
        ]
        if let email { claims["email"] = email }
        if let nonce { claims["nonce"] = Hex.encode(SHA256.hash(nonce)) }
        for (key, value) in extra { claims[key] = value }
        return Signers.rsa2048.token(claims, algorithm: .rs256)
    }

    func request(
        _ method: LoginMethod, token: String, id: String = UUID().uuidString, nonce: String? = "n-1",
        profile: LoginRequestData.Profile? = nil, provider: String? = nil
    ) -> LoginRequest {
        var data = LoginRequestData(method: method.rawValue)
        data.identityToken = token
        data.nonce = nonce
        data.profile = profile
        data.provider = provider
        return LoginRequest(id: id, source: "/test", time: nil, traceparent: nil, method: method, data: data)
    }

    @Test func firstAppleLoginCreatesTheUserWithTheProfileName() async throws {
        let service = try await service()
        let outcome = try #require(
            try await service.handle(
                request(.apple, token: appleToken(), profile: .init(givenName: "Mario", familyName: "Rossi"))))
        let user = try #require(outcome.result.user)
        #expect(outcome.result.newUser == true)
        #expect(user.name == "Mario Rossi")
        #expect(user.handle.wholeMatch(of: /mario_rossi_[0-9a-f]{4}/) != nil)
        #expect(user.email == "x7@privaterelay.appleid.com")
        #expect(user.emailVerified)
        #expect(user.isPrivateEmail)
        #expect(!user.isGuest)
        #expect(user.providers == ["apple"])
        let event = try MessageCoding.decode(
            CloudEvent<UserCreatedData>.self, from: try #require(outcome.events.first).payload)
        #expect(event.type == "auth.user.created")
        #expect(event.data.provider == "apple")
        #expect(event.data.userId == user.id)

        // The access token is a JWT for this user, and only its hash is stored.
        let session = try #require(outcome.result.session)
        let payload = try #require(Base64URL.decode(String(session.accessToken.split(separator: ".")[1])))
        let claims = try #require(try JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any])
        #expect(claims["sub"] as? String == user.id)
        #expect(claims["guest"] as? Bool == false)
        // A JWT proves itself against its session: no row, no hash of it, is kept.
        #expect(try await service.count("access_tokens") == 0)
        #expect(try await service.count("sessions") == 1)
        #expect(session.abilities == ["*"])
    }

    /// When every short handle for a name is taken, the random part grows instead of the sign-in
    /// failing: all 65,536 `mario_rossi_xxxx` are taken here, so the handle has six hex digits.
    /// Profile names lose the white space around them, the Unicode kinds too; the fast path for
    /// names with visible ASCII ends changes nothing.
    @Test(arguments: [
        ("Ann", "Ann"), ("  Ann Lee \n", "Ann Lee"), ("\u{3000}Ann\u{00A0}", "Ann"), ("Zoë", "Zoë"),
        ("\tÉlodie", "Élodie"), ("", ""), (" \n ", ""), ("a", "a"),
    ])
    func profileNamesAreTrimmed(name: String, trimmed: String) {
        #expect(name.trimmedOfWhitespace == trimmed)
        #expect(name.trimmedOfWhitespace == name.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    @Test func handlesGrowWhenTheShortOnesAreAllTaken() async throws {
        let service = try await service()
        _ = try await service.query(
            """
            INSERT INTO users (id, handle, is_guest, created_at, updated_at)
            SELECT gen_random_uuid(), 'mario_rossi_' || lpad(to_hex(n), 4, '0'), false, now(), now()
            FROM generate_series(0, 65535) AS n
            """)
        let outcome = try #require(
            try await service.handle(
                request(.apple, token: appleToken(), profile: .init(givenName: "Mario", familyName: "Rossi"))))
        let handle = try #require(outcome.result.user?.handle)
        #expect(handle.wholeMatch(of: /mario_rossi_[0-9a-f]{6}/) != nil, "got \(handle)")
    }

    @Test func laterLoginsFindTheUserAndKeepNameAndEmail() async throws {
        let service = try await service()
        let first = try #require(
            try await service.handle(
                request(.apple, token: appleToken(), profile: .init(givenName: "Mario", familyName: "Rossi"))))
        // Apple sends no name after the first authorization, and may omit the e-mail.
        let second = try #require(
            try await service.handle(
                request(.apple, token: appleToken(email: nil), profile: .init(givenName: "", familyName: nil))))
        #expect(second.result.newUser == false)
        #expect(second.result.user?.id == first.result.user?.id)
        #expect(second.result.user?.name == "Mario Rossi")
        #expect(second.result.user?.email == "x7@privaterelay.appleid.com")
        #expect(second.events.isEmpty, "nothing new to announce")
        #expect(try await service.count("users") == 1)
        #expect(try await service.count("sessions") == 2)
    }

    @Test func usersWithoutANameStillGetOneAndAHandle() async throws {
        let outcome = try #require(try await service().handle(request(.apple, token: appleToken(), nonce: "n-1")))
        #expect(outcome.result.user?.name == "Apple user")
        // Every nameless Apple user shares the stand-in name: its handles start at four random
        // bytes, as guests' do, so sign-ups do not collide (with two, one in six did after 10,000).
        let handle = try #require(outcome.result.user?.handle)
        #expect(handle.wholeMatch(of: /apple_user_[0-9a-f]{8}/) != nil, "got \(handle)")
        let google = Signers.rsa2048.token(
            [
                "iss": "accounts.google.com", "aud": "web-client", "sub": "1083", "iat": 1_795_953_590,
                "exp": 1_795_953_900,
                "email": "Ada.Lovelace@Example.com", "email_verified": true,
            ], algorithm: .rs256)
        let second = try #require(try await service().handle(request(.google, token: google, nonce: nil)))
        #expect(second.result.user?.name == "ada.lovelace")
        #expect(second.result.user?.email == "ada.lovelace@example.com")
        #expect(second.result.user?.isPrivateEmail == false)
    }

    @Test func googleNamesComeFromTheToken() async throws {
        let google = Signers.rsa2048.token(
            [
                "iss": "https://accounts.google.com", "aud": "web-client", "sub": "1083", "iat": 1_795_953_590,
                "exp": 1_795_953_900, "name": "Ada Lovelace", "nonce": "raw",
            ], algorithm: .rs256)
        let outcome = try #require(try await service().handle(request(.google, token: google, nonce: "raw")))
        #expect(outcome.result.user?.name == "Ada Lovelace")
        #expect(
            outcome.result.user?.handle.wholeMatch(of: /ada_lovelace_[0-9a-f]{4}/) != nil, "a name of its own: short")
        #expect(outcome.result.user?.providers == ["google"])
    }

    @Test func oidcProvidersByName() async throws {
        let token = Signers.p256.token(
            [
                "iss": "https://securetoken.google.com/demo", "aud": "demo", "sub": "fb-1", "iat": 1_795_953_590,
                "exp": 1_795_953_900,
            ],
            algorithm: .es256)
        let outcome = try #require(
            try await service().handle(request(.oidc, token: token, nonce: nil, provider: "firebase")))
        #expect(outcome.result.user?.providers == ["firebase"])
        await #expect(throws: LoginError(.unknownProvider, "")) {
            try await service().handle(request(.oidc, token: token, nonce: nil, provider: "myspace"))
        }
    }

    /// Every error code of this flow, produced.
    @Test func errorCodes() async throws {
        let service = try await service()
        let parts = appleToken().split(separator: ".").map(String.init)
        let tampered = parts[0] + "." + TokenParts.encode(["sub": "someone-else"]) + "." + parts[2]
        await #expect(throws: LoginError(.invalidToken, "")) {
            try await service.handle(request(.apple, token: tampered))
        }
        await #expect(throws: LoginError(.invalidToken, "")) {
            try await service.handle(request(.apple, token: "garbage"))
        }
        await #expect(throws: LoginError(.tokenExpired, "")) {
            try await service.handle(request(.apple, token: appleToken(extra: ["exp": 1_795_953_600 - 3600])))
        }
        await #expect(throws: LoginError(.tokenExpired, "")) {
            try await service.handle(request(.apple, token: appleToken(extra: ["iat": 1_795_953_600 + 3600])))
        }
        await #expect(throws: LoginError(.issuerMismatch, "")) {
            try await service.handle(request(.apple, token: appleToken(extra: ["iss": "https://appleid.apple.com1"])))
        }
        await #expect(throws: LoginError(.audienceMismatch, "")) {
            try await service.handle(request(.apple, token: appleToken(extra: ["aud": "com.example.app1"])))
        }
        await #expect(throws: LoginError(.nonceMismatch, "")) {
            try await service.handle(request(.apple, token: appleToken(), nonce: "n-2"))
        }
        // An algorithm off the provider's list: Apple signs RS256 only.
        let es256 = Signers.p256.token(
            [
                "iss": "https://appleid.apple.com", "aud": "com.example.app", "sub": "s", "iat": 1_795_953_590,
                "exp": 1_795_953_900,
            ],
            algorithm: .es256)
        await #expect(throws: LoginError(.invalidToken, "")) {
            try await service.handle(request(.apple, token: es256, nonce: nil))
        }
        #expect(try await service.count("users") == 0, "no failed login leaves a user behind")
    }

    /// A sign-in whose provider keys are cached is prepared without waiting (`prepareAtOnce`: in
    /// the loop, or in a light-load lookup's task) and answers as the waiting preparation does,
    /// refusals included; with no fresh keys cached it is not prepared at once at all.
    @Test func signInsPreparedAtOnceAnswerAsThoseThatWait() async throws {
        let unfetched = IdentityProvider(
            configuration: IdentityProviderConfiguration(
                name: "unfetched", issuers: ["https://issuer.example"], keysURL: URL(string: "http://127.0.0.1:9/keys"),
                audiences: ["demo"]),
            keySet: KeySetCache(
                source: .keysURL(try #require(URL(string: "http://127.0.0.1:9/keys"))),
                fetcher: HTTPDocumentFetcher(timeout: 1), clock: clock, settings: .init(),
                logger: Logger(label: "test", handler: logs)),
            clock: clock)
        let service = try await service(providers: [unfetched])
        let parts = appleToken().split(separator: ".").map(String.init)
        let tampered = parts[0] + "." + TokenParts.encode(["sub": "someone-else"]) + "." + parts[2]
        let requests = [
            request(.apple, token: appleToken()),
            request(.apple, token: tampered),
            request(.apple, token: "garbage"),
            request(.apple, token: appleToken(extra: ["exp": 1_795_953_600 - 3600])),
            request(.apple, token: appleToken(extra: ["aud": "com.example.app1"])),
            request(.apple, token: appleToken(), nonce: "n-2"),
        ]
        func code(_ body: () async throws -> Any?) async -> String {
            do {
                return try await body() == nil ? "waits" : "prepared"
            } catch let error as LoginError {
                return error.code.rawValue
            } catch {
                return "\(error)"
            }
        }
        var answers: [String] = []
        for request in requests {
            let atOnce = await code { try service.flows.prepareAtOnce(request) }
            let waited = await code { try await service.flows.prepare(request) }
            #expect(atOnce == waited, "\(request.data.identityToken?.prefix(20) ?? "")")
            answers.append(atOnce)
        }
        #expect(
            answers == [
                "prepared", "invalid_token", "invalid_token", "token_expired", "audience_mismatch", "nonce_mismatch",
            ])
        let token = Signers.rsa2048.token(
            ["iss": "https://issuer.example", "aud": "demo", "sub": "s", "iat": 1_795_953_590, "exp": 1_795_953_900],
            algorithm: .rs256)
        #expect(
            await code {
                try service.flows.prepareAtOnce(request(.oidc, token: token, nonce: nil, provider: "unfetched"))
            }
                == "waits", "keys never fetched: the waiting preparation fetches them")
        #expect(try await service.count("users") == 0)
    }

    /// Apple resends a notification it thinks was lost; a copy that arrives in another envelope
    /// (another CloudEvent id, other whitespace) is the same notification and must act once.
    /// Keyed by the verified `jti`, `iat` and events, not by the bytes that carried them (a copy
    /// with trailing whitespace was a second notification when keyed by the raw payload); a
    /// token with whitespace before it is not a compact JWS and is refused.
    @Test func appleNotificationsAreKeyedByWhatWasVerified() async throws {
        let logger = Logger(label: "test", level: .debug, handler: logs)
        let keys = KeySetCache(
            fixed: try JWKSet(json: TestSigner.keySet([Signers.rsa2048])), clock: clock, logger: logger)
        let apple = IdentityProvider(
            configuration: .apple(audiences: ["com.example.app"], keysURL: URL(fileURLWithPath: "/unused")),
            keySet: keys, clock: clock)
        let flow = AppleNotificationFlow(provider: apple, configuration: WorkerConfiguration(), clock: clock)
        func token(jti: String) -> String {
            Signers.rsa2048.token(
                [
                    "iss": "https://appleid.apple.com", "aud": "com.example.app", "iat": 1_795_953_590,
                    "exp": 1_795_953_900, "jti": jti, "events": #"{"type":"account-delete","sub":"s-1"}"#,
                ], algorithm: .rs256)
        }
        /// `payload` is put in the JSON as is: the caller writes JSON escapes.
        func envelope(_ payload: String, id: String = "n", space: String = "") -> [UInt8] {
            Array(
                #"{"specversion":"1.0","id":"\#(id)","source":"/apple","type":"auth.provider.notification","data":\#(space){"payload":"\#(payload)"}}"#
                    .utf8)
        }
        let original = token(jti: "event-1")
        let first = try await flow.prepare(envelope(original))
        let resent = try await flow.prepare(envelope(original, id: "n-2", space: " \n "))
        await #expect(throws: AppleNotificationFlow.Refusal.self) {
            try await flow.prepare(envelope(" \\n \(original)\\n\\t"))
        }
        // Trailing whitespace is a transport artefact the JWS reader drops: the same notification.
        let trailing = try await flow.prepare(envelope(original + "\\n\\t ", id: "n-3"))
        let other = try await flow.prepare(envelope(token(jti: "event-2")))
        #expect(first.key == resent.key)
        #expect(first.key == trailing.key)
        #expect(first.key != other.key)
        #expect(first.type == "account-delete" && first.subject == "s-1")
    }

    /// A provider `sub` of `victim\0…` must never reach SQL, where a C string would end at the
    /// NUL and sign the caller in as `victim`. A signed claim with a NUL is refused as invalid.
    @Test func claimsWithANULAreRefused() async throws {
        let service = try await service()
        _ = try await service.handle(request(.apple, token: appleToken(sub: "victim")))
        await #expect(throws: LoginError(.invalidToken, "")) {
            try await service.handle(request(.apple, token: appleToken(sub: "victim\u{0}attacker")))
        }
        await #expect(throws: LoginError(.invalidToken, "")) {
            try await service.handle(request(.apple, token: appleToken(sub: "other", email: "a@b.c\u{0}x")))
        }
        await #expect(throws: LoginError(.invalidToken, "")) {
            try await service.handle(request(.apple, token: appleToken(sub: "other", extra: ["name": "N\u{0}"])))
        }
        #expect(try await service.count("users") == 1)
    }

    @Test func disabledProvidersAndUnavailableKeys() async throws {
        let unreachable = IdentityProvider(
            configuration: .google(audiences: ["web-client"], keysURL: URL(string: "http://127.0.0.1:1/keys")!),
            keySet: KeySetCache(
                source: .keysURL(URL(string: "http://127.0.0.1:1/keys")!), fetcher: HTTPDocumentFetcher(timeout: 2),
                clock: clock, settings: .init(), logger: Logger(label: "test", handler: logs)),
            clock: clock)
        let service = try await FlowHarness(
            clock: clock, providers: IdentityProviders([unreachable]), logger: Logger(label: "test", handler: logs))
        await #expect(throws: LoginError(.unsupportedMethod, "")) {
            try await service.handle(request(.apple, token: appleToken()))
        }
        let google = Signers.rsa2048.token(
            [
                "iss": "accounts.google.com", "aud": "web-client", "sub": "1", "iat": 1_795_953_590,
                "exp": 1_795_953_900,
            ],
            algorithm: .rs256)
        do {
            _ = try await service.handle(request(.google, token: google, nonce: nil))
            Issue.record("expected provider_unavailable")
        } catch let error as LoginError {
            #expect(error.code == .providerUnavailable)
            #expect(error.retriable)
        }
    }

    @Test func aLinkToThatIsNoAccessTokenIsRefused() async throws {
        var linked = request(.apple, token: appleToken())
        linked.data.linkTo = "some-guest-token"
        let service = try await service()
        await #expect(throws: LoginError(.invalidToken, "")) { try await service.handle(linked) }
        #expect(try await service.count("users") == 0)
    }

    @Test func tokensNeverReachTheLog() async throws {
        let token = appleToken()
        _ = try await service().handle(
            request(.apple, token: token, profile: .init(givenName: "Mario", familyName: nil)))
        let everything = logs.lines.joined(separator: "\n")
        #expect(!everything.contains(String(token.split(separator: ".")[2])))
        #expect(!everything.contains("x7@privaterelay"), "nor e-mail addresses")
    }
}
