#!/usr/bin/env bash
# B6 in instructions: what one Exchange new-mail callback costs ens-fcgi and ens-apns,
# counted by callgrind instead of timed. CPU time on a shared 2-core host moves ±15%
# from run to run; instruction counts move under 1%, so a change of a few percent in
# the responder or the sender shows here when it cannot show in bench/ab-callbacks.sh.
#
# Stops the bench stack's ens-fcgi and ens-apns, runs them under callgrind (one
# worker, one thread), sends B6's callbacks at a low rate, zeroes the counters after a
# warm-up, and prints instructions per callback for each process with the largest
# inclusive costs. Afterwards both are restarted normally (scripts/stack.sh up).
#
#   BENCH_SECONDS (default 20)   the counted window
#   B6I_TOP (default 25)         how many functions to list per process
#   B6I_OUT (default $ENS_VAR/b6-instructions)   where the callgrind files stay
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v valgrind >/dev/null || { echo "b6-instructions: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
USERS=${B6_USERS:-50}
SECONDS_PER_RUN=${BENCH_SECONDS:-20}
TOP=${B6I_TOP:-25}
OUT=${B6I_OUT:-$ENS_VAR/b6-instructions}
CONFIG=$ENS_VAR/ens.conf
ENS_TOKEN=$(scripts/stack.sh token bench-b6)
export ENS_TOKEN
requests=$ENS_VAR/b6-callbacks.txt
fill_key_pool $((USERS + 10))
python3 bench/devices.py b6-setup "$USERS" "$requests"

rm -rf "$OUT"; mkdir -p "$OUT"
sed -e 's/^fcgi.processes = .*/fcgi.processes = 1/' -e 's/^fcgi.threads = .*/fcgi.threads = 1/' \
  "$CONFIG" > "$OUT/ens.conf"

restore() {
  pkill -f "valgrind.*$OUT/ens.conf" 2>/dev/null || true
  for _ in $(seq 40); do pgrep -f "valgrind.*$OUT/ens.conf" >/dev/null || break; sleep 0.5; done
  scripts/stack.sh up >/dev/null 2>&1 || echo "b6-instructions: scripts/stack.sh up failed" >&2
}
trap restore EXIT

kill "$(cat "$ENS_VAR/run/ens-fcgi.pid")" "$(cat "$ENS_VAR/run/ens-apns.pid")" 2>/dev/null || true
for _ in $(seq 40); do pgrep -f "$ENS_VAR/ens.conf" >/dev/null || break; sleep 0.5; done

MALLOC_ARENA_MAX=2 valgrind --tool=callgrind --callgrind-out-file="$OUT/apns.%p" \
  "$ENS_BIN/ens-apns" --config "$OUT/ens.conf" >"$OUT/apns.log" 2>&1 </dev/null &
for _ in $(seq 120); do [ -S "$ENS_VAR/run/apns.sock" ] && grep -q "started\|listening" "$OUT/apns.log" && break; sleep 0.5; done
valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$OUT/fcgi.%p" \
  "$ENS_BIN/ens-fcgi" --config "$OUT/ens.conf" >"$OUT/fcgi.log" 2>&1 </dev/null &
for _ in $(seq 120); do grep -q "responder started" "$OUT/fcgi.log" && break; sleep 0.5; done

worker=$(pgrep -f "valgrind.*--worker.*$OUT/ens.conf" | head -1)
sender=$(pgrep -f "valgrind.*ens-apns.*$OUT/ens.conf" | head -1)
if [ -z "$worker" ] || [ -z "$sender" ]; then
  echo "b6-instructions: the processes did not start under valgrind; see $OUT" >&2; exit 1
fi

callbacks() {  # callbacks SECONDS: sends B6's requests on two connections, prints how many succeeded
  timeout $(($1 + 60)) wrk -t1 -c2 -d"$1s" -s bench/b6-callbacks.lua "$BENCH_URL_BASE/ews/" -- "$requests" 2>"$OUT/wrk-errors" \
    | awk '/requests in/ {n=$1} /Non-2xx/ {bad=$NF} END {print n - bad}'
}
callbacks 8 >/dev/null        # warm-up: connections, prepared statements, key caches
sleep 2
callgrind_control -z "$worker" >/dev/null; callgrind_control -z "$sender" >/dev/null
counted=$(callbacks "$SECONDS_PER_RUN")
sleep 3                       # the sender's last batch
callgrind_control -d "$worker" >/dev/null; callgrind_control -d "$sender" >/dev/null
[ -s "$OUT/wrk-errors" ] && { echo "b6-instructions: unexpected answers:" >&2; head -3 "$OUT/wrk-errors" >&2; exit 1; }
[ "${counted:-0}" -gt 0 ] || { echo "b6-instructions: no callback succeeded" >&2; exit 1; }

report() {  # report NAME FILE
  local total
  total=$(callgrind_annotate "$2" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  printf 'B6-instructions %s: %s instructions per callback (%s callbacks)\n' "$1" \
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
report ens-apns "$OUT/apns.$sender.1"
