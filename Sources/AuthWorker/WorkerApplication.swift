import AuthDomain
import AuthStore
import Foundation
import Kafka
import PGStore
import Passwords
import ServiceKit
import Synchronization

/// Composes the running worker from a configuration: the one place that wires the parts.
///
/// `auth-worker run` calls `build` with the configuration read from the environment; tests call it
/// with literal configuration.
public struct WorkerApplication: Sendable {
    public let configuration: WorkerConfiguration
    public let pool: PGPool
    public let producer: KafkaProducer
    public let consumer: KafkaConsumer
    public let store: PostgresStore
    public let worker: RequestPipeline
    public let relay: OutboxRelay
    /// Sign in with Apple's code exchanges and revocations; nil unless configured.
    public let appleTokens: AppleTokenService?
    public let metrics: WorkerMetrics
    public let health: HealthServer?
    /// What `/readyz` answers, checked in the background.
    public let readiness: Readiness
    /// The producer and the store's connections, as the group's first (so last stopped) service.
    public let clients: SharedClients
    public let logger: Logger
    /// Makes a tenant's flows from its configuration (`serveTenants`).
    let makeFlows: FlowMaker
    /// Each served tenant's key documents, at `/tenants/<name>/.well-known/…` on the health port.
    let tenantDocuments: TenantDocuments

    /// Validates the configuration, migrates when configured, and creates every part.
    /// - Throws: `ConfigurationError`, `PGError` (database unreachable or migration failed), `KafkaError`.
    /// - Parameter tenants: the configurations of the tenants served besides the default one
    ///   (`TenantsFile.configurations`), by name.
    public static func build(
        configuration: WorkerConfiguration, kafka: KafkaSettings, logger: Logger,
        clock: any WorkerClock = SystemClock(), tenants: [String: WorkerConfiguration] = [:]
    ) async throws -> WorkerApplication {
        try kafka.validate()
        try configuration.validate()
        let identifiers = Identifiers(clock: clock)
        var passwordPolicy = PasswordPolicy()
        passwordPolicy.contextWords = configuration.accounts.passwordContextWords
        let passwords = try PasswordService(
            parameters: configuration.accounts.argon2, threads: configuration.accounts.hashingThreads,
            policy: passwordPolicy)
        // Of AUTH_DB_POOL_SIZE connections, AUTH_DB_WRITERS write batches and one counts password
        // attempts (the store opens those itself); the rest serve lookups, the relay and health.
        let writers = configuration.processing.writers
        let pool = PGPool(
            conninfo: configuration.databaseURL,
            size: max(configuration.processing.databasePoolSize - writers - 1, 1),
            preparesStatements: configuration.processing.preparedStatements)
        let store = PostgresStore(pool: pool, writers: writers)
        if configuration.migrateOnStart {
            let applied = try await store.migrate()
            if !applied.isEmpty {
                logger.info(
                    "Migrations applied", metadata: ["db.versions": applied.map(String.init).joined(separator: ",")])
            }
        }
        let makeFlows = FlowMaker(
            store: store, passwords: passwords, clock: clock, identifiers: identifiers, logger: logger)
        let (flows, providers) = try makeFlows(configuration, tenant: TenantScope.defaultName)
        let served = try makeFlows.tenants(tenants)
        let producer = try KafkaProducer(
            configuration: kafka.producerConfiguration, logger: logger.child(label: "kafka.producer"))
        let consumer = try KafkaConsumer(
            configuration: kafka.consumerConfiguration,
            topics: [configuration.topics.requests, configuration.topics.notifications],
            logger: logger.child(label: "kafka.consumer"))
        let metrics = WorkerMetrics(passwordVerifications: passwords.verifications)
        metrics.track(pool)
        metrics.track(providers)
        metrics.trackProcess()
        let worker = try RequestPipeline(
            configuration: configuration, consumer: consumer, producer: producer, flows: flows, tenants: served,
            notifications: AppleNotificationFlow(
                provider: providers["apple"], configuration: configuration, clock: clock),
            store: store, clock: clock, metrics: metrics, logger: logger.child(label: "auth.worker"))
        let relay = OutboxRelay(
            store: store, producer: producer, clock: clock, logger: logger.child(label: "auth.outbox"),
            interval: .seconds(max(1, min(5, Int(configuration.outboxRelayGrace)))),
            grace: configuration.outboxRelayGrace, throttleWindow: configuration.accounts.throttle.window,
            rateLimitWindow: configuration.longestRateLimitWindow, auditRetention: configuration.auditRetention,
            purgeInterval: .seconds(configuration.purgeInterval), passwords: passwords,
            eventMode: configuration.eventsContentMode)
        let readiness = Readiness(
            database: DatabaseProbe(conninfo: configuration.databaseURL), producer: producer,
            topics: configuration.topics.all, outboxBacklog: metrics.outboxBacklog, databaseLoss: worker.databaseLoss,
            logger: logger.child(label: "auth.health"))
        let published = try PublishedKeys(configuration: configuration)
        let tenantDocuments = TenantDocuments(maxAge: configuration.keySetMaxAge)
        try tenantDocuments.replace(with: tenants)
        let health = configuration.healthPort.map { port in
            makeHealthServer(
                port: port, configuration: configuration, producer: producer, worker: worker, metrics: metrics,
                readiness: readiness, published: published, tenants: tenantDocuments,
                logger: logger.child(label: "auth.health"))
        }
        let appleTokens = try AppleTokenService(
            configuration: configuration, store: store, clock: clock, metrics: metrics,
            logger: logger.child(label: "auth.apple"))
        return WorkerApplication(
            configuration: configuration, pool: pool, producer: producer, consumer: consumer, store: store,
            worker: worker,
            relay: relay, appleTokens: appleTokens, metrics: metrics, health: health, readiness: readiness,
            clients: SharedClients(producer: producer, store: store, logger: logger.child(label: "auth.lifecycle")),
            logger: logger, makeFlows: makeFlows, tenantDocuments: tenantDocuments)
    }

