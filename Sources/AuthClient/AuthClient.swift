import AuthCrypto
import Foundation
import JOSE
import Kafka
import Messages
import ServiceKit
import Synchronization

/// What a Swift gateway (Vapor, Hummingbird, a plain service) adds to call the auth worker over
/// Kafka: one `login` per request, answered by the worker on the results topic.
///
/// Each login gets a fresh request id (the idempotency key; pass your own to retry a request
/// safely) and, unless turned off, a fresh X25519 reply key: the worker seals the session to it,
/// and the client opens it, so tokens never sit readable on the results topic. Results are read by
/// one reader per client over every partition of the results topic, from the moment the client
/// connected, and handed to the login waiting for them.
///
/// ```swift
/// let auth = try await AuthClient.connect(.init(brokers: ["kafka:9092"]), logger: logger)
/// var request = LoginRequestData(method: "apple")
/// request.identityToken = token
/// request.nonce = rawNonce
/// let result = try await auth.login(request)      // LoginResult: the user and the opened session
/// ```
public final class AuthClient: Sendable {
    public struct Configuration: Sendable {
        public var brokers: [String]
        public var requestsTopic = "auth.login.requests"
        public var resultsTopic = "auth.login.results"
        /// The CloudEvents `source` of the requests (your gateway's name).
        public var source = "/gateway"
        /// librdkafka properties for SASL and TLS (`security.protocol`, `sasl.*`, `ssl.*`).
        public var kafkaProperties: [String: String] = [:]
        /// How long a login waits for its answer unless told otherwise. Default: 10 s.
        public var timeout: Duration = .seconds(10)
        /// Seal each session to a reply key made for its request. Default: true.
        public var sealSessions = true
        /// How requests are published (CloudEvents' Kafka binding): one JSON value (`.structured`,
        /// the default), or the attributes in `ce_` headers and the data as the value (`.binary`).
        /// The worker answers in the mode asked; this client reads either.
        public var contentMode: CloudEventMode = .structured
        /// The tenant the requests are for (the `tenant` attribute); nil for the default tenant.
        /// A name the worker does not serve is answered `unknown_tenant`.
        public var tenant: String?

        public init(brokers: [String]) {
            self.brokers = brokers
        }
    }

    public enum Failure: Error, Equatable, CustomStringConvertible {
        /// No answer within the timeout: the worker may be down or behind; retry with the same
        /// request id and it is answered once.
        case timedOut(requestID: String)
        /// The sealed session did not open with this request's reply key.
        case unreadableSession(requestID: String)
        /// The answer is not a result this client understands.
        case unreadableResult(requestID: String)
        case closed

        public var description: String {
            switch self {
            case .timedOut(let id): "no answer to request \(id) in time"
            case .unreadableSession(let id): "the sealed session of request \(id) does not open"
            case .unreadableResult(let id): "the answer to request \(id) is not a result"
            case .closed: "the client is closed"
            }
        }
    }

    private let configuration: Configuration
    private let producer: KafkaProducer
    private let results: KafkaConsumer
    private let waiting = Mutex<[String: CheckedContinuation<[UInt8], Never>]>([:])
    private let early = Mutex<[String: [UInt8]]>([:])
    private let closed = Atomic<Bool>(false)
    private let reader: Mutex<Task<Void, Never>?> = Mutex(nil)
    /// Reply keys of requests whose id the caller chose, so a retry sends the same request
    /// (the worker answers a reused id only when the content is the same) and opens its answer.
    private let retryKeys = Mutex<[String: (privateKey: [UInt8], publicKey: [UInt8], made: ContinuousClock.Instant)]>(
        [:])
    private let logger: Logger

    private init(configuration: Configuration, producer: KafkaProducer, results: KafkaConsumer, logger: Logger) {
        self.configuration = configuration
        self.producer = producer
        self.results = results
        self.logger = logger
    }

    /// Connects to the brokers and starts reading results from the end of the results topic.
    /// - Throws: `KafkaError` when the brokers cannot be reached or the results topic does not exist.
    public static func connect(_ configuration: Configuration, logger: Logger) async throws -> AuthClient {
        var kafka = KafkaConfiguration(bootstrapServers: configuration.brokers)
        kafka.properties = configuration.kafkaProperties
        let producer = try KafkaProducer(configuration: KafkaProducerConfiguration(kafka: kafka), logger: logger)
        var consumerConfiguration = KafkaConsumerConfiguration(
            kafka: kafka, groupID: "auth-client-\(UUID().uuidString.lowercased())")
        consumerConfiguration.fetchWaitMax = .milliseconds(10)
        let results: KafkaConsumer
        do {
            results = try KafkaConsumer(configuration: consumerConfiguration, logger: logger)
            try await results.assignAtEnd(configuration.resultsTopic, timeout: .seconds(10))
        } catch {
            await producer.shutdown(timeout: .seconds(1))
            throw error
        }
        let client = AuthClient(configuration: configuration, producer: producer, results: results, logger: logger)
        client.reader.withLock { $0 = Task { await client.readResults() } }
        return client
    }

