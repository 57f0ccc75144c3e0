#!/usr/bin/env bash
# The test tiers (docs/testing.md):
#   scripts/test.sh              make test: unit and integration tests against a private
#                                stack (var/test, port 18443) from the debug build, the
#                                Apache pass, the simulator self-tests, Schemathesis, the
#                                secret scan, cluster-chaos, the rolling upgrade, ENSKit and
#                                the .deb; the stack is always torn down. What CI runs.
#   scripts/test.sh unit         make check: every test target but IntegrationTests (in-process,
#                                no stack).
#   scripts/test.sh up           make test-stack: start the private test stack and leave it up.
#   scripts/test.sh suite REGEX  make suite SUITE=REGEX: run the matching tests
#                                (swift test --filter) against the stack `up` started.
#   scripts/test.sh down         make test-stack-stop.
# ENS_TEST_FILTER=REGEX (with no mode) starts a stack, runs only the matching tests and
# tears it down (ENS_TEST_APACHE=1 adds the Apache pass, ENS_TEST_APACHE_FILTER=REGEX
# narrows it): for working on one area; a full run is the only verdict.
set -euo pipefail
cd "$(dirname "$0")/.."
export ENS_VAR=$PWD/var/test ENS_PORT=${ENS_TEST_PORT:-18443} ENS_BIN=$PWD/.build/debug
export ENS_TOKEN_REFRESH=2 ENS_HEALTH_CACHE_MS=200 ENS_KEY_POOL=20
# Exchange: a short GetItem budget and Exchange-like retries 20x faster, so the slow-
# server and outage tests take seconds; the simulator's control port doubles as the
# SEG policy service.
export ENS_ITEM_TIMEOUT_MS=2000 ENS_EWS_RETRY_SCALE=0.05
# Graph: the simulator retries failed notifications 100x faster than Graph (1 s, 2 s,
# 4 s ... become 10 ms, 20 ms ...), so the outage tests see the redelivery in seconds.
export ENS_GRAPH_RETRY_SCALE=0.01
# A refused push credential pauses its app's notifications for 1 s, not a minute.
export ENS_CREDENTIAL_PAUSE=1
# A per-record push cap small enough for CallbackLimitsTests to reach within a minute.
export ENS_MAX_NOTIFICATIONS_PER_MINUTE=40
# A registration budget short enough for the tarpit test to wait out.
export ENS_REGISTRATION_BUDGET_MS=4000
# Two registrations at once per responder process (of four threads), so concurrent
# registrations really overlap in the tests; the rest still answer 503.
export ENS_MAX_CONCURRENT_REGISTRATIONS=2
# A per-token record quota small enough for RecordCreationTests to reach.
export ENS_RECORDS_PER_TOKEN_PER_HOUR=100
export ENS_POLICY_URL=http://127.0.0.1:$((ENS_PORT + 4))/policy/check
export ENS_TEST_VAR=$ENS_VAR ENS_TEST_PORT=$ENS_PORT ENS_TEST_ROOT=$PWD
# The manifest with the integration tests (built by make test, make test-stack).
export ENS_INTEGRATION_TESTS=1

case "${1:-}" in
  unit)
    # The unit tests alone, as make check built them (a build with the integration
    # tests runs here too: they are skipped).
    ENS_INTEGRATION_TESTS=0 exec swift test --skip-build --skip IntegrationTests ;;
  up)
    [ -d "$ENS_VAR/run" ] && scripts/stack.sh down || true
    rm -rf "$ENS_VAR"
    scripts/stack.sh up
    echo "test stack up under $ENS_VAR (port $ENS_PORT): make suite SUITE=ExchangeTests; make test-stack-stop"
    exit 0 ;;
  suite)
    [ -n "${2:-}" ] || { echo "usage: scripts/test.sh suite REGEX (e.g. ExchangeTests)" >&2; exit 2; }
    [ -d "$ENS_VAR/run" ] || { echo "no test stack under $ENS_VAR: run make test-stack first" >&2; exit 2; }
    exec swift test --skip-build --no-parallel --filter "$2" ;;
  down)
    exec scripts/stack.sh down ;;
  "") ;;
  *) echo "usage: scripts/test.sh [unit | up | suite REGEX | down]" >&2; exit 2 ;;
esac

# A previous run that was interrupted may have left its stack up.
[ -d "$ENS_VAR/run" ] && scripts/stack.sh down || true
rm -rf "$ENS_VAR"
trap 'scripts/stack.sh down' EXIT
scripts/stack.sh up

