#!/usr/bin/env python3
"""A broker's SASL authentication, in front of a broker without it, for the tests.

The local broker (Tansu from its wheel) keeps its users in a storage this build cannot start with
them, so the tests put this gate before it: it authenticates each connection as a Kafka broker
does (KIP-43 and KIP-152: SaslHandshake v1, then SaslAuthenticate v0 or v1), with PLAIN (RFC 4616)
and SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677, KIP-84), checking every proof against the
users it was given, and only then passes the connection's bytes through to the broker. TLS, when a
test wants it, ends in front of the gate (stunnel), as it would at a broker's listener.

As a broker does, before authentication it answers ApiVersions (the broker's, with the SASL
requests' versions the gate speaks), SaslHandshake and SaslAuthenticate, and closes a connection
that sends anything else, offers an unknown mechanism, or fails to authenticate (after the
failure's answer, error 58 with Kafka's message).

Usage: kafka-sasl-gate.py LISTEN_HOST:PORT UPSTREAM_HOST:PORT USERS_FILE MECHANISM[,MECHANISM...]

USERS_FILE holds `name:password` lines. Each connection's outcome is logged on standard error.
"""

import base64
import hashlib
import hmac
import os
import signal
import socket
import struct
import sys
import threading

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 33, 34, 58
ITERATIONS = 4096
COPY_BYTES = 1 << 18
HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}


def log(text):
    print(f"[sasl-gate] {text}", file=sys.stderr, flush=True)


class Users:
    """Each user's password for PLAIN, and for SCRAM what a broker keeps instead of it: a salt,
    the iteration count, StoredKey and ServerKey per hash (RFC 5802, section 3)."""

    def __init__(self, path):
        self.passwords = {}
        self.scram = {}
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                line = line.rstrip("\n")
                if not line or line.startswith("#"):
                    continue
                name, _, password = line.partition(":")
                self.passwords[name] = password.encode()
                for mechanism, digest in HASHES.items():
                    salt = os.urandom(16)
                    salted = hashlib.pbkdf2_hmac(digest().name, password.encode(), salt, ITERATIONS)
                    client_key = hmac.new(salted, b"Client Key", digest).digest()
                    self.scram[(mechanism, name)] = (salt, digest(client_key).digest(),
                                                     hmac.new(salted, b"Server Key", digest).digest())


class Refused(Exception):
    """The connection ends: a failure's answer (if any) has been sent."""


class Ended(Exception):
    """The client closed the connection before authenticating (librdkafka closes connections it
    no longer needs, as any client may)."""


def read_string(body, pos):
    (size,) = struct.unpack_from(">h", body, pos)
    pos += 2
    if size < 0:
        return None, pos
    return body[pos:pos + size].decode(), pos + size


def read_bytes(body, pos):
    (size,) = struct.unpack_from(">i", body, pos)
    pos += 4
    return body[pos:pos + size], pos + size


def string(text):
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def nullable_string(text):
    return struct.pack(">h", -1) if text is None else string(text)


def read_uvarint(buf, pos):
    shift = value = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def with_sasl_versions(body, version):
    """The broker's ApiVersions answer (after the correlation id) with SaslHandshake and
    SaslAuthenticate at the versions the gate speaks (both 0 to 1), patched in place."""
    out = bytearray(body)
    pos = 2
    if version >= 3:
        count, pos = read_uvarint(out, pos)
        count -= 1
    else:
        (count,) = struct.unpack_from(">i", out, pos)
        pos += 4
    for _ in range(max(count, 0)):
        (key,) = struct.unpack_from(">h", out, pos)
        if key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            struct.pack_into(">hh", out, pos + 2, 0, 1)
        pos += 6
        if version >= 3:
            tags, pos = read_uvarint(out, pos)
            for _ in range(tags):
                _tag, pos = read_uvarint(out, pos)
                size, pos = read_uvarint(out, pos)
                pos += size
    return bytes(out)


