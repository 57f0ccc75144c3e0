# shellcheck shell=bash
# Shared helpers for the benchmark scripts (sourced, not run).
# Every load generator here targets 127.0.0.1 only and stops by itself.

BENCH_URL_BASE=${BENCH_URL_BASE:-https://127.0.0.1:${ENS_PORT:-8543}}

# wrk_rps PATH SECONDS [extra wrk args]: prints requests/s of a bounded wrk run.
wrk_rps() {
  local path=$1 seconds=$2; shift 2
  timeout $((seconds + 30)) wrk -t2 -c64 -d"${seconds}s" "$@" "$BENCH_URL_BASE$path" 2>&1 \
    | awk '/Requests\/sec/ {print $2} /Non-2xx/ {print "non2xx " $0 > "/dev/stderr"}'
}

# figure NAME VALUE: one measured figure, printed, and recorded for `make bench-check`
# (bench/check-thresholds.py compares the run's figures with bench/thresholds/).
figure() {
  printf 'figure %s %s\n' "$1" "$2"
  if [ -n "${BENCH_FIGURES:-}" ]; then printf '%s %s\n' "$1" "$2" >> "$BENCH_FIGURES"; fi
}

median() { python3 -c 'import statistics,sys; print(round(statistics.median(float(x) for x in sys.argv[1:]), 4))' "$@"; }

ratio() { python3 -c "import sys; print(f'{float(sys.argv[1])/float(sys.argv[2]):.3f}')" "$1" "$2"; }

# max_rss_mb PATTERN: largest RSS (MB) among processes whose command line matches
# (name the stack's $ENS_VAR in PATTERN: other stacks may run on the same host).
max_rss_mb() {
  local max=0 rss
  for pid in $(pgrep -f "$1"); do
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    [ "${rss:-0}" -gt "$max" ] && max=$rss
  done
  python3 -c "print(f'{$max/1024:.1f}')"
}

# memory_breakdown_mb PATTERN: "private P MB, shared S MB, PSS Q MB" for the first
# process whose command line matches (smaps_rollup): RSS counts shared library pages
# in full in every process; private dirty memory is what the process itself costs.
memory_breakdown_mb() {
  local pid; pid=$(pgrep -f "$1" | head -1)
  awk '/^Private_Dirty:/ {p=$2} /^Shared_Clean:/ {s=$2} /^Pss:/ {q=$2}
       END {printf "private %.1f MB, shared library pages %.1f MB, PSS %.1f MB", p/1024, s/1024, q/1024}' "/proc/$pid/smaps_rollup"
}

# shellcheck source=scripts/sender.sh
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/sender.sh"

# stack_pids fcgi|mariadb|nginx|apache|sender|apns-sim|fcm-sim|ews-sim|graph-sim: the processes of this stack ($ENS_VAR) in that role.
# The sender is ens-sender, or ens-sender where the stack runs an older release's binaries
# (bench/ab-callbacks.sh's AB_BIN_A); `apns` is the role's name before 0.4.0.
stack_pids() {
  case $1 in
    fcgi) pgrep -f "ens-fcgi.*$ENS_VAR/ens.conf" ;;
    mariadb) pgrep -f "mariadbd.*$ENS_VAR/db" ;;
    sender|apns) pgrep -f "$SENDER_PROCESS --config $ENS_VAR/ens.conf" ;;
    apns-sim) pgrep -f "apns_simulator.py --port $((ENS_PORT + 1)) " ;;
    fcm-sim) pgrep -f "fcm_simulator.py --port $((ENS_PORT + 6)) " ;;
    ews-sim) pgrep -f "ews_simulator.py --port $((ENS_PORT + 3)) " ;;
    graph-sim) pgrep -f "graph_simulator.py --port $((ENS_PORT + 8)) " ;;
    apache) pgrep -f "apache2 -f $ENS_VAR/apache.conf" ;;
    nginx) local master; master=$(pgrep -f "nginx -c $ENS_VAR/nginx.conf" | head -1)
           [ -n "$master" ] && { echo "$master"; pgrep -P "$master"; } ;;
  esac
}

# cpu_ticks PID...: clock ticks of CPU (user + system) the processes have used so far.
cpu_ticks() {
  local total=0 ticks pid
  for pid in "$@"; do
    ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)
    total=$((total + ticks))
  done
  echo "$total"
}

