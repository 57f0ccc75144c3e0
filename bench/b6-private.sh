#!/usr/bin/env bash
# B6 in `encrypted` privacy mode against `preview` (docs/privacy.md), in the same run:
# two sets of users, one of each mode, replay their real Exchange new-mail callbacks
# through nginx. An `encrypted` push costs an ephemeral P-256 key, an ECDH, HKDF and
# AES-GCM on the responder; both modes log each notification (history). The two
# alternate in BENCH_ROUNDS rounds (default 3) of BENCH_SECONDS each (default 5), the
# order swapped every round; reports callbacks/s of each and the median of the rounds'
# encrypted/preview ratios (target: >= 0.85).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
USERS=${B6_USERS:-50}
ROUNDS=${BENCH_ROUNDS:-3}
SECONDS_PER_RUN=${BENCH_SECONDS:-5}
ENS_TOKEN=$(scripts/stack.sh token bench-b6-private)
export ENS_TOKEN
fill_key_pool $((2 * USERS + 10))
python3 bench/devices.py b6-setup "$USERS" "$ENS_VAR/b6-preview.txt" preview
python3 bench/devices.py b6-setup "$USERS" "$ENS_VAR/b6-encrypted.txt" encrypted

compare_callbacks B6-private preview "$ENS_VAR/b6-preview.txt" encrypted "$ENS_VAR/b6-encrypted.txt"
printf 'B6-private result: encrypted callbacks %.0f/s, preview %.0f/s (medians of %d rounds); ratio %.3f (median of the rounds; target >= 0.85)\n' \
  "$MEDIAN_B" "$MEDIAN_A" "$ROUNDS" "$MEDIAN_RATIO"
figure b6private.encrypted_over_preview "$MEDIAN_RATIO"
