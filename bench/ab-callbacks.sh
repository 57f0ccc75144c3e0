#!/usr/bin/env bash
# B6 for two builds of ENS in one run: each build on a stack of its own (AB_BIN_A on
# port AB_PORT_A, AB_BIN_B on AB_PORT_B; var/ab-a and var/ab-b), the same number of
# registered users on each, and B6's Exchange new-mail callbacks replayed against one
# and then the other, the order swapped every round, so a change in this host's speed
# during the run falls on both. For each run: callbacks/s, p50/p99, and CPU per
# callback of ens-fcgi, ens-sender, MariaDB and nginx (from /proc, from before the run
# until the spool has drained after it, so each run pays for its own pushes; the
# simulators and wrk are not counted), and MariaDB's statements and commits per
# callback over the same span. Ends with the medians of the rounds' B/A ratios.
# AB_KIND=heartbeat replays each subscription's StatusEvent instead (the same callback
# with the NewMailEvent replaced, as bench/capacity.py's heartbeats), and counts the CPU
# until a second after the run, so each side's batched writes fall in its own run.
# AB_PACE=RATE sends them at RATE a second at Poisson times (bench/paced.py), as the
# capacity bench paces its Exchange callbacks (67/s), instead of back to back.
#
#   AB_BIN_A=/work/old/.build/release AB_BIN_B=.build/release bench/ab-callbacks.sh
#
# Starts and stops both stacks itself. BENCH_ROUNDS (default 3) rounds of
# BENCH_SECONDS (default 5); B6_USERS users (default 50) on each stack. The same build
# twice, with AB_MARIADB_OPTIONS_A or _B (extra mariadbd options, ENS_MARIADB_OPTIONS of
# scripts/stack.sh), compares MariaDB settings instead.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
A_BIN=$(readlink -f "${AB_BIN_A:?the directory of the first build: its ens-fcgi, ens-sender (ens-apns in a release before 0.4.0) and ens-cron}")
B_BIN=$(readlink -f "${AB_BIN_B:?the directory of the second build}")
A_PORT=${AB_PORT_A:-9543} B_PORT=${AB_PORT_B:-9643}
USERS=${B6_USERS:-50}
KIND=${AB_KIND:-mail}
case $KIND in mail | heartbeat) ;; *) echo "ab-callbacks: AB_KIND is mail or heartbeat, not $KIND" >&2; exit 2 ;; esac
ROUNDS=${BENCH_ROUNDS:-3}
SECONDS_PER_RUN=${BENCH_SECONDS:-5}
export ENS_KEY_REFILL=0 ENS_MAX_NOTIFICATIONS_PER_MINUTE=100000
source bench/lib.sh
hz=$(getconf CLK_TCK)

# use SIDE: points ENS_VAR, ENS_PORT, ENS_BIN and the bench URL at side a or b.
use() {
  if [ "$1" = a ]; then
    ENS_PORT=$A_PORT ENS_BIN=$A_BIN ENS_MARIADB_OPTIONS=${AB_MARIADB_OPTIONS_A:-}
  else
    ENS_PORT=$B_PORT ENS_BIN=$B_BIN ENS_MARIADB_OPTIONS=${AB_MARIADB_OPTIONS_B:-}
  fi
  ENS_VAR=$ROOT/var/ab-$1 BENCH_URL_BASE=https://127.0.0.1:$ENS_PORT
  export ENS_VAR ENS_PORT ENS_BIN ENS_MARIADB_OPTIONS BENCH_URL_BASE
}
down() { for side in a b; do use "$side"; scripts/stack.sh down >/dev/null 2>&1 || true; done; }
trap down EXIT
for side in a b; do
  use "$side"
  scripts/stack.sh up >/dev/null
  ENS_TOKEN=$(scripts/stack.sh token "bench-ab-$side")
  export ENS_TOKEN
  fill_key_pool $((USERS + 10))
  python3 bench/devices.py b6-setup "$USERS" "$ENS_VAR/ab-callbacks.txt" >/dev/null
  if [ "$KIND" = heartbeat ]; then
    python3 - "$ENS_VAR/ab-callbacks.txt" <<'PY'
import sys
sys.path.insert(0, "bench")
from capacity import status_event
for line in open(sys.argv[1]):
    if line.strip():
        body = line.rstrip("\n").split("\t")[1]
        text = status_event(open(body).read())
        assert "StatusEvent" in text and "NewMailEvent" not in text, body
        open(body, "w").write(text)
PY
  fi
done

