#!/usr/bin/env python3
"""Benchmark helpers that act as device clients (loopback only).

  devices.py b2-setup N OUT     create N subscribed users with one device each and write
                                one sealed /getsubscriptionstatusv2 JSON body per line
  devices.py b3-latency N [S]   time N /getpublickey calls for new users, each answered
                                status S (default 200); print p50/p99
  devices.py b6-setup N OUT [MODE]
                                register N users with Exchange (the simulator, Basic auth,
                                POX Autodiscover) and write, per user, a real new-mail
                                SendNotification to OUT.<n>.xml and "path<TAB>file" to OUT;
                                MODE: the devices' privacy mode (default preview; encrypted
                                gives each device a P-256 key of its own)
  devices.py b6-carrying KEYED OUT
                                from b6-setup's KEYED file, the same callbacks to URLs that
                                carry the users' credentials (the form before they moved to
                                the database), made by Tests/tools/callback_url.py
  devices.py b8-setup N M OUT   register N Exchange Online users through Graph (the Graph
                                simulator, delegated tokens) and write M change-notification
                                batches per user, each for a new message, as "path<TAB>json"
  devices.py b8-blind-setup N M OUT
                                the same with each device in `blind` mode (its own
                                certificate): the rich subscriptions' notifications only

Environment: ENS_VAR (stack directory), ENS_PORT, ENS_TOKEN (an API token).
Sealing uses Python's cryptography (PKCS#1 v1.5, k-11 byte chunks), like a device.
"""
import base64
import http.client
import importlib.util
import json
import os
import secrets
import ssl
import statistics
import subprocess
import sys
import time

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import padding

VAR = os.environ["ENS_VAR"]
PORT = int(os.environ.get("ENS_PORT", "8543"))
TOKEN = os.environ["ENS_TOKEN"]


def connection():
    context = ssl.create_default_context(cafile=f"{VAR}/tls/server.crt")
    return http.client.HTTPSConnection("localhost", PORT, context=context)


def post(conn, path, params):
    body = json.dumps(params)
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json", "ApiToken": TOKEN})
    response = conn.getresponse()
    data = response.read()
    return response.status, json.loads(data) if data else {}


def seal(pem, plaintext):
    key = serialization.load_pem_public_key(pem.encode())
    k = key.key_size // 8
    data = plaintext.encode()
    chunks = [data[i:i + k - 11] for i in range(0, max(len(data), 1), k - 11)]
    return base64.b64encode(b"".join(key.encrypt(c, padding.PKCS1v15()) for c in chunks)).decode()


def b2_setup(count, out_path):
    conn = connection()
    bodies = []
    for i in range(count):
        email = f"bench-b2-{i}-{secrets.token_hex(4)}@example.test"
        status, answer = post(conn, "/getpublickey", {"email": email})
        assert status == 200, (status, answer)
        userid, pem = answer["userid"], answer["pubKey"]
        # A real registration (proof of possession and Subscribe at the simulator) with
        # the mailbox's own OAuth token at its named EWS URL: since the trust work a
        # subscription row ENS did not write itself (no RowBinding MAC) is not trusted.
        oauth = f"bench-oauth-{secrets.token_hex(8)}"
        simulator("/mailboxes", {"email": email, "oauthToken": oauth})
        token = secrets.token_hex(32)
        creds = seal(pem, json.dumps({"apnsToken": token, "oauthAccessToken": oauth,
                                      "ewsUrl": "https://mail.example.test/EWS/Exchange.asmx"}))
        status, answer = post(conn, "/registerdevicev2", {"userid": userid, "email": email, "creds": creds,
                                                          "bundleid": "com.example.mail"})
        assert answer.get("responseCode") == "UserSubscribed", answer
        payload = seal(pem, json.dumps({"pushToken": token, "lastMessageDate": "01/01/2020 00:00:00.000",
                                        "ignoreLastMessageDate": 1}))
        bodies.append(json.dumps({"userid": userid, "subscriptionPayload": payload}))
    with open(out_path, "w") as f:
        f.write("\n".join(bodies) + "\n")


def simulator(path, obj):
    control = http.client.HTTPConnection("127.0.0.1", PORT + 4)
    control.request("POST", path, body=json.dumps(obj), headers={"Content-Type": "application/json"})
    answer = json.loads(control.getresponse().read())
    control.close()
    return answer


