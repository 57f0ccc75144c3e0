#!/usr/bin/env bash
# make chaos: bounded fault injection against a private stack (var/chaos, port 28443).
#
#   1. mariadb-restart   MariaDB stopped and started under steady check-in load
#   2. worker-kill       kill -9 of ens-fcgi worker processes under check-in load
#   3. sender-kill       kill -9 of ens-sender mid-burst of notifications, then restarted
#   4. ens-down          nginx, responders and ens-sender down for 3 minutes while the
#                        Exchange simulator sends new mail and retries its callbacks
#
# One result line per fault and a summary. Exit status 1 when a notification, a mail
# or a subscription is lost; 2 when the run itself could not be done. Load is modest
# (a few Python client threads, 500 requests/s) and every step is bounded; the whole run takes about
# 8-9 minutes. Environment: CHAOS_BURST (notifications in fault 3, default 5000),
# CHAOS_USERS (Exchange users in fault 4, default 10), CHAOS_DOWN_SECONDS (default 180).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export ENS_VAR=$ROOT/var/chaos ENS_PORT=28443 ENS_BIN=$ROOT/.build/release
# The Exchange simulator behaves like Exchange: real minutes, the real retry schedule,
# and ENS subscribes with StatusFrequency 30.
export ENS_EWS_MINUTE_SECONDS=60 ENS_EWS_RETRY_SCALE=1 ENS_STATUS_FREQUENCY=30
BURST=${CHAOS_BURST:-5000}
USERS=${CHAOS_USERS:-10}
DOWN_SECONDS=${CHAOS_DOWN_SECONDS:-180}
LOAD_THREADS=6
STACK=$ROOT/scripts/stack.sh
LOAD=(python3 "$ROOT/scripts/chaos_load.py")
WORK=$ENS_VAR/chaos
LOG=$ENS_VAR/log

say() { printf 'chaos: %s\n' "$*"; }
die() { printf 'chaos: error: %s\n' "$*" >&2; exit 2; }
# json FILE EXPR: evaluates a Python expression over the JSON object in FILE (as j).
json() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
# by FILE: "503: 57, conn: 3" from the object's "by" member.
by() { json "$1" '", ".join(f"{k}: {v}" for k, v in j["by"].items()) or "none"'; }

# shellcheck source=scripts/sender.sh
. "$ROOT/scripts/sender.sh"
for bin in "$ENS_BIN/ens-fcgi" "$(sender_bin "$ENS_BIN")" "$ENS_BIN/ens-cron"; do
  [ -x "$bin" ] || die "$bin is missing: build the release first (make build)"
done

# One chaos run at a time on this host.
mkdir -p "$ROOT/var"
exec 9>"$ROOT/var/.chaos.lock"
flock -n 9 || die "another chaos run holds var/.chaos.lock"
for port in $(seq "$ENS_PORT" $((ENS_PORT + 5))); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then die "port $port is in use"; fi
done