    /// Each served tenant's JWK Set and discovery document (`PublishedKeys` of its configuration),
    /// by path: `/tenants/<name>/.well-known/jwks.json` and `…/openid-configuration`.
    final class TenantDocuments: Sendable {
        let maxAge: Int
        private let documents = Mutex<[String: HealthServer.Respond]>([:])

        init(maxAge: Int) { self.maxAge = maxAge }

        /// Publishes the documents of `tenants` in place of those published so far.
        /// - Throws: `ConfigurationError` for a key file that cannot be loaded (nothing replaced).
        func replace(with tenants: [String: WorkerConfiguration]) throws {
            var all: [String: HealthServer.Respond] = [:]
            for (name, configuration) in tenants {
                for (path, respond) in keyDocuments(try PublishedKeys(configuration: configuration), maxAge: maxAge) {
                    all["/tenants/" + name + path] = respond
                }
            }
            documents.withLock { $0 = all }
        }

        func document(_ path: String) -> HTTPResponse? { documents.withLock { $0[path] }?() }
    }

    /// Makes the flows of a tenant from its configuration, with the worker's store, password
    /// service and clock: its token issuer and keys, its identity providers, its policies.
    struct FlowMaker: Sendable {
        let store: PostgresStore
        let passwords: PasswordService
        let clock: any WorkerClock
        let identifiers: Identifiers
        let logger: Logger

        func callAsFunction(_ configuration: WorkerConfiguration, tenant: String) throws -> (
            flows: LoginFlows, providers: IdentityProviders
        ) {
            let providers = try IdentityProviders.build(
                configuration: configuration,
                fetcher: HTTPDocumentFetcher(timeout: configuration.keySets.fetchTimeout), clock: clock, logger: logger)
            if !providers.names.isEmpty {
                var metadata: Logger.Metadata = ["auth.providers": providers.names.joined(separator: ",")]
                if tenant != TenantScope.defaultName { metadata[LogKey.tenant] = tenant }
                logger.info("Identity providers enabled", metadata: metadata)
            }
            let flows = LoginFlows(
                configuration: configuration,
                accessTokens: try makeAccessTokenIssuer(configuration, identifiers: identifiers, tenant: tenant),
                providers: providers,
                passwords: passwords, attempts: store.attempts(for: tenant), clock: clock, identifiers: identifiers,
                logger: logger.child(label: "auth.flows"))
            return (flows, providers)
        }

        /// Each tenant's flows, its configuration checked first (at start and on a reload alike).
        /// - Throws: `ConfigurationError` for a tenant whose configuration does not make flows.
        func tenants(_ configurations: [String: WorkerConfiguration]) throws -> [String: LoginFlows] {
            var flows: [String: LoginFlows] = [:]
            for (name, configuration) in configurations {
                try configuration.validate()
                flows[name] = try self(configuration, tenant: name).flows
            }
            return flows
        }
    }

    /// Serves the tenants of `configurations` (read again from the tenants file) in place of those
    /// served so far; the default tenant's stay. Requests already being prepared finish with the
    /// flows they were given; a request for a tenant no longer served is refused as unknown.
    /// - Throws: `ConfigurationError` when a tenant's configuration does not make flows (nothing
    ///   is replaced then).
    public func serveTenants(_ configurations: [String: WorkerConfiguration]) throws {
        let flows = try makeFlows.tenants(configurations)
        try tenantDocuments.replace(with: configurations)
        worker.tenants.replace(with: flows)
        logger.info("Tenants served", metadata: [LogKey.tenants: flows.keys.sorted().joined(separator: ",")])
    }

