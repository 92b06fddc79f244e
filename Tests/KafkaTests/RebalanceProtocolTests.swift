import Testing

@testable import Kafka

/// The rebalance callback reads the group's protocol name from librdkafka, which answers NULL
/// while no protocol is chosen: that is eager (a NULL read as a C string crashed a test run).
@Suite struct RebalanceProtocolTests {
    @Test func noProtocolYetIsEager() {
        #expect(ConsumerContext.isCooperative(nil) == false)
    }

    @Test func theProtocolIsReadByName() {
        "COOPERATIVE".withCString { #expect(ConsumerContext.isCooperative($0)) }
        "EAGER".withCString { #expect(ConsumerContext.isCooperative($0) == false) }
        "NONE".withCString { #expect(ConsumerContext.isCooperative($0) == false) }
    }
}
