import AuthCrypto
import AuthDomain
import AuthStore
import Foundation
import JOSE
import JOSEFixtures
import Kafka
import KafkaMockCluster
import Messages
import PGStore
import Passwords
import ServiceKit

// Benchmarks reported as ratios against what this machine's OpenSSL does on its own
// (`openssl speed`), so numbers from different machines compare. One core: the worker scales
// across cores by handling messages in parallel.
//
// usage: auth-bench [jose] [passwords] [--seconds S] [--rounds N] (auth-bench --help for the rest)

struct Measurement {
    var name: String
    var perSecond: Double
}

func measure(_ name: String, seconds: Double, _ body: () throws -> Void) rethrows -> Measurement {
    // Warm up, then run for `seconds`, checking the clock every 64 iterations.
    for _ in 0..<200 { try body() }
    let start = ContinuousClock.now
    let limit = Duration.milliseconds(Int64(seconds * 1000))
    var iterations = 0
    while ContinuousClock.now - start < limit {
        for _ in 0..<64 { try body() }
        iterations += 64
    }
    let elapsed = ContinuousClock.now - start
    let elapsedSeconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    return Measurement(name: name, perSecond: Double(iterations) / elapsedSeconds)
}

/// `openssl speed` verify rates for the same primitives, on one core.
func opensslSpeed(seconds: Int, primitives: [String] = ["rsa2048", "ecdsap256", "ed25519"]) -> [String: Double] {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
    process.arguments = ["speed", "-seconds", String(seconds)] + primitives
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = FileHandle.nullDevice
    do {
        try process.run()
    } catch {
        return [:]
    }
    let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    var rates: [String: Double] = [:]
    for line in output.split(separator: "\n") {
        let fields = line.split(separator: " ").map(String.init)
        // "rsa 2048 bits 0.000687s 0.000020s   1455.9  49836.7"
        if line.hasPrefix("rsa 2048 bits"), let verify = fields.last.flatMap(Double.init) { rates["RS256"] = verify }
        // " 256 bits ecdsa (nistp256)   0.0000s   0.0001s  42305.3  13972.6"
        if line.contains("ecdsa (nistp256)"), let verify = fields.last.flatMap(Double.init) { rates["ES256"] = verify }
        // " 253 bits EdDSA (Ed25519)   0.0000s   0.0001s  43000.0  16000.0"
        if line.contains("EdDSA (Ed25519)"), let verify = fields.last.flatMap(Double.init) { rates["EdDSA"] = verify }
    }
    return rates
}

/// One algorithm's numbers: OpenSSL's own verify rate, our signature check alone, our whole
/// ID-token check (split, base64url, header and claims JSON, signature, claims policy).
struct JOSEResult {
    var algorithm: JWSAlgorithm
    var openssl: Double
    var signatureOnly: Double
    var wholeToken: Double
}

func joseBenchmark(
    _ signer: TestSigner, _ algorithm: JWSAlgorithm, primitive: String, seconds: Double, rounds: Int
) throws -> JOSEResult {
    let now = Date(timeIntervalSince1970: 1_795_953_600)
    let nonce = "0xefdF9861F3eDc2404643B588378FE242FCadE658"
    // A realistic Google-sized ID token.
    let token = signer.token(
        [
            "iss": "https://accounts.google.com", "azp": "1234-android.apps.googleusercontent.com",
            "aud": "1234-web.apps.googleusercontent.com", "sub": "108378151968747898733",
            "email": "someone@example.com", "email_verified": true, "nonce": nonce, "name": "Some One",
            "picture": "https://lh3.googleusercontent.com/a/ACg8ocJ=s96-c", "given_name": "Some",
            "family_name": "One", "locale": "en", "iat": 1_795_953_590, "exp": 1_795_957_190,
        ], algorithm: algorithm)
    let keys = try JWKSet(json: TestSigner.keySet([signer]))
    let policy = ClaimsPolicy(
        issuers: ["https://accounts.google.com"], audiences: ["1234-web.apps.googleusercontent.com"])
    let allowed: Set<JWSAlgorithm> = [algorithm]
    let jws = try CompactJWS(token)
    guard let key = keys.keys.first?.key else { throw JOSEError(.keyNotFound, "no key") }
    // Rounds interleave the reference and ours, keeping the best of each: the machine's noise
    // then hits both alike.
    var result = JOSEResult(algorithm: algorithm, openssl: 0, signatureOnly: 0, wholeToken: 0)
    for _ in 0..<rounds {
        result.openssl = max(
            result.openssl,
            opensslSpeed(seconds: max(Int(seconds), 1), primitives: [primitive])[algorithm.rawValue] ?? 0)
        let raw = try measure("signature", seconds: seconds) {
            guard try key.verify(signature: jws.signature, message: jws.signingInput, algorithm: algorithm) else {
                throw JOSEError(.badSignature, "benchmark token did not verify")
            }
        }
        result.signatureOnly = max(result.signatureOnly, raw.perSecond)
        let whole = try measure("whole", seconds: seconds) {
            _ = try JWSVerifier.verifyIDToken(
                CompactJWS(token), keys: keys, allowed: allowed, policy: policy, now: now, nonce: nonce)
        }
        result.wholeToken = max(result.wholeToken, whole.perSecond)
    }
    return result
}

