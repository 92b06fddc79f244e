"""A local stand-in for an OAuth 2.0 provider that issues no ID token, for tests and the example.

    python3 scripts/oauth-stand-in.py PORT_FILE FLAVOR CLIENT_ID CLIENT_SECRET_FILE

FLAVOR is the provider it behaves as, each as that provider documents its authorization code flow:

- `github` ("Authorizing OAuth apps", "REST API endpoints for users" and "... for emails"): the
  token endpoint is `POST /login/oauth/access_token` with `client_id` and `client_secret` in the
  form (client_secret_post), `code`, `redirect_uri` and `code_verifier`; it answers JSON only to
  `Accept: application/json` (form-encoded otherwise) and reports a refused exchange with HTTP 200
  and an `error` member (`bad_verification_code`, `incorrect_client_credentials`,
  `redirect_uri_mismatch`). The API (`GET /user`, `GET /user/emails`) wants `Authorization: Bearer`
  (or `token`), a `User-Agent`, and `Accept: application/vnd.github+json`; the user's `id` is a
  number, and `/user/emails` lists addresses with `primary` and `verified`.
- `discord` ("OAuth2" in Discord's developer documentation): `POST /api/oauth2/token` with the
  client authenticated by HTTP Basic (client_secret_basic), `grant_type=authorization_code`; refusals
  are RFC 6749's (HTTP 400, `invalid_grant`, `invalid_client`); `GET /api/users/@me` answers the user
  with a string `id`, `verified` and `email`.
- `naver` (Naver Login API): `POST /oauth2.0/token` with `client_id` and `client_secret` in the form;
  a refused code is HTTP 200 with `error` (`invalid_request`); `GET /v1/nid/me` wraps the profile in
  `{"resultcode": "00", "message": "success", "response": {...}}`.

Every flavor checks, as its provider does, and refuses anything else: the client's id and secret;
`grant_type=authorization_code` where the provider asks for it; the code, which it issued, used
once, within ten minutes; the `redirect_uri` the code was issued for; PKCE S256 (RFC 7636: the
verifier's SHA-256, base64url, equals the challenge the code was issued for, and a code issued with
a challenge needs a verifier); the API's bearer token, which it issued and has not expired.

Control (for the tests, never part of the flavor's API):
- `POST /control/authorize` `{"user": {...}, "emails": [...], "redirect_uri": ..., "code_challenge":
  ..., "code_challenge_method": "S256"}` answers `{"code": ...}`: what the provider's consent page
  would give the app for that user.
- `POST /control/mode` `{"down": bool, "delay": seconds}`: every provider endpoint answers 503 while
  down, and waits `delay` seconds before answering.
- `POST /control/expire` `{"code": ...}`: the code's ten minutes are up.
- `GET /control/state`: what was exchanged, the access tokens issued, every refusal with its reason,
  the API calls served, and how many requests reached the provider's endpoints.
"""
import base64
import hashlib
import hmac
import json
import os
import secrets
import signal
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port_file, FLAVOR, CLIENT_ID, secret_file = sys.argv[1:5]
if FLAVOR not in ("github", "discord", "naver"):
    sys.exit(f"unknown flavor {FLAVOR}")
# A parent that blocks SIGTERM (a test runner) passes the mask on: take it back.
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
CLIENT_SECRET = open(secret_file).read().strip()
CODE_LIFETIME = 600
TOKEN_LIFETIME = 3600
TOKEN_PATHS = {"github": "/login/oauth/access_token", "discord": "/api/oauth2/token", "naver": "/oauth2.0/token"}
lock = threading.Lock()
state = {"exchanged": [], "refused": [], "api_calls": [], "issued": [], "requests": 0, "down": False, "delay": 0.0}
codes = {}  # code -> {user, emails, redirect_uri, challenge, method, issued, used}
tokens = {}  # access token -> {user, emails, expires}


def same(a, b):
    return hmac.compare_digest(a.encode(), b.encode())


