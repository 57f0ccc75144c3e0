#!/usr/bin/env bash
# B3: /getpublickey latency for new users, with the RSA key pool filled (target p99
# <= 10 ms), and with it empty, when new users are turned away with 503 at once
# instead of a key being generated on the request path.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
USERS=${B3_USERS:-1000}
EMPTY_USERS=${B3_EMPTY_USERS:-100}
ENS_TOKEN=$(scripts/stack.sh token bench-b3)
export ENS_TOKEN
echo "B3: filling the key pool to $((USERS + 10)) keys (2 threads; ~0.25 s per key per thread)"
start=$SECONDS
"$ENS_BIN/ens-cron" keys --target $((USERS + 10)) --config "$ENS_VAR/ens.conf"
echo "B3: pool filled in $((SECONDS - start)) s"
read -r n p50 p99 < <(python3 bench/devices.py b3-latency "$USERS")
printf 'B3 result (pool filled): %d new users, p50 %s ms, p99 %s ms (target p99 <= 10 ms)\n' "$n" "$p50" "$p99"
figure b3.filled_p99_ms "$p99"
mariadb --no-defaults -S "$ENS_VAR/run/mysqld.sock" -uroot ens -e 'DELETE FROM KeyPool'
read -r n p50 p99 < <(python3 bench/devices.py b3-latency "$EMPTY_USERS" 503)
printf 'B3 result (pool empty): %d new users answered 503, p50 %s ms, p99 %s ms (no key generated on the request path)\n' "$n" "$p50" "$p99"
