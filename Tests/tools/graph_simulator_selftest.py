#!/usr/bin/env python3
"""Self-test for graph_simulator.py (make test runs it after the Swift tests).

Makes throwaway certificates with `cryptography` (a CA and a "localhost" server
certificate for the simulator's HTTPS port; a self-signed "localhost" certificate, like
ENS's nginx one, for its own notification endpoint, given to the simulator as
--callback-ca; an RSA application certificate and key for each of two tenants), starts
the simulator on free ports, and plays ENS: client assertions signed with RS256 and
PS256, Graph calls over one keep-alive HTTPS connection, and two small HTTPS receivers
(ThreadingHTTPServer with TLS) standing in for ENS's notification endpoint, with
programmable answers per path (validation echoed correctly, as JSON, with 201,
re-encoded, or late; notifications answered 202/200/500/403, first-failing or slowly).
It checks every rule of the simulator's docstring: the token endpoint's checks in order
and its successes, replayed/expired/mis-addressed assertions; /me, message and folder
GETs ($select, Mail.ReadBasic, 404 after delete), tenant isolation, RBAC scope, delegated
limits; subscription create/list/get/patch/reauthorize/delete and their errors; the
validation handshake (two requests, percent-encoded tokens, each failure's 400);
delivery shape, batching, duplicates, retries, 4xx and lifecycle violations, paused
backlog, subscriptionRemoved, endpoint slow/drop states, the 4-hour retry window;
per-mailbox concurrency 429 and Retry-After; the clock; /reset; logging hygiene and
SIGTERM. Rich notifications: device certificates from graph_decrypt.py, the decrypted
content (exactly the $select properties), the HMAC check, every validation token
verified independently (openid configuration and JWKS over HTTPS, RS256 with
`cryptography`, the claims), each blindFault, signing key rotation, certificate
rotation by PATCH, reauthorizeGraceSeconds, the fetch counters and graph_decrypt.py's
command line. Prints one summary line; exits 0 only when every check passed. About 25 s.

Usage: python3 Tests/tools/graph_simulator_selftest.py
  GRAPH_SELFTEST_PORTS=47000-47100 takes every port (simulator and receivers) from that
  range instead of any free one.
"""
import base64
import collections
import datetime
import hashlib
import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, quote, urlencode

from cryptography import x509
from cryptography.hazmat.primitives import hashes, hmac, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

import graph_decrypt
from simlib import certs, selftest
from simlib.selftest import Failed, b64url, check, free_port, wait_for

GRAPH_SCOPE = "https://graph.microsoft.com/.default"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
DELEGATED_APP = "7f0c8a41-3d2e-4b6a-9c55-0e1f2a3b4c5d"
VALIDATION_FAILED = ("Subscription validation request failed. Notification endpoint must "
                     "respond with 200 OK to validation request.")
VALIDATION_TIMEOUT = "Subscription validation request timed out."
PREFER = {"Prefer": 'IdType="ImmutableId"'}
SEVEN = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{7}(Z|[+-]\d{2}:\d{2})")
GUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
OFFSET = 0.0       # the simulator clock's offset, as moved by this test
SECRETS = []       # strings that must never reach the simulator's log


def pick_port():
    """A free port: any, or one from GRAPH_SELFTEST_PORTS (FIRST-LAST)."""
    spec = os.environ.get("GRAPH_SELFTEST_PORTS")
    if not spec:
        return free_port()
    first, _, last = spec.partition("-")
    for port in range(int(first), int(last or first) + 1):
        if port in USED_PORTS:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        USED_PORTS.add(port)
        return port
    raise Failed(f"no free port in {spec}")


USED_PORTS = set()


def sim_now():
    return time.time() + OFFSET


def iso(ts):
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def parse_time(text):
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})", text)
    base = datetime.datetime.strptime(m[1], "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=datetime.timezone.utc).timestamp() + float(m[2] or 0)
    if m[3] != "Z":
        sign = 1 if m[3][0] == "+" else -1
        base -= sign * (int(m[3][1:3]) * 3600 + int(m[3][4:6]) * 60)
    return base


# -- certificates ----------------------------------------------------------------------------
def make_tls(tmp):
    """-> paths: simulator CA, simulator cert/key, receiver cert/key (self-signed)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (certs.builder("Graph Simulator Test CA", "Graph Simulator Test CA", ca_key.public_key())
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                         critical=True)
          .sign(ca_key, hashes.SHA256()))
    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv = (certs.builder("localhost", "Graph Simulator Test CA", srv_key.public_key())
           .add_extension(certs.localhost_san(), critical=False)
           .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
           .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                          critical=False)
           .sign(ca_key, hashes.SHA256()))
    paths = {n: os.path.join(tmp, n) for n in ("ca.pem", "srv.pem", "srv.key", "rx.pem", "rx.key")}
    certs.write_file(paths["ca.pem"], certs.pem_cert(ca))
    certs.write_file(paths["srv.pem"], certs.pem_cert(srv))
    certs.write_file(paths["srv.key"], certs.pem_key(srv_key), private=True)
    certs.write_self_signed(paths["rx.pem"], paths["rx.key"])
    return paths


class App:
    """One tenant's application registration: RSA key and certificate."""

    def __init__(self, tmp, label):
        self.tenant, self.client = str(uuid.uuid4()), str(uuid.uuid4())
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.cert = (certs.builder(f"ens-{label}", f"ens-{label}", self.key.public_key(), days=30)
                     .sign(self.key, hashes.SHA256()))
        self.der = self.cert.public_bytes(serialization.Encoding.DER)
        self.x5t = b64url(hashlib.sha1(self.der).digest())
        self.x5t256 = b64url(hashlib.sha256(self.der).digest())
        self.cert_path = os.path.join(tmp, f"app-{label}.pem")
        certs.write_file(self.cert_path, certs.pem_cert(self.cert))


# -- the receiver (plays ENS's notification endpoint) --------------------------------------
class Receiver(selftest.Receiver):
    """Records every POST; answers per path (without the query) according to `behaviour`:
    {"validation": ok|json|201|reencoded|hang, "notify": "<status>"|"flaky:<status>"|
    "slow:<ms>"|"slowfirst:<ms>"} (default ok / 202)."""

    def __init__(self, certfile, keyfile):
        self.lock = threading.Lock()
        self.got = []
        self.behaviour = {}
        self.hits = collections.Counter()
        rx = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                route, _, query = self.path.partition("?")
                token = parse_qs(query, keep_blank_values=True).get("validationToken", [None])[-1]
                entry = {"route": route, "query": query, "token": token, "body": body,
                         "headers": {k.lower(): v for k, v in self.headers.items()},
                         "time": time.monotonic()}
                with rx.lock:
                    rx.got.append(entry)
                    b = dict(rx.behaviour.get(route, {}))
                    if token is None:
                        rx.hits[route] += 1
                        hit = rx.hits[route]
                status, ctype, out = 202, None, ""
                if token is not None:
                    how = b.get("validation", "ok")
                    if how == "hang":
                        time.sleep(1.2)
                        how = "ok"
                    status, ctype, out = {
                        "ok": (200, "text/plain; charset=utf-8", token),
                        "json": (200, "application/json", json.dumps({"validationToken": token})),
                        "201": (201, "text/plain", token),
                        "reencoded": (200, "text/plain", quote(token, safe="")),
                    }[how]
                else:
                    how = b.get("notify", "202")
                    if how.startswith("slowfirst:"):
                        how = "slow:" + how[10:] if hit == 1 else "202"
                    if how.startswith("slow:"):
                        time.sleep(int(how[5:]) / 1000)
                        how = "202"
                    if how.startswith("flaky:"):
                        status = int(how[6:]) if hit == 1 else 202
                    else:
                        status = int(how)
                data = out.encode()
                try:
                    self.send_response(status)
                    if ctype:
                        self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the simulator gave up waiting

            def log_message(self, *args):
                pass

        super().__init__(certfile, keyfile, Handler, port=pick_port() if
                         os.environ.get("GRAPH_SELFTEST_PORTS") else 0)

    def set(self, route, **behaviour):
        with self.lock:
            self.behaviour[route] = behaviour

    def posts(self, route=None, validation=False):
        with self.lock:
            return [g for g in self.got if (route is None or g["route"] == route)
                    and (g["token"] is not None) == validation]

    def items(self, route=None):
        """Every notification/lifecycle item received (on route), in order."""
        out = []
        for g in self.posts(route):
            try:
                out += json.loads(g["body"])["value"]
            except (ValueError, KeyError, TypeError):
                pass
        return out


# -- talking to the simulator ----------------------------------------------------------------
class Sim:
    def __init__(self, port, control_port, ca):
        self.port, self.control_port = port, control_port
        self.ctx = ssl.create_default_context(cafile=ca)
        self.conn = None

    def https(self, method, path, body=None, headers=None, fresh=False):
        """-> (status, headers (lowercase), body bytes)."""
        for attempt in (1, 2):
            conn = self.conn
            if conn is None or fresh:
                conn = http.client.HTTPSConnection("localhost", self.port, context=self.ctx,
                                                   timeout=60)
                if not fresh:
                    self.conn = conn
            try:
                data = body.encode() if isinstance(body, str) else body
                conn.request(method, path, data, headers or {})
                r = conn.getresponse()
                out = r.read()
                hd = {k.lower(): v for k, v in r.getheaders()}
                check(hd.get("content-length") == str(len(out)), "Content-Length on every response")
                if fresh or r.getheader("Connection", "").lower() == "close":
                    conn.close()
                    if not fresh:
                        self.conn = None
                return r.status, hd, out
            except (http.client.HTTPException, OSError):
                self.conn = None
                if attempt == 2 or fresh:
                    raise
        raise Failed("unreachable")

    def api(self, method, path, token=None, body=None, headers=None, fresh=False):
        """Graph call -> (status, headers, parsed JSON or None)."""
        h = {}
        if token:
            h["Authorization"] = "Bearer " + token
        if body is not None and not isinstance(body, (str, bytes)):
            body = json.dumps(body)
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        st, hd, data = self.https(method, path, body, h, fresh=fresh)
        return st, hd, (json.loads(data) if data else None)

    def control(self, path, body=None):
        return selftest.control_call(self.control_port, "GET" if body is None else "POST", path, body)

    def ok(self, path, body=None):
        return selftest.control(self.control_port, "GET" if body is None else "POST", path, body)

    def advance(self, seconds):
        global OFFSET
        self.ok("/clock", {"advanceSeconds": seconds})
        OFFSET += seconds


def assertion(app, login, *, alg="RS256", thumb="x5t", aud=None, iss=None, sub=None,
              exp=600, nbf=0, jti=None, key=None):
    now = int(sim_now())
    header = {"alg": alg, "typ": "JWT"}
    if thumb == "x5t":
        header["x5t"] = app.x5t
    elif thumb == "x5t#S256":
        header["x5t#S256"] = app.x5t256
    elif thumb is not None:
        header["x5t"] = thumb
    claims = {"aud": aud or f"{login}/{app.tenant}/oauth2/v2.0/token", "iss": iss or app.client,
              "sub": sub or app.client, "jti": jti or str(uuid.uuid4()), "nbf": now + nbf,
              "iat": now + nbf, "exp": now + exp}
    signing = (b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode()))
    k = key or app.key
    if alg == "PS256":
        sig = k.sign(signing.encode(), padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32),
                     hashes.SHA256())
    elif alg == "HS256":
        mac = hmac.HMAC(b"not-a-key", hashes.SHA256())
        mac.update(signing.encode())
        sig = mac.finalize()
    else:
        sig = k.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
    jwt = signing + "." + b64url(sig)
    SECRETS.append(jwt)
    return jwt


def token_form(app, login, **over):
    form = {"grant_type": "client_credentials", "client_id": app.client, "scope": GRAPH_SCOPE,
            "client_assertion_type": ASSERTION_TYPE, "client_assertion": assertion(app, login)}
    for k, v in over.items():
        if v is None:
            form.pop(k, None)
        else:
            form[k] = v
    return form


def token_call(sim, tenant, form=None, raw=None, ctype="application/x-www-form-urlencoded",
               method="POST"):
    body = raw if raw is not None else urlencode(form)
    st, hd, data = sim.https(method, f"/{tenant}/oauth2/v2.0/token", body,
                             {"Content-Type": ctype})
    return st, hd, json.loads(data)


def entra(answer, status, error, code, what):
    st, hd, obj = answer
    check(st == status and obj.get("error") == error and obj.get("error_codes") == [code]
          and obj.get("error_description", "").startswith(f"AADSTS{code}:"),
          f"{what}: want {status} {error} AADSTS{code}, got {st} {obj}")
    return obj


