import CRdKafka

/// Builds librdkafka configuration objects and client handles.
enum KafkaClientFactory {
    /// A new `rd_kafka_conf_t` with `properties` set; the caller owns it.
    static func makeConf(_ properties: [String: String]) throws -> OpaquePointer {
        guard let conf = rd_kafka_conf_new() else {
            throw KafkaError(.configuration, reason: "rd_kafka_conf_new failed", isRetriable: false)
        }
        var errorBuffer = [CChar](repeating: 0, count: 512)
        for (key, value) in properties.sorted(by: { $0.key < $1.key }) {
            let result = rd_kafka_conf_set(conf, key, value, &errorBuffer, errorBuffer.count)
            guard result == RD_KAFKA_CONF_OK else {
                rd_kafka_conf_destroy(conf)
                throw KafkaError(
                    .configuration, reason: "\(key): \(decodeCString(errorBuffer))", isRetriable: false)
            }
        }
        return conf
    }

    /// Throws what librdkafka says about `properties` (an unknown name, a bad value), without
    /// creating a client or connecting.
    static func checkConf(_ properties: [String: String]) throws {
        rd_kafka_conf_destroy(try makeConf(properties))
    }

    /// A client handle. rd_kafka_new takes ownership of `conf` only on success; on failure it is freed here.
    static func makeClient(_ type: rd_kafka_type_t, conf: OpaquePointer) throws -> OpaquePointer {
        var errorBuffer = [CChar](repeating: 0, count: 512)
        guard let handle = rd_kafka_new(type, conf, &errorBuffer, errorBuffer.count) else {
            rd_kafka_conf_destroy(conf)
            throw KafkaError(.clientCreation, reason: decodeCString(errorBuffer), isRetriable: false)
        }
        return handle
    }

    /// The text up to the first NUL (`String(cString: [CChar])` is deprecated).
    static func decodeCString(_ buffer: [CChar]) -> String {
        let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Copies headers out of a consumed message.
    static func headers(of message: UnsafeMutablePointer<rd_kafka_message_t>) -> [KafkaHeader] {
        var headers: OpaquePointer?
        guard rd_kafka_message_headers(message, &headers) == RD_KAFKA_RESP_ERR_NO_ERROR, let headers else {
            return []
        }
        var result: [KafkaHeader] = []
        var index = 0
        var name: UnsafePointer<CChar>?
        var value: UnsafeRawPointer?
        var size = 0
        while rd_kafka_header_get_all(headers, index, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR {
            if let name {
                let bytes = value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) }
                result.append(KafkaHeader(key: String(cString: name), value: bytes))
            }
            index += 1
        }
        return result
    }
}
