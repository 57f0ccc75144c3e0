#!/usr/bin/env python3
"""Self-test for fcm_simulator.py (make test runs it after the Swift tests).

Generates a throwaway self-signed TLS certificate (SAN 127.0.0.1, localhost) and RSA
service-account keys, starts the simulator on free loopback ports, talks to it with an
`h2` client (and once with `curl --http2`, the HTTP/2 stack ENS itself uses), and checks
the token endpoint's rules, every message rule, injected failures, token revocation and
expiry, the control API, concurrency, bad clients and shutdown. Exits non-zero on the
first failure.

Usage: python3 Tests/tools/fcm_simulator_selftest.py
"""
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from simlib import certs, selftest
from simlib.selftest import H2Client, b64url, check_bad_clients, check_load, control, expect, free_port
KEY_ID, EMAIL = "0123456789abcdef0123456789abcdef01234567", "ens-sender@ens-test.iam.gserviceaccount.com"
KEY_ID2, EMAIL2 = "fedcba9876543210fedcba9876543210fedcba98", "other@ens-other.iam.gserviceaccount.com"
PROJECT, PROJECT2 = "ens-test", "ens-other"
SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
FCM_ERROR = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
TOKEN = "cA1b2C3d4E5f6:APA91bHx_example-token_0123456789abcdefABCDEF"
MESSAGE = {"token": TOKEN,
           "android": {"priority": "HIGH", "ttl": "600s", "collapse_key": "0123456789abcdef0123456789abcdef"},
           "notification": {"title": "Alice", "body": "Lunch?"},
           "data": {"notificationId": "0123456789abcdef0123456789abcdef", "userid": "ab12", "badge": "3"}}


