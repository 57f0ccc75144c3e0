#!/usr/bin/env python3
"""Load and bookkeeping for the cluster's failure tests and B9 (scripts/cluster-chaos.sh,
bench/b9-cluster.sh). Loopback only, through the cluster's load balancer; every command
is bounded.

  cluster_load.py setup DIR --checkins N --mail-users M
      N users with a device each for check-ins (bench/devices.py b2-setup) and M Exchange
      users registered through the simulator (for new mail), under DIR.
  cluster_load.py mix DIR --seconds S [--stop-file F] [--checkin-rate R] [--register-rate R]
                  [--mail-rate R] [--threads T] [--retry-stale]
      A steady mix through the load balancer until S seconds passed or F appears:
      check-ins (POST /getsubscriptionstatusv2, answer UserSubscribed), registrations
      (a new Exchange mailbox, /getpublickey, /registerdevicev2 with sealed Basic
      credentials: Autodiscover, Subscribe; answer UserSubscribed) and new mail (the
      Exchange simulator calls back through the load balancer; its first attempt's answer
      is the event, and the simulator retries failures as Exchange does).
      With --retry-stale (scripts/rolling-upgrade.sh), a request on a kept-alive
      connection that the load balancer closed before answering (what a reload of it does
      to idle connections) is sent once more on a new one, as HTTP clients do; its event
      says "stale_retry". Every request
      is one line of DIR/events.jsonl: {"t": start (epoch s), "d": seconds, "kind",
      "ok", "answer"}. Registrations go to DIR/registrations.jsonl, mails to
      DIR/mails.jsonl.
  cluster_load.py register-rate --seconds S --threads T --users U --per-user K
      Device registrations (/registerdevicev2 with sealed Basic credentials and force=1:
      Autodiscover, Subscribe, commit), K for each of U users made first (or read from
      --users-file), by T client threads, for S seconds at most; prints registrations/s
      (over the time they took), failures and the median latency.
      Afterwards a status event to each mailbox frees its superseded subscriptions
      (Exchange allows 20 live ones per mailbox).
  cluster_load.py window DIR FROM TO
      Summary of the events that started in [FROM, TO] (epoch s) as JSON: per kind sent
      and failed, failures by answer, first and last failure, and recovery (first
      failure to the first success after the last failure).
  cluster_load.py verify DIR --nodes N... --timeout S
      After the load: every acknowledged new mail (first callback answered OK) reached
      the APNs simulator, and so did the rest (retried by the simulator); repeated
      deliveries of one mail carry one collapse id; every acknowledged registration is
      whole on every node (registered, subscription, a device) and no record of the run
      is half-applied anywhere; the cluster converged (all nodes Synced in a cluster of 3,
      the same row counts). Prints JSON; exit status 1 when a check fails.

Environment: ENS_VAR (the cluster's directory), ENS_PORT (the load balancer's port),
ENS_TOKEN (an API token), CLUSTER_SH (scripts/cluster.sh with the cluster's settings).
"""
import argparse
import collections
import http.client
import importlib.util
import json
import os
import random
import secrets
import ssl
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VAR = os.environ["ENS_VAR"]
PORT = int(os.environ["ENS_PORT"])
CLUSTER_SH = os.environ.get("CLUSTER_SH", f"{ROOT}/scripts/cluster.sh")


def module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


chaos = module("chaos_load", f"{ROOT}/scripts/chaos_load.py")
devices = chaos.bench_module("devices")


class Events:
    def __init__(self, path):
        self.lock = threading.Lock()
        self.file = open(path, "a", buffering=1)

    def add(self, t0, kind, ok, answer, **extra):
        line = json.dumps({"t": round(t0, 3), "d": round(time.time() - t0, 3), "kind": kind, "ok": ok,
                           "answer": answer, **extra})
        with self.lock:
            self.file.write(line + "\n")


def append_json(path, lock, obj):
    with lock:
        with open(path, "a") as f:
            f.write(json.dumps(obj) + "\n")


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def connection():
    return http.client.HTTPSConnection("localhost", PORT, context=chaos.tls_context(), timeout=30)


def post_json(conn, path, params):
    token = os.environ.get("ENS_TOKEN", "")
    conn.request("POST", path, body=json.dumps(params), headers={"Content-Type": "application/json", "ApiToken": token})
    response = conn.getresponse()
    data = response.read()
    try:
        answer = json.loads(data) if data else {}
    except ValueError:
        answer = {}
    return response.status, answer


def control(method, path, obj=None, timeout=60):
    return chaos.control(method, path, obj, timeout=timeout)


# --- setup ----------------------------------------------------------------------------------

