#!/usr/bin/env python3
"""End-to-end benchmark of the auth worker through the broker and PostgreSQL.

Run by `scripts/bench e2e` (which sets up the local services and builds the release worker).
Every number comes from record create times: a request's is when the gateway produced it,
a result's when the worker produced it, both on this machine's clock.

Phases, each on a database and topics of its own:
  guest       N guest logins preloaded on the topic, then the worker started: logins/s (run
              --repeats times; the median run is reported, with the spread)
  apple       N Sign in with Apple logins (RS256 tokens from a local key server): logins/s (as guest)
  latency     guest logins paced at half the measured guest rate: p50, p99, and the worker's own
              time by phase (auth_request_phase_seconds); then the same pacing answered by an echo
              client that does no work (the broker's floor), and a curve of both at a few fixed rates
  linger      the curve's rates from 300/s again, each request allowed to wait --linger-ms (20) for
              others to join its transaction (AUTH_BATCH_LINGER_MS): the light-load trade on offer
  batch       guest throughput with AUTH_BATCH_MAX of 1, 10, 100, 500
  idle        the worker's CPU while nothing arrives, at its default fetch wait (as on Apache Kafka)
              and at the bench's 5 ms (the bench brokers hold every fetch for the whole wait)
  limits      pgbench writing the rows of 100 guest logins per transaction (user, session, refresh
              token, kept result, rate-limit count, outbox event, and deleting published events):
              the ceiling; at each paced rate of the curve, pgbench running one login's statements
              per transaction in the worker's two round trips (PostgreSQL's floor per login at
              that rate: its CPU, and each transaction's latency from its start, p50 and p99); and
              `openssl speed` for the signature primitives
The broker (default) is librdkafka's mock cluster in a process of its own (scripts/bench-broker.py),
fresh for each phase, keeping each partition's last few seconds while a paced phase runs (its
lookup of a fetch's start walks the partition's log). With --fresh-broker (Tansu), each phase
starts on an emptied broker (an in-memory broker slows as it fills).
Each phase also reports the CPU the hypervisor stole from this machine while it ran: on a shared
host that varies from run to run, and explains most of the spread between runs.
Then a table (stdout, and results.json) and a chart (e2e.png) in the output folder.
"""

import argparse
import base64
import datetime
import glob
import http.server
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid

from confluent_kafka import Consumer, Producer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The worker's fetch wait on the bench brokers, which hold a fetch for the whole wait; the echo
# floor's consumer uses the same.
BENCH_FETCH_WAIT_MS = "5"
# What the default bench broker keeps of each partition during a paced phase, in seconds: its
# lookup of a fetch's start walks the log, and a reader this far behind has failed the phase anyway.
BENCH_KEEP_SECONDS = 2


def log(message):
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# MARK: - Local services

