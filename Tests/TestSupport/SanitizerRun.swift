import Foundation

/// Whether the tests run under a sanitizer (`scripts/sanitize` sets `AUTH_SANITIZER`), whose build
/// links no jemalloc (Package.swift): the tests of jemalloc's settings and arenas have nothing to
/// test there. Any other run links it, and those tests fail if it is missing.
public enum SanitizerRun {
    public static var kind: String? { ProcessInfo.processInfo.environment["AUTH_SANITIZER"] }
    public static var linksJemalloc: Bool { kind == nil }

    /// What a binary a test launches takes from the test process's environment so that, built with
    /// the same sanitizer, it runs and reports as the tests do: the sanitizers' options, the
    /// backtracer's setting, and under ThreadSanitizer the preloaded C11 threads on `pthread_*`
    /// (scripts/sanitize), without which its librdkafka threads crash the sanitizer.
    public static var inheritedEnvironment: [String: String] {
        ProcessInfo.processInfo.environment.filter {
            $0.key.hasSuffix("SAN_OPTIONS") || $0.key == "SWIFT_BACKTRACE" || $0.key == "LD_PRELOAD"
        }
    }
}