BACKGROUND=()
cleanup() {
  local status=$?
  for pid in "${BACKGROUND[@]}"; do kill "$pid" 2>/dev/null || true; done
  "$STACK" down >/dev/null 2>&1 || true
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

started=$SECONDS
"$STACK" down >/dev/null 2>&1 || true
rm -rf "$ENS_VAR"
mkdir -p "$WORK"
say "starting a private stack in $ENS_VAR (logs in $LOG)"
"$STACK" up >"$WORK/stack-up.out" 2>&1 || { cat "$WORK/stack-up.out" >&2; die "the stack did not start"; }
ENS_TOKEN=$("$STACK" token chaos)
export ENS_TOKEN
sleep 6  # the responders pick up the token cache within auth.refresh_seconds (5)
python3 "$ROOT/bench/devices.py" b2-setup 40 "$WORK/checkins.txt" || die "check-in users could not be set up"
"${LOAD[@]}" load --seconds 3 --bodies "$WORK/checkins.txt" --threads 2 >"$WORK/warmup.json" || die "load failed"
[ "$(json "$WORK/warmup.json" 'j["failed"]')" -eq 0 ] || die "check-ins fail before any fault: $(cat "$WORK/warmup.json")"

lost_total=0
results=()
report() { results+=("$1"); say "$1"; }

# --- 1. MariaDB restart under load ----------------------------------------------------
say "1/4 mariadb-restart: check-in load, MariaDB stopped and started in the middle"
rm -f "$WORK/db-recovered"
"${LOAD[@]}" load --seconds 20 --bodies "$WORK/checkins.txt" --threads "$LOAD_THREADS" \
  --recovered-file "$WORK/db-recovered" --tail 8 --cap 90 >"$WORK/mariadb-restart.json" &
BACKGROUND=($!)
sleep 7
t0=$(date +%s.%N)
"$STACK" db-stop
sleep 3
"$STACK" db-start
db_down=$(python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$t0")
touch "$WORK/db-recovered"
wait "${BACKGROUND[0]}" || die "the load generator failed"; BACKGROUND=()
f=$WORK/mariadb-restart.json
healthy=$(json "$f" '"yes" if j["tail_failed"] == 0 and j["tail_ok"] > 0 else "NO"')
report "mariadb-restart: $(json "$f" 'j["sent"]') requests, $(json "$f" 'j["failed"]') failed ($(by "$f")), healthy after: $healthy (MariaDB stop to started again: $db_down s; failures from $(json "$f" 'j["first_failure"]') s to $(json "$f" 'j["last_failure"]') s of $(json "$f" 'j["seconds"]') s)"

# --- 2. kill -9 of responder workers under load -----------------------------------------
say "2/4 worker-kill: check-in load, kill -9 of one worker, then of every worker"
workers() { # the supervisor's ens-fcgi --worker children, and nothing else
  local supervisor pid
  supervisor=$(cat "$ENS_VAR/run/ens-fcgi.pid")
  for pid in $(pgrep -P "$supervisor" || true); do
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- '--worker' && echo "$pid"
  done
  return 0
}
rm -f "$WORK/workers-recovered"
"${LOAD[@]}" load --seconds 20 --bodies "$WORK/checkins.txt" --threads "$LOAD_THREADS" \
  --recovered-file "$WORK/workers-recovered" --tail 8 --cap 60 >"$WORK/worker-kill.json" &
BACKGROUND=($!)
sleep 5
mapfile -t pids < <(workers)
[ "${#pids[@]}" -gt 0 ] || die "no ens-fcgi workers found"
kill -9 "${pids[0]}"
killed=1
sleep 6
mapfile -t pids < <(workers)
kill -9 "${pids[@]}"
killed=$((killed + ${#pids[@]}))
# Recovered once the supervisor runs a full set of workers again (bounded).
for _ in $(seq 150); do
  [ "$(workers | wc -l)" -ge "$(awk -F' = ' '$1 == "fcgi.processes" {print $2}' "$ENS_VAR/ens.conf")" ] && break
  sleep 0.1
done
touch "$WORK/workers-recovered"
wait "${BACKGROUND[0]}" || die "the load generator failed"; BACKGROUND=()
f=$WORK/worker-kill.json
healthy=$(json "$f" '"yes" if j["tail_failed"] == 0 and j["tail_ok"] > 0 else "NO"')
report "worker-kill: $(json "$f" 'j["sent"]') requests, $(json "$f" 'j["failed"]') failed ($(by "$f")), $killed workers killed, healthy after: $healthy"

# --- 3. kill -9 of ens-sender mid-burst ---------------------------------------------------
say "3/4 sender-kill: $BURST notifications through ens-sender's socket, kill -9 after $((BURST / 3)) acknowledged"
"${LOAD[@]}" burst --count "$BURST" --threads 8 --kill-at $((BURST / 3)) --acked "$WORK/burst-acked.txt" >"$WORK/sender-kill.json" \
  || die "the burst failed"
"${LOAD[@]}" delivered --ids "$WORK/burst-acked.txt" --timeout 120 >"$WORK/sender-delivered.json" || die "delivered failed"
f=$WORK/sender-kill.json d=$WORK/sender-delivered.json
lost=$(json "$d" 'j["lost"]')
lost_total=$((lost_total + lost))
report "sender-kill: $(json "$f" 'j["submitted"]') submitted, $(json "$f" 'j["acked"]') acknowledged, $lost lost (target 0), $(json "$d" 'j["duplicates"]') duplicates, $(json "$f" 'j["gave_up"]') never acknowledged, restart $(json "$f" 'j["restart"]') (killed pid $(json "$f" 'j["killed"]'), $(json "$f" 'j["conn_errors"]') socket errors, refused: $(json "$f" 'j["refused"] or "none"'))"

# --- 4. ENS down for 3 minutes ----------------------------------------------------------
say "4/4 ens-down: $USERS Exchange users; nginx, responders and ens-sender down for $DOWN_SECONDS s"
"${LOAD[@]}" mail-setup "$USERS" "$WORK/users.json" >/dev/null || die "Exchange users could not be registered"
# Before the fault: the path works (each mail reaches the APNs simulator).
"${LOAD[@]}" mail-send "$WORK/users.json" "$WORK/mails-before.json" before >"$WORK/mail-before.json" || die "mail-send failed"
"${LOAD[@]}" mail-check "$WORK/users.json" "$WORK/mails-before.json" --timeout 30 >"$WORK/check-before.json" || die "mail-check failed"
[ "$(json "$WORK/check-before.json" 'j["lost"] + j["subscriptions_lost"]')" -eq 0 ] \
  || die "new mail does not reach APNs before any fault: $(cat "$WORK/check-before.json")"
t0=$SECONDS
"$STACK" nginx-stop
"$STACK" fcgi-stop
"$STACK" sender-stop
"${LOAD[@]}" mail-send "$WORK/users.json" "$WORK/mails-down.json" down-early >"$WORK/mail-down-early.json" || die "mail-send failed"
sleep $((DOWN_SECONDS / 2 - (SECONDS - t0) > 0 ? DOWN_SECONDS / 2 - (SECONDS - t0) : 0))
"${LOAD[@]}" mail-send "$WORK/users.json" "$WORK/mails-down.json" down-late --no-wait >"$WORK/mail-down-late.json" || die "mail-send failed"
sleep $((DOWN_SECONDS - (SECONDS - t0) > 0 ? DOWN_SECONDS - (SECONDS - t0) : 0))
"$STACK" sender-start
"$STACK" fcgi-start
"$STACK" nginx-start
down_for=$((SECONDS - t0))
"${LOAD[@]}" mail-check "$WORK/users.json" "$WORK/mails-down.json" --timeout 240 >"$WORK/ens-down.json" || die "mail-check failed"
f=$WORK/ens-down.json
lost=$(json "$f" 'j["lost"]')
sublost=$(json "$f" 'j["subscriptions_lost"]')
lost_total=$((lost_total + lost + sublost))
report "ens-down: ${down_for} s down, $(json "$f" 'j["mails"]') mails, $lost lost, all delivered $(json "$f" 'j["seconds_to_deliver"]') s after ENS came back; $(json "$f" 'j["users"]') subscriptions, $sublost lost (simulator alive $(json "$f" 'j["simulator_alive"]'), heartbeat OK $(json "$f" 'j["heartbeat_ok"]'), ENS UserSubscribed $(json "$f" 'j["ens_subscribed"]'), StatusFrequency $(json "$f" '",".join(map(str, j["status_frequency"]))')); first callbacks while down: $(json "$WORK/mail-down-early.json" '", ".join(f"{v} {k}" for k, v in j["first_attempts"].items())')"

# --- summary ------------------------------------------------------------------------------
elapsed=$((SECONDS - started))
errors=$(cat "$LOG"/ens-*.log 2>/dev/null | grep -cE 'level=(error|critical)' || true)
if [ "$lost_total" -eq 0 ]; then verdict="nothing lost"; else verdict="LOST $lost_total notifications/mails/subscriptions"; fi
say "summary: 4 faults in $((elapsed / 60)) min $((elapsed % 60)) s; $verdict; $errors error lines in $LOG/ens-*.log"
[ "$lost_total" -eq 0 ]