class Refusal(Exception):
    def __init__(self, status, error, why):
        super().__init__(why)
        self.status, self.error, self.why = status, error, why


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        if os.environ.get("OAUTH_STAND_IN_LOG"):
            sys.stderr.write("%s %s\n" % (self.address_string(), format % args))

    def send(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        """The request's body, read by `do_POST` before anything else (a refusal or a 503 still
        reads it, keeping the kept-alive connection in step)."""
        return self.raw

    def note_refusal(self, refusal):
        with lock:
            state["refused"].append({"path": self.path, "error": refusal.error, "why": refusal.why})

    # -- control --

    def control(self, method):
        if method == "GET" and self.path == "/control/state":
            with lock:
                return self.send(200, state)
        payload = json.loads(self.body() or "{}")
        if self.path == "/control/authorize":
            code = secrets.token_urlsafe(20)
            with lock:
                codes[code] = {"user": payload["user"], "emails": payload.get("emails", []),
                               "redirect_uri": payload.get("redirect_uri"),
                               "challenge": payload.get("code_challenge"),
                               "method": payload.get("code_challenge_method"), "issued": time.time(),
                               "used": False}
            return self.send(200, {"code": code})
        if self.path == "/control/mode":
            with lock:
                state["down"] = bool(payload.get("down", False))
                state["delay"] = float(payload.get("delay", 0))
            return self.send(200, {})
        if self.path == "/control/expire":
            with lock:
                if payload["code"] in codes:
                    codes[payload["code"]]["issued"] -= CODE_LIFETIME + 1
            return self.send(200, {})
        self.send(404, {"error": "not_found"})

    def provider_gate(self):
        """Down and slow, as the tests set them; True when the request was answered already."""
        with lock:
            state["requests"] += 1
            down, delay = state["down"], state["delay"]
        if delay:
            time.sleep(delay)
        if down:
            self.send(503, {"message": "Service Unavailable"})
            return True
        return False

    # -- the token endpoint --

    def client_credentials(self, form):
        if FLAVOR == "discord":
            header = self.headers.get("Authorization", "")
            if not header.startswith("Basic "):
                raise Refusal(401, "invalid_client", "client authentication is HTTP Basic")
            try:
                client_id, _, secret = base64.b64decode(header[6:]).decode().partition(":")
            except Exception:  # noqa: BLE001 - any undecodable header is a refused client
                raise Refusal(401, "invalid_client", "the Basic credentials do not decode")
            client_id, secret = urllib.parse.unquote_plus(client_id), urllib.parse.unquote_plus(secret)
            if "client_secret" in form:
                raise Refusal(400, "invalid_request", "the client authenticated two ways")
        else:
            client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        if not same(client_id, CLIENT_ID) or not same(secret, CLIENT_SECRET):
            error = "incorrect_client_credentials" if FLAVOR == "github" else "invalid_client"
            raise Refusal(401, error, "the client id or secret is wrong")

    def redeem(self, form):
        code = form.get("code", "")
        with lock:
            grant = codes.get(code)
            if grant is None or grant["used"]:
                raise Refusal(400, "bad_verification_code", "the code is unknown or used")
            if time.time() - grant["issued"] > CODE_LIFETIME:
                raise Refusal(400, "bad_verification_code", "the code expired")
            if form.get("redirect_uri") != grant["redirect_uri"]:
                raise Refusal(400, "redirect_uri_mismatch", "redirect_uri is not the one the code was issued for")
            if grant["challenge"] is not None:
                verifier = form.get("code_verifier")
                if not verifier:
                    raise Refusal(400, "bad_verification_code", "the code was issued with a challenge: no verifier")
                if grant["method"] != "S256":
                    raise Refusal(400, "bad_verification_code", "only S256 challenges")
                digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
                if not same(digest, grant["challenge"]):
                    raise Refusal(400, "bad_verification_code", "the verifier does not match the challenge")
            grant["used"] = True
            token = secrets.token_urlsafe(24)
            tokens[token] = {"user": grant["user"], "emails": grant["emails"], "expires": time.time() + TOKEN_LIFETIME}
            state["exchanged"].append(code)
            state["issued"].append(token)
        return token

    def token_endpoint(self):
        raw = self.body()
        if self.headers.get("Content-Type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
            return self.refuse_exchange(Refusal(400, "invalid_request", "the body is not a form"))
        form = {key: values[0] for key, values in urllib.parse.parse_qs(raw, keep_blank_values=True).items()}
        try:
            self.client_credentials(form)
            if FLAVOR != "github" and form.get("grant_type") != "authorization_code":
                raise Refusal(400, "unsupported_grant_type", "grant_type must be authorization_code")
            token = self.redeem(form)
        except Refusal as refusal:
            return self.refuse_exchange(refusal)
        answer = {"access_token": token, "token_type": "bearer", "scope": "read:user,user:email"}
        if FLAVOR == "github" and "application/json" not in self.headers.get("Accept", ""):
            # GitHub answers form-encoded unless asked for JSON.
            return self.send(200, urllib.parse.urlencode(answer).encode(), "application/x-www-form-urlencoded")
        if FLAVOR != "github":
            answer.update(token_type="Bearer", expires_in=TOKEN_LIFETIME)
        self.send(200, answer)

    def refuse_exchange(self, refusal):
        self.note_refusal(refusal)
        if FLAVOR == "discord":
            error = {"bad_verification_code": "invalid_grant", "redirect_uri_mismatch": "invalid_grant"}.get(
                refusal.error, refusal.error)
            return self.send(refusal.status, {"error": error, "error_description": refusal.why})
        # GitHub and Naver report a refused exchange in a 200 answer.
        error = refusal.error if FLAVOR == "github" else "invalid_request"
        self.send(200, {"error": error, "error_description": refusal.why})

    # -- the API --

    def bearer(self):
        header = self.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        accepted = ("bearer", "token") if FLAVOR == "github" else ("bearer",)
        if scheme.lower() not in accepted or not token:
            raise Refusal(401, "unauthorized", "no bearer token")
        with lock:
            grant = tokens.get(token)
        if grant is None or grant["expires"] < time.time():
            raise Refusal(401, "unauthorized", "the token is unknown or expired")
        if FLAVOR == "github":
            if not self.headers.get("User-Agent"):
                raise Refusal(403, "forbidden", "GitHub refuses API requests without a User-Agent")
            if self.headers.get("Accept", "") != "application/vnd.github+json":
                raise Refusal(415, "unsupported_media_type", "Accept must be application/vnd.github+json")
        return grant

    def api(self):
        routes = {("github", "/user"): "user", ("github", "/user/emails"): "emails",
                  ("discord", "/api/users/@me"): "user", ("naver", "/v1/nid/me"): "user"}
        route = routes.get((FLAVOR, self.path))
        if route is None:
            return self.send(404, {"message": "Not Found"})
        try:
            grant = self.bearer()
        except Refusal as refusal:
            self.note_refusal(refusal)
            return self.send(refusal.status, {"message": refusal.why})
        with lock:
            state["api_calls"].append(self.path)
        if route == "emails":
            return self.send(200, grant["emails"])
        if FLAVOR == "naver":
            return self.send(200, {"resultcode": "00", "message": "success", "response": grant["user"]})
        self.send(200, grant["user"])

    def do_GET(self):
        self.raw = ""
        if self.path.startswith("/control/"):
            return self.control("GET")
        if self.provider_gate():
            return
        self.api()

    def do_POST(self):
        self.raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        if self.path.startswith("/control/"):
            return self.control("POST")
        if self.provider_gate():
            return
        if self.path == TOKEN_PATHS[FLAVOR]:
            return self.token_endpoint()
        self.send(404, {"message": "Not Found"})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
with open(port_file + ".tmp", "w") as out:
    out.write(str(server.server_address[1]))
os.replace(port_file + ".tmp", port_file)
server.serve_forever()
