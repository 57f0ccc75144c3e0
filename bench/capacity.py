#!/usr/bin/env python3
"""Capacity: a load model of N users run against the whole stack; users per core.

  capacity.py setup OUT          register the sample of users the load is drawn from
  capacity.py run OUT            run the model for CAP_SECONDS at the rate of CAP_USERS
                                 users, measuring every process's CPU; print users per core
  capacity.py split OUT          each main class alone (CAP_SPLIT_RATE/s for
                                 CAP_SPLIT_SECONDS): every process's CPU per request

The model (every default, and where it comes from, is in docs/scaling.md, "The load
model"; each is an environment variable):

  CAP_USERS               20000  users whose load is generated (the rate, not the records)
  CAP_DEVICES_PER_USER    1.3    devices per user
  CAP_CHECKIN_HOURS       4      hours between a device's check-ins
  CAP_MAILS_PER_DAY       120    mails a user receives per day
  CAP_PEAK_FACTOR         3      the busiest hour's mail rate over the day's average
  CAP_HEARTBEAT_MINUTES   30     Exchange StatusEvent period (exchange.status_frequency_minutes)
  CAP_DEVICE_DAYS         30     a device registers (and one unregisters) every this many days
  CAP_GRAPH_SHARE         0.2    share of users on Microsoft Graph (the rest on Exchange/EWS)
  CAP_FCM_SHARE           0.3    share of devices on FCM (the rest on APNs)
  CAP_SAMPLE              200    users actually registered (the load is spread over them)
  CAP_SECONDS             60     length of the measured window

Every request is scheduled at a Poisson arrival time and sent on one of a few kept-alive
TLS connections; its latency counts from its scheduled time, so a late generator shows
as latency rather than hiding it. Process CPU is read from /proc/<pid>/stat (user +
system) before and after the window; the stack's processes are named by role in
CAP_PIDS ("role=pid,pid role=pid ...", from bench/capacity.sh).
"""
import json
import os
import queue
import random
import re
import resource
import secrets
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import devices  # noqa: E402  (the bench's device client: post, seal, simulators)

env = os.environ.get


def model():
    return {
        "users": int(env("CAP_USERS", "20000")),
        "devices_per_user": float(env("CAP_DEVICES_PER_USER", "1.3")),
        "checkin_hours": float(env("CAP_CHECKIN_HOURS", "4")),
        "mails_per_day": float(env("CAP_MAILS_PER_DAY", "120")),
        "peak_factor": float(env("CAP_PEAK_FACTOR", "3")),
        "heartbeat_minutes": float(env("CAP_HEARTBEAT_MINUTES", "30")),
        "device_days": float(env("CAP_DEVICE_DAYS", "30")),
        "graph_share": float(env("CAP_GRAPH_SHARE", "0.2")),
        "fcm_share": float(env("CAP_FCM_SHARE", "0.3")),
    }


def rates(m):
    """Requests per second of each class for m["users"] users, at the peak hour."""
    users, devs = m["users"], m["users"] * m["devices_per_user"]
    mails = users * m["mails_per_day"] * m["peak_factor"] / 86400
    return {
        "checkin": devs / (m["checkin_hours"] * 3600),
        "ews-mail": mails * (1 - m["graph_share"]),
        "graph-mail": mails * m["graph_share"],
        # A subscription hears a StatusEvent only after a quiet period; at the peak most
        # would not, but the model counts every one.
        "ews-heartbeat": users * (1 - m["graph_share"]) / (m["heartbeat_minutes"] * 60),
        "register": devs / (m["device_days"] * 86400),
        "unregister": devs / (m["device_days"] * 86400),
    }


def token_for(fcm):
    return ("fcm:bench" + secrets.token_hex(40)) if fcm else secrets.token_hex(32)


def creds_token(token):
    return {"fcmToken": token[4:]} if token.startswith("fcm:") else {"apnsToken": token}


