#!/usr/bin/env bash
# make bench: starts a private stack (var/bench, port 8543), runs every benchmark,
# stops the stack. Loopback only; every run is bounded in time.
set -euo pipefail
cd "$(dirname "$0")/.."
export ENS_VAR=${ENS_VAR:-$PWD/var/bench} ENS_PORT=${ENS_PORT:-8543} ENS_BIN=${ENS_BIN:-$PWD/.build/release}
# No key refilling beside the measurements; B3 fills and empties the pool itself.
export ENS_KEY_REFILL=0
# B6 replays callbacks for a few dozen users far faster than a mailbox gets mail: the
# per-record push cap would drop most of them unworked, so it is lifted here.
export ENS_MAX_NOTIFICATIONS_PER_MINUTE=100000
trap 'scripts/stack.sh down' EXIT
scripts/stack.sh up
# b8-graph alternates Graph notifications with B6's Exchange callbacks (B8 is judged
# against B6 of the same run); b6-callbacks alone also gives /alive beside it.
# b9-cluster starts a cluster of its own (scripts/cluster.sh, var/cluster-3) beside this
# stack, which sits idle meanwhile.
for bench in ${BENCHES:-b1-alive b2-status b1b2-fronts b3-publickey b4-push b4-fcm b5-reap b6-callbacks b6-private b6-split b8-graph b8-blind b7-timing b9-cluster}; do
  echo "== $bench"
  "bench/$bench.sh"
done
