#!/usr/bin/env bash
# B8-blind: Graph notifications in `blind` mode against B8's lookup mode, in
# the same run. Lookup: a change notification that ENS routes, checks, claims, looks up
# in Graph ($select of sender and subject) and hands to ens-sender. Blind: a rich
# notification (the simulator's real encryption to each device's certificate and its
# signed validation tokens) that ENS routes, checks, validates (RS256 against the cached
# signing keys), claims and hands to ens-sender as ciphertext, with no Graph request.
# The two alternate in BENCH_ROUNDS rounds (default 3) of BENCH_SECONDS each (default
# 5), the order swapped every round. For each run: notifications/s, p50/p99 to the 202,
# and CPU per notification of ens-fcgi, ens-sender and MariaDB (from /proc, from before
# the run until the spool has drained after it, so each run pays for its own pushes;
# the simulators and wrk are not counted). Targets: blind >= 1.5x lookup's rate,
# <= 0.6x its CPU per notification, p99 <= 50 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
USERS=${B8_USERS:-50}
MESSAGES=${B8_MESSAGES:-600}
ROUNDS=${BENCH_ROUNDS:-3}
SECONDS_PER_RUN=${BENCH_SECONDS:-5}
ENS_TOKEN=$(scripts/stack.sh token bench-b8-blind)
export ENS_TOKEN
fill_key_pool $((2 * USERS + 10))
python3 bench/devices.py b8-setup "$USERS" "$MESSAGES" "$ENS_VAR/b8l-lookup.txt"
python3 bench/devices.py b8-blind-setup "$USERS" "$MESSAGES" "$ENS_VAR/b8l-blind.txt"
for mode in lookup blind; do
  for ((round = 0; round < ROUNDS; round++)); do
    awk -v r="$round" -v n="$ROUNDS" 'NR % n == r' "$ENS_VAR/b8l-$mode.txt" > "$ENS_VAR/b8l-$mode.$round.txt"
  done
done
hz=$(getconf CLK_TCK)
# role_ticks ROLE: CPU ticks so far of the stack's processes in that role.
role_ticks() {
  local -a pids
  mapfile -t pids < <(stack_pids "$1")
  cpu_ticks "${pids[@]}"
}
# measure MODE ROUND: prints "rps p50 p99 total unexpected fcgi_ms apns_ms mariadb_ms"
measure() {
  local file=$ENS_VAR/b8l-$1.$2.txt before_f before_a before_m out f a m
  wait_for_empty_spool
  before_f=$(role_ticks fcgi) before_a=$(role_ticks sender) before_m=$(role_ticks mariadb)
  out=$(timeout $((SECONDS_PER_RUN + 30)) wrk -t2 -c16 -d"${SECONDS_PER_RUN}s" --latency -s bench/b8-graph.lua "$BENCH_URL_BASE/graph/" -- "$file" 2>"$ENS_VAR/b8l-errors")
  wait_for_empty_spool
  f=$(($(role_ticks fcgi) - before_f)) a=$(($(role_ticks sender) - before_a)) m=$(($(role_ticks mariadb) - before_m))
  awk -v f="$f" -v a="$a" -v m="$m" -v hz="$hz" -v errors="$(wc -l < "$ENS_VAR/b8l-errors")" '
    /Requests\/sec/ {rps=$2} $1 == "50%" {p50=$2} $1 == "99%" {p99=$2} /requests in/ {total=$1}
    END {printf "%s %s %s %s %s %.3f %.3f %.3f", rps, p50, p99, total, errors, f/hz*1000/total, a/hz*1000/total, m/hz*1000/total}' <<<"$out"
}
lookup_rates=() blind_rates=() rate_ratios=() cpu_ratios=()
for ((round = 0; round < ROUNDS; round++)); do
  if ((round % 2 == 0)); then L=$(measure lookup "$round"); B=$(measure blind "$round"); else B=$(measure blind "$round"); L=$(measure lookup "$round"); fi
  read -r l_rps l_p50 l_p99 _ l_err l_f l_a l_m <<<"$L"
  read -r b_rps b_p50 b_p99 _ b_err b_f b_a b_m <<<"$B"
  l_cpu=$(python3 -c "print(f'{$l_f + $l_a + $l_m:.3f}')") b_cpu=$(python3 -c "print(f'{$b_f + $b_a + $b_m:.3f}')")
  echo "B8-blind round $((round + 1)): blind $b_rps/s (p50 $b_p50, p99 $b_p99; $b_err unexpected; CPU ms: ens-fcgi $b_f, ens-sender $b_a, MariaDB $b_m = $b_cpu), lookup $l_rps/s (p50 $l_p50, p99 $l_p99; $l_err unexpected; CPU ms: ens-fcgi $l_f, ens-sender $l_a, MariaDB $l_m = $l_cpu)"
  lookup_rates+=("$l_rps") blind_rates+=("$b_rps") rate_ratios+=("$(ratio "$b_rps" "$l_rps")") cpu_ratios+=("$(ratio "$b_cpu" "$l_cpu")")
done
printf 'B8-blind result: blind %.0f notifications/s, lookup %.0f/s (medians of %d rounds); rate ratio %.3f (target >= 1.5), CPU per notification ratio %.3f (target <= 0.6); medians of the rounds\n' \
  "$(median "${blind_rates[@]}")" "$(median "${lookup_rates[@]}")" "$ROUNDS" "$(median "${rate_ratios[@]}")" "$(median "${cpu_ratios[@]}")"
figure b8blind.rate_over_lookup "$(median "${rate_ratios[@]}")"
figure b8blind.cpu_over_lookup "$(median "${cpu_ratios[@]}")"
