// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "auth-worker",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "auth-worker", targets: ["auth-worker"]),
        .library(name: "AuthWorker", targets: ["AuthWorker"]),
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

        // MARK: - Swift modules
        .target(name: "ServiceKit"),
        .target(name: "AuthCrypto", dependencies: ["COpenSSL"]),
        .target(name: "JOSE", dependencies: ["COpenSSL", "AuthCrypto"]),
        .target(name: "Kafka", dependencies: ["CRdKafka", "ServiceKit"]),
        .target(name: "PGStore", dependencies: ["CLibPQ", "ServiceKit"]),
        .target(name: "Messages"),
        .target(
            name: "AuthWorker", dependencies: ["ServiceKit", "AuthCrypto", "JOSE", "Kafka", "PGStore", "Messages"]),
        .executableTarget(name: "auth-worker", dependencies: ["AuthWorker", "ServiceKit"]),
        .target(name: "JOSEFixtures", dependencies: ["COpenSSL", "AuthCrypto", "JOSE"]),
        .executableTarget(
            name: "auth-bench", dependencies: ["JOSE", "JOSEFixtures", "AuthCrypto", "AuthWorker", "ServiceKit"]),

        // MARK: - Tests
        .testTarget(
            name: "AuthWorkerTests",
            dependencies: [
                "AuthWorker", "ServiceKit", "AuthCrypto", "JOSE", "JOSEFixtures", "Kafka", "PGStore", "Messages",
                "COpenSSL",
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
