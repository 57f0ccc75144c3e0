#!/usr/bin/env bash
# make cluster-chaos: failure tests against a private cluster (scripts/cluster.sh,
# CLUSTER_ID 2: var/cluster-2, load balancer on 30243). Under a steady mix of check-ins,
# registrations and Exchange callbacks through the load balancer (scripts/cluster_load.py):
#
#   1. node-kill   SIGKILL of Galera node 2 (host 2's first node), restarted at its
#                  recovered position (IST) once the others show a cluster of 2
#   2. partition   node 1 (host 1's first node) cut from its peers for 20 s (root only):
#                  a write on it is refused (1047) and never appears; host 1 answers 503
#   3. host-kill   SIGKILL of every process of ENS host 2 (nginx, responders, sender, key
#                  refiller) while APNs refuses with 503, so its spool holds acknowledged
#                  notifications; APNs recovers, host 2 restarts 15 s later on the same spool
#                  (--short: node 2 down 6 s, host 2 down 8 s)
#   4. host-lost   the same, but host 2 stays down: its spool, copied, is drained through
#                  host 1's sender (ens-sender drain --host) once its heartbeat is 60 s old;
#                  then host 2 comes back with its spool emptied
#
# Per fault: requests sent and failed (by kind and answer), how long failures went on
# (first failure to the first success after the last one), and how long the cluster took
# to be Synced again. Afterwards (cluster_load.py verify): no acknowledged notification
# lost, no registration half-applied, repeated deliveries under one collapse id, all
# nodes Synced in a cluster of 3 with the same row counts.
#
#   scripts/cluster-chaos.sh [--short]
#
# --short (make test): a smaller load, node-kill and host-kill only, about 80 s with the
# cluster's start; the whole run takes about 4 minutes. Exit status: 0 all checks passed, 1 a check failed, 2 the run itself
# could not be done. Environment: CLUSTER_ID (default 2), ENS_BIN (default .build/release).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SHORT=0
[ "${1:-}" = --short ] && SHORT=1
RUN_NAME=cluster-chaos
# shellcheck source=scripts/cluster-run.sh
. "$ROOT/scripts/cluster-run.sh"
cluster_environment 150
WORK=$CLUSTER_VAR/chaos

# shellcheck source=scripts/sender.sh
. "$ROOT/scripts/sender.sh"
for bin in "$ENS_BIN/ens-fcgi" "$(sender_bin "$ENS_BIN")" "$ENS_BIN/ens-cron"; do
  [ -x "$bin" ] || die "$bin is missing: build first"
done
mkdir -p "$ROOT/var"
exec 9>"$ROOT/var/.cluster-$CLUSTER_ID.lock"
flock -n 9 || die "another run holds var/.cluster-$CLUSTER_ID.lock"

MIX_PID=
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local status=$?
  if [ -n "$MIX_PID" ]; then kill "$MIX_PID" 2>/dev/null || true; fi
  "$CLUSTER" down >/dev/null 2>&1 || true
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

started=$SECONDS
say "starting a private cluster in $CLUSTER_VAR (load balancer https://localhost:$CLUSTER_PORT)"
"$CLUSTER" up >"$ROOT/var/cluster-$CLUSTER_ID-up.out" 2>&1 || { cat "$ROOT/var/cluster-$CLUSTER_ID-up.out" >&2; die "the cluster did not start"; }
mkdir -p "$WORK"; mv "$ROOT/var/cluster-$CLUSTER_ID-up.out" "$WORK/up.out"
ENS_TOKEN=$("$CLUSTER" token chaos)
export ENS_TOKEN
if [ $SHORT = 1 ]; then
  NODE_DOWN=6 HOST_DOWN=8
  CHECKINS=10 MAILUSERS=6 RATE=(--checkin-rate 10 --register-rate 0.3 --mail-rate 3)
else
  NODE_DOWN=8 HOST_DOWN=15
  CHECKINS=30 MAILUSERS=16 RATE=(--checkin-rate 30 --register-rate 0.5 --mail-rate 6)
fi
keys_at=$SECONDS
"$ENS_BIN/ens-cron" keys --config "$CLUSTER_VAR/ens.conf" >/dev/null 2>&1 || die "the key pool could not be filled"
say "key pool filled to $ENS_KEY_POOL in $((SECONDS - keys_at)) s"
"${LOAD[@]}" setup "$WORK" --checkins "$CHECKINS" --mail-users "$MAILUSERS" >"$WORK/setup.out" 2>&1 \
  || { cat "$WORK/setup.out" >&2; die "the load's users could not be set up"; }
say "setup: $CHECKINS check-in users, $MAILUSERS Exchange users; a steady mix (${RATE[*]//--/})"
rm -f "$WORK/stop"
"${LOAD[@]}" mix "$WORK" --seconds 900 --stop-file "$WORK/stop" "${RATE[@]}" >"$WORK/mix.out" 2>&1 &
MIX_PID=$!
sleep 5

