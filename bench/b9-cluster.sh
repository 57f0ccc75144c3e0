#!/usr/bin/env bash
# B9: the cluster (scripts/cluster.sh with CLUSTER_ID 3: var/cluster-3, load balancer on
# 30143). Through the load balancer, on the same three-node Galera cluster in the same
# run, alternating in rounds: registrations/s (/registerdevicev2 with sealed Basic
# credentials and force=1 for users made beforehand: ENS opens them, autodiscovers,
# subscribes anew at the Exchange simulator and commits; new users' RSA keys are not
# the measure: they come from a pool that ens-cron fills at about 5 keys/s here) and
# Exchange new-mail callbacks/s (B6's replayed SendNotifications) with both ENS hosts
# behind the load balancer, and with host 1 alone. On this 2-core machine the ratio is
# reported, not required. Then failover under a steady check-in load: SIGKILL of every
# process of host 2, and (root only) Galera node 1, host 1's first node, cut from its
# peers; each: requests failed and the first failed request to the first good one
# (target <= 5 s), and to the first good one after the last failure; during the partition
# also straight to host 1 (its database client moving to another node, without the load
# balancer's help).
# Started by bench/run.sh beside the single-host stack (which it does not use) or alone.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CLUSTER_ID=3
export CLUSTER_VAR=$ROOT/var/cluster-3 CLUSTER_PORT=30143
export ENS_VAR=$CLUSTER_VAR ENS_PORT=$CLUSTER_PORT ENS_BIN=${ENS_BIN:-$ROOT/.build/release}
export BENCH_URL_BASE=https://127.0.0.1:$CLUSTER_PORT
export CLUSTER_SH=$ROOT/scripts/cluster.sh
# As bench/run.sh: callbacks far faster than a mailbox gets mail; registrations from one
# token and address; registrations limited by the hosts, not by the per-process cap
# (four threads each).
export ENS_MAX_NOTIFICATIONS_PER_MINUTE=100000 ENS_RECORDS_PER_TOKEN_PER_HOUR=1000000
export ENS_KEY_POOL=${B9_KEY_POOL:-200} ENS_MAX_CONCURRENT_REGISTRATIONS=4 ENS_KEY_REFILL=0
unset ENS_POLICY_URL
source bench/lib.sh
SECONDS_PER_RUN=${BENCH_SECONDS:-8}
ROUNDS=${B9_ROUNDS:-2}
USERS=${B6_USERS:-50}
REG_THREADS=${B9_REGISTER_THREADS:-8}
REG_USERS=${B9_REGISTER_USERS:-64}
CLUSTER=$ROOT/scripts/cluster.sh
LOAD=(python3 "$ROOT/scripts/cluster_load.py")
WORK=$CLUSTER_VAR/b9

trap '"$CLUSTER" down >/dev/null 2>&1 || true' EXIT
"$CLUSTER" up >/dev/null
mkdir -p "$WORK"
ENS_TOKEN=$("$CLUSTER" token bench-b9)
export ENS_TOKEN
python3 bench/devices.py b6-setup "$USERS" "$WORK/callbacks.txt"

# Both hosts' spools empty (each host's own /metrics; the load balancer would ask one).
wait_for_empty_spools() {
  local h port
  for h in 1 2; do
    port=$((CLUSTER_PORT + 10 + h))
    for _ in $(seq 600); do
      curl -sk -H "Authorization: Bearer $(cat "$ENS_VAR/secrets/metrics.token")" "https://127.0.0.1:$port/metrics" | awk '/^ens_push_spool_depth[ {]/ {d += $NF} END {exit d > 0}' && break
      sleep 0.1
    done
  done
}

callbacks() { # callbacks/s of one bounded wrk run
  local out
  wait_for_empty_spools
  out=$(timeout $((SECONDS_PER_RUN + 30)) wrk -t2 -c16 -d"${SECONDS_PER_RUN}s" -s bench/b6-callbacks.lua "$BENCH_URL_BASE/ews/" -- "$WORK/callbacks.txt" 2>>"$WORK/wrk-errors.txt")
  awk '/Requests\/sec/ {print $2}' <<<"$out"
}

registrations() { # registrations/s: 15 for each of 64 users (made by the first run), 4x the
  # wrk run's time at most
  "${LOAD[@]}" register-rate --seconds $((4 * SECONDS_PER_RUN)) --threads "$REG_THREADS" --users "$REG_USERS" --per-user 15 \
    --users-file "$WORK/reg-users.json" >"$WORK/reg.json"
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["rps"], j["failed"], j["p50_ms"])' "$WORK/reg.json"
}

measure() { # measure HOSTS: "callbacks/s registrations/s registration-failures p50"
  "$CLUSTER" lb "$1"
  echo "$(callbacks) $(registrations)"
}

