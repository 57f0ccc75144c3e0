#!/usr/bin/env bash
# B8: Microsoft Graph change notifications through nginx, beside B6 (EWS callbacks) in
# the same run. Each request is a real Graph notification batch (one new message) for
# a registered Exchange Online user: ENS routes it by subscription, checks clientState,
# claims the message id against redelivery, fetches sender and subject from the Graph
# simulator ($select, ENS's application token), and hands the notification to ens-apns
# (durably spooled) before answering 202. Every request names a different message, so
# none is skipped as a duplicate. Reports notifications/s, p50/p99 time to the 202, and
# the ratio to B6's callbacks/s measured just before (target: B8 >= B6, p99 <= 1 s).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
USERS=${B8_USERS:-50}
MESSAGES=${B8_MESSAGES:-400}
SECONDS_PER_RUN=${BENCH_SECONDS:-10}
ENS_TOKEN=$(scripts/stack.sh token bench-b8)
export ENS_TOKEN
requests=$ENS_VAR/b8-graph.txt
fill_key_pool $((USERS + 10))
python3 bench/devices.py b8-setup "$USERS" "$MESSAGES" "$requests"

b6=$(bench/b6-callbacks.sh | tee /dev/stderr | awk '/B6 result/ {print $5}' | tr -d '/s')
out=$(timeout $((SECONDS_PER_RUN + 30)) wrk -t2 -c16 -d"${SECONDS_PER_RUN}s" --latency -s bench/b8-graph.lua "$BENCH_URL_BASE/graph/" -- "$requests" 2>/tmp/ens-b8-errors.$$)
errors=$(wc -l < /tmp/ens-b8-errors.$$); rm -f /tmp/ens-b8-errors.$$
rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
total=$(awk '/requests in/ {print $1}' <<<"$out")
p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
[ "$total" -le "$((USERS * MESSAGES))" ] || echo "B8 warning: $total requests but only $((USERS * MESSAGES)) distinct messages; the rest were duplicates"
printf 'B8 result: Graph notifications %.0f/s (p50 %s, p99 %s to the 202; %d unexpected answers); B6 EWS callbacks %.0f/s; ratio %s\n' \
  "$rps" "$p50" "$p99" "$errors" "$b6" "$(ratio "$rps" "$b6")"
