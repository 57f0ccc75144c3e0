#!/usr/bin/env bash
# B8: Microsoft Graph change notifications through nginx, against B6 (Exchange callbacks)
# in the same run. Each B8 request is a real Graph notification batch (one new message)
# for a registered Exchange Online user: ENS routes it by subscription, checks
# clientState, claims the message id against redelivery, fetches sender and subject from
# the Graph simulator ($select, ENS's application token), and hands the notification to
# ens-sender (durably spooled) before answering 202. No message is sent twice, so none is
# skipped as a duplicate. B6 and B8 alternate in BENCH_ROUNDS rounds (default 3) of
# BENCH_SECONDS each (default 5), the order swapped every round, so a change in this
# host's speed during the run falls on both; reports notifications/s, p50/p99 time to
# the 202, and the median of the rounds' B8/B6 ratios (target: >= 1, p99 <= 1 s).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
USERS=${B8_USERS:-50}
MESSAGES=${B8_MESSAGES:-400}
ROUNDS=${BENCH_ROUNDS:-3}
SECONDS_PER_RUN=${BENCH_SECONDS:-5}
ENS_TOKEN=$(scripts/stack.sh token bench-b8)
export ENS_TOKEN
fill_key_pool $((2 * USERS + 10))
python3 bench/devices.py b6-setup "$USERS" "$ENS_VAR/b8-ews.txt"
python3 bench/devices.py b8-setup "$USERS" "$MESSAGES" "$ENS_VAR/b8-graph.txt"
# Each round replays its own share of the Graph messages (a message sent again is a duplicate).
for ((round = 0; round < ROUNDS; round++)); do
  awk -v r="$round" -v n="$ROUNDS" 'NR % n == r' "$ENS_VAR/b8-graph.txt" > "$ENS_VAR/b8-graph.$round.txt"
done

ews=() graph=() ratios=()
for ((round = 0; round < ROUNDS; round++)); do
  run_pair "$round" bench/b6-callbacks.lua /ews/ "$ENS_VAR/b8-ews.txt" bench/b8-graph.lua /graph/ "$ENS_VAR/b8-graph.$round.txt"
  read -r e_rps e_p50 e_p99 _ e_errors <<<"$PAIR_A"
  read -r g_rps g_p50 g_p99 g_total g_errors <<<"$PAIR_B"
  [ "$g_total" -le "$(wc -l < "$ENS_VAR/b8-graph.$round.txt")" ] || echo "B8 warning: round $round sent more requests than it has messages; the rest were duplicates"
  r=$(ratio "$g_rps" "$e_rps")
  echo "B8 round $((round + 1)): Graph $g_rps/s (p50 $g_p50, p99 $g_p99; $g_errors unexpected), EWS $e_rps/s (p50 $e_p50, p99 $e_p99; $e_errors unexpected): ratio $r"
  ews+=("$e_rps") graph+=("$g_rps") ratios+=("$r")
done
printf 'B6 result: new-mail callbacks %.0f/s (median of %d rounds beside B8)\n' "$(median "${ews[@]}")" "$ROUNDS"
printf 'B8 result: Graph notifications %.0f/s (median of %d rounds; p50/p99 per round above); B6 EWS callbacks %.0f/s; ratio %.3f (median of the rounds)\n' \
  "$(median "${graph[@]}")" "$ROUNDS" "$(median "${ews[@]}")" "$(median "${ratios[@]}")"
figure b8.graph_over_b6 "$(median "${ratios[@]}")"
