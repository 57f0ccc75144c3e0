#!/usr/bin/env python3
"""A strict APNs simulator: Apple's HTTP/2 provider API, for ENS's tests and `make run`.

Usage:
  apns_simulator.py --port P --control-port C --cert CERT.pem --key KEY.pem
      --auth-key PUB.pem --key-id KEYID --team-id TEAMID --record FILE.jsonl
      [--ready-file PATH]

Transport: HTTP/2 over TLS (1.2 or later) on 127.0.0.1:P with CERT/KEY as the server
certificate. ALPN must select "h2"; a client that does not offer it is disconnected.
One event loop serves every connection; SETTINGS_MAX_CONCURRENT_STREAMS is 1000 (exceeding it is a
protocol error and ends the connection); receive windows are 1 MiB per stream and grow
the connection window by 16 MiB, and received data is acknowledged as it arrives.
PING is answered. A malformed connection only ends that connection. When both ports
listen, the PID is written to --ready-file (atomically; removed again on clean exit).
SIGTERM/SIGINT exit promptly.

Only `POST /3/device/<token>` exists. Each request is checked in this order, and the
first failure is answered like Apple: `:status` plus JSON `{"reason": "..."}` (410 also
carries `"timestamp"`, now in ms). Every response has an `apns-id` header: the
request's if it is a canonical UUID, otherwise a fresh lowercase UUID.
   1. `:method` not POST -> 405 MethodNotAllowed; `:path` not /3/device/... -> 404 BadPath.
   2. Certificate auth: with --client-ca, a client may present a TLS certificate issued
     by that CA; its subject's userId (UID), else its commonName, is the one topic it
     may push to. A request without `authorization` on such a connection is accepted
     for that topic only (another topic -> 400 TopicDisallowed) and recorded with
     "auth": "certificate". Otherwise token auth, as follows.
     `authorization` missing -> 403 MissingProviderToken. It must be `bearer <JWT>`
      (scheme case-insensitive, RFC 7235), a compact JWS of three unpadded base64url
      parts. The header must be exactly {"alg": "ES256", "kid": --key-id} (no other
      keys, e.g. no "typ"); claims need `iss` == --team-id and an integer `iat`; the
      signature must be the 64-byte raw r||s (RFC 7518 3.4), not DER, valid for the
      P-256 key in --auth-key over "header.claims". Any of that wrong -> 403
      InvalidProviderToken. `iat` more than 3600 s old -> 403 ExpiredProviderToken;
      more than 300 s in the future -> 403 InvalidProviderToken.
   3. `apns-topic` missing or empty -> 400 MissingTopic.
   4. token empty, not hex (either case), or not 16..200 characters -> 400 BadDeviceToken.
   5. `apns-push-type` present but not one of PUSH_TYPES -> 400 InvalidPushType
      (absent is allowed).
   6. `apns-priority` present but not 1, 5 or 10 -> 400 BadPriority; push type
      background with an explicit priority 10 -> 400 BadPriority.
   7. `apns-expiration` present but not a non-negative decimal integer -> 400
      BadExpirationDate.
   8. `apns-collapse-id` over 64 bytes -> 400 BadCollapseId; `apns-id` present but not a
      lowercase 8-4-4-4-12 UUID -> 400 BadMessageId.
   9. body empty -> 400 PayloadEmpty; over 4096 bytes (5120 for voip) -> 413
      PayloadTooLarge; not UTF-8 JSON (no NaN/Infinity) whose top level is an object
      with an "aps" object -> 400 BadPayload (not an Apple reason: ENS must never send
      such a payload, so tests will notice).
  10. a failure injected for this token (control API) -> its status and reason.
  11. otherwise 200 with an empty body, and one JSON line appended (and flushed) to
      --record: {"time": ms, "token": lowercase hex, "apns_id", "collapse_id" (or null),
      "topic", "push_type" (or null), "priority" (int or null), "expiration" (int or
      null), "payload" (parsed JSON), "jwt" (the JWT string, or null), "auth" ("token"
      or "certificate")}.

Control API: plain HTTP/1.1 with JSON bodies on 127.0.0.1:C.
  POST /fail   {"token": hex, "status": 410, "reason": "Unregistered", "count": N}
               The next N valid requests for that token get that answer; count absent
               or 0 means every request until /reset. A later /fail for the same token
               replaces the earlier one. Answers {"ok": true}.
  POST /reset  Clears injected failures and all counters (not the record file).
  GET  /stats  {"accepted": n, "rejected": {"<status> <reason>": n, ...},
               "distinct_jwts": n (distinct JWT strings seen on any request),
               "connections": n (HTTP/2 connections established since start or /reset),
               "open_connections": n (currently open)}.
  GET  /wait?accepted=N&timeout=S
               The same answer as /stats, once N requests have been accepted since
               the last /reset or S seconds have passed (for benchmarks).
"""
import argparse
import base64
import json
import re
import sys
import threading
import time
import uuid
from collections import Counter

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from simlib import certs, control, process
from simlib.failures import Failures
from simlib.h2server import ConnectionCount, H2Server

