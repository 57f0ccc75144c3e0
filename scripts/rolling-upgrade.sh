#!/usr/bin/env bash
# make rolling-upgrade: the previous release upgraded to this tree's, one ENS host at a
# time, under load, on a private cluster (scripts/cluster.sh, CLUSTER_ID 2 by hand as
# make cluster-chaos, whose lock it shares; make test runs --short with CLUSTER_ID 1
# after cluster-chaos). As docs/operations.md "Upgrading" tells an operator:
#
#   1. the previous release (PREVIOUS_RELEASE below) is built in a git worktree of its
#      own (var/release-prev: a debug build of ens-fcgi, ens-sender and ens-cron); the
#      cluster starts on it, on its own migrations, under the steady mix of
#      scripts/cluster_load.py (check-ins, registrations, Exchange callbacks)
#   2. `ens-cron migrate` of this tree's release, while both hosts still run the previous
#      one (migrations only expand)
#   3. per host, one at a time: the load balancer stops sending to it and its requests
#      in flight finish; a graceful stop (SIGTERM: nginx, the responders, the sender,
#      which finishes its deliveries and keeps the rest in its spool); its configuration
#      written again for this release's binaries; started on them; back in the load
#      balancer. Host 2 is stopped while APNs refuses the load's devices, so the
#      previous release's sender leaves acknowledged notifications in its spool, which
#      this release's sender must deliver.
#   4. cluster_load.py verify: no acknowledged notification lost, repeats under one
#      collapse id, no registration half-applied, the nodes converged
#
# Reported: requests failed (what the load saw, after the load balancer's retries) per
# step, each host's time out of the load balancer and stopped, each host's release in
# SenderHosts before and after (ens-cron status), the previous release's build time.
#
#   scripts/rolling-upgrade.sh [--short]       the run, about 3 minutes (--short: make test's,
#                                              a smaller load, shorter pauses; about 2)
#   scripts/rolling-upgrade.sh build-previous  only build the previous release's binaries
#   scripts/rolling-upgrade.sh build-previous-deb   the previous release's .deb (make deb
#                                              in its worktree; scripts/deb-test.sh then
#                                              tests the upgrade from it): make deb-previous
#   scripts/rolling-upgrade.sh previous-deb    print that .deb's path (exit 1: not built)
#
# Exit status: 0 all checks passed, 1 a check failed, 2 the run could not be done.
# Environment: CLUSTER_ID (default 2), ENS_BIN (this release's binaries, default
# .build/release), ENS_PREVIOUS_BIN (the previous release's binaries, built here unless
# given), ENS_PREVIOUS_TREE (its worktree, default var/release-prev).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH=/opt/swift/usr/bin:$PATH

# The previous release: 0.5.0 (Sources/ENSModel/Release.swift and debian/changelog at
# that commit). The one place it is named; move it on when a release lands. A full
# hash, since a shallow clone can fetch a commit only by its full name.
PREVIOUS_RELEASE=9ec63db38a3000bcaf1a4cc3e4bd8d8f594bc22c
PREV_TREE=${ENS_PREVIOUS_TREE:-$ROOT/var/release-prev}

RUN_NAME=rolling-upgrade
# shellcheck source=scripts/cluster-run.sh
. "$ROOT/scripts/cluster-run.sh"
# sender_bin, sender_product: the sender of either release.
# shellcheck source=scripts/sender.sh
. "$ROOT/scripts/sender.sh"

# --- the previous release -------------------------------------------------------------------