def app_token(sim, app, login):
    st, _, obj = token_call(sim, app.tenant, token_form(app, login))
    check(st == 200, f"token for {app.tenant}: {st} {obj}")
    SECRETS.append(obj["access_token"])
    return obj["access_token"]


def user_token(sim, mail, **extra):
    tok = sim.ok("/user-token", {"mail": mail, **extra})["access_token"]
    SECRETS.append(tok)
    return tok


def graph_error(answer, status, code, what, message=None):
    st, hd, obj = answer
    err = (obj or {}).get("error", {})
    check(st == status and err.get("code") == code
          and (message is None or err.get("message") == message),
          f"{what}: want {status} {code} {message or ''}, got {st} {obj}")
    check(hd.get("content-type") == "application/json" and set(err.get("innerError", {})) >=
          {"date", "request-id", "client-request-id"}, f"{what}: Graph error shape")
    return err


def violations(sim):
    return sim.ok("/violations")


def sub_body(url, resource, minutes=4000, lifecycle=None, state=None, **extra):
    body = {"changeType": "created", "notificationUrl": url, "resource": resource,
            "expirationDateTime": iso(sim_now() + minutes * 60)}
    if lifecycle:
        body["lifecycleNotificationUrl"] = lifecycle
    if state is not None:
        body["clientState"] = state
        SECRETS.append(state)
    body.update(extra)
    return body


# -- the test --------------------------------------------------------------------------------
def run(tmp):
    tls = make_tls(tmp)
    rx = Receiver(tls["rx.pem"], tls["rx.key"])
    rx2 = Receiver(tls["rx.pem"], tls["rx.key"])  # another origin, for the health states
    rx3 = Receiver(tls["rx.pem"], tls["rx.key"])  # and one for the 3 s timeout
    a, b = App(tmp, "a"), App(tmp, "b")
    port, control = pick_port(), pick_port()
    login = f"https://localhost:{port}"
    ready = os.path.join(tmp, "ready.pid")
    log_path = os.path.join(tmp, "sim.log")
    log = open(log_path, "wb")
    cmd = selftest.simulator("graph_simulator.py") + [
        "--port", str(port), "--control-port", str(control), "--cert", tls["srv.pem"], "--key", tls["srv.key"],
        "--callback-ca", tls["rx.pem"], "--login-base", login,
        "--tenant", a.tenant, "--client-id", a.client, "--client-cert", a.cert_path,
        "--tenant", b.tenant, "--client-id", b.client, "--client-cert", b.cert_path,
        "--retry-scale", "0.01", "--max-lifetime-minutes", "4230", "--ready-file", ready]
    print("graph_simulator_selftest: " + " ".join(
        os.path.basename(c) if c.startswith(tmp) else c for c in cmd[1:]))
    proc = selftest.start(cmd, ready, stdout=log, stderr=log)
    try:
        sim = Sim(port, control, tls["ca.pem"])
        scenario(sim, rx, rx2, rx3, a, b, login)
        selftest.stop(proc, ready)
        log.close()
        with open(log_path, "rb") as f:
            logged = f.read()
        leaked = [s[:12] for s in SECRETS if s.encode() in logged]
        check(not leaked, f"no token, assertion or clientState logged: {leaked}")
        for word in (b"Secret subject", b"/ens/", b"/h/", b"route=", b"validationToken",
                     b"Bearer", b"Validation: Testing", b"Secret preview", b"encryptedContent",
                     b"BEGIN"):
            check(word not in logged, f"{word!r} not logged")
        check(b"Traceback" not in logged and b"internal error" not in logged,
              "no internal errors: " + logged.decode(errors="replace")[-3000:])
        lines = logged.decode().splitlines()
        check(all(line.startswith("graph_simulator: ") for line in lines), "log line prefix")
        check(sum(1 for line in lines if line.startswith("graph_simulator: GET /v1.0/")) > 20,
              "one log line per request")
        for path in ("/common/.well-known/openid-configuration",
                     "/common/v2.0/.well-known/openid-configuration", "/common/discovery/keys",
                     "/common/discovery/v2.0/keys"):
            check(f"graph_simulator: GET {path} 200" in lines, f"identity fetch logged: {path}")
        check(any(re.fullmatch(r"graph_simulator: deliver notification [0-9a-f-]{8} attempt 2 202 "
                               r"\d+ms", line) for line in lines), "one log line per attempt")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def scenario(sim, rx, rx2, rx3, a, b, login):
    token_endpoint(sim, a, b, login)
    ctx = reads(sim, a, b, login)
    subs = subscriptions(sim, rx, a, b, login, ctx)
    ctx["s_bob"] = subs["s_bob"]
    patches(sim, rx, a, b, login, ctx, subs)
    delivery(sim, rx, a, login, ctx, subs)
    first_timeout(sim, rx3, ctx)
    throttling(sim, ctx)
    health(sim, rx2, ctx)
    rich(sim, rx, a, b, login, ctx)
    clock(sim, rx, a, login, ctx)
    reset(sim)


def token_endpoint(sim, a, b, login):
    T = a.tenant
    st, hd, obj = token_call(sim, T, token_form(a, login), method="GET")
    check(st == 405 and obj["error"] == "invalid_request", f"GET token -> 405 ({st})")
    entra(token_call(sim, T, token_form(a, login), ctype="application/json"), 400,
          "invalid_request", 900144, "wrong Content-Type")
    entra(token_call(sim, T, raw=urlencode(token_form(a, login)) + "&scope=" + quote(GRAPH_SCOPE)),
          400, "invalid_request", 90014, "repeated parameter")
    entra(token_call(sim, T, raw="grant_type=%ZZ&x"), 400, "invalid_request", 90014, "malformed form")
    obj = entra(token_call(sim, str(uuid.uuid4()), token_form(a, login)), 400, "invalid_tenant",
                90002, "unknown tenant")
    check({"timestamp", "trace_id", "correlation_id"} <= set(obj)
          and "\r\nTrace ID: " in obj["error_description"], "Entra error fields")
    entra(token_call(sim, "common", token_form(a, login)), 400, "invalid_request", 50059, "/common")
    entra(token_call(sim, T, token_form(a, login, grant_type=None)), 400, "invalid_request", 900144,
          "grant_type missing")
    entra(token_call(sim, T, token_form(a, login, grant_type="password")), 400,
          "unsupported_grant_type", 70003, "grant_type password")
    entra(token_call(sim, T, token_form(a, login, client_id=None)), 400, "invalid_request", 900144,
          "client_id missing")
    entra(token_call(sim, T, token_form(a, login, client_id=str(uuid.uuid4()))), 400,
          "unauthorized_client", 700016, "unknown client_id")
    entra(token_call(sim, T, token_form(b, login)), 400, "unauthorized_client", 700016,
          "tenant B's application at tenant A")
    entra(token_call(sim, T, token_form(a, login, scope=None)), 400, "invalid_request", 900144,
          "scope missing")
    entra(token_call(sim, T, token_form(a, login, scope="https://graph.microsoft.com/Mail.Read")),
          400, "invalid_scope", 1002012, "scope without /.default")
    entra(token_call(sim, T, token_form(a, login, scope=GRAPH_SCOPE + " openid")), 400,
          "invalid_scope", 70011, "two scopes")
    entra(token_call(sim, T, token_form(a, login, client_secret="s3cret")), 401, "invalid_client",
          7000215, "client_secret")
    entra(token_call(sim, T, token_form(a, login, client_assertion_type="jwt")), 400,
          "invalid_request", 7000216, "wrong client_assertion_type")
    entra(token_call(sim, T, token_form(a, login, client_assertion=None)), 400, "invalid_request",
          7000216, "client_assertion missing")
    entra(token_call(sim, T, token_form(a, login, client_assertion="abc.def")), 400,
          "invalid_client", 50027, "malformed assertion")
    entra(token_call(sim, T, token_form(a, login, client_assertion="e30.W10.c2ln")), 400,
          "invalid_client", 50027, "claims not an object")
    entra(token_call(sim, T, token_form(a, login, client_assertion=assertion(a, login, alg="HS256"))),
          401, "invalid_client", 700027, "alg HS256")
    entra(token_call(sim, T, token_form(a, login, client_assertion=assertion(a, login, thumb=b.x5t))),
          401, "invalid_client", 700027, "another certificate's x5t")
    entra(token_call(sim, T, token_form(a, login, client_assertion=assertion(a, login, thumb=None))),
          401, "invalid_client", 700027, "no x5t")
    obj = entra(token_call(sim, T, token_form(a, login, client_assertion=assertion(a, login, key=b.key))),
                401, "invalid_client", 700027, "signed with another key")
    check("invalid signature" in obj["error_description"], "invalid signature text")
    aud = f"https://login.microsoftonline.com/{a.tenant}/oauth2/v2.0/token"
    entra(token_call(sim, T, token_form(a, login, client_assertion=assertion(a, login, aud=aud))),
          401, "invalid_client", 700023, "wrong audience")
    entra(token_call(sim, T, token_form(a, login, client_assertion=assertion(a, login, iss=b.client))),
          401, "invalid_client", 700021, "iss not the client")
    entra(token_call(sim, T, token_form(a, login, client_assertion=assertion(a, login, sub=b.client))),
          401, "invalid_client", 700021, "sub not the client")
    entra(token_call(sim, T, token_form(a, login, client_assertion=assertion(a, login, nbf=-700,
                                                                              exp=-10))),
          401, "invalid_client", 700024, "expired assertion")
    entra(token_call(sim, T, token_form(a, login, client_assertion=assertion(a, login, exp=7200))),
          401, "invalid_client", 700024, "assertion valid for 2 hours")
    entra(token_call(sim, T, token_form(a, login, client_assertion=assertion(a, login, nbf=600,
                                                                              exp=900))),
          401, "invalid_client", 700024, "nbf 10 minutes ahead")
    form = token_form(a, login)
    st, hd, obj = token_call(sim, T, form)
    check(st == 200 and obj["token_type"] == "Bearer" and obj["expires_in"] == 3599
          and obj["ext_expires_in"] == 3599, f"token success {st} {obj}")
    check(obj["access_token"].startswith("eyJ") and 1100 <= len(obj["access_token"]) <= 1400,
          "access token looks like a JWT, ~1,200 characters")
    check(hd["content-type"].startswith("application/json"), "token Content-Type")
    SECRETS.append(obj["access_token"])
    obj = entra(token_call(sim, T, form), 401, "invalid_client", 700025, "replayed jti")
    check("jti replay" in obj["error_description"], "jti replay text")
    st, _, obj = token_call(sim, T.upper(), token_form(
        a, login, client_assertion=assertion(a, login, alg="PS256", thumb="x5t#S256")))
    check(st == 200 and obj["access_token"].startswith("eyJ"), f"PS256 + x5t#S256 {st} {obj}")
    SECRETS.append(obj["access_token"])
    sim.ok("/fail", {"operation": "token", "status": 503, "retryAfter": 7, "count": 1})
    st, hd, obj = token_call(sim, T, token_form(a, login))
    check(st == 503 and hd.get("retry-after") == "7" and obj["error"] == "temporarily_unavailable",
          f"injected token failure {st} {obj}")
    app_token(sim, a, login)
    check(sim.ok("/stats")["tokens_issued"] == {a.tenant: 3}, "tokens_issued per tenant")
    check(sim.control("/fail", {"operation": "bogus", "status": 500})[0] == 400, "bad /fail")