    /// Sends a login (any method: sign-in, registration, refresh, logout, introspect) and waits
    /// for its answer.
    /// - Parameters:
    ///   - requestID: the request's idempotency key; a new one when nil. Sending the same request
    ///     with the same id again (after a timeout, say) is answered with the same result, never
    ///     acted on twice: this client reuses that id's reply key for an hour, so the retry is the
    ///     same request and its sealed answer opens.
    ///   - timeout: how long to wait; `configuration.timeout` when nil.
    /// - Returns: the result, the session opened when it was sealed.
    /// - Throws: `Failure.timedOut`, `Failure.unreadableSession`, or `KafkaError` when the
    ///   request could not be published.
    public func login(_ data: LoginRequestData, requestID: String? = nil, timeout: Duration? = nil) async throws
        -> LoginResult
    {
        guard !closed.load(ordering: .acquiring) else { throw Failure.closed }
        let id = requestID ?? UUID().uuidString.lowercased()
        let (request, replyKey) = try Self.outgoing(data, sealing: configuration.sealSessions) {
            try requestID.map { try retryKey(for: $0) } ?? X25519.generateKeyPair()
        }
        let record: ProducerRecord
        switch configuration.contentMode {
        case .structured:
            let event = CloudEvent(
                id: id, source: configuration.source, type: "auth.login.request", time: Date(),
                tenant: configuration.tenant, data: request)
            record = ProducerRecord(
                topic: configuration.requestsTopic, key: Array(id.utf8), value: MessageCoding.encode(event),
                headers: [KafkaHeader(key: "content-type", string: "application/cloudevents+json")])
        case .binary:
            var headers = [
                KafkaHeader(key: "ce_specversion", string: "1.0"), KafkaHeader(key: "ce_id", string: id),
                KafkaHeader(key: "ce_source", string: configuration.source),
                KafkaHeader(key: "ce_type", string: "auth.login.request"),
                KafkaHeader(key: "ce_time", string: Timestamp.format(Date())),
                KafkaHeader(key: "content-type", string: "application/json"),
            ]
            if let tenant = configuration.tenant { headers.append(KafkaHeader(key: "ce_tenant", string: tenant)) }
            record = ProducerRecord(
                topic: configuration.requestsTopic, key: Array(id.utf8), value: MessageCoding.encode(request),
                headers: headers)
        }
        let bytes = try await answer(to: id, after: record, timeout: timeout ?? configuration.timeout)
        // A structured answer is a whole CloudEvent; a binary one (its attributes in headers) is the data.
        guard
            let result = (try? MessageCoding.decode(CloudEvent<LoginResultData>.self, from: bytes).data)
                ?? (try? MessageCoding.decode(LoginResultData.self, from: bytes))
        else {
            throw Failure.unreadableResult(requestID: id)
        }
        let opened = try Self.open(result, replyKey: replyKey, requestID: id)
        return LoginResult(requestID: id, data: opened, session: opened.session)
    }

    /// The result with what came sealed to the reply key opened in place: the session, a second
    /// factor's secret or recovery codes, an `mfa_token`.
    /// - Throws: `Failure.unreadableSession` when something sealed does not open with the key.
    static func open(_ result: LoginResultData, replyKey: [UInt8]?, requestID: String) throws -> LoginResultData {
        var opened = result
        func plaintext(_ sealed: String) throws -> [UInt8] {
            guard let replyKey, let box = try? JWE.openECDHES(sealed, privateKey: replyKey) else {
                throw Failure.unreadableSession(requestID: requestID)
            }
            return box.plaintext
        }
        if let sealed = result.sealedSession {
            guard let session = try? MessageCoding.decode(SessionPayload.self, from: try plaintext(sealed)) else {
                throw Failure.unreadableSession(requestID: requestID)
            }
            opened.session = session
            opened.sealedSession = nil
        }
        if let sealed = result.sealedMFA {
            guard let mfa = try? MessageCoding.decode(MFAPayload.self, from: try plaintext(sealed)) else {
                throw Failure.unreadableSession(requestID: requestID)
            }
            opened.mfa = mfa
            opened.sealedMFA = nil
        }
        if let sealed = result.error?.sealedMFAToken {
            opened.error?.mfaToken = String(decoding: try plaintext(sealed), as: UTF8.self)
            opened.error?.sealedMFAToken = nil
        }
        return opened
    }

