# shellcheck shell=bash
# What scripts/cluster-chaos.sh and scripts/rolling-upgrade.sh share, sourced by both
# after setting RUN_NAME (the prefix of their messages), ROOT and SHORT (1 for --short).
#
# cluster_environment FULL_KEY_POOL: the cluster's place (CLUSTER_ID, default 2: its
# directory and port) and the settings both runs need, exported for scripts/cluster.sh
# and scripts/cluster_load.py; the key pool is 40 in a short run, FULL_KEY_POOL in a
# full one (ENS_KEY_POOL wins).
cluster_environment() {
  export CLUSTER_ID=${CLUSTER_ID:-2}
  export ENS_BIN=${ENS_BIN:-$ROOT/.build/release}
  if [ "$CLUSTER_ID" = 0 ]; then export CLUSTER_VAR=${CLUSTER_VAR:-$ROOT/var/cluster}; else export CLUSTER_VAR=${CLUSTER_VAR:-$ROOT/var/cluster-$CLUSTER_ID}; fi
  export CLUSTER_PORT=${CLUSTER_PORT:-$((30443 - 100 * CLUSTER_ID))}
  export ENS_VAR=$CLUSTER_VAR ENS_PORT=$CLUSTER_PORT
  # Exchange's retry schedule 10x faster (30 s, 60 s ... become 3 s, 6 s ...), so a
  # callback that failed during a fault is redelivered within the run.
  export ENS_EWS_RETRY_SCALE=0.1
  # Many records from one token and one client address within the hour.
  export ENS_RECORDS_PER_TOKEN_PER_HOUR=100000
  # Every registration takes a new RSA key from the pool (0.1-0.7 s each to make here):
  # a pool large enough for the run's registrations, filled before the load starts.
  if [ "$SHORT" = 1 ]; then export ENS_KEY_POOL=${ENS_KEY_POOL:-40}; else export ENS_KEY_POOL=${ENS_KEY_POOL:-$1}; fi
  # shellcheck disable=SC2034 # CLUSTER and LOAD are the sourcing script's
  CLUSTER=$ROOT/scripts/cluster.sh
  # shellcheck disable=SC2034
  LOAD=(python3 "$ROOT/scripts/cluster_load.py")
  export CLUSTER_SH=$CLUSTER
}

say() { printf '%s: %s\n' "$RUN_NAME" "$*"; }
die() { printf '%s: error: %s\n' "$RUN_NAME" "$*" >&2; exit 2; }
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$2"; }
# json FILE EXPR: a Python expression over the JSON object in FILE (as j).
json() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
