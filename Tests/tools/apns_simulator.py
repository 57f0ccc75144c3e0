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
import os
import re
import selectors
import signal
import socket
import ssl
import sys
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

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


class Connection:
    """One client connection, driven by the event loop in main(): TLS through memory
    BIOs, then HTTP/2. Everything runs on one thread: a thread per connection made
    the simulator slower the more connections a client opened (the threads hand the
    GIL to each other on every socket call: h2load measured 4,800 requests/s on one
    connection and 2,800 on four), which would penalise a client for spreading its
    streams the way Apple recommends. One socket read is decrypted in full before
    HTTP/2 sees it, so a client that writes each frame as its own TLS record (libcurl
    7.x) costs a loop turn per read, not per record."""

    HANDSHAKE_SECONDS = 10

    def __init__(self, sim, raw, context):
        self.sim, self.raw = sim, raw
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.deadline = time.monotonic() + self.HANDSHAKE_SECONDS
        self.h2 = None
        self.cert_topic = None
        self.counted = False
        self.unsent = bytearray()
        self.streams = {}  # stream id -> [headers dict, body bytearray, body length]
        self.pending = {}  # stream id -> response body waiting for flow-control window

    def readable(self):
        """Handles what the socket has; False once the connection is over."""
        try:
            data = self.raw.recv(262144)
        except (BlockingIOError, InterruptedError):
            return True
        if not data:
            return False
        self.incoming.write(data)
        if self.h2 is None and not self.handshake():
            return False
        if self.h2 is None:
            return True
        chunks, alive = [], True
        while True:
            try:
                chunk = self.tls.read(1 << 20)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                alive = False
                break
            if not chunk:
                alive = False
                break
            chunks.append(chunk)
        if chunks and not self.speak(b"".join(chunks)):
            return False
        self.flush()
        return alive

    def handshake(self):
        """Advances the TLS handshake; False if it failed (after sending the alert)."""
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            self.flush()
            return True
        except ssl.SSLError:
            self.flush()  # the alert that says why
            return False
        self.flush()
        if self.tls.selected_alpn_protocol() != "h2":
            return False
        self.cert_topic = certificate_topic(self.tls.getpeercert())
        with self.sim.lock:
            self.sim.connections += 1
            self.sim.open_connections += 1
        self.counted = True
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=False, header_encoding=None))
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1000,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(16 << 20)
        self.send(self.h2.data_to_send())
        return True

    def speak(self, data):
        """Feeds HTTP/2 bytes in and answers every request they complete."""
        conn, streams, pending = self.h2, self.streams, self.pending
        try:
            events = conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.send(conn.data_to_send())  # the GOAWAY h2 queued
            return False
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                headers = {}
                for name, value in event.headers:
                    headers.setdefault(name.decode("ascii", "replace"),
                                       value.decode("utf-8", "surrogateescape"))
                streams[event.stream_id] = [headers, bytearray(), 0]
            elif isinstance(event, h2.events.DataReceived):
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                stream = streams.get(event.stream_id)
                if stream is not None:
                    stream[1] += event.data[:MAX_BODY_KEPT - len(stream[1])]
                    stream[2] += len(event.data)
            elif isinstance(event, h2.events.StreamEnded):
                stream = streams.pop(event.stream_id, None)
                if stream is not None:
                    try:
                        self.sim.respond(conn, event.stream_id, *self.sim.handle(*stream, self.cert_topic), pending)
                    except h2.exceptions.StreamClosedError:
                        pending.pop(event.stream_id, None)  # reset meanwhile
            elif isinstance(event, h2.events.StreamReset):
                streams.pop(event.stream_id, None)
                pending.pop(event.stream_id, None)
            elif isinstance(event, h2.events.WindowUpdated):
                for stream_id in list(pending):
                    self.sim.send_body(conn, stream_id, pending)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.send(conn.data_to_send())
                return False
        out = conn.data_to_send()
        if out:
            self.send(out)
        return True

    def send(self, data):
        if data:
            self.tls.write(data)
        self.flush()

    def flush(self):
        """Moves what TLS produced to the socket; keeps what the socket cannot take now."""
        self.unsent += self.outgoing.read()
        while self.unsent:
            try:
                sent = self.raw.send(self.unsent)
            except (BlockingIOError, InterruptedError):
                return
            del self.unsent[:sent]

    def writable(self):
        try:
            self.flush()
        except OSError:
            return False
        return True

    def close(self):
        if self.counted:
            with self.sim.lock:
                self.sim.open_connections -= 1
            self.counted = False
        self.raw.close()