def reads(sim, a, b, login):
    check(sim.control("/users", {"tenant": str(uuid.uuid4()), "mail": "x@y.test"})[0] == 400,
          "/users with an unknown tenant")
    alice = sim.ok("/users", {"tenant": a.tenant, "mail": "Alice@A.test", "displayName": "Alice A"})
    check(alice["mail"] == "alice@a.test" and GUID.fullmatch(alice["id"]), "/users answer")
    bob = sim.ok("/users", {"tenant": a.tenant, "mail": "bob@a.test",
                            "id": "0b0b0b0b-0000-4000-8000-000000000b0b"})
    check(bob["id"] == "0b0b0b0b-0000-4000-8000-000000000b0b", "/users with a given id")
    check(sim.control("/users", {"tenant": a.tenant, "mail": "bob@a.test"})[0] == 400, "duplicate user")
    carol = sim.ok("/users", {"tenant": b.tenant, "mail": "carol@b.test"})
    for m in ("dave@a.test", "erin@a.test", "frank@a.test", "grace@a.test"):
        sim.ok("/users", {"tenant": a.tenant, "mail": m})
    ta, tb = app_token(sim, a, login), app_token(sim, b, login)
    alice_tok = user_token(sim, "alice@a.test")
    check(len(alice_tok) > 1300 and alice_tok.startswith("eyJ"), "delegated token ~1,500 characters")

    st, hd, obj = sim.api("GET", "/v1.0/me", headers={"client-request-id": "cr-1"})
    err = graph_error((st, hd, obj), 401, "InvalidAuthenticationToken", "no token",
                      "Access token is empty.")
    check(hd.get("www-authenticate", "").startswith("Bearer ")
          and err["innerError"]["client-request-id"] == "cr-1" and hd.get("request-id")
          == err["innerError"]["request-id"], "401 WWW-Authenticate and innerError ids")
    graph_error(sim.api("GET", "/v1.0/me", token="eyJnot.a.token"), 401,
                "InvalidAuthenticationToken", "unknown token", "Access token validation failure.")
    graph_error(sim.api("GET", "/v1.0/foo/bar", token=ta), 400, "BadRequest", "unknown path",
                "Resource not found for the segment 'foo'.")
    check("unknown Graph path /v1.0/{x}" in violations(sim), "unknown path recorded")
    graph_error(sim.api("DELETE", "/v1.0/me", token=alice_tok), 405, "BadRequest", "DELETE /me")
    graph_error(sim.api("GET", "/v1.0/me", token=ta), 400, "BadRequest", "/me with an app token",
                "/me request is only valid with delegated authentication flow.")
    st, hd, obj = sim.api("GET", "/v1.0/me?$select=mail,displayName", token=alice_tok)
    check(st == 200 and set(obj) == {"@odata.context", "mail", "displayName"}
          and obj["mail"] == "alice@a.test" and obj["displayName"] == "Alice A",
          f"/me $select {st} {obj}")
    check(hd["content-type"].startswith("application/json;") and hd.get("request-id"),
          "success Content-Type and request-id")
    st, _, obj = sim.api("GET", "/v1.0/ME", token=alice_tok)
    check(st == 200 and obj["id"] == alice["id"] and obj["userPrincipalName"] == "alice@a.test",
          "/ME without $select, case-insensitive")
    graph_error(sim.api("GET", "/v1.0/me?$select=shoeSize", token=alice_tok), 400, "BadRequest",
                "unknown $select property")
    graph_error(sim.api("GET", f"/v1.0/users/{alice['id']}", token=ta), 403,
                "Authorization_RequestDenied", "GET a user object")

    new = sim.ok("/newmail", {"mail": "alice@a.test", "subject": "Secret subject 1",
                              "fromName": "Zed", "fromAddress": "zed@x.test", "count": 2})
    ids = new["messageIds"]
    check(len(ids) == 2 and new["deliveries"] == [], "/newmail without subscriptions")
    mid = ids[0]
    check(len(mid) > 100 and "-" in mid and mid.endswith("=") and mid.startswith("AAMkAG"),
          "Graph-looking message id")
    path = f"/v1.0/users/{alice['id']}/messages/{mid}?$select=subject,from,receivedDateTime,isRead"
    st, hd, obj = sim.api("GET", path, token=ta)
    check(st == 200 and set(obj) == {"@odata.context", "@odata.etag", "id", "subject", "from",
                                     "receivedDateTime", "isRead"}, f"message $select {st} {obj}")
    check(obj["subject"] == "Secret subject 1" and obj["id"] == mid and obj["isRead"] is False
          and obj["from"] == {"emailAddress": {"name": "Zed", "address": "zed@x.test"}},
          "message values")
    check(re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{7}Z", obj["receivedDateTime"])
          and obj["@odata.etag"].startswith('W/"'), "7-decimal receivedDateTime, etag")
    st, _, obj = sim.api("GET", f"/v1.0/USERS('ALICE@a.test')/Messages('{mid}')?$select=subject",
                         token=ta)
    check(st == 200 and obj["subject"] == "Secret subject 1", "OData keys, mail, any case")
    before = len([v for v in violations(sim) if v == "message fetched without $select"])
    st, _, obj = sim.api("GET", f"/v1.0/users/alice@a.test/messages/{mid}", token=ta)
    check(st == 200 and "subject" in obj and "body" not in obj and "bodyPreview" not in obj,
          "message without $select answered, no body")
    check(len([v for v in violations(sim) if v == "message fetched without $select"]) == before + 1,
          "violation: message fetched without $select")
    graph_error(sim.api("GET", f"/v1.0/users/alice@a.test/messages/{mid}?$select=subject,body",
                        token=ta), 403, "ErrorAccessDenied", "$select=body")
    check("message fetched with body (not in Mail.ReadBasic)" in violations(sim), "body violation")
    graph_error(sim.api("GET", f"/v1.0/users/alice@a.test/messages/{mid}?$select=bodyPreview",
                        token=alice_tok), 403, "ErrorAccessDenied", "$select=bodyPreview")
    graph_error(sim.api("GET", f"/v1.0/me/messages/{mid}?$select=subject&$top=1",
                        token=alice_tok), 400, "BadRequest", "another query option")
    graph_error(sim.api("GET", "/v1.0/users/alice@a.test/messages/AAMkAGnope=?$select=subject",
                        token=ta), 404, "ErrorItemNotFound", "unknown message",
                "The specified object was not found in the store.")
    sim.ok("/delete-message", {"mail": "alice@a.test", "messageId": ids[1]})
    graph_error(sim.api("GET", f"/v1.0/me/messages/{ids[1]}?$select=subject", token=alice_tok),
                404, "ErrorItemNotFound", "deleted message")
    st, _, obj = sim.api("GET", "/v1.0/users/alice@a.test/mailFolders/inbox?$select=unreadItemCount",
                         token=ta)
    check(st == 200 and set(obj) == {"@odata.context", "id", "unreadItemCount"}
          and obj["unreadItemCount"] == 1, f"folder $select {st} {obj}")
    st, _, obj = sim.api("GET", "/v1.0/me/MailFolders('Inbox')?$select=unreadItemCount,"
                         "totalItemCount", token=alice_tok)
    check(st == 200 and obj["totalItemCount"] == 1, "mailFolders('Inbox'), delegated")
    graph_error(sim.api("GET", "/v1.0/me/mailFolders/drafts?$select=unreadItemCount",
                        token=alice_tok), 404, "ErrorItemNotFound", "another folder")
    stats = sim.ok("/stats")
    check(stats["folder_gets"].get("alice@a.test") == 3 and
          stats["message_gets"].get("alice@a.test") == 7, f"per-user GET counts {stats}")
    graph_error(sim.api("GET", f"/v1.0/users/alice@a.test/messages/{mid}?$select=subject", token=tb),
                404, "ErrorInvalidUser", "another tenant's user",
                "The requested user 'alice@a.test' is invalid.")
    graph_error(sim.api("GET", f"/v1.0/users/{carol['id']}/mailFolders/inbox?$select="
                        "unreadItemCount", token=ta), 404, "ErrorInvalidUser", "tenant isolation")
    sim.ok("/scope", {"tenant": a.tenant, "mails": ["bob@a.test"]})
    graph_error(sim.api("GET", f"/v1.0/users/alice@a.test/messages/{mid}?$select=subject", token=ta),
                403, "ErrorAccessDenied", "outside the RBAC scope",
                "Access is denied. Check credentials and try again.")
    st, _, _ = sim.api("GET", "/v1.0/users/bob@a.test/mailFolders/inbox?$select=unreadItemCount",
                       token=ta)
    check(st == 200, "inside the RBAC scope")
    sim.ok("/scope", {"tenant": a.tenant, "mails": None})
    st, _, _ = sim.api("GET", f"/v1.0/users/alice@a.test/messages/{mid}?$select=subject", token=ta)
    check(st == 200, "RBAC scope cleared")
    graph_error(sim.api("GET", "/v1.0/users/bob@a.test/mailFolders/inbox?$select=unreadItemCount",
                        token=alice_tok), 403, "ErrorAccessDenied", "delegated: another mailbox")
    return {"ta": ta, "tb": tb, "alice": alice, "bob": bob, "carol": carol, "alice_tok": alice_tok,
            "mid": mid}


