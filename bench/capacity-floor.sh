#!/usr/bin/env bash
# The floor under the capacity bench: what the parts of the model's requests that no
# design of ENS can leave out cost on this host, each done by the leanest tool at hand,
# all in one run, and the users per core of a stack that did nothing else (the ceiling
# no implementation of this design reaches on this host). Per request:
#   nginx    TLS, HTTP and FastCGI for one request: /alive through the pool at
#            saturation (wrk, 64 connections), nginx's CPU only
#   MariaDB  one read and one write of the record by key, each its own commit:
#            bench/b6-floor.py's `least`, mariadbd's CPU only
#   lookup   one HTTPS request out on a kept-alive connection, as GetItem (Exchange) and
#            the message GET (Graph) are: h2load --h1 to the Exchange simulator with a
#            GetItem, h2load's CPU only
#   push     one HTTP/2 POST over TLS: h2load to the APNs simulator (2 connections x 10
#            streams), h2load's CPU only
#   sync     one 1 KB append and fdatasync in the spool's directory (ens-sender acknowledges
#            only what is synced; at the target's rate each callback's is synced alone)
#   RSA      one RSA-2048 private-key operation (openssl speed; paced, bench/floor-op.py):
#            a check-in opens its sealed token with one
# Then every part again at the pace bench/capacity.sh drives it (CAP_USERS users'
# requests at Poisson times, default 20,000: about 94 requests, 83 new-mail callbacks with
# their lookups and syncs, and 108 pushes a second), where each request wakes an idle
# process instead of one wakeup serving many, and finds the caches cold: the floor of
# what that bench can show on this host. h2load paces the lookups and pushes evenly
# (--rps), one at a time on one kept-alive connection; the rest come at Poisson times.
# Until 2026-11-30 the lookup, push, sync and RSA kept their saturated figures at the
# pace, which made that floor cheaper than the pace allows (docs/benchmarks-history.md).
# A new-mail callback is nginx + MariaDB + lookup + sync + a push per device; a heartbeat nginx
# + MariaDB; a check-in nginx + RSA. Left out, so the floor is lower than any real
# stack's: the responder and the sender themselves, the durable spool write, the XML
# and JSON, registrations, and the server side of every outbound call.
#
# Run by bench/run.sh (BENCHES=capacity-floor) on the bench stack: it registers B6's
# users first (B6_USERS, default 20). BENCH_SECONDS per measurement (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
SECONDS_PER_RUN=${BENCH_SECONDS:-5}
REQUESTS=${FLOOR_REQUESTS:-20000}
hz=$(getconf CLK_TCK)
ENS_TOKEN=$(scripts/stack.sh token bench-floor)
export ENS_TOKEN
requests=$ENS_VAR/b6-callbacks.txt
fill_key_pool 40
python3 bench/devices.py b6-setup "${B6_USERS:-20}" "$requests"
wait_for_empty_spool

# ms of CPU per request from clock ticks over a count.
per_request() { python3 -c "import sys; print(f'{int(sys.argv[1]) / $hz * 1000 / int(sys.argv[2]):.4f}')" "$1" "$2"; }

# nginx: /alive at saturation.
mapfile -t nginx_pids < <(stack_pids nginx)
before=$(cpu_ticks "${nginx_pids[@]}")
out=$(timeout $((SECONDS_PER_RUN + 30)) wrk -t2 -c64 -d"${SECONDS_PER_RUN}s" "$BENCH_URL_BASE/alive")
count=$(awk '/requests in/ {print $1}' <<<"$out")
nginx_ms=$(per_request $(( $(cpu_ticks "${nginx_pids[@]}") - before )) "$count")

# MariaDB: the least a callback can ask of it.
mariadb_ms=$(python3 bench/b6-floor.py 1500 | awk '/least/ {gsub(/\)/, "", $NF); print $NF}')

# h2load_ms COUNT ARGS...: h2load's own CPU per request for COUNT requests (its user and
# system time, from its rusage); every answer must be a 2xx, or the figure is not of the
# request it names.
h2load_ms() {
  local count=$1 times=$ENS_VAR/floor-h2load.time out=$ENS_VAR/floor-h2load.out
  shift
  /usr/bin/time -o "$times" -f '%U %S' timeout 120 h2load -n "$count" "$@" > "$out" 2>&1
  grep -q "status codes: $count 2xx" "$out" || { grep -E 'status codes|requests:' "$out" >&2; echo "capacity-floor: h2load's answers were not all 2xx" >&2; exit 1; }
  python3 -c "import sys; u, s = map(float, open(sys.argv[1]).read().split()); print(f'{(u + s) * 1000 / $count:.4f}')" "$times"
}

