import PGStore
import Testing

@testable import AuthWorker

/// What the worker's error policy lets into its logs.
@Suite struct ErrorPolicyTests {
    @Test func theWorkerLogsNoRowValuesFromPostgreSQL() {
        let error = PGError(
            .query, sqlState: "23502", detail: "Failing row contains (password, a@b.c, $argon2id$v=19$m=…)")
        let logged = ErrorPolicy.loggable(error)
        #expect(logged.contains("23502"))
        #expect(!logged.contains("argon2") && !logged.contains("a@b.c"))
    }
}