def subscriptions(sim, rx, a, b, login, ctx):
    ta, alice = ctx["ta"], ctx["alice"]
    rx.set("/ens/graph", notify="202")
    rx.set("/ens/lc", notify="202")
    nurl = rx.url("/ens/graph?route=a%2Fb%2Bc&k=1")
    lurl = rx.url("/ens/lc")
    state = "S" * 100 + b64url(os.urandom(21))
    check(len(state) == 128, "a 128-character clientState")
    resource = f"users/{alice['id']}/mailFolders('inbox')/messages"
    body = sub_body(nurl, resource, minutes=4200, lifecycle=lurl, state=state)
    st, hd, obj = sim.api("POST", "/v1.0/subscriptions", ta, body, headers=PREFER)
    check(st == 201, f"create -> 201 ({st} {obj})")
    s1 = obj["id"]
    check(GUID.fullmatch(s1) and obj["@odata.context"].endswith("$metadata#subscriptions/$entity")
          and obj["resource"] == resource and obj["applicationId"] == a.client
          and obj["changeType"] == "created" and obj["clientState"] == state
          and obj["notificationUrl"] == nurl and obj["lifecycleNotificationUrl"] == lurl
          and GUID.fullmatch(obj["creatorId"]) and obj["creatorId"] != alice["id"]
          and obj["includeResourceData"] is False and obj["latestSupportedTlsVersion"] == "v1_2"
          and obj["encryptionCertificate"] is None and obj["encryptionCertificateId"] is None
          and obj["notificationQueryOptions"] is None and obj["notificationContentType"] is None,
          f"create answer fields {obj}")
    check(SEVEN.fullmatch(obj["expirationDateTime"])
          and abs(parse_time(obj["expirationDateTime"]) - parse_time(body["expirationDateTime"])) < 1,
          "expirationDateTime as asked, 7 decimals")
    vals = rx.posts(validation=True)
    check(len(vals) == 2 and vals[0]["route"] == "/ens/graph" and vals[1]["route"] == "/ens/lc",
          "two validation requests: notification URL, then lifecycle URL")
    check(vals[0]["token"] != vals[1]["token"], "each validation has its own token")
    for v in vals:
        t = v["token"]
        check(all(c in t for c in "+/ :"), "token holds '+', '/', ' ' and ':'")
        raw = v["query"].rpartition("validationToken=")[2]
        check("%2B" in raw and "%2F" in raw and "%20" in raw and "%3A" in raw
              and " " not in raw and "+" not in raw, "token percent-encoded in the query")
        check(v["headers"].get("content-type") == "text/plain; charset=utf-8"
              and v["headers"].get("content-length") == "0" and v["body"] == b"",
              "validation POST: text/plain, empty body")
    check(vals[0]["query"].startswith("route=a%2Fb%2Bc&k=1&validationToken="),
          "validation keeps the URL's query and appends &validationToken=")
    subs = {s["id"]: s for s in sim.ok("/subscriptions")}
    c = subs[s1]
    check(c["immutableIds"] is True and c["hasLifecycleUrl"] and c["clientStateLength"] == 128
          and c["creatorKind"] == "app" and c["state"] == "live" and c["mail"] == "alice@a.test",
          f"control /subscriptions {c}")
    check(state not in json.dumps(sim.ok("/subscriptions")) and "/ens/" not in
          json.dumps(sim.ok("/subscriptions")), "control listing holds no clientState or URL")
    dup = sub_body(rx.url("/ens/other"), "/Users/ALICE@A.TEST/MailFolders/Inbox/messages")
    graph_error(sim.api("POST", "/v1.0/subscriptions", ta, dup, headers=PREFER), 409, "Conflict",
                "duplicate", f"Subscription Id {s1} already exists for the requested combination")
    st, _, obj = sim.api("POST", "/v1.0/subscriptions", ta,
                         sub_body(rx.url("/ens/plain"), f"users/{alice['id']}/messages"))
    check(st == 201, f"create without Prefer ({st} {obj})")
    s_plain = obj["id"]
    check("subscription created without immutable ids" in violations(sim),
          "violation: subscription created without immutable ids")
    check({s["id"]: s for s in sim.ok("/subscriptions")}[s_plain]["immutableIds"] is False,
          "immutableIds false recorded")
    # rich notifications: validated at creation
    rich = sub_body(rx.url("/ens/rich"), f"users/{alice['id']}/messages?$select=subject,from",
                    minutes=1000, includeResourceData=True)
    graph_error(sim.api("POST", "/v1.0/subscriptions", ta, rich, headers=PREFER), 400,
                "InvalidRequest", "rich without certificate")
    rich.update(encryptionCertificate=base64.b64encode(a.der).decode(),
                encryptionCertificateId="k1")
    graph_error(sim.api("POST", "/v1.0/subscriptions", ta,
                        dict(rich, resource=f"users/{alice['id']}/messages"), headers=PREFER),
                400, "InvalidRequest", "rich without $select")
    graph_error(sim.api("POST", "/v1.0/subscriptions", ta,
                        dict(rich, expirationDateTime=iso(sim_now() + 2000 * 60)), headers=PREFER),
                400, "InvalidRequest", "rich beyond 1440 minutes",
                "Subscription expiration can only be 1440 minutes in the future.")
    st, _, obj = sim.api("POST", "/v1.0/subscriptions", ta, rich, headers=PREFER)
    check(st == 201 and obj["includeResourceData"] is True and obj["encryptionCertificateId"] == "k1",
          f"rich subscription {st} {obj}")
    s_rich = obj["id"]
    # field rules
    def refused(body, code, what, message=None, headers=PREFER, token=ta, status=400):
        graph_error(sim.api("POST", "/v1.0/subscriptions", token, body, headers=headers), status,
                    code, what, message)
    other = lambda **kw: sub_body(rx.url("/ens/x"), f"users/{alice['id']}/messages", **kw)  # noqa: E731
    refused(other(minutes=4231), "InvalidRequest", "beyond the cap",
            "Subscription expiration can only be 4230 minutes in the future.")
    refused(other(minutes=-5), "InvalidRequest", "in the past")
    refused(dict(other(), expirationDateTime="2030-01-01 10:00"), "BadRequest", "not ISO 8601")
    refused(dict(other(), expirationDateTime=None), "InvalidRequest", "expiry missing")
    refused(dict(other(), notificationUrl="http://localhost/ens"), "InvalidRequest",
            "http notificationUrl", "The Notification Url must be HTTPS.")
    refused(dict(other(), lifecycleNotificationUrl="http://localhost/lc"), "InvalidRequest",
            "http lifecycleNotificationUrl")
    refused(other(state="x" * 129), "InvalidRequest", "clientState of 129 characters")
    refused(dict(other(), shoeSize=42), "BadRequest", "unknown property")
    refused(dict(other(), changeType="created,moved"), "InvalidRequest", "bad changeType")
    refused(dict(other(), changeType=None), "InvalidRequest", "changeType missing")
    refused(dict(other(), resource=f"users/{alice['id']}/events"), "InvalidRequest",
            "unsupported resource")
    refused(dict(other(), resource="https://graph.microsoft.com/v1.0/me/messages"),
            "InvalidRequest", "resource with the base URL")
    refused(dict(other(), resource="me/messages"), "BadRequest", "me/ with an app token")
    refused(dict(other(), includeResourceData="yes"), "BadRequest", "wrong JSON type")
    refused(dict(other(), id=str(uuid.uuid4())), "BadRequest", "read-only id")
    refused(dict(other(), resource=f"users/{ctx['carol']['id']}/messages"), "ErrorInvalidUser",
            "another tenant's mailbox", status=404)
    st, _, obj = sim.api("POST", "/v1.0/subscriptions", ta, "{not json",
                         headers={"Content-Type": "application/json"})
    graph_error((st, _, obj), 400, "BadRequest", "malformed JSON")
    st, hd, obj = sim.api("POST", "/v1.0/subscriptions", ta, json.dumps(other()),
                          headers={"Content-Type": "text/plain"})
    graph_error((st, hd, obj), 415, "UnsupportedMediaType", "text/plain body")
    # delegated creation: own mailbox only; 45-minute floor
    bob_tok = user_token(sim, "bob@a.test")
    refused(other(), "ErrorAccessDenied", "delegated token for another mailbox", token=bob_tok,
            status=403)
    t0 = sim_now()
    st, _, obj = sim.api("POST", "/v1.0/subscriptions", bob_tok,
                         sub_body(rx.url("/ens/bob"), "me/mailFolders('inbox')/messages", minutes=10),
                         headers=PREFER)
    check(st == 201 and obj["creatorId"] == ctx["bob"]["id"] and obj["applicationId"] == DELEGATED_APP,
          f"delegated create ({st} {obj})")
    check(abs(parse_time(obj["expirationDateTime"]) - (t0 + 45 * 60)) < 30,
          "expiry under 45 minutes raised to 45 minutes")
    s_bob = obj["id"]
    check({s["id"]: s for s in sim.ok("/subscriptions")}[s_bob]["creatorKind"] == "delegated",
          "creatorKind delegated")
    # validation failures
    vf = lambda path, **kw: sub_body(rx.url(path), "users/bob@a.test/mailFolders/inbox/messages",  # noqa: E731
                                     **kw)
    for path, how in (("/v/json", "json"), ("/v/201", "201"), ("/v/reencoded", "reencoded")):
        rx.set(path, validation=how)
        refused(vf(path), "ValidationError", f"validation answered {how}", VALIDATION_FAILED)
    recs = [r for r in sim.ok("/requests")["requests"] if r["kind"] == "validation"]
    check(any(r["contentType"] == "application/json" and r["status"] == 200 for r in recs)
          and any(r["status"] == 201 and r["bodyMatched"] for r in recs)
          and any(r["status"] == 200 and not r["bodyMatched"] and r["outcome"] == "failed"
                  for r in recs), "validation attempts recorded")
    rx.set("/v/hang", validation="hang")
    sim.ok("/mode", {"validationTimeoutMs": 500})
    t0 = time.monotonic()
    refused(vf("/v/hang"), "ValidationError", "validation timed out", VALIDATION_TIMEOUT)
    check(time.monotonic() - t0 < 1.1, "validationTimeoutMs shortens the wait")
    sim.ok("/mode", {"validationTimeoutMs": 300, "validationDropNext": 1})
    refused(vf("/v/never"), "ValidationError", "validation call never arrives", VALIDATION_TIMEOUT)
    check(rx.posts("/v/never", validation=True) == [], "a dropped validation call sends nothing")
    sim.ok("/mode", {"validationTimeoutMs": 10000})
    rx.set("/v/lcjson", validation="json")
    refused(vf("/v/ok", lifecycle=rx.url("/v/lcjson")), "ValidationError",
            "lifecycle URL validated separately", VALIDATION_FAILED)
    check(len(rx.posts("/v/ok", validation=True)) == 1 and len(rx.posts("/v/lcjson", validation=True))
          == 1, "notification URL passed, lifecycle URL failed")
    st, _, obj = sim.api("POST", "/v1.0/subscriptions", ta,
                         vf("/v/same", lifecycle=rx.url("/v/same")), headers=PREFER)
    same = rx.posts("/v/same", validation=True)
    check(st == 201 and len(same) == 2 and same[0]["token"] != same[1]["token"],
          "the same URL for both is validated twice")
    sim.api("DELETE", f"/v1.0/subscriptions/{obj['id']}", ta)
    sim.ok("/mode", {"validationDelayMs": 400})
    t0 = time.monotonic()
    st, _, obj = sim.api("POST", "/v1.0/subscriptions", ta, vf("/v/slow"), headers=PREFER)
    check(st == 201 and time.monotonic() - t0 >= 0.4, "validationDelayMs delays the create")
    sim.ok("/mode", {"validationDelayMs": 0})
    sim.api("DELETE", f"/v1.0/subscriptions/{obj['id']}", ta)
    stats = sim.ok("/stats")
    check(stats["validations_failed"] == 6 and stats["validations"] >= 14, f"validation stats {stats}")
    # list, get, ownership, delete
    st, _, obj = sim.api("GET", "/v1.0/subscriptions", ta)
    listed = {s["id"] for s in obj["value"]}
    check(st == 200 and {s1, s_plain, s_rich} <= listed and s_bob not in listed,
          "list: the application's subscriptions")
    st, _, obj = sim.api("GET", "/v1.0/subscriptions", ctx["tb"])
    check(st == 200 and obj["value"] == [], "list: another tenant sees none")
    st, _, obj = sim.api("GET", "/v1.0/subscriptions", bob_tok)
    check([s["id"] for s in obj["value"]] == [s_bob], "list: delegated sees its own")
    st, _, obj = sim.api("GET", f"/v1.0/subscriptions/{s1}", ta)
    check(st == 200 and obj["id"] == s1 and obj["clientState"] == state, "GET one")
    graph_error(sim.api("GET", f"/v1.0/subscriptions/{s1}", ctx["tb"]), 404, "ResourceNotFound",
                "GET of another tenant's subscription", "The object was not found.")
    graph_error(sim.api("GET", f"/v1.0/subscriptions/{s1}", ctx["alice_tok"]), 403,
                "ErrorAccessDenied", "GET of another application's subscription")
    graph_error(sim.api("GET", f"/v1.0/subscriptions/{uuid.uuid4()}", ta), 404, "ResourceNotFound",
                "GET of an unknown subscription")
    for sid in (s_plain, s_rich):
        st, _, obj = sim.api("DELETE", f"/v1.0/subscriptions/{sid}", ta)
        check(st == 204 and obj is None, "DELETE -> 204")
    graph_error(sim.api("DELETE", f"/v1.0/subscriptions/{s_plain}", ta), 404, "ResourceNotFound",
                "DELETE twice")
    check({s["id"]: s for s in sim.ok("/subscriptions")}[s_plain]["state"] == "deleted",
          "state deleted")
    return {"s1": s1, "state": state, "nurl": nurl, "lurl": lurl, "s_bob": s_bob,
            "bob_tok": bob_tok}


def patches(sim, rx, a, b, login, ctx, subs):
    ta, s1 = ctx["ta"], subs["s1"]
    p = f"/v1.0/subscriptions/{s1}"
    graph_error(sim.api("PATCH", p, ta, {"lifecycleNotificationUrl": rx.url("/ens/lc2")}), 400,
                "InvalidRequest", "PATCH lifecycleNotificationUrl",
                "Property 'lifecycleNotificationUrl' cannot be updated.")
    graph_error(sim.api("PATCH", p, ta, {"clientState": "x"}), 400, "InvalidRequest",
                "PATCH clientState")
    graph_error(sim.api("PATCH", p, ta, {"expirationDateTime": iso(sim_now() + 4300 * 60)}), 400,
                "InvalidRequest", "PATCH beyond the cap")
    graph_error(sim.api("PATCH", p, ta, {"notificationUrl": "http://localhost/x"}), 400,
                "InvalidRequest", "PATCH to an http URL")
    graph_error(sim.api("PATCH", p, ctx["tb"], {"expirationDateTime": iso(sim_now() + 3600)}), 404,
                "ResourceNotFound", "PATCH by another tenant")
    n = len(rx.posts("/ens/graph", validation=True))
    want = sim_now() + 3000 * 60
    st, _, obj = sim.api("PATCH", p, ta, {"expirationDateTime": iso(want)})
    check(st == 200 and obj["id"] == s1 and abs(parse_time(obj["expirationDateTime"]) - want) < 1
          and obj["lifecycleNotificationUrl"] == subs["lurl"], f"PATCH renews ({st} {obj})")
    check(len(rx.posts("/ens/graph", validation=True)) == n + 1, "PATCH re-validates notificationUrl")
    st, _, obj = sim.api("PATCH", p, ta, {"expirationDateTime": iso(sim_now() + 60)})
    check(st == 200 and abs(parse_time(obj["expirationDateTime"]) - (sim_now() + 2700)) < 30,
          "PATCH: 45-minute floor")
    rx.set("/v/json", validation="json")
    graph_error(sim.api("PATCH", p, ta, {"notificationUrl": rx.url("/v/json")}), 400,
                "ValidationError", "PATCH with a failing validation", VALIDATION_FAILED)
    st, _, obj = sim.api("GET", p, ta)
    check(obj["notificationUrl"] == subs["nurl"], "failed PATCH keeps the URL")
    sim.ok("/mode", {"validateOnPatch": False})
    st, _, _ = sim.api("PATCH", p, ta, {"expirationDateTime": iso(sim_now() + 4000 * 60)})
    check(st == 200 and len(rx.posts("/ens/graph", validation=True)) == n + 2,
          "validateOnPatch false: no validation")
    sim.ok("/mode", {"validateOnPatch": True})
    check(not any("within 10 minutes" in v for v in violations(sim)), "no 10-minute violation yet")
    st, _, obj = sim.api("POST", p + "/reauthorize", ta)
    check(st == 204 and obj is None, "reauthorize -> 204")
    check("reauthorize and renew within 10 minutes" in violations(sim),
          "violation: reauthorize within 10 minutes of a PATCH")
    c = {s["id"]: s for s in sim.ok("/subscriptions")}[s1]
    check(c["renewals"] == 3 and c["reauthorizations"] == 1, f"renewals counted {c}")
    count = len([v for v in violations(sim) if "within 10 minutes" in v])
    sim.advance(601)
    sim.ok("/mode", {"validateOnReauthorize": True})
    n = len(rx.posts("/ens/graph", validation=True))
    st, _, _ = sim.api("POST", p + "/reauthorize", ta)
    check(st == 204 and len(rx.posts("/ens/graph", validation=True)) == n + 1,
          "validateOnReauthorize: reauthorize validates")
    sim.ok("/mode", {"validateOnReauthorize": False})
    graph_error(sim.api("POST", f"/v1.0/subscriptions/{uuid.uuid4()}/reauthorize", ta), 404,
                "ResourceNotFound", "reauthorize unknown")
    graph_error(sim.api("PATCH", p, ta, "{}", headers={"Content-Type": "text/plain"}), 415,
                "UnsupportedMediaType", "PATCH text/plain")
    check(len([v for v in violations(sim) if "within 10 minutes" in v]) == count,
          "no 10-minute violation after 10 minutes")


