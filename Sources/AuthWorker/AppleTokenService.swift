import AuthCrypto
import AuthDomain
import AuthStore
import Foundation
import ServiceKit
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Sign in with Apple's REST API, off the request path: exchanges the authorization codes logins
/// brought for refresh tokens (kept sealed), and revokes those tokens when their account is
/// deleted, as Apple requires of apps that offer deletion (App Store Review Guideline 5.1.1(v)).
///
/// Every call is a durable job in PostgreSQL (`apple_jobs`), taken with a lease so replicas share
/// them: Apple being slow or down never holds a login or a deletion up; a job is retried with
/// backoff (up to an hour apart) until Apple answers, and a definite refusal (an expired or
/// reused code, a token Apple no longer knows) ends it, logged and counted.
public final class AppleTokenService: Service {
    private let configuration: WorkerConfiguration.AppleTokens
    private let keys: AppleTokenKeys
    private let signingKey: SigningKey
    private let store: PostgresStore
    private let clock: any WorkerClock
    private let identifiers: Identifiers
    private let logger: Logger
    private let session: URLSession
    private let stopping = Atomic<Bool>(false)
    /// `auth_apple_jobs_total{kind,outcome}`.
    private let outcomes: MetricFamily<Counter>
    /// `auth_apple_jobs_backlog` and the age of its oldest job.
    private let backlog: Gauge
    private let oldest: Gauge

