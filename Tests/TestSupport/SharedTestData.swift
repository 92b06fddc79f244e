import Foundation
import Testing

/// Public test vectors kept beside the project (`../shared/testdata`), or where
/// `AUTH_TESTDATA_DIR` points. Suites that use them are skipped cleanly when they are absent.
enum SharedTestData {
    static let directory: URL? = {
        if let override = ProcessInfo.processInfo.environment["AUTH_TESTDATA_DIR"] {
            return URL(fileURLWithPath: override)
        }
        let projectRoot = ProjectPaths.root
        let candidate = projectRoot.deletingLastPathComponent().appendingPathComponent("shared/testdata")
        return FileManager.default.fileExists(atPath: candidate.path) ? candidate : nil
    }()

    static var isAvailable: Bool { directory != nil }

    static func data(_ relativePath: String) throws -> Data {
        guard let directory else { throw MissingTestData() }
        return try Data(contentsOf: directory.appendingPathComponent(relativePath))
    }

    static func json(_ relativePath: String) throws -> Any {
        try JSONSerialization.jsonObject(with: try data(relativePath))
    }

    struct MissingTestData: Error {}
}

extension Trait where Self == ConditionTrait {
    static var requiresSharedTestData: Self {
        .enabled(if: SharedTestData.isAvailable, "../shared/testdata is absent")
    }
}