# Its worktree at PREVIOUS_RELEASE, made (or fetched into a shallow clone) if missing.
prev_tree() {
  command -v git >/dev/null || die "git is needed to check out the previous release"
  git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1 || die "$ROOT is not a git checkout: the previous release ($PREVIOUS_RELEASE) cannot be checked out"
  if ! git -C "$ROOT" cat-file -e "$PREVIOUS_RELEASE^{commit}" 2>/dev/null; then
    # A shallow CI clone lacks it: fetch that one commit (by its full hash) from origin.
    say "commit $PREVIOUS_RELEASE (the previous release) is not in this clone; fetching it from origin"
    git -C "$ROOT" fetch --quiet --depth=1 origin "$PREVIOUS_RELEASE" 2>&1 | sed 's/^/  git: /' >&2 || true
    git -C "$ROOT" cat-file -e "$PREVIOUS_RELEASE^{commit}" 2>/dev/null \
      || die "the previous release (commit $PREVIOUS_RELEASE) is not in this clone and could not be fetched from origin (shallow: $(git -C "$ROOT" rev-parse --is-shallow-repository)); clone with history (git fetch --unshallow) or set ENS_PREVIOUS_BIN"
  fi
  mkdir -p "$(dirname "$PREV_TREE")"
  if [ -e "$PREV_TREE/.git" ] && [ "$(git -C "$PREV_TREE" rev-parse HEAD 2>/dev/null)" = "$PREVIOUS_RELEASE" ]; then
    return 0
  fi
  # Another release's worktree (PREVIOUS_RELEASE moved on) goes, with its builds.
  if [ -e "$PREV_TREE" ]; then
    git -C "$ROOT" worktree remove --force "$PREV_TREE" 2>/dev/null || rm -rf "$PREV_TREE"
  fi
  # --force: make clean may have removed the directory of a worktree git still lists.
  git -C "$ROOT" worktree add --force --detach "$PREV_TREE" "$PREVIOUS_RELEASE" >"$ROOT/var/release-prev-worktree.out" 2>&1 \
    || { cat "$ROOT/var/release-prev-worktree.out" >&2; die "git worktree add $PREV_TREE $PREVIOUS_RELEASE failed"; }
  # The Swift package dependencies as this tree resolved them (checkouts, pins): the
  # build needs no network when the previous release wants the same ones.
  if [ -d "$ROOT/.build/checkouts" ]; then
    mkdir -p "$PREV_TREE/.build"
    cp -a "$ROOT/.build/checkouts" "$ROOT/.build/repositories" "$PREV_TREE/.build/" 2>/dev/null || true
    cp -a "$ROOT/.build/workspace-state.json" "$PREV_TREE/.build/" 2>/dev/null || true
  fi
  [ ! -f "$ROOT/Package.resolved" ] || cp "$ROOT/Package.resolved" "$PREV_TREE/"
}

# prev_swift_build ARGS...: swift build in the previous release's tree, without fetching
# when the dependencies are there (else resolving them, which may need the network).
# make test's environment is this tree's: none of it may reach that build.
prev_swift_build() {
  local log=$PREV_TREE/.build/rolling-upgrade-build.log
  mkdir -p "$PREV_TREE/.build"
  (cd "$PREV_TREE" && env -u ENS_INTEGRATION_TESTS -u ENS_DEB_SCRATCH swift build --disable-automatic-resolution "$@") >"$log" 2>&1 && return 0
  if grep -qiE 'resolv|Package\.resolved|dependenc' "$log"; then
    (cd "$PREV_TREE" && env -u ENS_INTEGRATION_TESTS -u ENS_DEB_SCRATCH swift build "$@") >"$log" 2>&1 && return 0
  fi
  tail -20 "$log" >&2
  return 1
}

# The previous release's debug binaries (a debug build of the three products takes
# about 40 s on an idle 2-core host, a release build about 150 s). Sets PREV_BIN.
BUILD_SECONDS=
build_previous() {
  if [ -n "${ENS_PREVIOUS_BIN:-}" ]; then PREV_BIN=$ENS_PREVIOUS_BIN; BUILD_SECONDS=given; return 0; fi
  mkdir -p "$ROOT/var"
  # The prebuild of make test and a run may both build it: one at a time.
  exec 8>"$ROOT/var/.release-prev.lock"
  flock 8
  prev_tree
  local started=$SECONDS product
  for product in ens-fcgi "$(sender_product "$PREV_TREE")" ens-cron; do
    prev_swift_build --product "$product" || die "the previous release's $product did not build (log: $PREV_TREE/.build/rolling-upgrade-build.log)"
  done
  BUILD_SECONDS=$((SECONDS - started))
  flock -u 8
  PREV_BIN=$PREV_TREE/.build/debug
}