    /// Nil unless Apple's REST API is configured.
    /// - Throws: when the key file does not hold a P-256 private key.
    public init?(
        configuration: WorkerConfiguration, store: PostgresStore, clock: any WorkerClock, metrics: WorkerMetrics,
        logger: Logger
    ) throws {
        let apple = configuration.appleTokens
        guard apple.isEnabled, let path = apple.privateKeyPath, let keys = AppleTokenKeys(configuration: configuration)
        else { return nil }
        guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw ConfigurationError(variable: Setting.applePrivateKeyFile.name, reason: "cannot read \(path)")
        }
        let key: SigningKey
        do {
            key = try SigningKey(pem: pem)
        } catch {
            throw ConfigurationError(
                variable: Setting.applePrivateKeyFile.name, reason: "is not a private key: \(error)")
        }
        guard key.algorithm == .es256 else {
            throw ConfigurationError(variable: Setting.applePrivateKeyFile.name, reason: "must be a P-256 (ES256) key")
        }
        self.configuration = apple
        self.keys = keys
        signingKey = key
        self.store = store
        self.clock = clock
        identifiers = Identifiers(clock: clock)
        self.logger = logger
        let sessionConfiguration = URLSessionConfiguration.ephemeral
        sessionConfiguration.timeoutIntervalForRequest = 10
        session = URLSession(configuration: sessionConfiguration)
        outcomes = metrics.appleJobs
        backlog = metrics.appleJobBacklog
        oldest = metrics.appleJobOldest
    }

    public func run() async throws {
        logger.info("Apple token jobs running", metadata: ["apple.token_url": configuration.tokenURL])
        while !stopping.load(ordering: .acquiring), !Task.isCancelled {
            do {
                let done = try await runOnce()
                if done > 0 { continue }
            } catch {
                logger.warning("Apple token jobs failed; will try again", metadata: [LogKey.error: "\(error)"])
            }
            try? await Task.sleep(for: .seconds(2))
        }
    }

    public func triggerGracefulShutdown() {
        stopping.store(true, ordering: .releasing)
    }

    /// Takes the due jobs and runs each once.
    /// - Returns: how many were taken.
    @discardableResult
    public func runOnce() async throws -> Int {
        let now = clock.now()
        let jobs = try await store.claimAppleJobs(limit: 20, at: now, lease: 60)
        for job in jobs { try await run(job) }
        let (count, age) = try await store.appleJobBacklog(at: clock.now())
        backlog.set(Double(count))
        oldest.set(age)
        return jobs.count
    }

    private func run(_ job: AppleJob) async throws {
        let secretKind: AppleTokenKeys.Secret = job.kind == .exchange ? .authorizationCode : .refreshToken
        guard let secret = keys.open(job.secretSealed, secretKind, subject: job.subject) else {
            // Sealed under another results key: no try can ever succeed.
            try await finish(job, "unreadable")
            return
        }
        var form = [
            ("client_id", job.clientID), ("client_secret", try clientSecret(clientID: job.clientID)),
        ]
        let url: String
        switch job.kind {
        case .exchange:
            url = configuration.tokenURL
            form += [("code", secret), ("grant_type", "authorization_code")]
        case .revoke:
            url = configuration.revokeURL
            form += [("token", secret), ("token_type_hint", "refresh_token")]
        }
        let answer: (status: Int, body: Data)
        do {
            answer = try await post(url, form: form)
        } catch {
            try await retry(job, because: "unreachable: \(error.localizedDescription)")
            return
        }
        switch answer.status {
        case 200:
            if job.kind == .revoke {
                try await finish(job, "revoked")
                return
            }
            guard
                let body = try? JSONSerialization.jsonObject(with: answer.body) as? [String: Any],
                let refresh = body["refresh_token"] as? String, !refresh.isEmpty
            else {
                try await finish(job, "refused:no_refresh_token")
                return
            }
            let kept = try await store.keepAppleToken(
                from: job, refreshTokenSealed: try keys.seal(refresh, .refreshToken, subject: job.subject),
                revocationID: try identifiers.uuid(), replacedRevocationID: try identifiers.uuid(), at: clock.now())
            outcomes.labels(job.kind.rawValue, kept ? "exchanged" : "exchanged_after_deletion").increment()
            logger.info(
                "Apple authorization code exchanged",
                metadata: ["apple.job": job.id.lowercasedString, "apple.kept": String(kept)])
        case 400..<500 where answer.status != 429:
            // Definite: an expired or reused code, a token Apple no longer knows, a bad client.
            let error =
                (try? JSONSerialization.jsonObject(with: answer.body) as? [String: Any])?["error"] as? String
                ?? "http_\(answer.status)"
            logger.warning(
                "Apple refused a token job",
                metadata: [
                    "apple.job": job.id.lowercasedString, "apple.kind": job.kind.rawValue, "apple.error": error,
                ])
            try await finish(job, "refused:" + error.prefix(64))
        default:
            try await retry(job, because: "HTTP \(answer.status)")
        }
    }

    private func finish(_ job: AppleJob, _ outcome: String) async throws {
        try await store.finishAppleJob(job, outcome: outcome, at: clock.now())
        outcomes.labels(job.kind.rawValue, String(outcome.prefix { $0 != ":" })).increment()
    }

    /// Backoff: 5 s, doubling, up to `maxRetryDelay` (an hour).
    private func retry(_ job: AppleJob, because reason: String) async throws {
        let delay = min(5 * pow(2, Double(min(job.attempts, 20))), configuration.maxRetryDelay)
        try await store.retryAppleJob(job, at: clock.now() + delay)
        outcomes.labels(job.kind.rawValue, "retried").increment()
        logger.warning(
            "Apple token job will be tried again",
            metadata: [
                "apple.job": job.id.lowercasedString, "apple.kind": job.kind.rawValue, LogKey.error: reason,
                LogKey.delay: String(Int(delay * 1000)),
            ])
    }

    /// The client secret Apple asks for: an ES256 JWT signed with the team's key, `iss` the team
    /// id, `sub` the client id, `aud` Apple, valid an hour (Apple allows six months at most).
    /// `iat` is a minute back: a clock a little ahead of Apple's must not make it "not yet valid",
    /// which Apple answers as a definite `invalid_client`.
    func clientSecret(clientID: String) throws -> String {
        let now = Int(clock.now().timeIntervalSince1970) - 60
        let header = try JSONSerialization.data(
            withJSONObject: ["alg": "ES256", "kid": configuration.keyID ?? ""], options: [.sortedKeys])
        let claims = try JSONSerialization.data(
            withJSONObject: [
                "iss": configuration.teamID ?? "", "iat": now, "exp": now + 3600, "aud": "https://appleid.apple.com",
                "sub": clientID,
            ], options: [.sortedKeys, .withoutEscapingSlashes])
        let input = Base64URL.encode(Array(header)) + "." + Base64URL.encode(Array(claims))
        return input + "." + Base64URL.encode(try signingKey.sign(Array(input.utf8)))
    }

    private func post(_ address: String, form: [(String, String)]) async throws -> (status: Int, body: Data) {
        guard let url = URL(string: address) else {
            throw ConfigurationError(variable: Setting.appleTokenURL.name, reason: "is not a URL")
        }
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        request.httpBody = Data(
            form.map { name, value in
                "\(name)=\(value.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")"
            }.joined(separator: "&").utf8)
        let (body, response) = try await HTTPExchange.data(for: request, session: session, timeout: .seconds(10))
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, body)
    }
}
