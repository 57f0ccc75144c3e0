#!/usr/bin/env python3
"""Self-test for apns_simulator.py (make test runs it after the Swift tests).

Generates a throwaway self-signed TLS certificate (SAN 127.0.0.1, localhost) and a P-256
auth key, starts the simulator on free ports, talks to it with an `h2` client (and once
with `curl --http2`, the HTTP/2 stack ENS itself uses), and checks every validation
rule, the control API, concurrency, flow control and shutdown. Exits non-zero on the
first failure.

Usage: python3 Tests/tools/apns_simulator_selftest.py
"""
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from simlib import certs, selftest
from simlib.selftest import H2Client, b64url, check_bad_clients, check_load, control, expect, free_port
KEY_ID, TEAM_ID, TOPIC = "ABC123DEFG", "TEAM123456", "com.example.mail"
TOKEN = "a1b2c3d4" * 8
ALERT = json.dumps({"aps": {"alert": {"title": "New mail"}, "mutable-content": 1}}).encode()


def make_jwt(key, iat=None, header=None, iss=TEAM_ID, der=False):
    header = header or {"alg": "ES256", "kid": KEY_ID}
    signing_input = (b64url(json.dumps(header, separators=(",", ":")).encode()) + "."
                     + b64url(json.dumps({"iss": iss, "iat": int(time.time()) if iat is None else iat}).encode()))
    sig = key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
    if not der:
        r, s = decode_dss_signature(sig)
        sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return signing_input + "." + b64url(sig)