build_previous_deb() {
  mkdir -p "$ROOT/var"
  exec 8>"$ROOT/var/.release-prev.lock"
  flock 8
  prev_tree
  local started=$SECONDS
  mkdir -p "$PREV_TREE/var"
  # Its own make deb: its debian/ and its release build, in its own .build.
  (cd "$PREV_TREE" && env -u ENS_INTEGRATION_TESTS -u ENS_DEB_SCRATCH make --no-print-directory deb) >"$PREV_TREE/var/make-deb.out" 2>&1 \
    || { tail -30 "$PREV_TREE/var/make-deb.out" >&2; die "make deb of the previous release failed (output: $PREV_TREE/var/make-deb.out)"; }
  say "built $(previous_deb) in $((SECONDS - started)) s; scripts/deb-test.sh now tests the upgrade from it"
}

previous_deb() {
  local deb
  deb=$(find "$PREV_TREE/var/pkg" -maxdepth 1 -name "ens_*_$(dpkg-architecture -qDEB_HOST_ARCH 2>/dev/null || echo amd64).deb" 2>/dev/null | head -1)
  [ -n "$deb" ] || return 1
  # Only a package of PREVIOUS_RELEASE (the worktree may have moved on since).
  [ "$(git -C "$PREV_TREE" rev-parse HEAD 2>/dev/null)" = "$PREVIOUS_RELEASE" ] || return 1
  echo "$deb"
}

case "${1:-}" in
  build-previous) build_previous; say "previous release $("$PREV_BIN/ens-cron" --version) built in $BUILD_SECONDS s: $PREV_BIN"; exit 0 ;;
  build-previous-deb) build_previous_deb; exit 0 ;;
  previous-deb) previous_deb; exit ;;
  --short|"") ;;
  *) sed -n '2,39p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

# --- the run --------------------------------------------------------------------------------

SHORT=0
[ "${1:-}" = --short ] && SHORT=1
cluster_environment 100
CURRENT_BIN=$ENS_BIN
WORK=$CLUSTER_VAR/upgrade

for bin in "$CURRENT_BIN/ens-fcgi" "$(sender_bin "$CURRENT_BIN")" "$CURRENT_BIN/ens-cron"; do
  [ -x "$bin" ] || die "$bin is missing: build first (make build)"
done
mkdir -p "$ROOT/var"
exec 9>"$ROOT/var/.cluster-$CLUSTER_ID.lock"
flock -n 9 || die "another run holds var/.cluster-$CLUSTER_ID.lock"

started=$SECONDS
build_previous
PREV_VERSION=$("$PREV_BIN/ens-cron" --version | awk '{print $NF}')
CURRENT_VERSION=$("$CURRENT_BIN/ens-cron" --version | awk '{print $NF}')
say "previous release $PREV_VERSION (${PREVIOUS_RELEASE:0:7}, $PREV_BIN; built in $BUILD_SECONDS s) -> this tree's $CURRENT_VERSION ($CURRENT_BIN)"
[ "$PREV_VERSION" != "$CURRENT_VERSION" ] || say "note: both report $CURRENT_VERSION: this tree has no new release number yet; the procedure is exercised all the same"