    /// `/livez`: the consume loop showed progress recently. `/readyz`: PostgreSQL and a broker
    /// answered the last check, and every topic the worker uses exists. `/metrics`: Prometheus
    /// text. Every answer comes from state kept current in the background (`Readiness`): a probe
    /// never waits on PostgreSQL or the broker.
    static func makeHealthServer(
        port: UInt16, configuration: WorkerConfiguration, producer: KafkaProducer, worker: RequestPipeline,
        metrics: WorkerMetrics, readiness: Readiness, published: PublishedKeys,
        tenants: TenantDocuments? = nil, logger: Logger
    ) -> HealthServer {
        // A loop stuck longer than the longest retry wait plus a poll is not alive.
        let livenessLimit = max(60, Int(configuration.processing.maxRetryDelay.wholeMilliseconds / 1000) * 3)
        var documents: (@Sendable (String) -> HTTPResponse?)?
        if let tenants { documents = { path in tenants.document(path) } }
        return HealthServer(
            host: configuration.healthAddress, port: port,
            routes: [
                "/livez": {
                    let silent = worker.secondsSinceHeartbeat
                    return silent <= livenessLimit
                        ? (200, "ok\n") : (503, "the consume loop has shown no progress for \(silent) s\n")
                },
                "/readyz": { readiness.answer() },
                "/metrics": { (200, metrics.prometheusText()) },
            ], responses: keyDocuments(published, maxAge: configuration.keySetMaxAge), documents: documents,
            logger: logger)
    }

    /// `/.well-known/jwks.json` and `/.well-known/openid-configuration`, cacheable for `maxAge`
    /// seconds: verifiers fetch them over HTTP instead of an operator copying files.
    static func keyDocuments(_ published: PublishedKeys, maxAge: Int) -> [String: HealthServer.Respond] {
        let caching = [("Cache-Control", "public, max-age=\(maxAge)"), ("Access-Control-Allow-Origin", "*")]
        var documents: [String: HealthServer.Respond] = [:]
        if !published.isEmpty {
            let jwks = published.jwks
            documents["/.well-known/jwks.json"] = {
                HTTPResponse(status: 200, body: jwks, contentType: "application/jwk-set+json", headers: caching)
            }
        }
        if let discovery = published.discovery {
            documents["/.well-known/openid-configuration"] = {
                HTTPResponse(status: 200, body: discovery, contentType: "application/json", headers: caching)
            }
        }
        return documents
    }

    /// - Parameter tenant: whose tokens it issues (a JWT of a tenant other than the default names it).
    public static func makeAccessTokenIssuer(
        _ configuration: WorkerConfiguration, identifiers: Identifiers, tenant: String = TenantScope.defaultName
    ) throws -> any AccessTokenIssuer {
        switch configuration.accessTokenFormat {
        case .opaque:
            return OpaqueTokenIssuer(identifiers: identifiers)
        case .jwt:
            return try JWTAccessTokenIssuer(configuration: configuration, tenant: tenant)
        }
    }

    /// Runs until SIGTERM/SIGINT (or `group.startGracefulShutdown`), then drains: the consumer
    /// finishes its batch and leaves the group, the producer flushes, the pool closes.
    /// - Throws: `ServiceGroup.Failure.deadlineExceeded` when draining took too long.
    public func run(signals: [Int32] = [SIGTERM, SIGINT]) async throws {
        let group = makeServiceGroup(signals: signals)
        try await run(group)
    }

    /// The service group for this application, so a caller can stop it.
    public func makeServiceGroup(signals: [Int32] = [SIGTERM, SIGINT]) -> ServiceGroup {
        ServiceGroup(
            services: [clients] + (health.map { [$0, readiness] } ?? []) + [relay] + (appleTokens.map { [$0] } ?? [])
                + [worker], signals: signals,
            gracefulShutdownTimeout: configuration.shutdownTimeout,
            logger: logger.child(label: "auth.lifecycle"))
    }

    /// Runs `group` and releases the shared clients afterwards.
    public func run(_ group: ServiceGroup) async throws {
        do {
            try await group.run()
        } catch {
            // Cut short (the deadline passed, a service failed): the clients may still be open.
            await clients.close(flushTimeout: .seconds(5))
            throw error
        }
        logger.info("Stopped cleanly")
    }
}