def delivery(sim, rx, a, login, ctx, subs):
    ta, s1, state = ctx["ta"], subs["s1"], subs["state"]
    # shape, query string, both resource styles, 7-decimal offsets
    r1 = sim.ok("/newmail", {"mail": "alice@a.test", "subject": "Secret subject 2"})
    d = r1["deliveries"]
    check(len(d) == 1 and d[0]["subscriptionId"] == s1 and d[0]["status"] == 202
          and d[0]["outcome"] == "delivered" and d[0]["attempt"] == 1, f"/newmail delivery {d}")
    got = rx.posts("/ens/graph")
    check(len(got) == 1 and got[0]["query"] == "route=a%2Fb%2Bc&k=1", "query string kept exactly")
    check(got[0]["headers"].get("content-type") == "application/json; charset=utf-8",
          "notification Content-Type")
    item = json.loads(got[0]["body"])["value"][0]
    mid = r1["messageIds"][0]
    check(set(item) == {"id", "subscriptionId", "subscriptionExpirationDateTime", "clientState",
                        "changeType", "resource", "tenantId", "resourceData"}, f"item keys {item}")
    check(item["subscriptionId"] == s1 and item["clientState"] == state and item["changeType"]
          == "created" and item["tenantId"] == a.tenant and item["resourceData"]["id"] == mid
          and item["resourceData"]["@odata.id"] == item["resource"]
          and item["resourceData"]["@odata.etag"].startswith('W/"'), "item values")
    check(SEVEN.fullmatch(item["subscriptionExpirationDateTime"]), "7-decimal expiry with offset")
    uid = ctx["alice"]["id"]
    r2 = sim.ok("/newmail", {"mail": "alice@a.test", "subject": "Secret subject 3"})
    item2 = rx.items("/ens/graph")[-1]
    styles = {item["resource"], item2["resource"]}
    check(styles == {f"Users/{uid}/Messages/{mid}", f"Users('{uid}')/messages('{r2['messageIds'][0]}')"}
          or styles == {f"Users('{uid}')/messages('{mid}')", f"Users/{uid}/Messages/{r2['messageIds'][0]}"},
          f"both resource styles {styles}")
    check({item["resourceData"]["@odata.type"], item2["resourceData"]["@odata.type"]}
          == {"#Microsoft.Graph.Message", "#microsoft.graph.message"}, "@odata.type casings")
    check(item["subscriptionExpirationDateTime"] != item2["subscriptionExpirationDateTime"]
          and abs(parse_time(item["subscriptionExpirationDateTime"]) -
                  parse_time(item2["subscriptionExpirationDateTime"])) < 0.001,
          "expiry forms vary, same instant")
    before = len(rx.posts("/ens/graph"))
    quiet = sim.ok("/newmail", {"mail": "alice@a.test", "count": 2, "deliver": False})
    bodies = [json.loads(n["body"])["value"] for n in quiet["notifications"]]
    check(len(quiet["messageIds"]) == 2 and len(bodies) == 2
          and all(n["url"].endswith("/ens/graph?route=a%2Fb%2Bc&k=1") for n in quiet["notifications"])
          and [b[0]["resourceData"]["id"] for b in bodies] == quiet["messageIds"]
          and all(b[0]["clientState"] == state for b in bodies),
          f"deliver false returns the POSTs {quiet}")
    time.sleep(0.2)
    check(len(rx.posts("/ens/graph")) == before, "deliver false sends nothing")
    sim.ok("/mode", {"resourceStyle": "odata"})
    sim.ok("/newmail", {"mail": "alice@a.test"})
    check(rx.items("/ens/graph")[-1]["resource"].startswith(f"Users('{uid}')/messages('"),
          "resourceStyle odata")
    sim.ok("/mode", {"resourceStyle": "alternate"})
    # a batch across two subscriptions in one POST
    st, _, obj = sim.api("POST", "/v1.0/subscriptions", ta,
                         sub_body(rx.url("/ens/dave"), "users/dave@a.test/messages", state="dave-cs"),
                         headers=PREFER)
    s_dave = obj["id"]
    n = len(rx.posts("/ens/graph"))
    r = sim.ok("/newmail-batch", {"items": [{"mail": "alice@a.test"}, {"mail": "dave@a.test"}]})
    posts = rx.posts("/ens/graph")
    check(len(posts) == n + 1 and rx.posts("/ens/dave") == [], "one POST for the batch")
    value = json.loads(posts[-1]["body"])["value"]
    check([v["subscriptionId"] for v in value] == [s1, s_dave]
          and [v.get("clientState") for v in value] == [state, "dave-cs"]
          and [v["resourceData"]["id"] for v in value] == r["messageIds"],
          "batch items carry their own subscriptionId and clientState")
    # duplicates
    sim.ok("/mode", {"duplicates": True})
    n = len(rx.posts("/ens/dave"))
    r = sim.ok("/newmail", {"mail": "dave@a.test"})
    dup = rx.posts("/ens/dave")[n:]
    check(len(r["deliveries"]) == 2 and len(dup) == 2 and dup[0]["body"] == dup[1]["body"],
          "duplicates: the same notification POSTed twice")
    sim.ok("/mode", {"duplicates": False, "reorder": True})
    n = len(rx.items("/ens/dave"))
    r = sim.ok("/newmail", {"mail": "dave@a.test", "count": 3})
    check(sorted(i["resourceData"]["id"] for i in rx.items("/ens/dave")[n:]) == sorted(r["messageIds"]),
          "reorder: every notification still arrives")
    sim.ok("/mode", {"reorder": False})
    # retries after a 500, then a delivery
    rx.set("/ens/erin", notify="flaky:500")
    st, _, obj = sim.api("POST", "/v1.0/subscriptions", ta,
                         sub_body(rx.url("/ens/erin"), "users/erin@a.test/messages"), headers=PREFER)
    s_erin = obj["id"]
    delivered = sim.ok("/stats")["notifications_delivered"]
    r = sim.ok("/newmail", {"mail": "erin@a.test"})
    check(r["deliveries"][0]["status"] == 500 and r["deliveries"][0]["outcome"] == "failed",
          "first attempt answered 500")
    st, stats = sim.control("/wait", {"delivered": delivered + 1, "timeoutSeconds": 10})
    check(st == 200 and stats["notifications_failed_attempts"] >= 1, f"/wait for the retry {st}")
    atts = [x for x in sim.ok("/requests")["requests"] if x["kind"] == "notification"
            and x["subscriptionId"] == s_erin]
    check([(x["attempt"], x["status"]) for x in atts] == [(1, 500), (2, 202)],
          f"attempts recorded {atts}")
    check(not any("4xx" in v for v in violations(sim)), "a 500 is no violation")
    rx.hits["/ens/erin"] = 0
    rx.set("/ens/erin", notify="flaky:403")
    sim.ok("/newmail", {"mail": "erin@a.test"})
    wait_for(lambda: len([x for x in sim.ok("/requests")["requests"] if x["kind"] == "notification"
                          and x["subscriptionId"] == s_erin]) == 4, 10, "the 403 retry")
    check("notification answered 4xx" in violations(sim), "violation: notification answered 4xx")
    # lifecycle: reauthorizationRequired pauses; PATCH delivers the backlog
    lc = sim.ok("/lifecycle", {"subscriptionId": s1, "event": "reauthorizationRequired"})
    check(lc["deliveries"][0]["status"] == 202, f"lifecycle delivered {lc}")
    ev = rx.items("/ens/lc")[-1]
    check(set(ev) == {"subscriptionId", "subscriptionExpirationDateTime", "tenantId",
                      "clientState", "lifecycleEvent"} and ev["lifecycleEvent"] ==
          "reauthorizationRequired" and ev["clientState"] == state and ev["tenantId"] == a.tenant,
          f"lifecycle item without resource {ev}")
    check(not any(v.startswith("lifecycle answered") for v in violations(sim)), "202 no violation")
    check({s["id"]: s for s in sim.ok("/subscriptions")}[s1]["state"] == "paused", "paused")
    n = len(rx.posts("/ens/graph"))
    r = sim.ok("/newmail", {"mail": "alice@a.test", "subject": "Secret subject 4"})
    check(r["deliveries"][0]["outcome"] == "queued", "paused: queued")
    time.sleep(0.3)
    check(len(rx.posts("/ens/graph")) == n and
          {s["id"]: s for s in sim.ok("/subscriptions")}[s1]["backlog"] == 1, "nothing sent while paused")
    sim.advance(700)  # keep the 10-minute rule out of the way
    st, _, _ = sim.api("PATCH", f"/v1.0/subscriptions/{s1}", ta,
                       {"expirationDateTime": iso(sim_now() + 4000 * 60)})
    check(st == 200, "PATCH resumes")
    wait_for(lambda: any(i["resourceData"]["id"] == r["messageIds"][0]
                         for i in rx.items("/ens/graph")), 5, "the backlog after PATCH")
    check({s["id"]: s for s in sim.ok("/subscriptions")}[s1]["state"] == "live", "live again")
    # 202 rule, missed, no lifecycle URL
    rx.set("/ens/lc", notify="200")
    sim.ok("/lifecycle", {"subscriptionId": s1, "event": "missed"})
    check("lifecycle answered 200, expected 202" in violations(sim), "violation: lifecycle 200")
    check({s["id"]: s for s in sim.ok("/subscriptions")}[s1]["state"] == "live", "missed changes nothing")
    rx.set("/ens/lc", notify="202")
    lc = sim.ok("/lifecycle", {"subscriptionId": s_dave, "event": "missed"})
    check(lc["deliveries"] == [{"subscriptionId": s_dave, "outcome": "undeliverable"}]
          and sim.ok("/stats")["lifecycle_undeliverable"] == 1, "no lifecycle URL: undeliverable")
    # post-raw
    raw = sim.ok("/post-raw", {"subscriptionId": s1, "body": "garbage{"})
    check(raw["status"] == 202 and rx.posts("/ens/graph")[-1]["body"] == b"garbage{",
          f"post-raw sends verbatim {raw}")
    raw = sim.ok("/post-raw", {"subscriptionId": s1, "body": {"value": []}, "lifecycle": True})
    check(raw["status"] == 202 and json.loads(rx.posts("/ens/lc")[-1]["body"]) == {"value": []},
          "post-raw to the lifecycle URL")
    # subscriptionRemoved deletes
    sim.ok("/lifecycle", {"mail": "alice@a.test", "event": "subscriptionRemoved"})
    check(rx.items("/ens/lc")[-1]["lifecycleEvent"] == "subscriptionRemoved", "subscriptionRemoved sent")
    check({s["id"]: s for s in sim.ok("/subscriptions")}[s1]["state"] == "removed", "removed")
    n = len(rx.posts("/ens/graph"))
    r = sim.ok("/newmail", {"mail": "alice@a.test"})
    check(r["deliveries"] == [] and len(rx.posts("/ens/graph")) == n, "removed: nothing delivered")
    graph_error(sim.api("GET", f"/v1.0/subscriptions/{s1}", ta), 404, "ResourceNotFound",
                "GET removed")
    graph_error(sim.api("PATCH", f"/v1.0/subscriptions/{s1}", ta,
                        {"expirationDateTime": iso(sim_now() + 3600)}), 404, "ResourceNotFound",
                "PATCH removed")
    stats = sim.ok("/stats")
    check(stats["first_attempt_ms"]["count"] >= 5 and stats["first_attempt_ms"]["p50"] is not None
          and stats["lifecycle_delivered"] >= 3, f"delivery stats {stats}")
    ctx["s_dave"] = s_dave


