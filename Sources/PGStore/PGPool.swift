import Synchronization

/// A fixed set of `PGClient`s handed out one caller at a time.
///
/// Callers wait (in FIFO order) when every client is busy, so the number of connections, and
/// of threads blocked in libpq, never exceeds `size`.
public final class PGPool: Sendable {
    private let clients: [PGClient]
    private let state: Mutex<State>

    private struct State {
        var free: [Int]
        var waiters: [CheckedContinuation<Int, Never>] = []
    }

    /// - Parameters:
    ///   - conninfo: a `postgres://` URL or `key=value` string.
    ///   - size: how many connections at most. Default: 4.
    public init(conninfo: String, size: Int = 4) {
        let count = max(size, 1)
        clients = (0..<count).map { PGClient(conninfo: conninfo, name: "pg-\($0)") }
        state = Mutex(State(free: Array(0..<count)))
    }

    /// The number of connections.
    public var size: Int { clients.count }

    /// Runs `body` with a connection of its own.
    @discardableResult
    public func withConnection<T: Sendable>(_ body: @Sendable (PGConnection) throws -> T) async throws -> T {
        let index = await acquire()
        defer { release(index) }
        return try await clients[index].withConnection(body)
    }

    /// Runs `body` in a transaction on a connection of its own.
    @discardableResult
    public func withTransaction<T: Sendable>(_ body: @Sendable (PGConnection) throws -> T) async throws -> T {
        let index = await acquire()
        defer { release(index) }
        return try await clients[index].withTransaction(body)
    }

    /// Closes every connection.
    public func close() async {
        for client in clients { await client.close() }
    }

    private func acquire() async -> Int {
        await withCheckedContinuation { continuation in
            let index = state.withLock { state -> Int? in
                if let index = state.free.popLast() { return index }
                state.waiters.append(continuation)
                return nil
            }
            if let index { continuation.resume(returning: index) }
        }
    }

    private func release(_ index: Int) {
        let waiter = state.withLock { state -> CheckedContinuation<Int, Never>? in
            if state.waiters.isEmpty {
                state.free.append(index)
                return nil
            }
            return state.waiters.removeFirst()
        }
        waiter?.resume(returning: index)
    }
}