MIX_PID=
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local status=$?
  if [ -n "$MIX_PID" ]; then kill "$MIX_PID" 2>/dev/null || true; fi
  ENS_BIN=$CURRENT_BIN "$CLUSTER" down >/dev/null 2>&1 || true
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The cluster on the previous release: its binaries and its migrations (the schema it
# shipped with), its configuration as it accepts it.
say "starting a private cluster on $PREV_VERSION in $CLUSTER_VAR (load balancer https://localhost:$CLUSTER_PORT)"
ENS_BIN=$PREV_BIN CLUSTER_MIGRATIONS=$PREV_TREE/sql/migrations "$CLUSTER" up >"$ROOT/var/cluster-$CLUSTER_ID-up.out" 2>&1 \
  || { cat "$ROOT/var/cluster-$CLUSTER_ID-up.out" >&2; die "the cluster did not start on the previous release"; }
mkdir -p "$WORK"; mv "$ROOT/var/cluster-$CLUSTER_ID-up.out" "$WORK/up.out"
ENS_TOKEN=$(ENS_BIN=$PREV_BIN "$CLUSTER" token upgrade)
export ENS_TOKEN
if [ $SHORT = 1 ]; then
  SETTLE=5 MIXED=10
  CHECKINS=10 MAILUSERS=6 RATE=(--checkin-rate 10 --register-rate 0.3 --mail-rate 3)
else
  SETTLE=15 MIXED=30
  CHECKINS=30 MAILUSERS=16 RATE=(--checkin-rate 30 --register-rate 0.5 --mail-rate 6)
fi
"$PREV_BIN/ens-cron" keys --config "$CLUSTER_VAR/ens.conf" >/dev/null 2>&1 || die "the key pool could not be filled"
"${LOAD[@]}" setup "$WORK" --checkins "$CHECKINS" --mail-users "$MAILUSERS" >"$WORK/setup.out" 2>&1 \
  || { cat "$WORK/setup.out" >&2; die "the load's users could not be set up"; }
say "setup: $CHECKINS check-in users, $MAILUSERS Exchange users; a steady mix (${RATE[*]//--/}) through the load balancer"
rm -f "$WORK/stop"
# --retry-stale: each reload of the load balancer (a host taken out and put back) closes
# the load's idle kept-alive connections; the load sends such a request again on a new
# connection, as HTTP clients do, and counts it apart from failures.
"${LOAD[@]}" mix "$WORK" --seconds 1200 --stop-file "$WORK/stop" --retry-stale "${RATE[@]}" >"$WORK/mix.out" 2>&1 &
MIX_PID=$!
run_t0=$(now)

failed_checks=0
problem() { failed_checks=$((failed_checks + 1)); say "CHECK FAILED: $*"; }
# A host that does not take the new release fails the upgrade: the run ends there.
upgrade_failed() { say "CHECK FAILED: $*"; say "summary: the upgrade failed; the logs are under $CLUSTER_VAR"; exit 1; }

# Each host's sender records its release in SenderHosts (migration 025) with every
# heartbeat; ens-cron status lists them ("before 0.2.0" for none).
releases() { # releases LABEL BIN CONFIG: the Sender hosts section of BIN's ens-cron status
  say "$1: sender hosts (ens-cron status of $("$2/ens-cron" --version | awk '{print $NF}') in $2):"
  "$2/ens-cron" status --config "$3" 2>&1 \
    | sed -n '/^Sender hosts/,/^$/p' | sed '/^$/d; s/^/    /'
}
host_release() { # host_release N: host N's release in SenderHosts, or "none"
  "$CLUSTER" sql 1 "SELECT IFNULL(release_version, 'none') FROM SenderHosts WHERE host = 'ens$CLUSTER_ID-host$1'" 2>/dev/null || echo none
}
# shellcheck disable=SC2317  # run by wait_until
heartbeat_after() { # heartbeat_after N EPOCH: host N's heartbeat is newer than EPOCH
  local t
  t=$("$CLUSTER" sql 1 "SELECT UNIX_TIMESTAMP(heartbeat_at) FROM SenderHosts WHERE host = 'ens$CLUSTER_ID-host$1'" 2>/dev/null) || return 1
  [ -n "$t" ] && python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)' "$t" "$2"
}

# The administrator's configuration with this release's migrations: what the operator
# runs `ens-cron migrate` of the new release with.
sed -e "s|^db.migrations_dir = .*|db.migrations_dir = $ROOT/sql/migrations|" "$CLUSTER_VAR/ens.conf" > "$WORK/migrate.conf"

