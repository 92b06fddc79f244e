"""A gateway in Python: signs a guest in through the auth worker, opens the sealed session,
verifies the access token against the worker's JWK Set, and asks the worker about it.

    pip install confluent-kafka jwcrypto
    AUTH_KAFKA_BROKERS=127.0.0.1:19092 AUTH_WORKER_URL=http://127.0.0.1:8080 python3 gateway.py

Environment: AUTH_KAFKA_BROKERS; AUTH_WORKER_URL (the worker's HTTP port, for
/.well-known/jwks.json); AUTH_TOKEN_ISSUER and AUTH_TOKEN_AUDIENCE as the worker has them;
AUTH_TOPIC_REQUESTS and AUTH_TOPIC_RESULTS when the topics are renamed; AUTH_KAFKA_PROPERTIES_FILE,
the same `key=value` file of librdkafka properties (TLS, SASL) the worker reads, for a managed
broker. Prints one JSON line per step and exits 0 when every step worked.

Passkeys: with AUTH_EXAMPLE_AUTHENTICATOR set to a program that plays the browser's part (the
project's software authenticator, Tests/Tools/soft-authenticator.py, reads the options on stdin and
answers the credential), the guest also adds a passkey and signs in with it. A real gateway relays
`passkey_options` to the page (`PublicKeyCredential.parseCreationOptionsFromJSON`) and the page's
`credential.toJSON()` back, unchanged, as `data.credential`.

GitHub: with AUTH_EXAMPLE_GITHUB_STAND_IN set to the URL of the project's stand-in provider
(scripts/oauth-stand-in.py, flavor github, configured in the worker's providers file as `github`),
the example also signs in with GitHub: it makes a PKCE verifier and its S256 challenge, has the
stand-in's consent step issue a code for them (a real app opens GitHub's authorization page and
gets the code at its redirect URI), and sends the `oauth` request.

Phone numbers: with AUTH_EXAMPLE_SMS_KEY_FILE set to the SMS service's private key (an X25519 JWK;
the worker has its public half as AUTH_SMS_KEY and signs up by phone, AUTH_PHONE_CODE_SIGNUP=true),
the example also plays the SMS service: it asks for a code for AUTH_EXAMPLE_PHONE, reads
`auth.phone.code_requested` from the events topic (AUTH_TOPIC_EVENTS), opens the sealed code with
that key, and signs in with `phone_code`. A real SMS service texts the code instead.

Tenants: with AUTH_EXAMPLE_TENANT set to a tenant the worker serves (its tenants file), and
AUTH_EXAMPLE_TENANT_ISSUER to that tenant's AUTH_TOKEN_ISSUER, a second gateway sends its
requests in that tenant's name (the `tenant` attribute): it signs a guest in there, verifies the
token against the tenant's own JWK Set (`/tenants/<name>/.well-known/jwks.json`) and issuer, and
checks that the first gateway's token is unknown in that tenant.
"""
import base64
import hashlib
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from jwcrypto import jwe, jwk, jwt

BROKERS = os.environ["AUTH_KAFKA_BROKERS"]
WORKER_URL = os.environ.get("AUTH_WORKER_URL", "http://127.0.0.1:8080").rstrip("/")
REQUESTS = os.environ.get("AUTH_TOPIC_REQUESTS", "auth.login.requests")
RESULTS = os.environ.get("AUTH_TOPIC_RESULTS", "auth.login.results")
ISSUER = os.environ.get("AUTH_TOKEN_ISSUER", "auth-worker")
AUDIENCE = os.environ.get("AUTH_TOKEN_AUDIENCE", "api")
AUTHENTICATOR = os.environ.get("AUTH_EXAMPLE_AUTHENTICATOR")
ORIGIN = os.environ.get("AUTH_EXAMPLE_ORIGIN", "https://example.com")
GITHUB_STAND_IN = os.environ.get("AUTH_EXAMPLE_GITHUB_STAND_IN")
REDIRECT_URI = os.environ.get("AUTH_EXAMPLE_REDIRECT_URI", "com.example.app://oauth/callback")
EVENTS = os.environ.get("AUTH_TOPIC_EVENTS", "auth.user.events")
SMS_KEY_FILE = os.environ.get("AUTH_EXAMPLE_SMS_KEY_FILE")
PHONE = os.environ.get("AUTH_EXAMPLE_PHONE", "+14155550100")
TENANT = os.environ.get("AUTH_EXAMPLE_TENANT")
TENANT_ISSUER = os.environ.get("AUTH_EXAMPLE_TENANT_ISSUER", ISSUER)


