#!/usr/bin/env bash
# B2 for two builds of ens-fcgi on the bench stack, alternating: each round stops the
# pool, starts the other build's, and runs bench/b2-status.sh (which alternates
# `openssl speed` with the check-ins in slices and holds each against the one before it). Prints ens-fcgi's CPU per
# check-in and its ratio to the RSA operation for each, and the medians; the target
# is a ratio of at most 1.25.
#
#   AB_BIN_A=/work/old/.build/release AB_BIN_B=.build/release BENCH_ROUNDS=3 bench/ab-checkins.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
A=${AB_BIN_A:?AB_BIN_A names the first build (a directory holding ens-fcgi)}
B=${AB_BIN_B:-$PWD/.build/release}
ROUNDS=${BENCH_ROUNDS:-3}
restart_pool() { scripts/stack.sh fcgi-stop >/dev/null; ENS_BIN=$1 scripts/stack.sh fcgi-start >/dev/null; }
trap 'restart_pool "$B"' EXIT
declare -A ratios
for round in $(seq "$ROUNDS"); do
  order="A B"; [ $((round % 2)) -eq 0 ] && order="B A"
  for side in $order; do
    bin=$A; [ "$side" = B ] && bin=$B
    restart_pool "$bin"
    out=$(bench/b2-status.sh 2>/dev/null)
    line=$(grep "^B2 CPU per request" <<<"$out")
    fcgi=$(sed -E 's/.*ens-fcgi ([0-9.]+) ms.*/\1/' <<<"$line")
    rsa=$(sed -E 's/.*operation ([0-9.]+) ms of a core.*/\1/' <<<"$line")
    r=$(grep "^B2 ens-fcgi per check-in over one RSA operation" <<<"$out" | sed -E 's/.*operation: ([0-9.]+) .*/\1/')
    ratios[$side]="${ratios[$side]:-} $r"
    printf 'AB-checkins round %d %s: ens-fcgi %s ms per check-in, one RSA operation %s ms: %s×\n' "$round" "$side" "$fcgi" "$rsa" "$r"
  done
done
# shellcheck disable=SC2086
printf 'AB-checkins result: ens-fcgi per check-in ÷ one RSA operation, median A %s, B %s (target <= 1.25)\n' \
  "$(median ${ratios[A]})" "$(median ${ratios[B]})"
