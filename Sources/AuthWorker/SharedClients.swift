import AuthDomain
import AuthStore
import Kafka
import ServiceKit

/// The clients every other service uses, as a service of their own: started first, so the group
/// stops it last, after the consume loop has drained and the relay has stopped. Its stop flushes
/// the producer and closes the PostgreSQL connections, off the cooperative pool.
public final class SharedClients: Service {
    private let producer: KafkaProducer
    private let store: PostgresStore
    private let logger: Logger
    private let stop: AsyncStream<Void>
    private let stopContinuation: AsyncStream<Void>.Continuation

    public init(producer: KafkaProducer, store: PostgresStore, logger: Logger) {
        self.producer = producer
        self.store = store
        self.logger = logger
        (stop, stopContinuation) = AsyncStream.makeStream(of: Void.self)
    }

    /// Waits to be asked to stop, then releases the clients.
    public func run() async throws {
        for await _ in stop { break }
        await close(flushTimeout: .seconds(10))
    }

    public func triggerGracefulShutdown() {
        stopContinuation.yield()
        stopContinuation.finish()
    }

    /// Flushes and closes the producer, then the connections. Idempotent: the application also
    /// calls it when the group ended abnormally.
    public func close(flushTimeout: Duration) async {
        await producer.shutdown(timeout: flushTimeout)
        await store.close()
        logger.debug("Clients closed")
    }
}