def checkin_body(userid, pem, token):
    payload = devices.seal(pem, json.dumps({"pushToken": token, "lastMessageDate": "01/01/2020 00:00:00.000",
                                            "ignoreLastMessageDate": 1}))
    return json.dumps({"userid": userid, "subscriptionPayload": payload})


def status_event(body):
    """The same subscription's SendNotification with a StatusEvent instead of the mail."""
    return re.sub(r"<t:NewMailEvent\b.*?</t:NewMailEvent>",
                  lambda match: '<t:StatusEvent xmlns:t="http://schemas.microsoft.com/exchange/services/2006/types">'
                  + re.search(r"<t:Watermark>.*?</t:Watermark>", match.group(0), re.S).group(0) + "</t:StatusEvent>",
                  body, flags=re.S)


def setup(out):
    m = model()
    sample = int(env("CAP_SAMPLE", "200"))
    rng = random.Random(7)
    conn = devices.connection()
    devices.simulator("/domains", {"domain": "bench.test", "mode": "pox-root"})
    tenant = "6d1f8f38-0c55-4d7e-9d1e-5c0a3a7e0001"
    graph_users = max(1, round(sample * m["graph_share"]))
    # Graph redeliveries of a message already seen are claimed and not pushed: each
    # Graph notification replayed must be for a new message, so each Graph user gets
    # enough of them for the window.
    graph_per_user = int(rates(m)["graph-mail"] * int(env("CAP_SECONDS", "60")) * 1.5 / graph_users) + 5
    data = {"checkin": [], "ews-mail": [], "ews-heartbeat": [], "graph-mail": [], "churn": []}
    for i in range(sample):
        graph = i < graph_users
        ndev = 2 if rng.random() < m["devices_per_user"] - 1 else 1
        email = f"cap-{i}-{secrets.token_hex(4)}@" + ("contoso.test" if graph else "bench.test")
        if graph:
            devices.graph_simulator("/users", {"tenant": tenant, "mail": email, "displayName": "Bench"})
            access = devices.graph_simulator("/user-token", {"mail": email})["access_token"]
            secret = {"graphAccessToken": access}
            extra = {}
        else:
            password = secrets.token_hex(12)
            devices.simulator("/mailboxes", {"email": email, "userName": email, "password": password, "unread": 1})
            secret = {"userName": email, "password": password}
            extra = {"exchVersion": 3}
        status, answer = devices.post(conn, "/getpublickey", {"email": email})
        assert status == 200, (status, answer)
        userid, pem = answer["userid"], answer["pubKey"]
        for _ in range(ndev):
            token = token_for(rng.random() < m["fcm_share"])
            creds = devices.seal(pem, json.dumps({**creds_token(token), **secret}))
            status, answer = devices.post(conn, "/registerdevicev2", {
                "userid": userid, "email": email, "creds": creds, "bundleid": "com.example.mail",
                "defaultSound": "default", **extra})
            assert answer.get("responseCode") in ("UserSubscribed", "UserUpdated"), (i, graph, email, answer)
            data["checkin"].append(checkin_body(userid, pem, token))
        if graph:
            mail = devices.graph_simulator("/newmail", {"mail": email, "subject": f"Capacity {i}", "fromName": "Bench",
                                                        "fromAddress": "bench@elsewhere.test",
                                                        "count": graph_per_user, "deliver": False})
            for note in mail["notifications"]:
                body = note["body"] if isinstance(note["body"], str) else json.dumps(note["body"])
                data["graph-mail"].append(["/" + note["url"].split("/", 3)[3], body])
        else:
            mail = devices.simulator("/newmail", {"email": email, "subject": f"Capacity {i}", "fromName": "Bench",
                                                  "fromAddress": "bench@elsewhere.test", "deliver": False})
            note = mail["notifications"][-1]
            path = "/" + note["url"].split("/", 3)[3]
            data["ews-mail"].append([path, note["body"]])
            data["ews-heartbeat"].append([path, status_event(note["body"])])
    # Devices to unregister from the start (users who signed up earlier and now leave):
    # each is a whole user, so an unregistration deletes a record.
    for i in range(int(env("CAP_CHURN", "40"))):
        data["churn"].append(new_user(conn, f"cap-churn-{i}", rng.random() < m["fcm_share"]))
    random.Random(3).shuffle(data["graph-mail"])
    with open(out, "w") as f:
        json.dump(data, f)
    print(f"capacity setup: {sample} users ({graph_users} Graph), {len(data['checkin'])} devices, "
          f"{len(data['graph-mail'])} Graph notifications, {len(data['churn'])} users to unregister")


