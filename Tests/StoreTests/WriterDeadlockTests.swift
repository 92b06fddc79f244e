import Foundation
import PGStore
import Testing

@testable import AuthDomain
@testable import AuthStore
@testable import TestSupport

/// Two batch writers side by side on overlapping rows take their locks in one order, so they
/// wait for each other but never deadlock (`40P01`, which aborts a whole batch). The hardest case
/// for them: two batches inserting the same new handles in opposite orders, all in one statement
/// each (a handle's unique index entry is a lock the other insert waits on).
@Suite(.requiresDatabase) struct WriterDeadlockTests {
    @Test func twoWritersInsertingTheSameHandlesInOppositeOrdersNeverDeadlock() async throws {
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let store = PostgresStore(pool: PGPool(conninfo: databaseURL, size: 2), writers: 2)
        try await store.migrate()
        let rounds = 12
        var deadlocks = 0
        var conflicts = 0
        var written = 0
        for round in 0..<rounds {
            let handles = (0..<300).map { "overlap_\(round)_\($0)" }
            var prefetch = Prefetch()
            prefetch.handles = handles
            let batch = prefetch
            @Sendable func run(_ order: [String], writer: Int) async throws -> [PostgresStore.ItemOutcome<String>] {
                try await store.runBatch(order, prefetch: batch, writer: writer) { handle, unit in
                    try unit.insertUser(
                        NewUser(
                            id: UUID(), name: nil, email: nil, emailVerified: false, isPrivateEmail: false,
                            isGuest: true, createdAt: Date()),
                        handles: [handle]
                    ).handle
                }
            }
            async let forward = settle { try await run(handles, writer: 0) }
            async let backward = settle { try await run(handles.reversed(), writer: 1) }
            for outcome in await [forward, backward] {
                switch outcome {
                case .success(let items):
                    for item in items {
                        switch item {
                        case .written: written += 1
                        case .conflict, .refused: conflicts += 1
                        }
                    }
                case .failure(let error as PGError) where error.sqlState == "40P01":
                    deadlocks += 1
                case .failure(let error):
                    Issue.record("unexpected: \(error)")
                }
            }
        }
        #expect(deadlocks == 0, "40P01 between the writers")
        #expect(written == rounds * 300, "each handle went to one of the two batches")
        #expect(written + conflicts == rounds * 600)
        await store.close()
    }
}

/// A batch's outcomes, or what it threw.
private func settle<Output: Sendable>(_ body: @Sendable () async throws -> Output) async -> Result<Output, any Error> {
    do {
        return .success(try await body())
    } catch {
        return .failure(error)
    }
}
