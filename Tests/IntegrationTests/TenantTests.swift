import AuthClient
import Foundation
import Kafka
import Messages
import PGStore
import Testing

@testable import AuthWorker
@testable import TestSupport

/// The `tenant` attribute of a request: absent or `default`, the deployment's own configuration;
/// a tenant the deployment does not serve is refused (`unknown_tenant`) before anything is read or
/// written, in either content mode, and the answer names the tenant the request did.
@Suite(.requiresServices, .timeLimit(.minutes(2))) struct TenantTests {
    @Test func aRequestForATenantTheDeploymentDoesNotServeIsRefusedAndLeavesNothing() async throws {
        let topics = try await IntegrationEnvironment.makeTopics()
        let databaseURL = try await IntegrationEnvironment.makeDatabase()
        let config = try IntegrationEnvironment.workerConfiguration(databaseURL: databaseURL, topics: topics)
        let worker = try await RunningWorker(config)
        let gateway = try GatewayClient(configuration: config, logger: IntegrationEnvironment.quietLogger)
        let results = try TopicReader(topic: topics.results)

        func structured(_ id: String, tenant: String?, data: String) -> [UInt8] {
            let attribute = tenant.map { #","tenant":"\#($0)""# } ?? ""
            return Array(
                #"{"specversion":"1.0","id":"\#(id)","source":"/gateway/tenants","type":"auth.login.request"\#(attribute),"data":\#(data)}"#
                    .utf8)
        }
        let guest = #"{"method":"guest","client_id":"tenants"}"#
        let register = #"{"method":"register","email":"someone@example.com","password":"a long passphrase 1"}"#
        let unknownGuest = "tenant-unknown-guest-\(UUID())"
        let unknownRegister = "tenant-unknown-register-\(UUID())"
        let unknownBinary = "tenant-unknown-binary-\(UUID())"
        let badName = "tenant-bad-name-\(UUID())"
        let notString = "tenant-not-string-\(UUID())"
        let named = "tenant-default-\(UUID())"
        let unnamed = "tenant-none-\(UUID())"
        try await gateway.publishRaw(
            key: nil, value: structured(unknownGuest, tenant: "acme", data: guest), headers: [])
        try await gateway.publishRaw(
            key: nil, value: structured(unknownRegister, tenant: "acme", data: register), headers: [])
        try await gateway.publishRaw(
            key: nil, value: Array(guest.utf8),
            headers: BinaryModeTests.headers(id: unknownBinary, traceparent: nil) + [
                KafkaHeader(key: "ce_tenant", string: "acme")
            ])
        try await gateway.publishRaw(key: nil, value: structured(badName, tenant: "Acme", data: guest), headers: [])
        try await gateway.publishRaw(
            key: nil,
            value: Array(
                #"{"specversion":"1.0","id":"\#(notString)","source":"/g","type":"auth.login.request","tenant":7,"data":\#(guest)}"#
                    .utf8), headers: [])
        try await gateway.publishRaw(key: nil, value: structured(named, tenant: "default", data: guest), headers: [])
        try await gateway.publishRaw(key: nil, value: structured(unnamed, tenant: nil, data: guest), headers: [])

        let ids = [unknownGuest, unknownRegister, unknownBinary, badName, notString, named, unnamed]
        let answered = try await results.waitUntil { messages in
            Set(messages.compactMap(\.keyString)).isSuperset(of: ids)
        }
        func event(_ id: String) throws -> CloudEvent<LoginResultData> {
            let message = try #require(answered.first { $0.keyString == id })
            return try MessageCoding.decode(CloudEvent<LoginResultData>.self, from: message.value)
        }

        for id in [unknownGuest, unknownRegister] {
            let refused = try event(id)
            #expect(refused.tenant == "acme", "the answer names the tenant the request did")
            #expect(refused.data.status == "error")
            #expect(refused.data.error?.code == .unknownTenant && refused.data.error?.retriable == false)
            #expect(refused.data.error?.field == "tenant")
        }
        let binary = try #require(answered.first { $0.keyString == unknownBinary })
        #expect(binary.headers.string("ce_tenant") == "acme")
        #expect(try MessageCoding.decode(LoginResultData.self, from: binary.value).error?.code == .unknownTenant)
        for id in [badName, notString] {
            let malformed = try event(id)
            #expect(malformed.data.error?.code == .malformedRequest && malformed.data.error?.field == "tenant")
            #expect(malformed.tenant == nil, "a name that is not one is not echoed")
        }
        let defaultNamed = try event(named)
        #expect(defaultNamed.data.status == "ok" && defaultNamed.tenant == "default")
        let defaultUnnamed = try event(unnamed)
        #expect(defaultUnnamed.data.status == "ok" && defaultUnnamed.tenant == nil)

        // Nothing of the refused requests was written: no user, no kept answer, no audit row, no
        // event; the two default-tenant guests are all there is.
        let connection = try PGConnection(conninfo: databaseURL)
        func count(_ sql: PGQuery) throws -> Int {
            try #require(try connection.query(sql).first?.decode("n", as: Int.self))
        }
        #expect(try count("SELECT count(*) AS n FROM users") == 2)
        #expect(try count("SELECT count(*) AS n FROM identities") == 0)
        #expect(try count("SELECT count(*) AS n FROM processed_requests") == 2)
        let refusedIDs = [unknownGuest, unknownRegister, unknownBinary]
        #expect(try count("SELECT count(*) AS n FROM audit_log WHERE request_id = ANY(\(PGArray(refusedIDs)))") == 0)
        await results.close()
        gateway.close()
        try await worker.stop()
    }

    @Test func authClientSendsItsTenant() async throws {
        let topics = try await IntegrationEnvironment.makeTopics()
        let config = try IntegrationEnvironment.workerConfiguration(
            databaseURL: try await IntegrationEnvironment.makeDatabase(), topics: topics)
        let worker = try await RunningWorker(config)
        for mode in [CloudEventMode.structured, .binary] {
            var configuration = AuthClient.Configuration(brokers: [try #require(IntegrationEnvironment.kafkaBrokers)])
            configuration.requestsTopic = topics.requests
            configuration.resultsTopic = topics.results
            configuration.timeout = .seconds(30)
            configuration.contentMode = mode
            configuration.tenant = "acme"
            let acme = try await AuthClient.connect(configuration, logger: IntegrationEnvironment.quietLogger)
            let refused = try await acme.login(LoginRequestData(method: "guest"))
            #expect(refused.error?.code == .unknownTenant, "\(mode)")
            await acme.close()
            configuration.tenant = "default"
            let own = try await AuthClient.connect(configuration, logger: IntegrationEnvironment.quietLogger)
            let signedIn = try await own.login(LoginRequestData(method: "guest"))
            #expect(signedIn.isOK && signedIn.session != nil, "\(mode): \(String(describing: signedIn.error))")
            await own.close()
        }
        try await worker.stop()
    }
}
