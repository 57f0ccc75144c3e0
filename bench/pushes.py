#!/usr/bin/env python3
"""B4 helpers: drive ens-sender through its Unix socket, and mint a JWT for h2load.

  pushes.py submit SOCKET N CONNECTIONS [apns|fcm]
                                         submit N notifications (to APNs or FCM tokens);
                                         print "accepted seconds"
  pushes.py jwt KEY.p8 KEYID TEAMID      print an ES256 provider token (raw r||s)
  pushes.py payload                      print one notification payload (APNs JSON)
  pushes.py fcm-assertion ACCOUNT.json   print the RS256 OAuth assertion for a service account
  pushes.py fcm-message TOKEN            print the messages:send body ens-sender sends for PAYLOAD
"""
import base64
import json
import os
import selectors
import socket
import struct
import sys
import time

PAYLOAD = {"aps": {"alert": {"title": "Alice", "body": "Quarterly numbers"}, "sound": "default"}, "ens": {"userid": "bench"}}


def frame(kind, payload):
    return b"EN" + bytes([1, kind]) + struct.pack(">I", len(payload)) + payload


def read_frame(sock):
    header = b""
    while len(header) < 8:
        chunk = sock.recv(8 - len(header))
        if not chunk:
            raise ConnectionError("closed")
        header += chunk
    length = struct.unpack(">I", header[4:8])[0]
    body = b""
    while len(body) < length:
        chunk = sock.recv(length - len(body))
        if not chunk:
            raise ConnectionError("closed")
        body += chunk
    return header[3], body


def fcm_token():
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    raw = os.urandom(156)
    return "".join(alphabet[b % 64] for b in raw[:22]) + ":APA91b" + "".join(alphabet[b % 64] for b in raw[22:])


def submit(path, count, connections, provider="apns"):
    """Like `connections` responders at once: each connection sends a notification and
    waits for its answer before the next. One thread drives them all: sixteen Python
    threads handing the GIL to each other cost more CPU than ens-sender's whole ingest,
    and that CPU came out of what B4 measures."""
    expiration = int(time.time()) + 3600
    selector = selectors.DefaultSelector()
    state = {}  # socket -> [next index, received bytes]
    accepted = 0

    def send_next(sock):
        token = fcm_token() if provider == "fcm" else os.urandom(32).hex()
        notification = {"id": os.urandom(16).hex(), "provider": provider, "token": token, "topic": "com.example.mail",
                        "environment": "sandbox", "pushType": "alert", "expiration": expiration, "payload": PAYLOAD}
        sock.sendall(frame(1, json.dumps(notification).encode()))  # small: the socket takes it at once

    start = time.perf_counter()
    for first in range(min(connections, count)):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        state[sock] = [first, b""]
        send_next(sock)
        selector.register(sock, selectors.EVENT_READ)
    while state:
        for key, _ in selector.select():
            sock = key.fileobj
            entry = state[sock]
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("ens-sender closed the connection")
            entry[1] += chunk
            while len(entry[1]) >= 8 and len(entry[1]) >= 8 + struct.unpack(">I", entry[1][4:8])[0]:
                length = 8 + struct.unpack(">I", entry[1][4:8])[0]
                if entry[1][3] == 2:
                    accepted += 1
                entry[1] = entry[1][length:]
                entry[0] += connections
                if entry[0] < count:
                    send_next(sock)
                else:
                    selector.unregister(sock)
                    sock.close()
                    del state[sock]
                    break
    print(accepted, f"{time.perf_counter() - start:.3f}")


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(key_path, key_id, team_id):
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
    key = serialization.load_pem_private_key(open(key_path, "rb").read(), password=None)
    signing_input = b64url(json.dumps({"alg": "ES256", "kid": key_id}, separators=(",", ":")).encode()) + "." + \
        b64url(json.dumps({"iss": team_id, "iat": int(time.time())}, separators=(",", ":")).encode())
    r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
    print(signing_input + "." + b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big")))


def fcm_assertion(account_path):
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding
    account = json.load(open(account_path))
    key = serialization.load_pem_private_key(account["private_key"].encode(), password=None)
    now = int(time.time())
    signing_input = b64url(json.dumps({"alg": "RS256", "typ": "JWT", "kid": account["private_key_id"]}, separators=(",", ":")).encode()) + "." + \
        b64url(json.dumps({"iss": account["client_email"], "scope": "https://www.googleapis.com/auth/firebase.messaging",
                           "aud": account["token_uri"], "iat": now, "exp": now + 3600}, separators=(",", ":")).encode())
    print(signing_input + "." + b64url(key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())))


def fcm_message(token):
    """The body ens-sender builds for PAYLOAD (FCMProvider.message): same fields, same size."""
    print(json.dumps({"message": {
        "token": token,
        "android": {"priority": "HIGH", "ttl": "3600s", "collapse_key": os.urandom(16).hex()},
        "notification": {"title": PAYLOAD["aps"]["alert"]["title"], "body": PAYLOAD["aps"]["alert"]["body"]},
        "data": {"notificationId": os.urandom(16).hex(), "userid": "bench", "sound": "default"}}}, separators=(",", ":")))


if __name__ == "__main__":
    if sys.argv[1] == "submit":
        submit(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else "apns")
    elif sys.argv[1] == "fcm-assertion":
        fcm_assertion(sys.argv[2])
    elif sys.argv[1] == "fcm-message":
        fcm_message(sys.argv[2] if len(sys.argv) > 2 else fcm_token())
    elif sys.argv[1] == "jwt":
        jwt(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "payload":
        print(json.dumps(PAYLOAD))
    else:
        sys.exit(__doc__)