    /// What an access token stands for now (`method: introspect`, RFC 7662): inactive for a token
    /// that is malformed, expired, unknown or of an ended session.
    public func introspect(_ accessToken: String, timeout: Duration? = nil) async throws -> IntrospectionPayload {
        var request = LoginRequestData(method: "introspect")
        request.accessToken = accessToken
        let result = try await login(request, timeout: timeout)
        guard let introspection = result.introspection else {
            throw Failure.unreadableResult(requestID: result.requestID)
        }
        return introspection
    }

    // MARK: - The user's own account

    /// `sessions_list`: the live sessions of the access token's user, the asking one `current`.
    public func sessions(accessToken: String, timeout: Duration? = nil) async throws -> LoginResult {
        var request = LoginRequestData(method: LoginMethod.sessionsList.rawValue)
        request.accessToken = accessToken
        return try await login(request, timeout: timeout)
    }

    /// `session_revoke`: ends one of the user's sessions (`unknown_session` for any other id).
    public func revokeSession(_ sessionID: String, accessToken: String, timeout: Duration? = nil) async throws
        -> LoginResult
    {
        var request = LoginRequestData(method: LoginMethod.sessionRevoke.rawValue)
        request.accessToken = accessToken
        request.sessionID = sessionID
        return try await login(request, timeout: timeout)
    }

    // MARK: - OAuth 2.0 providers

    /// `oauth`: the authorization code the app got from `provider` (a configured OAuth 2.0
    /// entry, such as `github`), with the PKCE verifier the app made for it and the redirect URI it
    /// was issued for. With `linkTo` (a guest's access token) the guest keeps its id.
    public func signIn(
        oauth provider: String, code: String, codeVerifier: String, redirectURI: String, linkTo: String? = nil,
        device: LoginRequestData.Device? = nil, timeout: Duration? = nil
    ) async throws -> LoginResult {
        var request = LoginRequestData(method: LoginMethod.oauth.rawValue)
        request.provider = provider
        request.code = code
        request.codeVerifier = codeVerifier
        request.redirectURI = redirectURI
        request.linkTo = linkTo
        request.device = device
        return try await login(request, timeout: timeout)
    }

    // MARK: - Phone numbers

    /// `phone_code_request`: a code texted to `phone` (E.164) by the SMS service; answered alike
    /// whether the number has an account. With `accessToken`, the code is to make the number that
    /// account's (a member whose session is not recent sends its `password` too). `clientID` and
    /// `ip` count against the worker's per-client and per-IP limits: send the app install's id and
    /// the client's address as the gateway saw them.
    public func requestPhoneCode(
        phone: String, accessToken: String? = nil, password: String? = nil, locale: String? = nil,
        clientID: String? = nil, ip: String? = nil, timeout: Duration? = nil
    ) async throws -> LoginResult {
        var request = LoginRequestData(method: LoginMethod.phoneCodeRequest.rawValue)
        request.phone = phone
        request.accessToken = accessToken
        request.password = password
        request.locale = locale
        request.clientID = clientID
        if let ip { request.context = .init(ip: ip, userAgent: nil) }
        return try await login(request, timeout: timeout)
    }

    /// `phone_code`: the six digits texted to `phone` sign in (or, with `accessToken`, make the
    /// number the signed-in account's: a guest becomes a member with the same id).
    public func signIn(
        phone: String, code: String, accessToken: String? = nil, password: String? = nil,
        device: LoginRequestData.Device? = nil, timeout: Duration? = nil
    ) async throws -> LoginResult {
        var request = LoginRequestData(method: LoginMethod.phoneCode.rawValue)
        request.phone = phone
        request.code = code
        request.accessToken = accessToken
        request.password = password
        request.device = device
        return try await login(request, timeout: timeout)
    }

    // MARK: - Passkeys (the gateway relays the W3C WebAuthn JSON forms as they are)

    /// `passkey_register_options`: creation options for the signed-in user (a member or a guest),
    /// in `passkeyOptions`, for `PublicKeyCredential.parseCreationOptionsFromJSON` or an app's
    /// `ASAuthorizationPlatformPublicKeyCredentialProvider`.
    public func passkeyRegistrationOptions(accessToken: String, timeout: Duration? = nil) async throws -> LoginResult {
        var request = LoginRequestData(method: LoginMethod.passkeyRegisterOptions.rawValue)
        request.accessToken = accessToken
        return try await login(request, timeout: timeout)
    }