def kafka_properties():
    """The librdkafka properties in AUTH_KAFKA_PROPERTIES_FILE (`key=value` lines, `#` comments):
    confluent-kafka takes librdkafka's names as they are."""
    path = os.environ.get("AUTH_KAFKA_PROPERTIES_FILE")
    if not path:
        return {}
    properties = {}
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            line = line.strip()
            if line and not line.startswith("#"):
                key, _, value = line.partition("=")
                properties[key.strip()] = value.strip()
    return properties


KAFKA = {"bootstrap.servers": BROKERS, **kafka_properties()}


def texted_code(events, phone, timeout=15):
    """What the SMS service does: the newest `auth.phone.code_requested` for `phone`, its code opened."""
    key = jwk.JWK.from_json(open(SMS_KEY_FILE).read())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = events.poll(0.2)
        if message is None or message.error():
            continue
        event = json.loads(message.value())
        if event.get("type") != "auth.phone.code_requested" or event["data"]["phone"] != phone:
            continue
        sealed = jwe.JWE()
        sealed.deserialize(event["data"]["sealed_secret"], key=key)
        return json.loads(sealed.payload)["code"]
    raise TimeoutError(f"no code texted to {phone}")


def phone_sign_in(gateway):
    """`phone_code_request`, the code from the SMS service's event, `phone_code`."""
    events = Consumer({**KAFKA, "group.id": f"sms-{uuid.uuid4()}",
                       "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 10})
    # Every partition from its start (an SMS service would subscribe as a consumer group).
    partitions = events.list_topics(EVENTS, timeout=10).topics[EVENTS].partitions
    events.assign([TopicPartition(EVENTS, partition, OFFSET_BEGINNING) for partition in partitions])
    try:
        asked = gateway.call({"method": "phone_code_request", "phone": PHONE, "locale": "en",
                              "client_id": "python-example", "context": {"ip": "203.0.113.7"}})
        assert asked["status"] == "ok" and "user" not in asked, asked
        code = texted_code(events, PHONE)
    finally:
        events.close()
    signed_in = gateway.call({"method": "phone_code", "phone": PHONE, "code": code,
                              "device": {"name": "Python example", "platform": "cli"}})
    assert signed_in["status"] == "ok", signed_in
    assert signed_in["user"]["phone"] == PHONE and signed_in["user"]["phone_verified"], signed_in["user"]
    # The same code again: used up.
    again = gateway.call({"method": "phone_code", "phone": PHONE, "code": code})
    assert again["error"]["code"] == "invalid_code", again
    return {"user": signed_in["user"]["id"], "phone": PHONE, "session_opened": "session" in signed_in}


def github_sign_in(gateway):
    """An `oauth` sign-in: the app's PKCE pair, the code the consent step gives, the worker's answer."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    consent = urllib.request.Request(
        GITHUB_STAND_IN.rstrip("/") + "/control/authorize", method="POST",
        data=json.dumps({"user": {"id": 583231, "login": "octocat", "name": "The Octocat"},
                         "emails": [{"email": "octocat@example.com", "primary": True, "verified": True}],
                         "redirect_uri": REDIRECT_URI, "code_challenge": challenge,
                         "code_challenge_method": "S256"}).encode())
    code = json.loads(urllib.request.urlopen(consent, timeout=5).read())["code"]
    signed_in = gateway.call({"method": "oauth", "provider": "github", "code": code, "code_verifier": verifier,
                              "redirect_uri": REDIRECT_URI, "device": {"name": "Python example", "platform": "cli"}})
    assert signed_in["status"] == "ok", signed_in
    assert signed_in["user"]["providers"] == ["github"], signed_in["user"]
    # The same code again (a redelivery after the exchange): the provider refuses it, once spent.
    again = gateway.call({"method": "oauth", "provider": "github", "code": code, "code_verifier": verifier,
                          "redirect_uri": REDIRECT_URI})
    assert again["error"]["code"] == "invalid_code", again
    return {"user": signed_in["user"]["id"], "email": signed_in["user"]["email"], "reused_code": "invalid_code"}


def tenant_sign_in(other_token):
    """A gateway of another app: its guest's token is its tenant's (its `tenant` claim), signed with
    its keys, and the first gateway's token is unknown there."""
    gateway = AuthGateway(tenant=TENANT)
    try:
        signed_in = gateway.call({"method": "guest", "device": {"name": "Python example", "platform": "cli"}})
        assert signed_in["status"] == "ok", signed_in
        token = signed_in["session"]["access_token"]
        keys = jwk.JWKSet.from_json(urllib.request.urlopen(
            f"{WORKER_URL}/tenants/{TENANT}/.well-known/jwks.json", timeout=5).read())
        claims = json.loads(jwt.JWT(jwt=token, key=keys, algs=["ES256", "EdDSA"],
                                    check_claims={"iss": TENANT_ISSUER, "aud": AUDIENCE, "exp": None,
                                                  "tenant": TENANT}).claims)
        unknown = gateway.call({"method": "introspect", "access_token": other_token})["introspection"]
        assert unknown == {"active": False}, unknown
        return {"tenant": TENANT, "user": claims["sub"], "iss": claims["iss"], "other_tenants_token_active": False}
    finally:
        gateway.close()


def browser(command):
    """What the page does with passkey_options: here, the software authenticator."""
    answer = subprocess.run([sys.executable, AUTHENTICATOR], input=json.dumps({**command, "origin": ORIGIN}),
                            capture_output=True, text=True, check=True)
    return json.loads(answer.stdout)


def passkey_sign_up_and_sign_in(gateway, guest_token):
    """A guest adds a passkey (it becomes a member, same user id), then signs in with it."""
    options = gateway.call({"method": "passkey_register_options", "access_token": guest_token})["passkey_options"]
    made = browser({"op": "create", "options": options, "alg": "ES256"})
    added = gateway.call({"method": "passkey_register", "access_token": guest_token,
                          "credential": made["response"], "name": "Python example"})
    assert added["status"] == "ok" and not added["user"]["is_guest"], added
    options = gateway.call({"method": "passkey_login_options"})["passkey_options"]
    asserted = browser({"op": "get", "options": options, "credential": made["credential"], "sign_count": 1})
    signed_in = gateway.call({"method": "passkey_login", "credential": asserted["response"],
                              "device": {"name": "Python example", "platform": "cli"}})
    assert signed_in["status"] == "ok" and signed_in["user"]["id"] == added["user"]["id"], signed_in
    return {"user": added["user"]["id"], "passkey": added["passkey"]["name"], "session_opened": "session" in signed_in}


class AuthGateway:
    """Publishes requests and reads their answers: every partition of the results topic, from its
    end when the gateway starts, matched to requests by the Kafka key (the request's id)."""

    def __init__(self, tenant=None):
        self.tenant = tenant
        self.producer = Producer({**KAFKA, "enable.idempotence": True, "linger.ms": 0})
        self.consumer = Consumer({**KAFKA, "group.id": f"gateway-{uuid.uuid4()}",
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        partitions = self.consumer.list_topics(RESULTS, timeout=10).topics[RESULTS].partitions
        assignment = []
        for partition in partitions:
            _, high = self.consumer.get_watermark_offsets(TopicPartition(RESULTS, partition), timeout=10)
            assignment.append(TopicPartition(RESULTS, partition, high))
        self.consumer.assign(assignment)
        self.early = {}

    def call(self, data, timeout=15):
        """Sends one request; returns its result's data, the session opened if it came sealed."""
        request_id = str(uuid.uuid4())
        reply_key = None
        if data["method"] not in ("logout", "introspect"):
            reply_key = jwk.JWK.generate(kty="OKP", crv="X25519")
            data = {**data, "reply_key": reply_key.export_public(as_dict=True)["x"]}
        event = {"specversion": "1.0", "id": request_id, "source": "/gateway/python-example",
                 "type": "auth.login.request", "datacontenttype": "application/json", "data": data}
        if self.tenant:
            event["tenant"] = self.tenant
        self.producer.produce(REQUESTS, key=request_id, value=json.dumps(event),
                              headers={"content-type": "application/cloudevents+json"})
        self.producer.flush(10)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if request_id in self.early:
                value = self.early.pop(request_id)
                break
            message = self.consumer.poll(0.2)
            if message is None or message.error():
                continue
            key = (message.key() or b"").decode()
            if key == request_id:
                value = message.value()
                break
            self.early[key] = message.value()
        else:
            raise TimeoutError(f"no answer to {request_id}")
        answer = json.loads(value)
        assert answer.get("tenant") == self.tenant, answer  # an answer names the tenant its request did
        result = answer["data"]
        if "sealed_session" in result:
            token = jwe.JWE()
            token.deserialize(result.pop("sealed_session"), key=reply_key)
            result["session"] = json.loads(token.payload)
        return result

    def close(self):
        self.consumer.close()


def main():
    gateway = AuthGateway()
    steps = {}
    try:
        signed_in = gateway.call({"method": "guest", "device": {"name": "Python example", "platform": "cli"}})
        assert signed_in["status"] == "ok", signed_in
        access_token = signed_in["session"]["access_token"]
        steps["login"] = {"user": signed_in["user"]["id"], "new_user": signed_in["new_user"],
                          "session_opened": True}

        # Verify the access token locally, as any API behind the gateway would.
        keys = jwk.JWKSet.from_json(urllib.request.urlopen(WORKER_URL + "/.well-known/jwks.json", timeout=5).read())
        verified = jwt.JWT(jwt=access_token, key=keys, algs=["ES256", "EdDSA"],
                           check_claims={"iss": ISSUER, "aud": AUDIENCE, "exp": None})
        claims = json.loads(verified.claims)
        assert claims["sub"] == signed_in["user"]["id"], claims
        steps["verify"] = {"sub": claims["sub"], "abilities": claims["abilities"]}

        if AUTHENTICATOR:
            steps["passkey"] = passkey_sign_up_and_sign_in(gateway, access_token)

        if GITHUB_STAND_IN:
            steps["github"] = github_sign_in(gateway)

        if SMS_KEY_FILE:
            steps["phone"] = phone_sign_in(gateway)

        if TENANT:
            steps["tenant"] = tenant_sign_in(access_token)

        introspected = gateway.call({"method": "introspect", "access_token": access_token})["introspection"]
        assert introspected["active"] and introspected["sid"] == claims["sid"], introspected
        steps["introspect"] = introspected

        assert gateway.call({"method": "logout", "access_token": access_token})["status"] == "ok"
        ended = gateway.call({"method": "introspect", "access_token": access_token})["introspection"]
        assert ended == {"active": False}, ended
        steps["logout"] = {"active_after_logout": ended["active"]}
    finally:
        gateway.close()
    for name, value in steps.items():
        print(json.dumps({"step": name, **value}, sort_keys=True))


if __name__ == "__main__":
    sys.exit(main())