def new_user(conn, name, fcm):
    """A new Exchange user with one device: /getpublickey and /registerdevicev2."""
    email = f"{name}-{secrets.token_hex(4)}@bench.test"
    password = secrets.token_hex(12)
    devices.simulator("/mailboxes", {"email": email, "userName": email, "password": password})
    status, answer = devices.post(conn, "/getpublickey", {"email": email})
    assert status == 200, (status, answer)
    userid, pem = answer["userid"], answer["pubKey"]
    token = token_for(fcm)
    creds = devices.seal(pem, json.dumps({**creds_token(token), "userName": email, "password": password}))
    status, answer = devices.post(conn, "/registerdevicev2", {
        "userid": userid, "email": email, "creds": creds, "bundleid": "com.example.mail", "exchVersion": 3})
    assert answer.get("responseCode") == "UserSubscribed", answer
    return [userid, pem, token]


def cpu_seconds(pids):
    hz = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / hz


def role_pids():
    roles = {}
    for item in env("CAP_PIDS", "").split():
        role, _, pids = item.partition("=")
        roles[role] = [int(p) for p in pids.split(",") if p]
    return roles


def percentile(samples, q):
    if not samples:
        return float("nan")
    samples = sorted(samples)
    return samples[min(len(samples) - 1, int(len(samples) * q))]


def at_rest(seconds):
    """Each process's CPU with no load (cores): what a host pays whatever its users."""
    roles = role_pids()
    before = {role: cpu_seconds(pids) for role, pids in roles.items()}
    time.sleep(seconds)
    return {role: (cpu_seconds(pids) - before[role]) / seconds for role, pids in roles.items()}


def run(path):
    m = model()
    data = json.load(open(path))
    r = rates(m)
    idle = at_rest(float(env("CAP_IDLE_SECONDS", "20")))
    results, unexpected, cpu, wall = measure(m, data, r, float(env("CAP_SECONDS", "60")), refill=True)
    report(m, r, results, unexpected, cpu, wall, idle)


def split(path):
    """Each main class alone at CAP_SPLIT_RATE/s: the CPU every process spends on one."""
    m = model()
    data = json.load(open(path))
    seconds = float(env("CAP_SPLIT_SECONDS", "10"))
    for kind in ("ews-mail", "graph-mail", "ews-heartbeat", "checkin"):
        r = {k: (float(env("CAP_SPLIT_RATE", "60")) if k == kind else 0.0) for k in rates(m)}
        results, unexpected, cpu, wall = measure(m, data, r, seconds, refill=False)
        n = max(1, len(results[kind]))
        stack = sum(cpu.get(role, 0) for role in STACK)
        parts = ", ".join(f"{role} {cpu[role] * 1000 / n:.3f}" for role in STACK if role in cpu)
        others = ", ".join(f"{role} {cpu[role] * 1000 / n:.3f}" for role in cpu if role not in STACK)
        print(f"Capacity split {kind}: {n} requests, p99 {percentile(results[kind], 0.99):.1f} ms, {unexpected[kind]} unexpected;"
              f" ms of CPU per request: {parts}; stack {stack * 1000 / n:.3f} (excluded: {others})")


