// swift-tools-version:6.0
import PackageDescription

// The application's layers are modules of their own; across a module boundary the optimizer
// neither inlines nor specializes generics unless told to: release builds optimize across modules,
// as one module did before (measured: 7 % more CPU per guest login without it).
let crossModule: [SwiftSetting] = [.unsafeFlags(["-cross-module-optimization"], .when(configuration: .release))]

let package = Package(
    name: "auth-worker",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "auth-worker", targets: ["auth-worker"]),
        .library(name: "AuthWorker", targets: ["AuthWorker"]),
        // For Swift gateways: log users in through the worker, introspect and verify access tokens.
        .library(name: "AuthClient", targets: ["AuthClient"]),
    ],
    targets: [
        // MARK: - C libraries from the system (Debian packages)
        .systemLibrary(
            name: "CRdKafka",
            pkgConfig: "rdkafka",
            providers: [.apt(["librdkafka-dev"])]
        ),
        .systemLibrary(
            name: "CLibPQ",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"])]
        ),
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),

        .systemLibrary(
            name: "CArgon2",
            pkgConfig: "libargon2",
            providers: [.apt(["libargon2-dev"])]
        ),
        // The admin console's HTTP server (GNU libmicrohttpd).
        .systemLibrary(
            name: "CMicroHTTPD",
            pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]
        ),
        .systemLibrary(
            name: "CCrypt",
            pkgConfig: "libxcrypt",
            providers: [.apt(["libcrypt-dev"])]
        ),

        // The worker's allocator: jemalloc (libjemalloc-dev), linked into the auth-worker binary,
        // the benchmarks and the tests, with its settings (Sources/CJemalloc/jemalloc-settings.c):
        // less CPU a login than glibc's malloc (docs/performance.md, "jemalloc"). Its debug information in
        // DWARF 4, which valgrind 3.19 (`scripts/bench instructions`) reads; clang's default,
        // DWARF 5, stops it.
        // Not under a sanitizer (`scripts/sanitize` sets AUTH_SANITIZER): its own allocator serves
        // malloc there, and jemalloc beside it would take the C++ runtime's `operator new` while
        // the sanitizer took `free` (ThreadSanitizer stops at the first such string freed).
        .target(
            name: "CJemalloc", cSettings: [.unsafeFlags(["-gdwarf-4"])],
            linkerSettings: Context.environment["AUTH_SANITIZER"] == nil
                ? [.linkedLibrary("jemalloc", .when(platforms: [.linux]))] : []),

        // MARK: - Swift modules
        .target(name: "StrictJSON", swiftSettings: crossModule),
        .target(name: "ServiceKit", dependencies: ["StrictJSON"]),
        .target(name: "AuthCrypto", dependencies: ["COpenSSL"]),
        .target(name: "JOSE", dependencies: ["COpenSSL", "AuthCrypto", "StrictJSON"]),
        .target(name: "Passwords", dependencies: ["CArgon2", "CCrypt", "AuthCrypto", "ServiceKit"]),
        .target(name: "Kafka", dependencies: ["CRdKafka", "ServiceKit"]),
        .target(name: "PGStore", dependencies: ["CLibPQ", "ServiceKit"]),
        .target(name: "Messages", dependencies: ["StrictJSON"], swiftSettings: crossModule),
        // Passkeys: the strict CBOR reader, COSE keys and the ceremonies' checks (WebAuthn L3 §7).
        .target(name: "WebAuthn", dependencies: ["COpenSSL", "AuthCrypto", "JOSE", "StrictJSON"]),
        // The application, in layers the compiler holds apart (ARCHITECTURE.md): the domain
        // computes and writes through `UnitOfWork`; the store is the only SQL; the worker is the
        // only Kafka; the CLI is the operator's door.
        .target(
            name: "AuthDomain",
            dependencies: ["ServiceKit", "AuthCrypto", "JOSE", "Passwords", "Messages", "StrictJSON", "WebAuthn"],
            swiftSettings: crossModule),
        .target(name: "AuthStore", dependencies: ["AuthDomain", "PGStore"], swiftSettings: crossModule),
        .target(
            name: "AuthWorker",
            dependencies: [
                "AuthDomain", "AuthStore", "ServiceKit", "AuthCrypto", "JOSE", "Passwords", "Kafka", "PGStore",
                "Messages",
            ],
            swiftSettings: crossModule),
        // The admin console (`auth-worker admin`): pages and a JSON API for support staff.
        .target(
            name: "AdminConsole",
            dependencies: ["CMicroHTTPD", "AuthDomain", "AuthStore", "AuthCrypto", "Messages", "ServiceKit"]),
        .target(
            name: "AuthCLI",
            dependencies: [
                "AdminConsole", "AuthWorker", "AuthDomain", "AuthStore", "AuthClient", "AuthCrypto", "JOSE", "Kafka",
                "PGStore",
                "Messages", "Passwords", "ServiceKit",
            ]),
        .target(
            name: "AuthClient", dependencies: ["AuthCrypto", "JOSE", "Kafka", "Messages", "ServiceKit", "StrictJSON"]),
        .executableTarget(name: "auth-worker", dependencies: ["AuthCLI", "CJemalloc"]),
        // Stand-ins the benchmark and the tests share, kept with the tests, out of the service's
        // modules: a signer of test ID tokens (the keys a test provider publishes) and librdkafka's
        // in-process mock cluster (the benchmark's broker, the worker loop's unit tests).
        .target(name: "JOSEFixtures", dependencies: ["COpenSSL", "AuthCrypto", "JOSE"], path: "Tests/JOSEFixtures"),
        .target(name: "KafkaMockCluster", dependencies: ["CRdKafka"], path: "Tests/KafkaMockCluster"),
        .executableTarget(
            name: "auth-bench",
            dependencies: [
                "JOSE", "JOSEFixtures", "AuthCrypto", "AuthDomain", "AuthStore", "Passwords", "PGStore", "ServiceKit",
                "Messages", "Kafka", "KafkaMockCluster", "CJemalloc",
            ]),

        // MARK: - Tests
        // Helpers every test target may use: the services' environment, a key server, a mock Kafka
        // cluster, the flow harness, processes. Built only with the tests.
        .target(
            name: "TestSupport",
            dependencies: [
                "AuthCLI", "AuthWorker", "AuthDomain", "AuthStore", "AuthCrypto", "JOSE", "JOSEFixtures", "Kafka",
                "KafkaMockCluster", "Messages", "PGStore", "Passwords", "ServiceKit", "COpenSSL", "CRdKafka",
            ],
            path: "Tests/TestSupport"),
        // One test target per module or layer, as the modules are laid out (ARCHITECTURE.md).
        .testTarget(
            name: "JOSETests", dependencies: ["JOSE", "JOSEFixtures", "AuthCrypto", "StrictJSON", "TestSupport"]),
        .testTarget(name: "WebAuthnTests", dependencies: ["WebAuthn", "JOSE", "AuthCrypto", "TestSupport"]),
        .testTarget(
            name: "MessagesTests", dependencies: ["Messages", "StrictJSON", "AuthDomain", "ServiceKit", "TestSupport"]),
        .testTarget(name: "PasswordsTests", dependencies: ["Passwords", "ServiceKit", "TestSupport"]),
        .testTarget(name: "ServiceKitTests", dependencies: ["ServiceKit", "StrictJSON", "TestSupport", "CJemalloc"]),
        .testTarget(name: "PGStoreTests", dependencies: ["PGStore", "TestSupport"]),
        .testTarget(name: "KafkaTests", dependencies: ["Kafka", "TestSupport"]),
        .testTarget(
            name: "ConsoleTests",
            dependencies: [
                "AdminConsole", "AuthDomain", "AuthStore", "AuthCrypto", "Messages", "PGStore", "ServiceKit",
                "TestSupport",
            ]),
        .testTarget(
            name: "FlowTests",
            dependencies: [
                "AdminConsole", "AuthDomain", "AuthStore", "AuthCrypto", "JOSE", "JOSEFixtures", "Messages", "PGStore",
                "Passwords", "ServiceKit", "StrictJSON", "TestSupport",
            ]),
        .testTarget(
            name: "StoreTests",
            dependencies: [
                "AuthStore", "AuthDomain", "AuthWorker", "AuthCLI", "AuthCrypto", "Kafka", "PGStore", "ServiceKit",
                "TestSupport",
            ]),
        .testTarget(
            name: "WorkerTests",
            dependencies: [
                "AuthWorker", "AuthCLI", "AuthDomain", "AuthStore", "AuthCrypto", "Kafka", "Messages", "PGStore",
                "Passwords", "ServiceKit", "TestSupport",
            ]),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "AuthWorker", "AuthCLI", "AuthClient", "AuthDomain", "AuthStore", "AuthCrypto", "JOSE", "JOSEFixtures",
                "Kafka", "Messages", "PGStore", "Passwords", "ServiceKit", "TestSupport",
            ]),
    ],
    swiftLanguageModes: [.v6]
)