# What the end of the run needs is prepared now, beside the integration tests, which
# mostly wait on the stack: Schemathesis's installation (a venv from PyPI), ENSKit's
# build (swift-crypto) and the .deb's release build (in a build directory of its own,
# since swift test locks .build). At idle CPU and I/O priority they take only what the
# tests leave, so the tests see the host as before; without idle priority they are not
# run here, and each step does its own as before. Output: var/prebuild*.log.
export ENS_DEB_SCRATCH=$PWD/.build/deb
mkdir -p var
at_idle_priority() {
  chrt --idle -p 0 "$BASHPID" && ionice -c 3 -p "$BASHPID" || { echo "prebuild: no idle priority here; not run"; exit 0; }
}
tools_pid='' prebuild_pid=''
if [ -z "${ENS_TEST_FILTER:-}" ]; then
  ( at_idle_priority; Tests/tools/schemathesis.sh --prepare ) > var/prebuild-tools.log 2>&1 &
  tools_pid=$!
  (
    at_idle_priority
    # The previous release for the rolling upgrade (a debug build in var/release-prev,
    # about 40 s of CPU): first, so that it is ready long before the cluster checks.
    if [ "$(id -u)" -eq 0 ]; then
      scripts/rolling-upgrade.sh build-previous || echo "prebuild: the previous release failed (the rolling upgrade builds it again)"
    fi
    (cd clients/ENSKit && env -u ENS_SERVER_ONLY swift build --build-tests) || echo "prebuild: ENSKit failed"
    if [ "$(id -u)" -eq 0 ]; then  # scripts/deb-test.sh runs as root only
      swift build -c release --static-swift-stdlib --scratch-path "$ENS_DEB_SCRATCH" || echo "prebuild: release failed"
      # The previous release's .deb (a release build in var/release-prev, about two
      # minutes of CPU), from which scripts/deb-test.sh tests the upgrade in place.
      scripts/rolling-upgrade.sh build-previous-deb || echo "prebuild: the previous release's .deb failed"
    fi
    # The libFuzzer targets are built (not run) so that they cannot rot unseen (make
    # fuzz runs them); checked below.
    if FUZZ_BUILD_ONLY=1 FUZZ_SANITIZE=none scripts/fuzz.sh > var/prebuild-fuzz.log 2>&1; then
      echo ok > var/prebuild-fuzz.status
    else
      echo failed > var/prebuild-fuzz.status
    fi
  ) > var/prebuild.log 2>&1 &
  prebuild_pid=$!
fi

# The HTTP contract again with Apache httpd in front (apache/, mod_proxy_fcgi to the same
# pool) on the same port: the device API, Exchange and Graph callbacks, errors, logs and limits,
# ApacheFrontTests (mod_security2 limits, mod_fcgid, CGI) and SlowExchangeTests (/alive
# and mail served beside slow registrations). Suite names are anchored: the unit suites
# (GraphTests.GraphTests) need no front. Then nginx again.
APACHE_TESTS=${ENS_TEST_APACHE_FILTER:-'IntegrationTests\.(FoundationTests|DeviceAPITests|ExchangeTests|GraphTests|RecordCreationTests|MetricsEndpointTests|ApacheFrontTests|SlowExchangeTests)/'}
apache_pass() {
  echo "== the contract through Apache httpd (mod_proxy_fcgi)"
  scripts/stack.sh apache-site-check || return 1
  scripts/stack.sh nginx-stop && scripts/stack.sh apache-start || return 1
  swift test --skip-build --no-parallel --filter "$APACHE_TESTS" 2>&1 | tee "$ENS_VAR/swift-test-apache.out" \
    | grep -E '✘|^.? ?Test run with|Executed [0-9]+ tests'  # the whole output: $ENS_VAR/swift-test-apache.out
  local result=${PIPESTATUS[0]}
  scripts/stack.sh apache-stop && scripts/stack.sh nginx-start || result=1
  return "$result"
}

# How long each step took, printed at the end: make test has a budget (docs/testing.md),
# and this says where it goes. A step's time starts where the previous one ended.
phases=()
phase_start=0
mark() { phases+=("$1 $((SECONDS - phase_start)) s"); phase_start=$SECONDS; }

