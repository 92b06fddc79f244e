import AuthCrypto
import Foundation
import JOSE
import JOSEFixtures
import Messages
import PGStore
import Passwords
import ServiceKit
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker

/// The login flows against a PostgreSQL database of their own, without the broker: each request
/// is looked up, prepared and written in a batch transaction exactly as the worker's pipeline does
/// (`PreparedRequest.write` through `RequestPipeline.write`, over `PostgresStore.runBatch`).
final class FlowHarness: Sendable {
    let databaseURL: String
    let store: PostgresStore
    let configuration: WorkerConfiguration
    let flows: LoginFlows
    let connection: PGDedicatedConnection

    /// What handling one request wrote and answered.
    struct Outcome: Sendable {
        var result: LoginResultData
        var events: [OutboxEvent]
    }

    /// - Parameters:
    ///   - configure: adjusts a configuration whose tokens are opaque unless a signing key is set.
    ///   - providers: the identity providers the flows know.
    ///   - passwords: the password service (nil: password methods are not enabled).
    ///   - existing: a database to share with another harness (a second replica); default: a new one.
    ///   - tenant: the tenant its requests are for (each request without one is stamped with it),
    ///     and its flows' questions before a batch are asked as.
    init(
        clock: any WorkerClock, providers: IdentityProviders = IdentityProviders([]),
        passwords: PasswordService? = nil, logger: Logger = Logger(label: "test", handler: InMemoryLogHandler()),
        databaseURL existing: String? = nil, tenant: String = TenantScope.defaultName,
        configure: (inout WorkerConfiguration) -> Void = { _ in }
    ) async throws {
        self.tenant = tenant
        if let existing {
            databaseURL = existing
        } else {
            databaseURL = try await IntegrationEnvironment.makeDatabase()
        }
        var configuration = WorkerConfiguration(databaseURL: databaseURL)
        configuration.accessTokenFormat = .opaque
        configure(&configuration)
        self.configuration = configuration
        store = PostgresStore(pool: PGPool(conninfo: databaseURL, size: 3))
        try await store.migrate()
        let identifiers = Identifiers(clock: clock)
        let issuer: any AccessTokenIssuer =
            configuration.accessTokenFormat == .jwt
            ? try JWTAccessTokenIssuer(configuration: configuration, tenant: tenant)
            : OpaqueTokenIssuer(identifiers: identifiers)
        flows = LoginFlows(
            configuration: configuration, accessTokens: issuer, providers: providers, passwords: passwords,
            attempts: store.attempts(for: tenant), clock: clock, identifiers: identifiers, logger: logger)
        connection = PGDedicatedConnection(conninfo: databaseURL, name: "harness")
        self.clock = clock
    }

    private let clock: any WorkerClock
    let tenant: String

    /// Handles one request in a transaction of its own.
    /// - Returns: nil when its id was processed before (the pipeline answers it from the kept result).
    /// - Throws: the `LoginError` of a refusal (nothing written).
    func handle(_ request: LoginRequest) async throws -> Outcome? {
        var request = request
        if request.tenant == nil, tenant != TenantScope.defaultName { request.tenant = tenant }
        guard try await store.keptRequests([request.key])[request.key] == nil else { return nil }
        guard case .some(let result) = try await handleBatch([request]).first else { return nil }
        return try result.get()
    }

    /// Handles requests as one batch: prepared in parallel, written in one transaction, in order.
    func handleBatch(_ requests: [LoginRequest]) async throws -> [Result<Outcome, any Error>] {
        let requests = requests.map { request in
            var request = request
            if request.tenant == nil, tenant != TenantScope.defaultName { request.tenant = tenant }
            return request
        }
        var prepared: [Result<PreparedRequest, any Error>] = []
        for request in requests {
            do {
                let replyKey = try request.replyKey(required: configuration.sessions.requireReplyKey)
                prepared.append(
                    .success(
                        PreparedRequest(
                            request: request, digest: SHA256.hash(request.id), replyKey: replyKey,
                            prepared: try await flows.prepare(request))))
            } catch {
                prepared.append(.failure(error))
            }
        }
        let now = clock.now()
        // As the pipeline does: a request refused before its write leaves its audit row.
        var items = prepared.compactMap { try? $0.get() }.map(WriteItem.login)
        for (request, preparation) in zip(requests, prepared) {
            if case .failure(let error) = preparation, let audit = AuditEntry.refused(request, error: error, at: now) {
                items.append(.audit(audit))
            }
        }
        var prefetch = Prefetch()
        for case .success(let work) in prepared { prefetch.merge(work.prefetch) }
        let resultsKey = configuration.resultsKey
        let remembered = now + configuration.sessions.idempotencyLifetime
        var outcomes = try await store.runBatch(
            items, prefetch: prefetch,
            onRefusal: { item, error, unit in try item.recordRefusal(error, in: unit, at: now) }
        ) { item, unit in
            try item.write(unit, resultsKey: resultsKey, rememberedUntil: remembered, at: now)
        }.makeIterator()
        return prepared.map { preparation in
            switch preparation {
            case .failure(let error):
                return .failure(error)
            case .success:
                switch outcomes.next() {
                case .written(.login(let result, _), let events):
                    return .success(Outcome(result: result, events: events))
                case .refused(let error): return .failure(error)
                default: return .failure(StoreError.handlesExhausted)
                }
            }
        }
    }

    /// Runs SQL against the harness's database.
    func query(_ query: PGQuery) async throws -> PGRows {
        try await connection.withConnection { try $0.query(query) }
    }

    /// `SELECT count(*)` of a table, optionally filtered (the SQL is the test's own).
    func count(_ table: String, where condition: String = "true") async throws -> Int {
        try await query(PGQuery(unsafeSQL: "SELECT count(*) AS n FROM \(table) WHERE \(condition)")).first?
            .decode("n", as: Int.self) ?? -1
    }

    /// The stored password hash of an e-mail's password identity.
    func passwordHash(email: String) async throws -> String? {
        try await query("SELECT password_hash FROM identities WHERE provider = 'password' AND subject = \(email)")
            .first?.decode("password_hash", as: String?.self)
    }
}

/// Builds a request with a fresh id.
func makeRequest(
    _ method: LoginMethod, id: String = UUID().uuidString, _ fill: (inout LoginRequestData) -> Void = { _ in }
)
    -> LoginRequest
{
    var data = LoginRequestData(method: method.rawValue)
    fill(&data)
    return LoginRequest(id: id, source: "/test", time: nil, traceparent: nil, method: method, data: data)
}