failed_checks=0
results=()
# The load balancer's access log (device API only: callback paths are never logged):
# lb_mark remembers its length at a fault's start; lb_retried counts the requests since
# then that a host failed (503 or no answer) and the other host answered.
LB_LOG=$CLUSTER_VAR/log/lb-access.log
lb_mark() { sleep 1.1; LB_MARK=$(wc -l < "$LB_LOG" 2>/dev/null || echo 0); }
lb_retried() {
  sleep 1.1  # the log is flushed every second
  tail -n +"$((LB_MARK + 1))" "$LB_LOG" 2>/dev/null | awk '/upstream=[^ ]+, / {n++} END {print n + 0}'
}
# report NAME FROM TO DETAIL: one line per fault from the events in [FROM, TO].
report() {
  local name=$1 from=$2 to=$3 detail=$4 f=$WORK/$1.json
  detail="$detail; device API requests the load balancer retried on the other host: $(lb_retried)"
  "${LOAD[@]}" window "$WORK" "$from" "$to" >"$f"
  local line
  line=$(python3 - "$f" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
sent = sum(k["sent"] for k in j.values()); failed = sum(k["failed"] for k in j.values())
parts = []
for kind, k in j.items():
    part = f"{kind} {k['failed']}/{k['sent']}"
    if k["failed"]:
        by = ", ".join(f"{a}: {n}" for a, n in k["by"].items())
        part += f" ({by}; failing for {k['failing_for']} s, recovered {k['recovered_after']} s after the first failure)"
    parts.append(part)
print(f"{failed} of {sent} requests failed [" + "; ".join(parts) + "]")
PY
)
  results+=("$name: $line; $detail")
  say "$name: $line; $detail"
}

# --- 1. a Galera node killed -----------------------------------------------------------------
say "1 node-kill: SIGKILL of Galera node 2, restart at its recovered position"
lb_mark
t0=$(now)
"$CLUSTER" node-kill 2
sleep "$NODE_DOWN"
"$CLUSTER" node-start 2 >"$WORK/node-start.out" 2>&1 || { cat "$WORK/node-start.out" >&2; die "node 2 did not start again"; }
WAIT_SECONDS=120 "$CLUSTER" wait-synced 3 || die "the cluster did not return to 3 Synced nodes"
t1=$(now)
sleep 3
report node-kill "$t0" "$(now)" "node 2 down and back, cluster of 3 Synced again $(since "$t0" "$t1") s after the kill ($(grep -o 'recovered position.*' "$WORK/node-start.out" || echo 'plain start'))"

