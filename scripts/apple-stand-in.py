"""A local stand-in for Sign in with Apple's token and revoke endpoints, for tests.

    python3 scripts/apple-stand-in.py PORT_FILE PUBLIC_KEY_PEM TEAM_ID KEY_ID CLIENT_ID

It checks every request as Apple documents it ("Generate and validate tokens", "Revoke tokens"):
a POST of application/x-www-form-urlencoded; `client_id` the one configured; `client_secret` an
ES256 JWT signed by the team's key (verified with PyJWT and the public key), `kid` its key id,
`iss` the team id, `sub` the client id, `aud` https://appleid.apple.com, `iat` not in the future,
`exp` after now and at most six months after `iat`; `grant_type=authorization_code` with a
`code`, or a `token` with `token_type_hint=refresh_token`. Anything else is refused
(`invalid_client`, `invalid_request`, `invalid_grant`), as Apple would.

Codes that start with `good-` exchange once for the refresh token `rt-<code>`; any other code, or
one used already, is `invalid_grant`. Only refresh tokens it issued revoke.

Control (for the tests): GET /control/state (what was exchanged, revoked and refused),
POST /control/down (every Apple endpoint answers 503 until) POST /control/up.
"""
import json
import signal
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt

port_file, public_key_file, TEAM_ID, KEY_ID, CLIENT_ID = sys.argv[1:6]
# A parent that blocks SIGTERM (a test runner) passes the mask on: take it back.
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
PUBLIC_KEY = open(public_key_file).read()
SIX_MONTHS = 15777000
lock = threading.Lock()
state = {"exchanged": [], "revoked": [], "refused": [], "down": False, "issued": {}}


def check_client(form):
    if form.get("client_id") != CLIENT_ID:
        return "client_id is not the configured one"
    secret = form.get("client_secret", "")
    try:
        header = jwt.get_unverified_header(secret)
        claims = jwt.decode(secret, PUBLIC_KEY, algorithms=["ES256"], audience="https://appleid.apple.com",
                            issuer=TEAM_ID, options={"require": ["iss", "iat", "exp", "aud", "sub"]})
    except Exception as error:  # noqa: BLE001 - any failure is a refused client
        return f"client_secret: {type(error).__name__}: {error}"
    now = time.time()
    if header.get("alg") != "ES256" or header.get("kid") != KEY_ID:
        return "client_secret header must be alg ES256 with the key id"
    if claims["sub"] != CLIENT_ID:
        return "client_secret sub must be the client id"
    if claims["iat"] > now + 60:
        return "client_secret iat is in the future"
    if claims["exp"] - claims["iat"] > SIX_MONTHS:
        return "client_secret lives longer than six months"
    return None


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def refuse(self, status, error, why):
        with lock:
            state["refused"].append({"path": self.path, "error": error, "why": why})
        self.answer(status, {"error": error})

    def do_GET(self):
        if self.path == "/control/state":
            with lock:
                self.answer(200, {key: value for key, value in state.items() if key != "issued"})
        else:
            self.answer(404, {"error": "not_found"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode()
        if self.path in ("/control/down", "/control/up"):
            with lock:
                state["down"] = self.path.endswith("down")
            return self.answer(200, {})
        with lock:
            down = state["down"]
        if down:
            return self.answer(503, {"error": "temporarily_unavailable"})
        if self.headers.get("Content-Type", "").split(";")[0] != "application/x-www-form-urlencoded":
            return self.refuse(400, "invalid_request", "content type is not a form")
        form = {key: values[0] for key, values in urllib.parse.parse_qs(raw, keep_blank_values=True).items()}
        problem = check_client(form)
        if problem:
            return self.refuse(400, "invalid_client", problem)
        if self.path == "/auth/token":
            if form.get("grant_type") != "authorization_code" or not form.get("code"):
                return self.refuse(400, "invalid_request", "grant_type authorization_code with a code")
            code = form["code"]
            with lock:
                used = code in state["exchanged"]
                if code.startswith("good-") and not used:
                    state["exchanged"].append(code)
                    state["issued"]["rt-" + code] = True
                    refresh = "rt-" + code
                else:
                    refresh = None
            if refresh is None:
                return self.refuse(400, "invalid_grant", "the code is unknown, expired or used")
            return self.answer(200, {"access_token": "at-" + code, "token_type": "Bearer", "expires_in": 3600,
                                     "refresh_token": refresh, "id_token": "not-checked-here"})
        if self.path == "/auth/revoke":
            if form.get("token_type_hint") != "refresh_token" or not form.get("token"):
                return self.refuse(400, "invalid_request", "token with token_type_hint refresh_token")
            with lock:
                known = state["issued"].pop(form["token"], False)
                if known:
                    state["revoked"].append(form["token"])
            if not known:
                return self.refuse(400, "invalid_request", "not a token this stand-in issued, or revoked already")
            return self.answer(200, {})
        self.answer(404, {"error": "not_found"})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as out:
    out.write(str(server.server_address[1]))
import os  # noqa: E402
os.replace(port_file + ".tmp", port_file)
server.serve_forever()