class Connection:
    def __init__(self, client, upstream_address, users, mechanisms):
        self.client = client
        self.upstream_address = upstream_address
        self.users = users
        self.mechanisms = mechanisms
        self.buffer = bytearray()
        self.upstream = None
        self.peer = "%s:%d" % client.getpeername()

    def frame(self):
        while True:
            if len(self.buffer) >= 4:
                (size,) = struct.unpack_from(">i", self.buffer)
                if size < 0 or size > 1 << 20:
                    raise Refused(f"a frame of {size} bytes before authentication")
                if len(self.buffer) >= 4 + size:
                    body = bytes(self.buffer[4:4 + size])
                    del self.buffer[:4 + size]
                    return body
            data = self.client.recv(65536)
            if not data:
                raise Ended()
            self.buffer += data

    def answer(self, correlation, body):
        self.client.sendall(struct.pack(">ii", len(body) + 4, correlation) + body)

    def upstream_frame(self):
        header = b""
        while len(header) < 4:
            more = self.upstream.recv(4 - len(header))
            if not more:
                raise Refused("the broker closed the connection")
            header += more
        (size,) = struct.unpack(">i", header)
        body = bytearray()
        while len(body) < size:
            more = self.upstream.recv(size - len(body))
            if not more:
                raise Refused("the broker closed the connection")
            body += more
        return bytes(body)

    def authenticate(self):
        """Frames until a successful SaslAuthenticate; returns the authenticated user."""
        mechanism = None
        scram = None
        while True:
            body = self.frame()
            api_key, version, correlation = struct.unpack_from(">hhi", body)
            _client_id, pos = read_string(body, 8)
            if api_key == API_VERSIONS:
                # The broker's own answer, asked on this connection's upstream.
                if self.upstream is None:
                    self.upstream = socket.create_connection(self.upstream_address)
                    self.upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.upstream.sendall(struct.pack(">i", len(body)) + body)
                answer = self.upstream_frame()
                (answered,) = struct.unpack_from(">i", answer)
                if answered != correlation:
                    raise Refused("the broker answered another request")
                (error,) = struct.unpack_from(">h", answer, 4)
                rest = answer[4:] if error else with_sasl_versions(answer[4:], version)
                self.answer(correlation, rest)
            elif api_key == SASL_HANDSHAKE:
                if version != 1:
                    # Version 0 sends the tokens without Kafka's framing: not spoken here.
                    self.answer(correlation, struct.pack(">h", UNSUPPORTED_SASL_MECHANISM) + self.offered())
                    raise Refused(f"SaslHandshake v{version}")
                requested, _ = read_string(body, pos)
                if requested not in self.mechanisms:
                    self.answer(correlation, struct.pack(">h", UNSUPPORTED_SASL_MECHANISM) + self.offered())
                    raise Refused(f"mechanism {requested!r} not enabled")
                mechanism = requested
                self.answer(correlation, struct.pack(">h", 0) + self.offered())
            elif api_key == SASL_AUTHENTICATE and mechanism is not None and version in (0, 1):
                token, _ = read_bytes(body, pos)
                if mechanism == "PLAIN":
                    user = self.plain(token)
                    if user is None:
                        self.fail(correlation, version, mechanism)
                    self.succeed(correlation, version, b"")
                    return mechanism, user
                if scram is None:
                    scram = self.scram_first(mechanism, token)
                    if scram is None:
                        self.fail(correlation, version, mechanism)
                    self.succeed(correlation, version, scram["server_first"].encode())
                else:
                    final = self.scram_final(mechanism, scram, token)
                    if final is None:
                        self.fail(correlation, version, mechanism)
                    self.succeed(correlation, version, final.encode())
                    return mechanism, scram["user"]
            else:
                raise Refused(f"request {api_key} v{version} before authentication")

    def offered(self):
        return struct.pack(">i", len(self.mechanisms)) + b"".join(string(m) for m in self.mechanisms)

    def succeed(self, correlation, version, token):
        body = struct.pack(">h", 0) + nullable_string(None) + struct.pack(">i", len(token)) + token
        if version >= 1:
            body += struct.pack(">q", 0)
        self.answer(correlation, body)

    def fail(self, correlation, version, mechanism):
        message = f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
        body = struct.pack(">h", SASL_AUTHENTICATION_FAILED) + nullable_string(message) + struct.pack(">i", 0)
        if version >= 1:
            body += struct.pack(">q", 0)
        self.answer(correlation, body)
        raise Refused(f"{mechanism}: invalid credentials")

    def plain(self, token):
        parts = token.split(b"\0")
        if len(parts) != 3:
            return None
        _authzid, name, password = parts
        expected = self.users.passwords.get(name.decode(errors="replace"))
        # Compared in constant time; an unknown user compares against a password of its own.
        if expected is None:
            hmac.compare_digest(password, os.urandom(32))
            return None
        if not hmac.compare_digest(password, expected):
            return None
        return name.decode()

    def scram_first(self, mechanism, token):
        text = token.decode(errors="replace")
        # gs2-header: no channel binding ("n"), optionally an authzid; then the bare message.
        if not text.startswith("n,"):
            return None
        comma = text.find(",", 2)
        if comma < 0:
            return None
        gs2_header, bare = text[:comma + 1], text[comma + 1:]
        fields = dict(part.split("=", 1) for part in bare.split(",") if "=" in part)
        name = fields.get("n", "").replace("=2C", ",").replace("=3D", "=")
        client_nonce = fields.get("r")
        credentials = self.users.scram.get((mechanism, name))
        if not client_nonce or credentials is None:
            return None
        salt, _stored, _server = credentials
        nonce = client_nonce + base64.b64encode(os.urandom(18)).decode()
        server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={ITERATIONS}"
        return {"user": name, "gs2": gs2_header, "bare": bare, "nonce": nonce, "server_first": server_first}

    def scram_final(self, mechanism, state, token):
        text = token.decode(errors="replace")
        without_proof, _, proof_text = text.rpartition(",p=")
        fields = dict(part.split("=", 1) for part in without_proof.split(",") if "=" in part)
        # Kafka's broker checks that the nonce ends with the server's (librdkafka sends its own
        # nonce before the server's, which already begins with it), and so does the gate.
        if not fields.get("r", "").endswith(state["nonce"]):
            return None
        if fields.get("c") != base64.b64encode(state["gs2"].encode()).decode():
            return None
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except ValueError:
            return None
        digest = HASHES[mechanism]
        _salt, stored_key, server_key = self.users.scram[(mechanism, state["user"])]
        auth_message = f"{state['bare']},{state['server_first']},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, digest).digest()
        if len(proof) != len(signature):
            return None
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(digest(client_key).digest(), stored_key):
            return None
        server_signature = hmac.new(server_key, auth_message, digest).digest()
        return "v=" + base64.b64encode(server_signature).decode()

    def run(self):
        try:
            mechanism, user = self.authenticate()
        except Ended:
            log(f"{self.peer}: closed by the client before authenticating")
            for side in (self.client, self.upstream):
                if side is not None:
                    side.close()
            return
        except (Refused, OSError, struct.error, UnicodeDecodeError, ValueError) as reason:
            log(f"{self.peer}: refused: {reason}")
            for side in (self.client, self.upstream):
                if side is not None:
                    side.close()
            return
        log(f"{self.peer}: authenticated {user} with {mechanism}")
        if self.upstream is None:
            self.upstream = socket.create_connection(self.upstream_address)
        if self.buffer:
            self.upstream.sendall(self.buffer)
        for side in (self.client, self.upstream):
            side.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        other = threading.Thread(target=self.copy, args=(self.upstream, self.client), daemon=True)
        other.start()
        self.copy(self.client, self.upstream)
        other.join()
        self.client.close()
        self.upstream.close()

    def copy(self, source, target):
        buffer = bytearray(COPY_BYTES)
        view = memoryview(buffer)
        try:
            while True:
                count = source.recv_into(buffer)
                if count == 0:
                    break
                target.sendall(view[:count])
        except OSError:
            pass
        for side in (self.client, self.upstream):
            try:
                side.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def split_address(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


def main():
    if len(sys.argv) != 5:
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        sys.exit(2)
    listen_address = split_address(sys.argv[1])
    upstream_address = split_address(sys.argv[2])
    users = Users(sys.argv[3])
    mechanisms = [m for m in sys.argv[4].split(",") if m]
    unknown = [m for m in mechanisms if m != "PLAIN" and m not in HASHES]
    if unknown:
        print(f"unknown mechanisms: {unknown}", file=sys.stderr)
        sys.exit(2)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(0))
    server = socket.create_server(listen_address, backlog=128)
    while True:
        client, _ = server.accept()
        connection = Connection(client, upstream_address, users, mechanisms)
        threading.Thread(target=connection.run, daemon=True).start()


if __name__ == "__main__":
    main()
