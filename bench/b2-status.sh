#!/usr/bin/env bash
# B2: /getsubscriptionstatusv2 (one RSA-2048 private-key operation + database writes per
# request) through nginx, against `openssl speed -multi <cores> rsa2048` private-key
# operations/s measured in the same run. Target: ratio >= 0.70.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
USERS=${B2_USERS:-100}
SECONDS_PER_RUN=${BENCH_SECONDS:-10}
cores=$(nproc)
ENS_TOKEN=$(scripts/stack.sh token bench-b2)
export ENS_TOKEN
bodies=$ENS_VAR/b2-bodies.txt
python3 bench/devices.py b2-setup "$USERS" "$bodies"

rsa=$(openssl speed -multi "$cores" -seconds "$SECONDS_PER_RUN" rsa2048 2>/dev/null | awk '/^rsa 2048 bits/ {print $(NF-1)}')
rps=$(timeout $((SECONDS_PER_RUN + 30)) wrk -t2 -c32 -d"${SECONDS_PER_RUN}s" -s bench/b2-status.lua "$BENCH_URL_BASE/getsubscriptionstatusv2" -- "$bodies" 2>/tmp/ens-b2-errors.$$ \
  | awk '/Requests\/sec/ {print $2}')
errors=$(wc -l < /tmp/ens-b2-errors.$$); rm -f /tmp/ens-b2-errors.$$
printf 'B2 result: /getsubscriptionstatusv2 %.0f req/s (%d unexpected answers); openssl speed -multi %d rsa2048 %.0f private ops/s; ratio %s (target >= 0.70)\n' \
  "$rps" "$errors" "$cores" "$rsa" "$(ratio "$rps" "$rsa")"