PUSH_TYPES = {"alert", "background", "voip", "complication", "fileprovider", "liveactivity",
              "location", "mdm", "pushtotalk", "widgets", "controls"}
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
B64URL_RE = re.compile(r"[A-Za-z0-9_-]*")
HEX_RE = re.compile(r"[0-9a-fA-F]{16,200}")
MAX_BODY_KEPT = 5121  # enough to tell "too large" for every push type


class Reject(Exception):
    def __init__(self, status, reason):
        super().__init__(f"{status} {reason}")
        self.status, self.reason = status, reason


def certificate_topic(peer):
    """The topic a verified client certificate may push to: its subject's userId (UID,
    as Apple's push certificates carry the bundle id), else its commonName; None when
    the client presented no certificate."""
    if not peer:
        return None
    fields = dict(pair for rdn in peer.get("subject", ()) for pair in rdn)
    return fields.get("userId") or fields.get("commonName")


def now_ms():
    return int(time.time() * 1000)


def reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def b64url(part):
    if not B64URL_RE.fullmatch(part) or len(part) % 4 == 1:
        raise ValueError("not unpadded base64url")
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


class Simulator:
    def __init__(self, args):
        self.key_id, self.team_id = args.key_id, args.team_id
        with open(args.auth_key, "rb") as f:
            pem = f.read()
        try:
            self.public_key = serialization.load_pem_public_key(pem)
        except ValueError:  # a private key is accepted too
            self.public_key = serialization.load_pem_private_key(pem, None).public_key()
        if not (isinstance(self.public_key, ec.EllipticCurvePublicKey)
                and isinstance(self.public_key.curve, ec.SECP256R1)):
            sys.exit("apns_simulator: --auth-key must be a P-256 key")
        self.record = open(args.record, "a", encoding="utf-8")
        self.lock = threading.Lock()
        self.waiters = control.Waiters(self.lock)
        self.count = ConnectionCount()
        self.jwt_cache = {}  # JWT -> iat, or Reject for static checks (alg/kid/sig/iss)
        self.failures = Failures()  # lowercase token -> (status, reason)
        self.reset()

    def reset(self):
        self.failures.clear()
        self.count.reset()
        with self.lock:
            self.accepted, self.rejected = 0, Counter()
            self.jwts = set()

    def stats(self):
        with self.lock:
            return {"accepted": self.accepted, "rejected": dict(self.rejected),
                    "distinct_jwts": len(self.jwts), "connections": self.count.established,
                    "open_connections": self.count.open}

    @staticmethod
    def session(peer_certificate):
        """A connection's state for h2server: the topic its client certificate allows."""
        return certificate_topic(peer_certificate)

    # -- JWT ---------------------------------------------------------------------------
    def check_jwt_static(self, jwt):
        """Everything about a JWT that does not depend on the clock; returns iat."""
        try:
            parts = jwt.split(".")
            if len(parts) != 3:
                raise ValueError("not three parts")
            header, claims = json.loads(b64url(parts[0])), json.loads(b64url(parts[1]))
            signature = b64url(parts[2])
        except (ValueError, UnicodeDecodeError):
            raise Reject(403, "InvalidProviderToken")
        if header != {"alg": "ES256", "kid": self.key_id} or len(signature) != 64:
            raise Reject(403, "InvalidProviderToken")
        der = encode_dss_signature(int.from_bytes(signature[:32], "big"),
                                   int.from_bytes(signature[32:], "big"))
        try:
            self.public_key.verify(der, (parts[0] + "." + parts[1]).encode(),
                                   ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise Reject(403, "InvalidProviderToken")
        if not isinstance(claims, dict) or claims.get("iss") != self.team_id:
            raise Reject(403, "InvalidProviderToken")
        iat = claims.get("iat")
        if not isinstance(iat, int) or isinstance(iat, bool):
            raise Reject(403, "InvalidProviderToken")
        return iat

    def check_authorization(self, value):
        if value is None:
            raise Reject(403, "MissingProviderToken")
        scheme, _, jwt = value.partition(" ")
        if scheme.lower() != "bearer" or not jwt:
            raise Reject(403, "InvalidProviderToken")
        result = self.jwt_cache.get(jwt)
        if result is None:
            try:
                result = self.check_jwt_static(jwt)
            except Reject as reject:
                result = reject
            if len(self.jwt_cache) > 10000:
                self.jwt_cache.clear()
            self.jwt_cache[jwt] = result  # a dict store is atomic under the GIL
        if isinstance(result, Reject):
            raise result
        age = time.time() - result
        if age > 3600:
            raise Reject(403, "ExpiredProviderToken")
        if age < -300:
            raise Reject(403, "InvalidProviderToken")

    # -- one request -------------------------------------------------------------------
    def handle(self, headers, body, body_length, cert_topic=None):
        """Returns (response headers, response body bytes) for h2server."""
        h = headers.get
        apns_id = h("apns-id") if UUID_RE.fullmatch(h("apns-id") or "") else str(uuid.uuid4())
        auth = h("authorization")
        jwt = auth.partition(" ")[2] if auth and auth[:7].lower() == "bearer " else None
        try:
            record = self.validate(h, body, body_length, apns_id, jwt, cert_topic)
        except Reject as r:
            reply = {"reason": r.reason}
            if r.status == 410:
                reply["timestamp"] = now_ms()
            with self.lock:
                self.rejected[f"{r.status} {r.reason}"] += 1
                if jwt:
                    self.jwts.add(jwt)
            body = json.dumps(reply, separators=(",", ":")).encode()
            return [(":status", str(r.status)), ("apns-id", apns_id), ("content-type", "application/json"),
                    ("content-length", str(len(body)))], body
        with self.lock:
            self.accepted += 1
            self.waiters.counted(self.accepted)
            self.jwts.add(jwt)
            self.record.write(json.dumps(record) + "\n")
            self.record.flush()
        return [(":status", "200"), ("apns-id", apns_id)], b""

    def validate(self, h, body, body_length, apns_id, jwt, cert_topic=None):
        if h(":method") != "POST":
            raise Reject(405, "MethodNotAllowed")
        path = h(":path") or ""
        if not path.startswith("/3/device/"):
            raise Reject(404, "BadPath")
        by_certificate = cert_topic is not None and h("authorization") is None
        if not by_certificate:
            self.check_authorization(h("authorization"))
        topic = h("apns-topic")
        if not topic:
            raise Reject(400, "MissingTopic")
        if by_certificate and topic != cert_topic:
            raise Reject(400, "TopicDisallowed")
        token = path[len("/3/device/"):]
        if not HEX_RE.fullmatch(token):
            raise Reject(400, "BadDeviceToken")
        token = token.lower()
        push_type = h("apns-push-type")
        if push_type is not None and push_type not in PUSH_TYPES:
            raise Reject(400, "InvalidPushType")
        priority = h("apns-priority")
        if priority is not None:
            if priority not in ("1", "5", "10"):
                raise Reject(400, "BadPriority")
            priority = int(priority)
            if push_type == "background" and priority == 10:
                raise Reject(400, "BadPriority")
        expiration = h("apns-expiration")
        if expiration is not None:
            try:
                if not expiration.isascii() or not expiration.isdigit():
                    raise ValueError
                expiration = int(expiration)
            except ValueError:
                raise Reject(400, "BadExpirationDate")
        collapse_id = h("apns-collapse-id")
        if collapse_id is not None and len(collapse_id.encode("utf-8", "surrogateescape")) > 64:
            raise Reject(400, "BadCollapseId")
        if h("apns-id") is not None and h("apns-id") != apns_id:
            raise Reject(400, "BadMessageId")
        if body_length == 0:
            raise Reject(400, "PayloadEmpty")
        if body_length > (5120 if push_type == "voip" else 4096):
            raise Reject(413, "PayloadTooLarge")
        try:
            payload = json.loads(body.decode("utf-8"), parse_constant=reject_constant)
        except (ValueError, RecursionError):
            raise Reject(400, "BadPayload")
        if not isinstance(payload, dict) or not isinstance(payload.get("aps"), dict):
            raise Reject(400, "BadPayload")
        failure = self.failures.take(token)
        if failure:
            raise Reject(*failure)
        return {"time": now_ms(), "token": token, "apns_id": apns_id,
                "collapse_id": collapse_id, "topic": topic, "push_type": push_type,
                "priority": priority, "expiration": expiration, "payload": payload,
                "jwt": None if by_certificate else jwt,
                "auth": "certificate" if by_certificate else "token"}


def control_handler(simulator):
    class Handler(control.StatsHandler):
        sim = simulator

        def do_POST(self):
            raw = self.read()
            if self.path == "/reset":
                simulator.reset()
                return self.reply(200, {"ok": True})
            if self.path != "/fail":
                return self.reply(404, {"error": "not found"})
            try:
                req = json.loads(raw)
                token, status, reason = req["token"].lower(), int(req["status"]), req["reason"]
                count = int(req.get("count") or 0)
                if not isinstance(reason, str) or not 400 <= status <= 599 or count < 0:
                    raise ValueError
            except (ValueError, KeyError, TypeError, AttributeError):
                return self.reply(400, {"error": "want {token, status, reason, count?}"})
            simulator.failures.inject(token, (status, reason), count)
            self.reply(200, {"ok": True})

    return Handler


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name in ("cert", "key", "auth-key", "key-id", "team-id", "record"):
        p.add_argument("--" + name, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--control-port", type=int, required=True)
    p.add_argument("--ready-file")
    p.add_argument("--client-ca", help="CA whose client certificates may authenticate (certificate auth)")
    args = p.parse_args()

    sim = Simulator(args)
    tls = certs.server_context(args.cert, args.key, "h2", client_ca=args.client_ca)
    server = H2Server(sim, args.port, tls, "apns_simulator", sim.count, MAX_BODY_KEPT)
    process.serve_in_threads([control.control_server(args.control_port, control_handler(sim))])
    try:
        with process.running(args.ready_file):
            server.serve()
    finally:
        with sim.lock:
            sim.record.close()

if __name__ == "__main__":
    main()
