import ServiceKit
import Synchronization

/// A fixed set of `PGDedicatedConnection`s handed out one caller at a time.
///
/// Callers wait (in FIFO order) when every client is busy, so the number of connections, and
/// of threads blocked in libpq, never exceeds `size`.
public final class PGPool: Sendable {
    private let clients: [PGDedicatedConnection]
    private let slots: SlotQueue
    private let lent = Atomic<Int>(0)
    /// What the pool connects with.
    public let conninfo: String
    /// Whether its connections prepare their statements (see `PGConnection`).
    public let preparesStatements: Bool

    /// - Parameters:
    ///   - conninfo: a `postgres://` URL or `key=value` string.
    ///   - size: how many connections at most. Default: 4.
    ///   - preparesStatements: whether connections prepare their statements. Default: true.
    public init(conninfo: String, size: Int = 4, preparesStatements: Bool = true) {
        let count = max(size, 1)
        self.conninfo = conninfo
        self.preparesStatements = preparesStatements
        clients = (0..<count).map {
            PGDedicatedConnection(conninfo: conninfo, name: "pg-\($0)", preparesStatements: preparesStatements)
        }
        slots = SlotQueue(count: count)
    }

    /// The number of connections.
    public var size: Int { clients.count }

    /// How many connections are lent out now.
    public var inUse: Int { lent.load(ordering: .relaxed) }

    /// Runs `body` with a connection of its own.
    @discardableResult
    public func withConnection<T: Sendable>(_ body: @Sendable (PGConnection) throws -> T) async throws -> T {
        let index = await slots.acquire()
        lent.add(1, ordering: .relaxed)
        defer {
            lent.subtract(1, ordering: .relaxed)
            slots.release(index)
        }
        return try await clients[index].withConnection(body)
    }

    /// Runs `body` in a transaction on a connection of its own.
    @discardableResult
    public func withTransaction<T: Sendable>(_ body: @Sendable (PGConnection) throws -> T) async throws -> T {
        let index = await slots.acquire()
        lent.add(1, ordering: .relaxed)
        defer {
            lent.subtract(1, ordering: .relaxed)
            slots.release(index)
        }
        return try await clients[index].withTransaction(body)
    }

    /// Closes every connection.
    public func close() async {
        for client in clients { await client.close() }
    }
}