class Services:
    def __init__(self, args):
        self.broker = args.broker
        self.partitions = args.partitions
        self.brokers = args.brokers
        self.broker_admin = args.broker_admin
        self.pg_server = args.database_server
        self.worker = args.worker
        # --worker-env: settings every worker of the run gets (a phase's own come after them).
        self.worker_env = dict(entry.split("=", 1) for entry in args.worker_env)
        self.bench = args.bench
        self.fresh_broker = args.fresh_broker
        self.tansu = os.path.join(ROOT, ".local", "tansu", "tansu")
        self.scratch = tempfile.mkdtemp(prefix="auth-bench-")
        # The database each phase's is copied from (--accounts), or None for an empty one.
        self.template = None
        # With a template: how many accounts it holds, for the phases that use them.
        self.accounts = 0
        self.mock = None
        if self.broker in ("mock", "mock-linked"):
            self.start_mock()

    def start_mock(self):
        """librdkafka's mock cluster in a process of its own: no proxy, and a fraction of Tansu's
        CPU. `mock`: scripts/bench-broker.py, on the librdkafka the confluent-kafka wheel bundles,
        which trims each partition to its last few seconds during a paced phase (`keep_recent`);
        `mock-linked`: `auth-bench broker`, on the worker's own librdkafka, which cannot."""
        if self.mock is not None:
            self.mock.stdin.close()
            self.mock.wait(10)
        command = ([sys.executable, os.path.join(ROOT, "scripts", "bench-broker.py")] if self.broker == "mock"
                   else [self.bench, "broker"])
        self.mock = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.brokers = self.mock.stdout.readline().strip()
        if not self.brokers:
            raise RuntimeError(f"{' '.join(command)} did not start")

    def ask_mock(self, line):
        """Sends `line` to the mock broker's process and returns its answer."""
        self.mock.stdin.write(line + "\n")
        return self.mock.stdout.readline().strip()

    def keep_recent(self, seconds):
        """From now on the broker keeps only each partition's last `seconds` of records (`mock`
        only; a no-op elsewhere): its lookup of a fetch's start walks the partition's log, so a
        full log makes the broker, not the worker, set the latency. A reader further behind loses
        records, which the phase counts as unanswered."""
        if self.broker == "mock":
            answer = self.ask_mock(f"keep {seconds}")
            if answer != "ok":
                raise RuntimeError(f"bench-broker.py: keep {seconds}: {answer}")

    def trimmed_records(self):
        """Records the broker has deleted from its logs so far (None where it does not trim)."""
        if self.broker != "mock":
            return None
        answer = self.ask_mock("trimmed").split()
        return int(answer[1]) if len(answer) == 2 and answer[0] == "trimmed" else None

    def broker_cpu_seconds(self):
        """The mock broker's CPU so far (None on Tansu, which is not this script's process)."""
        return process_cpu_seconds(self.mock.pid) if self.mock is not None else None

    def close(self):
        if self.mock is not None:
            self.mock.stdin.close()
            self.mock.wait(10)
            self.mock = None

    def fresh(self):
        """Starts a phase on an empty broker (an in-memory broker slows as it fills) and with no
        checkpoint of the previous phase's writes pending in PostgreSQL."""
        if self.mock is not None:
            self.start_mock()
        elif self.fresh_broker:
            subprocess.run(self.fresh_broker, shell=True, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        self.psql("postgres", "CHECKPOINT")

    def drop(self, url):
        name = url.rsplit("/", 1)[1]
        self.psql("postgres", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def psql(self, database, sql):
        subprocess.run(
            ["psql", f"{self.pg_server}/{database}", "-v", "ON_ERROR_STOP=1", "-qAtc", sql],
            check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PGOPTIONS": "-c client_min_messages=warning"})

    def value(self, database, sql):
        """The single value `sql` returns."""
        return subprocess.run(
            ["psql", f"{self.pg_server}/{database}", "-qAtc", sql], check=True, capture_output=True,
            text=True).stdout.strip()

    def autovacuum_runs(self, database):
        """How many times autovacuum has vacuumed or analyzed a table of `database` so far. A
        phase's database starts empty, so autovacuum's first visit (once every
        `autovacuum_naptime`) finds every table over its thresholds at once: about 2 s of vacuuming
        and analyzing seven tables, which sets a paced phase's p99 when it falls inside it."""
        return int(self.value(database, "SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0) "
                                        "FROM pg_stat_user_tables"))

    def wal_lsn_bytes(self):
        """How many bytes of WAL PostgreSQL has written so far."""
        return int(self.value("postgres", "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"))

    @staticmethod
    def machine_cpu_seconds():
        """(busy, all, stolen) CPU seconds of the whole machine so far, every core, from /proc/stat.

        Stolen is time the hypervisor gave this machine's cores to another guest: on a shared host
        it comes and goes, and a phase that lost a fifth of its CPU to it runs a fifth slower."""
        with open("/proc/stat") as stat:
            fields = [int(field) for field in stat.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
        ticks = os.sysconf("SC_CLK_TCK")
        steal = fields[7] if len(fields) > 7 else 0
        return (sum(fields) - fields[3] - fields[4] - steal) / ticks, sum(fields) / ticks, steal / ticks

    @staticmethod
    def postgres_cpu_seconds():
        """User and system CPU time of every PostgreSQL process now running, and of those that
        ended (a backend whose client disconnected, an autovacuum worker): the postmaster counts
        its children's time once it has reaped them. From /proc."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    text = stat.read()
            except OSError:
                continue
            name = text[text.index("(") + 1:text.rindex(")")]
            if name != "postgres" and not name.startswith("postgres"):
                continue
            fields = text[text.rindex(")") + 2:].split()
            # utime, stime, and the reaped children's cutime, cstime.
            total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        return total / ticks

    def database(self, name):
        self.psql("postgres", f"DROP DATABASE IF EXISTS {name}")
        # With --accounts, each phase starts from a copy of the preloaded accounts.
        # A file copy: the default (`WAL_LOG`) writes a copy of 11 GiB to the WAL as well.
        template = f" TEMPLATE {self.template} STRATEGY FILE_COPY" if self.template else ""
        self.psql("postgres", f"CREATE DATABASE {name}{template}")
        url = f"{self.pg_server}/{name}"
        subprocess.run([self.worker, "migrate"], env={**os.environ, "AUTH_DATABASE_URL": url}, check=True,
                       stdout=subprocess.DEVNULL)
        return url

    def topics(self, suffix, partitions=None):
        partitions = partitions or self.partitions
        names = {kind: f"bench.{kind}.{suffix}" for kind in ("requests", "results", "events", "notifications", "dlq")}
        for name in names.values():
            if self.mock is not None:
                answer = self.ask_mock(f"create {name} {partitions}")
                if answer != "ok":
                    raise RuntimeError(f"creating {name}: {answer}")
                continue
            subprocess.run([self.tansu, "topic", "create", "--broker", f"tcp://{self.broker_admin}",
                            "--partitions", str(partitions), name], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        return names


class KeyServer:
    """Serves an RSA key set as Apple would, and signs Apple ID tokens with its private half."""

    def __init__(self):
        from cryptography.hazmat.primitives.asymmetric import rsa
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        numbers = self.key.public_key().public_numbers()

        def b64(value):
            raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
            return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

        body = json.dumps({"keys": [{"kty": "RSA", "kid": "bench", "use": "sig", "alg": "RS256",
                                     "n": b64(numbers.n), "e": b64(numbers.e)}]}).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Cache-Control", "max-age=3600")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/keys"

    def token(self, subject, nonce_hash, now):
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        def part(obj):
            return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).rstrip(b"=").decode()

        claims = {"iss": "https://appleid.apple.com", "aud": "com.example.bench", "sub": subject,
                  "iat": now, "exp": now + 3600, "nonce": nonce_hash, "email": f"{subject}@privaterelay.appleid.com",
                  "email_verified": "true", "is_private_email": "true"}
        signing_input = part({"alg": "RS256", "kid": "bench"}) + "." + part(claims)
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return signing_input + "." + base64.urlsafe_b64encode(signature).rstrip(b"=").decode()


# MARK: - The worker

class Worker:
    def __init__(self, services, database_url, topics, key_server, extra=None, health_port=None):
        self.services = services
        self.health_port = health_port
        keys = os.path.join(services.scratch, "signing.pem")
        if not os.path.exists(keys):
            subprocess.run([services.worker, "keys", "generate", keys], check=True, stdout=subprocess.DEVNULL)
        results_key = os.path.join(services.scratch, "results.key")
        if not os.path.exists(results_key):
            with open(results_key, "w") as handle:
                handle.write(os.urandom(32).hex())
        self.env = {
            **os.environ,
            "AUTH_KAFKA_BROKERS": services.brokers, "AUTH_DATABASE_URL": database_url,
            "AUTH_KAFKA_GROUP": f"bench-{uuid.uuid4().hex[:8]}",
            "AUTH_TOPIC_REQUESTS": topics["requests"], "AUTH_TOPIC_RESULTS": topics["results"],
            "AUTH_TOPIC_EVENTS": topics["events"], "AUTH_TOPIC_NOTIFICATIONS": topics["notifications"],
            "AUTH_TOPIC_DLQ": topics["dlq"], "AUTH_SIGNING_KEYS": keys, "AUTH_RESULTS_KEY_FILE": results_key,
            "AUTH_APPLE_AUDIENCES": "com.example.bench", "AUTH_APPLE_KEYS_URL": key_server.url,
            "AUTH_HEALTH_PORT": str(health_port) if health_port else "off",
            "AUTH_KAFKA_SESSION_TIMEOUT_MS": "6000",
            # Both bench brokers (the mock cluster, Tansu) hold a fetch for the whole wait, unlike
            # Apache Kafka, which answers it when data arrives: a short wait, as the echo uses.
            "AUTH_KAFKA_FETCH_WAIT_MS": BENCH_FETCH_WAIT_MS,
            # Thousands of guests a second are the point here, not an attack to stop.
            "AUTH_GUEST_GLOBAL_RATE_LIMIT": "0/60",
            **services.worker_env,
            **(extra or {}),
        }
        # A value of None takes the worker's default.
        self.env = {key: value for key, value in self.env.items() if value is not None}
        self.log = open(os.path.join(services.scratch, f"worker-{uuid.uuid4().hex[:6]}.log"), "w")
        self.process = subprocess.Popen([services.worker, "run"], env=self.env, stdout=self.log,
                                        stderr=subprocess.STDOUT)

    def memory(self):
        """(peak RSS, current RSS) in MiB, from /proc."""
        values = {}
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                key, _, rest = line.partition(":")
                if key in ("VmHWM", "VmRSS"):
                    values[key] = int(rest.split()[0]) / 1024
        return values.get("VmHWM", 0), values.get("VmRSS", 0)

    def cpu_seconds(self):
        """User and system CPU time the worker has used so far, from /proc."""
        return process_cpu_seconds(self.process.pid)

    def duration_buckets(self, method="guest"):
        """The worker's own `auth_request_duration_seconds` for `method`, every outcome summed:
        {upper bound in seconds: cumulative count}; and its `auth_request_phase_seconds`, every
        method's: {phase: {"sum": seconds, "count": n, "buckets": {bound: cumulative count}}}; from
        a scrape of /metrics."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/metrics", timeout=10) as response:
            text = response.read().decode()
        buckets, phases = {}, {}
        for line in text.splitlines():
            labels, _, value = line.rpartition(" ")
            if line.startswith("auth_request_phase_seconds_"):
                phase = labels.split('phase="', 1)[1].split('"', 1)[0]
                entry = phases.setdefault(phase, {"sum": 0.0, "count": 0.0, "buckets": {}})
                if line.startswith("auth_request_phase_seconds_bucket{"):
                    bound = labels.split('le="', 1)[1].split('"', 1)[0]
                    entry["buckets"][float("inf") if bound == "+Inf" else float(bound)] = float(value)
                elif line.startswith("auth_request_phase_seconds_sum{"):
                    entry["sum"] = float(value)
                elif line.startswith("auth_request_phase_seconds_count{"):
                    entry["count"] = float(value)
                continue
            if not line.startswith("auth_request_duration_seconds_bucket{") or f'method="{method}"' not in line:
                continue
            bound = labels.split('le="', 1)[1].split('"', 1)[0]
            key = float("inf") if bound == "+Inf" else float(bound)
            buckets[key] = buckets.get(key, 0) + float(value)
        return {"duration": buckets, "phases": phases}

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


# MARK: - Gateway side

def request(request_id, data):
    return json.dumps({"specversion": "1.0", "id": request_id, "source": "/gateway/bench",
                       "type": "auth.login.request", "data": data}, separators=(",", ":")).encode()


def producer(services, linger_ms=5):
    return Producer({"bootstrap.servers": services.brokers, "linger.ms": linger_ms, "enable.idempotence": True,
                     "socket.nagle.disable": True})


def now_ms():
    return int(time.time() * 1000)


def preload(services, topic, values):
    """Produces (key, value) pairs; returns their create times by key.

    A request's time is the producer's create time (the `timestamp` it is produced with, which is
    also the record's CreateTime): librdkafka's mock cluster answers delivery reports without a
    broker timestamp, so the same clock serves both brokers."""
    stamps = {}

    def delivered(error, message):
        if error is not None:
            raise RuntimeError(f"produce failed: {error}")

    out = producer(services)
    for index, (key, value) in enumerate(values):
        while True:
            try:
                stamp = now_ms()
                out.produce(topic, key=key, value=value, timestamp=stamp, on_delivery=delivered)
                stamps[key.decode() if isinstance(key, bytes) else key] = stamp
                break
            except BufferError:
                out.poll(0.05)
        if index % 1000 == 0:
            out.poll(0)
    out.flush(60)
    return stamps


class ResultReader:
    """Reads the results topic in the background, keeping each result's record timestamp (the
    producer's create time) by key."""

    def __init__(self, services, topic, keep_values=False):
        # Latencies come from record timestamps, not from when this reader sees a result: it can
        # wait long on fetches and leave the broker's CPU to the system under test.
        self.consumer = Consumer({"bootstrap.servers": services.brokers, "group.id": f"reader-{uuid.uuid4().hex}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 200, "session.timeout.ms": 6000})
        self.consumer.subscribe([topic])
        self.stamps = {}
        self.statuses = {}
        # With keep_values, each first result's value by key (the refresh phases read the guests'
        # refresh tokens from them).
        self.values = {} if keep_values else None
        self.duplicates = 0
        self.lock = threading.Lock()
        self.running = True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while self.running:
            for message in self.consumer.consume(num_messages=1000, timeout=0.1):
                if message.error():
                    continue
                key = message.key().decode()
                value = message.value()
                # JSON escapes a quote inside a string, so these bytes can only be the status member.
                status = "ok" if b'"status":"ok"' in value else json.loads(value)["data"]["status"]
                with self.lock:
                    if key not in self.stamps:
                        self.stamps[key] = message.timestamp()[1]
                        self.statuses[key] = status
                        if self.values is not None:
                            self.values[key] = value
                    else:
                        self.duplicates += 1

    def wait_for(self, keys, timeout, responder=None):
        """Whether every key was answered within `timeout`; False at once when `responder` (the
        worker or the echo) exited meanwhile, so a worker that refused its configuration fails the
        phase instead of leaving the bench waiting."""
        deadline = time.time() + timeout
        wanted = set(keys)
        while time.time() < deadline:
            with self.lock:
                if wanted.issubset(self.stamps.keys()):
                    return True
            if responder is not None and responder.process.poll() is not None:
                log(f"the responder exited with status {responder.process.returncode}")
                return False
            time.sleep(0.1)
        return False

    def close(self):
        self.running = False
        self.thread.join()
        self.consumer.close()


def throughput(stamps, keys):
    """Logins per second, from the first result's broker timestamp to the last's."""
    times = sorted(stamps[key] for key in keys)
    span = (times[-1] - times[0]) / 1000
    return (len(times) - 1) / span if span > 0 else float("inf")


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


# MARK: - Phases

GUEST_DATA = {"method": "guest", "device": {"name": "bench", "platform": "ios"}}


def guest_refresh_tokens(services, reader, topic, count, responder):
    """`count` guest sign-ups, produced to `topic` and answered by `responder` (a running worker):
    their refresh tokens, read from the results (`reader` keeps values). Each refresh phase then
    rotates each guest's token once, as an app does when its access token has expired."""
    keys = [str(uuid.uuid4()) for _ in range(count)]
    preload(services, topic, [(key.encode(), request(key, GUEST_DATA)) for key in keys])
    if not reader.wait_for(keys, timeout=max(120, count / 50), responder=responder):
        raise RuntimeError(f"refresh: only {sum(key in reader.stamps for key in keys)} of {count} guests signed up")
    tokens = []
    for key in keys:
        data = json.loads(reader.values[key])["data"]
        if data.get("status") != "ok":
            raise RuntimeError(f"refresh: a guest's sign-up was answered {data.get('status')}")
        tokens.append(data["session"]["refresh_token"])
    return tokens


# The SMS service's key pair for the phone phase; its limits off, as the guests' global one is:
# thousands of texts a second to one country and one block are the point here.
SMS_KEY = None
PHONE_LIMITS_OFF = {"AUTH_SMS_NUMBER_RATE_LIMIT": "0/60", "AUTH_SMS_PREFIX_RATE_LIMIT": "0/60",
                    "AUTH_SMS_COUNTRY_RATE_LIMIT": "0/60", "AUTH_SMS_CLIENT_RATE_LIMIT": "0/60",
                    "AUTH_SMS_IP_RATE_LIMIT": "0/60", "AUTH_SMS_DAILY_BUDGET": "0", "AUTH_PHONE_CODE_SIGNUP": "true"}


def sms_environment():
    """The worker's phone settings: the SMS service's public key, sign-up on, the limits off."""
    global SMS_KEY
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    if SMS_KEY is None:
        SMS_KEY = X25519PrivateKey.generate()
    public = SMS_KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return {**PHONE_LIMITS_OFF, "AUTH_SMS_KEY": base64.urlsafe_b64encode(public).rstrip(b"=").decode()}


def open_sealed_code(sealed):
    """What the SMS service does with `sealed_secret`: a compact JWE, ECDH-ES on X25519 with the
    Concat KDF of RFC 7518 4.6.2 (one round: A256GCM's 256 bits), then AES-256-GCM."""
    import hashlib
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    def b64(text):
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

    protected, _, iv, ciphertext, tag = sealed.split(".")
    header = json.loads(b64(protected))
    shared = SMS_KEY.exchange(X25519PublicKey.from_public_bytes(b64(header["epk"]["x"])))

    def field(value):
        return len(value).to_bytes(4, "big") + value

    other = (field(header["enc"].encode()) + field(b64(header.get("apu", ""))) + field(b64(header.get("apv", "")))
             + (256).to_bytes(4, "big"))
    key = hashlib.sha256(b"\x00\x00\x00\x01" + shared + other).digest()
    plain = AESGCM(key).decrypt(b64(iv), b64(ciphertext) + b64(tag), protected.encode())
    return json.loads(plain)["code"]


def phone_codes(services, topics, numbers, responder):
    """`phone_code_request` for each number, answered by `responder` (a running worker), and the
    codes read from the events topic and opened as the SMS service would: {number: code}."""
    keys = [str(uuid.uuid4()) for _ in numbers]
    reader = ResultReader(services, topics["results"])
    preload(services, topics["requests"], [
        (key.encode(), request(key, {"method": "phone_code_request", "phone": number}))
        for key, number in zip(keys, numbers)])
    try:
        if not reader.wait_for(keys, timeout=max(120, len(numbers) / 50), responder=responder):
            raise RuntimeError(f"phone: only {len(reader.stamps)} of {len(numbers)} code requests answered")
    finally:
        reader.close()
    events = Consumer({"bootstrap.servers": services.brokers, "group.id": f"sms-{uuid.uuid4().hex}",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    events.subscribe([topics["events"]])
    codes, deadline = {}, time.time() + max(120, len(numbers) / 50)
    try:
        while len(codes) < len(numbers) and time.time() < deadline:
            for message in events.consume(num_messages=1000, timeout=0.2):
                if message.error() or b"auth.phone.code_requested" not in message.value():
                    continue
                data = json.loads(message.value())["data"]
                codes[data["phone"]] = open_sealed_code(data["sealed_secret"])
    finally:
        events.close()
    if len(codes) < len(numbers):
        raise RuntimeError(f"phone: only {len(codes)} of {len(numbers)} codes reached the events topic")
    return codes


def run_throughput(services, key_server, kind, count, extra=None, label=None):
    services.fresh()
    suffix = f"{kind.replace('-', '_')}{uuid.uuid4().hex[:6]}"
    database = services.database(f"auth_bench_{suffix}")
    topics = services.topics(suffix)
    tokens = None
    if kind == "phone":
        extra = {**(extra or {}), **sms_environment()}
        # The codes are asked for first, answered by a worker of their own; the sign-ups with them
        # are then preloaded on a requests topic of their own, so the measured worker reads only them.
        log(f"{label or kind}: {count} codes asked for first")
        numbers = [f"+1{415 + index // 10_000_000}{index % 10_000_000:07d}" for index in range(count)]
        first = Worker(services, database, topics, key_server, extra)
        try:
            codes = phone_codes(services, topics, numbers, first)
        finally:
            first.stop()
        topics = {**topics, "requests": services.topics(f"{suffix}p")["requests"]}
    if kind == "refresh" and services.accounts:
        # The preloaded accounts' sessions: each of `count` live ones, spread over the whole
        # table, has its current token rotated once.
        tokens = [preloaded_refresh_token(index) for index in preloaded_sample(services.accounts, count, live_session)]
    elif kind == "refresh":
        # The guests sign up first, answered by a worker of their own; the refreshes are then
        # preloaded on a requests topic of their own, so the measured worker reads only them.
        log(f"{label or kind}: {count} guests sign up first")
        signups = ResultReader(services, topics["results"], keep_values=True)
        first = Worker(services, database, topics, key_server, extra)
        try:
            tokens = guest_refresh_tokens(services, signups, topics["requests"], count, first)
        finally:
            first.stop()
            signups.close()
        topics = {**topics, "requests": services.topics(f"{suffix}r")["requests"]}
    log(f"{label or kind}: preloading {count} requests")
    now = int(time.time())
    values = []
    # With preloaded accounts, Apple sign-ins are returning users' (their `sub`s exist).
    returning = (preloaded_sample(services.accounts, count, apple_account)
                 if services.accounts and kind.startswith("apple") else None)
    for index in range(count):
        request_id = str(uuid.uuid4())
        if kind == "guest":
            data = GUEST_DATA
        elif kind == "refresh":
            data = {"method": "refresh", "refresh_token": tokens[index]}
        elif kind == "phone":
            data = {"method": "phone_code", "phone": numbers[index], "code": codes[numbers[index]]}
        else:
            import hashlib
            nonce = uuid.uuid4().hex
            subject = preloaded_apple_subject(returning[index]) if returning else f"bench.{suffix}.{index}"
            token = key_server.token(subject, hashlib.sha256(nonce.encode()).hexdigest(), now)
            data = {"method": "apple", "identity_token": token, "nonce": nonce}
            # A first Sign in with Apple often carries no name (Apple sends it once, and only if
            # the user shares it): `apple-nameless` measures that case, handles chosen without one.
            if kind == "apple" and not returning:
                data["profile"] = {"given_name": "Bench", "family_name": f"User{index}"}
        values.append((request_id.encode(), request(request_id, data)))
    preload(services, topics["requests"], values)
    keys = [key.decode() for key, _ in values]
    reader = ResultReader(services, topics["results"])
    # PostgreSQL's share, per login: CPU of its processes (backends exit with the worker's
    # connections, so it is read while they still run) and WAL written.
    wal_before, pg_cpu_before = services.wal_lsn_bytes(), services.postgres_cpu_seconds()
    machine_before = services.machine_cpu_seconds()
    worker = Worker(services, database, topics, key_server, extra)
    answered = reader.wait_for(keys, timeout=max(120, count / 50), responder=worker)
    if worker.process.poll() is not None:
        reader.close()
        raise RuntimeError(f"{kind}: the worker exited with status {worker.process.returncode}; "
                           f"see {worker.log.name}")
    machine_after = services.machine_cpu_seconds()
    stolen = (machine_after[2] - machine_before[2]) / max(machine_after[1] - machine_before[1], 1e-9)
    pg_cpu = services.postgres_cpu_seconds() - pg_cpu_before
    wal = services.wal_lsn_bytes() - wal_before
    peak, current = worker.memory()
    cpu = worker.cpu_seconds()
    worker.stop()
    reader.close()
    if not answered:
        raise RuntimeError(f"{kind}: only {len(reader.stamps)} of {count} answered; see {worker.log.name}")
    failed = [key for key in keys if reader.statuses.get(key) != "ok"]
    if failed:
        raise RuntimeError(f"{kind}: {len(failed)} requests were not answered ok; see {worker.log.name}")
    services.drop(database)
    rate = throughput(reader.stamps, keys)
    # By quarter of the answers: a rate that falls as the run goes on is the broker filling up.
    ordered = sorted(reader.stamps[key] for key in keys)
    quarters = [ordered[i * len(ordered) // 4:(i + 1) * len(ordered) // 4] for i in range(4)]
    by_quarter = [(len(q) - 1) / max((q[-1] - q[0]) / 1000, 1e-3) for q in quarters if len(q) > 1]
    log(f"{label or kind}: logins/s by quarter of the run: {', '.join(f'{r:,.0f}' for r in by_quarter)}")
    cpu_us = cpu / count * 1e6
    log(f"{label or kind}: {rate:,.0f} logins/s, worker CPU {cpu_us:,.0f} µs per login, peak RSS {peak:.0f} MiB, "
        f"{reader.duplicates} answered twice, {stolen:.0%} of the machine's CPU stolen by the host")
    pg_cpu_us, wal_bytes = pg_cpu / count * 1e6, wal / count
    log(f"{label or kind}: PostgreSQL CPU {pg_cpu_us:,.0f} µs and {wal_bytes:,.0f} bytes of WAL per login")
    return {"rate": rate, "count": count, "duplicates": reader.duplicates, "peak_rss_mib": peak, "rss_mib": current,
            "worker_cpu_us_per_login": cpu_us, "postgres_cpu_us_per_login": pg_cpu_us,
            "wal_bytes_per_login": wal_bytes, "stolen": stolen}


# Preloaded accounts (--accounts N): what a year of use leaves. Account i (1-based) is a guest when
# i % 10 < 3, signs in with Apple when 3 <= i % 10 < 8 (`sub` 001.bench.<i>), with a password
# otherwise; each has a session opened in the last 30 days with its current refresh token, and
# every other one the token that token replaced. A fifth of the sessions ended in the last day
# (expired, not yet purged); the rest are live.
def guest_account(i):
    return i % 10 < 3


def apple_account(i):
    return 3 <= i % 10 < 8


def live_session(i):
    return i % 5 != 0


def preloaded_apple_subject(i):
    return f"001.bench.{i}"


def preloaded_refresh_token(i):
    return "rt_" + str(i).zfill(48)


def preloaded_sample(accounts, count, wanted):
    """`count` distinct preloaded accounts for which `wanted(i)` holds, spread over the table."""
    import random
    chosen, seen = [], set()
    generator = random.Random(count)
    while len(chosen) < count:
        i = generator.randint(1, accounts)
        if i not in seen and wanted(i):
            seen.add(i)
            chosen.append(i)
    return chosen


PRELOAD_CHUNK = 500_000
PRELOAD_SQL = """
INSERT INTO users (id, handle, email, email_verified, is_private_email, is_guest, created_at, updated_at)
SELECT md5('u' || i)::uuid, CASE WHEN i % 10 < 3 THEN 'guest-' ELSE 'bench-' END || i,
       CASE WHEN i % 10 >= 8 THEN 'bench' || i || '@example.com'
            WHEN i % 10 >= 3 THEN 'bench' || i || '@privaterelay.appleid.com' END,
       i % 10 >= 3, i % 10 BETWEEN 3 AND 7, i % 10 < 3,
       now() - (i % 365) * interval '1 day', now() - (i % 30) * interval '1 day'
FROM generate_series({first}, {last}) AS i;
INSERT INTO identities (provider, subject, user_id, email, email_verified, is_private_email, password_hash,
                        created_at, last_login_at)
SELECT CASE WHEN i % 10 < 8 THEN 'apple' ELSE 'password' END,
       CASE WHEN i % 10 < 8 THEN '001.bench.' || i ELSE 'bench' || i || '@example.com' END,
       md5('u' || i)::uuid,
       CASE WHEN i % 10 < 8 THEN 'bench' || i || '@privaterelay.appleid.com' ELSE 'bench' || i || '@example.com' END,
       true, i % 10 < 8,
       CASE WHEN i % 10 >= 8 THEN '$argon2id$v=19$m=19456,t=2,p=1$YmVuY2hzYWx0YmVuY2g$3W1hbmRmeGhPWFZTa3N5bGdpMlRHaUlpSFVDcG16RHhSZ1E' END,
       now() - (i % 365) * interval '1 day', now() - (i % 30) * interval '1 day'
FROM generate_series({first}, {last}) AS i WHERE i % 10 >= 3;
INSERT INTO sessions (id, user_id, provider, device_name, device_platform, abilities, created_at, expires_at)
SELECT md5('s' || i)::uuid, md5('u' || i)::uuid,
       CASE WHEN i % 10 < 3 THEN 'guest' WHEN i % 10 < 8 THEN 'apple' ELSE 'password' END,
       'bench', 'ios', CASE WHEN i % 10 < 3 THEN ARRAY['guest'] ELSE ARRAY['*'] END,
       now() - (i % 30) * interval '1 day',
       CASE WHEN i % 5 = 0 THEN now() - (i % 24) * interval '1 hour' ELSE now() + (30 - i % 30) * interval '1 day' END
FROM generate_series({first}, {last}) AS i;
INSERT INTO refresh_tokens (id, session_id, token_hash, parent_id, created_at, expires_at, used_at, replaced_by)
SELECT md5('p' || i)::uuid, md5('s' || i)::uuid, sha256(convert_to('rt_p' || lpad(i::text, 47, '0'), 'UTF8')), NULL,
       now() - (i % 30) * interval '1 day' - interval '1 hour', now() + interval '1 day',
       now() - (i % 30) * interval '1 day', md5('r' || i)::uuid
FROM generate_series({first}, {last}) AS i WHERE i % 2 = 0;
INSERT INTO refresh_tokens (id, session_id, token_hash, parent_id, created_at, expires_at)
SELECT md5('r' || i)::uuid, md5('s' || i)::uuid, sha256(convert_to('rt_' || lpad(i::text, 48, '0'), 'UTF8')),
       CASE WHEN i % 2 = 0 THEN md5('p' || i)::uuid END, now() - (i % 30) * interval '1 day',
       CASE WHEN i % 5 = 0 THEN now() - (i % 24) * interval '1 hour' ELSE now() + (30 - i % 30) * interval '1 day' END
FROM generate_series({first}, {last}) AS i;
"""


def latest_schema(services):
    """The newest migration the worker under test applies, from an empty scratch database."""
    url = services.database(f"auth_bench_schema{uuid.uuid4().hex[:6]}")
    version = services.value(url.rsplit("/", 1)[1], "SELECT max(version) FROM schema_migrations")
    services.drop(url)
    return version


def preloaded_database(services, accounts):
    """The database of `accounts` preloaded accounts the phases copy, made once and kept (its
    name ends in `_accounts`, so the leftovers' sweep leaves it). It is made again when the
    worker's schema is newer than the one it was loaded under: a migration that changes how rows
    are stored (a fill factor) changes only the pages written after it."""
    name = f"auth_bench_preload_{accounts}_accounts"
    done = services.value("postgres", f"SELECT 1 FROM pg_database WHERE datname = '{name}'") == "1" and \
        services.value(name, "SELECT coalesce((SELECT accounts FROM bench_preload), 0)") == str(accounts)
    if done:
        loaded, latest = services.value(name, "SELECT max(version) FROM schema_migrations"), latest_schema(services)
        if loaded != latest:
            log(f"accounts: {name} was loaded under schema version {loaded}, the worker's is {latest}: loading it again")
            services.psql("postgres", f"DROP DATABASE {name} WITH (FORCE)")
            done = False
    if not done:
        started = time.time()
        services.template = None
        url = services.database(name)
        services.psql(name, "CREATE TABLE bench_preload (accounts bigint)")
        for first in range(1, accounts + 1, PRELOAD_CHUNK):
            last = min(first + PRELOAD_CHUNK - 1, accounts)
            services.psql(name, "BEGIN;" + PRELOAD_SQL.format(first=first, last=last) + "COMMIT;")
            log(f"accounts: {last:,} of {accounts:,} loaded ({time.time() - started:,.0f} s)")
        services.psql(name, "VACUUM (FREEZE, ANALYZE)")
        services.psql(name, f"INSERT INTO bench_preload VALUES ({accounts})")
        services.psql("postgres", "CHECKPOINT")
        log(f"accounts: {accounts:,} preloaded in {time.time() - started:,.0f} s into {url}")
    return name


def database_sizes(services, name):
    """The database's size and each table's and index's, in bytes."""
    rows = services.value(name, "SELECT string_agg(c.relname || '=' || pg_relation_size(c.oid), ' ') FROM pg_class c "
                                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
                                "AND c.relkind IN ('r', 'i') AND pg_relation_size(c.oid) > 1048576")
    sizes = {entry.split("=")[0]: int(entry.split("=")[1]) for entry in rows.split()} if rows else {}
    return {"database": int(services.value(name, "SELECT pg_database_size(current_database())")), "relations": sizes}


def run_accounts(services, key_server, args):
    """Guest sign-ups, returning Apple sign-ins and refreshes of existing sessions, and the paced
    p99 at 300 guest sign-ups/s: on copies of a small database, then of `--accounts` preloaded
    accounts, in one sitting."""
    results = {}
    # The small database: just the accounts the phases use (a returning sign-in needs its user),
    # twice over; against it the large one's cost shows.
    small = 2 * max(args.requests, args.apple_requests)
    for accounts in (small, args.accounts):
        label = f"{accounts:,} accounts"
        services.template = preloaded_database(services, accounts)
        services.accounts = accounts
        entry = {"sizes": database_sizes(services, services.template)}
        for kind, count in (("guest", args.requests), ("apple-nameless", args.apple_requests),
                            ("refresh", args.apple_requests)):
            entry[kind] = run_throughput_repeated(services, key_server, kind, count, args.repeats)
        entry["floor"] = {kind: run_database_floor(services, kind, accounts, args.pgbench_seconds)
                          for kind in ("apple-nameless", "refresh")}
        paced = run_latency(services, key_server, 300, args.latency_seconds)
        entry["paced_300"] = {k: v for k, v in paced.items() if k != "latencies_ms"}
        if accounts == args.accounts:
            # The purge at that size: the ended sessions past their retention, forgotten in
            # rounds while guests are paced at 300/s.
            purging = run_latency(services, key_server, 300, max(args.latency_seconds, 60), aged_sessions=True,
                                  extra={"AUTH_PURGE_INTERVAL_SECONDS": "10"})
            entry["purge_300"] = {k: v for k, v in purging.items() if k != "latencies_ms"}
        results[accounts] = entry
        log(f"{label}: guest {entry['guest']['rate']:,.0f}/s, Apple (returning) {entry['apple-nameless']['rate']:,.0f}/s, "
            f"refresh {entry['refresh']['rate']:,.0f}/s, paced 300/s p50/p99 {paced['p50_ms']} / {paced['p99_ms']} ms")
    return results


# The database's own floor at a size: the statements a batch of 100 returning Apple sign-ins or
# refreshes of the preloaded accounts sends, as one statement a transaction, by pgbench (two
# clients, as the worker's two writers), on a copy of the preloaded database right after a
# checkpoint. The rows are the worker's: the identity found and stamped, the session locked, a new
# session or token with its successor sealed, the kept answer.
FLOOR_SCRIPTS = {
    "refresh": """
WITH picked AS (
  SELECT r.id, r.session_id, s.user_id FROM refresh_tokens r JOIN sessions s ON s.id = r.session_id
  WHERE r.token_hash = ANY (ARRAY(SELECT sha256(convert_to('rt_' || lpad(i::text, 48, '0'), 'UTF8'))
     FROM (SELECT (floor(random() * :accounts / 5) * 5 + 1 + floor(random() * 4))::bigint AS i
           FROM generate_series(1, 100)) g))
  FOR UPDATE OF r, s
), fresh AS (
  INSERT INTO refresh_tokens (id, session_id, token_hash, parent_id, created_at, expires_at)
  SELECT gen_random_uuid(), session_id, sha256(convert_to(gen_random_uuid()::text, 'UTF8')), id, now(),
         now() + interval '30 days' FROM picked
  RETURNING id, parent_id
), rotated AS (
  UPDATE refresh_tokens r SET used_at = now(), replaced_by = f.id,
         successor_sealed = sha512(f.id::text::bytea) || sha256(f.id::text::bytea)
  FROM fresh f WHERE r.id = f.parent_id
)
INSERT INTO processed_requests (request_id, method, status, user_id, session_id, processed_at, expires_at,
                                request_digest, result_sealed)
SELECT gen_random_uuid()::text, 'refresh', 'ok', user_id, session_id, now(), now() + interval '1 day',
       sha256(id::text::bytea), convert_to(repeat(md5(random()::text), 20), 'UTF8') FROM picked;
""",
    "apple-nameless": """
WITH picked AS (
  SELECT i.provider, i.subject, i.user_id FROM identities i
  WHERE i.provider = 'apple' AND i.subject = ANY (ARRAY(SELECT '001.bench.' || i
     FROM (SELECT (floor(random() * :accounts / 10) * 10 + 3 + floor(random() * 5))::bigint AS i
           FROM generate_series(1, 100)) g))
), stamped AS (
  UPDATE identities i SET last_login_at = now() FROM picked p
  WHERE i.provider = p.provider AND i.subject = p.subject
), opened AS (
  INSERT INTO sessions (id, user_id, provider, device_name, device_platform, abilities, created_at, expires_at)
  SELECT gen_random_uuid(), user_id, 'apple', 'bench', 'ios', ARRAY['*'], now(), now() + interval '30 days'
  FROM picked RETURNING id, user_id
), tokens AS (
  INSERT INTO refresh_tokens (id, session_id, token_hash, created_at, expires_at)
  SELECT gen_random_uuid(), id, sha256(convert_to(gen_random_uuid()::text, 'UTF8')), now(),
         now() + interval '30 days' FROM opened
)
INSERT INTO processed_requests (request_id, method, status, user_id, session_id, processed_at, expires_at,
                                request_digest, result_sealed)
SELECT gen_random_uuid()::text, 'apple', 'ok', user_id, id, now(), now() + interval '1 day',
       sha256(id::text::bytea), convert_to(repeat(md5(random()::text), 20), 'UTF8') FROM opened;
""",
}


def run_database_floor(services, kind, accounts, seconds):
    """PostgreSQL alone writing what `kind`'s logins write, 100 a transaction (FLOOR_SCRIPTS)."""
    url = services.database(f"auth_bench_floor{uuid.uuid4().hex[:6]}")
    script = os.path.join(services.scratch, f"floor-{kind}.sql")
    with open(script, "w") as handle:
        handle.write(FLOOR_SCRIPTS[kind])
    services.psql("postgres", "CHECKPOINT")
    wal_before = services.wal_lsn_bytes()
    output = subprocess.run(["pgbench", "-n", "-c", "2", "-j", "2", "-T", str(seconds), "-D", f"accounts={accounts}",
                             "-f", script, url], check=True, capture_output=True, text=True).stdout
    wal = services.wal_lsn_bytes() - wal_before
    tps = next(float(line.split("=")[1].split()[0]) for line in output.splitlines() if line.startswith("tps"))
    done = next(int(line.split(":")[1]) for line in output.splitlines() if "actually processed" in line)
    services.drop(url)
    floor = {"logins_per_second": tps * 100, "wal_bytes_per_login": wal / max(done * 100, 1)}
    log(f"floor ({kind}, {accounts:,} accounts): PostgreSQL alone {floor['logins_per_second']:,.0f}/s, "
        f"{floor['wal_bytes_per_login']:,.0f} WAL bytes each")
    return floor


def report_accounts(results):
    small, accounts = sorted(results)
    empty, loaded = results[small], results[accounts]
    lines = [f"| measure | {small:,} accounts | {accounts:,} accounts | ratio |", "|---|---|---|---|"]
    for kind, name in (("guest", "guest sign-ups/s"), ("apple-nameless", "returning Apple sign-ins/s"),
                       ("refresh", "refreshes of existing sessions/s")):
        a, b = empty[kind], loaded[kind]
        lines.append(f"| {name} | {a['rate']:,.0f} | {b['rate']:,.0f} | {b['rate'] / a['rate']:.2f} |")
        lines.append(f"| … PostgreSQL CPU µs / WAL bytes per login | {a['postgres_cpu_us_per_login']:,.0f} / "
                     f"{a['wal_bytes_per_login']:,.0f} | {b['postgres_cpu_us_per_login']:,.0f} / "
                     f"{b['wal_bytes_per_login']:,.0f} | |")
        lines.append(f"| … worker CPU µs per login | {a['worker_cpu_us_per_login']:,.0f} | "
                     f"{b['worker_cpu_us_per_login']:,.0f} | |")
        fa, fb = empty.get("floor", {}).get(kind), loaded.get("floor", {}).get(kind)
        if fa and fb:
            lines.append(f"| … PostgreSQL alone, the same rows (pgbench) | {fa['logins_per_second']:,.0f} | "
                         f"{fb['logins_per_second']:,.0f} | {fb['logins_per_second'] / fa['logins_per_second']:.2f} |")
            lines.append(f"| … the worker's share of that floor | {a['rate'] / fa['logins_per_second']:.2f} | "
                         f"{b['rate'] / fb['logins_per_second']:.2f} | |")
    a, b = empty["paced_300"], loaded["paced_300"]
    lines.append(f"| guest p50 / p99 at 300/s (ms) | {a['p50_ms']} / {a['p99_ms']} | {b['p50_ms']} / {b['p99_ms']} | "
                 f"p99 {b['p99_ms'] - a['p99_ms']:+.1f} ms |")
    purge = (loaded.get("purge_300") or {}).get("purge")
    if purge:
        lines.append(f"| the purge meanwhile at 300/s: rounds, ended sessions forgotten | | {purge['rounds']}, "
                     f"{purge['rows']:,} | |")
        lines.append(f"| … p99 of requests sent within a second before a round ended / the rest (ms) | | "
                     f"{purge['near_p99_ms']} / {purge['rest_p99_ms']} | |")
    sizes, small_sizes = loaded["sizes"], empty["sizes"]
    lines.append(f"| database size | {small_sizes['database'] / 2**20:,.0f} MiB | {sizes['database'] / 2**30:.2f} GiB | |")
    for relation, size in sorted(sizes["relations"].items(), key=lambda item: -item[1]):
        before = small_sizes["relations"].get(relation)
        lines.append(f"| … {relation} | {f'{before / 2**20:,.0f} MiB' if before else '< 1 MiB'} | {size / 2**20:,.0f} MiB | |")
    return "\n".join(lines)


def run_throughput_repeated(services, key_server, kind, count, repeats):
    """The throughput phase `repeats` times: the median run stands for the phase, the others show
    the spread (a shared host's steal and the broker's state move a single run by a third)."""
    runs = [run_throughput(services, key_server, kind, count) for _ in range(repeats)]
    ordered = sorted(runs, key=lambda run: run["rate"])
    median = dict(ordered[(len(ordered) - 1) // 2])
    median["runs"] = [{"rate": run["rate"], "stolen": run["stolen"],
                       "worker_cpu_us_per_login": run["worker_cpu_us_per_login"]} for run in runs]
    median["duplicates"] = sum(run["duplicates"] for run in runs)
    rates = ", ".join(f"{run['rate']:,.0f}" for run in runs)
    log(f"{kind}: median of {repeats} runs {median['rate']:,.0f} logins/s (runs: {rates})")
    return median


def run_latency_repeated(services, key_server, rate, seconds, repeats):
    """The half-load phase `repeats` times: the run with the median p99 stands for the phase (its
    latencies feed the chart), the others show the spread. One 20 s run's p99 at half load moved
    from 77 to 180 ms between runs of one build in one hour."""
    runs = [run_latency(services, key_server, rate, seconds) for _ in range(max(repeats, 1))]
    ordered = sorted(runs, key=lambda run: run["p99_ms"])
    median = dict(ordered[(len(ordered) - 1) // 2])
    median["runs"] = [{"p50_ms": run["p50_ms"], "p99_ms": run["p99_ms"], "autovacuum_runs": run["autovacuum_runs"],
                       "machine_busy_cores": run["cpu"]["machine_busy_cores"]} for run in runs]
    median["duplicates"] = sum(run["duplicates"] for run in runs)
    p99s = ", ".join(f"{run['p99_ms']}" for run in runs)
    log(f"latency: median of {len(runs)} runs by p99 {median['p50_ms']} / {median['p99_ms']} ms (p99s: {p99s} ms)")
    return median


class EchoResponder:
    """The broker's floor: a client that answers each request at once, with no work, through the
    same broker, topics and fetch wait as the worker. Its latency is what any consumer gets here."""

    def __init__(self, services, topics):
        # `auth-bench echo`: compiled, on the worker's own Kafka client, as the paced load is.
        self.process = subprocess.Popen([services.bench, "echo", services.brokers, topics["requests"],
                                         topics["results"], BENCH_FETCH_WAIT_MS], stdin=subprocess.PIPE)

    def cpu_seconds(self):
        return process_cpu_seconds(self.process.pid)

    def stop(self):
        # It answers until its standard input closes.
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def scrape(worker, method="guest"):
    """The worker's duration buckets, or None (and a log line) when /metrics does not answer: the
    end-to-end numbers stand without them."""
    try:
        return worker.duration_buckets(method)
    except OSError as error:
        log(f"latency: the worker's /metrics did not answer ({error}); its own timing is left out")
        return None


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


PHASES = ("to_look_up", "looking_up", "preparing", "ready", "writing", "looking_up_and_writing", "publishing")


def inside_worker(before, after):
    """From two scrapes of the worker's histograms: the requests observed between them, the bound
    their p50 and p99 fall under, and the share done within 25 ms, as the worker times them: from the
    message leaving the poll to its offset being released, which is after the broker acknowledged the
    answer. So it leaves out the fetch wait and includes the produce round trip. And where that time
    went, by phase (`auth_request_phase_seconds`): each phase's requests, mean and p99 bound."""
    bounds = sorted(after["duration"])
    counts = [after["duration"][bound] - before["duration"].get(bound, 0) for bound in bounds]
    total = counts[-1] if counts else 0
    if total <= 0:
        return None

    def under(bounds, counts, fraction):
        total = counts[-1]
        return next(bound for bound, count in zip(bounds, counts) if count >= fraction * total)

    within = next((count for bound, count in zip(bounds, counts) if abs(bound - 0.025) < 1e-9), 0)
    as_ms = lambda bound: "over 10 s" if bound == float("inf") else f"{bound * 1000:g}"
    phases = {}
    for phase in PHASES:
        now, then = after["phases"].get(phase), before["phases"].get(phase, {"sum": 0, "count": 0, "buckets": {}})
        if not now or now["count"] - then["count"] <= 0:
            continue
        observed = now["count"] - then["count"]
        phase_bounds = sorted(now["buckets"])
        phase_counts = [now["buckets"][bound] - then["buckets"].get(bound, 0) for bound in phase_bounds]
        phases[phase] = {"count": int(observed), "mean_ms": (now["sum"] - then["sum"]) / observed * 1000,
                         "p99_at_most_ms": as_ms(under(phase_bounds, phase_counts, 0.99))}
    return {"count": int(total), "p50_at_most_ms": as_ms(under(bounds, counts, 0.5)),
            "p99_at_most_ms": as_ms(under(bounds, counts, 0.99)), "within_25ms": within / total,
            "phases": phases}


def phase_summary(inside):
    """The worker's time by phase, as a line: `to look up 0.9 (≤ 5), looking up 1.2 (≤ 10), …` (mean ms, p99 bound)."""
    phases = (inside or {}).get("phases") or {}
    return ", ".join(f"{phase.replace('_', ' ')} {entry['mean_ms']:.1f} (≤ {entry['p99_at_most_ms']})"
                     for phase, entry in phases.items())


def process_cpu_seconds(pid):
    """User and system CPU time process `pid` has used so far, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of stat(5), 12 and 13 after the command name.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def apple_request_data(key_server, subject, now, index):
    """A first Sign in with Apple with a profile name: a fresh RS256 token from the local key
    server, its nonce's hash in the token."""
    import hashlib
    nonce = uuid.uuid4().hex
    token = key_server.token(subject, hashlib.sha256(nonce.encode()).hexdigest(), now)
    return {"method": "apple", "identity_token": token, "nonce": nonce,
            "profile": {"given_name": "Bench", "family_name": f"User{index}"}}


class PacedLoad:
    """The paced requests and the reading of their results, in a process of their own (`auth-bench
    pace`) on the worker's own Kafka client: Debian's librdkafka, where the Python client bundles a
    newer one. The echo runs on it too (`auth-bench echo`), so the floor is what the worker's client
    gets from the same broker. Its CPU is reported as the load generator's (a third of a core at
    5,600 requests/s, as from Python: librdkafka's thread wake-ups with a 1 ms linger)."""

    def __init__(self, services, topics, rate, bodies):
        self.folder = tempfile.mkdtemp(prefix="auth-bench-pace-")
        self.out = os.path.join(self.folder, "latencies")
        path = os.path.join(self.folder, "bodies")
        with open(path, "wb") as file:
            for key, body in bodies:
                # Keys are UUIDs and JSON escapes tabs and line breaks: a line a request.
                file.write(key.encode() + b"\t" + body + b"\n")
        self.process = subprocess.Popen([services.bench, "pace", services.brokers, topics["requests"],
                                         topics["results"], repr(float(rate)), path, self.out],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def line(self, expected):
        line = self.process.stdout.readline().strip()
        if not line.startswith(expected):
            self.process.kill()
            raise RuntimeError(f"auth-bench pace: expected `{expected}`, got `{line or 'its exit'}`")
        return line.split()[1:]

    def cpu_seconds(self):
        return process_cpu_seconds(self.process.pid)

    def go(self):
        try:
            self.process.stdin.write("go\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            pass  # it exited: the next line() says so

    def pairs(self):
        """Once it is done: each paced request's (sent, result) create times in the order sent (the
        result -1 when none came)."""
        self.process.wait(timeout=30)
        with open(self.out) as file:
            return [tuple(int(word) for word in line.split()) for line in file]

    def close(self):
        """Ends the process if it is still running (a phase that failed) and removes its files."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def seed_expired_answers(services, database_name, rows):
    """Kept answers that expired a day ago, as a long-running deployment's table holds a week of
    them: `rows` of 700-byte sealed results, then a checkpoint, so that the purge's first change to
    each page is logged whole, as on a table checkpointed long since. The worker's relay (every
    AUTH_PURGE_INTERVAL_SECONDS) forgets them in rounds while the paced requests run."""
    services.psql(database_name,
                  "INSERT INTO processed_requests (request_id, method, status, processed_at, expires_at, result_sealed) "
                  f"SELECT 'expired-' || n, 'guest', 'ok', now() - interval '8 days', now() - interval '1 day', "
                  f"convert_to(repeat(md5(n::text), 22), 'UTF8') FROM generate_series(1, {int(rows)}) AS n")
    services.psql(database_name, "CHECKPOINT")
    log(f"latency: {rows:,} expired kept answers seeded for the relay's purge")


def purge_rounds(log_path, pairs):
    """The relay's purge rounds during the phase, from the worker's log (`Forgot expired rows`, written
    when a round commits), and the latency of requests sent within the second before a round ended
    against the rest."""
    rounds = []
    with open(log_path) as handle:
        for line in handle:
            if '"Forgot expired rows"' not in line:
                continue
            try:
                record = json.loads(line)
                at = datetime.datetime.fromisoformat(record["ts"].replace("Z", "+00:00")).timestamp() * 1000
                rounds.append((at, int(record.get("purge.requests", "0")) + int(record.get("purge.ended_sessions", "0"))))
            except (ValueError, KeyError):
                continue
    answered = [(sent, answered - sent) for sent, answered in pairs if answered >= 0]
    if not answered:
        return None
    first, last = answered[0][0], answered[-1][0]
    during = [(at, rows) for at, rows in rounds if first <= at <= last + 1000]
    near = [latency for sent, latency in answered if any(at - 1000 <= sent <= at for at, _ in during)]
    rest = [latency for sent, latency in answered if not any(at - 1000 <= sent <= at for at, _ in during)]
    return {"rounds": len(during), "rows": sum(rows for _, rows in during), "near_count": len(near),
            "near_p50_ms": percentile(near, 0.50) if near else None,
            "near_p99_ms": percentile(near, 0.99) if near else None,
            "rest_p50_ms": percentile(rest, 0.50) if rest else None,
            "rest_p99_ms": percentile(rest, 0.99) if rest else None}


def age_ended_sessions(services, database_name):
    """The preloaded sessions that ended (a fifth) moved past the 7-day retention, as a deployment
    whose purge was off for a while holds them, then a checkpoint: the relay's purge (every
    AUTH_PURGE_INTERVAL_SECONDS) forgets their tokens in rounds while the paced requests run."""
    aged = services.value(database_name,
                          "WITH aged AS (UPDATE sessions SET expires_at = now() - interval '10 days' "
                          "WHERE expires_at < now() RETURNING 1) SELECT count(*) FROM aged")
    services.psql(database_name, "CHECKPOINT")
    log(f"latency: {int(aged):,} ended sessions aged past the retention for the relay's purge")
    return int(aged)


def run_latency(services, key_server, rate, seconds, extra=None, responder="worker", method="guest", purge_rows=0,
                aged_sessions=False):
    services.fresh()
    suffix = f"latency{uuid.uuid4().hex[:6]}"
    topics = services.topics(suffix)
    database = None
    if responder == "echo":
        worker = EchoResponder(services, topics)
    else:
        database = services.database(f"auth_bench_{suffix}")
        worker = Worker(services, database, topics, key_server, extra, health_port=free_port())
    # Built before the clock starts, so the pacing costs the machine under test little: a
    # request's id and body (an Apple request's token signed here). The first is the warm-up,
    # answered before the clock starts (the responder has joined its group).
    total = int(rate * seconds)
    keys = [str(uuid.uuid4()) for _ in range(total)]
    if method == "apple":
        now = int(time.time())
        bodies = [request(request_id, apple_request_data(key_server, f"paced.{suffix}.{index}", now, index))
                  for index, request_id in enumerate(keys)]
    elif method == "refresh":
        # A guest for each refresh signs up first, in full batches, before the clock starts (the
        # echo answers anything: its refreshes carry tokens of the same length that name no one).
        if responder == "worker":
            signups = ResultReader(services, topics["results"], keep_values=True)
            try:
                tokens = guest_refresh_tokens(services, signups, topics["requests"], total, worker)
            finally:
                signups.close()
        else:
            tokens = [secrets.token_urlsafe(32) for _ in range(total)]
        bodies = [request(request_id, {"method": "refresh", "refresh_token": token})
                  for request_id, token in zip(keys, tokens)]
    else:
        bodies = [request(request_id, {"method": "guest"}) for request_id in keys]
    warm = str(uuid.uuid4())
    load = PacedLoad(services, topics, rate, [(warm, request(warm, {"method": "guest"}))] + list(zip(keys, bodies)))
    try:
        try:
            load.line("ready")
        except RuntimeError:
            raise RuntimeError(f"latency: the {responder} never answered")
        log(f"latency: {rate:,.0f} {method} logins/s for {seconds} s, answered by the {responder}")
        # The warm-up is answered and read: from here the broker keeps each partition's last few
        # seconds (the default broker; see Services.keep_recent).
        services.keep_recent(BENCH_KEEP_SECONDS)
        # Where the machine's CPU goes while the requests are paced: the worker (or echo),
        # PostgreSQL, the load generator, the broker, and the rest (the system).
        # Autovacuum's count first and last: its psql session is PostgreSQL CPU the phase should not carry.
        database_name = database.rsplit("/", 1)[1] if database else None
        # Seeded before the phase's CPU is read: the relay's rounds are the phase's, the seeding not.
        if purge_rows and database_name:
            seed_expired_answers(services, database_name, purge_rows)
        if aged_sessions and database_name:
            purge_rows = age_ended_sessions(services, database_name)
        vacuums_before = services.autovacuum_runs(database_name) if database_name else None
        machine_before, own_before = services.machine_cpu_seconds(), time.process_time()
        pg_before = services.postgres_cpu_seconds()
        responder_before = worker.cpu_seconds()
        load_before = load.cpu_seconds()
        broker_before = services.broker_cpu_seconds()
        buckets_before = scrape(worker, method) if responder == "worker" else None
        start = time.perf_counter()
        load.go()
        achieved = float(load.line("sent")[0])
        duplicates, unanswered, load_cpu = (float(word) for word in load.line("done"))
        duplicates, unanswered = int(duplicates), int(unanswered)
        wall = time.perf_counter() - start
        machine_after = services.machine_cpu_seconds()
        broker_after = services.broker_cpu_seconds()
        trimmed = services.trimmed_records()
        cores = (machine_after[1] - machine_before[1]) / max(wall, 1e-9)
        pairs = load.pairs()
    except BaseException:
        # A failed phase leaves no worker or pacer behind to load the phases after it.
        worker.stop()
        raise
    finally:
        load.close()
    cpu = {
        "machine_busy_cores": (machine_after[0] - machine_before[0]) / wall, "cores": round(cores),
        "responder_cores": (worker.cpu_seconds() - responder_before) / wall,
        "postgres_cores": (services.postgres_cpu_seconds() - pg_before) / wall,
        # The pacing process's CPU (as it counted it when done) and this script's.
        "load_generator_cores": (load_cpu - load_before + time.process_time() - own_before) / wall,
        "stolen_cores": (machine_after[2] - machine_before[2]) / wall,
        # The bench's broker is on this machine too (a real one would not be).
        "broker_cores": (broker_after - broker_before) / wall if broker_before is not None else None,
    }
    vacuums = services.autovacuum_runs(database_name) - vacuums_before if database_name else None
    buckets_after = scrape(worker, method) if buckets_before is not None and not unanswered else None
    inside = inside_worker(buckets_before, buckets_after) if buckets_after is not None else None
    purge = purge_rounds(worker.log.name, pairs) if purge_rows and responder == "worker" else None
    worker.stop()
    if database:
        services.drop(database)
    if unanswered and responder == "worker":
        raise RuntimeError(f"latency: {unanswered} of {total} requests were not answered; see {worker.log.name}")
    if unanswered:
        # The echo does no work, so requests it leaves unanswered for a minute are the broker
        # collapsing under the rate: reported as such, not a reason to lose the rest of the run.
        log(f"latency: the {responder} left {unanswered} of {total} requests unanswered after 60 s")
    latencies = [answered - sent for sent, answered in pairs if answered >= 0]
    result = {"responder": responder, "offered_rate": rate, "achieved_rate": achieved, "count": len(latencies),
              "p50_ms": percentile(latencies, 0.50), "p90_ms": percentile(latencies, 0.90),
              "p99_ms": percentile(latencies, 0.99), "max_ms": max(latencies),
              "mean_ms": statistics.mean(latencies), "duplicates": duplicates, "unanswered": unanswered,
              "cpu": cpu, "broker_trimmed_records": trimmed, "autovacuum_runs": vacuums,
              "inside_worker": inside, "purge": purge, "latencies_ms": latencies}
    log(f"latency: p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms; CPU busy "
        f"{cpu['machine_busy_cores']:.2f} of {cpu['cores']} cores ({responder} {cpu['responder_cores']:.2f}, "
        f"PostgreSQL {cpu['postgres_cores']:.2f}, load generator {cpu['load_generator_cores']:.2f}"
        + (f", broker {cpu['broker_cores']:.2f}" if cpu['broker_cores'] is not None else "") + "; "
        f"{cpu['stolen_cores']:.2f} stolen by the host)"
        + (f"; autovacuum vacuumed or analyzed the phase's tables {vacuums} times meanwhile" if vacuums else ""))
    if purge:
        what = "ended sessions' tokens" if aged_sessions else "expired kept answers"
        log(f"purge: {purge['rounds']} rounds in the phase forgot {purge['rows']:,} {what} of "
            f"{purge_rows:,}; requests sent within a second before a round ended: {purge['near_count']:,}, "
            f"p50 / p99 {purge['near_p50_ms']} / {purge['near_p99_ms']} ms; the rest p50 / p99 "
            f"{purge['rest_p50_ms']} / {purge['rest_p99_ms']} ms")
    if inside:
        log(f"latency as the worker times it (poll to acknowledged answer): p50 ≤ {inside['p50_at_most_ms']} ms, p99 ≤ {inside['p99_at_most_ms']} ms, "
            f"{inside['within_25ms']:.0%} within 25 ms"
            + (f"; by phase, mean ms (p99 bound): {phase_summary(inside)}" if inside.get("phases") else ""))
    return result


PGBENCH_SCRIPT = """
BEGIN;
DELETE FROM outbox WHERE event_id IN (
    SELECT event_id FROM outbox ORDER BY created_at LIMIT 100 FOR UPDATE SKIP LOCKED);
WITH u AS (
    INSERT INTO users (id, handle, is_guest, created_at, updated_at)
    SELECT gen_random_uuid(), 'guest_' || md5(random()::text), true, now(), now() FROM generate_series(1, 100)
    RETURNING id),
s AS (
    INSERT INTO sessions (id, user_id, provider, abilities, created_at, expires_at)
    SELECT gen_random_uuid(), id, 'guest', '{guest}', now(), now() + interval '90 days' FROM u RETURNING id),
r AS (
    INSERT INTO refresh_tokens (id, session_id, token_hash, created_at, expires_at)
    SELECT gen_random_uuid(), id, sha256(convert_to('r' || id::text, 'UTF8')), now(), now() + interval '30 days'
    FROM s RETURNING 1),
p AS (
    INSERT INTO processed_requests (request_id, method, status, processed_at, expires_at, result_sealed)
    SELECT gen_random_uuid()::text, 'guest', 'ok', now(), now() + interval '7 days', convert_to(repeat('x', 700), 'UTF8')
    FROM generate_series(1, 100) RETURNING 1),
l AS (
    INSERT INTO rate_limits (bucket, window_start, count)
    SELECT 'guest:' || gen_random_uuid(), now(), 1 FROM generate_series(1, 100)
    ON CONFLICT (bucket) DO UPDATE SET count = rate_limits.count + 1 RETURNING 1)
INSERT INTO outbox (event_id, topic, message_key, payload, created_at)
SELECT gen_random_uuid(), 'auth.user.events', 'k', convert_to(repeat('x', 400), 'UTF8'), now()
FROM generate_series(1, 100);
COMMIT;
"""


# One guest login's statements as a batch of one under light load sends them: BEGIN with the
# request-id lookup, the previous event's mark and the reads (the handle, the client's rate-limit
# row, locked), then the writes and COMMIT (one round trip each), every statement prepared. Paced
# at a rate, what PostgreSQL spends on it is the floor for a login at that rate on this machine:
# the worker's statements can be cheaper, but not its round trips and commits.
PGBENCH_ONE_LOGIN = """
\\set n random(1, 9000000000000000000)
\\startpipeline
BEGIN;
SELECT request_id, result_sealed FROM processed_requests
WHERE request_id = ANY(ARRAY[:client_id || '-' || :n]::text[]);
DELETE FROM outbox WHERE event_id IN (SELECT event_id FROM outbox ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED);
SELECT handle FROM users WHERE handle = ANY(ARRAY['guest_' || :client_id || '_' || :n]::text[]);
SELECT bucket, window_start, count FROM rate_limits
WHERE bucket = ANY(ARRAY['guest:' || :client_id || '-' || :n]::text[]) ORDER BY bucket FOR UPDATE;
\\endpipeline
\\startpipeline
INSERT INTO users (id, handle, is_guest, created_at, updated_at)
VALUES (md5('u' || :client_id || '-' || :n)::uuid, 'guest_' || :client_id || '_' || :n, true, now(), now());
INSERT INTO sessions (id, user_id, provider, abilities, created_at, expires_at)
VALUES (md5('s' || :client_id || '-' || :n)::uuid, md5('u' || :client_id || '-' || :n)::uuid, 'guest', '{guest}',
        now(), now() + interval '90 days');
INSERT INTO refresh_tokens (id, session_id, token_hash, created_at, expires_at)
VALUES (gen_random_uuid(), md5('s' || :client_id || '-' || :n)::uuid,
        sha256(convert_to('r' || :client_id || '-' || :n, 'UTF8')), now(), now() + interval '30 days');
INSERT INTO processed_requests (request_id, method, status, processed_at, expires_at, result_sealed)
VALUES (:client_id || '-' || :n, 'guest', 'ok', now(), now() + interval '7 days', convert_to(repeat('x', 700), 'UTF8'));
INSERT INTO rate_limits (bucket, window_start, count) VALUES ('guest:' || :client_id || '-' || :n, now(), 1)
ON CONFLICT (bucket) DO UPDATE SET count = rate_limits.count + 1;
INSERT INTO outbox (event_id, topic, message_key, payload, created_at)
VALUES (gen_random_uuid(), 'auth.user.events', 'k', convert_to(repeat('x', 400), 'UTF8'), now());
COMMIT;
\\endpipeline
"""


def run_pgbench_paced(services, rate, seconds):
    """PostgreSQL's CPU per transaction for one guest login's statements paced at `rate`, on as
    many connections as the worker has for them (the pool's and two writers')."""
    database = services.database(f"auth_bench_pgbench{uuid.uuid4().hex[:6]}")
    script = os.path.join(services.scratch, "one-login.sql")
    with open(script, "w") as handle:
        handle.write(PGBENCH_ONE_LOGIN)
    log(f"limits: pgbench, one guest login's statements per transaction, paced at {rate:,.0f}/s for {seconds} s")
    for attempt in (1, 2):
        before, started = services.postgres_cpu_seconds(), time.perf_counter()
        # Each transaction's latency goes to a log of its own (`-l`), for the floor's p50 and p99.
        prefix = os.path.join(services.scratch, f"one-login-{uuid.uuid4().hex[:6]}")
        output = subprocess.run(["pgbench", "-n", "-M", "prepared", "-c", "3", "-j", "1", "-R", str(rate),
                                 "-T", str(seconds), "-l", f"--log-prefix={prefix}", "-f", script, database],
                                check=True, capture_output=True, text=True).stdout
        cores = (services.postgres_cpu_seconds() - before) / (time.perf_counter() - started)
        tps = next(float(line.split("=")[1].split()[0]) for line in output.splitlines() if line.startswith("tps"))
        # A durable transaction costs PostgreSQL tens of µs at the very least: a reading of
        # (nearly) nothing over hundreds of them lost a process's CPU between the two reads of
        # /proc (seen once, after a paced phase: 0.00 core over 302 transactions/s). Run again.
        if cores / max(tps, 1e-9) * 1e6 >= 10:
            break
        transaction_latencies_ms(prefix)
        log(f"limits: PostgreSQL's CPU read {cores:.3f} core over {tps:,.0f} transactions/s: not a reading; "
            + ("running it again" if attempt == 1 else "left unmeasured"))
    else:
        cores = None
    latency = next((float(line.split("=")[1].split()[0]) for line in output.splitlines()
                    if line.startswith("latency average")), None)
    smallest = run_pgbench_one_row(services, database, rate, seconds)
    services.drop(database)
    own = transaction_latencies_ms(prefix)
    per_login = cores / max(tps, 1e-9) * 1e6 if cores is not None else None
    p50, p99 = (percentile(own, 0.50), percentile(own, 0.99)) if own else (None, None)
    cpu = f"PostgreSQL {cores:.2f} core, {per_login:,.0f} µs per transaction" if cores is not None else "PostgreSQL's CPU unmeasured"
    log(f"limits: {tps:,.0f} transactions/s, {cpu}, "
        f"latency {latency} ms on average, p50 / p99 {p50} / {p99} ms from each transaction's start")
    return {"offered_rate": rate, "transactions_per_second": tps, "postgres_cores": cores,
            "postgres_cpu_us_per_login": per_login, "latency_average_ms": latency,
            "transaction_p50_ms": p50, "transaction_p99_ms": p99, "one_row": smallest}


PGBENCH_ONE_ROW = """\
BEGIN;
INSERT INTO bench_one_row (client, n) VALUES (:client_id, :scale);
COMMIT;
"""


def run_pgbench_one_row(services, database, rate, seconds):
    """The smallest durable transaction, one row inserted and committed, paced at `rate` on the
    same three connections: PostgreSQL's CPU and pgbench's own (its libpq client's) per transaction.
    What any design pays a login at a paced rate when each login's effects commit on their own."""
    services.psql(database.rsplit("/", 1)[1], "CREATE TABLE bench_one_row (id bigserial PRIMARY KEY, client int, n int)")
    script = os.path.join(services.scratch, "one-row.sql")
    with open(script, "w") as handle:
        handle.write(PGBENCH_ONE_ROW)
    before, started = services.postgres_cpu_seconds(), time.perf_counter()
    process = subprocess.Popen(["pgbench", "-n", "-M", "prepared", "-c", "3", "-j", "1", "-R", str(rate),
                                "-T", str(seconds), "-f", script, database],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = process.stdout.read()
    # wait4, not wait: the child's own CPU time comes with its status.
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"pgbench (one row) exited with status {process.returncode}: {output[-2000:]}")
    cores = (services.postgres_cpu_seconds() - before) / (time.perf_counter() - started)
    tps = next(float(line.split("=")[1].split()[0]) for line in output.splitlines() if line.startswith("tps"))
    postgres_us = cores / max(tps, 1e-9) * 1e6
    client_us = (usage.ru_utime + usage.ru_stime) / max(tps * seconds, 1e-9) * 1e6
    log(f"limits: the smallest durable transaction (one row) at {rate:,.0f}/s: PostgreSQL {postgres_us:,.0f} µs, "
        f"pgbench's client {client_us:,.0f} µs per transaction")
    return {"postgres_cpu_us": postgres_us, "client_cpu_us": client_us, "transactions_per_second": tps}


def transaction_latencies_ms(prefix):
    """Each logged transaction's latency in ms, from when it started (pgbench's `time` less its
    `schedule_lag`: the time counts from the scheduled start under `--rate`), and the logs removed."""
    latencies = []
    for path in glob.glob(f"{prefix}.*"):
        with open(path) as handle:
            for line in handle:
                fields = line.split()
                # client, transaction, time (µs), script, epoch seconds, µs, schedule lag (µs)
                if len(fields) >= 7 and fields[2].isdigit() and fields[6].isdigit():
                    latencies.append(round((int(fields[2]) - int(fields[6])) / 1000, 2))
        os.remove(path)
    return latencies


def run_idle_both(services, key_server, seconds):
    """Idle at the worker's default fetch wait (what it runs with on Apache Kafka, which answers a
    waiting fetch early) and at the bench's (what a broker that holds every fetch needs)."""
    default = run_idle(services, key_server, seconds, {"AUTH_KAFKA_FETCH_WAIT_MS": None})
    short = run_idle(services, key_server, seconds)
    return {**default, "fetch_wait": "default", "at_bench_fetch_wait": {**short, "fetch_wait_ms": BENCH_FETCH_WAIT_MS}}


def run_idle(services, key_server, seconds, extra=None):
    """The worker's CPU while nothing arrives: joined, one guest answered, then `seconds` of
    silence; as a share of one core (item: idle at most 0.5 %)."""
    services.fresh()
    suffix = f"idle{uuid.uuid4().hex[:6]}"
    topics = services.topics(suffix)
    reader = ResultReader(services, topics["results"])
    database = services.database(f"auth_bench_{suffix}")
    worker = Worker(services, database, topics, key_server, extra, health_port=free_port())
    try:
        out = producer(services, linger_ms=1)
        warm = str(uuid.uuid4())
        out.produce(topics["requests"], key=warm.encode(), value=request(warm, {"method": "guest"}))
        out.flush(10)
        if not reader.wait_for([warm], timeout=60, responder=worker):
            raise RuntimeError("idle: the worker never answered")
        # What a start costs, to the first answer: every throughput phase's CPU per login includes
        # it, spread over that phase's logins.
        start_up_ms = worker.cpu_seconds() * 1000
        # The relay's and the idle marker's first rounds after the answer settle first.
        time.sleep(8)
        before, started = worker.cpu_seconds(), time.perf_counter()
        time.sleep(seconds)
        used, elapsed = worker.cpu_seconds() - before, time.perf_counter() - started
        share = used / elapsed * 100
        wait = worker.env.get("AUTH_KAFKA_FETCH_WAIT_MS", "the default")
        log(f"idle: the worker used {share:.2f} % of a core over {elapsed:.0f} s (fetch wait: {wait}); "
            f"{start_up_ms:,.0f} ms of CPU from its start to its first answer")
        return {"seconds": round(elapsed, 1), "worker_core_percent": round(share, 3),
                "start_up_cpu_ms": round(start_up_ms, 1)}
    finally:
        worker.stop()
        reader.close()
        services.drop(database)


def run_pgbench(services, seconds):
    database = services.database(f"auth_bench_pgbench{uuid.uuid4().hex[:6]}")
    script = os.path.join(services.scratch, "guest-rows.sql")
    with open(script, "w") as handle:
        handle.write(PGBENCH_SCRIPT)
    log(f"limits: pgbench, the rows of 100 guest logins per transaction, 4 clients, {seconds} s")
    output = subprocess.run(["pgbench", "-n", "-c", "4", "-j", "2", "-T", str(seconds), "-f", script, database],
                            check=True, capture_output=True, text=True).stdout
    tps = next(float(line.split("=")[1].split()[0]) for line in output.splitlines() if line.startswith("tps"))
    services.drop(database)
    log(f"limits: {tps * 100:,.0f} logins' rows/s")
    return {"transactions_per_second": tps, "logins_per_second": tps * 100}


def run_openssl(seconds):
    output = subprocess.run(["openssl", "speed", "-seconds", str(seconds), "rsa2048", "ecdsap256", "ed25519"],
                            capture_output=True, text=True).stdout
    rates = {}
    for line in output.splitlines():
        fields = line.split()
        if line.startswith("rsa 2048 bits"):
            rates["rsa2048_verify_per_s"] = float(fields[-1])
        if "EdDSA (Ed25519)" in line:
            rates["ed25519_sign_per_s"] = float(fields[-2])
        if "ecdsa (nistp256)" in line:
            rates["es256_sign_per_s"] = float(fields[-2])
    return rates


# MARK: - Report

def chart(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed: no chart")
        return
    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(17, 4.5))
    worker, floor = results["latency"], results["limits"]["broker_echo"]
    top = max(worker["p99_ms"], floor["p99_ms"]) * 2
    bins = [edge * top / 60 for edge in range(61)]
    left.hist([min(value, top) for value in worker["latencies_ms"]], bins=bins, color="#4878a8", alpha=0.8,
              label=f"worker: p50 {worker['p50_ms']} ms, p99 {worker['p99_ms']} ms")
    left.hist([min(value, top) for value in floor["latencies_ms"]], bins=bins, color="#999", alpha=0.6,
              label=f"broker echo: p50 {floor['p50_ms']} ms, p99 {floor['p99_ms']} ms")
    left.set_title(f"Guest login latency at {worker['achieved_rate']:,.0f}/s (half the maximum)")
    left.set_xlabel("request produced → answer produced, ms (record create times)")
    left.set_ylabel("requests")
    left.legend(fontsize=8)
    curve = results["latency_curve"]
    for responder, color in (("worker", "#4878a8"), ("echo", "#999")):
        points = sorted((entry["achieved_rate"], entry["p50_ms"], entry["p99_ms"]) for entry in curve
                        if entry["responder"] == responder)
        name = "worker" if responder == "worker" else "broker echo"
        middle.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=color, label=f"{name} p50")
        middle.plot([p[0] for p in points], [p[2] for p in points], marker="^", linestyle="--", color=color,
                    label=f"{name} p99")
    middle.set_title("Latency by offered rate")
    middle.set_xlabel("guest logins/s, paced")
    middle.set_ylabel("ms")
    middle.set_ylim(bottom=0)
    middle.legend(fontsize=8)
    sizes = [entry["batch_max"] for entry in results["batch"]]
    rates = [entry["rate"] for entry in results["batch"]]
    right.plot(sizes, rates, marker="o", color="#4878a8", label="worker, guest logins/s")
    right.axhline(results["limits"]["pgbench"]["logins_per_second"], color="#888", linestyle=":",
                  label="PostgreSQL ceiling (pgbench, rows of 100 logins per transaction)")
    right.set_xscale("log")
    right.set_xticks(sizes)
    right.set_xticklabels([str(size) for size in sizes])
    right.set_title("Throughput by AUTH_BATCH_MAX")
    right.set_xlabel("AUTH_BATCH_MAX")
    right.set_ylabel("logins/s")
    right.set_ylim(bottom=0)
    right.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    log(f"chart: {path}")


def vacuumed(phase):
    """A note for a paced phase's latency cell when autovacuum worked on its tables meanwhile."""
    runs = phase.get("autovacuum_runs")
    return f" (autovacuum's visit fell in the phase: {runs} table runs)" if runs else ""


def latency_spread(phase):
    """A repeated latency phase's spread, for its cell: the lowest and highest p99 of all its runs,
    and in how many of them autovacuum's first visit fell."""
    runs = phase.get("runs", [])
    if len(runs) < 2:
        return ""
    p99s = sorted(run["p99_ms"] for run in runs)
    visited = sum(1 for run in runs if run.get("autovacuum_runs"))
    return (f" (the median p99 of {len(runs)} runs: {p99s[0]} – {p99s[-1]} ms; autovacuum's visit in "
            f"{visited} of them)")


def report(results):
    limits = results["limits"]
    ceiling = limits["pgbench"]["logins_per_second"]
    openssl = limits["openssl"]
    latency, floor = results["latency"], limits["broker_echo"]
    duplicates = (results["guest"]["duplicates"] + results["apple"]["duplicates"]
                  + results["apple_nameless"]["duplicates"] + latency["duplicates"]
                  + results.get("refresh", {}).get("duplicates", 0)
                  + results.get("refresh_latency", {}).get("duplicates", 0))
    def spread(kind):
        runs = results[kind].get("runs", [])
        if len(runs) < 2:
            return ""
        rates = sorted(run["rate"] for run in runs)
        stolen = max(run["stolen"] for run in runs)
        return f" (median of {len(runs)}: {rates[0]:,.0f} – {rates[-1]:,.0f}; up to {stolen:.0%} stolen by the host)"

    echo_left = f" ({floor['unanswered']:,} left unanswered after 60 s)" if floor.get("unanswered") else ""
    lines = [
        "| measure | worker | limit on this machine, same run | ratio |",
        "|---|---|---|---|",
        f"| guest logins/s (preloaded, {results['guest']['count']:,}) | {results['guest']['rate']:,.0f}"
        f"{spread('guest')} | "
        f"{ceiling:,.0f} logins' rows/s (pgbench, 100 per transaction) | {results['guest']['rate'] / ceiling:.2f} |",
        f"| | | {openssl.get('es256_sign_per_s', 0):,.0f} ES256 signatures/s (openssl speed, one core) | "
        f"{results['guest']['rate'] / max(openssl.get('es256_sign_per_s', 1), 1):.2f} |",
        f"| Apple RS256 logins/s (preloaded, {results['apple']['count']:,}) | {results['apple']['rate']:,.0f}"
        f"{spread('apple')} | "
        f"{openssl.get('rsa2048_verify_per_s', 0):,.0f} RSA-2048 verifies/s (openssl speed, one core) | "
        f"{results['apple']['rate'] / max(openssl.get('rsa2048_verify_per_s', 1), 1):.2f} |",
        f"| the same without a profile name ({results['apple_nameless']['count']:,}) | "
        f"{results['apple_nameless']['rate']:,.0f}{spread('apple_nameless')} | | "
        f"{results['apple_nameless']['rate'] / max(openssl.get('rsa2048_verify_per_s', 1), 1):.2f} |",
    ]
    phone = results.get("phone")
    if phone:
        lines.append(f"| phone sign-ups/s (preloaded, {phone['count']:,}; each spends a texted code) | "
                     f"{phone['rate']:,.0f} | | |")
    refresh, refresh_paced = results.get("refresh"), results.get("refresh_latency")
    if refresh:
        lines.append(f"| refreshes/s (preloaded, {refresh['count']:,}; each rotates a guest's token) | "
                     f"{refresh['rate']:,.0f}{spread('refresh')} | | |")
    if refresh and refresh_paced and refresh_paced.get("cpu"):
        rate, cpu = refresh_paced["achieved_rate"] or refresh_paced["offered_rate"], refresh_paced["cpu"]
        worker_us, pg_us = cpu["responder_cores"] / rate * 1e6, cpu["postgres_cores"] / rate * 1e6
        full_worker, full_pg = refresh["worker_cpu_us_per_login"], refresh["postgres_cpu_us_per_login"]
        lines.append(f"| refresh latency at {refresh_paced['offered_rate']:,.0f}/s, p50 / p99; worker / PostgreSQL CPU "
                     f"per refresh | {refresh_paced['p50_ms']} / {refresh_paced['p99_ms']} ms; {worker_us:,.0f} / "
                     f"{pg_us:,.0f} µs | full batches: {full_worker:,.0f} / {full_pg:,.0f} µs | "
                     f"{worker_us / full_worker:.1f}× / {pg_us / full_pg:.1f}× |")
    lines += [
        f"| guest latency at {latency['achieved_rate']:,.0f}/s, p50 / p99 | "
        f"{latency['p50_ms']} / {latency['p99_ms']} ms{vacuumed(latency)}{latency_spread(latency)} | "
        f"broker echo at the same rate: "
        f"{floor['p50_ms']} / {floor['p99_ms']} ms{echo_left} | "
        f"{latency['p99_ms'] / max(floor['p99_ms'], 1):.1f}× (p99) |",
    ]
    inside = latency.get("inside_worker")
    if inside:
        lines.append(f"| the same, as the worker times it (poll to the answer acknowledged; histogram bounds) | "
                     f"p50 ≤ {inside['p50_at_most_ms']} / p99 ≤ {inside['p99_at_most_ms']} ms, "
                     f"{inside['within_25ms']:.0%} within 25 ms | | |")
        if inside.get("phases"):
            lines.append(f"| the same by phase (`auth_request_phase_seconds`), mean ms (p99 bound) | "
                         f"{phase_summary(inside)} | | |")
    for entry, who in ((latency, "worker"), (floor, "echo")):
        cpu = entry["cpu"]
        broker = cpu.get("broker_cores")
        rest = (cpu["machine_busy_cores"] - cpu["responder_cores"] - cpu["postgres_cores"] - cpu["load_generator_cores"]
                - (broker or 0))
        where = (f"broker {broker:.2f}, the rest {max(rest, 0):.2f}" if broker is not None
                 else f"broker and the rest {max(rest, 0):.2f}")
        lines.append(f"| CPU busy at {entry['achieved_rate']:,.0f}/s answered by the {who} | "
                     f"{cpu['machine_busy_cores']:.2f} of {cpu['cores']} cores | {who} {cpu['responder_cores']:.2f}, "
                     f"PostgreSQL {cpu['postgres_cores']:.2f}, load generator {cpu['load_generator_cores']:.2f}, "
                     f"{where}; stolen by the host {cpu.get('stolen_cores', 0):.2f} | |")
    for entry in sorted((e for e in results["latency_curve"] if e["responder"] == "worker"),
                        key=lambda e: e["offered_rate"]):
        echo = next((e for e in results["latency_curve"]
                     if e["responder"] == "echo" and e["offered_rate"] == entry["offered_rate"]), None)
        def stolen(e):
            return f" ({e['cpu'].get('stolen_cores', 0):.2f} core stolen)"

        limit = f"broker echo: {echo['p50_ms']} / {echo['p99_ms']} ms{stolen(echo)}" if echo else ""
        # PostgreSQL's own floor at that rate: pgbench's one-login transaction, from its start.
        paced = next((p for p in results.get("pgbench_paced", [])
                      if p["offered_rate"] == entry["offered_rate"] and p.get("transaction_p99_ms") is not None), None)
        ratio = ""
        if paced:
            limit += (f"; PostgreSQL, one login's transaction (pgbench): {paced['transaction_p50_ms']:.1f} / "
                      f"{paced['transaction_p99_ms']:.1f} ms")
            if echo:
                floor = echo["p99_ms"] + paced["transaction_p99_ms"]
                ratio = f"{entry['p99_ms'] / max(floor, 1e-9):.1f}× the two p99s summed ({floor:.1f} ms)"
        lines.append(f"| guest latency at {entry['offered_rate']:,.0f}/s, p50 / p99 | "
                     f"{entry['p50_ms']} / {entry['p99_ms']} ms{stolen(entry)}{vacuumed(entry)} | {limit} | {ratio} |")
    # What a login costs when batches are small: CPU per login at each paced rate against the
    # full-batch (preloaded) guest figures.
    full_worker = results.get("guest", {}).get("worker_cpu_us_per_login")
    full_pg = results.get("guest", {}).get("postgres_cpu_us_per_login")

    def per_login(entry):
        """A paced phase's worker and PostgreSQL CPU a login (µs), with the full-batch figures and
        the ratios to them as table cells; None when the phase has no CPU figures."""
        rate, cpu = entry.get("achieved_rate") or entry["offered_rate"], entry.get("cpu") or {}
        if not rate or "responder_cores" not in cpu:
            return None
        worker_us, pg_us = cpu["responder_cores"] / rate * 1e6, cpu["postgres_cores"] / rate * 1e6
        full = f"full batches: {full_worker:,.0f} / {full_pg:,.0f} µs" if full_worker and full_pg else ""
        ratio = f"{worker_us / full_worker:.1f}× / {pg_us / full_pg:.1f}×" if full_worker and full_pg else ""
        return worker_us, pg_us, full, ratio

    for entry in sorted((e for e in results["latency_curve"] if e["responder"] == "worker"),
                        key=lambda e: e["offered_rate"]):
        cost = per_login(entry)
        if cost is None:
            continue
        worker_us, pg_us, full, ratio = cost
        lines.append(f"| worker / PostgreSQL CPU per guest login at {entry['offered_rate']:,.0f}/s | "
                     f"{worker_us:,.0f} / {pg_us:,.0f} µs | {full} | {ratio} |")
        # The same rate's floors: the echo's CPU per message (the broker's client alone), and
        # PostgreSQL's per transaction of one login's statements paced by pgbench.
        echo = next((e for e in results["latency_curve"]
                     if e["responder"] == "echo" and e["offered_rate"] == entry["offered_rate"]), None)
        paced = next((p for p in results.get("pgbench_paced", []) if p["offered_rate"] == entry["offered_rate"]), None)
        if echo and paced and echo.get("cpu"):
            echo_rate = echo.get("achieved_rate") or echo["offered_rate"]
            echo_us = echo["cpu"]["responder_cores"] / echo_rate * 1e6
            pg_floor = paced.get("postgres_cpu_us_per_login")
            floor_text = f"PostgreSQL {pg_floor:,.0f} µs" if pg_floor is not None else "PostgreSQL unmeasured (read no CPU twice)"
            floor_ratio = f"{pg_us / max(pg_floor, 1):.1f}×" if pg_floor is not None else "–"
            lines.append(f"| the same rate's floors | | echo {echo_us:,.0f} µs per message; pgbench, one login's "
                         f"statements a transaction: {floor_text} | {worker_us / max(echo_us, 1):.1f}× / {floor_ratio} |")
            # Below which no design goes that commits each login's effects on their own: the
            # broker's client (the echo) plus a client's one round trip, and PostgreSQL's cost
            # of the smallest durable transaction, at the same rate.
            one_row = paced.get("one_row")
            if one_row:
                client_floor = echo_us + one_row["client_cpu_us"]
                lines.append(f"| the smallest durable transaction at that rate (pgbench, one row) | | PostgreSQL "
                             f"{one_row['postgres_cpu_us']:,.0f} µs, its client {one_row['client_cpu_us']:,.0f} µs; "
                             f"with the echo {client_floor:,.0f} µs | {worker_us / max(client_floor, 1):.1f}× / "
                             f"{pg_us / max(one_row['postgres_cpu_us'], 1):.1f}× |")
    # The same rates with each request allowed to wait for others (AUTH_BATCH_LINGER_MS).
    for entry in sorted(results.get("linger", []), key=lambda e: e["offered_rate"]):
        cost = per_login(entry)
        if cost is None:
            continue
        worker_us, pg_us, full, ratio = cost
        lines.append(f"| with AUTH_BATCH_LINGER_MS={entry['linger_ms']} at {entry['offered_rate']:,.0f}/s: "
                     f"p50 / p99; worker / PostgreSQL CPU per guest login | {entry['p50_ms']} / {entry['p99_ms']} ms; "
                     f"{worker_us:,.0f} / {pg_us:,.0f} µs | {full} | {ratio} |")
    kinds = (("guest", "guest login"), ("apple", "Apple login"), ("apple_nameless", "nameless Apple login"),
             ("refresh", "refresh"))
    start_up = results.get("idle", {}).get("start_up_cpu_ms")
    for kind, label in kinds:
        cpu_us = results.get(kind, {}).get("worker_cpu_us_per_login")
        if cpu_us:
            count = results[kind].get("count")
            share = f"; the start's share {start_up * 1000 / count:,.1f} µs" if start_up and count else ""
            lines.append(f"| worker CPU per {label} (start-up included) | {cpu_us:,.0f} µs | "
                         f"one core: {1e6 / cpu_us:,.0f}/s{share} | |")
    if start_up:
        lines.append(f"| worker CPU from a start to its first answer | {start_up:,.0f} ms | | |")
    for kind, label in kinds:
        pg_us, wal = results.get(kind, {}).get("postgres_cpu_us_per_login"), results.get(kind, {}).get("wal_bytes_per_login")
        if pg_us is not None:
            lines.append(f"| PostgreSQL CPU / WAL per {label} | {pg_us:,.0f} µs / {wal:,.0f} bytes | "
                         f"per 1,000/s: {pg_us / 1000:.2f} core, {wal / 1000:,.1f} MB/s of WAL | |")
    lines.append(f"| worker peak RSS (guest run) | {results['guest']['peak_rss_mib']:.0f} MiB | | |")
    lines.append(f"| requests answered more than once | {duplicates} | | |")
    idle = results["idle"]
    lines.append(f"| worker CPU while idle, default fetch wait (as on Apache Kafka) | "
                 f"{idle['worker_core_percent']:.2f} % of a core | | |")
    if "at_bench_fetch_wait" in idle:
        lines.append(f"| worker CPU while idle, {BENCH_FETCH_WAIT_MS} ms fetch wait (this broker holds each fetch) | "
                     f"{idle['at_bench_fetch_wait']['worker_core_percent']:.2f} % of a core | | |")
    batch = " · ".join(f"{entry['batch_max']}: {entry['rate']:,.0f}/s" for entry in results["batch"])
    lines.append(f"| guest logins/s by AUTH_BATCH_MAX | {batch} | | |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", required=True, help="the release auth-worker binary")
    parser.add_argument("--broker", choices=("mock", "mock-linked", "tansu"), default="mock",
                        help="mock: librdkafka's mock cluster in a process of its own (scripts/bench-broker.py, "
                             "on the confluent-kafka wheel's librdkafka, keeping each partition's last "
                             f"{BENCH_KEEP_SECONDS} s during paced phases; the default); mock-linked: the same "
                             "on the worker's own librdkafka (auth-bench broker), which keeps up to 5 MiB a "
                             "partition; tansu: the local Tansu broker through its compatibility proxy")
    parser.add_argument("--partitions", type=int, default=4,
                        help="partitions of each topic the run creates (default 4)")
    parser.add_argument("--bench", help="the release auth-bench binary (hosts the mock broker)")
    parser.add_argument("--brokers", help="with --broker tansu: the proxy's address")
    parser.add_argument("--broker-admin", help="with --broker tansu: the broker itself, for creating topics")
    parser.add_argument("--database-server", required=True, help="postgres://user@host:port")
    parser.add_argument("--fresh-broker", help="a shell command that empties the broker before each phase")
    parser.add_argument("--requests", type=int, default=20000, help="preloaded requests per throughput phase")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of the guest and Apple throughput phases; the median is reported")
    parser.add_argument("--apple-requests", type=int, default=10000)
    parser.add_argument("--latency-seconds", type=int, default=20)
    parser.add_argument("--latency-repeats", type=int, default=3,
                        help="runs of the half-load latency phase; the run with the median p99 is reported")
    parser.add_argument("--curve-rates", default="100,300,1000", help="paced rates for the latency curve")
    parser.add_argument("--curve-seconds", type=int, default=10)
    parser.add_argument("--linger-ms", type=int, default=20,
                        help="the paced rates from 300/s are run once more with AUTH_BATCH_LINGER_MS at this "
                             "(0: not)")
    parser.add_argument("--batch-requests", type=int, default=5000)
    parser.add_argument("--pgbench-seconds", type=int, default=15)
    parser.add_argument("--guest-only", action="store_true",
                        help="only the guest throughput phase (to compare two builds quickly)")
    parser.add_argument("--apple-nameless-only", action="store_true",
                        help="only the Apple phase with requests that carry no profile name")
    parser.add_argument("--apple-only", action="store_true",
                        help="only the Apple throughput phase (to compare two builds quickly)")
    parser.add_argument("--latency-at", type=float, metavar="RATE",
                        help="only the paced latency phase at RATE guest logins/s (to compare two builds quickly)")
    parser.add_argument("--purge-rows", type=int, default=0, metavar="N",
                        help="with --latency-at: seed N expired kept answers after the worker starts and run it "
                             "with AUTH_PURGE_INTERVAL_SECONDS=10, so its relay purges them in rounds while the "
                             "requests are paced; reports the latency near the rounds against the rest")
    parser.add_argument("--pgbench-at", type=float, metavar="RATE",
                        help="only pgbench's one-login transaction paced at RATE for --curve-seconds")
    parser.add_argument("--idle-only", action="store_true",
                        help="only the idle phase: the worker's CPU while no request arrives")
    parser.add_argument("--idle-seconds", type=int, default=30)
    parser.add_argument("--responder", choices=("worker", "echo"), default="worker",
                        help="with --latency-at: who answers (echo: the broker's own round trip)")
    parser.add_argument("--latency-method", choices=("guest", "apple", "refresh"), default="guest",
                        help="with --latency-at: the paced requests' method (apple: first sign-ins with a name; "
                             "refresh: each rotates the refresh token of a guest signed up before the clock starts)")
    parser.add_argument("--phone-only", action="store_true",
                        help="only the phone phase: codes asked for and opened as the SMS service would, then "
                             "the sign-ups with them preloaded and measured")
    parser.add_argument("--refresh-only", action="store_true",
                        help="only the refresh throughput phase (guests sign up, then their tokens are rotated)")
    parser.add_argument("--accounts", type=int, default=0, metavar="N",
                        help="only the phases at scale: guest sign-ups, returning Apple sign-ins, refreshes of "
                             "existing sessions and the paced p99 at 300/s, on copies of a small database (the "
                             "accounts the phases use, twice over) and then of N preloaded accounts (each made "
                             "once and kept), with the databases' and indexes' sizes")
    parser.add_argument("--worker-env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting every worker of the run gets, e.g. AUTH_DB_WRITERS=4 (repeatable)")
    parser.add_argument("--out", default=os.path.join(ROOT, ".local", "bench"))
    args = parser.parse_args()
    if not args.bench:
        parser.error("--bench (the auth-bench binary) is needed: it hosts the mock broker, the paced load and the echo")
    if args.broker == "tansu" and not (args.brokers and args.broker_admin):
        parser.error("--broker tansu needs --brokers and --broker-admin")
    os.makedirs(args.out, exist_ok=True)
    services = Services(args)
    results = {"limits": {}, "broker": args.broker}
    try:
        run(args, services, results)
    finally:
        services.close()


def run(args, services, results):
    # Each phase drops its database when it ends; those an interrupted run left behind are
    # dropped here, so they do not pile up on the disk. So are the integration tests' scratch
    # databases (`auth_test_<hex>`, which `swift test` run directly leaves, one a test, and
    # `scripts/test` drops at its start): with hundreds of them PostgreSQL's autovacuum launcher
    # cycles through every database, and a run measured PostgreSQL half as fast again.
    leftovers = services.value(
        "postgres", "SELECT string_agg(datname, ' ') FROM pg_database "
        "WHERE datname ~ '^auth_bench_[a-z_]+[0-9a-f]{6}$'").split()
    for name in leftovers:
        services.psql("postgres", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    scratch = services.value(
        "postgres", "SELECT string_agg(datname, ' ') FROM pg_database WHERE datname ~ '^auth_test_[0-9a-f]+$'").split()
    if scratch:
        log(f"dropping {len(scratch)} scratch databases the integration tests left (autovacuum visits each)")
        for name in scratch:
            services.psql("postgres", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    key_server = KeyServer()
    if args.accounts:
        accounts = run_accounts(services, key_server, args)
        table = report_accounts(accounts)
        print(table)
        with open(os.path.join(args.out, f"accounts-{args.accounts}.json"), "w") as handle:
            json.dump({str(k): v for k, v in accounts.items()}, handle, indent=2)
        return
    if args.latency_at:
        entry = run_latency(services, key_server, args.latency_at, args.curve_seconds, responder=args.responder,
                            method=args.latency_method, purge_rows=args.purge_rows,
                            extra={"AUTH_PURGE_INTERVAL_SECONDS": "10"} if args.purge_rows else None)
        print(json.dumps({k: v for k, v in entry.items() if k != "latencies_ms"}))
        return
    if args.pgbench_at:
        print(json.dumps(run_pgbench_paced(services, args.pgbench_at, args.curve_seconds)))
        return
    if args.idle_only:
        print(json.dumps(run_idle_both(services, key_server, args.idle_seconds)))
        return
    if args.guest_only or args.apple_only or args.apple_nameless_only or args.refresh_only or args.phone_only:
        kind = ("guest" if args.guest_only else "apple" if args.apple_only else "refresh" if args.refresh_only
                else "phone" if args.phone_only else "apple-nameless")
        entry = run_throughput(services, key_server, kind,
                               args.apple_requests if kind.startswith("apple") else args.requests)
        print(json.dumps(entry))
        return
    results["limits"]["openssl"] = run_openssl(3)
    results["limits"]["pgbench"] = run_pgbench(services, args.pgbench_seconds)
    results["guest"] = run_throughput_repeated(services, key_server, "guest", args.requests, args.repeats)
    results["apple"] = run_throughput_repeated(services, key_server, "apple", args.apple_requests, args.repeats)
    results["apple_nameless"] = run_throughput_repeated(
        services, key_server, "apple-nameless", args.apple_requests, args.repeats)
    # What a signed-in app sends most: a refresh, in full batches and paced at 300/s.
    results["refresh"] = run_throughput_repeated(services, key_server, "refresh", args.apple_requests, args.repeats)
    refresh_paced = run_latency(services, key_server, 300, args.curve_seconds, method="refresh")
    # Phone sign-ups with the codes the SMS service opened, preloaded.
    results["phone"] = run_throughput(services, key_server, "phone", args.apple_requests)
    results["refresh_latency"] = {k: v for k, v in refresh_paced.items() if k != "latencies_ms"}
    half = results["guest"]["rate"] / 2
    results["latency"] = run_latency_repeated(services, key_server, half, args.latency_seconds, args.latency_repeats)
    results["limits"]["broker_echo"] = run_latency(services, key_server, half, args.latency_seconds, responder="echo")
    results["latency_curve"] = []
    for rate in (float(text) for text in args.curve_rates.split(",") if text):
        for responder in ("worker", "echo"):
            entry = run_latency(services, key_server, rate, args.curve_seconds, responder=responder)
            results["latency_curve"].append({k: v for k, v in entry.items() if k != "latencies_ms"})
        results.setdefault("pgbench_paced", []).append(run_pgbench_paced(services, rate, args.curve_seconds))
    # The light-load trade on offer: the paced rates from 300/s up again, each request allowed to
    # wait for others to join its transaction (AUTH_BATCH_LINGER_MS).
    results["linger"] = []
    for rate in (float(text) for text in args.curve_rates.split(",") if text):
        if args.linger_ms <= 0 or rate < 300:
            continue
        entry = run_latency(services, key_server, rate, args.curve_seconds,
                            extra={"AUTH_BATCH_LINGER_MS": str(args.linger_ms)})
        results["linger"].append({**{k: v for k, v in entry.items() if k != "latencies_ms"},
                                  "linger_ms": args.linger_ms})
    results["idle"] = run_idle_both(services, key_server, args.idle_seconds)
    results["batch"] = []
    for size in (1, 10, 100, 500):
        entry = run_throughput(services, key_server, "guest", args.batch_requests if size > 1 else 1000,
                               extra={"AUTH_BATCH_MAX": str(size), "AUTH_MAX_IN_FLIGHT": str(max(size, 500))},
                               label=f"batch {size}")
        results["batch"].append({"batch_max": size, "rate": entry["rate"]})
    table = report(results)
    print(table)
    with open(os.path.join(args.out, "results.json"), "w") as handle:
        summary = {**results, "latency": {k: v for k, v in results["latency"].items() if k != "latencies_ms"}}
        summary["limits"] = {**results["limits"], "broker_echo": {
            k: v for k, v in results["limits"]["broker_echo"].items() if k != "latencies_ms"}}
        json.dump(summary, handle, indent=2)
    chart(results, os.path.join(args.out, "e2e.png"))


if __name__ == "__main__":
    main()
