#!/usr/bin/env bash
# B1: /alive through nginx -> FastCGI -> MariaDB check, against nginx answering
# 200 by itself in the same server block, in the same run. Prints both rates, their
# ratio (median of interleaved rounds, which cancels most of a noisy host's drift),
# and the responders' RSS under load.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
ROUNDS=${BENCH_ROUNDS:-3}
SECONDS_PER_RUN=${BENCH_SECONDS:-5}

wrk_rps /alive 2 >/dev/null  # warm-up: connections, caches
statics=(); alives=(); ratios=(); rss=0
for round in $(seq "$ROUNDS"); do
  s=$(wrk_rps /bench/static "$SECONDS_PER_RUN")
  wrk_rps /alive "$SECONDS_PER_RUN" > /tmp/ens-b1-alive.$$ &
  load=$!
  sleep $((SECONDS_PER_RUN / 2))
  r=$(max_rss_mb "ens-fcgi --worker .*$ENS_VAR/ens.conf")
  breakdown=$(memory_breakdown_mb "ens-fcgi --worker .*$ENS_VAR/ens.conf")
  wait $load
  a=$(cat /tmp/ens-b1-alive.$$); rm -f /tmp/ens-b1-alive.$$
  statics+=("$s"); alives+=("$a"); ratios+=("$(ratio "$a" "$s")")
  rss=$(python3 -c "print(max($rss, $r))")
  printf 'B1 round %d: nginx static %8.0f req/s   /alive via FastCGI %8.0f req/s   ratio %s\n' "$round" "$s" "$a" "${ratios[-1]}"
done
printf 'B1 result: static %.0f req/s, /alive %.0f req/s (medians); ratio %s (median; target >= 0.40)\n' \
  "$(median "${statics[@]}")" "$(median "${alives[@]}")" "$(median "${ratios[@]}")"
printf 'B1 responder RSS under load: %s MB max per worker process (target <= 20 MB); last round: %s\n' "$rss" "$breakdown"
figure b1.alive_over_static "$(median "${ratios[@]}")"
figure b1.worker_rss_mb "$rss"
