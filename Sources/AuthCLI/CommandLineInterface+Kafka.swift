import AdminConsole
import AuthClient
import AuthCrypto
import AuthDomain
import AuthStore
import AuthWorker
import Foundation
import JOSE
import Kafka
import Messages
import PGStore
import Passwords
import ServiceKit

#if canImport(Glibc)
    import Glibc
#endif

/// `topics create` and `request guest`: the commands that talk to the broker.
extension CommandLineInterface {
    // MARK: - topics create

    /// Creates the configured topics that are missing, then says of each whether the cluster has
    /// it: for clusters that do not create topics on first use (the worker never does).
    func createTopics(_ arguments: Arguments, usage: String) async throws -> Int32 {
        var partitions: Int32 = 4
        if let value = arguments.values["--partitions"] {
            guard let count = Int32(value), count > 0 else {
                throw UsageError(message: "--partitions takes a positive number; \(usage)")
            }
            partitions = count
        }
        let configuration = try configuration(needs: [.brokers])
        let quiet = Logger(label: "auth-worker", level: .error, handler: JSONLinesLogHandler.standardError)
        let producer = try KafkaProducer(configuration: try kafka().producerConfiguration, logger: quiet)
        let topics = configuration.topics.all
        do {
            try await producer.createTopics(topics, partitions: partitions)
            let present = try await producer.describeTopics(topics, timeout: .seconds(10))
            await producer.shutdown(timeout: .seconds(5))
            for topic in topics { output("\(topic): \(present[topic] == true ? "present" : "missing")") }
            return topics.allSatisfy { present[$0] == true } ? 0 : 1
        } catch {
            await producer.shutdown(timeout: .seconds(5))
            throw error
        }
    }

    // MARK: - request guest

    /// - Parameter tenant: the tenant named in the request (none: the default tenant, unnamed).
    func requestGuest(_ arguments: Arguments, tenant: String?) async throws -> Int32 {
        var device = LoginRequestData.Device(name: "auth-worker CLI", platform: "cli")
        if let name = arguments.values["--device"] { device.name = name }
        if let platform = arguments.values["--platform"] { device.platform = platform }
        var timeout = 30
        if let value = arguments.values["--timeout"] {
            guard let seconds = Int(value), seconds > 0 else { throw UsageError(message: "--timeout takes seconds") }
            timeout = seconds
        }
        let configuration = try configuration(needs: [.brokers])
        let quiet = Logger(label: "auth-worker", level: .error, handler: JSONLinesLogHandler.standardError)
        let kafka = try kafka()
        var clientConfiguration = AuthClient.Configuration(brokers: kafka.brokers)
        clientConfiguration.requestsTopic = configuration.topics.requests
        clientConfiguration.resultsTopic = configuration.topics.results
        clientConfiguration.source = "/gateway/cli"
        clientConfiguration.kafkaProperties = kafka.properties
        clientConfiguration.tenant = tenant
        let client = try await AuthClient.connect(clientConfiguration, logger: quiet)
        var data = LoginRequestData(method: "guest")
        data.device = device
        let started = ContinuousClock.now
        do {
            let result = try await client.login(data, timeout: .seconds(timeout))
            await client.close()
            output(String(decoding: MessageCoding.encode(result.data), as: UTF8.self))
            errorOutput(
                "answered in \(ContinuousClock.now - started) (request \(result.requestID); session sealed to a one-time key and opened)"
            )
            return 0
        } catch let failure as AuthClient.Failure {
            await client.close()
            errorOutput("auth-worker: \(failure) (is the worker running?)")
            return 1
        }
    }
}
