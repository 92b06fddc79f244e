#!/usr/bin/env python3
"""Pass-through Kafka proxy for librdkafka < 2.2 talking to brokers that send KIP-482 tagged fields.

librdkafka 2.0.2 (Debian 12) skips the tagged fields at the end of an ApiVersions v3+ response one
byte short and fails the handshake with "Read underflow". This proxy forwards every byte unchanged,
except ApiVersions responses of version 3 and above, which it re-encodes with empty tagged-field
sections. It tracks the correlation ids of ApiVersions requests to know which response to rewrite.

A client sends ApiVersions first on each connection and waits for the answer. So each connection is
read frame by frame only until that answer has passed; after that each direction is a plain copy
loop (one read, one write a transfer) on a thread of its own, blocking in the kernel, with no frame
parsed in Python and no event loop in between.

Usage: kafka-compat-proxy.py LISTEN_HOST:PORT UPSTREAM_HOST:PORT
"""

import signal
import socket
import struct
import sys
import threading

API_VERSIONS = 18
# What one read takes: a large fetch response passes in a few reads.
COPY_BYTES = 1 << 18


def read_uvarint(buf, pos):
    shift = 0
    value = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def skip_tagged_fields(buf, pos):
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    return pos


def encode_uvarint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def rewrite_api_versions(body):
    """body starts after the correlation id (ApiVersions responses always use header v0)."""
    try:
        pos = 2  # error_code
        length_plus_one, pos = read_uvarint(body, pos)
        entries = []
        for _ in range(max(length_plus_one - 1, 0)):
            entries.append(body[pos:pos + 6])
            pos = skip_tagged_fields(body, pos + 6)
        throttle = body[pos:pos + 4]
        if len(throttle) != 4:
            return body
        out = bytearray(body[:2])
        out += encode_uvarint(length_plus_one)
        for entry in entries:
            out += entry + b"\x00"
        out += throttle + b"\x00"
        return bytes(out)
    except IndexError:
        return body


class Handshake:
    """What the two directions of one connection share until the ApiVersions answer has passed."""

    def __init__(self):
        self.lock = threading.Lock()
        self.pending = {}  # correlation id -> ApiVersions request version
        self.over = False  # the answer passed: no frame needs reading any more


def frames(buffer):
    """Takes the complete frames off the front of `buffer`, yielding each one's body."""
    while len(buffer) >= 4:
        (size,) = struct.unpack_from(">i", buffer)
        if size < 0 or len(buffer) < 4 + size:
            return
        body = bytes(buffer[4:4 + size])
        del buffer[:4 + size]
        yield body


def copy_all(source, target):
    """Moves bytes from `source` to `target` until `source` ends, one buffer at a time."""
    buffer = bytearray(COPY_BYTES)
    view = memoryview(buffer)
    while True:
        count = source.recv_into(buffer)
        if count == 0:
            return
        target.sendall(view[:count])


def pump_requests(client, upstream, handshake):
    """Client to broker: bytes go through unchanged; ApiVersions requests are noted until the
    handshake is over."""
    buffer = bytearray()
    while not handshake.over:
        data = client.recv(65536)
        if not data:
            return
        buffer += data
        for body in frames(buffer):
            if len(body) >= 8:
                api_key, api_version, correlation = struct.unpack_from(">hhi", body)
                if api_key == API_VERSIONS:
                    with handshake.lock:
                        handshake.pending[correlation] = api_version
        upstream.sendall(data)
    copy_all(client, upstream)


def pump_responses(upstream, client, handshake):
    """Broker to client: frame by frame until the first answer with no ApiVersions request left
    unanswered, rewriting ApiVersions v3+ answers; then copied."""
    buffer = bytearray()
    while True:
        data = upstream.recv(65536)
        if not data:
            return
        buffer += data
        out = bytearray()
        over = False
        for body in frames(buffer):
            if len(body) >= 4:
                (correlation,) = struct.unpack_from(">i", body)
                with handshake.lock:
                    version = handshake.pending.pop(correlation, None)
                    over = not handshake.pending
                if version is not None and version >= 3:
                    body = body[:4] + rewrite_api_versions(body[4:])
            out += struct.pack(">i", len(body)) + body
            if over:
                break
        if over:
            # Whatever followed the answer (part of the next frame) goes on as it came.
            out += buffer
            handshake.over = True
        client.sendall(out)
        if over:
            break
    copy_all(upstream, client)


def bridge(client, upstream_address):
    try:
        upstream = socket.create_connection(upstream_address)
    except OSError:
        client.close()
        return
    for side in (client, upstream):
        side.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    handshake = Handshake()

    def run(pump, source, target):
        try:
            pump(source, target, handshake)
        except OSError:
            pass
        finally:
            # One direction ending ends the connection: wake the other thread out of its wait.
            for side in (client, upstream):
                try:
                    side.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    requests = threading.Thread(target=run, args=(pump_requests, client, upstream), daemon=True)
    requests.start()
    run(pump_responses, upstream, client)
    requests.join()
    client.close()
    upstream.close()


def split_address(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        sys.exit(2)
    listen_address = split_address(sys.argv[1])
    upstream_address = split_address(sys.argv[2])
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(0))
    server = socket.create_server(listen_address, backlog=128)
    while True:
        client, _ = server.accept()
        threading.Thread(target=bridge, args=(client, upstream_address), daemon=True).start()


if __name__ == "__main__":
    main()