def write_credentials(d):
    certs.write_self_signed(os.path.join(d, "cert.pem"), os.path.join(d, "key.pem"), "fcm-simulator")
    keys = [rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2)]
    certs.write_file(os.path.join(d, "sa1.pub.pem"), keys[0].public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    # the second account is given as its private key (as a key file holds it)
    certs.write_file(os.path.join(d, "sa2.pem"), certs.pem_key(keys[1]), private=True)
    return keys


def make_assertion(key, aud, kid=KEY_ID, iss=EMAIL, scope=SCOPE, iat=None, exp=None, header=None,
                   hs256_secret=None, drop=(), extra=None):
    now = int(time.time())
    iat = now if iat is None else iat
    claims = {"iss": iss, "scope": scope, "aud": aud, "iat": iat, "exp": iat + 3600 if exp is None else exp}
    claims.update(extra or {})
    for name in drop:
        claims.pop(name, None)
    header = header or {"alg": "RS256", "typ": "JWT", "kid": kid}
    signing_input = (b64url(json.dumps(header, separators=(",", ":")).encode()) + "."
                     + b64url(json.dumps(claims, separators=(",", ":")).encode()))
    if hs256_secret is not None:
        sig = hmac.new(hs256_secret, signing_input.encode(), hashlib.sha256).digest()
    else:
        sig = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return signing_input + "." + b64url(sig)


def base_headers(method, path, **extra):
    h = [(":method", method), (":scheme", "https"), (":authority", "localhost"), (":path", path)]
    h += [(k.replace("_", "-"), v) for k, v in extra.items() if v is not None]
    return h


def token_request(c, body, content_type="application/x-www-form-urlencoded", method="POST", path="/token"):
    if isinstance(body, dict):
        body = urllib.parse.urlencode(body).encode()
    status, headers, raw = c.request(base_headers(method, path, content_type=content_type), body)
    return status, headers, json.loads(raw)


def exchange(c, assertion, path="/token"):
    return token_request(c, {"grant_type": JWT_BEARER, "assertion": assertion}, path=path)


def send_headers(access, project=PROJECT, method="POST", path=None, content_type="application/json",
                 authorization=None):
    auth = authorization if authorization is not None else (f"Bearer {access}" if access else None)
    return base_headers(method, path or f"/v1/projects/{project}/messages:send",
                        authorization=auth, content_type=content_type)


def request_body(message=None, raw=None, **top):
    if raw is not None:
        return raw
    body = dict(top)
    if message is not None:
        body["message"] = message
    return json.dumps(body).encode()


def send(c, access, message=None, raw=None, top=None, **kw):
    status, headers, body = c.request(send_headers(access, **kw), request_body(message, raw, **(top or {})))
    return status, headers, json.loads(body)


def with_changes(**changes):
    """MESSAGE with top-level members replaced (None deletes)."""
    m = json.loads(json.dumps(MESSAGE))
    for k, v in changes.items():
        if v is None:
            m.pop(k, None)
        else:
            m[k] = v
    return m


def android(**changes):
    a = dict(MESSAGE["android"])
    a.update(changes)
    return with_changes(android=a)


def expect_oauth(what, response, status, error):
    got_status, _, body = response
    expect(what + " status", got_status, status)
    expect(what + " error", body.get("error"), error)
    expect(what + " has error_description", isinstance(body.get("error_description"), str), True)


def expect_google(what, response, status, google_status, error_code=None, bad_request=False):
    """Google's error body: code, message, status, and the details FCM gives."""
    got_status, headers, body = response
    expect(what + " status", got_status, status)
    error = body.get("error", {})
    expect(what + " body", (error.get("code"), error.get("status"), isinstance(error.get("message"), str)),
           (status, google_status, True))
    details = error.get("details", [])
    codes = [d.get("errorCode") for d in details if d.get("@type") == FCM_ERROR]
    expect(what + " FcmError", codes, [error_code] if error_code else [])
    if bad_request:
        violations = [d for d in details if d.get("@type") == BAD_REQUEST]
        expect(what + " BadRequest detail", len(violations) == 1 and "fieldViolations" in violations[0], True)
    expect(what + " content-type", headers.get("content-type", "").startswith("application/json"), True)
    return error


def run(d):
    keys = write_credentials(d)
    cafile = os.path.join(d, "cert.pem")
    sims = []
    try:
        port, cport = free_port(), free_port()
        record, ready = os.path.join(d, "record.jsonl"), os.path.join(d, "ready")
        common = selftest.simulator("fcm_simulator.py") + [
            "--cert", cafile, "--key", os.path.join(d, "key.pem"),
            "--service-account-key", os.path.join(d, "sa1.pub.pem"), "--key-id", KEY_ID, "--client-email", EMAIL]
        sims.append(selftest.start(common + [
            "--port", str(port), "--control-port", str(cport),
            "--service-account-key", os.path.join(d, "sa2.pem"), "--key-id", KEY_ID2, "--client-email", EMAIL2,
            "--project", PROJECT, "--project", PROJECT2, "--record", record, "--ready-file", ready], ready))
        run_checks(port, cport, cafile, record, keys)

        # A second simulator: a token_uri elsewhere (its path is the endpoint), one-second tokens.
        port2, cport2 = free_port(), free_port()
        ready2, record2 = os.path.join(d, "ready2"), os.path.join(d, "record2.jsonl")
        sims.append(selftest.start(common + [
            "--port", str(port2), "--control-port", str(cport2), "--project", PROJECT,
            "--token-uri", "https://oauth2.example.test/oauth2/v4/token",
            "--token-lifetime", "1", "--record", record2, "--ready-file", ready2], ready2))
        run_expiry_checks(port2, cport2, cafile, keys)
        selftest.stop(sims.pop(), ready2)
        selftest.stop(sims.pop(), ready)
    finally:
        for sim in sims:
            if sim.poll() is None:
                sim.kill()


def run_checks(port, cport, cafile, record, keys):
    key, key2 = keys
    aud = f"https://localhost:{port}/token"
    c = H2Client(port, cafile)

    # -- the token endpoint ------------------------------------------------------------
    status, headers, reply = exchange(c, make_assertion(key, aud))
    expect("good exchange", (status, reply.get("token_type"), reply.get("expires_in")), (200, "Bearer", 3600))
    expect("exchange content-type", headers["content-type"].startswith("application/json"), True)
    access = reply["access_token"]
    expect("access token is opaque", isinstance(access, str) and len(access) > 40 and "." not in access[5:], True)
    status, _, reply2 = exchange(c, make_assertion(key2, aud, kid=KEY_ID2, iss=EMAIL2))
    expect("second account's exchange", status, 200)
    access2 = reply2["access_token"]
    expect("tokens differ", access != access2, True)
    status, _, _ = exchange(c, make_assertion(key, aud, header={"alg": "RS256", "kid": KEY_ID}))
    expect("no typ in the header", status, 200)
    status, _, _ = token_request(c, {"grant_type": JWT_BEARER, "assertion": make_assertion(key, aud)},
                                 content_type="application/x-www-form-urlencoded; charset=utf-8")
    expect("form with charset", status, 200)
    now = int(time.time())
    status, _, _ = exchange(c, make_assertion(key, aud, iat=now - 56 * 60, exp=now + 4 * 60))
    expect("an hour-long assertion made 56 minutes ago", status, 200)
    status, _, _ = exchange(c, make_assertion(key, aud, iat=now + 200))
    expect("iat 200 s ahead (clock skew)", status, 200)

    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    good = make_assertion(key, aud)
    h, cl, sig = good.split(".")
    tampered_claims = b64url(json.dumps({"iss": EMAIL, "scope": SCOPE, "aud": aud, "iat": now,
                                         "exp": now + 3600, "sub": "x"}).encode())
    jwt_defects = [
        ("wrong kid", make_assertion(key, aud, kid="f" * 40), "invalid_grant"),
        ("no kid", make_assertion(key, aud, header={"alg": "RS256", "typ": "JWT"}), "invalid_grant"),
        ("other account's kid", make_assertion(key, aud, kid=KEY_ID2), "invalid_grant"),
        ("alg RS512 in header", make_assertion(key, aud, header={"alg": "RS512", "typ": "JWT", "kid": KEY_ID}),
         "invalid_grant"),
        ("alg none", make_assertion(key, aud, header={"alg": "none", "typ": "JWT", "kid": KEY_ID}).rsplit(".", 1)[0]
         + ".", "invalid_grant"),
        ("HS256 keyed with the public key", make_assertion(
            key, aud, header={"alg": "HS256", "typ": "JWT", "kid": KEY_ID}, hs256_secret=public_pem),
         "invalid_grant"),
        ("typ JWS", make_assertion(key, aud, header={"alg": "RS256", "typ": "JWS", "kid": KEY_ID}),
         "invalid_grant"),
        ("signed by another key", make_assertion(other, aud), "invalid_grant"),
        ("claims changed after signing", f"{h}.{tampered_claims}.{sig}", "invalid_grant"),
        ("truncated signature", f"{h}.{cl}.{sig[:-4]}", "invalid_grant"),
        ("wrong iss", make_assertion(key, aud, iss="someone@else.iam.gserviceaccount.com"), "invalid_grant"),
        ("account 2's iss with account 1's key", make_assertion(key, aud, iss=EMAIL2), "invalid_grant"),
        ("Google's aud", make_assertion(key, "https://oauth2.googleapis.com/token"), "invalid_grant"),
        ("aud with another port", make_assertion(key, f"https://localhost:{port + 1}/token"), "invalid_grant"),
        ("no aud", make_assertion(key, aud, drop=("aud",)), "invalid_grant"),
        ("exp - iat 3601", make_assertion(key, aud, iat=now, exp=now + 3601), "invalid_grant"),
        ("expired", make_assertion(key, aud, iat=now - 3600, exp=now - 1), "invalid_grant"),
        ("iat 600 s in the future", make_assertion(key, aud, iat=now + 600), "invalid_grant"),
        ("exp before iat", make_assertion(key, aud, exp=now - 10, iat=now), "invalid_grant"),
        ("iat a string", make_assertion(key, aud, iat=str(now), exp=now + 3600), "invalid_grant"),
        ("no exp", make_assertion(key, aud, drop=("exp",)), "invalid_grant"),
        ("missing scope", make_assertion(key, aud, drop=("scope",)), "invalid_scope"),
        ("empty scope", make_assertion(key, aud, scope=" "), "invalid_scope"),
        ("sub another user", make_assertion(key, aud, extra={"sub": "user@example.com"}), "unauthorized_client"),
        ("two parts", f"{h}.{cl}", "invalid_grant"),
        ("padded base64", f"{h}.{cl}.{sig}==" if len(sig) % 4 else f"{h}=.{cl}.{sig}", "invalid_grant"),
        ("header not JSON", f"{b64url(b'nope')}.{cl}.{sig}", "invalid_grant"),
    ]
    for what, assertion, error in jwt_defects:
        expect_oauth(what, exchange(c, assertion), 401 if error == "unauthorized_client" else 400, error)

    request_defects = [
        ("GET /token", dict(body=b"", method="GET"), 405, "invalid_request"),
        ("JSON content-type", dict(body=json.dumps({"grant_type": JWT_BEARER, "assertion": good}).encode(),
                                   content_type="application/json"), 400, "invalid_request"),
        ("no grant_type", dict(body={"assertion": good}), 400, "invalid_request"),
        ("client_credentials", dict(body={"grant_type": "client_credentials", "assertion": good}),
         400, "unsupported_grant_type"),
        ("no assertion", dict(body={"grant_type": JWT_BEARER}), 400, "invalid_request"),
        ("assertion twice", dict(body=f"grant_type={urllib.parse.quote(JWT_BEARER)}&assertion={good}"
                                      f"&assertion={good}".encode()), 400, "invalid_request"),
        ("malformed form", dict(body=b"grant_type&&=&"), 400, "invalid_request"),
        ("empty body", dict(body=b""), 400, "invalid_request"),
    ]
    for what, kw, status, error in request_defects:
        response = token_request(c, **kw)
        expect_oauth(what, response, status, error)
    expect("405 names POST", token_request(c, b"", method="GET")[1].get("allow"), "POST")

    # -- a good message ----------------------------------------------------------------
    status, headers, reply = send(c, access, MESSAGE)
    expect("good send", status, 200)
    expect("name", reply["name"].startswith(f"projects/{PROJECT}/messages/0:"), True)
    line = json.loads(open(record).read().splitlines()[-1])
    expect("record", {k: v for k, v in line.items() if k not in ("time", "access_token_age_s")},
           {"name": reply["name"], "project": PROJECT, "token": TOKEN, "topic": None, "condition": None,
            "message": MESSAGE, "client_email": EMAIL, "access_token": access})
    expect("record time is ms", abs(line["time"] - time.time() * 1000) < 5000, True)
    expect("access token age", 0 <= line["access_token_age_s"] < 30, True)
    status, _, _ = send(c, access2, with_changes(token="x" + TOKEN), project=PROJECT2)
    expect("second account, second project", status, 200)
    expect("second account recorded", json.loads(open(record).read().splitlines()[-1])["client_email"], EMAIL2)
    camel = {"token": TOKEN, "android": {"collapseKey": "k", "ttl": "3.5s", "priority": "NORMAL",
                                         "directBootOk": True, "restrictedPackageName": "com.example.mail"}}
    expect("lowerCamelCase field names", send(c, access, camel, top={"validateOnly": False})[0], 200)
    full = with_changes(
        android={"priority": "NORMAL", "ttl": "2419200s", "collapse_key": "k", "data": {"a": "b"},
                 "fcm_options": {"analytics_label": "l"}, "direct_boot_ok": False,
                 "notification": {"title": "t", "body": "b", "channel_id": "mail", "tag": "x",
                                  "notification_priority": "PRIORITY_HIGH", "visibility": "PRIVATE",
                                  "notification_count": 3, "body_loc_args": ["a", "b"],
                                  "event_time": "2026-01-02T03:04:05.123Z", "vibrate_timings": ["0.5s", "1s"],
                                  "light_settings": {"color": {"red": 1, "green": 0.5, "blue": 0},
                                                     "light_on_duration": "1s", "light_off_duration": "2s"},
                                  "sticky": True, "proxy": "DENY"}},
        apns={"headers": {"apns-priority": "10"}, "payload": {"aps": {"alert": "x"}}},
        webpush={"headers": {"TTL": "60"}, "notification": {"title": "x"}}, fcm_options={"analytics_label": "m"})
    expect("every documented field", send(c, access, full)[0], 200)
    expect("ttl with nanoseconds", send(c, access, android(ttl="1.000000001s"))[0], 200)
    expect("lower-case bearer scheme", send(c, None, MESSAGE, authorization=f"bearer {access}")[0], 200)
    expect("content-type with charset",
           send(c, access, MESSAGE, content_type="application/json; charset=UTF-8")[0], 200)
    expect("null counts as absent", send(c, access, raw=json.dumps(
        {"message": dict(MESSAGE, topic=None, condition=None)}).encode())[0], 200)
    status, _, reply = send(c, access, with_changes(token=None, topic="weather"))
    expect("topic message", status, 200)
    expect("topic recorded", json.loads(open(record).read().splitlines()[-1])["topic"], "weather")
    expect("condition message", send(c, access, with_changes(
        token=None, condition="'a' in topics && 'b' in topics"))[0], 200)
    expect("4096-byte payload", send(c, access, with_changes(
        notification=None, data={"k": "v" * 4095}))[0], 200)
    lines_before = len(open(record).read().splitlines())
    status, _, reply = send(c, access, MESSAGE, top={"validate_only": True})
    expect("validate_only answered", (status, reply),
           (200, {"name": f"projects/{PROJECT}/messages/fake_message_id"}))
    expect("validate_only not recorded", len(open(record).read().splitlines()), lines_before)

    # -- path, authentication, project -------------------------------------------------
    expect_google("wrong path", send(c, access, MESSAGE, path=f"/v1/projects/{PROJECT}/messages"), 404, "NOT_FOUND")
    expect_google("v2 path", send(c, access, MESSAGE, path=f"/v2/projects/{PROJECT}/messages:send"),
                  404, "NOT_FOUND")
    expect_google("GET", send(c, access, MESSAGE, method="GET"), 404, "NOT_FOUND")
    expect_google("other project", send(c, access, MESSAGE, project="someone-else"), 404, "NOT_FOUND")
    response = send(c, None, MESSAGE)
    expect_google("no authorization", response, 401, "UNAUTHENTICATED")
    expect("401 names Bearer", response[1].get("www-authenticate", "").startswith("Bearer "), True)
    expect_google("unknown access token", send(c, "ya29.not-issued", MESSAGE), 401, "UNAUTHENTICATED")
    expect_google("Basic scheme", send(c, None, MESSAGE, authorization=f"Basic {access}"), 401, "UNAUTHENTICATED")
    expect_google("bearer without token", send(c, None, MESSAGE, authorization="Bearer"), 401, "UNAUTHENTICATED")
    expect_google("the assertion as access token", send(c, good, MESSAGE), 401, "UNAUTHENTICATED")
    status, _, reply = exchange(c, make_assertion(key, aud, scope="https://www.googleapis.com/auth/userinfo.email"))
    expect("a token for another scope is issued", status, 200)
    expect_google("insufficient scope", send(c, reply["access_token"], MESSAGE), 403, "PERMISSION_DENIED")
    status, _, reply = exchange(c, make_assertion(
        key, aud, scope="openid https://www.googleapis.com/auth/cloud-platform"))
    expect("cloud-platform scope sends", send(c, reply["access_token"], MESSAGE)[0], 200)
    unauthenticated_wrong_project = send(c, None, MESSAGE, project="someone-else")
    expect("authentication before project", unauthenticated_wrong_project[0], 401)

    # -- the request's form ------------------------------------------------------------
    parse_defects = [
        ("text/plain", dict(message=MESSAGE, content_type="text/plain")),
        ("no content-type", dict(message=MESSAGE, content_type=None)),
        ("latin-1 charset", dict(message=MESSAGE, content_type="application/json; charset=latin-1")),
        ("not JSON", dict(raw=b'{"message":')),
        ("empty body", dict(raw=b"")),
        ("JSON array", dict(raw=b"[]")),
        ("NaN", dict(raw=b'{"message":{"token":"a","data":{"x":NaN}}}')),
        ("not UTF-8", dict(raw=b'{"message":{"token":"\xff"}}')),
        ("lone surrogate", dict(raw=b'{"message":{"token":"abc","data":{"x":"\\ud800"}}}')),
        ("70000-byte body", dict(raw=json.dumps({"message": MESSAGE, "pad": "x" * 70000}).encode())),
        ("no message", dict(raw=b'{"validate_only":false}')),
    ]
    for what, kw in parse_defects:
        expect_google(what, send(c, access, **kw), 400, "INVALID_ARGUMENT")
    schema_defects = [
        ("unknown request field", dict(message=MESSAGE, top={"dry_run": True})),
        ("validate_only a string", dict(message=MESSAGE, top={"validate_only": "yes"})),
        ("message a string", dict(raw=b'{"message":"hi"}')),
        ("unknown message field", dict(message=with_changes(priority="high"))),
        ("legacy 'to' field", dict(message=with_changes(token=None, to=TOKEN))),
        ("token and topic", dict(message=with_changes(topic="weather"))),
        ("token a number", dict(message=with_changes(token=12345))),
        ("data value a number", dict(message=with_changes(data={"badge": 3}))),
        ("data value null", dict(message=with_changes(data={"badge": None}))),
        ("data value an object", dict(message=with_changes(data={"x": {"y": "z"}}))),
        ("data a list", dict(message=with_changes(data=["a"]))),
        ("notification title a number", dict(message=with_changes(notification={"title": 1}))),
        ("notification sound (an Android field)", dict(message=with_changes(notification={"sound": "default"}))),
        ("android a string", dict(message=with_changes(android="HIGH"))),
        ("priority URGENT", dict(message=android(priority="URGENT"))),
        ("priority lower-case", dict(message=android(priority="high"))),
        ("priority as integer", dict(message=android(priority=1))),
        ("ttl without s", dict(message=android(ttl="600"))),
        ("ttl a number", dict(message=android(ttl=600))),
        ("ttl negative", dict(message=android(ttl="-1s"))),
        ("ttl 10 decimals", dict(message=android(ttl="1.0000000001s"))),
        ("ttl in minutes", dict(message=android(ttl="10m"))),
        ("collapse_key a number", dict(message=android(collapse_key=7))),
        ("unknown android field", dict(message=android(time_to_live=60))),
        ("android.notification unknown field", dict(message=android(notification={"badge": 1}))),
        ("android.notification bad priority",
         dict(message=android(notification={"notification_priority": "HIGH"}))),
        ("android.notification count a string", dict(message=android(notification={"notification_count": "3"}))),
        ("android.notification bad event_time", dict(message=android(notification={"event_time": "yesterday"}))),
        ("direct_boot_ok a string", dict(message=android(direct_boot_ok="true"))),
        ("snake_case with capitals", dict(message=android(Collapse_key="k"))),
    ]
    for what, kw in schema_defects:
        expect_google(what, send(c, access, **kw), 400, "INVALID_ARGUMENT", bad_request=True)
    error = expect_google("data value field named", send(c, access, with_changes(data={"a": "1", "badge": 3})),
                          400, "INVALID_ARGUMENT", bad_request=True)
    expect("data value violation field", error["details"][0]["fieldViolations"][0]["field"],
           "message.data[1].value")
    fcm_defects = [
        ("no target", with_changes(token=None)),
        ("empty token", with_changes(token="")),
        ("token with a space", with_changes(token=TOKEN[:10] + " " + TOKEN[10:])),
        ("token with a slash", with_changes(token="a/b" + TOKEN)),
        ("4097-character token", with_changes(token="a" * 4097)),
        ("/topics/ prefix", with_changes(token=None, topic="/topics/weather")),
        ("empty condition", with_changes(token=None, condition=" ")),
        ("data key from", with_changes(data={"from": "x"})),
        ("data key message_type", with_changes(data={"message_type": "x"})),
        ("data key google.x", with_changes(data={"google.sent_time": "1"})),
        ("data key gcm.x", with_changes(data={"gcm.notification.title": "x"})),
        ("android.data key google", android(data={"google.c.a": "1"})),
        ("ttl over four weeks", android(ttl="2419201s")),
        ("4097-byte payload", with_changes(notification=None, data={"k": "v" * 4096})),
        ("payload counted with notification",
         with_changes(notification={"title": "t" * 100}, data={"k": "v" * 4000})),
        ("3000 bytes to a topic",
         with_changes(token=None, topic="news", notification=None, data={"k": "v" * 3000})),
    ]
    for what, message in fcm_defects:
        expect_google(what, send(c, access, message), 400, "INVALID_ARGUMENT", error_code="INVALID_ARGUMENT")
    _, _, reply = send(c, access, with_changes(token="bad token"))
    expect("invalid token message", reply["error"]["message"],
           "The registration token is not a valid FCM registration token")
    _, _, reply = send(c, access, with_changes(notification=None, data={"k": "v" * 4096}))
    expect("too big message", reply["error"]["message"], "Message is too big")

    # -- injected failures -------------------------------------------------------------
    injected = [(404, "UNREGISTERED", "NOT_FOUND", None), (403, "SENDER_ID_MISMATCH", "PERMISSION_DENIED", None),
                (429, "QUOTA_EXCEEDED", "RESOURCE_EXHAUSTED", 7), (503, "UNAVAILABLE", "UNAVAILABLE", None),
                (500, "INTERNAL", "INTERNAL", None), (400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", None),
                (401, "THIRD_PARTY_AUTH_ERROR", "UNAUTHENTICATED", None)]
    for status, code, google_status, retry_after in injected:
        req = {"token": TOKEN, "status": status, "error_code": code, "count": 1}
        if retry_after:
            req["retry_after"] = retry_after
        expect(f"POST /fail {code}", control(cport, "POST", "/fail", req), {"ok": True})
        response = send(c, access, MESSAGE)
        expect_google(f"injected {code}", response, status, google_status, error_code=code)
        expect(f"{code} retry-after", response[1].get("retry-after"), str(retry_after) if retry_after else None)
        expect(f"{code} used up", send(c, access, MESSAGE)[0], 200)
    control(cport, "POST", "/fail", {"token": TOKEN, "status": 404, "error_code": "UNREGISTERED"})
    for i in range(3):
        expect_google(f"repeating UNREGISTERED {i}", send(c, access, MESSAGE), 404, "NOT_FOUND",
                      error_code="UNREGISTERED")
    expect("other tokens unaffected", send(c, access, with_changes(token="other" + TOKEN))[0], 200)
    expect_google("validate_only meets the failure too", send(c, access, MESSAGE, top={"validate_only": True}),
                  404, "NOT_FOUND", error_code="UNREGISTERED")
    expect_google("injection only after validation", send(c, access, android(ttl="5")), 400, "INVALID_ARGUMENT",
                  bad_request=True)
    control(cport, "POST", "/fail", {"token": TOKEN, "status": 401, "count": 1})
    expect_google("injected without error_code", send(c, access, MESSAGE), 401, "UNAUTHENTICATED")
    control(cport, "POST", "/fail", {"token": TOKEN, "status": 400, "error_code": "INVALID_ARGUMENT",
                                     "message": "Invalid value at 'message.android.ttl'", "count": 1})
    expect("injected message", send(c, access, MESSAGE)[2]["error"]["message"],
           "Invalid value at 'message.android.ttl'")
    expect("POST /fail-all", control(cport, "POST", "/fail-all", {"status": 503, "error_code": "UNAVAILABLE",
                                                                  "retry_after": 2, "count": 3}), {"ok": True})
    control(cport, "POST", "/fail", {"token": TOKEN, "status": 500, "error_code": "INTERNAL", "count": 1})
    expect_google("a token's own failure first", send(c, access, MESSAGE), 500, "INTERNAL", error_code="INTERNAL")
    for what, message in [("outage: token", MESSAGE), ("outage: another token", with_changes(token="x" + TOKEN)),
                          ("outage: topic", with_changes(token=None, topic="news"))]:
        response = send(c, access, message)
        expect_google(what, response, 503, "UNAVAILABLE", error_code="UNAVAILABLE")
        expect(what + " retry-after", response[1].get("retry-after"), "2")
    expect("outage over", send(c, access, MESSAGE)[0], 200)
    for what, body in [("no token", {"status": 404, "error_code": "UNREGISTERED"}),
                       ("unknown error_code", {"token": TOKEN, "status": 404, "error_code": "NOT_REGISTERED"}),
                       ("status 200", {"token": TOKEN, "status": 200, "error_code": "INTERNAL"}),
                       ("negative count", {"token": TOKEN, "status": 500, "count": -1}),
                       ("retry_after a string", {"token": TOKEN, "status": 429, "retry_after": "7"})]:
        control(cport, "POST", "/fail", body, expect_status=400)
    control(cport, "POST", "/nothing", {}, expect_status=404)

    # -- stats, reset, revocation ------------------------------------------------------
    stats = control(cport, "GET", "/stats")
    lines = open(record).read().splitlines()
    expect("stats accepted = record lines", stats["accepted"], len(lines))
    expect("stats validated", stats["validated"], 1)
    expect("stats rejected UNREGISTERED", stats["rejected"]["404 UNREGISTERED"], 5)
    expect("stats rejected 404 NOT_FOUND", stats["rejected"]["404 NOT_FOUND"], 4)
    expect("stats 401", stats["rejected"]["401 UNAUTHENTICATED"], 7)
    expect("stats requests", stats["requests"],
           stats["accepted"] + stats["validated"] + sum(stats["rejected"].values()))
    expect("stats tokens issued", stats["tokens_issued"], 8)
    expect("stats token errors", sum(stats["token_errors"].values()), len(jwt_defects) + len(request_defects) + 1)
    expect("stats invalid_scope", stats["token_errors"]["400 invalid_scope"], 2)
    expect("stats access tokens used", stats["access_tokens_used"], 3)
    expect("stats connections", (stats["connections"], stats["open_connections"]), (1, 1))
    expect("every record line is JSON with a message", all("message" in json.loads(x) for x in lines), True)
    before_reset = stats["accepted"]
    control(cport, "POST", "/fail", {"token": TOKEN, "status": 404, "error_code": "UNREGISTERED"})
    expect("POST /reset", control(cport, "POST", "/reset", {}), {"ok": True})
    expect("failures cleared", send(c, access, MESSAGE)[0], 200)
    stats = control(cport, "GET", "/stats")
    expect("stats after reset", (stats["accepted"], stats["rejected"], stats["tokens_issued"], stats["requests"]),
           (1, {}, 0, 1))
    expect("access tokens survive /reset", send(c, access2, MESSAGE)[0], 200)
    revoked = control(cport, "POST", "/revoke-tokens", {})
    expect("POST /revoke-tokens", revoked, {"ok": True, "revoked": 8})
    response = send(c, access, MESSAGE)
    error = expect_google("revoked token", response, 401, "UNAUTHENTICATED")
    expect("revoked token: invalid_token", 'error="invalid_token"' in response[1].get("www-authenticate", ""), True)
    expect("revoked token ErrorInfo", [d.get("reason") for d in error["details"]],
           ["ACCESS_TOKEN_TYPE_UNSUPPORTED"])
    status, _, reply = exchange(c, make_assertion(key, aud))
    expect("a new token after revocation", (status, send(c, reply["access_token"], MESSAGE)[0]), (200, 200))
    access = reply["access_token"]
    expect("tokens issued after revocation", control(cport, "GET", "/stats")["tokens_issued"], 1)

    # /wait: at once when reached, after the timeout when not, and woken by arrivals
    t0 = time.time()
    expect("wait already reached", control(cport, "GET", "/wait?accepted=3&timeout=5")["accepted"], 3)
    expect("wait already reached is immediate", time.time() - t0 < 1, True)
    t0 = time.time()
    expect("wait timed out", control(cport, "GET", "/wait?accepted=5&timeout=1")["accepted"], 3)
    expect("wait timeout honoured", 0.9 < time.time() - t0 < 3, True)
    waited = {}
    waiter = threading.Thread(target=lambda: waited.update(control(cport, "GET", "/wait?accepted=5&timeout=20")))
    t0 = time.time()
    waiter.start()
    time.sleep(0.2)
    for _ in range(2):
        send(c, access, MESSAGE)
    waiter.join(timeout=25)
    expect("wait woken by arrivals", (waited.get("accepted"), time.time() - t0 < 5), (5, True))

    # -- concurrency -------------------------------------------------------------------
    body = request_body(MESSAGE)
    check_load(c, port, cafile, (send_headers(access), body), 4, (send_headers(access), body), 10)

    # -- bad clients end only their own connection ---------------------------------------
    # an unknown frame before SETTINGS; HEADERS before SETTINGS; noise announcing a huge frame
    check_bad_clients(port, cafile, (send_headers(access), body),
                      [b"POST /token HTTP/1.1\r\nHost: x\r\n\r\n" * 10, os.urandom(4096)],
                      [b"\x00\x00\x04\xff\xff\xff\xff\xff\xffgarbage",
                       b"\x00\x00\x08\x01\x05\x00\x00\x00\x01" + os.urandom(8), b"\xff" + os.urandom(2000)])
    # a stream reset in the middle of its body, then a request on the same connection
    c = H2Client(port, cafile)
    sid = c.conn.get_next_available_stream_id()
    c.conn.send_headers(sid, send_headers(access))
    c.conn.send_data(sid, body[:20])
    c.conn.reset_stream(sid)
    c.sock.sendall(c.conn.data_to_send())
    expect("still serving after bad clients", c.request(send_headers(access), body)[0], 200)
    c.close()

    # libcurl, which ENS uses: the token exchange as bench/b4-fcm.sh does it, then a send
    if shutil.which("curl") and "HTTP2" in subprocess.run(["curl", "--version"], capture_output=True,
                                                          text=True).stdout:
        out = subprocess.run(
            ["curl", "-sS", "--http2", "--cacert", cafile, "--data-urlencode", f"grant_type={JWT_BEARER}",
             "--data-urlencode", f"assertion={make_assertion(key, aud)}", aud],
            capture_output=True, text=True, timeout=10)
        curl_token = json.loads(out.stdout)["access_token"]
        out = subprocess.run(
            ["curl", "-sS", "--http2", "--cacert", cafile, "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
             "-H", f"authorization: Bearer {curl_token}", "-H", "content-type: application/json",
             "--data-binary", body.decode(), f"https://localhost:{port}/v1/projects/{PROJECT}/messages:send"],
            capture_output=True, text=True, timeout=10)
        expect("curl --http2", out.stdout, "2 200")
    for _ in range(50):  # connections are noticed closed asynchronously
        stats = control(cport, "GET", "/stats")
        if stats["open_connections"] == 0:
            break
        time.sleep(0.05)
    expect("no stray connections", stats["open_connections"], 0)
    expect("final accepted = new record lines", stats["accepted"],
           len(open(record).read().splitlines()) - before_reset)


def run_expiry_checks(port, cport, cafile, keys):
    key = keys[0]
    aud = "https://oauth2.example.test/oauth2/v4/token"
    c = H2Client(port, cafile)
    status, _, reply = exchange(c, make_assertion(key, aud), path="/oauth2/v4/token")
    expect("token_uri's path is the endpoint", (status, reply.get("expires_in")), (200, 1))
    expect_oauth("aud must be --token-uri", exchange(c, make_assertion(key, f"https://localhost:{port}/token"),
                                                     path="/oauth2/v4/token"), 400, "invalid_grant")
    expect_google("/token is no endpoint here", send(c, None, MESSAGE, path="/token"), 404, "NOT_FOUND")
    access = reply["access_token"]
    expect("fresh token sends", send(c, access, MESSAGE)[0], 200)
    time.sleep(1.1)
    response = send(c, access, MESSAGE)
    error = expect_google("expired access token", response, 401, "UNAUTHENTICATED")
    expect("expired ErrorInfo", [d.get("reason") for d in error["details"]], ["ACCESS_TOKEN_EXPIRED"])
    stats = control(cport, "GET", "/stats")
    expect("expiry stats", (stats["accepted"], stats["tokens_issued"], stats["rejected"]),
           (1, 1, {"401 UNAUTHENTICATED": 1, "404 NOT_FOUND": 1}))
    c.close()


if __name__ == "__main__":
    sys.exit(selftest.main("fcm simulator", run))