def first_timeout(sim, rx3, ctx):
    rx3.set("/t/slow", notify="slowfirst:3400")
    st, _, obj = sim.api("POST", "/v1.0/subscriptions", ctx["ta"],
                         sub_body(rx3.url("/t/slow"), "users/grace@a.test/mailFolders/inbox/messages"),
                         headers=PREFER)
    check(st == 201, "grace's inbox subscription")
    delivered = sim.ok("/stats")["notifications_delivered"]
    r = sim.ok("/newmail", {"mail": "grace@a.test"})
    d = r["deliveries"][0]
    check(d["outcome"] == "failed" and d["status"] is None and d.get("error") == "timeout"
          and 3000 <= d["elapsedMs"] < 3400, f"no answer within 3 s: a failed first attempt {d}")
    st, _ = sim.control("/wait", {"delivered": delivered + 1, "timeoutSeconds": 10})
    check(st == 200 and len(rx3.posts("/t/slow")) == 2, "retried and delivered")
    sim.api("DELETE", f"/v1.0/subscriptions/{obj['id']}", ctx["ta"])


def throttling(sim, ctx):
    ta = ctx["ta"]
    path = "/v1.0/users/bob@a.test/mailFolders/inbox?$select=unreadItemCount"
    sim.ok("/hold", {"mail": "bob@a.test", "ms": 2000})
    results = []

    def one():
        results.append(sim.api("GET", path, ta, fresh=True))
    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    wait_for(lambda: sim.ok("/stats")["max_in_flight"].get("bob@a.test") == 4, 10,
             "four requests in flight")
    fifth = sim.api("GET", path, ta, fresh=True)
    for t in threads:
        t.join()
    err = graph_error(fifth, 429, "ApplicationThrottled", "a fifth concurrent request",
                      "Application is over its MailboxConcurrency limit.")
    check(fifth[1].get("retry-after") == "1" and err, "429 Retry-After: 1")
    check(sorted(r[0] for r in results) == [200] * 4, "four concurrent requests answered")
    stats = sim.ok("/stats")
    check(stats["max_in_flight"].get("bob@a.test") == 4 and stats["throttled"] == 1,
          f"max_in_flight and throttled {stats}")
    sim.ok("/hold", {"mail": "bob@a.test", "ms": 0})
    mpath = f"/v1.0/users/alice@a.test/messages/{ctx['mid']}?$select=subject"
    sim.ok("/fail", {"operation": "get-message", "status": 429, "retryAfter": 3, "count": 1})
    st, hd, obj = sim.api("GET", mpath, ta)
    check(st == 429 and hd.get("retry-after") == "3" and obj["error"]["code"] == "TooManyRequests",
          "injected 429 with Retry-After")
    st, _, _ = sim.api("GET", mpath, ta)
    check(st == 200 and "request before Retry-After elapsed (get-message)" in violations(sim),
          "violation: request before Retry-After elapsed")
    recs = [r for r in sim.ok("/requests")["requests"] if r.get("operation") == "get-message"]
    check(recs[-1]["beforeRetryAfter"] is True and recs[-2]["status"] == 429
          and recs[-1]["path"] == "/v1.0/users/{id}/messages/{id}" and recs[-1]["select"] == ["subject"],
          "API request records")
    bpath = f"/v1.0/users/bob@a.test/messages/{ctx['mid']}?$select=subject"
    sim.ok("/fail", {"operation": "get-message", "status": 503, "count": 1, "mail": "Alice@A.test"})
    st, _, _ = sim.api("GET", bpath, ta)
    check(st != 503, "a failure scoped to one mailbox spares another")
    graph_error(sim.api("GET", mpath, ta), 503, "ServiceUnavailable", "a failure scoped to the mailbox")
    check(sim.api("GET", mpath, ta)[0] == 200, "a scoped failure used up")
    check(sim.control("/fail", {"operation": "token", "status": 503, "mail": "alice@a.test"})[0] == 400,
          "no mailbox for token failures")
    sim.ok("/fail", {"operation": "create", "status": 503, "count": 1, "delayMs": 100})
    graph_error(sim.api("POST", "/v1.0/subscriptions", ta, {}), 503, "ServiceUnavailable",
                "injected create failure")


def health(sim, rx2, ctx):
    ta = ctx["ta"]
    rx2.set("/h/slow", notify="slow:400")
    st, _, obj = sim.api("POST", "/v1.0/subscriptions", ta,
                         sub_body(rx2.url("/h/slow"), "users/frank@a.test/messages",
                                  lifecycle=rx2.url("/h/lc")), headers=PREFER)
    check(st == 201, "frank's subscription")
    s_frank = obj["id"]
    sim.ok("/mode", {"healthMinSamples": 1, "slowMs": 200, "dropMs": 100000})
    r = sim.ok("/newmail", {"mail": "frank@a.test"})
    check(r["deliveries"][0]["outcome"] == "delivered" and r["deliveries"][0]["elapsedMs"] >= 400,
          "a slow answer is still delivered")
    r = sim.ok("/newmail", {"mail": "frank@a.test"})
    check(r["deliveries"][0]["outcome"] == "delayed", "slow endpoint: new notification delayed")
    time.sleep(0.3)
    check(len(rx2.posts("/h/slow")) == 1, "delayed: not sent yet")
    sim.advance(601)
    wait_for(lambda: len([x for x in sim.ok("/requests")["requests"] if x["kind"] == "notification"
                          and x["subscriptionId"] == s_frank]) == 2, 5,
             "the delayed notification after 10 minutes")
    check(len(rx2.posts("/h/slow")) == 2, "the delayed notification arrived")
    sim.ok("/mode", {"slowMs": 100000, "dropMs": 200})
    dropped = sim.ok("/stats")["notifications_dropped"]
    r = sim.ok("/newmail", {"mail": "frank@a.test"})
    check(r["deliveries"][0]["outcome"] == "dropped"
          and sim.ok("/stats")["notifications_dropped"] == dropped + 1, "drop state: dropped")
    time.sleep(0.3)
    check(len(rx2.posts("/h/slow")) == 2, "dropped: nothing sent")
    sim.advance(601)
    wait_for(lambda: any(i.get("lifecycleEvent") == "missed" and i["subscriptionId"] == s_frank
                         for i in rx2.items("/h/lc")), 5, "missed after the drop state")
    sim.ok("/mode", {"healthMinSamples": 20, "slowMs": 3000, "dropMs": 10000})


def clock(sim, rx, a, login, ctx):
    ta = ctx["ta"]
    rx.set("/ens/down", notify="500")
    st, _, obj = sim.api("POST", "/v1.0/subscriptions", ta,
                         sub_body(rx.url("/ens/down"), "users/grace@a.test/messages"), headers=PREFER)
    s_grace = obj["id"]
    dropped = sim.ok("/stats")["notifications_dropped"]
    sim.ok("/newmail", {"mail": "grace@a.test", "wait": False})
    wait_for(lambda: len(rx.posts("/ens/down")) >= 4, 10, "retries to a failing endpoint")
    sim.advance(4 * 3600 + 60)
    wait_for(lambda: sim.ok("/stats")["notifications_dropped"] == dropped + 1, 10,
             "dropped after 4 hours of retries")
    check(any(r["kind"] == "dropped" and r["subscriptionId"] == s_grace and "4 hours" in r["reason"]
              for r in sim.ok("/requests")["requests"]), "4-hour drop recorded")
    graph_error(sim.api("GET", "/v1.0/subscriptions", ta), 401, "InvalidAuthenticationToken",
                "app token expired by the clock", "Lifetime validation failed, the token is expired.")
    graph_error(sim.api("GET", "/v1.0/me", ctx["alice_tok"]), 401, "InvalidAuthenticationToken",
                "delegated token expired by the clock",
                "Lifetime validation failed, the token is expired.")
    ta2 = app_token(sim, a, login)
    bob_tok = user_token(sim, "bob@a.test")
    graph_error(sim.api("PATCH", f"/v1.0/subscriptions/{ctx['s_bob']}",
                        bob_tok, {"expirationDateTime": iso(sim_now() + 3600)}), 404,
                "ResourceNotFound", "PATCH after expiry")
    states = {s["id"]: s["state"] for s in sim.ok("/subscriptions")}
    check(states[ctx["s_bob"]] == "expired" and states[ctx["s_dave"]] == "live",
          "expired by the clock; a longer one lives")
    st, _, _ = sim.api("GET", f"/v1.0/subscriptions/{ctx['s_dave']}", ta2)
    check(st == 200, "a new token after the clock moved")
    sim.ok("/revoke", {"mail": "bob@a.test"})
    graph_error(sim.api("GET", "/v1.0/me", bob_tok), 401, "InvalidAuthenticationToken",
                "revoked delegated token", "Access token validation failure.")
    other = app_token(sim, a, login)
    check(sim.ok("/revoke", {"tenant": a.tenant})["revoked"] >= 2, "/revoke a tenant's app tokens")
    graph_error(sim.api("GET", "/v1.0/subscriptions", other), 401, "InvalidAuthenticationToken",
                "revoked app token", "Access token validation failure.")
    short = user_token(sim, "alice@a.test", lifetimeSeconds=60)
    st, _, _ = sim.api("GET", "/v1.0/me?$select=id", short)
    sim.advance(61)
    graph_error(sim.api("GET", "/v1.0/me?$select=id", short), 401, "InvalidAuthenticationToken",
                "lifetimeSeconds", "Lifetime validation failed, the token is expired.")
    check(st == 200, "a short delegated token worked before")


# -- rich notifications: encrypted content and validation tokens ------------------------------
CHANGE_TRACKING = "0bf30f3b-4a52-48df-9a82-234910c4a086"
V1_CLAIMS = {"aud", "iss", "iat", "nbf", "exp", "appid", "appidacr", "idp", "oid", "sub", "tid",
             "uti", "ver"}
V2_CLAIMS = {"aud", "iss", "iat", "nbf", "exp", "azp", "azpacr", "idp", "oid", "sub", "tid",
             "uti", "ver"}
RICH_ITEM = {"id", "subscriptionId", "subscriptionExpirationDateTime", "clientState",
             "changeType", "resource", "tenantId", "resourceData", "encryptedContent"}
ENCRYPTED = {"data", "dataKey", "dataSignature", "encryptionCertificateId",
             "encryptionCertificateThumbprint"}


def b64url_decode(part):
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


class Verifier:
    """Validates validation tokens as ENS must, independently of the simulator's code:
    the openid configuration and the JWKS fetched over HTTPS, RS256 with `cryptography`,
    then the claims. Counts its fetches."""

    def __init__(self, sim, login):
        self.sim, self.login = sim, login
        self.openid = self.jwks = 0

    def keys(self, version):
        v2 = "/v2.0" if version == "2.0" else ""
        st, hd, data = self.sim.https("GET", f"/common{v2}/.well-known/openid-configuration")
        self.openid += 1
        conf = json.loads(data)
        check(st == 200 and hd["content-type"].startswith("application/json")
              and conf["jwks_uri"] == f"{self.login}/common/discovery{v2}/keys"
              and conf["id_token_signing_alg_values_supported"] == ["RS256"]
              and conf["issuer"] == (f"{self.login}/{{tenantid}}/v2.0" if v2
                                     else "https://sts.windows.net/{tenantid}/"),
              f"openid configuration {version}: {st} {conf}")
        st, hd, data = self.sim.https("GET", conf["jwks_uri"][len(self.login):])
        self.jwks += 1
        keys = json.loads(data)["keys"]
        check(st == 200 and keys, f"JWKS {version}")
        out = {}
        for k in keys:
            der = base64.b64decode(k["x5c"][0])
            cert = x509.load_der_x509_certificate(der)
            pub = rsa.RSAPublicNumbers(int.from_bytes(b64url_decode(k["e"]), "big"),
                                       int.from_bytes(b64url_decode(k["n"]), "big")).public_key()
            check(k["kty"] == "RSA" and k["use"] == "sig" and "=" not in k["n"] + k["e"]
                  and k["x5t"] == b64url(hashlib.sha1(der).digest())
                  and cert.public_key().public_numbers() == pub.public_numbers()
                  and pub.key_size == 2048, f"JWK {k['kid']}: n/e, x5c and x5t agree")
            out[k["kid"]] = (k, pub)
        return out

    def kids(self, version="1.0"):
        return list(self.keys(version))

    def verify(self, token, app, version="1.0"):
        """-> (header, claims, problem): problem None when valid, else one of malformed,
        unknown kid, signature, expired, not yet valid, audience, caller, issuer."""
        if not isinstance(token, str) or token.count(".") != 2:
            return None, None, "malformed"
        SECRETS.append(token)
        h64, c64, s64 = token.split(".")
        header, claims = json.loads(b64url_decode(h64)), json.loads(b64url_decode(c64))
        if header.get("alg") != "RS256" or header.get("typ") != "JWT":
            return header, claims, "malformed"
        keys = self.keys(version)
        if header.get("kid") not in keys:
            return header, claims, "unknown kid"
        jwk, pub = keys[header["kid"]]
        if header.get("x5t") != jwk["x5t"]:
            return header, claims, "unknown kid"
        try:
            pub.verify(b64url_decode(s64), f"{h64}.{c64}".encode(), padding.PKCS1v15(),
                       hashes.SHA256())
        except Exception:  # InvalidSignature
            return header, claims, "signature"
        now = time.time()  # real time: the simulator clock has moved on
        if claims["exp"] <= now - 300:
            return header, claims, "expired"
        if claims["nbf"] > now + 300:
            return header, claims, "not yet valid"
        if claims["aud"] != app.client:
            return header, claims, "audience"
        if claims.get("azp" if version == "2.0" else "appid") != CHANGE_TRACKING:
            return header, claims, "caller"
        iss = (f"{self.login}/{app.tenant}/v2.0" if version == "2.0"
               else f"https://sts.windows.net/{app.tenant}/")
        if claims["iss"] != iss or claims["tid"] != app.tenant:
            return header, claims, "issuer"
        return header, claims, None