two_cb=(); one_cb=(); two_reg=(); one_reg=(); notes=()
for round in $(seq 0 $((ROUNDS - 1))); do
  if ((round % 2 == 0)); then order=("1,2" "1"); else order=("1" "1,2"); fi
  for hosts in "${order[@]}"; do
    read -r cb reg regfail regp50 <<<"$(measure "$hosts")"
    if [ "$hosts" = 1 ]; then one_cb+=("$cb"); one_reg+=("$reg"); else two_cb+=("$cb"); two_reg+=("$reg"); fi
    notes+=("round $round, hosts $hosts: callbacks $cb/s, registrations $reg/s ($regfail failed, p50 ${regp50} ms)")
  done
done
"$CLUSTER" lb 1,2
printf 'B9 detail: %s\n' "${notes[@]}"
unexpected=$(wc -l < "$WORK/wrk-errors.txt" 2>/dev/null || echo 0)
cb2=$(median "${two_cb[@]}"); cb1=$(median "${one_cb[@]}"); reg2=$(median "${two_reg[@]}"); reg1=$(median "${one_reg[@]}")
printf 'B9 result: callbacks %.0f/s with two hosts, %.0f/s with one (ratio %s); registrations %.1f/s with two hosts, %.1f/s with one (ratio %s); %s unexpected callback answers\n' \
  "$cb2" "$cb1" "$(ratio "$cb2" "$cb1")" "$reg2" "$reg1" "$(ratio "$reg2" "$reg1")" "$unexpected"
figure b9.callbacks_two_over_one "$(ratio "$cb2" "$cb1")"
figure b9.unexpected_answers "$unexpected"

# --- failover --------------------------------------------------------------------------------
python3 bench/devices.py b2-setup 20 "$WORK/checkins.txt"
failover() { # failover NAME FAULT RESTORE [HOST]: check-ins at 50/s through the load
  # balancer (and at 20/s straight to HOST's nginx, when given); FAULT at +5 s, RESTORE at +20 s
  local name=$1 dir=$WORK/$1 t0 pids=()
  rm -rf "$dir"; mkdir -p "$dir/direct"; cp "$WORK/checkins.txt" "$dir/"; cp "$WORK/checkins.txt" "$dir/direct/"
  "${LOAD[@]}" mix "$dir" --seconds 35 --checkin-rate 50 --threads 4 --register-rate 0 --mail-threads 0 >/dev/null &
  pids+=($!)
  if [ -n "${4:-}" ]; then
    ENS_PORT=$((CLUSTER_PORT + 10 + $4)) "${LOAD[@]}" mix "$dir/direct" --seconds 35 --checkin-rate 20 --threads 2 \
      --register-rate 0 --mail-threads 0 >/dev/null &
    pids+=($!)
  fi
  sleep 5
  t0=$(date +%s.%N)
  eval "$2" >/dev/null
  sleep 15
  eval "$3" >/dev/null
  wait "${pids[@]}"
  local t1; t1=$(date +%s.%N)
  "${LOAD[@]}" window "$dir" "$t0" "$t1" >"$dir/window.json"
  "${LOAD[@]}" window "$dir/direct" "$t0" "$t1" >"$dir/direct.json"
  python3 - "$dir/window.json" "$dir/direct.json" "$name" "${4:-}" <<'PY'
import json, sys
def line(j, what):
    if not j.get("sent"):
        return None
    if not j["failed"]:
        return f"{what}: 0 of {j['sent']} check-ins failed; failover time 0 s"
    verdict = "met" if (j["first_good_after"] if j["first_good_after"] is not None else 99) <= 5 else "MISSED"
    by = ", ".join(f"{k}: {v}" for k, v in j["by"].items())
    return (f"{what}: {j['failed']} of {j['sent']} check-ins failed ({by}); first failed to first good "
            f"{j['first_good_after']} s (target <= 5 s: {verdict}), to the first good after the last failure {j['recovered_after']} s")
lb = json.load(open(sys.argv[1])).get("checkin", {})
direct = json.load(open(sys.argv[2])).get("checkin", {})
parts = [line(lb, "through the load balancer")]
if sys.argv[4]:
    parts.append(line(direct, f"straight to host {sys.argv[4]}"))
print(f"B9 failover ({sys.argv[3]}): " + "; ".join(p for p in parts if p))
PY
}
failover host-kill "$CLUSTER host-kill 2" "$CLUSTER host-start 2"
if [ "$(id -u)" -eq 0 ]; then
  failover node-partition "$CLUSTER partition 1" "$CLUSTER heal 1; $CLUSTER wait-synced 3" 1
else
  echo "B9 failover (node-partition): skipped (needs root)"
fi