def measure(m, data, r, seconds, refill):
    rng = random.Random()
    # The schedule: Poisson arrivals per class over the window.
    schedule = []
    for kind, rate in r.items():
        t = rng.expovariate(rate) if rate > 0 else seconds
        while t < seconds:
            schedule.append((t, kind))
            t += rng.expovariate(rate)
    schedule.sort()
    work = queue.Queue()
    results = {kind: [] for kind in r}
    unexpected = {kind: 0 for kind in r}
    lock = threading.Lock()
    churn = list(data["churn"])
    cursor = {kind: rng.randrange(1 << 30) for kind in r}

    def request(conn, kind):
        headers = {"Content-Type": "application/json", "ApiToken": devices.TOKEN}
        with lock:
            cursor[kind] += 1
            n = cursor[kind]
        if kind == "checkin":
            body = data["checkin"][n % len(data["checkin"])]
            conn.request("POST", "/getsubscriptionstatusv2", body=body, headers=headers)
            ok = b'"responseCode":"UserSubscribed"'
        elif kind in ("ews-mail", "ews-heartbeat"):
            p, body = data[kind][n % len(data[kind])]
            conn.request("POST", p, body=body, headers={"Content-Type": "text/xml; charset=utf-8"})
            ok = b">OK<"
        elif kind == "graph-mail":
            p, body = data["graph-mail"][n % len(data["graph-mail"])]
            conn.request("POST", p, body=body, headers={"Content-Type": "application/json"})
            ok = None
        elif kind == "register":
            # A new user's device: its key, its registration (Autodiscover and Subscribe
            # at the simulator); it joins the users who may leave.
            user = new_user(conn, f"cap-new-{n}", rng.random() < m["fcm_share"])
            with lock:
                churn.append(user)
            return True
        elif kind == "unregister":
            with lock:
                if not churn:
                    return False
                userid, pem, token = churn.pop(0)
            conn.request("POST", "/unregister", body=json.dumps({"userid": userid, "token": devices.seal(pem, token)}),
                         headers=headers)
            ok = b"DeviceUnregistered"
        response = conn.getresponse()
        answer = response.read()
        if kind == "graph-mail":
            return response.status == 202
        return response.status == 200 and ok in answer

    start = [0.0]

    def worker():
        conn = devices.connection()
        while True:
            item = work.get()
            if item is None:
                return
            due, kind = item
            try:
                good = request(conn, kind)
            except Exception as error:  # a dropped connection: count it, open a new one
                print(f"capacity: {kind}: {error!r}", file=sys.stderr)
                good = False
                conn = devices.connection()
            done = time.monotonic()
            with lock:
                results[kind].append((done - (start[0] + due)) * 1000)
                if not good:
                    unexpected[kind] += 1

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(int(env("CAP_CONNECTIONS", "24")))]
    for thread in threads:
        thread.start()
    roles = role_pids()
    pool = key_pool(int(env("CAP_KEY_TARGET", "50"))) if env("ENS_BIN") and refill else None
    before = {role: cpu_seconds(pids) for role, pids in roles.items()}
    self_before = resource.getrusage(resource.RUSAGE_SELF)
    start[0] = time.monotonic()
    for due, kind in schedule:
        delay = start[0] + due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        work.put((due, kind))
    for _ in threads:
        work.put(None)
    for thread in threads:
        thread.join()
    wall = time.monotonic() - start[0]
    after = {role: cpu_seconds(pids) for role, pids in roles.items()}
    self_after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = {role: after[role] - before[role] for role in roles}
    cpu["load generator"] = (self_after.ru_utime - self_before.ru_utime) + (self_after.ru_stime - self_before.ru_stime)
    # The new users' RSA keys come from the pool ens-cron fills (one RSA-2048 key
    # generation each): refill what the window took and count that CPU too.
    if pool is not None:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        key_pool(pool)
        done = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu["ens-cron keys"] = (done.ru_utime - children.ru_utime) + (done.ru_stime - children.ru_stime)
    return results, unexpected, cpu, wall


