#!/usr/bin/env bash
# What one request costs ENS in instructions, counted by callgrind instead of timed.
# CPU time on a shared 2-core host moves ±15% from run to run; instruction counts move
# about 1%, so a change of a few percent in the responder or the sender shows here when
# it cannot in bench/ab-callbacks.sh. An experiment kept in bench/lab/ (not maintained).
#
# Stops the bench stack's ens-fcgi and ens-sender, runs them under callgrind (one worker,
# one thread), sends the workload at a low rate, zeroes the counters after a warm-up,
# and prints instructions per request for each process with the largest inclusive
# costs. Afterwards both are restarted normally (scripts/stack.sh up).
#
#   INSTRUCTIONS_WORKLOAD   callbacks (default): B6's Exchange new-mail callbacks;
#                           checkins: B2's /getsubscriptionstatusv2 (ens-fcgi only)
#   BENCH_SECONDS (default 20)   the counted window
#   INSTRUCTIONS_TOP (default 25)   how many functions to list per process
#   INSTRUCTIONS_OUT (default $ENS_VAR/instructions)   where the callgrind files stay
#
#   BENCHES=lab/instructions make bench     (bench/run.sh runs bench/$BENCHES.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
command -v valgrind >/dev/null || { echo "instructions: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
USERS=${INSTRUCTIONS_USERS:-50}
SECONDS_PER_RUN=${BENCH_SECONDS:-20}
WORKLOAD=${INSTRUCTIONS_WORKLOAD:-callbacks}
TOP=${INSTRUCTIONS_TOP:-25}
OUT=${INSTRUCTIONS_OUT:-$ENS_VAR/instructions}
CONFIG=$ENS_VAR/ens.conf
ENS_TOKEN=$(scripts/stack.sh token bench-instructions)
export ENS_TOKEN
fill_key_pool $((USERS + 10))
case $WORKLOAD in
  callbacks)
    requests=$ENS_VAR/b6-callbacks.txt
    python3 bench/devices.py b6-setup "$USERS" "$requests"
    script=bench/b6-callbacks.lua path=/ews/ ;;
  checkins)
    requests=$ENS_VAR/b2-bodies.txt
    python3 bench/devices.py b2-setup "$USERS" "$requests"
    script=bench/b2-status.lua path=/getsubscriptionstatusv2 ;;
  *) echo "instructions: INSTRUCTIONS_WORKLOAD is callbacks or checkins" >&2; exit 2 ;;
esac

rm -rf "$OUT"; mkdir -p "$OUT"
sed -e 's/^fcgi.processes = .*/fcgi.processes = 1/' -e 's/^fcgi.threads = .*/fcgi.threads = 1/' \
  "$CONFIG" > "$OUT/ens.conf"

restore() {
  pkill -f "valgrind.*$OUT/ens.conf" 2>/dev/null || true
  for _ in $(seq 40); do pgrep -f "valgrind.*$OUT/ens.conf" >/dev/null || break; sleep 0.5; done
  scripts/stack.sh up >/dev/null 2>&1 || echo "instructions: scripts/stack.sh up failed" >&2
}
trap restore EXIT

kill "$(cat "$ENS_VAR/run/ens-fcgi.pid")" "$(cat "$ENS_VAR/run/ens-sender.pid")" 2>/dev/null || true
for _ in $(seq 40); do pgrep -f "$ENS_VAR/ens.conf" >/dev/null || break; sleep 0.5; done

MALLOC_ARENA_MAX=2 valgrind --tool=callgrind --callgrind-out-file="$OUT/apns.%p" \
  "$(sender_bin "$ENS_BIN")" --config "$OUT/ens.conf" >"$OUT/apns.log" 2>&1 </dev/null &
for _ in $(seq 120); do [ -S "$ENS_VAR/run/apns.sock" ] && grep -q "started\|listening" "$OUT/apns.log" && break; sleep 0.5; done
valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$OUT/fcgi.%p" \
  "$ENS_BIN/ens-fcgi" --config "$OUT/ens.conf" >"$OUT/fcgi.log" 2>&1 </dev/null &
for _ in $(seq 120); do grep -q "responder started" "$OUT/fcgi.log" && break; sleep 0.5; done

worker=$(pgrep -f "valgrind.*--worker.*$OUT/ens.conf" | head -1)
sender=$(pgrep -f "valgrind.*$SENDER_PROCESS.*$OUT/ens.conf" | head -1)
if [ -z "$worker" ] || [ -z "$sender" ]; then
  echo "instructions: the processes did not start under valgrind; see $OUT" >&2; exit 1
fi

send() {  # send SECONDS: sends the workload on two connections, prints how many succeeded
  timeout $(($1 + 60)) wrk -t1 -c2 -d"$1s" -s "$script" "$BENCH_URL_BASE$path" -- "$requests" 2>"$OUT/wrk-errors" \
    | awk '/requests in/ {n=$1} /Non-2xx/ {bad=$NF} END {print n - bad}'
}
send 8 >/dev/null             # warm-up: connections, prepared statements, key caches
sleep 2
callgrind_control -z "$worker" >/dev/null; callgrind_control -z "$sender" >/dev/null
counted=$(send "$SECONDS_PER_RUN")
sleep 3                       # the sender's last batch
callgrind_control -d "$worker" >/dev/null; callgrind_control -d "$sender" >/dev/null
[ -s "$OUT/wrk-errors" ] && { echo "instructions: unexpected answers:" >&2; head -3 "$OUT/wrk-errors" >&2; exit 1; }
[ "${counted:-0}" -gt 0 ] || { echo "instructions: no request succeeded" >&2; exit 1; }

report() {  # report NAME FILE
  local total
  total=$(callgrind_annotate "$2" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  printf 'Instructions %s, %s: %s per request (%s requests)\n' "$WORKLOAD" "$1" \
    "$(python3 -c "print(f'{$total/$counted:,.0f}')")" "$counted"
  # Inclusive costs, largest first; a wrapper (thunk, partial apply, specialisation)
  # costs within 1% of what it wraps, so only the first of such a run is listed.
  callgrind_annotate --inclusive=yes "$2" 2>/dev/null | grep -E '^ *[0-9,]+ \(' | sed -n '2,400p' \
    | python3 -c '
import re, subprocess, sys
lines = sys.stdin.read().splitlines()
names = [re.sub(r"\s*\[.*$", "", l.split(":", 1)[1]) if ":" in l else l for l in lines]
demangled = subprocess.run(["swift", "demangle", "--simplified"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines() if names else []
shown, previous = 0, None
for line, name in zip(lines, demangled or names):
    count = int(line.split()[0].replace(",", ""))
    if previous is not None and count >= previous * 0.99:
        continue
    previous = count
    print(f"  {count / int(sys.argv[1]):>10,.0f}  {name[:110]}")
    shown += 1
    if shown == int(sys.argv[2]):
        break
' "$counted" "$TOP"
}
# callgrind_control -d wrote each process's first dump, <name>.<pid>.1.
report ens-fcgi "$OUT/fcgi.$worker.1"
if [ "$WORKLOAD" = callbacks ]; then report ens-sender "$OUT/apns.$sender.1"; fi
