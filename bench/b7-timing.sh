#!/usr/bin/env bash
# B7: sealed-parameter failures in time. Interleaved requests of eight kinds (a valid
# payload, five different single-block failures, and the prefix attack: three valid
# blocks then a last one with bad padding, or good padding and garbage) to
# /getsubscriptionstatusv2 through nginx; per-kind latency and pairwise
# Kolmogorov-Smirnov tests within each group of failure kinds (bench/timing.py). Every
# failure must answer the same bytes and not differ in time.
set -euo pipefail
cd "$(dirname "$0")/.."
ENS_TOKEN=$(scripts/stack.sh token bench-b7)
export ENS_TOKEN
"$ENS_BIN/ens-cron" keys --target 10 --config "$ENS_VAR/ens.conf" >/dev/null
timeout 600 python3 bench/timing.py "${B7_REQUESTS:-1000}"
