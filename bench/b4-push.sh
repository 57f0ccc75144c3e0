#!/usr/bin/env bash
# B4: pushes/s from the Unix socket through ens-sender (spool, HTTP/2 multiplexing) to the
# APNs simulator, against h2load driving the same simulator in the same run (target
# >= 0.80 of h2load's rate); then ens-sender's RSS with 100,000 notifications spooled
# (simulator stopped; target <= 50 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
PUSHES=${B4_PUSHES:-20000}
SPOOLED=${B4_SPOOLED:-100000}
APNS_PORT=$((ENS_PORT + 1))
CONTROL="http://127.0.0.1:$((ENS_PORT + 2))"
sock=$ENS_VAR/run/apns.sock

# ens-sender: from the first submission until the simulator has accepted them all.
# CPU per push is read from /proc for the simulator and ens-sender around each half.
simulator=$(stack_pids apns-sim | head -1)
sender=$(stack_pids sender | head -1)
curl -s -X POST -d '{}' "$CONTROL/reset" >/dev/null
sim_before=$(cpu_ticks "$simulator"); sender_before=$(cpu_ticks "$sender")
start=$(date +%s%N)
read -r ok _ < <(python3 bench/pushes.py submit "$sock" "$PUSHES" 16)
# One long-polling request rather than a polling loop, which would compete for the CPU.
stats=$(curl -s --max-time 90 "$CONTROL/wait?accepted=$PUSHES&timeout=60")
elapsed=$(( $(date +%s%N) - start ))
done_count=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["accepted"])' "$stats")
ens_rate=$(python3 -c "print(f'{$done_count / ($elapsed / 1e9):.0f}')")
sim_ens=$(( $(cpu_ticks "$simulator") - sim_before )); sender_cpu=$(( $(cpu_ticks "$sender") - sender_before ))

# h2load: the same simulator, same TLS and JWT checks, 2 connections x 100 streams, the
# same payload and the header set ens-sender sends (apns-expiration, apns-collapse-id and
# content-type cost the simulator's HPACK decoder about 8%), one device token per
# request as ens-sender does. The ratio is taken against this run; a second run with
# only Apple's required headers and a single token is printed beside it.
token=$(python3 bench/pushes.py jwt "$ENS_VAR/secrets/apns-auth-key.p8" DEVKEY0001 DEVTEAM001)
python3 bench/pushes.py payload > "$ENS_VAR/b4-payload.json"
python3 -c "import os,sys
for _ in range(int(sys.argv[1])): print('https://localhost:$APNS_PORT/3/device/' + os.urandom(32).hex())" "$PUSHES" > "$ENS_VAR/b4-uris.txt"
# h2load's own CPU (user and system, from its rusage) lands in $ENS_VAR/b4-h2load.time.
h2load_rate() {
  /usr/bin/time -o "$ENS_VAR/b4-h2load.time" -f '%U %S' timeout 120 h2load -n "$PUSHES" -c 2 -m 100 -d "$ENS_VAR/b4-payload.json" \
    -H "authorization: bearer $token" -H "apns-topic: com.example.mail" -H "apns-push-type: alert" -H "apns-priority: 10" "$@" 2>/dev/null \
    | awk '/^finished in/ {gsub(",", "", $4); print $4}'
}
sim_before=$(cpu_ticks "$simulator")
h2_rate=$(h2load_rate -H "apns-expiration: $(( $(date +%s) + 3600 ))" -H "apns-collapse-id: $(openssl rand -hex 16)" \
  -H "content-type: application/json" -i "$ENS_VAR/b4-uris.txt")
sim_h2=$(( $(cpu_ticks "$simulator") - sim_before ))
read -r h2_user h2_system < "$ENS_VAR/b4-h2load.time"
h2_minimal=$(h2load_rate "https://localhost:$APNS_PORT/3/device/$(openssl rand -hex 32)")
printf 'B4 result: ens-sender %s pushes/s (%s of %s accepted by the simulator, %s acknowledged); h2load %s req/s with the same requests; ratio %s (target >= 0.80)\n' \
  "$ens_rate" "$done_count" "$PUSHES" "$ok" "$h2_rate" "$(ratio "$ens_rate" "$h2_rate")"
figure b4.apns_over_h2load "$(ratio "$ens_rate" "$h2_rate")"
printf 'B4 beside it: h2load %s req/s with Apple'"'"'s required headers only and one device token (ratio %s)\n' "$h2_minimal" "$(ratio "$ens_rate" "$h2_minimal")"
python3 -c "import sys; hz, n = $(getconf CLK_TCK), $PUSHES
print(f'B4 CPU per push: simulator {$sim_ens / hz * 1000 / n:.3f} ms for ens-sender requests, {$sim_h2 / hz * 1000 / n:.3f} ms for h2load requests; ens-sender (ingest, spool, delivery) {$sender_cpu / hz * 1000 / n:.3f} ms')"

# ens-sender's CPU per push against its floor: h2load's own CPU for the same push and one
# durable append (a 1 KB write and its fdatasync, back to back in the spool's directory):
# at most 2x, or the sender's own work outweighs what it must do.
sync_ms=$(python3 bench/floor-op.py sync "$ENS_VAR/spool")
read -r sender_ms floor_ms sender_ratio < <(python3 -c "hz, n = $(getconf CLK_TCK), $PUSHES
sender, push = $sender_cpu / hz * 1000 / n, ($h2_user + $h2_system) * 1000 / n
print(f'{sender:.4f} {push + $sync_ms:.4f} {sender / (push + $sync_ms):.2f}')")
printf 'B4 ens-sender over its floor: %s ms per push against %s ms (h2load'"'"'s own push and a durable append, %s ms of it): %s x (target <= 2)\n' \
  "$sender_ms" "$floor_ms" "$sync_ms" "$sender_ratio"
figure b4.sender_over_floor "$sender_ratio"

# Memory with a deep spool: stop the simulator so nothing drains, fill, measure.
scripts/stack.sh sim-stop
read -r ok seconds < <(python3 bench/pushes.py submit "$sock" "$SPOOLED" 16)
rss=$(max_rss_mb "$SENDER_PROCESS --config $ENS_VAR/ens.conf")
printf 'B4 result: ens-sender RSS %s MB with %s notifications spooled (target <= 50 MB; spooled in %s s)\n' "$rss" "$ok" "$seconds"
figure b4.spooled_rss_mb "$rss"
scripts/stack.sh sender-stop && rm -rf "$ENS_VAR/spool/log" && scripts/stack.sh sim-start && scripts/stack.sh sender-start