def setup(args):
    os.makedirs(args.dir, exist_ok=True)
    if args.checkins:
        devices.b2_setup(args.checkins, f"{args.dir}/checkins.txt")
    if args.mail_users:
        ns = argparse.Namespace(count=args.mail_users, out=f"{args.dir}/mail-users.json")
        chaos.mail_setup(ns)


# --- the mix --------------------------------------------------------------------------------

def mix(args):
    os.makedirs(args.dir, exist_ok=True)
    events = Events(f"{args.dir}/events.jsonl")
    files_lock = threading.Lock()
    bodies = []
    if os.path.exists(f"{args.dir}/checkins.txt"):
        with open(f"{args.dir}/checkins.txt") as f:
            bodies = [line.strip() for line in f if line.strip()]
    mail_users = []
    if os.path.exists(f"{args.dir}/mail-users.json"):
        with open(f"{args.dir}/mail-users.json") as f:
            mail_users = json.load(f)
    start = time.time()
    end = start + args.seconds

    def running():
        return time.time() < end and not (args.stop_file and os.path.exists(args.stop_file))

    def post(state, path, params):
        """post_json on the thread's connection (made if there is none): (status, answer,
        retried). With --retry-stale, a connection used before that fails before any
        answer (closed by the load balancer while idle: a reload) is replaced and the
        request sent once more, as HTTP clients do with a stale kept-alive connection."""
        reused = state["conn"] is not None
        if not reused:
            state["conn"] = connection()
        try:
            return post_json(state["conn"], path, params) + (False,)
        except (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError, http.client.RemoteDisconnected):
            if not (args.retry_stale and reused):
                raise
            state["conn"].close()
            state["conn"] = connection()
            return post_json(state["conn"], path, params) + (True,)

    def paced(rate, phase, body):
        """Calls body() `rate` times a second (at most), until the run ends."""
        if rate <= 0:
            return
        interval = 1.0 / rate
        due = time.time() + phase * interval
        while running():
            pause = due - time.time()
            if pause > 0:
                time.sleep(min(pause, 0.5))
                continue
            due = max(due + interval, time.time() - 1)
            body()

    def checkins(index, threads):
        state = {"conn": None, "i": index}

        def one():
            t0 = time.time()
            body = bodies[state["i"] % len(bodies)]
            state["i"] += threads
            try:
                status, answer, retried = post(state, "/getsubscriptionstatusv2", json.loads(body))
                code = answer.get("responseCode", "?")
                ok = status == 200 and code == "UserSubscribed"
                events.add(t0, "checkin", ok, "200" if ok else f"{status}/{code}", **({"stale_retry": True} if retried else {}))
            except (OSError, http.client.HTTPException) as error:
                events.add(t0, "checkin", False, "conn", error=type(error).__name__)
                if state["conn"] is not None:
                    state["conn"].close()
                state["conn"] = None
        if bodies:
            paced(args.checkin_rate / threads, index / threads, one)

    def registrations(index, threads):
        state = {"conn": None}
        control("POST", "/domains", {"domain": "bench.test", "mode": "pox-root"})

        def one():
            email = f"reg-{secrets.token_hex(6)}@bench.test"
            password = secrets.token_hex(12)
            token = secrets.token_hex(32)
            t0 = time.time()
            record = {"email": email, "token": token, "t": t0, "ok": False}
            retries = 0
            try:
                control("POST", "/mailboxes", {"email": email, "userName": email, "password": password, "unread": 0})
                status, answer, retried = post(state, "/getpublickey", {"email": email})
                retries += retried
                if status != 200 or "pubKey" not in answer:
                    record["answer"] = f"getpublickey {status}/{answer.get('responseCode', '?')}"
                else:
                    record["userid"] = answer["userid"]
                    creds = devices.seal(answer["pubKey"], json.dumps({"apnsToken": token, "userName": email, "password": password}))
                    status, reg, retried = post(state, "/registerdevicev2", {
                        "userid": answer["userid"], "email": email, "creds": creds, "bundleid": "com.example.mail",
                        "exchVersion": 3, "defaultSound": "default"})
                    retries += retried
                    code = reg.get("responseCode", "?")
                    record["ok"] = status == 200 and code == "UserSubscribed"
                    record["answer"] = "200" if record["ok"] else f"registerdevicev2 {status}/{code}"
            except (OSError, http.client.HTTPException) as error:
                record["answer"] = f"conn ({type(error).__name__})"
                if state["conn"] is not None:
                    state["conn"].close()
                state["conn"] = None
            events.add(t0, "register", record["ok"], record["answer"], **({"stale_retry": True} if retries else {}))
            append_json(f"{args.dir}/registrations.jsonl", files_lock, record)
        paced(args.register_rate / threads, index / threads, one)

    def mails(index, threads):
        counter = {"n": index}

        def one():
            user = mail_users[counter["n"] % len(mail_users)]
            counter["n"] += threads
            subject = f"cluster {counter['n']} {secrets.token_hex(4)}"
            t0 = time.time()
            answer = "?"
            ok = False
            try:
                result = control("POST", "/newmail", {"email": user["email"], "subject": subject, "fromName": "Cluster",
                                                      "fromAddress": "cluster@elsewhere.test", "wait": True}, timeout=60)
                callbacks = result.get("callbacks", [])
                ok = bool(callbacks) and all(c.get("subscriptionStatus") == "OK" for c in callbacks)
                answer = "OK" if ok else ",".join(str(c.get("httpStatus") or c.get("error") or "none")[:40] for c in callbacks) or "no subscription"
            except (OSError, http.client.HTTPException, ValueError) as error:
                answer = f"control {type(error).__name__}"
            events.add(t0, "callback", ok, answer)
            append_json(f"{args.dir}/mails.jsonl", files_lock, {"email": user["email"], "token": user["token"],
                                                                "subject": subject, "t": t0, "acked": ok})
        if mail_users:
            paced(args.mail_rate / threads, index / threads, one)

    threads = []
    for i in range(args.threads):
        threads.append(threading.Thread(target=checkins, args=(i, args.threads)))
    for i in range(args.register_threads if args.register_rate > 0 else 0):
        threads.append(threading.Thread(target=registrations, args=(i, args.register_threads)))
    for i in range(args.mail_threads):
        threads.append(threading.Thread(target=mails, args=(i, args.mail_threads)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"seconds": round(time.time() - start, 1)}))


