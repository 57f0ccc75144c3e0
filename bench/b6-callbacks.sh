#!/usr/bin/env bash
# B6: Exchange new-mail callbacks through nginx. Each request is a real SendNotification
# for a registered user: ENS checks the sealed URL, parses the SOAP, calls GetItem on
# the Exchange simulator, and hands the notification to ens-sender (durably spooled)
# before answering OK. Reports callbacks/s and p50/p99 latency, with /alive from the
# same run beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
USERS=${B6_USERS:-50}
SECONDS_PER_RUN=${BENCH_SECONDS:-10}
ENS_TOKEN=$(scripts/stack.sh token bench-b6)
export ENS_TOKEN
requests=$ENS_VAR/b6-callbacks.txt
fill_key_pool $((USERS + 10))
python3 bench/devices.py b6-setup "$USERS" "$requests"

alive=$(wrk_rps /alive "$SECONDS_PER_RUN")
out=$(timeout $((SECONDS_PER_RUN + 30)) wrk -t2 -c16 -d"${SECONDS_PER_RUN}s" --latency -s bench/b6-callbacks.lua "$BENCH_URL_BASE/ews/" -- "$requests" 2>/tmp/ens-b6-errors.$$)
errors=$(wc -l < /tmp/ens-b6-errors.$$); rm -f /tmp/ens-b6-errors.$$
rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
printf 'B6 result: new-mail callbacks %.0f/s (p50 %s, p99 %s; %d unexpected answers); /alive %.0f req/s; ratio %s\n' \
  "$rps" "$p50" "$p99" "$errors" "$alive" "$(ratio "$rps" "$alive")"
figure b6.callbacks_over_alive "$(ratio "$rps" "$alive")"
figure b6.unexpected_answers "$errors"