    /// `passkey_register`: the client's `RegistrationResponseJSON` for those options. A guest
    /// becomes a member with the same user id and gets a member's session.
    public func registerPasskey(
        _ credential: PasskeyCredential, accessToken: String, name: String? = nil,
        device: LoginRequestData.Device? = nil, timeout: Duration? = nil
    ) async throws -> LoginResult {
        var request = LoginRequestData(method: LoginMethod.passkeyRegister.rawValue)
        request.accessToken = accessToken
        request.credential = credential
        request.name = name
        request.device = device
        return try await login(request, timeout: timeout)
    }

    /// `passkey_login_options`: request options; with `email`, its account's passkeys are listed
    /// (`allowCredentials`), without one the sign-in is discoverable.
    public func passkeyLoginOptions(email: String? = nil, timeout: Duration? = nil) async throws -> LoginResult {
        var request = LoginRequestData(method: LoginMethod.passkeyLoginOptions.rawValue)
        request.email = email
        return try await login(request, timeout: timeout)
    }

    /// `passkey_login`: the client's `AuthenticationResponseJSON`; a session like any sign-in.
    public func loginWithPasskey(
        _ credential: PasskeyCredential, device: LoginRequestData.Device? = nil, timeout: Duration? = nil
    ) async throws -> LoginResult {
        var request = LoginRequestData(method: LoginMethod.passkeyLogin.rawValue)
        request.credential = credential
        request.device = device
        return try await login(request, timeout: timeout)
    }

    /// `passkey_list`: the user's passkeys.
    public func passkeys(accessToken: String, timeout: Duration? = nil) async throws -> LoginResult {
        var request = LoginRequestData(method: LoginMethod.passkeyList.rawValue)
        request.accessToken = accessToken
        return try await login(request, timeout: timeout)
    }

    /// `passkey_remove`: past a recent sign-in, give the `password`; the last way in is kept.
    public func removePasskey(
        _ passkeyID: String, accessToken: String, password: String? = nil, timeout: Duration? = nil
    ) async throws -> LoginResult {
        var request = LoginRequestData(method: LoginMethod.passkeyRemove.rawValue)
        request.accessToken = accessToken
        request.passkeyID = passkeyID
        request.password = password
        return try await login(request, timeout: timeout)
    }

    /// `account_delete`: deletes the user. Past a recent sign-in, give the `password` or a second
    /// factor's `code` (else `reauthentication_required`).
    public func deleteAccount(
        accessToken: String, password: String? = nil, code: String? = nil, timeout: Duration? = nil
    ) async throws -> LoginResult {
        var request = LoginRequestData(method: LoginMethod.accountDelete.rawValue)
        request.accessToken = accessToken
        request.password = password
        request.code = code
        return try await login(request, timeout: timeout)
    }

    /// `account_export`: everything stored about the user, opened from `sealed_export`.
    /// - Returns: the result, and the export when it succeeded.
    /// - Throws: `Failure.unreadableSession` when the export does not open with this request's key.
    public func exportAccount(accessToken: String, timeout: Duration? = nil) async throws -> (
        LoginResult, AccountExportPayload?
    ) {
        let pair = try X25519.generateKeyPair()
        var request = LoginRequestData(method: LoginMethod.accountExport.rawValue)
        request.accessToken = accessToken
        request.replyKey = Base64URL.encode(pair.publicKey)
        let id = UUID().uuidString.lowercased()
        let result = try await login(request, requestID: id, timeout: timeout)
        guard let sealed = result.data.sealedExport else { return (result, nil) }
        guard let opened = try? JWE.openECDHES(sealed, privateKey: pair.privateKey, maximumLength: 16 << 20),
            let export = try? MessageCoding.decode(AccountExportPayload.self, from: opened.plaintext)
        else { throw Failure.unreadableSession(requestID: id) }
        return (result, export)
    }

    /// Stops reading, flushes what is being sent. Logins still waiting fail with `Failure.closed`.
    public func close() async {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        reader.withLock { $0?.cancel() }
        let pending = waiting.withLock { pending in
            defer { pending.removeAll() }
            return pending
        }
        for (_, continuation) in pending { continuation.resume(returning: []) }
        await producer.shutdown(timeout: .seconds(5))
        await results.close()
    }

    /// The reply key of a request id the caller chose: made once, kept an hour (at most 10,000).
    private func retryKey(for id: String) throws -> (privateKey: [UInt8], publicKey: [UInt8]) {
        let fresh = try X25519.generateKeyPair()
        return retryKeys.withLock { keys in
            let now = ContinuousClock.now
            if keys.count >= 10_000 { keys = keys.filter { now - $0.value.made < .seconds(3600) } }
            if let kept = keys[id], now - kept.made < .seconds(3600) { return (kept.privateKey, kept.publicKey) }
            keys[id] = (fresh.privateKey, fresh.publicKey, now)
            return fresh
        }
    }

