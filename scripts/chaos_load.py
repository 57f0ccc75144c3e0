#!/usr/bin/env python3
"""Load and bookkeeping for scripts/chaos.sh (loopback only; every command is bounded).

  chaos_load.py load --seconds S [--bodies FILE] [--threads T] [--rate R]
                     [--recovered-file F] [--tail S] [--cap S]
      Steady requests (R a second in all, default 500) through nginx for at least S seconds: POST /getsubscriptionstatusv2
      with one sealed body per line of FILE (bench/devices.py b2-setup), round robin, or
      GET /alive without --bodies. With --recovered-file the run also lasts until --tail
      seconds after F appears (never past --cap). Prints one JSON object: sent, failed,
      by (answer -> count; "conn" = connection error or timeout), first/last failure
      offsets (s), and failures/successes in the last 5 s.
  chaos_load.py burst --count N [--threads T] [--kill-at K] --acked FILE
      Submits N notifications to ens-sender's socket (the frames of bench/pushes.py), each
      retried until acknowledged (60 s at most per notification). After K acknowledgements
      it kill -9s the ens-sender whose pid is in $ENS_VAR/run/ens-sender.pid and restarts it
      with `scripts/stack.sh sender-start`. Acknowledged ids go to FILE, one a line.
  chaos_load.py delivered --ids FILE --timeout S
      Waits until every id in FILE is a collapse id the APNs simulator recorded.
  chaos_load.py mail-setup K OUT
      Registers K users with the Exchange simulator (Basic, POX Autodiscover) and ENS
      (/getpublickey, /registerdevicev2), writing [{email, userid, pem, token}] to OUT.
  chaos_load.py mail-send USERS OUT TAG [--no-wait]
      One new mail per user through the simulator (subject "chaos TAG <n> <nonce>");
      appends [{email, token, subject}] to OUT (a JSON list) and prints the first
      attempts' outcomes.
  chaos_load.py mail-check USERS MAILS --timeout S
      Waits until every mail reached the APNs simulator (same device token, same
      subject); then per user a heartbeat (must be answered OK), the simulator's
      /subscriptions (alive) and ENS's /getsubscriptionstatusv2 (UserSubscribed).

Environment: ENS_VAR, ENS_PORT, ENS_TOKEN (for the device API).
"""
import argparse
import collections
import functools
import http.client
import importlib.util
import json
import os
import secrets
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VAR = os.environ["ENS_VAR"]
PORT = int(os.environ.get("ENS_PORT", "28443"))
RECORD = f"{VAR}/sim/apns-accepted.jsonl"


# --- HTTP load -----------------------------------------------------------------------

def tls_context():
    return ssl.create_default_context(cafile=f"{VAR}/tls/server.crt")


def load(args):
    bodies = []
    if args.bodies:
        with open(args.bodies) as f:
            bodies = [line.strip() for line in f if line.strip()]
    token = os.environ.get("ENS_TOKEN", "")
    context = tls_context()
    lock = threading.Lock()
    events = []  # (offset seconds, ok, answer)
    start = time.monotonic()
    state = {"end": start + args.seconds}

    def deadline():
        end = start + args.seconds
        if args.recovered_file:
            if os.path.exists(args.recovered_file):
                if "seen" not in state:
                    state["seen"] = time.monotonic()
                end = max(end, state["seen"] + args.tail)
            else:
                end = start + args.cap
        return min(end, start + args.cap)

    interval = args.threads / args.rate if args.rate > 0 else 0

    def worker(index):
        conn = None
        i = index
        due = time.monotonic() + index * interval / args.threads
        while time.monotonic() < deadline():
            if interval:  # a steady rate, not as fast as possible: the host is shared
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                due = max(due + interval, time.monotonic() - 1)
            t0 = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPSConnection("localhost", PORT, context=context, timeout=10)
                if bodies:
                    body = bodies[i % len(bodies)]
                    i += 1
                    conn.request("POST", "/getsubscriptionstatusv2", body=body,
                                 headers={"Content-Type": "application/json", "ApiToken": token})
                else:
                    conn.request("GET", "/alive")
                response = conn.getresponse()
                data = response.read()
                if response.status == 200:
                    code = json.loads(data).get("responseCode", "?")
                    good = code == ("UserSubscribed" if bodies else "Alive")
                    answer = "200" if good else f"200/{code}"
                else:
                    good, answer = False, str(response.status)
                if response.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException, ValueError):
                good, answer = False, "conn"
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.05)
            with lock:
                events.append((t0 - start, good, answer))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    duration = time.monotonic() - start
    failures = [e for e in events if not e[1]]
    by = collections.Counter(e[2] for e in failures)
    tail = [e for e in events if e[0] >= duration - 5]
    print(json.dumps({
        "sent": len(events), "failed": len(failures), "by": dict(by.most_common()),
        "seconds": round(duration, 1),
        "first_failure": round(failures[0][0], 1) if failures else None,
        "last_failure": round(max(e[0] for e in failures), 1) if failures else None,
        "tail_failed": sum(1 for e in tail if not e[1]), "tail_ok": sum(1 for e in tail if e[1]),
    }))