# New users take their keys from the pool, and /getpublickey answers 503 when it is
# empty (nothing refills it during a benchmark): fill it for a setup's users first.
fill_key_pool() {
  "$ENS_BIN/ens-cron" keys --target "$1" --config "$ENS_VAR/ens.conf" >/dev/null
}

# Waits (up to a minute) until ens-sender has delivered what the last run spooled, so its
# backlog does not take the next run's CPU.
wait_for_empty_spool() {
  for _ in $(seq 600); do
    curl -sk -H "Authorization: Bearer $(cat "$ENS_VAR/secrets/metrics.token")" "$BENCH_URL_BASE/metrics" | awk '/^ens_push_spool_depth[ {]/ {depth += $NF} END {exit depth > 0}' && return 0
    sleep 0.1
  done
  echo "bench warning: the spool did not drain within a minute" >&2
}

# run_wrk LUA PATH REQUESTS: one bounded wrk run (2 threads, 16 connections,
# SECONDS_PER_RUN) after the spool drained; prints
# "rps p50 p99 total unexpected".
run_wrk() {
  local errors out
  wait_for_empty_spool
  errors=$(mktemp)
  out=$(timeout $((SECONDS_PER_RUN + 30)) wrk -t2 -c16 -d"${SECONDS_PER_RUN}s" --latency -s "$1" "$BENCH_URL_BASE$2" -- "$3" 2>"$errors")
  awk '/Requests\/sec/ {rps=$2} $1 == "50%" {p50=$2} $1 == "99%" {p99=$2} /requests in/ {total=$1}
       END {printf "%s %s %s %s", rps, p50, p99, total}' <<<"$out"
  echo " $(wc -l < "$errors")"
  rm -f "$errors"
}

# run_pair ROUND LUA_A PATH_A REQUESTS_A LUA_B PATH_B REQUESTS_B: one round of two
# alternating measurements, A first in even rounds and B first in odd ones, so a change
# in this host's speed during the run falls on both; sets PAIR_A and PAIR_B to
# run_wrk's output for each (read by the sourcing script, hence SC2034).
# shellcheck disable=SC2034
run_pair() {
  if (($1 % 2 == 0)); then
    PAIR_A=$(run_wrk "$2" "$3" "$4")
    PAIR_B=$(run_wrk "$5" "$6" "$7")
  else
    PAIR_B=$(run_wrk "$5" "$6" "$7")
    PAIR_A=$(run_wrk "$2" "$3" "$4")
  fi
}

# compare_callbacks NAME LABEL_A REQUESTS_A LABEL_B REQUESTS_B: ROUNDS rounds (default 3)
# of B6's callbacks (bench/b6-callbacks.lua) replayed from REQUESTS_A and REQUESTS_B,
# alternating (run_pair); prints one line per round and sets MEDIAN_A and MEDIAN_B
# (callbacks/s) and MEDIAN_RATIO (B/A, the median of the rounds' ratios), read by the
# sourcing script.
# shellcheck disable=SC2034
compare_callbacks() {
  local name=$1 label_a=$2 requests_a=$3 label_b=$4 requests_b=$5 round r
  local a_rps a_p50 a_p99 a_errors b_rps b_p50 b_p99 b_errors
  local -a rates_a=() rates_b=() ratios=()
  for ((round = 0; round < ${ROUNDS:-3}; round++)); do
    run_pair "$round" bench/b6-callbacks.lua /ews/ "$requests_a" bench/b6-callbacks.lua /ews/ "$requests_b"
    read -r a_rps a_p50 a_p99 _ a_errors <<<"$PAIR_A"
    read -r b_rps b_p50 b_p99 _ b_errors <<<"$PAIR_B"
    r=$(ratio "$b_rps" "$a_rps")
    echo "$name round $((round + 1)): $label_b $b_rps/s (p50 $b_p50, p99 $b_p99; $b_errors unexpected), $label_a $a_rps/s (p50 $a_p50, p99 $a_p99; $a_errors unexpected): ratio $r"
    rates_a+=("$a_rps") rates_b+=("$b_rps") ratios+=("$r")
  done
  MEDIAN_A=$(median "${rates_a[@]}") MEDIAN_B=$(median "${rates_b[@]}") MEDIAN_RATIO=$(median "${ratios[@]}")
}