/// Password logins through the whole flow (store, throttle, hash on the pool, session write)
/// beside the raw Argon2id rate with the same parameters and threads, set up once and then
/// measured in pairs: each round times both, back to back, alternating which goes first, so a
/// host whose speed drifts (a shared one does, by a third within minutes) moves both figures of a
/// pair alike, and the ratio is each pair's, not the best of one beside the best of the other.
struct PasswordBenchmark {
    let passwords: PasswordService
    let stored: String
    let threads: Int
    let handle: @Sendable (LoginRequestData, LoginMethod) async throws -> LoginResultData
    let login: LoginRequestData

    init(databaseURL: String) async throws {
        let parameters = Argon2Parameters()
        let threads = ProcessInfo.processInfo.activeProcessorCount
        let passwords = try PasswordService(parameters: parameters, threads: threads)
        var configuration = WorkerConfiguration()
        configuration.accessTokenFormat = .opaque
        configuration.accounts.argon2 = parameters
        configuration.accounts.throttle.threshold = .max
        let clock = SystemClock()
        let identifiers = Identifiers(clock: clock)
        let store = PostgresStore(pool: PGPool(conninfo: databaseURL, size: threads * 2 + 1))
        try await store.migrate()
        let flows = LoginFlows(
            configuration: configuration, accessTokens: OpaqueTokenIssuer(identifiers: identifiers),
            passwords: passwords, attempts: store, clock: clock, identifiers: identifiers,
            logger: Logger(label: "bench", level: .error, handler: InMemoryLogHandler()))
        // Prepare (the attempt counted, the hash checked on its pool), then write in a transaction:
        // the work of one password login in the worker's pipeline, without the broker.
        @Sendable func handle(_ data: LoginRequestData, method: LoginMethod) async throws -> LoginResultData {
            let request = LoginRequest(
                id: UUID().uuidString, source: "/bench", time: nil, traceparent: nil, method: method, data: data)
            let prepared = try await flows.prepare(request)
            guard
                case .written(let answer, _) = try await store.runBatch(
                    [prepared], prefetch: prepared.prefetch,
                    { item, unit in
                        try item.write(unit)
                    }
                ).first
            else { throw BenchmarkFailure(reason: "benchmark login failed") }
            return answer.result
        }
        let email = "bench-\(UUID().uuidString.prefix(8))@example.com"
        var register = LoginRequestData(method: "register")
        register.email = email
        register.password = "correct horse battery staple"
        guard try await handle(register, method: .register).status == "ok" else {
            throw BenchmarkFailure(reason: "benchmark registration failed")
        }
        var login = LoginRequestData(method: "password")
        login.email = email
        login.password = "correct horse battery staple"
        self.passwords = passwords
        self.stored = try passwords.hasher.hash("correct horse battery staple")
        self.threads = threads
        self.handle = handle
        self.login = login
    }

    /// Every hashing thread verifying back to back.
    func raw(seconds: Double) async throws -> Double {
        let (passwords, stored) = (passwords, stored)
        return try await rate(seconds: seconds, concurrency: threads) {
            _ = try await passwords.verify("correct horse battery staple", against: stored)
        }
    }

    /// Twice as many logins in flight as hashing threads, as a busy worker would have.
    func logins(seconds: Double) async throws -> Double {
        let (handle, login) = (handle, login)
        return try await rate(seconds: seconds, concurrency: threads * 2) {
            guard try await handle(login, .password).status == "ok" else {
                throw BenchmarkFailure(reason: "benchmark login failed")
            }
        }
    }
}

/// The median of a non-empty list (the mean of the middle two for an even count).
func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