LB_LOG=$CLUSTER_VAR/log/lb-access.log
lb_mark() { sleep 1.1; LB_MARK=$(wc -l < "$LB_LOG" 2>/dev/null || echo 0); }
lb_retried() { # device API requests since lb_mark that a host failed and the other answered
  sleep 1.1  # the log is flushed every second
  tail -n +"$((LB_MARK + 1))" "$LB_LOG" 2>/dev/null | awk '/upstream=[^ ]+, / {n++} END {print n + 0}'
}
# window FROM TO: "F of S requests failed [kind f/s ...]" for the load's events in [FROM, TO].
window() {
  "${LOAD[@]}" window "$WORK" "$1" "$2" > "$WORK/window.json"
  python3 - "$WORK/window.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
sent = sum(k["sent"] for k in j.values()); failed = sum(k["failed"] for k in j.values())
parts = []
for kind, k in j.items():
    part = f"{kind} {k['failed']}/{k['sent']}"
    if k["failed"]:
        part += " (" + ", ".join(f"{a}: {n}" for a, n in k["by"].items()) + ")"
    parts.append(part)
stale = sum(k.get("stale_retries", 0) for k in j.values())
again = f"; {stale} sent again on a new connection (the load balancer's reload closed their idle one)" if stale else ""
print(f"{failed} of {sent} requests failed [" + "; ".join(parts) + "]" + again)
PY
}

sleep "$SETTLE"
wait_until() { local deadline=$((SECONDS + $1)); shift; until "$@" >/dev/null 2>&1; do [ $SECONDS -ge $deadline ] && return 1; sleep 0.5; done; }
wait_until 30 heartbeat_after 2 0 || say "warning: host 2's sender has written no heartbeat yet"
# Before the migration with the previous release's ens-cron (the current one may read
# what only its migrations add), after with this one's.
releases "before" "$PREV_BIN" "$CLUSTER_VAR/ens.conf"

# --- 1. migrate ---------------------------------------------------------------------------
say "1 migrate: ens-cron migrate of $CURRENT_VERSION while both hosts run $PREV_VERSION"
lb_mark
t0=$(now)
migrate_status=0
"$CURRENT_BIN/ens-cron" migrate --config "$WORK/migrate.conf" >"$WORK/migrate.out" 2>&1 || migrate_status=$?
t1=$(now)
if [ "$migrate_status" -ne 0 ]; then
  problem "ens-cron migrate of $CURRENT_VERSION exited $migrate_status: $(tail -3 "$WORK/migrate.out")"
fi
sleep "$SETTLE"
line="migrate (exit $migrate_status, $(since "$t0" "$t1") s; $(tail -1 "$WORK/migrate.out" | cut -c1-120)); then the previous release on the new schema for $SETTLE s: $(window "$t0" "$(now)"); load balancer retries: $(lb_retried)"
say "$line"

# --- 2. the hosts, one at a time ----------------------------------------------------------
OTHER=([1]=2 [2]=1)
# log_span LOG FIRST LAST: seconds between the last FIRST line and the LAST line after it.
log_span() {
  python3 - "$@" <<'PY'
import re, sys
from datetime import datetime
path, first, last = sys.argv[1:4]
start = end = None
for line in open(path, errors="replace"):
    m = re.match(r"(\S+Z) ", line)
    if not m:
        continue
    if first in line:
        start, end = m.group(1), None
    elif last in line and start:
        end = m.group(1)
parse = lambda t: datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ")
print(f"{(parse(end) - parse(start)).total_seconds():.1f}" if start and end else "?")
PY
}
count() { grep -c "$1" "$2" 2>/dev/null || true; }
# The LB's worker processes: after a reload the old one stays until its requests finish.
# shellcheck disable=SC2317  # run by wait_until
lb_workers() { pgrep -P "$(cat "$CLUSTER_VAR/run/lb-nginx.pid")" | wc -l; }
# shellcheck disable=SC2317  # run by wait_until
lb_drained() { [ "$(lb_workers)" -le 1 ]; }