    /// The request as it is published: with a reply key (its private half returned) for every
    /// method whose answer carries a secret, when `sealing` and the caller gave none.
    /// - Parameter keyPair: makes the X25519 pair (a request id the caller chose reuses its own).
    static func outgoing(
        _ data: LoginRequestData, sealing: Bool,
        keyPair: () throws -> (privateKey: [UInt8], publicKey: [UInt8])
    ) throws -> (request: LoginRequestData, replyKey: [UInt8]?) {
        var request = data
        guard sealing, request.replyKey == nil, answerCarriesSecret(request.method) else { return (request, nil) }
        let pair = try keyPair()
        request.replyKey = Base64URL.encode(pair.publicKey)
        return (request, pair.privateKey)
    }

    /// Methods whose answer carries a secret (a session, a TOTP secret, recovery codes, an
    /// `mfa_token`), and so go out with a reply key: the worker's own list.
    static func answerCarriesSecret(_ method: String) -> Bool {
        LoginMethod(rawValue: method)?.answerCarriesSecret ?? true
    }

    // MARK: - Matching answers to requests

    /// Publishes `record` and waits for the result keyed `id`.
    private func answer(to id: String, after record: ProducerRecord, timeout: Duration) async throws -> [UInt8] {
        try await producer.send(record)
        let bytes = await withTaskGroup(of: [UInt8]?.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let ready: [UInt8]? = self.waiting.withLock { waiting in
                        if let answered = self.early.withLock({ $0.removeValue(forKey: id) }) { return answered }
                        waiting[id] = continuation
                        return nil
                    }
                    if let ready { continuation.resume(returning: ready) }
                }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            let first = await group.next() ?? nil
            if first == nil {
                // Timed out: release the waiting continuation so its task ends.
                if let continuation = waiting.withLock({ $0.removeValue(forKey: id) }) {
                    continuation.resume(returning: [])
                }
            }
            group.cancelAll()
            return first
        }
        guard let bytes, !bytes.isEmpty else {
            if closed.load(ordering: .acquiring) { throw Failure.closed }
            throw Failure.timedOut(requestID: id)
        }
        return bytes
    }

    /// Reads results and hands each to the login waiting for it; one that arrives before its
    /// login started waiting (a fast worker) is kept briefly.
    private func readResults() async {
        while !closed.load(ordering: .acquiring), !Task.isCancelled {
            let messages: [KafkaMessage]
            do {
                messages = try await results.poll(maxMessages: 500, timeout: .milliseconds(100))
            } catch {
                if closed.load(ordering: .acquiring) { return }
                logger.warning("Reading results failed; retrying", metadata: ["error": String(describing: error)])
                try? await Task.sleep(for: .milliseconds(200))
                continue
            }
            for message in messages {
                guard let key = message.key else { continue }
                let id = String(decoding: key, as: UTF8.self)
                let continuation = waiting.withLock { waiting -> CheckedContinuation<[UInt8], Never>? in
                    if let continuation = waiting.removeValue(forKey: id) { return continuation }
                    // Not (yet) awaited: another gateway's, or ours a moment early. Keep a bounded few.
                    early.withLock { early in
                        if early.count > 10_000 { early.removeAll() }
                        early[id] = message.value
                    }
                    return nil
                }
                continuation?.resume(returning: message.value)
            }
        }
    }
}

/// A login's answer, with the session opened when it came sealed.
public struct LoginResult: Sendable {
    public let requestID: String
    /// The result as the contract has it, with what came sealed opened in place: `session` for
    /// `sealed_session`, `mfa` for `sealed_mfa`, `error.mfa_token` for `error.sealed_mfa_token`.
    public let data: LoginResultData
    /// `ok` or `error`.
    public let status: String
    public let user: UserPayload?
    public let newUser: Bool?
    /// The session, opened from `sealed_session` when the request had a reply key.
    public let session: SessionPayload?
    public let introspection: IntrospectionPayload?
    /// Why not, when `status` is `error`: branch on `error.code`.
    public let error: ErrorPayload?

    init(requestID: String, data: LoginResultData, session: SessionPayload?) {
        self.requestID = requestID
        var opened = data
        opened.session = session
        opened.sealedSession = nil
        self.data = opened
        status = data.status
        user = data.user
        newUser = data.newUser
        self.session = session
        introspection = data.introspection
        error = data.error
    }

    public var isOK: Bool { status == "ok" }
}
