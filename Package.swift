// swift-tools-version:6.0
import PackageDescription

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
        .systemLibrary(
            name: "CCrypt",
            pkgConfig: "libxcrypt",
            providers: [.apt(["libcrypt-dev"])]
        ),

        // MARK: - Swift modules
        .target(name: "StrictJSON"),
        .target(name: "ServiceKit", dependencies: ["StrictJSON"]),
        .target(name: "AuthCrypto", dependencies: ["COpenSSL"]),
        .target(name: "JOSE", dependencies: ["COpenSSL", "AuthCrypto", "StrictJSON"]),
        .target(name: "Passwords", dependencies: ["CArgon2", "CCrypt", "AuthCrypto", "ServiceKit"]),
        .target(name: "Kafka", dependencies: ["CRdKafka", "ServiceKit"]),
        .target(name: "PGStore", dependencies: ["CLibPQ", "ServiceKit"]),
        .target(name: "Messages", dependencies: ["StrictJSON"]),
        // The application, in layers the compiler holds apart (ARCHITECTURE.md): the domain
        // computes and writes through `UnitOfWork`; the store is the only SQL; the worker is the
        // only Kafka; the CLI is the operator's door.
        .target(
            name: "AuthDomain",
            dependencies: ["ServiceKit", "AuthCrypto", "JOSE", "Passwords", "Messages", "StrictJSON"]),
        .target(name: "AuthStore", dependencies: ["AuthDomain", "PGStore"]),
        .target(
            name: "AuthWorker",
            dependencies: [
                "AuthDomain", "AuthStore", "ServiceKit", "AuthCrypto", "JOSE", "Passwords", "Kafka", "PGStore",
                "Messages",
            ]),
        .target(
            name: "AuthCLI",
            dependencies: [
                "AuthWorker", "AuthDomain", "AuthStore", "AuthClient", "AuthCrypto", "JOSE", "Kafka", "PGStore",
                "Messages", "ServiceKit",
            ]),
        .target(
            name: "AuthClient", dependencies: ["AuthCrypto", "JOSE", "Kafka", "Messages", "ServiceKit", "StrictJSON"]),
        .executableTarget(name: "auth-worker", dependencies: ["AuthCLI"]),
        .target(name: "JOSEFixtures", dependencies: ["COpenSSL", "AuthCrypto", "JOSE"]),
        .executableTarget(
            name: "auth-bench",
            dependencies: [
                "JOSE", "JOSEFixtures", "AuthCrypto", "AuthDomain", "AuthStore", "Passwords", "PGStore", "ServiceKit",
                "Messages",
            ]),

        // MARK: - Tests
        .testTarget(
            name: "AuthWorkerTests",
            dependencies: [
                "AuthWorker", "AuthDomain", "AuthStore", "AuthCLI", "AuthClient", "ServiceKit", "AuthCrypto", "JOSE",
                "JOSEFixtures", "Passwords", "Kafka",
                "PGStore",
                "Messages", "COpenSSL", "CRdKafka", "StrictJSON",
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