/// Completed operations per second with `concurrency` loops running `body` for `seconds`.
func rate(seconds: Double, concurrency: Int, _ body: @escaping @Sendable () async throws -> Void) async throws -> Double
{
    let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
    let start = ContinuousClock.now
    let total = try await withThrowingTaskGroup(of: Int.self) { group in
        for _ in 0..<concurrency {
            group.addTask {
                var count = 0
                while ContinuousClock.now < deadline {
                    try await body()
                    count += 1
                }
                return count
            }
        }
        return try await group.reduce(0, +)
    }
    let elapsed = ContinuousClock.now - start
    return Double(total) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
}

let arguments = Array(CommandLine.arguments.dropFirst())
var seconds = 2.0
var rounds = 2
if let index = arguments.firstIndex(of: "--seconds"), index + 1 < arguments.count,
    let value = Double(arguments[index + 1])
{
    seconds = value
}
if let index = arguments.firstIndex(of: "--rounds"), index + 1 < arguments.count, let value = Int(arguments[index + 1])
{
    rounds = max(value, 1)
}
if arguments.contains("--help") {
    print("usage: auth-bench [jose] [passwords] [--seconds S] [--rounds N]")
    print("       auth-bench broker")
    print("       auth-bench pace BROKERS REQUESTS RESULTS RATE BODIES OUT")
    print("       auth-bench echo BROKERS REQUESTS RESULTS FETCH_WAIT_MS")
    print("  passwords needs AUTH_BENCH_DATABASE_URL=postgres://… (scripts/bench sets it); it runs 6 rounds of")
    print("  3 s each way unless told (raw hashing and password logins back to back, alternating which")
    print("  goes first) and reports each round's ratio and their median")
    print("  broker hosts librdkafka's mock cluster for the integration tests (and scripts/bench e2e")
    print("  --broker mock-linked; its default broker is scripts/bench-broker.py): prints its bootstrap")
    print("  servers on the first line, then creates a topic for each `create NAME PARTITIONS` line")
    print("  read from standard input, cuts every client off at `down` and lets them in again at `up`")
    print("  (answering `ok` or `error: …`), until standard input closes")
    print("  pace sends the end-to-end benchmark's paced requests and times their results; echo answers")
    print("  each request at once with no work, the broker's floor (see LoadGenerator.swift)")
    exit(0)
}
if arguments.first == "broker" {
    /// A line on standard output, written at once (the benchmark reads it while this runs).
    func reply(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
    do {
        let cluster = try KafkaMockCluster(brokers: 1)
        reply(cluster.bootstrapServers)
        // Standard input's lines, read through a FILE of their own (`readLine` gives no way to
        // tell its end from a failed read).
        guard let input = fdopen(STDIN_FILENO, "r") else { throw CocoaError(.fileReadUnknown) }
        var buffer: UnsafeMutablePointer<CChar>?
        var capacity = 0
        while true {
            // Only the end of standard input ends the broker; a read that fails otherwise is read
            // again. A CI run once lost its mock broker for good right after the fault-injection
            // test continued it (SIGCONT after SIGSTOP): every client refused from then on, its
            // standard error not kept. A read interrupted there and taken for the end, which ends
            // this loop and the process, is one way that happens; this rules it out.
            let count = getline(&buffer, &capacity, input)
            guard count >= 0, let buffer else {
                if feof(input) != 0 { break }
                clearerr(input)
                usleep(10_000)
                continue
            }
            let line = String(cString: buffer).trimmingCharacters(in: .newlines)
            let words = line.split(separator: " ")
            do {
                if words == ["down"] || words == ["up"] {
                    try cluster.setReachable(words == ["up"])
                } else if words.count == 3, words[0] == "create", let partitions = Int32(words[2]), partitions > 0 {
                    try cluster.createTopic(String(words[1]), partitions: partitions)
                } else {
                    reply("error: expected `create NAME PARTITIONS`, `down` or `up`")
                    continue
                }
                reply("ok")
            } catch {
                reply("error: \(error)")
            }
        }
        exit(0)
    } catch {
        FileHandle.standardError.write(Data("auth-bench: \(error)\n".utf8))
        exit(1)
    }
}
if arguments.first == "pace" || arguments.first == "echo" {
    do {
        if arguments.first == "pace" {
            try await runPacedLoad(Array(arguments.dropFirst()))
        } else {
            try await runEcho(Array(arguments.dropFirst()))
        }
        exit(0)
    } catch {
        FileHandle.standardError.write(Data("auth-bench: \(error)\n".utf8))
        exit(1)
    }
}
let sections = Set(arguments.filter { !$0.hasPrefix("--") && Double($0) == nil })
func wants(_ section: String) -> Bool { sections.isEmpty || sections.contains(section) }

do {
    if wants("jose") {
        print("JOSE verification, one core (best of \(rounds) interleaved rounds of \(seconds) s)")
        print("algorithm  openssl speed verify/s  signature only/s  whole ID token/s  whole token / openssl")
        for (signer, algorithm, primitive) in [
            (TestSigner(.rsa(2048), kid: "rsa"), JWSAlgorithm.rs256, "rsa2048"),
            (TestSigner(.ec(.p256), kid: "ec"), .es256, "ecdsap256"),
            (TestSigner(.ed25519, kid: "ed"), .edDSA, "ed25519"),
        ] {
            let result = try joseBenchmark(signer, algorithm, primitive: primitive, seconds: seconds, rounds: rounds)
            print(
                String(
                    format: "%-9@  %22.0f  %16.0f  %16.0f  %21.2f", algorithm.rawValue as NSString, result.openssl,
                    result.signatureOnly, result.wholeToken, result.wholeToken / result.openssl))
        }
    }
    if sections.contains("oauth") {
        guard let standIn = ProcessInfo.processInfo.environment["OAUTH_STAND_IN_URL"],
            let secretPath = ProcessInfo.processInfo.environment["OAUTH_STAND_IN_SECRET_FILE"]
        else {
            throw BenchmarkFailure(reason: "oauth needs the stand-in provider (scripts/bench oauth starts it)")
        }
        let benchmark = OAuthBenchmark(standIn: standIn, secretPath: secretPath)
        let count = arguments.contains("--rounds") ? rounds * 100 : 500
        _ = try await benchmark.oauthMicroseconds(count: 50)  // warm up: connections, caches
        let oauth = try await benchmark.oauthMicroseconds(count: count)
        _ = try OAuthBenchmark.oidcMicroseconds(count: 200)
        let oidc = try OAuthBenchmark.oidcMicroseconds(count: count * 4)
        print("")
        print("A provider sign-in's own part, CPU of this process (the stand-in provider on loopback not counted)")
        print("method                                                   CPU µs a login")
        print(String(format: "oidc: the ID token verified (RS256)                      %14.1f", oidc))
        print(String(format: "oauth: code exchanged, profile and addresses read (HTTP) %14.1f", oauth))
        print(String(format: "oauth / oidc: %.2f", oauth / oidc))
    }
    if wants("passwords") {
        guard let databaseURL = ProcessInfo.processInfo.environment[Setting.benchDatabaseURL.name] else {
            throw BenchmarkFailure(reason: "AUTH_BENCH_DATABASE_URL is not set")
        }
        let parameters = Argon2Parameters()
        // Pairs alternate which half goes first; an even count gives each order the same weight.
        let pairs = arguments.contains("--rounds") ? rounds : 6
        let pairSeconds = arguments.contains("--seconds") ? seconds : 3
        print("")
        print(
            "Password logins, Argon2id m=\(parameters.memoryKiB) KiB t=\(parameters.iterations) p=\(parameters.parallelism), "
                + "\(ProcessInfo.processInfo.activeProcessorCount) hashing threads "
                + "(\(pairs) rounds of \(pairSeconds) s each way, alternating which runs first); "
                + Allocator.description)
        let benchmark = try await PasswordBenchmark(databaseURL: databaseURL)
        print("round  raw Argon2id verifications/s  password logins/s (PostgreSQL)  logins / raw")
        var ratios: [Double] = []
        for round in 1...pairs {
            let raw: Double
            let logins: Double
            if round % 2 == 1 {
                raw = try await benchmark.raw(seconds: pairSeconds)
                logins = try await benchmark.logins(seconds: pairSeconds)
            } else {
                logins = try await benchmark.logins(seconds: pairSeconds)
                raw = try await benchmark.raw(seconds: pairSeconds)
            }
            ratios.append(logins / raw)
            print(String(format: "%5d  %28.1f  %32.1f  %12.2f", round, raw, logins, logins / raw))
        }
        print(
            String(
                format: "median logins / raw: %.2f (rounds %.2f – %.2f)", median(ratios), ratios.min() ?? 0,
                ratios.max() ?? 0))
    }
} catch {
    FileHandle.standardError.write(Data("auth-bench: \(error)\n".utf8))
    exit(1)
}

struct BenchmarkFailure: Error {
    var reason: String
}