# lookup: a GetItem for one of the bench mailboxes, over HTTP/1.1 and TLS, kept alive.
read -r email password < <(python3 -c "import json,sys; u = json.load(open(sys.argv[1]))[0]; print(u['email'], u['password'])" "$requests.users.json")
python3 - "$ENS_VAR/floor-getitem.xml" <<'PY'
import sys
open(sys.argv[1], "w").write(
    '<?xml version="1.0" encoding="utf-8"?>'
    '<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/" '
    'xmlns:t="http://schemas.microsoft.com/exchange/services/2006/types" '
    'xmlns:m="http://schemas.microsoft.com/exchange/services/2006/messages">'
    '<soap:Header><t:RequestServerVersion Version="Exchange2010_SP2"/></soap:Header>'
    '<soap:Body><m:GetItem><m:ItemShape><t:BaseShape>IdOnly</t:BaseShape><t:AdditionalProperties>'
    '<t:FieldURI FieldURI="item:Subject"/><t:FieldURI FieldURI="message:From"/></t:AdditionalProperties>'
    '</m:ItemShape><m:ItemIds><t:ItemId Id="AAMkAGI2TG93AAA="/></m:ItemIds></m:GetItem></soap:Body></soap:Envelope>')
PY
auth=$(printf '%s:%s' "$email" "$password" | base64 -w0)
lookup() {
  h2load_ms "$@" --h1 -m 1 -d "$ENS_VAR/floor-getitem.xml" -H ":authority: mail.bench.test" \
    -H "authorization: Basic $auth" -H "content-type: text/xml; charset=utf-8" \
    "https://127.0.0.1:$((ENS_PORT + 3))/EWS/Exchange.asmx"
}
lookup_ms=$(lookup "$REQUESTS" -c 2)

# push: APNs's request, as bench/b4-push.sh sends it.
jwt=$(python3 bench/pushes.py jwt "$ENS_VAR/secrets/apns-auth-key.p8" DEVKEY0001 DEVTEAM001)
python3 bench/pushes.py payload > "$ENS_VAR/floor-payload.json"
push() {
  h2load_ms "$@" -d "$ENS_VAR/floor-payload.json" -H "authorization: bearer $jwt" \
    -H "apns-topic: com.example.mail" -H "apns-push-type: alert" -H "apns-priority: 10" \
    "https://localhost:$((ENS_PORT + 1))/3/device/$(openssl rand -hex 32)"
}
push_ms=$(push "$REQUESTS" -c 2 -m 10)

# sync: what appending a notification durably costs the process that does it.
sync_ms=$(python3 bench/floor-op.py sync "$ENS_VAR/spool")

# Every part at the capacity bench's pace.
paced=$(python3 - <<'PY'
import sys
sys.path.insert(0, "bench")
import capacity
m = capacity.model()
r = capacity.rates(m)
requests_per_second = sum(rate for kind, rate in r.items() if kind not in ("register", "unregister"))
mails_per_second = r["ews-mail"] + r["graph-mail"]
database_per_second = mails_per_second + r["ews-heartbeat"]
print(f"{requests_per_second:.2f} {database_per_second:.2f} {mails_per_second:.2f} {mails_per_second * m['devices_per_user']:.2f}")
PY
)
read -r paced_requests paced_database paced_mails paced_pushes <<<"$paced"
# As many paced requests of each kind as the paced /alive below sends in its 3 windows.
paced_count() { python3 -c "print(max(200, round($1 * $SECONDS_PER_RUN * 3)))"; }
lookup_paced_ms=$(lookup "$(paced_count "$paced_mails")" -c 1 --rps "$paced_mails")
push_paced_ms=$(push "$(paced_count "$paced_pushes")" -c 1 -m 1 --rps "$paced_pushes")
sync_paced_ms=$(python3 bench/floor-op.py sync "$ENS_VAR/spool" "$paced_mails" "$(paced_count "$paced_mails")")
# A check-in's RSA operation, each alone at the pace of all requests (check-ins themselves
# come a few a second; at either pace each one finds the caches as the others left them).
rsa_paced_ms=$(python3 bench/floor-op.py rsa "$paced_requests" "$(paced_count "$paced_requests")")
nginx_paced_ms=$(python3 - "$paced_requests" "$SECONDS_PER_RUN" "${nginx_pids[@]}" <<'PY'
import os, queue, random, sys, threading, time
sys.path.insert(0, "bench")
import devices
rate, seconds, pids = float(sys.argv[1]), float(sys.argv[2]) * 3, sys.argv[3:]
hz = os.sysconf("SC_CLK_TCK")
def ticks():
    total = 0
    for pid in pids:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total
work, failures = queue.Queue(), []
def worker():
    conn = devices.connection()
    while (due := work.get()) is not None:
        time.sleep(max(0.0, due - time.monotonic()))
        conn.request("GET", "/alive")
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            failures.append(response.status)
threads = [threading.Thread(target=worker, daemon=True) for _ in range(8)]
for thread in threads:
    thread.start()
pace, count = random.Random(32), 0
start = time.monotonic() + 0.5
due = start
while due < start + seconds:
    due += pace.expovariate(rate)
    work.put(due)
    count += 1
before = None
while before is None:  # the first request is due half a second from now
    if time.monotonic() >= start - 0.1:
        before = ticks()
    time.sleep(0.01)
for _ in threads:
    work.put(None)
for thread in threads:
    thread.join()
if failures:
    sys.exit(f"capacity-floor: paced /alive answered {failures[:5]}")
print(f"{(ticks() - before) / hz * 1000 / count:.4f}")
PY
)
mariadb_paced_ms=$(B6_FLOOR_ONLY=least python3 bench/b6-floor.py "$(python3 -c "print(max(200, round($paced_database * $SECONDS_PER_RUN)))")" "$paced_database" | awk '/least/ {gsub(/\)/, "", $NF); print $NF}')