def privacy_parameters(mode):
    """The registration parameters of a privacy mode: `encrypted` with a fresh device key."""
    if mode == "preview":
        return {}
    if mode != "encrypted":
        return {"privacy": mode}
    from cryptography.hazmat.primitives.asymmetric import ec
    point = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return {"privacy": "encrypted", "privacyKey": base64.b64encode(point).decode()}


def b6_setup(count, out_path, mode="preview"):
    conn = connection()
    simulator("/domains", {"domain": "bench.test", "mode": "pox-root"})
    lines = []
    users = []
    for i in range(count):
        email = f"b6-{i}-{secrets.token_hex(4)}@bench.test"
        password = secrets.token_hex(12)
        simulator("/mailboxes", {"email": email, "userName": email, "password": password, "unread": 1})
        status, answer = post(conn, "/getpublickey", {"email": email})
        assert status == 200, (status, answer)
        userid, pem = answer["userid"], answer["pubKey"]
        creds = seal(pem, json.dumps({"apnsToken": secrets.token_hex(32), "userName": email, "password": password}))
        status, answer = post(conn, "/registerdevicev2", {"userid": userid, "email": email, "creds": creds,
                                                          "bundleid": "com.example.mail", "exchVersion": 3,
                                                          "defaultSound": "default", **privacy_parameters(mode)})
        assert answer.get("responseCode") == "UserSubscribed", answer
        mail = simulator("/newmail", {"email": email, "subject": f"Benchmark message {i}", "fromName": "Bench",
                                      "fromAddress": "bench@elsewhere.test", "deliver": False})
        for notification in mail["notifications"]:
            path = "/" + notification["url"].split("/", 3)[3]
            body_path = f"{out_path}.{len(lines)}.xml"
            with open(body_path, "w") as f:
                f.write(notification["body"])
            lines.append(f"{path}\t{body_path}")
            users.append({"path": path, "email": email, "password": password})
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    # The credentials, for b6-carrying only (a bench stack's throwaway mailboxes).
    with open(out_path + ".users.json", "w") as f:
        json.dump(users, f)


def b6_carrying(keyed_path, out_path):
    spec = importlib.util.spec_from_file_location(
        "callback_url", os.path.join(os.path.dirname(__file__), "..", "Tests", "tools", "callback_url.py"))
    callback_url = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(callback_url)
    with open(os.path.join(VAR, "secrets", "master.key")) as f:
        master = bytes.fromhex(f.read().strip())
    bodies = dict(line.split("\t") for line in open(keyed_path).read().splitlines() if line)
    lines = []
    for user in json.load(open(keyed_path + ".users.json")):
        record, generation = (int(part) for part in user["path"].split("/")[2:4])
        key_material = subprocess.run(
            ["mariadb", "--no-defaults", "-S", os.path.join(VAR, "run", "mysqld.sock"), "-uroot", "-N", "-B", "-e",
             f"SELECT HEX(private_key_sealed) FROM ens.EnsSubscriptionInfo WHERE id = {record}"],
            check=True, capture_output=True, text=True).stdout.strip()
        suffix = callback_url.carrying_suffix(master, record, generation, bytes.fromhex(key_material),
                                              callback_url.basic_payload(user["email"], user["password"]))
        lines.append(f"/ews/{suffix}\t{bodies[user['path']]}")
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")


def graph_simulator(path, obj):
    control = http.client.HTTPConnection("127.0.0.1", PORT + 9, timeout=120)
    control.request("POST", path, body=json.dumps(obj), headers={"Content-Type": "application/json"})
    answer = json.loads(control.getresponse().read())
    control.close()
    return answer


