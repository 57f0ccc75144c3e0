#!/usr/bin/env bash
# Capacity: users per core of the whole stack. bench/capacity.py registers a sample of
# users (Exchange and Graph, APNs and FCM devices) and then sends, for SECONDS, what
# CAP_USERS users would send at the peak hour (check-ins, Exchange new-mail callbacks
# and heartbeats, Graph notifications, registrations and unregistrations; the model and
# its defaults are in bench/capacity.py and docs/scaling.md), measuring every process's
# CPU. Users per core counts ens-fcgi, nginx, MariaDB, ens-sender and ens-cron's key
# generation only: the simulators (Exchange, Graph, APNs, FCM) and the load generator
# are printed beside them and excluded. Targets: >= 300,000 users per core, p99 of
# every class < 50 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
export SECONDS_WINDOW=${BENCH_SECONDS:-60}
ENS_TOKEN=$(scripts/stack.sh token bench-capacity)
export ENS_TOKEN ENS_BIN
requests=$ENS_VAR/capacity.json
sample=${CAP_SAMPLE:-200}
churn=${CAP_CHURN:-40}
# Keys for the sample, the users who leave, and the window's new users (a few dozen).
keys=$((sample + churn + 30))
fill_key_pool "$keys"
if [ ! -s "$requests" ] || [ "${CAP_FRESH:-1}" = 1 ]; then
  CAP_SECONDS=$SECONDS_WINDOW python3 bench/capacity.py setup "$requests"
fi
fill_key_pool "$keys"
pids() { stack_pids "$1" | paste -sd, -; }
CAP_PIDS="ens-fcgi=$(pids fcgi) nginx=$(pids nginx) mariadb=$(pids mariadb) ens-sender=$(pids sender)"
CAP_PIDS+=" apns-simulator=$(pids apns-sim) fcm-simulator=$(pids fcm-sim) ews-simulator=$(pids ews-sim) graph-simulator=$(pids graph-sim)"
export CAP_PIDS CAP_KEY_TARGET=$keys
wait_for_empty_spool
# The host's speed in the same run: this host's has varied fourfold between days.
CAP_RSA_PER_SECOND=$(openssl speed -seconds 3 rsa2048 2>/dev/null | awk '/^rsa 2048 bits/ {print $(NF-1)}')
export CAP_RSA_PER_SECOND
CAP_SECONDS=$SECONDS_WINDOW python3 bench/capacity.py run "$requests"
# What one request of each main class costs each process (each class alone).
if [ "${CAP_SPLIT:-1}" = 1 ]; then python3 bench/capacity.py split "$requests"; fi
