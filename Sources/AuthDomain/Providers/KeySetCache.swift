import Foundation
import JOSE
import ServiceKit
import Synchronization

/// One provider's key set: fetched on demand, cached per `Cache-Control`, refetched on an unknown
/// `kid` at a bounded rate, kept (stale) while the provider is unreachable.
///
/// Concurrent callers that need a fetch share one request.
public actor KeySetCache {
    /// Where the key set comes from.
    public enum Source: Sendable, Equatable {
        case keysURL(URL)
        /// Resolve `jwks_uri` from an OpenID discovery document first; its `issuer` must be one of these.
        case discovery(URL, issuers: [String])
    }

    private let source: Source
    private let fetcher: any DocumentFetcher
    private let clock: any WorkerClock
    private let settings: WorkerConfiguration.KeySetSettings
    private let logger: Logger

    private var keys: JWKSet? {
        didSet { publish() }
    }
    private var expiresAt: Date = .distantPast {
        didSet { publish() }
    }
    /// The cached set and its expiry, readable without a hop onto the actor (`freshKeys`).
    private nonisolated let published = Mutex<(keys: JWKSet, expiresAt: Date)?>(nil)
    private var lastFetchAt: Date?
    private var lastFailureAt: Date?
    private var inFlight: Task<JWKSet, any Error>?
    private var resolvedKeysURL: URL?
    /// How many fetches were made (tests and metrics).
    public private(set) var fetchCount = 0
    /// How many fetches failed (`auth_key_set_fetch_failures_total`).
    public nonisolated let failures = Counter()

    public init(
        source: Source, fetcher: any DocumentFetcher, clock: any WorkerClock,
        settings: WorkerConfiguration.KeySetSettings, logger: Logger
    ) {
        self.source = source
        self.fetcher = fetcher
        self.clock = clock
        self.settings = settings
        self.logger = logger
        if case .keysURL(let url) = source { resolvedKeysURL = url }
    }

    /// A fixed key set that never expires (`auth-worker token verify --keys FILE`, tests).
    public init(fixed: JWKSet, clock: any WorkerClock, logger: Logger) {
        self.source = .keysURL(URL(fileURLWithPath: "/dev/null"))
        self.fetcher = FixedFetcher()
        self.clock = clock
        self.settings = WorkerConfiguration.KeySetSettings()
        self.logger = logger
        self.keys = fixed
        self.expiresAt = .distantFuture
        self.lastFetchAt = .distantFuture
        // An initializer's assignments run no observers.
        published.withLock { $0 = (fixed, .distantFuture) }
    }

    private func publish() {
        let snapshot = keys.map { (keys: $0, expiresAt: expiresAt) }
        published.withLock { $0 = snapshot }
    }

    /// The cached set when it is fresh and holds `keyID` (any fresh set when the token names no
    /// key), at once; nil whenever `keys(forKeyID:)` might fetch or fall back instead.
    public nonisolated func freshKeys(forKeyID keyID: String?) -> JWKSet? {
        guard let (keys, expiresAt) = published.withLock({ $0 }), clock.now() < expiresAt else { return nil }
        guard let keyID else { return keys }
        return keys.keyIDs.contains(keyID) ? keys : nil
    }

    private struct FixedFetcher: DocumentFetcher {
        func fetch(_ url: URL) async throws -> FetchedDocument { throw FetchError("fixed key set") }
    }

    /// The keys to verify a token whose header names `keyID`.
    ///
    /// - Returns: the cached set when fresh and holding the `kid` (or when a refetch for an unknown
    ///   `kid` is not allowed yet); otherwise a freshly fetched set, or the stale one if the fetch failed.
    /// - Throws: `JOSEError.keySetUnavailable` when no keys were ever fetched and fetching fails.
    public func keys(forKeyID keyID: String?) async throws -> JWKSet {
        let now = clock.now()
        if let keys, now < expiresAt {
            guard let keyID, !keys.keyIDs.contains(keyID) else { return keys }
            // Unknown kid in a fresh set: maybe the provider rotated. Refetch, but not too often.
            if let lastFetchAt, now.timeIntervalSince(lastFetchAt) < settings.unknownKeyRefetchInterval {
                return keys
            }
        }
        if let lastFailureAt, now.timeIntervalSince(lastFailureAt) < settings.failureBackoff {
            if let keys { return keys }
            throw JOSEError(.keySetUnavailable, "the provider's keys could not be fetched recently")
        }
        do {
            return try await refresh()
        } catch {
            lastFailureAt = clock.now()
            failures.increment()
            if let keys {
                logger.warning(
                    "Key set fetch failed; using the cached keys", metadata: [LogKey.error: String(describing: error)])
                return keys
            }
            logger.error("Key set fetch failed", metadata: [LogKey.error: String(describing: error)])
            throw JOSEError(.keySetUnavailable, "the provider's keys could not be fetched")
        }
    }

    private func refresh() async throws -> JWKSet {
        if let inFlight { return try await inFlight.value }
        let task = Task { try await self.fetchNow() }
        inFlight = task
        defer { inFlight = nil }
        return try await task.value
    }

    private func fetchNow() async throws -> JWKSet {
        let url = try await keysURL()
        fetchCount += 1
        let document = try await fetcher.fetch(url)
        let set: JWKSet
        do {
            set = try JWKSet(json: document.body)
        } catch {
            throw FetchError("\(url.absoluteString) is not a key set")
        }
        guard !set.keys.isEmpty else { throw FetchError("\(url.absoluteString) holds no usable key") }
        if !set.skipped.isEmpty {
            logger.info("Skipped unusable keys", metadata: ["keys.skipped": set.skipped.joined(separator: "; ")])
        }
        let now = clock.now()
        let lifetime = min(
            max(document.maxAge ?? settings.defaultLifetime, settings.minimumLifetime), settings.maximumLifetime)
        keys = set
        expiresAt = now + lifetime
        lastFetchAt = now
        lastFailureAt = nil
        logger.info(
            "Fetched key set",
            metadata: [
                "keys.url": url.absoluteString, "keys.count": String(set.keys.count), "keys.ttl": String(Int(lifetime)),
            ])
        return set
    }

    private func keysURL() async throws -> URL {
        if let resolvedKeysURL { return resolvedKeysURL }
        guard case .discovery(let discoveryURL, let issuers) = source else { throw FetchError("no key set URL") }
        fetchCount += 1
        let document = try await fetcher.fetch(discoveryURL)
        struct Discovery: Decodable {
            var issuer: String?
            var jwks_uri: String?
        }
        guard let discovery = try? JSONDecoder().decode(Discovery.self, from: document.body),
            let text = discovery.jwks_uri, let url = URL(string: text)
        else { throw FetchError("\(discoveryURL.absoluteString) has no jwks_uri") }
        guard let issuer = discovery.issuer, issuers.contains(issuer) else {
            throw FetchError("\(discoveryURL.absoluteString) names another issuer")
        }
        resolvedKeysURL = url
        return url
    }
}
