// swift-tools-version:6.0
// libFuzzer targets for the parsers that read what comes from outside. Built on their own (the
// fuzzer runtime brings its own entry point), with the sanitizers, by scripts/fuzz:
//
//   swift build --package-path Fuzz -Xswiftc -sanitize=fuzzer,address \
//       -Xswiftc -Xclang-linker -Xswiftc -fuse-ld=lld --product fuzz-request-decoder
import PackageDescription

let targets = ["request-decoder", "json-reader", "compact-jose", "jwk-set", "pg-text", "webauthn"]

let package = Package(
    name: "auth-worker-fuzz",
    dependencies: [.package(name: "auth-worker", path: "..")],
    targets: [
        .target(name: "FuzzDriver")
    ]
        + targets.map { name in
            .executableTarget(
                name: "fuzz-\(name)",
                dependencies: ["FuzzDriver", .product(name: "AuthWorker", package: "auth-worker")])
        },
    swiftLanguageModes: [.v6]
)
