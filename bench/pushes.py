#!/usr/bin/env python3
"""B4 helpers: drive ens-apns through its Unix socket, and mint a JWT for h2load.

  pushes.py submit SOCKET N THREADS      submit N notifications; print "accepted seconds"
  pushes.py jwt KEY.p8 KEYID TEAMID      print an ES256 provider token (raw r||s)
  pushes.py payload                      print one notification payload (APNs JSON)
"""
import base64
import json
import os
import socket
import struct
import sys
import threading
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


def submit(path, count, threads):
    accepted = [0]
    lock = threading.Lock()
    expiration = int(time.time()) + 3600

    def worker(index):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        for i in range(index, count, threads):
            notification = {"id": os.urandom(16).hex(), "token": os.urandom(32).hex(), "topic": "com.example.mail",
                            "environment": "sandbox", "pushType": "alert", "expiration": expiration, "payload": PAYLOAD}
            sock.sendall(frame(1, json.dumps(notification).encode()))
            kind, body = read_frame(sock)
            if kind == 2:
                with lock:
                    accepted[0] += 1
        sock.close()

    start = time.perf_counter()
    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(accepted[0], f"{time.perf_counter() - start:.3f}")


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


if __name__ == "__main__":
    if sys.argv[1] == "submit":
        submit(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "jwt":
        jwt(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "payload":
        print(json.dumps(PAYLOAD))
    else:
        sys.exit(__doc__)
