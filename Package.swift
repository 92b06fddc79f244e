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
        .target(
            name: "AuthWorker",
            dependencies: [
                "ServiceKit", "AuthCrypto", "JOSE", "Passwords", "Kafka", "PGStore", "Messages", "StrictJSON",
                "AuthClient",
            ]),
        .target(
            name: "AuthClient", dependencies: ["AuthCrypto", "JOSE", "Kafka", "Messages", "ServiceKit", "StrictJSON"]),
        .executableTarget(name: "auth-worker", dependencies: ["AuthWorker", "ServiceKit"]),
        .target(name: "JOSEFixtures", dependencies: ["COpenSSL", "AuthCrypto", "JOSE"]),
        .executableTarget(
            name: "auth-bench",
            dependencies: [
                "JOSE", "JOSEFixtures", "AuthCrypto", "AuthWorker", "Passwords", "PGStore", "ServiceKit", "Messages",
            ]),

        // MARK: - Tests
        .testTarget(
            name: "AuthWorkerTests",
            dependencies: [
                "AuthWorker", "AuthClient", "ServiceKit", "AuthCrypto", "JOSE", "JOSEFixtures", "Passwords", "Kafka",
                "PGStore",
                "Messages", "COpenSSL", "StrictJSON",
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
