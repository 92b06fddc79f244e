#ifndef AUTH_CRDKAFKA_SHIM_H
#define AUTH_CRDKAFKA_SHIM_H

#include <librdkafka/rdkafka.h>
/* The in-process mock cluster (rd_kafka_mock_*): the worker loop's unit tests run against it. */
#include <librdkafka/rdkafka_mock.h>

/// RD_KAFKA_PARTITION_UA is a cast macro Swift cannot import.
static inline int32_t rdkafka_shim_partition_unassigned(void) { return RD_KAFKA_PARTITION_UA; }

/// rd_kafka_producev is variadic. On success librdkafka takes ownership of `headers`
/// (which may be NULL); on failure the caller still owns them.
static inline rd_kafka_resp_err_t rdkafka_shim_produce(rd_kafka_t *rk, const char *topic, int32_t partition,
                                                       const void *key, size_t key_len, const void *value,
                                                       size_t value_len, rd_kafka_headers_t *headers,
                                                       void *opaque) {
    return rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(partition),
                             RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(key, key_len),
                             RD_KAFKA_V_VALUE((void *)value, value_len), RD_KAFKA_V_HEADERS(headers),
                             RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
}

#endif