def write_credentials(d):
    certs.write_self_signed(os.path.join(d, "cert.pem"), os.path.join(d, "key.pem"), "apns-simulator")
    auth_key = ec.generate_private_key(ec.SECP256R1())
    certs.write_file(os.path.join(d, "auth.pub.pem"), auth_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return auth_key


def push_headers(jwt, token=TOKEN, method="POST", path=None, **extra):
    h = [(":method", method), (":scheme", "https"), (":authority", "localhost"),
         (":path", path or f"/3/device/{token}")]
    if jwt is not None:
        h.append(("authorization", f"bearer {jwt}"))
    h.append(("apns-topic", TOPIC))
    h += [(k.replace("_", "-"), v) for k, v in extra.items()]
    return [(k, v) for k, v in h if v is not None]


def expect_reject(what, response, status, reason):
    got_status, headers, body = response
    expect(what + " status", got_status, status)
    expect(what + " reason", json.loads(body).get("reason"), reason)
    expect(what + " has apns-id", bool(headers.get("apns-id")), True)


def run(d):
    auth_key = write_credentials(d)
    port, cport = free_port(), free_port()
    record, ready = os.path.join(d, "record.jsonl"), os.path.join(d, "ready")
    cafile = os.path.join(d, "cert.pem")
    sim = selftest.start(selftest.simulator("apns_simulator.py") + [
        "--port", str(port), "--control-port", str(cport), "--cert", cafile, "--key", os.path.join(d, "key.pem"),
        "--auth-key", os.path.join(d, "auth.pub.pem"), "--key-id", KEY_ID,
        "--team-id", TEAM_ID, "--record", record, "--ready-file", ready], ready)
    try:
        run_checks(port, cport, cafile, record, auth_key)
        selftest.stop(sim, ready)
    finally:
        if sim.poll() is None:
            sim.kill()


def run_checks(port, cport, cafile, record, key):
    jwt = make_jwt(key)
    c = H2Client(port, cafile)
    apns_id = str(uuid.uuid4())

    # 1. a valid alert push
    status, headers, body = c.request(push_headers(jwt, apns_id=apns_id, apns_push_type="alert",
                                                   apns_priority="10", apns_expiration="0",
                                                   apns_collapse_id="inbox"), ALERT)
    expect("valid alert status", (status, body), (200, b""))
    expect("apns-id echoed", headers.get("apns-id"), apns_id)
    line = json.loads(open(record).read().splitlines()[-1])
    expect("record", {k: v for k, v in line.items() if k != "time"},
           {"token": TOKEN, "apns_id": apns_id, "collapse_id": "inbox", "topic": TOPIC,
            "push_type": "alert", "priority": 10, "expiration": 0,
            "payload": json.loads(ALERT), "jwt": jwt, "auth": "token"})
    expect("record time is ms", abs(line["time"] - time.time() * 1000) < 5000, True)
    status, headers, _ = c.request(push_headers(jwt, token=TOKEN.upper()), ALERT)
    expect("upper-case token, no optional headers", status, 200)
    expect("generated apns-id is a UUID", str(uuid.UUID(headers["apns-id"])), headers["apns-id"])
    line = json.loads(open(record).read().splitlines()[-1])
    expect("token recorded lower-case, nulls",
           (line["token"], line["push_type"], line["priority"], line["expiration"], line["collapse_id"]),
           (TOKEN, None, None, None, None))

    # 2. the JWT rules
    expect_reject("DER-signed JWT", c.request(push_headers(make_jwt(key, der=True)), ALERT),
                  403, "InvalidProviderToken")
    expect_reject("no authorization", c.request(push_headers(None), ALERT), 403, "MissingProviderToken")
    expect_reject("typ in JWT header", c.request(push_headers(make_jwt(
        key, header={"alg": "ES256", "kid": KEY_ID, "typ": "JWT"})), ALERT), 403, "InvalidProviderToken")
    expect_reject("wrong kid", c.request(push_headers(make_jwt(
        key, header={"alg": "ES256", "kid": "XXXXXXXXXX"})), ALERT), 403, "InvalidProviderToken")
    expect_reject("alg none", c.request(push_headers(make_jwt(
        key, header={"alg": "none", "kid": KEY_ID})), ALERT), 403, "InvalidProviderToken")
    expect_reject("wrong iss", c.request(push_headers(make_jwt(key, iss="OTHERTEAM1")), ALERT),
                  403, "InvalidProviderToken")
    other = ec.generate_private_key(ec.SECP256R1())
    expect_reject("other key", c.request(push_headers(make_jwt(other)), ALERT), 403, "InvalidProviderToken")
    expect_reject("old iat", c.request(push_headers(make_jwt(key, iat=int(time.time()) - 3700)), ALERT),
                  403, "ExpiredProviderToken")
    expect_reject("future iat", c.request(push_headers(make_jwt(key, iat=int(time.time()) + 600)), ALERT),
                  403, "InvalidProviderToken")
    expect_reject("not a JWT", c.request(push_headers("abc.def"), ALERT), 403, "InvalidProviderToken")

    # 3.-9. headers, token and payload
    cases = [
        ("GET", dict(method="GET"), ALERT, 405, "MethodNotAllowed"),
        ("bad path", dict(path="/3/devices/" + TOKEN), ALERT, 404, "BadPath"),
        ("short token", dict(token="abcd"), ALERT, 400, "BadDeviceToken"),
        ("non-hex token", dict(token="zz" * 32), ALERT, 400, "BadDeviceToken"),
        ("bad push type", dict(apns_push_type="Alert"), ALERT, 400, "InvalidPushType"),
        ("priority 7", dict(apns_priority="7"), ALERT, 400, "BadPriority"),
        ("background priority 10", dict(apns_push_type="background", apns_priority="10"),
         b'{"aps":{"content-available":1}}', 400, "BadPriority"),
        ("negative expiration", dict(apns_expiration="-1"), ALERT, 400, "BadExpirationDate"),
        ("long collapse id", dict(apns_collapse_id="x" * 65), ALERT, 400, "BadCollapseId"),
        ("upper-case apns-id", dict(apns_id=str(uuid.uuid4()).upper()), ALERT, 400, "BadMessageId"),
        ("empty body", {}, b"", 400, "PayloadEmpty"),
        ("5000-byte payload", {}, json.dumps({"aps": {}, "x": "y" * 4980}).encode(), 413, "PayloadTooLarge"),
        ("no aps", {}, b'{"alert":"x"}', 400, "BadPayload"),
        ("not JSON", {}, b'{"aps":', 400, "BadPayload"),
    ]
    for what, kw, body, status, reason in cases:
        expect_reject(what, c.request(push_headers(jwt, **kw), body), status, reason)
    no_topic = [h for h in push_headers(jwt) if h[0] != "apns-topic"]
    expect_reject("missing topic", c.request(no_topic, ALERT), 400, "MissingTopic")
    status, _, _ = c.request(push_headers(jwt, apns_push_type="background", apns_priority="5"),
                             b'{"aps":{"content-available":1}}')
    expect("background priority 5", status, 200)
    status, _, _ = c.request(push_headers(jwt, apns_push_type="voip"),
                             json.dumps({"aps": {}, "x": "y" * 4980}).encode())
    expect("5000-byte voip payload", status, 200)

    # 10. injected failures
    expect("POST /fail", control(cport, "POST", "/fail",
                                 {"token": TOKEN.upper(), "status": 410, "reason": "Unregistered", "count": 1}),
           {"ok": True})
    status, _, body = c.request(push_headers(jwt), ALERT)
    reply = json.loads(body)
    expect("injected 410", (status, reply["reason"]), (410, "Unregistered"))
    expect("410 timestamp is now in ms", abs(reply["timestamp"] - time.time() * 1000) < 5000, True)
    expect("count 1 used up", c.request(push_headers(jwt), ALERT)[0], 200)
    control(cport, "POST", "/fail", {"token": TOKEN, "status": 503, "reason": "ServiceUnavailable"})
    for _ in range(3):
        expect_reject("injected 503 repeats", c.request(push_headers(jwt), ALERT), 503, "ServiceUnavailable")
    expect_reject("injection only after validation", c.request(push_headers(jwt), b""), 400, "PayloadEmpty")

    stats = control(cport, "GET", "/stats")
    expect("stats accepted", stats["accepted"], 5)
    expect("stats rejected", stats["rejected"]["410 Unregistered"], 1)
    expect("stats 503", stats["rejected"]["503 ServiceUnavailable"], 3)
    expect("stats 400 BadPriority", stats["rejected"]["400 BadPriority"], 2)
    expect("stats distinct jwts", stats["distinct_jwts"], 10)  # jwt + 9 bad ones with a JWT
    expect("stats connections", (stats["connections"], stats["open_connections"]), (1, 1))
    expect("POST /reset", control(cport, "POST", "/reset", {}), {"ok": True})
    expect("503 cleared", c.request(push_headers(jwt), ALERT)[0], 200)
    stats = control(cport, "GET", "/stats")
    expect("stats after reset", (stats["accepted"], stats["rejected"], stats["distinct_jwts"]), (1, {}, 1))

    # /wait: answers at once when the count is reached, after the timeout when it is not,
    # and as soon as requests arriving meanwhile reach it
    t0 = time.time()
    expect("wait already reached", control(cport, "GET", "/wait?accepted=1&timeout=5")["accepted"], 1)
    expect("wait already reached is immediate", time.time() - t0 < 1, True)
    t0 = time.time()
    expect("wait timed out", control(cport, "GET", "/wait?accepted=3&timeout=1")["accepted"], 1)
    expect("wait timeout honoured", 0.9 < time.time() - t0 < 3, True)
    waited = {}
    waiter = threading.Thread(target=lambda: waited.update(control(cport, "GET", "/wait?accepted=3&timeout=20")))
    t0 = time.time()
    waiter.start()
    time.sleep(0.3)
    for _ in range(2):
        c.request(push_headers(jwt), ALERT)
    waiter.join(timeout=25)
    expect("wait woken by arrivals", (waited.get("accepted"), time.time() - t0 < 5), (3, True))

    # concurrency and flow control: 20 MB on one connection (more than any initial window),
    # 500 streams in flight at a time, and 20 connections at once
    body = json.dumps({"aps": {"alert": "x"}, "pad": "p" * 3900}).encode()
    check_load(c, port, cafile, (push_headers(jwt, apns_push_type="alert"), body), 10,
               (push_headers(jwt), ALERT), 20)

    # bad clients end only their own connection
    check_bad_clients(port, cafile, (push_headers(jwt), ALERT), [b"GET / HTTP/1.1\r\n\r\n" * 10],
                      [b"\x00\x00\x04\xff\xff\xff\xff\xff\xffgarbage"])
    c = H2Client(port, cafile)
    expect("still serving after bad clients", c.request(push_headers(jwt), ALERT)[0], 200)
    c.close()

    # libcurl, which ENS's sender uses
    if shutil.which("curl") and "HTTP2" in subprocess.run(["curl", "--version"], capture_output=True,
                                                          text=True).stdout:
        out = subprocess.run(
            ["curl", "-sS", "--http2", "--cacert", cafile, "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
             "-H", f"authorization: bearer {jwt}", "-H", f"apns-topic: {TOPIC}",
             "-H", "apns-push-type: alert", "--data-binary", ALERT.decode(),
             f"https://localhost:{port}/3/device/{TOKEN}"], capture_output=True, text=True, timeout=10)
        expect("curl --http2", out.stdout, "2 200")
    for _ in range(50):  # connection threads notice EOF asynchronously
        stats = control(cport, "GET", "/stats")
        if stats["open_connections"] == 0:
            break
        time.sleep(0.05)
    expect("final accepted", stats["accepted"], 1 + 2 + 5000 + 2000 + 1 + 1)
    expect("no stray connections", stats["open_connections"], 0)


if __name__ == "__main__":
    sys.exit(selftest.main("apns simulator", run))
