#!/usr/bin/env python3
"""The end-to-end benchmark's broker: librdkafka's mock cluster, hosted in a process of its own.

It runs on the librdkafka the `confluent-kafka` wheel bundles (2.x, newer than Debian's), loaded
with ctypes, because that one can delete a partition's oldest records and Debian's (2.0.2) cannot.
That matters: the mock finds where a fetch starts by walking the partition's log from its oldest
message set, on every fetch, and keeps up to 5 MiB a partition, so at a few thousand requests a
second the broker's walks, not the system under test, set the latency once the logs have filled
(after about 8 s at 5,600/s). A real broker finds an offset through an index and keeps days.

Speaks what `auth-bench broker` speaks (the tests' mock broker, on the worker's own librdkafka):
the bootstrap address on the first line of standard output, then one answer a line read:

  create NAME PARTITIONS   a topic; answers `ok`
  keep SECONDS             from now on each partition keeps only what was produced in the last
                           SECONDS (checked four times a second; 0 keeps everything, the start);
                           answers `ok`. A reader further behind than that loses records, which
                           the benchmark counts as unanswered, so the window cannot hide a backlog.
  trimmed                  answers `trimmed N`: the records deleted so far

It ends when standard input closes.
"""

import ctypes
import glob
import os
import sys
import threading
import time
from collections import deque

import confluent_kafka


def load_library():
    folder = os.path.join(os.path.dirname(os.path.dirname(confluent_kafka.__file__)), "confluent_kafka.libs")
    found = sorted(glob.glob(os.path.join(folder, "librdkafka*.so*")))
    if not found:
        sys.exit(f"bench-broker: no librdkafka bundled with confluent-kafka in {folder} "
                 "(a wheel from PyPI bundles one; a build against the system's does not)")
    library = ctypes.CDLL(found[0])
    pointer, text, size = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    library.rd_kafka_version_str.restype = text
    library.rd_kafka_conf_new.restype = pointer
    library.rd_kafka_conf_set.argtypes = [pointer, text, text, text, size]
    library.rd_kafka_new.restype = pointer
    library.rd_kafka_new.argtypes = [ctypes.c_int, pointer, text, size]
    library.rd_kafka_handle_mock_cluster.restype = pointer
    library.rd_kafka_handle_mock_cluster.argtypes = [pointer]
    library.rd_kafka_mock_cluster_bootstraps.restype = text
    library.rd_kafka_mock_cluster_bootstraps.argtypes = [pointer]
    library.rd_kafka_mock_topic_create.argtypes = [pointer, text, ctypes.c_int, ctypes.c_int]
    library.rd_kafka_mock_partition_delete_records.argtypes = [pointer, text, ctypes.c_int32, ctypes.c_int64]
    library.rd_kafka_query_watermark_offsets.argtypes = [
        pointer, text, ctypes.c_int32, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64), ctypes.c_int]
    return library


class Broker:
    def __init__(self, library):
        self.library = library
        error = ctypes.create_string_buffer(512)
        conf = library.rd_kafka_conf_new()
        for name, value in ((b"test.mock.num.brokers", b"1"), (b"log_level", b"4")):
            if library.rd_kafka_conf_set(conf, name, value, error, len(error)) != 0:
                sys.exit(f"bench-broker: {error.value.decode()}")
        # The handle that hosts the cluster is a client of it too: it asks for the watermarks.
        self.client = library.rd_kafka_new(0, conf, error, len(error))
        if not self.client:
            sys.exit(f"bench-broker: {error.value.decode()}")
        self.cluster = library.rd_kafka_handle_mock_cluster(self.client)
        self.bootstraps = library.rd_kafka_mock_cluster_bootstraps(self.cluster).decode()
        self.lock = threading.Lock()
        self.partitions = {}  # topic -> partition count
        self.keep_seconds = 0.0
        self.trimmed = 0

    def create(self, name, partitions):
        error = self.library.rd_kafka_mock_topic_create(self.cluster, name.encode(), partitions, 1)
        if error == 0:
            with self.lock:
                self.partitions[name] = partitions
        return error

    def watermarks(self, topic, partition):
        low, high = ctypes.c_int64(), ctypes.c_int64()
        error = self.library.rd_kafka_query_watermark_offsets(
            self.client, topic.encode(), partition, ctypes.byref(low), ctypes.byref(high), 1000)
        return (low.value, high.value) if error == 0 else None

    def trim_forever(self):
        # Each partition's high watermarks as seen, oldest first; the newest at least keep_seconds
        # old is where the log may start.
        seen = {}
        while True:
            time.sleep(0.25)
            with self.lock:
                keep, topics = self.keep_seconds, list(self.partitions.items())
            if keep <= 0:
                seen.clear()
                continue
            for topic, count in topics:
                for partition in range(count):
                    marks = self.watermarks(topic, partition)
                    if marks is None:
                        continue
                    now = time.monotonic()
                    history = seen.setdefault((topic, partition), deque())
                    history.append((now, marks[1]))
                    while len(history) > 1 and now - history[1][0] >= keep:
                        history.popleft()
                    moment, start = history[0]
                    if now - moment >= keep and start > marks[0]:
                        deleted = self.library.rd_kafka_mock_partition_delete_records(
                            self.cluster, topic.encode(), partition, start)
                        if deleted == 0:
                            with self.lock:
                                self.trimmed += start - marks[0]


def main():
    broker = Broker(load_library())
    print(broker.bootstraps, flush=True)
    threading.Thread(target=broker.trim_forever, daemon=True).start()
    for line in sys.stdin:
        words = line.split()
        if len(words) == 3 and words[0] == "create" and words[2].isdigit() and int(words[2]) > 0:
            error = broker.create(words[1], int(words[2]))
            print("ok" if error == 0 else f"error: librdkafka error {error}", flush=True)
        elif len(words) == 2 and words[0] == "keep":
            try:
                seconds = float(words[1])
            except ValueError:
                seconds = -1
            if seconds < 0:
                print("error: expected `keep SECONDS`, 0 or more", flush=True)
                continue
            with broker.lock:
                broker.keep_seconds = seconds
            print("ok", flush=True)
        elif words == ["trimmed"]:
            with broker.lock:
                print(f"trimmed {broker.trimmed}", flush=True)
        else:
            print("error: expected `create NAME PARTITIONS`, `keep SECONDS` or `trimmed`", flush=True)


if __name__ == "__main__":
    main()