def b8_setup(count, messages, out_path):
    conn = connection()
    tenant = "6d1f8f38-0c55-4d7e-9d1e-5c0a3a7e0001"
    lines = []
    for i in range(count):
        email = f"b8-{i}-{secrets.token_hex(4)}@contoso.test"
        graph_simulator("/users", {"tenant": tenant, "mail": email, "displayName": "Bench"})
        access = graph_simulator("/user-token", {"mail": email})["access_token"]
        status, answer = post(conn, "/getpublickey", {"email": email})
        assert status == 200, (status, answer)
        userid, pem = answer["userid"], answer["pubKey"]
        creds = seal(pem, json.dumps({"apnsToken": secrets.token_hex(32), "graphAccessToken": access}))
        status, answer = post(conn, "/registerdevicev2", {"userid": userid, "email": email, "creds": creds,
                                                          "bundleid": "com.example.mail", "defaultSound": "default"})
        assert answer.get("responseCode") == "UserSubscribed", answer
        mail = graph_simulator("/newmail", {"mail": email, "subject": f"Benchmark message {i}", "fromName": "Bench",
                                            "fromAddress": "bench@elsewhere.test", "count": messages, "deliver": False})
        for notification in mail["notifications"]:
            path = "/" + notification["url"].split("/", 3)[3]
            body = notification["body"] if isinstance(notification["body"], str) else json.dumps(notification["body"])
            lines.append(f"{path}\t{body}")
    # Interleave users, as a mail server's traffic would be.
    lines.sort(key=lambda line: secrets.randbits(32))
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")


def b8_blind_setup(count, messages, out_path):
    """As b8_setup, with each user's device in `blind` mode (a certificate of its own
    RSA key): keeps only the rich subscriptions' notifications (encrypted content and
    validation tokens, as Graph sends them), one line per new message."""
    spec = importlib.util.spec_from_file_location("graph_decrypt", os.path.join(os.path.dirname(__file__), "..", "Tests", "tools", "graph_decrypt.py"))
    graph_decrypt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(graph_decrypt)
    conn = connection()
    tenant = "6d1f8f38-0c55-4d7e-9d1e-5c0a3a7e0001"
    lines = []
    for i in range(count):
        email = f"b8b-{i}-{secrets.token_hex(4)}@contoso.test"
        graph_simulator("/users", {"tenant": tenant, "mail": email, "displayName": "Bench"})
        access = graph_simulator("/user-token", {"mail": email})["access_token"]
        status, answer = post(conn, "/getpublickey", {"email": email})
        assert status == 200, (status, answer)
        userid, pem = answer["userid"], answer["pubKey"]
        _, _, der = graph_decrypt.new_device_certificate(bits=2048, days=30)
        creds = seal(pem, json.dumps({"apnsToken": secrets.token_hex(32), "graphAccessToken": access}))
        status, answer = post(conn, "/registerdevicev2", {"userid": userid, "email": email, "creds": creds, "bundleid": "com.example.mail",
                                                          "defaultSound": "default", "privacy": "blind",
                                                          "privacyCertificate": base64.b64encode(der).decode()})
        assert answer.get("privacy") == "blind", answer
        mail = graph_simulator("/newmail", {"mail": email, "subject": f"Benchmark message {i}", "fromName": "Bench",
                                            "fromAddress": "bench@elsewhere.test", "count": messages, "deliver": False})
        for notification in mail["notifications"]:
            body = notification["body"] if isinstance(notification["body"], str) else json.dumps(notification["body"])
            if "encryptedContent" not in body:
                continue  # the mailbox's ordinary subscription: nothing to do for blind devices
            path = "/" + notification["url"].split("/", 3)[3]
            lines.append(f"{path}\t{body}")
    lines.sort(key=lambda line: secrets.randbits(32))
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")


def b3_latency(count, expected=200):
    conn = connection()
    post(conn, "/getpublickey", {"email": f"warmup-{secrets.token_hex(4)}@example.test"})
    samples = []
    for i in range(count):
        email = f"bench-b3-{i}-{secrets.token_hex(4)}@example.test"
        start = time.perf_counter()
        status, answer = post(conn, "/getpublickey", {"email": email})
        samples.append((time.perf_counter() - start) * 1000)
        assert status == expected, (status, answer)
        assert expected != 200 or answer.get("pubKey"), answer
    samples.sort()
    p50 = statistics.median(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    print(f"{count} {p50:.2f} {p99:.2f}")


if __name__ == "__main__":
    if sys.argv[1] == "b2-setup":
        b2_setup(int(sys.argv[2]), sys.argv[3])
    elif sys.argv[1] == "b6-setup":
        b6_setup(int(sys.argv[2]), sys.argv[3], *sys.argv[4:5])
    elif sys.argv[1] == "b6-carrying":
        b6_carrying(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "b8-setup":
        b8_setup(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif sys.argv[1] == "b8-blind-setup":
        b8_blind_setup(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif sys.argv[1] == "b3-latency":
        b3_latency(int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 200)
    else:
        sys.exit(__doc__)
