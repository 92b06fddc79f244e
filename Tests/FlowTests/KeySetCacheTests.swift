import Foundation
import JOSE
import JOSEFixtures
import ServiceKit
import Testing

@testable import AuthCLI
@testable import AuthDomain
@testable import AuthStore
@testable import AuthWorker
@testable import TestSupport

/// The key set cache against a real HTTP server on loopback, with the clock pinned.
@Suite(.timeLimit(.minutes(3))) struct KeySetCacheTests {
    let server: KeyServer
    let clock = ManualClock(Date(timeIntervalSince1970: 1_795_953_600))
    let logs = InMemoryLogHandler()

    init() throws {
        server = try KeyServer()
        server.serve(
            "/keys",
            .init(
                body: TestSigner.keySet([Signers.rsa2048, Signers.p256]),
                headers: ["Cache-Control": "public, max-age=600"]))
    }

    func cache(
        path: String = "/keys", settings: WorkerConfiguration.KeySetSettings = .init(), timeout: TimeInterval = 5
    ) -> KeySetCache {
        KeySetCache(
            source: .keysURL(server.url(path)), fetcher: HTTPDocumentFetcher(timeout: timeout), clock: clock,
            settings: settings, logger: Logger(label: "test", handler: logs))
    }

    @Test func fetchesOnceAndServesFromTheCache() async throws {
        let keys = cache()
        for _ in 0..<10 { _ = try await keys.keys(forKeyID: "rsa2048") }
        #expect(server.hits("/keys") == 1)
        clock.advance(by: 599)
        _ = try await keys.keys(forKeyID: "p256")
        #expect(server.hits("/keys") == 1)
        clock.advance(by: 2)
        _ = try await keys.keys(forKeyID: "p256")
        #expect(server.hits("/keys") == 2, "max-age=600 has passed")
        server.stop()
    }

    @Test func cacheLifetimeIsBoundedBelowAndAbove() async throws {
        server.serve("/short", .init(body: TestSigner.keySet([Signers.p256]), headers: ["Cache-Control": "max-age=5"]))
        server.serve(
            "/long", .init(body: TestSigner.keySet([Signers.p256]), headers: ["Cache-Control": "max-age=9999999"]))
        var settings = WorkerConfiguration.KeySetSettings()
        settings.minimumLifetime = 300
        settings.maximumLifetime = 3600
        let short = cache(path: "/short", settings: settings)
        let long = cache(path: "/long", settings: settings)
        _ = try await short.keys(forKeyID: nil)
        _ = try await long.keys(forKeyID: nil)
        clock.advance(by: 299)
        _ = try await short.keys(forKeyID: nil)
        #expect(server.hits("/short") == 1, "at least the minimum lifetime")
        clock.advance(by: 3302)
        _ = try await short.keys(forKeyID: nil)
        _ = try await long.keys(forKeyID: nil)
        #expect(server.hits("/short") == 2)
        #expect(server.hits("/long") == 2, "at most the maximum lifetime")
        server.stop()
    }

    @Test func anUnknownKidRefetchesAtABoundedRate() async throws {
        var settings = WorkerConfiguration.KeySetSettings()
        settings.unknownKeyRefetchInterval = 60
        let keys = cache(settings: settings)
        _ = try await keys.keys(forKeyID: "rsa2048")
        // The provider rotates: a token names a key the cache has not seen.
        server.serve(
            "/keys", .init(body: TestSigner.keySet([Signers.ed25519]), headers: ["Cache-Control": "max-age=600"]))
        clock.advance(by: 61)
        let rotated = try await keys.keys(forKeyID: "ed25519")
        #expect(rotated.keyIDs == ["ed25519"])
        #expect(server.hits("/keys") == 2)
        // A flood of unknown kids within the interval costs no further fetches.
        for index in 0..<20 { _ = try await keys.keys(forKeyID: "forged-\(index)") }
        #expect(server.hits("/keys") == 2)
        clock.advance(by: 61)
        _ = try await keys.keys(forKeyID: "forged-again")
        #expect(server.hits("/keys") == 3)
        server.stop()
    }

    @Test func concurrentFetchesAreCoalesced() async throws {
        server.serve("/slow", .init(body: TestSigner.keySet([Signers.p256]), delay: .milliseconds(300)))
        let keys = cache(path: "/slow")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<25 { group.addTask { _ = try await keys.keys(forKeyID: "p256") } }
            try await group.waitForAll()
        }
        #expect(server.hits("/slow") == 1)
        server.stop()
    }

    /// The keys a verification may use without waiting: only a fresh set that holds the token's
    /// `kid`. Whenever `keys(forKeyID:)` would fetch, refetch or fall back to stale keys, none.
    @Test func freshKeysAreServedAtOnceOnlyWhenNothingWouldBeFetched() async throws {
        let keys = cache()
        #expect(keys.freshKeys(forKeyID: "rsa2048") == nil, "nothing fetched yet")
        _ = try await keys.keys(forKeyID: "rsa2048")
        #expect(keys.freshKeys(forKeyID: "rsa2048")?.keyIDs.contains("rsa2048") == true)
        #expect(keys.freshKeys(forKeyID: "p256") != nil)
        #expect(keys.freshKeys(forKeyID: nil) != nil, "a token naming no key: any fresh set")
        #expect(keys.freshKeys(forKeyID: "rotated") == nil, "an unknown kid may need a refetch")
        clock.advance(by: 599)
        #expect(keys.freshKeys(forKeyID: "rsa2048") != nil)
        clock.advance(by: 2)
        #expect(keys.freshKeys(forKeyID: "rsa2048") == nil, "expired: the next use refetches")
        server.serve("/keys", .init(status: 503, body: Data("down".utf8)))
        _ = try await keys.keys(forKeyID: "rsa2048")
        #expect(keys.freshKeys(forKeyID: "rsa2048") == nil, "stale keys served while the provider is down wait")
        server.stop()
    }

    @Test func staleKeysAreServedWhileTheProviderIsDown() async throws {
        let keys = cache()
        _ = try await keys.keys(forKeyID: "rsa2048")
        server.serve("/keys", .init(status: 503, body: Data("down".utf8)))
        clock.advance(by: 601)
        let stale = try await keys.keys(forKeyID: "rsa2048")
        #expect(stale.keyIDs.contains("rsa2048"))
        #expect(logs.lines.contains { $0.contains("using the cached keys") })
        server.stop()
    }

    @Test func noKeysAtAllIsProviderUnavailable() async throws {
        server.serve("/broken", .init(status: 500, body: Data()))
        let keys = cache(path: "/broken")
        await #expect(throws: JOSEError(.keySetUnavailable, "")) { try await keys.keys(forKeyID: "x") }
        // Within the failure backoff the provider is not asked again.
        await #expect(throws: JOSEError(.keySetUnavailable, "")) { try await keys.keys(forKeyID: "x") }
        #expect(server.hits("/broken") == 1)
        #expect(keys.failures.count == 1, "counted for auth_key_set_fetch_failures_total")
        server.stop()
        let refused = KeySetCache(
            source: .keysURL(URL(string: "http://127.0.0.1:1/keys")!), fetcher: HTTPDocumentFetcher(timeout: 2),
            clock: clock, settings: .init(), logger: Logger(label: "test", handler: logs))
        await #expect(throws: JOSEError(.keySetUnavailable, "")) { try await refused.keys(forKeyID: "x") }
    }

    @Test func slowProvidersTimeOut() async throws {
        server.serve("/stuck", .init(body: TestSigner.keySet([Signers.p256]), delay: .seconds(600)))
        let keys = cache(path: "/stuck", timeout: 1)
        let started = ContinuousClock.now
        await #expect(throws: JOSEError(.keySetUnavailable, "")) { try await keys.keys(forKeyID: "p256") }
        // Far sooner than the 600 s the server takes. The bound is loose: on a loaded 2-core machine
        // (the whole suite runs in parallel) a test can wait over a minute for the cooperative pool.
        #expect(ContinuousClock.now - started < .seconds(150))
        server.stop()
    }

    @Test func garbageKeySetsAreNotCached() async throws {
        server.serve("/garbage", .init(body: Data("<html>".utf8)))
        await #expect(throws: JOSEError(.keySetUnavailable, "")) {
            try await cache(path: "/garbage").keys(forKeyID: nil)
        }
        server.stop()
    }

    @Test func discoveryFindsTheKeySet() async throws {
        let issuer = "https://issuer.example"
        let discovery = try JSONSerialization.data(withJSONObject: [
            "issuer": issuer, "jwks_uri": server.url("/keys").absoluteString,
        ])
        server.serve("/.well-known/openid-configuration", .init(body: discovery))
        let keys = KeySetCache(
            source: .discovery(server.url("/.well-known/openid-configuration"), issuers: [issuer]),
            fetcher: HTTPDocumentFetcher(timeout: 5), clock: clock, settings: .init(),
            logger: Logger(label: "test", handler: logs))
        #expect(try await keys.keys(forKeyID: "p256").keyIDs.contains("p256"))
        let wrongIssuer = KeySetCache(
            source: .discovery(server.url("/.well-known/openid-configuration"), issuers: ["https://other.example"]),
            fetcher: HTTPDocumentFetcher(timeout: 5), clock: clock, settings: .init(),
            logger: Logger(label: "test", handler: logs))
        await #expect(throws: JOSEError(.keySetUnavailable, "")) { try await wrongIssuer.keys(forKeyID: "p256") }
        server.stop()
    }

    @Test func onlyHTTPSOrLoopbackHTTP() {
        #expect(HTTPDocumentFetcher.isAllowed(URL(string: "https://appleid.apple.com/auth/keys")!))
        #expect(HTTPDocumentFetcher.isAllowed(URL(string: "http://127.0.0.1:8080/keys")!))
        #expect(HTTPDocumentFetcher.isAllowed(URL(string: "http://localhost/keys")!))
        #expect(!HTTPDocumentFetcher.isAllowed(URL(string: "http://appleid.apple.com/auth/keys")!))
        #expect(!HTTPDocumentFetcher.isAllowed(URL(string: "http://10.0.0.1/keys")!))
        #expect(!HTTPDocumentFetcher.isAllowed(URL(string: "file:///etc/passwd")!))
        #expect(!HTTPDocumentFetcher.isAllowed(URL(string: "ftp://example.com/keys")!))
        // Decided by address, not by what the name looks like.
        #expect(HTTPDocumentFetcher.isAllowed(URL(string: "http://127.8.9.10/keys")!))
        #expect(HTTPDocumentFetcher.isAllowed(URL(string: "http://[::1]:8080/keys")!))
        #expect(HTTPDocumentFetcher.isAllowed(URL(string: "http://[::ffff:127.0.0.1]/keys")!))
        #expect(!HTTPDocumentFetcher.isAllowed(URL(string: "http://127.attacker.invalid/keys")!))
        #expect(!HTTPDocumentFetcher.isAllowed(URL(string: "http://127.0.0.1.nip.io/keys")!))
        #expect(!HTTPDocumentFetcher.isAllowed(URL(string: "http://[::ffff:10.0.0.1]/keys")!))
        #expect(!HTTPDocumentFetcher.isAllowed(URL(string: "http://[::2]/keys")!))
        #expect(!HTTPDocumentFetcher.isAllowed(URL(string: "http://localhost.attacker.invalid/keys")!))
    }

    @Test func cacheControlParsing() {
        #expect(HTTPDocumentFetcher.maxAge("public, max-age=23040, must-revalidate, no-transform") == 23040)
        #expect(HTTPDocumentFetcher.maxAge("max-age=0") == 0)
        #expect(HTTPDocumentFetcher.maxAge("no-store") == 0)
        #expect(HTTPDocumentFetcher.maxAge("private") == nil)
        #expect(HTTPDocumentFetcher.maxAge("max-age=banana") == nil)
        #expect(HTTPDocumentFetcher.maxAge(nil) == nil)
    }
}