def rich(sim, rx, a, b, login, ctx):
    ta, tb = app_token(sim, a, login), app_token(sim, b, login)
    v = Verifier(sim, login)
    sim.ok("/users", {"tenant": a.tenant, "mail": "rita@a.test", "displayName": "Rita R"})
    sim.ok("/users", {"tenant": b.tenant, "mail": "rob@b.test"})
    k1, _, der1 = graph_decrypt.new_device_certificate()
    k2, _, der2 = graph_decrypt.new_device_certificate()
    keys = {"dev-1": k1, "dev-2": k2}
    b64 = lambda der: base64.b64encode(der).decode()  # noqa: E731
    select = "subject,from,receivedDateTime,importance,hasAttachments,bodyPreview"

    def rich_body(path, resource, der, cid, **kw):
        return sub_body(rx.url(path), resource, minutes=1000, includeResourceData=True,
                        encryptionCertificate=b64(der), encryptionCertificateId=cid, **kw)
    # the device certificates Graph refuses
    for what, cert in (("an EC", graph_decrypt.new_device_certificate(key_type="ec")),
                       ("a 1024-bit", graph_decrypt.new_device_certificate(bits=1024))):
        graph_error(sim.api("POST", "/v1.0/subscriptions", ta,
                            rich_body("/ens/rita", f"users/rita@a.test/messages?$select={select}",
                                      cert[2], "x"), headers=PREFER),
                    400, "InvalidRequest", f"{what} encryption certificate")
    st, _, obj = sim.api("POST", "/v1.0/subscriptions", ta, rich_body(
        "/ens/rita", f"users/rita@a.test/messages?$select={select}", der1, "dev-1",
        lifecycle=rx.url("/ens/rita-lc"), state="rita-cs"), headers=PREFER)
    check(st == 201, f"rich subscription for rita ({st} {obj})")
    s_rita = obj["id"]
    st, _, obj = sim.api("POST", "/v1.0/subscriptions", tb, rich_body(
        "/ens/rob", "users/rob@b.test/mailFolders('inbox')/messages?$select=Subject", der1,
        "dev-1"), headers=PREFER)
    check(st == 201, f"rich subscription for rob ({st} {obj})")
    s_rob = obj["id"]
    listing = {s["id"]: s for s in sim.ok("/subscriptions")}
    c = listing[s_rita]
    check(c["includeResourceData"] is True and c["encryptionCertificateId"] == "dev-1"
          and c["encryptionCertificateThumbprint"] == hashlib.sha1(der1).hexdigest().upper()
          and c["resource"].endswith(select) and c["reauthorizeGracePending"] is False,
          f"control /subscriptions: rich fields {c}")
    c = listing[ctx["s_dave"]]
    check(c["includeResourceData"] is False and c["encryptionCertificateId"] is None
          and c["encryptionCertificateThumbprint"] is None, f"control: plain subscription {c}")

    def last(path):
        return json.loads(rx.posts(path)[-1]["body"])

    # one rich notification: decrypts to exactly the selected properties
    r = sim.ok("/newmail", {"mail": "rita@a.test", "subject": "Secret subject R",
                            "fromName": "Quinn", "fromAddress": "quinn@x.test",
                            "bodyPreview": "Secret preview"})
    check(r["deliveries"][0]["outcome"] == "delivered", f"rich delivery {r}")
    body = last("/ens/rita")
    item = body["value"][0]
    check(set(body) == {"value", "validationTokens"} and len(body["validationTokens"]) == 1,
          f"a rich POST carries one validation token {list(body)}")
    check(set(item) == RICH_ITEM and set(item["encryptedContent"]) == ENCRYPTED
          and set(item["resourceData"]) == {"@odata.type", "@odata.id", "@odata.etag", "id"}
          and item["resourceData"]["id"] == r["messageIds"][0], f"rich item keys {item}")
    enc = item["encryptedContent"]
    check(enc["encryptionCertificateId"] == "dev-1"
          and enc["encryptionCertificateThumbprint"] == hashlib.sha1(der1).hexdigest().upper(),
          "certificate id and thumbprint")
    plain = graph_decrypt.decrypt(enc, keys)
    check(set(plain) == {"@odata.type", "@odata.id", "@odata.etag", "id", "subject", "from",
                         "receivedDateTime", "importance", "hasAttachments", "bodyPreview"},
          f"decrypted: exactly the selected properties {sorted(plain)}")
    check(plain["@odata.type"] == "#Microsoft.Graph.Message" and plain["id"] == r["messageIds"][0]
          and plain["@odata.id"] == item["resource"]
          and plain["@odata.etag"] == item["resourceData"]["@odata.etag"]
          and plain["subject"] == "Secret subject R" and plain["bodyPreview"] == "Secret preview"
          and plain["from"] == {"emailAddress": {"name": "Quinn", "address": "quinn@x.test"}}
          and plain["importance"] == "normal" and plain["hasAttachments"] is False
          and SEVEN.fullmatch(plain["receivedDateTime"]), f"decrypted values {plain}")
    # the same steps, done here by hand
    priv = serialization.load_pem_private_key(k1, None)
    aes = priv.decrypt(base64.b64decode(enc["dataKey"]), padding.OAEP(
        mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None))
    mac = hmac.HMAC(aes, hashes.SHA256())
    mac.update(base64.b64decode(enc["data"]))
    check(len(aes) == 32 and base64.b64encode(mac.finalize()).decode() == enc["dataSignature"],
          "a 32-byte key; dataSignature = HMAC-SHA256(key, data)")
    raw = bytearray(base64.b64decode(enc["data"]))
    raw[3] ^= 0x80
    for what, content, kd, text in (
            ("tampered data", dict(enc, data=base64.b64encode(bytes(raw)).decode()), keys,
             "dataSignature"),
            ("an unknown certificate id", dict(enc, encryptionCertificateId="dev-9"), keys,
             "no private key"),
            ("the wrong private key", enc, {"dev-1": k2}, "dataKey"),
            ("a signature that is no base64", dict(enc, dataSignature="!!"), keys, "base64")):
        try:
            graph_decrypt.decrypt(content, kd)
            check(False, f"decrypt refuses {what}")
        except graph_decrypt.DecryptError as e:
            check(text in str(e), f"decrypt refuses {what}: {e}")
    # its validation token (v1.0)
    header, claims, problem = v.verify(body["validationTokens"][0], a)
    check(problem is None, f"validation token valid: {problem} {claims}")
    check(set(header) == {"typ", "alg", "kid", "x5t"} and set(claims) == V1_CLAIMS
          and claims["ver"] == "1.0" and claims["appidacr"] == "2"
          and claims["idp"] == f"https://sts.windows.net/{a.tenant}/"
          and claims["exp"] - claims["iat"] == 3600 and claims["nbf"] == claims["iat"]
          and claims["oid"] == claims["sub"] and GUID.fullmatch(claims["oid"]),
          f"v1.0 claims {header} {claims}")
    check(abs(claims["iat"] - time.time()) < 60 and abs(claims["iat"] - sim_now()) > 600,
          "token times are real time, not the simulator clock")
    # v2.0, alternate
    sim.ok("/mode", {"validationTokenVersion": "2.0"})
    sim.ok("/newmail", {"mail": "rita@a.test"})
    header, claims, problem = v.verify(last("/ens/rita")["validationTokens"][0], a, "2.0")
    check(problem is None and set(claims) == V2_CLAIMS and claims["ver"] == "2.0"
          and claims["azpacr"] == "2" and claims["iss"] == f"{login}/{a.tenant}/v2.0",
          f"v2.0 token {problem} {claims}")
    sim.ok("/mode", {"validationTokenVersion": "alternate"})
    vers = set()
    for _ in range(2):
        sim.ok("/newmail", {"mail": "rita@a.test"})
        tok = last("/ens/rita")["validationTokens"][0]
        vers.add(json.loads(b64url_decode(tok.split(".")[1]))["ver"])
    check(vers == {"1.0", "2.0"}, f"alternate versions {vers}")
    sim.ok("/mode", {"validationTokenVersion": "1.0"})
    # a batch: rich items of two tenants and a plain one in one POST
    r = sim.ok("/newmail-batch", {"items": [{"mail": "rita@a.test"}, {"mail": "rob@b.test"},
                                            {"mail": "rita@a.test"}, {"mail": "dave@a.test"}]})
    body = last("/ens/rita")
    items = body["value"]
    check(len(items) == 4 and ["encryptedContent" in i for i in items] == [True, True, True, False],
          "batch: the plain item has no encryptedContent")
    check(len({i["encryptedContent"]["dataKey"] for i in items[:3]}) == 3,
          "a fresh key for every item")
    plains = [graph_decrypt.decrypt(i["encryptedContent"], keys) for i in items[:3]]
    check([p["id"] for p in plains] == r["messageIds"][:3]
          and set(plains[1]) == {"@odata.type", "@odata.id", "@odata.etag", "id", "subject"},
          "batch items decrypt; rob's selects subject only")
    toks = body["validationTokens"]
    check(len(toks) == 2, f"one token per (application, tenant): {len(toks)}")
    results = [v.verify(t, app) for t, app in zip(toks, (a, b))]
    check([p for _, _, p in results] == [None, None]
          and {c["tid"] for _, c, _ in results} == {a.tenant, b.tenant}, "both tokens valid")
    sim.ok("/newmail", {"mail": "dave@a.test"})
    check(set(last("/ens/dave")) == {"value"}, "a POST without rich items has no validationTokens")
    quiet = sim.ok("/newmail", {"mail": "rita@a.test", "deliver": False})
    qb = json.loads(quiet["notifications"][0]["body"])
    check(graph_decrypt.decrypt(qb["value"][0]["encryptedContent"], keys)["id"]
          == quiet["messageIds"][0] and v.verify(qb["validationTokens"][0], a)[2] is None,
          "deliver false: the bodies carry encryptedContent and validationTokens")
    # faults, each for one POST
    faults = {"bad-signature": "signature", "expired": "expired", "not-yet-valid": "not yet valid",
              "wrong-audience": "audience", "wrong-azp": "caller", "wrong-issuer": "issuer",
              "unknown-kid": "unknown kid"}
    for fault in ["tampered-data", "missing-token", "null-token"] + list(faults):
        sim.ok("/mode", {"blindFault": fault, "blindFaultCount": 1})
        sim.ok("/newmail", {"mail": "rita@a.test"})
        body = last("/ens/rita")
        enc = body["value"][0]["encryptedContent"]
        if fault == "tampered-data":
            try:
                graph_decrypt.decrypt(enc, keys)
                check(False, "tampered-data: HMAC check fails")
            except graph_decrypt.DecryptError as e:
                check("dataSignature" in str(e), f"tampered-data: HMAC check fails ({e})")
            check(v.verify(body["validationTokens"][0], a)[2] is None, "tampered-data: token ok")
        elif fault == "missing-token":
            check("validationTokens" not in body, "missing-token: no validationTokens")
        elif fault == "null-token":
            check(body["validationTokens"] == [None], "null-token: [null]")
        else:
            header, claims, problem = v.verify(body["validationTokens"][0], a)
            check(problem == faults[fault], f"{fault}: want {faults[fault]}, got {problem}")
            if fault == "expired":
                check(claims["exp"] < time.time() - 500 and claims["iat"] < claims["exp"],
                      "expired: exp 10 minutes ago")
            if fault == "not-yet-valid":
                check(claims["nbf"] > time.time() + 500, "not-yet-valid: nbf 10 minutes ahead")
        if fault != "tampered-data":
            graph_decrypt.decrypt(enc, keys)
        check(sim.ok("/mode", {})["blindFault"] == "none", f"{fault}: used up after one POST")
        sim.ok("/newmail", {"mail": "rita@a.test"})
        body = last("/ens/rita")
        check(v.verify(body["validationTokens"][0], a)[2] is None
              and graph_decrypt.decrypt(body["value"][0]["encryptedContent"], keys),
              f"{fault}: the next POST is clean")
    recs = [x for x in sim.ok("/requests")["requests"] if x["kind"] == "notification"
            and x.get("blindFault")]
    check(len(recs) == 10 and all(x["rich"] == 1 for x in recs), "faults recorded per attempt")
    m = sim.ok("/mode", {"blindFault": "wrong-audience"})
    check(m["blindFault"] == "wrong-audience" and m["blindFaultCount"] is None, "fault until changed")
    for _ in range(2):
        sim.ok("/newmail", {"mail": "rita@a.test"})
        check(v.verify(last("/ens/rita")["validationTokens"][0], a)[2] == "audience",
              "the fault stays until changed")
    sim.ok("/mode", {"blindFault": "none"})
    sim.ok("/newmail", {"mail": "rita@a.test"})
    check(v.verify(last("/ens/rita")["validationTokens"][0], a)[2] is None, "none clears it")
    for bad in ({"blindFault": "bogus"}, {"blindFaultCount": 0}, {"validationTokenVersion": "3.0"},
                {"reauthorizeGraceSeconds": -1}):
        check(sim.control("/mode", bad)[0] == 400, f"bad /mode {bad}")
    # a retry gets fresh tokens for the same encrypted items
    rx.set("/ens/rita", notify="flaky:500")
    rx.hits["/ens/rita"] = 0
    n = len(rx.posts("/ens/rita"))
    delivered = sim.ok("/stats")["notifications_delivered"]
    sim.ok("/newmail", {"mail": "rita@a.test"})
    st, _ = sim.control("/wait", {"delivered": delivered + 1, "timeoutSeconds": 10})
    two = [json.loads(x["body"]) for x in rx.posts("/ens/rita")[n:]]
    check(st == 200 and len(two) == 2 and two[0]["value"] == two[1]["value"]
          and all(v.verify(x["validationTokens"][0], a)[2] is None for x in two),
          "the retry carries the same encryptedContent and a valid token")
    rx.set("/ens/rita", notify="202")
    # signing key rotation
    first = sim.ok("/signing-keys")
    check(first["published"] == [first["kid"]] and v.kids() == [first["kid"]]
          and v.kids("2.0") == [first["kid"]], "one published key")
    rot = sim.ok("/signing-keys/rotate", {})
    check(rot["kid"] != first["kid"] and rot["published"] == [rot["kid"]]
          and v.kids() == [rot["kid"]] and v.kids("2.0") == [rot["kid"]],
          f"rotate: the new key replaces the old one {rot}")
    sim.ok("/newmail", {"mail": "rita@a.test"})
    tok = last("/ens/rita")["validationTokens"][0]
    header, _, problem = v.verify(tok, a)
    check(problem is None and header["kid"] == rot["kid"], "signed with the new key")
    rot2 = sim.ok("/signing-keys/rotate", {"keepOld": True})
    check(rot2["published"] == [rot2["kid"], rot["kid"]] and v.kids() == rot2["published"],
          f"keepOld: both published {rot2}")
    check(v.verify(tok, a)[2] is None, "a token of the kept key still verifies")
    sim.ok("/signing-keys/rotate", {})
    check(v.verify(tok, a)[2] == "unknown kid", "a dropped key's token no longer verifies")
    check(sim.control("/signing-keys/rotate", {"keepOld": "yes"})[0] == 400, "bad keepOld")
    # PATCH: a new encryption certificate
    p = f"/v1.0/subscriptions/{s_rita}"
    graph_error(sim.api("PATCH", p, ta, {"encryptionCertificate": b64(der2)}), 400,
                "InvalidRequest", "PATCH a certificate without its id")
    graph_error(sim.api("PATCH", p, ta, {"encryptionCertificateId": "dev-2"}), 400,
                "InvalidRequest", "PATCH an id without its certificate")
    graph_error(sim.api("PATCH", p, ta, {"encryptionCertificate": b64(
        graph_decrypt.new_device_certificate(key_type="ec")[2]), "encryptionCertificateId": "d"}),
        400, "InvalidRequest", "PATCH an EC certificate")
    graph_error(sim.api("PATCH", f"/v1.0/subscriptions/{ctx['s_dave']}", ta, {
        "encryptionCertificate": b64(der2), "encryptionCertificateId": "dev-2"}), 400,
        "InvalidRequest", "PATCH a certificate onto a plain subscription")
    renewals = {s["id"]: s for s in sim.ok("/subscriptions")}[s_rita]["renewals"]
    st, _, obj = sim.api("PATCH", p, ta, {"encryptionCertificate": b64(der2),
                                          "encryptionCertificateId": "dev-2"})
    check(st == 200 and obj["encryptionCertificateId"] == "dev-2"
          and obj["encryptionCertificate"] == b64(der2), f"PATCH the certificate {st} {obj}")
    c = {s["id"]: s for s in sim.ok("/subscriptions")}[s_rita]
    check(c["encryptionCertificateId"] == "dev-2" and c["renewals"] == renewals
          and c["encryptionCertificateThumbprint"] == hashlib.sha1(der2).hexdigest().upper(),
          f"control: the new certificate {c}")
    sim.ok("/newmail", {"mail": "rita@a.test"})
    enc = last("/ens/rita")["value"][0]["encryptedContent"]
    check(enc["encryptionCertificateId"] == "dev-2"
          and enc["encryptionCertificateThumbprint"] == hashlib.sha1(der2).hexdigest().upper()
          and graph_decrypt.decrypt(enc, {"dev-2": k2})["subject"] == "Hello",
          "later notifications use the new certificate")
    try:
        graph_decrypt.decrypt(enc, {"dev-1": k1})
        check(False, "the old key alone no longer decrypts")
    except graph_decrypt.DecryptError:
        pass
    # reauthorizeGraceSeconds
    sim.advance(700)  # keep the 10-minute rule out of the way
    sim.ok("/mode", {"reauthorizeGraceSeconds": 1})

    def state():
        return {s["id"]: s for s in sim.ok("/subscriptions")}[s_rita]

    def graces():
        return [x["outcome"] for x in sim.ok("/requests")["requests"]
                if x["kind"] == "reauthorizeGrace" and x["subscriptionId"] == s_rita]
    t0 = time.monotonic()
    sim.ok("/lifecycle", {"subscriptionId": s_rita, "event": "reauthorizationRequired"})
    check(state()["state"] == "live" and state()["reauthorizeGracePending"],
          "grace: still live after reauthorizationRequired")
    r = sim.ok("/newmail", {"mail": "rita@a.test"})
    check(r["deliveries"][0]["outcome"] == "delivered", "grace: still delivered")
    wait_for(lambda: state()["state"] == "paused", 5, "paused after the grace period")
    check(time.monotonic() - t0 >= 0.95 and graces() == ["started", "paused"],
          f"grace: paused after 1 s, recorded {graces()}")
    r = sim.ok("/newmail", {"mail": "rita@a.test"})
    check(r["deliveries"][0]["outcome"] == "queued", "paused: queued")
    n = len(rx.posts("/ens/rita"))
    st, _, _ = sim.api("POST", p + "/reauthorize", ta)
    wait_for(lambda: len(rx.posts("/ens/rita")) == n + 1, 5, "the backlog after reauthorize")
    body = last("/ens/rita")
    check(st == 204 and body["value"][0]["resourceData"]["id"] == r["messageIds"][0]
          and v.verify(body["validationTokens"][0], a)[2] is None
          and graph_decrypt.decrypt(body["value"][0]["encryptedContent"], keys),
          "the backlog is rich, with a fresh valid token")
    sim.ok("/lifecycle", {"subscriptionId": s_rita, "event": "reauthorizationRequired"})
    st, _, _ = sim.api("POST", p + "/reauthorize", ta)
    time.sleep(1.3)
    check(st == 204 and state()["state"] == "live" and not state()["reauthorizeGracePending"]
          and graces()[-2:] == ["started", "reauthorized"], f"reauthorized in time {graces()}")
    sim.advance(700)
    sim.ok("/lifecycle", {"subscriptionId": s_rita, "event": "reauthorizationRequired"})
    st, _, _ = sim.api("PATCH", p, ta, {"expirationDateTime": iso(sim_now() + 1000 * 60)})
    time.sleep(1.3)
    check(st == 200 and state()["state"] == "live" and graces()[-2:] == ["started", "patched"],
          f"PATCHed in time {graces()}")
    sim.ok("/mode", {"reauthorizeGraceSeconds": 0})
    sim.advance(700)
    sim.ok("/lifecycle", {"subscriptionId": s_rita, "event": "reauthorizationRequired"})
    check(state()["state"] == "paused", "grace 0: paused at once")
    # fetch counters, methods
    stats = sim.ok("/stats")
    check(stats["openid_config_fetches"] == v.openid and stats["jwks_fetches"] == v.jwks
          and v.openid > 30 and stats["validation_tokens_issued"] >= 30,
          f"fetches counted {stats['openid_config_fetches']}/{v.openid} "
          f"{stats['jwks_fetches']}/{v.jwks}")
    st, hd, _ = sim.https("POST", "/common/discovery/keys", b"")
    check(st == 405 and hd.get("allow") == "GET" and sim.ok("/stats")["jwks_fetches"] == v.jwks,
          "POST to the JWKS -> 405, not counted")
    # the decryptor's command line
    with tempfile.TemporaryDirectory() as tmp:
        key_path, cert_path = os.path.join(tmp, "k.pem"), os.path.join(tmp, "c.pem")
        with open(key_path, "wb") as f:
            f.write(k2)
        tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "graph_decrypt.py")
        out = subprocess.run([sys.executable, tool, "--key", f"dev-2={key_path}"],
                             input=json.dumps(enc).encode(), capture_output=True, timeout=30)
        check(out.returncode == 0 and json.loads(out.stdout) == graph_decrypt.decrypt(enc, keys),
              f"graph_decrypt.py --key decrypts {out.stderr}")
        out = subprocess.run([sys.executable, tool, "--key", f"dev-1={key_path}"],
                             input=json.dumps(enc).encode(), capture_output=True, timeout=30)
        check(out.returncode == 1 and b"no private key" in out.stderr, "CLI: unknown id")
        out = subprocess.run([sys.executable, tool, "--new-certificate", key_path, cert_path,
                              "--days", "2"], capture_output=True, timeout=30)
        made = json.loads(out.stdout)
        with open(cert_path, "rb") as f:
            der = x509.load_pem_x509_certificate(f.read()).public_bytes(serialization.Encoding.DER)
        check(out.returncode == 0 and base64.b64decode(made["encryptionCertificate"]) == der
              and made["encryptionCertificateThumbprint"] == hashlib.sha1(der).hexdigest().upper()
              and os.stat(key_path).st_mode & 0o077 == 0, "CLI: --new-certificate")
    for sid, tok in ((s_rita, ta), (s_rob, tb)):
        sim.api("DELETE", f"/v1.0/subscriptions/{sid}", tok)
    ctx["ta"] = ta  # the clock moved on: the first app token is about to expire


def reset(sim):
    sim.ok("/reset", {})
    stats = sim.ok("/stats")
    check(sim.ok("/users") == [] and sim.ok("/subscriptions") == [] and sim.ok("/violations") == []
          and stats["tokens_issued"] == {} and stats["clockOffsetSeconds"] == 0
          and sim.ok("/requests")["requests"] == [], "/reset forgets everything")
    check(sim.control("/nope", {})[0] == 404 and sim.control("/mode", {"bogus": 1})[0] == 400,
          "control API errors")


if __name__ == "__main__":
    sys.exit(selftest.main("graph simulator", run, log_name="sim.log"))