set +e
if [ -n "${ENS_TEST_FILTER:-}" ]; then
  swift test --skip-build --no-parallel --filter "$ENS_TEST_FILTER" 2>&1 | tee "$ENS_VAR/swift-test.out"
  status=${PIPESTATUS[0]}
  # ENS_TEST_APACHE=1: the Apache pass too.
  [ "${ENS_TEST_APACHE:-0}" = 1 ] && { apache_pass || status=1; }
  exit "$status"
fi
# The unit suites in parallel (as make check runs them), then the integration suites one
# at a time: they share the stack, and some stop and start parts of it.
mark "stack up"
swift test --skip-build --skip IntegrationTests 2>&1 | tee "$ENS_VAR/swift-test.out"
status=${PIPESTATUS[0]}
mark unit
swift test --skip-build --no-parallel --filter IntegrationTests 2>&1 | tee -a "$ENS_VAR/swift-test.out"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
mark integration
apache_pass || status=1
mark Apache
# The simulators the integration tests trust are themselves checked (strictness,
# failure injection, retries): the four at once, each on free ports of its own.
selftests=()
for sim in apns ews fcm graph; do
  python3 "Tests/tools/${sim}_simulator_selftest.py" > "$ENS_VAR/selftest-$sim.out" 2>&1 &
  selftests+=("$!")
done
for pid in "${selftests[@]}"; do wait "$pid" || status=1; done
for sim in apns ews fcm graph; do tail -1 "$ENS_VAR/selftest-$sim.out"; done
mark simulators
# The device API against its OpenAPI document, fuzzed by Schemathesis (bounded).
[ -z "$tools_pid" ] || wait "$tools_pid" || true
scripts/stack.sh token schemathesis > "$ENS_VAR/schemathesis-token"
Tests/tools/schemathesis.sh "https://localhost:$ENS_PORT" "$ENS_VAR/schemathesis-token" 2>&1 | tee "$ENS_VAR/schemathesis.out" | tail -15
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
mark schemathesis
Tests/tools/scan-secrets.sh || status=1
mark "secret scan"
# The cluster (scripts/cluster.sh): three Galera nodes in network namespaces, two ENS
# hosts, a load balancer; a Galera node and an ENS host killed under a small load, then
# nothing acknowledged lost and the cluster converged (scripts/cluster-chaos.sh --short,
# about 90 s). Its own environment, not this stack's test settings.
if [ "$(id -u)" -eq 0 ]; then
  env -i PATH="$PATH" HOME="$HOME" LANG=C.UTF-8 ENS_BIN="$ENS_BIN" CLUSTER_ID=1 scripts/cluster-chaos.sh --short || status=1
  mark cluster-chaos
  # The rolling upgrade, short: the previous release's cluster upgraded host by host to
  # this build under a small load (scripts/rolling-upgrade.sh --short, about 2 minutes).
  # After cluster-chaos has torn its cluster down, so the same CLUSTER_ID.
  env -i PATH="$PATH" HOME="$HOME" LANG=C.UTF-8 ENS_BIN="$ENS_BIN" CLUSTER_ID=1 scripts/rolling-upgrade.sh --short || status=1
  mark "rolling upgrade"
else
  echo "cluster checks SKIPPED: they need root (network namespaces for the Galera nodes); run make cluster-chaos and make rolling-upgrade as root"
fi
# ENSKit (clients/ENSKit), the device side as a Swift package: its unit tests, then its
# stack tests against a private stack of its own (var/enskit, port 24443). Its build and
# the .deb's have been running beside the tests (prebuild, above): they finish first.
[ -z "$prebuild_pid" ] || wait "$prebuild_pid" || true
mark "waiting for the ENSKit and .deb builds"
if [ -n "$prebuild_pid" ]; then
  if [ "$(cat var/prebuild-fuzz.status 2>/dev/null)" = ok ]; then
    echo "fuzz targets: built (make fuzz runs them)"
  else
    echo "fuzz targets: FAILED to build, see var/prebuild-fuzz.log"; tail -20 var/prebuild-fuzz.log; status=1
  fi
fi
scripts/enskit-test.sh || status=1
mark ENSKit
# The Debian package: built (make deb), linted, installed, configured as docs/deployment.md says,
# the contract run against the installed binaries (var/deb, port 28443), then purged; then
# the upgrade from the previous release's package, built above: required here.
ENS_DEB_PREVIOUS_REQUIRED=1 scripts/deb-test.sh || status=1
mark .deb
echo "test.sh: time per step: $(IFS=';'; echo "${phases[*]}" | sed 's/;/, /g'); $SECONDS s in all"
exit "$status"