# --- registrations per second (B9) -------------------------------------------------------

def register_rate(args):
    """Registrations of devices by T client threads for S seconds: registrations/s. Each is
    a /registerdevicev2 with sealed Basic credentials and force=1 for one of U users made
    beforehand (/getpublickey; a key from the pool each), so that the pool does not bound
    the rate: ENS opens the credentials, autodiscovers (cached per domain), subscribes
    anew at the simulator and commits the registration (answer UserSubscribed). No two
    threads register one user at a time."""
    control("POST", "/domains", {"domain": "bench.test", "mode": "pox-root"})
    users = []
    if args.users_file and os.path.exists(args.users_file):
        with open(args.users_file) as f:
            users = json.load(f)
    conn = connection()
    for _ in range(args.users - len(users)):
        email = f"b9-{secrets.token_hex(6)}@bench.test"
        password = secrets.token_hex(12)
        control("POST", "/mailboxes", {"email": email, "userName": email, "password": password, "unread": 0})
        status, answer = post_json(conn, "/getpublickey", {"email": email})
        assert status == 200 and "pubKey" in answer, (status, answer)
        creds = devices.seal(answer["pubKey"], json.dumps({"apnsToken": secrets.token_hex(32), "userName": email,
                                                           "password": password}))
        users.append({"userid": answer["userid"], "email": email, "creds": creds, "bundleid": "com.example.mail",
                      "exchVersion": 3, "defaultSound": "default", "force": 1})
    conn.close()
    if args.users_file:
        with open(args.users_file, "w") as f:
            json.dump(users, f)
    lock = threading.Lock()
    counts = collections.Counter()
    latencies = []
    start = time.time()
    end = start + args.seconds

    def worker(index):
        conn = None
        mine = users[index::args.threads]
        n = 0
        while time.time() < end and n < len(mine) * args.per_user:
            params = mine[n % len(mine)]
            n += 1
            t0 = time.time()
            try:
                if conn is None:
                    conn = connection()
                status, reg = post_json(conn, "/registerdevicev2", params)
                outcome = "ok" if status == 200 and reg.get("responseCode") == "UserSubscribed" \
                    else f"{status}/{reg.get('responseCode', '?')}"
            except (OSError, http.client.HTTPException) as error:
                outcome = f"conn {type(error).__name__}"
                if conn is not None:
                    conn.close()
                conn = None
            with lock:
                counts[outcome] += 1
                if outcome == "ok":
                    latencies.append(time.time() - t0)
            if outcome != "ok":
                time.sleep(0.05)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - start
    # Exchange keeps 20 live subscriptions per mailbox (so does the simulator): a status
    # event to each mailbox's subscriptions, which ENS answers Unsubscribe for all but
    # the latest, frees them for the next run.
    for user in users:
        control("POST", "/heartbeat", {"email": user["email"], "wait": True}, timeout=120)
    latencies.sort()
    print(json.dumps({"rps": round(len(latencies) / elapsed, 2), "seconds": round(elapsed, 2), "ok": counts["ok"],
                      "failed": sum(n for k, n in counts.items() if k != "ok"),
                      "by": {k: n for k, n in counts.items() if k != "ok"},
                      "p50_ms": round(latencies[len(latencies) // 2] * 1000) if latencies else None}))


# --- windows ---------------------------------------------------------------------------------

def summarize(events):
    out = {}
    for kind in sorted({e["kind"] for e in events}):
        these = sorted((e for e in events if e["kind"] == kind), key=lambda e: e["t"])
        failures = [e for e in these if not e["ok"]]
        entry = {"sent": len(these), "failed": len(failures),
                 "by": dict(collections.Counter(e["answer"] for e in failures).most_common(5))}
        stale = sum(1 for e in these if e.get("stale_retry"))
        if stale:  # mix --retry-stale: sent again on a new connection (not failures)
            entry["stale_retries"] = stale
        if failures:
            first, last = failures[0]["t"], max(e["t"] for e in failures)
            after = [e for e in these if e["ok"] and e["t"] > last]
            first_good = [e for e in these if e["ok"] and e["t"] > first]
            entry["first_failure"] = first
            entry["failing_for"] = round(last - first, 1)
            # First failed request to the first good one (B9's failover time), and to the
            # first good one after the last failure (recovered for good).
            entry["first_good_after"] = round(first_good[0]["t"] + first_good[0]["d"] - first, 2) if first_good else None
            entry["recovered_after"] = round(after[0]["t"] + after[0]["d"] - first, 2) if after else None
        out[kind] = entry
    return out


def window(args):
    events = [e for e in read_jsonl(f"{args.dir}/events.jsonl") if args.start <= e["t"] <= args.end]
    print(json.dumps(summarize(events)))


# --- verification ------------------------------------------------------------------------------

def sql(node, statement):
    result = subprocess.run([CLUSTER_SH, "sql", str(node), statement], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"node {node}: {result.stderr.strip()[:300]}")
    return [line.split("\t") for line in result.stdout.splitlines() if line]


TABLES = ["EnsSubscriptionInfo", "Devices", "APITokens", "EWSUrlCache", "RecordQuota", "MailItemsSeen", "NotificationLog"]


def verify(args):
    problems = []
    result = {}
    # 1. Mails: every mail reaches the APNs simulator (token and subject), one collapse id each.
    mails = read_jsonl(f"{args.dir}/mails.jsonl")
    wanted = {(m["token"], m["subject"]): m for m in mails}
    got = collections.defaultdict(set)
    copies = collections.Counter()
    record = chaos.Record()
    deadline = time.monotonic() + args.timeout
    while True:
        for entry in record.new_lines():
            alert = ((entry.get("payload") or {}).get("aps") or {}).get("alert") or {}
            key = (entry.get("token"), alert.get("body") if isinstance(alert, dict) else None)
            if key in wanted:
                got[key].add(entry.get("collapse_id"))
                copies[key] += 1
        if len(got) == len(wanted) or time.monotonic() > deadline:
            break
        time.sleep(1)
    acked = [k for k, m in wanted.items() if m["acked"]]
    lost_acked = [k for k in acked if k not in got]
    lost_other = [k for k in wanted if k not in got and not wanted[k]["acked"]]
    split = [k for k, ids in got.items() if len(ids) > 1]
    result["mails"] = {"sent": len(wanted), "acked": len(acked), "delivered": len(got),
                       "lost_acked": len(lost_acked), "lost_unacked": len(lost_other),
                       "duplicate_deliveries": sum(c - 1 for c in copies.values()),
                       "duplicates_with_another_id": len(split)}
    if lost_acked:
        problems.append(f"{len(lost_acked)} acknowledged mails never reached APNs")
    if lost_other:
        problems.append(f"{len(lost_other)} mails whose first callback failed never reached APNs (the simulator retries them)")
    if split:
        problems.append(f"{len(split)} mails delivered under more than one collapse id")

    # 2. Convergence: every node Synced in a cluster of 3.
    statuses = {}
    for node in args.nodes:
        out = subprocess.run([CLUSTER_SH, "node-status", str(node)], capture_output=True, text=True).stdout.strip()
        statuses[node] = out
        if not out.startswith("ON 4 Primary 3"):
            problems.append(f"node {node} is not Synced in a cluster of 3: {out}")
    result["nodes"] = statuses

    # 3. Registrations: whole on every node, and none of the run's records half-applied.
    registrations = read_jsonl(f"{args.dir}/registrations.jsonl")
    ok_ids = sorted({r["userid"] for r in registrations if r.get("ok") and r.get("userid")})
    all_ids = sorted({r["userid"] for r in registrations if r.get("userid")})
    result["registrations"] = {"attempted": len(registrations), "acked": len(ok_ids)}
    check = ("SELECT s.userid, s.registered, s.subscription_id IS NOT NULL, s.backend_url IS NOT NULL, "
             "(SELECT COUNT(*) FROM Devices d WHERE d.subscription_row = s.id) "
             "FROM EnsSubscriptionInfo s WHERE s.userid IN ({})")
    half = set()
    for node in args.nodes:
        rows = {}
        for i in range(0, len(all_ids), 200):
            chunk = all_ids[i:i + 200]
            if chunk:
                for row in sql(node, "SET SESSION wsrep_sync_wait=1; " + check.format(",".join(f"'{u}'" for u in chunk))):
                    rows[row[0]] = row[1:]
        missing = [u for u in ok_ids if u not in rows or rows[u][0] != "1" or rows[u][1] != "1" or int(rows[u][3]) < 1]
        if missing:
            problems.append(f"node {node}: {len(missing)} acknowledged registrations are not whole (e.g. {missing[0][:12]})")
        for userid, (registered, has_sub, has_url, devices_count) in rows.items():
            whole = registered == "1" and has_sub == "1" and has_url == "1" and int(devices_count) >= 1
            none = registered == "0" and int(devices_count) == 0
            if not (whole or none):
                half.add(userid)
        # The same invariant over the whole table: a registered record has its subscription and a device.
        bad = sql(node, "SET SESSION wsrep_sync_wait=1; SELECT COUNT(*) FROM EnsSubscriptionInfo s WHERE s.registered = 1 AND "
                        "(s.subscription_id IS NULL OR s.backend_url IS NULL OR "
                        "NOT EXISTS (SELECT 1 FROM Devices d WHERE d.subscription_row = s.id))")[0][0]
        if bad != "0":
            problems.append(f"node {node}: {bad} registered records without a subscription or a device")
    result["registrations"]["half_applied"] = len(half)
    if half:
        problems.append(f"{len(half)} records of the run are half-applied")

    # 4. Same row counts everywhere (read causally; retried while the key refillers write).
    counts = {}
    for attempt in range(10):
        counts = {}
        for node in args.nodes:
            query = "SET SESSION wsrep_sync_wait=1; SELECT " + ", ".join(f"(SELECT COUNT(*) FROM {t})" for t in TABLES)
            counts[node] = sql(node, query)[0]
        if len({tuple(c) for c in counts.values()}) == 1:
            break
        time.sleep(2)
    result["row_counts"] = {str(n): dict(zip(TABLES, map(int, c))) for n, c in counts.items()}
    if len({tuple(c) for c in counts.values()}) != 1:
        problems.append(f"row counts differ between nodes: {counts}")
    result["problems"] = problems
    print(json.dumps(result))
    return 1 if problems else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("setup")
    p.add_argument("dir")
    p.add_argument("--checkins", type=int, default=20)
    p.add_argument("--mail-users", type=int, default=10)
    p.set_defaults(run=setup)
    p = sub.add_parser("mix")
    p.add_argument("dir")
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--stop-file")
    p.add_argument("--checkin-rate", type=float, default=20)
    p.add_argument("--register-rate", type=float, default=1)
    p.add_argument("--mail-rate", type=float, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--register-threads", type=int, default=1)
    p.add_argument("--mail-threads", type=int, default=2)
    p.add_argument("--retry-stale", action="store_true",
                   help="send a request again once on a new connection when a kept-alive one was closed before answering")
    p.set_defaults(run=mix)
    p = sub.add_parser("register-rate")
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--users", type=int, default=32)
    p.add_argument("--per-user", type=int, default=15, help="registrations per user and run (Exchange allows 20 subscriptions)")
    p.add_argument("--users-file", help="users made by an earlier run, reused (and written)")
    p.set_defaults(run=register_rate)
    p = sub.add_parser("window")
    p.add_argument("dir")
    p.add_argument("start", type=float)
    p.add_argument("end", type=float)
    p.set_defaults(run=window)
    p = sub.add_parser("verify")
    p.add_argument("dir")
    p.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--timeout", type=float, default=120)
    p.set_defaults(run=verify)
    args = parser.parse_args()
    return args.run(args) or 0


if __name__ == "__main__":
    sys.exit(main())
