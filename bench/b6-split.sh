#!/usr/bin/env bash
# B6 with credentials in split form against the older form, in the same run:
# the same users' real Exchange new-mail callbacks through nginx, once to their keyed
# URLs (the credentials read from MailCredentials and opened with the URL's key) and once
# to URLs that carry the credentials themselves (made by Tests/tools/callback_url.py for
# the same records, as subscriptions from before the change have). The two alternate in
# BENCH_ROUNDS rounds (default 3) of BENCH_SECONDS each (default 5), the order swapped
# every round; reports callbacks/s of each and the median of the rounds'
# keyed/carrying ratios (target: >= 0.90).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
USERS=${B6_USERS:-50}
ROUNDS=${BENCH_ROUNDS:-3}
SECONDS_PER_RUN=${BENCH_SECONDS:-5}
ENS_TOKEN=$(scripts/stack.sh token bench-b6-split)
export ENS_TOKEN
fill_key_pool $((USERS + 10))
keyed=$ENS_VAR/b6-keyed.txt carrying=$ENS_VAR/b6-carrying.txt
python3 bench/devices.py b6-setup "$USERS" "$keyed" preview
python3 bench/devices.py b6-carrying "$keyed" "$carrying"

compare_callbacks B6-split carrying "$carrying" keyed "$keyed"
printf 'B6-split result: credentials in the database %.0f callbacks/s, in the URL %.0f/s (medians of %d rounds); ratio %.3f (median of the rounds; target >= 0.90)\n' \
  "$MEDIAN_B" "$MEDIAN_A" "$ROUNDS" "$MEDIAN_RATIO"
figure b6split.database_over_url "$MEDIAN_RATIO"