upgrade_host() {
  local h=$1 other=${OTHER[$1]} dir=$CLUSTER_VAR/host$1 t_out t_drained t_stopped t_started t_back
  local fcgi_log=$dir/log/ens-fcgi.log apns_log=$dir/log/ens-sender.log
  local pool_stops sender_stops spool_left replayed before_keys added removed
  lb_mark
  t_out=$(now)
  # Out of the load balancer first: new requests go to the other host; the old worker
  # finishes the requests it has in flight on this one.
  "$CLUSTER" lb "$other"
  wait_until 90 lb_drained || problem "host $h: the load balancer's old worker still has requests after 90 s"
  t_drained=$(now)
  # The graceful stop: stack.sh's, SIGTERM to each (SIGKILL only after 40 s, which the
  # log lines below would show as missing).
  pool_stops=$(count 'responder pool stopped' "$fcgi_log")
  sender_stops=$(count 'delivery stopped' "$apns_log")
  "$CLUSTER" host-stop "$h"
  t_stopped=$(now)
  [ "$(count 'responder pool stopped' "$fcgi_log")" -gt "$pool_stops" ] || problem "host $h: its responder pool did not stop cleanly (no 'responder pool stopped' in $fcgi_log)"
  [ "$(count 'delivery stopped' "$apns_log")" -gt "$sender_stops" ] || problem "host $h: its sender did not stop cleanly (no 'delivery stopped' in $apns_log)"
  spool_left=$(grep 'delivery stopped' "$apns_log" | tail -1 | grep -o 'spool.size=[0-9]*' || echo 'spool.size=?')
  # How long the processes themselves took from SIGTERM to done, by their logs (the rest
  # of the stop is stack.sh waiting for each to be reaped).
  local took_pool took_sender
  took_pool=$(log_span "$fcgi_log" 'responder pool stopping' 'responder pool stopped')
  took_sender=$(log_span "$apns_log" 'sender stopping' 'delivery stopped')
  # The swap: this release's configuration and binaries.
  before_keys=$(sed -n 's/^\([a-z_.0-9]*\) =.*/\1/p' "$dir/ens.conf" | sort)
  cp "$dir/ens.conf" "$WORK/host$h-$PREV_VERSION.conf"
  ENS_BIN=$CURRENT_BIN "$CLUSTER" host-config "$h" >"$WORK/host$h-config.out" 2>&1 \
    || { cat "$WORK/host$h-config.out" >&2; upgrade_failed "host $h's configuration could not be written for $CURRENT_VERSION"; }
  added=$(comm -13 <(echo "$before_keys") <(sed -n 's/^\([a-z_.0-9]*\) =.*/\1/p' "$dir/ens.conf" | sort) | paste -sd, -)
  removed=$(comm -23 <(echo "$before_keys") <(sed -n 's/^\([a-z_.0-9]*\) =.*/\1/p' "$dir/ens.conf" | sort) | paste -sd, -)
  local replays
  replays=$(count 'replaying spooled notifications' "$apns_log")
  ENS_BIN=$CURRENT_BIN "$CLUSTER" host-start "$h" >"$WORK/host$h-start.out" 2>&1 \
    || { cat "$WORK/host$h-start.out" >&2; upgrade_failed "host $h did not start on $CURRENT_VERSION (its logs: $dir/log)"; }
  t_started=$(now)
  "$CLUSTER" lb 1,2
  t_back=$(now)
  replayed=0
  [ "$(count 'replaying spooled notifications' "$apns_log")" -le "$replays" ] \
    || replayed=$(grep 'replaying spooled notifications' "$apns_log" | tail -1 | grep -o 'spool.size=[0-9]*' | cut -d= -f2)
  # Its new sender's first heartbeat records the new release.
  wait_until 60 heartbeat_after "$h" "$t_started" || problem "host $h: no heartbeat from its new sender within 60 s"
  local release; release=$(host_release "$h")
  [ "$release" = "$CURRENT_VERSION" ] || problem "host $h records release '$release' in SenderHosts, not $CURRENT_VERSION"
  sleep 3
  OUT_SECONDS[h]=$(since "$t_out" "$t_back")
  local line
  line="host $h: out of the load balancer for ${OUT_SECONDS[$h]} s (drained in $(since "$t_out" "$t_drained") s, stopped gracefully in $(since "$t_drained" "$t_stopped") s (SIGTERM to done: responders $took_pool s, sender $took_sender s) with ${spool_left#spool.size=} notifications left in its spool, started on $CURRENT_VERSION in $(since "$t_stopped" "$t_started") s; its sender replayed $replayed); configuration keys added: ${added:-none}, removed: ${removed:-none}; SenderHosts: $release; $(window "$t_out" "$(now)"); load balancer retries: $(lb_retried)"
  say "$line"
}
declare -a OUT_SECONDS

