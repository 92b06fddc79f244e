#!/usr/bin/env python3
"""Pass-through Kafka proxy for librdkafka < 2.2 talking to brokers that send KIP-482 tagged fields.

librdkafka 2.0.2 (Debian 12) skips the tagged fields at the end of an ApiVersions v3+ response one
byte short and fails the handshake with "Read underflow". This proxy forwards every frame unchanged,
except ApiVersions responses of version 3 and above, which it re-encodes with empty tagged-field
sections. It tracks request correlation ids to know which response answers which request.

Usage: kafka-compat-proxy.py LISTEN_HOST:PORT UPSTREAM_HOST:PORT
"""

import asyncio
import signal
import struct
import sys

API_VERSIONS = 18


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
        out += bytes([length_plus_one]) if length_plus_one < 0x80 else encode_uvarint(length_plus_one)
        for entry in entries:
            out += entry + b"\x00"
        out += throttle + b"\x00"
        return bytes(out)
    except IndexError:
        return body


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


async def read_frame(reader):
    header = await reader.readexactly(4)
    (size,) = struct.unpack(">i", header)
    return await reader.readexactly(size)


async def pump_requests(reader, writer, pending):
    while True:
        frame = await read_frame(reader)
        if len(frame) >= 8:
            api_key, api_version, correlation = struct.unpack(">hhi", frame[:8])
            pending[correlation] = (api_key, api_version)
        writer.write(struct.pack(">i", len(frame)) + frame)
        await writer.drain()


async def pump_responses(reader, writer, pending):
    while True:
        frame = await read_frame(reader)
        if len(frame) >= 4:
            (correlation,) = struct.unpack(">i", frame[:4])
            api_key, api_version = pending.pop(correlation, (None, None))
            if api_key == API_VERSIONS and api_version >= 3:
                frame = frame[:4] + rewrite_api_versions(frame[4:])
        writer.write(struct.pack(">i", len(frame)) + frame)
        await writer.drain()


async def handle(client_reader, client_writer, upstream_host, upstream_port):
    try:
        up_reader, up_writer = await asyncio.open_connection(upstream_host, upstream_port)
    except OSError:
        client_writer.close()
        return
    pending = {}
    tasks = [
        asyncio.ensure_future(pump_requests(client_reader, up_writer, pending)),
        asyncio.ensure_future(pump_responses(up_reader, client_writer, pending)),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for w in (client_writer, up_writer):
            try:
                w.close()
            except Exception:
                pass


def split_address(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


async def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        sys.exit(2)
    listen_host, listen_port = split_address(sys.argv[1])
    upstream_host, upstream_port = split_address(sys.argv[2])
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, upstream_host, upstream_port), listen_host, listen_port
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
