import Foundation
import Glibc
import Synchronization

/// The console server's own account of its connections, for the two limits libmicrohttpd does not
/// keep: a whole request's time (its inactivity timeout resets with every byte, so a client that
/// sends a header line every few seconds never meets it), and room for a new client when every
/// connection is taken (the library refuses the newcomer; this closes the oldest connection that
/// is not being answered instead, so a flood of slow connections cannot lock everyone out, nor
/// sixteen of them everyone behind one proxy's address).
///
/// A connection is closed by `shutdown(2)` on its socket, under the lock that its close
/// notification also takes: the library's thread for it then reads the end and closes it, and a
/// socket number is never shut down after the library has let it go.
final class ConnectionGuard: Sendable {
    struct Limits: Sendable {
        var connections: Int
        var connectionsPerAddress: Int
        /// How long a request may take to arrive whole, headers and body, from the connection's
        /// opening or the end of its previous answer.
        var requestTimeout: Duration
    }

    private struct Connection {
        var fd: Int32
        var address: String
        /// When the current request began to be awaited (ordering for eviction).
        var since: ContinuousClock.Instant
        /// Set while the handler answers: such a connection is never cut.
        var answering = false
    }

    private struct State {
        var connections: [Int: Connection] = [:]
        var stopped = false
    }

    private let limits: Limits
    private let state = Mutex(State())

    init(limits: Limits) {
        self.limits = limits
        let thread = Thread { [self] in watch() }
        thread.name = "console-deadlines"
        thread.start()
    }

    /// A connection opened: counted, and when that makes too many (in all, or from its address),
    /// the oldest waiting one (of that address, when it is the address's limit) is closed.
    func opened(_ key: Int, fd: Int32, address: String) {
        state.withLock { state in
            state.connections[key] = Connection(fd: fd, address: address, since: .now)
            if state.connections.values.filter({ $0.address == address }).count > limits.connectionsPerAddress {
                Self.evictOldest(&state) { $0.address == address }
            }
            if state.connections.count > limits.connections {
                Self.evictOldest(&state) { _ in true }
            }
        }
    }

    func closed(_ key: Int) {
        _ = state.withLock { $0.connections.removeValue(forKey: key) }
    }

    /// The request arrived whole: its handler runs.
    func answering(_ key: Int) {
        state.withLock { $0.connections[key]?.answering = true }
    }

    /// The answer was sent: the next request's clock starts.
    func answered(_ key: Int) {
        state.withLock { state in
            state.connections[key]?.answering = false
            state.connections[key]?.since = .now
        }
    }

    func stop() {
        state.withLock { $0.stopped = true }
    }

    /// Closes the connection that has waited longest among those `matching`, not answering.
    private static func evictOldest(_ state: inout State, matching: (Connection) -> Bool) {
        guard
            let (key, oldest) = state.connections.filter({ !$0.value.answering && matching($0.value) })
                .min(by: { $0.value.since < $1.value.since })
        else { return }
        shutdown(oldest.fd, Int32(SHUT_RDWR))
        // Counted out now: its close notification follows when its thread sees the end.
        state.connections[key] = nil
    }

    /// Every quarter of a second, closes each connection whose request has taken too long.
    private func watch() {
        while true {
            let stopped = state.withLock { state in
                guard !state.stopped else { return true }
                let now = ContinuousClock.now
                for (key, connection) in state.connections
                where !connection.answering && now - connection.since > limits.requestTimeout {
                    shutdown(connection.fd, Int32(SHUT_RDWR))
                    state.connections[key] = nil
                }
                return false
            }
            if stopped { return }
            Thread.sleep(forTimeInterval: 0.25)
        }
    }
}