# --- 2. a Galera node partitioned -----------------------------------------------------------
if [ $SHORT = 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    say "2 partition: SKIPPED (needs root for network namespaces)"
    results+=("partition: skipped (not root)")
  else
    say "2 partition: Galera node 1 cut from its peers for 20 s"
    lb_mark
    t0=$(now)
    "$CLUSTER" partition 1
    sleep 10
    # A write straight to node 1 as ENS's account is refused (1047), and never appears.
    pw=$(cat "$CLUSTER_VAR/secrets/db-service.password")
    probe=$(mariadb --no-defaults -h "10.78.$((10 * CLUSTER_ID + 1)).2" -P 3306 -u ens_service -p"$pw" ens \
      -e "INSERT INTO RecordQuota (token_hash, window_started_at) VALUES (UNHEX(SHA2('cluster-partition-probe',256)), NOW(3))" 2>&1 || true)
    probe=$(grep -o 'ERROR [0-9].*' <<<"$probe" | head -1 || true)
    refused=no; [[ $probe == *1047* ]] && refused=yes
    # Host 1 (whose first node is cut off) answers without the load balancer's help.
    host1=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$CLUSTER_VAR/tls/server.crt" "https://localhost:$((CLUSTER_PORT + 11))/alive" || true)
    sleep 10
    "$CLUSTER" heal 1
    WAIT_SECONDS=60 "$CLUSTER" wait-synced 3 || die "node 1 did not rejoin after the partition healed"
    t1=$(now)
    sleep 5
    appeared=$("$CLUSTER" sql 2 "SELECT COUNT(*) FROM RecordQuota WHERE token_hash = UNHEX(SHA2('cluster-partition-probe',256))")
    if [ "$refused" != yes ] || [ "$appeared" != 0 ]; then
      failed_checks=$((failed_checks + 1))
      say "partition: the cut-off node's write was not refused (${probe:0:120}) or appeared ($appeared)"
    fi
    report partition "$t0" "$(now)" "node 1's write refused: $refused (${probe:0:70}), applied anywhere: $appeared; host 1's /alive during the cut: $host1; Synced again $(since "$t0" "$t1") s after the cut ($(since "$t1" "$(now)") s ago)"
  fi
fi

# --- 3. an ENS host killed -----------------------------------------------------------------
say "3 host-kill: APNs refuses (503) so spools fill, SIGKILL of every process of ENS host 2, host 2 back after $HOST_DOWN s"
tokens=$(python3 -c 'import json,sys; print(" ".join(u["token"] for u in json.load(open(sys.argv[1]))))' "$WORK/mail-users.json")
# APNs refuses every device of the load (503), so host 2's spool holds acknowledged
# notifications; then every process of host 2 is SIGKILLed and APNs recovers. Sets t0
# (the kill) and killed (how many processes).
kill_host2_with_a_full_spool() {
  local token
  for token in $tokens; do
    curl -s -o /dev/null -XPOST "http://127.0.0.1:$((CLUSTER_PORT + 2))/fail" -d "{\"token\": \"$token\", \"status\": 503, \"reason\": \"ServiceUnavailable\"}"
  done
  sleep 4
  lb_mark
  t0=$(now)
  killed=$("$CLUSTER" host-kill 2)
  curl -s -o /dev/null -XPOST "http://127.0.0.1:$((CLUSTER_PORT + 2))/reset"
}
kill_host2_with_a_full_spool
sleep "$HOST_DOWN"
"$CLUSTER" host-start 2 >"$WORK/host-start.out" 2>&1 || { cat "$WORK/host-start.out" >&2; die "host 2 did not start again"; }
t1=$(now)
sleep 8
# What the restarted sender found in its spool (acknowledged, not yet delivered at the kill).
replayed=$(grep 'replaying spooled notifications' "$CLUSTER_VAR/host2/log/ens-sender.log" | tail -1 | grep -o 'spool.size=[0-9]*' || echo 'spool.size=0')
report host-kill "$t0" "$(now)" "$killed processes killed, host 2 back $(since "$t0" "$t1") s after the kill; its sender replayed ${replayed#spool.size=} spooled notifications"

# --- 4. an ENS host lost: its spool drained by the other host ------------------------------
if [ $SHORT = 0 ]; then
  say "4 host-lost: as 3, but host 2 stays down; its spool, copied, is drained through host 1's sender (ens-sender drain) once host 2's heartbeat is 60 s old"
  kill_host2_with_a_full_spool
  # The lost host's disk, copied to a running host.
  rm -rf "$WORK/host2-spool"; cp -a "$CLUSTER_VAR/host2/spool" "$WORK/host2-spool"
  # ens-sender drain --host refuses a host whose heartbeat is fresh (60 s).
  sleep 65
  drain_status=0
  "$(sender_bin "$ENS_BIN")" drain --config "$CLUSTER_VAR/host1/ens.conf" --from "$WORK/host2-spool" --host "ens$CLUSTER_ID-host2" \
    >"$WORK/drain.out" 2>&1 || drain_status=$?
  t1=$(now)
  drained=$(grep -o 'drained .*' "$WORK/drain.out" | tail -1 | sed "s|$WORK/||")
  [ "$drain_status" -eq 0 ] || { failed_checks=$((failed_checks + 1)); say "host-lost: ens-sender drain exited $drain_status: $(tail -3 "$WORK/drain.out")"; }
  # The host comes back after all: with its spool emptied first (docs/deployment.md), or
  # it would deliver the same notifications again.
  rm -rf "$CLUSTER_VAR/host2/spool/log"
  "$CLUSTER" host-start 2 >"$WORK/host-start-2.out" 2>&1 || { cat "$WORK/host-start-2.out" >&2; die "host 2 did not start again"; }
  sleep 5
  report host-lost "$t0" "$(now)" "$killed processes killed; drain (exit $drain_status) $(since "$t0" "$t1") s after the kill: ${drained:-no summary}"
fi

# --- afterwards ------------------------------------------------------------------------------
touch "$WORK/stop"
wait "$MIX_PID" || true; MIX_PID=
say "load stopped; checking deliveries, registrations and convergence"
status=0
"${LOAD[@]}" verify "$WORK" --timeout 120 >"$WORK/verify.json" || status=1
f=$WORK/verify.json
[ -s "$f" ] || die "verify produced nothing"
say "whole run: $(json "$WORK/verify.json" '"mails: {sent} sent, {acked} acknowledged at the first callback, {delivered} delivered, {lost_acked} acknowledged lost, {lost_unacked} others lost, {duplicate_deliveries} repeated deliveries ({duplicates_with_another_id} under another id)".format(**j["mails"])')"
say "registrations: $(json "$f" '"{attempted} attempted, {acked} acknowledged, {half_applied} half-applied".format(**j["registrations"])'); nodes: $(json "$f" '"; ".join(f"{k}: {v}" for k, v in j["nodes"].items())')"
say "row counts per node: $(json "$f" '"; ".join(f"node {n}: " + ", ".join(f"{t} {c}" for t, c in counts.items() if c) for n, counts in j["row_counts"].items())')"
problems=$(json "$f" '"; ".join(j["problems"])')
[ -z "$problems" ] || say "PROBLEMS: $problems"
[ "$failed_checks" -eq 0 ] || status=1
elapsed=$((SECONDS - started))
if [ $status -eq 0 ]; then verdict="all checks passed"; else verdict="CHECKS FAILED"; fi
say "summary: ${#results[@]} faults in $((elapsed / 60)) min $((elapsed % 60)) s; $verdict"
exit "$status"