def key_pool(target):
    """Fills the key pool to `target` (ens-cron keys) and returns its size."""
    import subprocess
    out = subprocess.run([os.path.join(env("ENS_BIN"), "ens-cron"), "keys", "--target", str(target),
                          "--config", os.path.join(devices.VAR, "ens.conf")], check=True, capture_output=True, text=True)
    return int(re.search(r"keys\.pool=(\d+)", out.stdout + out.stderr).group(1))


STACK = ("ens-fcgi", "nginx", "mariadb", "ens-sender", "ens-cron keys")


def report(m, r, results, unexpected, cpu, wall, idle):
    users = m["users"]
    print(f"Capacity model: {users} users, {m['devices_per_user']} devices each, a check-in every "
          f"{m['checkin_hours']:g} h, {m['mails_per_day']:g} mails/day x peak {m['peak_factor']:g}, Exchange "
          f"heartbeat every {m['heartbeat_minutes']:g} min, a device (un)registers every {m['device_days']:g} days, "
          f"Graph {m['graph_share']:.0%} of users, FCM {m['fcm_share']:.0%} of devices; {wall:.0f} s window")
    for kind, rate in r.items():
        lat = results[kind]
        print(f"  {kind:14s} model {rate:8.2f}/s  sent {len(lat) / wall:8.2f}/s ({len(lat)}, {unexpected[kind]} unexpected)"
              f"  p50 {percentile(lat, 0.5):6.1f} ms  p99 {percentile(lat, 0.99):6.1f} ms")
    stack = sum(cpu.get(role, 0) for role in STACK)
    total = sum(cpu.values())
    requests = sum(len(v) for v in results.values())
    print(f"CPU over the window (cores busy = CPU seconds / {wall:.0f} s; per request = CPU / {requests} requests):")
    for role, seconds in sorted(cpu.items(), key=lambda item: -item[1]):
        tag = "stack" if role in STACK else "excluded"
        share = f"{seconds / stack:5.1%} of the stack" if role in STACK and stack else ""
        print(f"  {role:16s} {seconds / wall:6.3f} cores  {seconds * 1000 / max(requests, 1):6.3f} ms/request  "
              f"{seconds * 1e6 / wall / users:7.2f} µs/s per user  {tag:8s} {share}")
    per_core = users / (stack / wall) if stack else float("nan")
    p99 = max(percentile(v, 0.99) for v in results.values() if v)
    rsa = float(env("CAP_RSA_PER_SECOND", "0") or 0)
    if rsa:
        print(f"Reference, same run: one core of this host did {rsa:,.0f} RSA-2048 private-key operations/s "
              f"({1000 / rsa:.3f} ms each; openssl speed); {per_core / rsa * 1000:,.0f} users per core per 1,000 RSA "
              f"operations/s of core speed (scaling every process's CPU as RSA's)")
    print(f"Capacity result: {per_core:,.0f} users per core of the stack (ens-fcgi + nginx + MariaDB + ens-sender + ens-cron's key generation: "
          f"{stack / wall:.3f} cores for {users} users; the simulators and the load generator, "
          f"{(total - stack) / wall:.3f} cores, excluded); worst class p99 {p99:.1f} ms "
          f"(targets >= 300,000 users/core, p99 < 50 ms)")
    # The same with the stack's cost at rest counted once per host, not per user: how many
    # users bring one core from rest to busy. At rest meant before the window, with nothing sent.
    resting = sum(idle.get(role, 0) for role in STACK)
    per_user = (stack / wall - resting) / users
    print(f"At rest (before the window, nothing sent): the stack {resting:.3f} cores ("
          + ", ".join(f"{role} {idle[role]:.3f}" for role in STACK if role in idle) + "); "
          f"counted once per host, not per user: {(1 - resting) / per_user:,.0f} users bring one core from rest to busy")


if __name__ == "__main__":
    if sys.argv[1] == "setup":
        setup(sys.argv[2])
    elif sys.argv[1] == "run":
        run(sys.argv[2])
    elif sys.argv[1] == "split":
        split(sys.argv[2])
    else:
        sys.exit(__doc__)