say "2 host 1: out of the load balancer, graceful stop, $CURRENT_VERSION's configuration and binaries, back"
upgrade_host 1
say "both releases side by side for $MIXED s (host 1 $CURRENT_VERSION, host 2 $PREV_VERSION)"
t0=$(now)
sleep "$MIXED"
line="mixed: host 1 on $CURRENT_VERSION, host 2 on $PREV_VERSION for $MIXED s: $(window "$t0" "$(now)")"
say "$line"

# Host 2 is stopped with acknowledged notifications in its spool: APNs refuses the load's
# devices (503) for a few seconds first, and recovers once it is stopped.
say "3 host 2: as host 1, stopped while APNs refuses the load's devices (its spool holds notifications for $CURRENT_VERSION's sender)"
tokens=$(python3 -c 'import json,sys; print(" ".join(u["token"] for u in json.load(open(sys.argv[1]))))' "$WORK/mail-users.json")
for token in $tokens; do
  curl -s -o /dev/null -XPOST "http://127.0.0.1:$((CLUSTER_PORT + 2))/fail" -d "{\"token\": \"$token\", \"status\": 503, \"reason\": \"ServiceUnavailable\"}"
done
sleep 4
apns_reset() { curl -s -o /dev/null -XPOST "http://127.0.0.1:$((CLUSTER_PORT + 2))/reset"; }
# APNs recovers as soon as host 2's stop begins (in the background: the drain waits).
( wait_until 120 bash -c "! kill -0 \$(cat '$CLUSTER_VAR/host2/run/ens-sender.pid' 2>/dev/null) 2>/dev/null"; apns_reset ) &
reset_pid=$!
upgrade_host 2
wait "$reset_pid" || true
apns_reset
releases "after" "$CURRENT_BIN" "$WORK/migrate.conf"

# --- afterwards ------------------------------------------------------------------------------
sleep "$SETTLE"
touch "$WORK/stop"
wait "$MIX_PID" || true; MIX_PID=
say "load stopped; checking deliveries, registrations and convergence"
whole=$(window "$run_t0" "$(now)")
status=0
"${LOAD[@]}" verify "$WORK" --timeout 120 >"$WORK/verify.json" || status=1
f=$WORK/verify.json
[ -s "$f" ] || die "verify produced nothing"
failed_requests=$(json "$WORK/window.json" 'sum(k["failed"] for k in j.values())')
[ "$failed_requests" = 0 ] || problem "$failed_requests requests failed during the run"
say "whole run: $whole"
say "mails: $(json "$f" '"{sent} sent, {acked} acknowledged at the first callback, {delivered} delivered, {lost_acked} acknowledged lost, {lost_unacked} others lost, {duplicate_deliveries} repeated deliveries ({duplicates_with_another_id} under another id)".format(**j["mails"])')"
say "registrations: $(json "$f" '"{attempted} attempted, {acked} acknowledged, {half_applied} half-applied".format(**j["registrations"])'); nodes: $(json "$f" '"; ".join(f"{k}: {v}" for k, v in j["nodes"].items())')"
problems=$(json "$f" '"; ".join(j["problems"])')
[ -z "$problems" ] || say "PROBLEMS: $problems"
[ "$failed_checks" -eq 0 ] || status=1
elapsed=$((SECONDS - started))
if [ $status -eq 0 ]; then verdict="all checks passed"; else verdict="CHECKS FAILED"; fi
say "summary: $PREV_VERSION -> $CURRENT_VERSION host by host in $((elapsed / 60)) min $((elapsed % 60)) s (previous release built in $BUILD_SECONDS s); requests failed: $failed_requests; acknowledged notifications lost: $(json "$f" 'j["mails"]["lost_acked"]'), repeated: $(json "$f" 'j["mails"]["duplicate_deliveries"]'); half-applied registrations: $(json "$f" 'j["registrations"]["half_applied"]'); hosts out: host 1 ${OUT_SECONDS[1]} s, host 2 ${OUT_SECONDS[2]} s; $verdict"
exit "$status"