# --- ens-sender burst --------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def bench_module(name):
    """A helper module from bench/ (devices.py: users and sealing; pushes.py: the
    sender's socket frames), loaded once."""
    spec = importlib.util.spec_from_file_location(name, f"{ROOT}/bench/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def frame(kind, payload):
    return bench_module("pushes").frame(kind, payload)


def read_frame(sock):
    return bench_module("pushes").read_frame(sock)


def burst(args):
    path = f"{VAR}/run/apns.sock"
    expiration = int(time.time()) + 3600
    lock = threading.Lock()
    acked = []
    refused = collections.Counter()
    stats = {"gave_up": 0, "conn_errors": 0, "killed": None, "restart": None}

    def kill_and_restart():
        with open(f"{VAR}/run/ens-sender.pid") as f:
            pid = int(f.read().strip())
        os.kill(pid, signal.SIGKILL)
        stats["killed"] = pid
        for _ in range(100):  # restart only once it is really gone
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        t0 = time.monotonic()
        result = subprocess.run([f"{ROOT}/scripts/stack.sh", "sender-start"], capture_output=True, text=True)
        stats["restart"] = "ok" if result.returncode == 0 else f"failed: {result.stderr.strip()}"
        stats["restart_seconds"] = round(time.monotonic() - t0, 2)

    def worker(index):
        sock = None
        for n in range(index, args.count, args.threads):
            notification = {
                "id": secrets.token_hex(16), "token": secrets.token_hex(32), "topic": "com.example.mail",
                "environment": "sandbox", "pushType": "alert", "expiration": expiration,
                "payload": {"aps": {"alert": {"title": "Chaos", "body": f"burst {n}"}, "sound": "default"},
                            "ens": {"userid": "chaos"}}}
            data = frame(1, json.dumps(notification).encode())
            give_up = time.monotonic() + 60
            while True:
                try:
                    if sock is None:
                        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        sock.settimeout(10)
                        sock.connect(path)
                    sock.sendall(data)
                    kind, body = read_frame(sock)
                    if kind == 2:
                        break
                    with lock:
                        refused[body.decode(errors="replace")[:60]] += 1
                    sock.close()
                    sock = None
                except OSError:
                    with lock:
                        stats["conn_errors"] += 1
                    if sock is not None:
                        sock.close()
                    sock = None
                if time.monotonic() > give_up:
                    with lock:
                        stats["gave_up"] += 1
                    notification = None
                    break
                time.sleep(0.05)
            if notification is None:
                continue
            kill_now = False
            with lock:
                acked.append(notification["id"])
                if len(acked) == args.kill_at and stats["killed"] is None:
                    stats["killed"] = 0
                    kill_now = True
            if kill_now:
                kill_and_restart()
        if sock is not None:
            sock.close()

    start = time.monotonic()
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(args.acked, "w") as f:
        f.write("\n".join(acked) + "\n")
    print(json.dumps({"submitted": args.count, "acked": len(acked), "refused": dict(refused),
                      "seconds": round(time.monotonic() - start, 1), **stats}))


class Record:
    """Reads the APNs simulator's record file incrementally."""

    def __init__(self):
        self.offset = 0
        self.partial = b""

    def new_lines(self):
        try:
            with open(RECORD, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out


def delivered(args):
    with open(args.ids) as f:
        ids = {line.strip() for line in f if line.strip()}
    seen = collections.Counter()
    record = Record()
    start = time.monotonic()
    while True:
        for entry in record.new_lines():
            if entry.get("collapse_id") in ids:
                seen[entry["collapse_id"]] += 1
        if len(seen) == len(ids) or time.monotonic() - start > args.timeout:
            break
        time.sleep(0.5)
    print(json.dumps({"ids": len(ids), "delivered": len(seen), "lost": len(ids) - len(seen),
                      "duplicates": sum(c - 1 for c in seen.values()),
                      "seconds": round(time.monotonic() - start, 1)}))


# --- Exchange users --------------------------------------------------------------------

def devices():
    return bench_module("devices")


def control(method, path, obj=None, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", PORT + 4, timeout=timeout)
    body = json.dumps(obj) if obj is not None else None
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    answer = json.loads(conn.getresponse().read())
    conn.close()
    return answer


def mail_setup(args):
    d = devices()
    conn = d.connection()
    control("POST", "/domains", {"domain": "bench.test", "mode": "pox-root"})
    users = []
    nonce = secrets.token_hex(4)
    for i in range(args.count):
        email = f"chaos-{i}-{nonce}@bench.test"
        password = secrets.token_hex(12)
        control("POST", "/mailboxes", {"email": email, "userName": email, "password": password, "unread": 0})
        status, answer = d.post(conn, "/getpublickey", {"email": email})
        assert status == 200, (status, answer)
        token = secrets.token_hex(32)
        creds = d.seal(answer["pubKey"], json.dumps({"apnsToken": token, "userName": email, "password": password}))
        status, reg = d.post(conn, "/registerdevicev2", {"userid": answer["userid"], "email": email, "creds": creds,
                                                         "bundleid": "com.example.mail", "exchVersion": 3,
                                                         "defaultSound": "default"})
        assert reg.get("responseCode") == "UserSubscribed", reg
        users.append({"email": email, "userid": answer["userid"], "pem": answer["pubKey"], "token": token})
    with open(args.out, "w") as f:
        json.dump(users, f)
    print(json.dumps({"registered": len(users)}))


def mail_send(args):
    with open(args.users) as f:
        users = json.load(f)
    mails = []
    if os.path.exists(args.out):
        with open(args.out) as f:
            mails = json.load(f)
    outcomes = collections.Counter()
    for n, user in enumerate(users):
        subject = f"chaos {args.tag} {n} {secrets.token_hex(4)}"
        answer = control("POST", "/newmail", {"email": user["email"], "subject": subject, "fromName": "Chaos",
                                              "fromAddress": "chaos@elsewhere.test", "wait": not args.no_wait})
        for callback in answer.get("callbacks", []):
            outcomes["OK" if callback.get("subscriptionStatus") == "OK" else
                     f"failed ({callback.get('httpStatus') or 'no answer'})"] += 1
        if args.no_wait:
            outcomes["queued"] += len(answer.get("subscriptions", []))
        mails.append({"email": user["email"], "token": user["token"], "subject": subject})
    with open(args.out, "w") as f:
        json.dump(mails, f)
    print(json.dumps({"sent": len(users), "first_attempts": dict(outcomes)}))


def mail_check(args):
    d = devices()
    with open(args.users) as f:
        users = json.load(f)
    with open(args.mails) as f:
        mails = json.load(f)
    wanted = {(m["token"], m["subject"]) for m in mails}
    got = set()
    record = Record()
    start = time.monotonic()
    while True:
        for entry in record.new_lines():
            alert = ((entry.get("payload") or {}).get("aps") or {}).get("alert") or {}
            key = (entry.get("token"), alert.get("body") if isinstance(alert, dict) else None)
            if key in wanted:
                got.add(key)
        if got == wanted or time.monotonic() - start > args.timeout:
            break
        time.sleep(1)
    waited = time.monotonic() - start
    emails = {u["email"] for u in users}
    heartbeat_ok = set()
    for user in users:
        answer = control("POST", "/heartbeat", {"email": user["email"], "wait": True})
        callbacks = answer.get("callbacks", [])
        if callbacks and all(c.get("subscriptionStatus") == "OK" for c in callbacks):
            heartbeat_ok.add(user["email"])
    subscriptions = [s for s in control("GET", "/subscriptions") if s["email"] in emails]
    alive = {s["email"] for s in subscriptions if s.get("alive")}
    frequencies = sorted({s["frequency"] for s in subscriptions})
    conn = d.connection()
    subscribed = set()
    for user in users:
        payload = d.seal(user["pem"], json.dumps({"pushToken": user["token"], "lastMessageDate": "01/01/2020 00:00:00.000",
                                                  "ignoreLastMessageDate": 1}))
        status, answer = d.post(conn, "/getsubscriptionstatusv2", {"userid": user["userid"], "subscriptionPayload": payload})
        if status == 200 and answer.get("responseCode") == "UserSubscribed":
            subscribed.add(user["email"])
    healthy = heartbeat_ok & alive & subscribed
    print(json.dumps({"mails": len(wanted), "delivered": len(got), "lost": len(wanted) - len(got),
                      "seconds_to_deliver": round(waited, 1), "users": len(users),
                      "simulator_alive": len(alive), "status_frequency": frequencies, "heartbeat_ok": len(heartbeat_ok),
                      "ens_subscribed": len(subscribed), "subscriptions_lost": len(users) - len(healthy)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("load")
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--bodies")
    p.add_argument("--threads", type=int, default=6)
    p.add_argument("--rate", type=float, default=500, help="requests/s in all (0: unlimited)")
    p.add_argument("--recovered-file")
    p.add_argument("--tail", type=float, default=8)
    p.add_argument("--cap", type=float, default=90)
    p.set_defaults(run=load)
    p = sub.add_parser("burst")
    p.add_argument("--count", type=int, default=5000)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--kill-at", type=int, default=-1)
    p.add_argument("--acked", required=True)
    p.set_defaults(run=burst)
    p = sub.add_parser("delivered")
    p.add_argument("--ids", required=True)
    p.add_argument("--timeout", type=float, default=120)
    p.set_defaults(run=delivered)
    p = sub.add_parser("mail-setup")
    p.add_argument("count", type=int)
    p.add_argument("out")
    p.set_defaults(run=mail_setup)
    p = sub.add_parser("mail-send")
    p.add_argument("users")
    p.add_argument("out")
    p.add_argument("tag")
    p.add_argument("--no-wait", action="store_true")
    p.set_defaults(run=mail_send)
    p = sub.add_parser("mail-check")
    p.add_argument("users")
    p.add_argument("mails")
    p.add_argument("--timeout", type=float, default=240)
    p.set_defaults(run=mail_check)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    sys.exit(main())