rsa_per_second=$(openssl speed -seconds 3 rsa2048 2>/dev/null | awk '/^rsa 2048 bits/ {print $(NF-1)}')
python3 - "$nginx_ms" "$mariadb_ms" "$lookup_ms" "$push_ms" "$sync_ms" "$rsa_per_second" "$nginx_paced_ms" "$mariadb_paced_ms" \
  "$lookup_paced_ms" "$push_paced_ms" "$sync_paced_ms" "$rsa_paced_ms" "$paced_requests" <<'PY'
import importlib.util, os, sys
(nginx, mariadb, lookup, push, sync, rsa_per_second, nginx_paced, mariadb_paced,
 lookup_paced, push_paced, sync_paced, rsa_paced, paced_requests) = map(float, sys.argv[1:])
spec = importlib.util.spec_from_file_location("capacity", os.path.join("bench", "capacity.py"))
capacity = importlib.util.module_from_spec(spec)
spec.loader.exec_module(capacity)
m = capacity.model()
r = {kind: rate / m["users"] for kind, rate in capacity.rates(m).items()}  # per user, per second
rsa = 1000 / rsa_per_second


def per_user(nginx, mariadb, lookup, push, sync, rsa):
    """ms of CPU per user per second at the peak, and the three requests' floors."""
    callback = nginx + mariadb + lookup + sync + m["devices_per_user"] * push
    heartbeat = nginx + mariadb
    checkin = nginx + rsa
    return (r["ews-mail"] + r["graph-mail"]) * callback + r["ews-heartbeat"] * heartbeat + r["checkin"] * checkin, callback, heartbeat, checkin


per_user_ms, callback, heartbeat, checkin = per_user(nginx, mariadb, lookup, push, sync, rsa)
paced_per_user_ms, paced_callback, paced_heartbeat, paced_checkin = per_user(nginx_paced, mariadb_paced, lookup_paced, push_paced,
                                                                             sync_paced, rsa_paced)
print(f"Capacity floor parts (ms of CPU each, this host): nginx {nginx:.4f} per request, MariaDB {mariadb:.4f} per "
      f"callback, lookup {lookup:.4f} per HTTPS request out, push {push:.4f} per HTTP/2 push, sync {sync:.4f} per "
      f"durable append, RSA {rsa:.4f} per operation")
print(f"Capacity floor per request: new-mail callback {callback:.3f} ms (with {m['devices_per_user']} pushes and a sync), "
      f"heartbeat {heartbeat:.3f} ms, check-in {checkin:.3f} ms")
print(f"Capacity floor result: {1000 / per_user_ms:,.0f} users per core at the default mix "
      f"({per_user_ms * 1000:.2f} µs of CPU per user per second at the peak; target 300,000; "
      f"one RSA-2048 operation {rsa:.3f} ms)")
print(f"Capacity floor at the capacity bench's pace ({m['users']:,} users: {paced_requests:.0f} requests/s): nginx "
      f"{nginx_paced:.4f} ms per request, MariaDB {mariadb_paced:.4f} ms per callback, lookup {lookup_paced:.4f}, "
      f"push {push_paced:.4f}, sync {sync_paced:.4f}, RSA {rsa_paced:.4f}; the sender's part of a new-mail callback "
      f"({m['devices_per_user']} pushes and a sync) {m['devices_per_user'] * push_paced + sync_paced:.3f} ms; new-mail callback "
      f"{paced_callback:.3f} ms, heartbeat {paced_heartbeat:.3f} ms, check-in {paced_checkin:.3f} ms; "
      f"{1000 / paced_per_user_ms:,.0f} users per core (the most bench/capacity.sh can "
      f"show on this host; target 300,000)")
PY