def serve(sim, listener, context):
    """The event loop: accepts connections and drives every one of them."""
    selector = selectors.DefaultSelector()
    listener.setblocking(False)
    selector.register(listener, selectors.EVENT_READ, None)
    handshaking = set()

    def drop(connection):
        selector.unregister(connection.raw)
        handshaking.discard(connection)
        connection.close()

    while True:
        for key, mask in selector.select(timeout=1.0):
            if key.data is None:
                while True:
                    try:
                        raw, _ = listener.accept()
                    except (BlockingIOError, InterruptedError):
                        break
                    raw.setblocking(False)
                    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    connection = Connection(sim, raw, context)
                    selector.register(raw, selectors.EVENT_READ, connection)
                    handshaking.add(connection)
                continue
            connection = key.data
            try:
                alive = connection.writable() if mask & selectors.EVENT_WRITE else True
                if alive and mask & selectors.EVENT_READ:
                    alive = connection.readable()
            except (OSError, h2.exceptions.H2Error):
                alive = False  # a broken connection ends only this connection
            except Exception as e:  # a simulator bug: say so, but keep serving others
                print(f"apns_simulator: connection dropped: {e!r}", file=sys.stderr)
                alive = False
            if not alive:
                drop(connection)
                continue
            if connection.h2 is not None:
                handshaking.discard(connection)
            wanted = selectors.EVENT_READ | (selectors.EVENT_WRITE if connection.unsent else 0)
            if wanted != key.events:
                selector.modify(connection.raw, wanted, connection)
        now = time.monotonic()
        for connection in [c for c in handshaking if c.deadline < now]:
            drop(connection)  # a client that never finishes its handshake


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
        # /wait sleeps on this until `accepted` reaches `wake_at`: a waiter that polled
        # would take the GIL from the event loop it is measuring.
        self.accepted_changed = threading.Condition(self.lock)
        self.wait_targets = []
        self.wake_at = None  # the smallest target of any waiter
        self.jwt_cache = {}  # JWT -> iat, or Reject for static checks (alg/kid/sig/iss)
        self.failures = {}   # lowercase token -> [status, reason, remaining or None]
        self.reset()
        self.open_connections = 0

    def reset(self):
        with self.lock:
            self.failures.clear()
            self.accepted, self.rejected = 0, Counter()
            self.jwts, self.connections = set(), 0

    def wait_for(self, accepted, seconds):
        """Waits until `accepted` requests were accepted (or `seconds` passed); returns stats()."""
        deadline = time.monotonic() + seconds
        with self.lock:
            self.wait_targets.append(accepted)
            self.wake_at = min(self.wait_targets)
            try:
                while self.accepted < accepted and (left := deadline - time.monotonic()) > 0:
                    self.accepted_changed.wait(left)
            finally:
                self.wait_targets.remove(accepted)
                self.wake_at = min(self.wait_targets, default=None)
        return self.stats()

    def stats(self):
        with self.lock:
            return {"accepted": self.accepted, "rejected": dict(self.rejected),
                    "distinct_jwts": len(self.jwts), "connections": self.connections,
                    "open_connections": self.open_connections}

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
        """Returns (status, apns_id, response body bytes)."""
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
            return r.status, apns_id, json.dumps(reply, separators=(",", ":")).encode()
        with self.lock:
            self.accepted += 1
            if self.wake_at is not None and self.accepted >= self.wake_at:
                self.accepted_changed.notify_all()
            self.jwts.add(jwt)
            self.record.write(json.dumps(record) + "\n")
            self.record.flush()
        return 200, apns_id, b""

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
        with self.lock:
            failure = self.failures.get(token)
            if failure:
                if failure[2] is not None:
                    failure[2] -= 1
                    if failure[2] <= 0:
                        del self.failures[token]
                raise Reject(failure[0], failure[1])
        return {"time": now_ms(), "token": token, "apns_id": apns_id,
                "collapse_id": collapse_id, "topic": topic, "push_type": push_type,
                "priority": priority, "expiration": expiration, "payload": payload,
                "jwt": None if by_certificate else jwt,
                "auth": "certificate" if by_certificate else "token"}

    def respond(self, conn, stream_id, status, apns_id, body, pending):
        headers = [(":status", str(status)), ("apns-id", apns_id)]
        if body:
            headers += [("content-type", "application/json"), ("content-length", str(len(body)))]
        conn.send_headers(stream_id, headers, end_stream=not body)
        if body:
            pending[stream_id] = body
            self.send_body(conn, stream_id, pending)

    @staticmethod
    def send_body(conn, stream_id, pending):
        body = pending[stream_id]
        try:
            if conn.local_flow_control_window(stream_id) >= len(body):
                conn.send_data(stream_id, body, end_stream=True)
                del pending[stream_id]
        except h2.exceptions.StreamClosedError:
            del pending[stream_id]


def control_server(sim, port):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def reply(self, status, obj):
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/stats":
                return self.reply(200, sim.stats())
            match = re.fullmatch(r"/wait\?accepted=(\d{1,9})&timeout=(\d{1,4})", self.path)
            if match:
                # A benchmark waits here instead of polling /stats from a shell loop,
                # which would take CPU from what it measures.
                return self.reply(200, sim.wait_for(int(match.group(1)), int(match.group(2))))
            self.reply(404, {"error": "not found"})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path == "/reset":
                sim.reset()
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
            with sim.lock:
                sim.failures[token] = [status, reason, count or None]
            self.reply(200, {"ok": True})

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server


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
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.minimum_version = ssl.TLSVersion.TLSv1_2
    tls.load_cert_chain(args.cert, args.key)
    tls.set_alpn_protocols(["h2"])
    if args.client_ca:
        tls.verify_mode = ssl.CERT_OPTIONAL
        tls.load_verify_locations(args.client_ca)
    listener = socket.create_server(("127.0.0.1", args.port), backlog=1024)
    control = control_server(sim, args.control_port)
    threading.Thread(target=control.serve_forever, daemon=True).start()

    def stop(signum, frame):
        raise SystemExit(0)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.ready_file:
        with open(args.ready_file + ".tmp", "w") as f:
            f.write(f"{os.getpid()}\n")
        os.replace(args.ready_file + ".tmp", args.ready_file)
    try:
        serve(sim, listener, tls)
    finally:
        listener.close()
        with sim.lock:
            sim.record.close()
        if args.ready_file:
            try:
                os.unlink(args.ready_file)
            except OSError:
                pass


if __name__ == "__main__":
    main()