role_ticks() {
  local -a pids
  mapfile -t pids < <(stack_pids "$1")
  cpu_ticks "${pids[@]}"
}
# load: B6's callbacks against the current side, back to back (wrk), or at AB_PACE a
# second at Poisson times (bench/paced.py); prints "rps p50 p99 requests unexpected".
load() {
  local out
  if [ -n "${AB_PACE:-}" ]; then
    out=$(timeout $((SECONDS_PER_RUN + 60)) python3 bench/paced.py "$ENS_VAR/ab-callbacks.txt" "$AB_PACE" "$SECONDS_PER_RUN" 2>"$ENS_VAR/ab-errors")
    read -r rps p50 p99 _ <<<"$out"
    printf '%s %s %s %s %d\n' "$rps" "$p50" "$p99" "$(python3 -c "print(round($rps * $SECONDS_PER_RUN))")" "$(wc -l < "$ENS_VAR/ab-errors")"
  else
    out=$(timeout $((SECONDS_PER_RUN + 30)) wrk -t2 -c16 -d"${SECONDS_PER_RUN}s" --latency -s bench/b6-callbacks.lua \
      "$BENCH_URL_BASE/ews/" -- "$ENS_VAR/ab-callbacks.txt" 2>"$ENS_VAR/ab-errors")
    awk -v errors="$(wc -l < "$ENS_VAR/ab-errors")" '/Requests\/sec/ {rps=$2} $1 == "50%" {p50=$2} $1 == "99%" {p99=$2} /requests in/ {total=$1}
      END {printf "%s %s %s %s %d\n", rps, p50, p99, total, errors}' <<<"$out"
  fi
}
# mariadb_counts: MariaDB's statements and commits so far on the current side's server
# ("statements commits": Questions, which counts each prepared statement's execution,
# and Handler_commit, one per transaction committed, autocommitted or not).
mariadb_counts() {
  mariadb --no-defaults -S "$ENS_VAR/run/mysqld.sock" -uroot -N -e \
    "SELECT variable_value FROM information_schema.global_status WHERE variable_name IN ('QUESTIONS', 'HANDLER_COMMIT')
     ORDER BY variable_name = 'HANDLER_COMMIT'" | paste -sd' '
}
# measure SIDE: prints "rps p50 p99 fcgi_ms sender_ms mariadb_ms nginx_ms unexpected
# statements_per_callback commits_per_callback" (the counters' second query taken out).
measure() {
  use "$1"
  local before=() after=() role rps p50 p99 total errors counts_before counts_after
  wait_for_empty_spool
  for role in fcgi sender mariadb nginx; do before+=("$(role_ticks "$role")"); done
  counts_before=$(mariadb_counts)
  read -r rps p50 p99 total errors <<<"$(load)"
  wait_for_empty_spool
  [ "$KIND" = heartbeat ] && sleep 1.5
  counts_after=$(mariadb_counts)
  for role in fcgi sender mariadb nginx; do after+=("$(role_ticks "$role")"); done
  read -r q0 c0 <<<"$counts_before"
  read -r q1 c1 <<<"$counts_after"
  awk -v hz="$hz" -v f=$((after[0] - before[0])) -v a=$((after[1] - before[1])) -v m=$((after[2] - before[2])) \
      -v n=$((after[3] - before[3])) -v rps="$rps" -v p50="$p50" -v p99="$p99" -v total="$total" -v errors="$errors" \
      -v q=$((q1 - q0 - 1)) -v c=$((c1 - c0)) '
    BEGIN {ms = hz / 1000 * total; printf "%s %s %s %.3f %.3f %.3f %.3f %d %.2f %.2f", rps, p50, p99, f/ms, a/ms, m/ms, n/ms, errors,
      q/total, c/total}'
}

declare -A runs
ratios_rate=() ratios_cpu=()
for ((round = 0; round < ROUNDS; round++)); do
  if ((round % 2 == 0)); then order=(a b); else order=(b a); fi
  for side in "${order[@]}"; do runs[$side]=$(measure "$side"); done
  for side in a b; do
    read -r rps p50 p99 f a m n errors statements commits <<<"${runs[$side]}"
    printf 'AB round %d %s: %s callbacks/s (p50 %s, p99 %s; %s unexpected); CPU ms per callback: ens-fcgi %s, ens-sender %s, MariaDB %s, nginx %s; the three ENS-side together %.3f; MariaDB statements %s, commits %s per callback\n' \
      $((round + 1)) "${side^^}" "$rps" "$p50" "$p99" "$errors" "$f" "$a" "$m" "$n" "$(python3 -c "print($f + $a + $m)")" "$statements" "$commits"
  done
  read -r ra _ _ fa aa ma _ _ <<<"${runs[a]}"
  read -r rb _ _ fb ab mb _ _ <<<"${runs[b]}"
  ratios_rate+=("$(ratio "$rb" "$ra")")
  ratios_cpu+=("$(python3 -c "print(f'{($fb + $ab + $mb) / ($fa + $aa + $ma):.3f}')")")
done
printf 'AB result: B/A callbacks/s %s (median of %s), CPU per callback (ens-fcgi + ens-sender + MariaDB) %s (median of %s)\n' \
  "$(median "${ratios_rate[@]}")" "${ratios_rate[*]}" "$(median "${ratios_cpu[@]}")" "${ratios_cpu[*]}"
