#!/usr/bin/env bash
# ENSKit's tests (clients/ENSKit, docs/client.md):
#   scripts/enskit-test.sh         the unit tests, then the stack tests against a private
#                                  stack (var/enskit, port 24443) from the server's debug
#                                  build, through nginx with the simulators; the stack is
#                                  always torn down. Part of make test.
#   scripts/enskit-test.sh unit    the unit tests only (recorded answers, crypto vectors;
#                                  no stack). Part of make check.
#   scripts/enskit-test.sh by-url  an app's package that adds this repository by URL (a
#                                  bare clone of HEAD, file://) resolves it and finds the
#                                  ENSKit product; part of make test. (Its build is
#                                  clients/ENSKit's, from the same root manifest.)
#   scripts/enskit-test.sh up      start the private stack and leave it up
#   scripts/enskit-test.sh stack [REGEX]  the stack tests against the stack `up` started
#   scripts/enskit-test.sh down    stop it
# The stack tests find the stack through ENSKIT_STACK_VAR, ENSKIT_STACK_PORT and
# ENSKIT_STACK_TOKEN (an ApiToken); without them they are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
# clients/ENSKit links ENSKit from the root manifest, which leaves it out for the
# server's builds (ENS_SERVER_ONLY, set by make).
unset ENS_SERVER_ONLY
ROOT=$PWD
export PATH=/opt/swift/usr/bin:$PATH
export ENS_VAR=$ROOT/var/enskit ENS_PORT=${ENSKIT_TEST_PORT:-24443} ENS_BIN=${ENS_BIN:-$ROOT/.build/debug}
export ENS_TOKEN_REFRESH=2 ENS_HEALTH_CACHE_MS=200 ENS_KEY_POOL=20
# Run from scripts/test.sh, this inherits its stack's settings; the SEG policy URL names
# that stack's simulator, so this stack has none of its own.
export ENS_POLICY_URL=

# The package's own build (.build under clients/ENSKit; the first one compiles
# swift-crypto, a few minutes). Its output goes to var/enskit-build.log.
build() {
  local log=$ROOT/var/enskit-build.log
  if ! (cd clients/ENSKit && swift build --build-tests >"$log" 2>&1); then
    grep -E 'error' "$log" | head -20
    echo "ENSKit build failed; see $log" >&2
    return 1
  fi
}

run_unit() {
  (cd clients/ENSKit && swift test --skip-build --filter ENSKitTests 2>&1 | tee "$ROOT/var/enskit-unit.out" | grep -E '✘|^.? ?Test run with')
  return "${PIPESTATUS[0]}"
}

run_stack() {
  [ -d "$ENS_VAR/run" ] || { echo "no ENSKit stack under $ENS_VAR: scripts/enskit-test.sh up" >&2; return 2; }
  local token
  token=$(scripts/stack.sh token "enskit-$(date +%s%N)")
  (cd clients/ENSKit && ENSKIT_STACK_VAR=$ENS_VAR ENSKIT_STACK_PORT=$ENS_PORT ENSKIT_STACK_TOKEN=$token \
     swift test --skip-build --no-parallel --filter "${1:-ENSKitStackTests}" 2>&1 | tee "$ENS_VAR/swift-test.out" | grep -E '✘|^.? ?Test run with')
  return "${PIPESTATUS[0]}"
}

# A scratch app package that depends on this repository by URL, as an app does: the root
# manifest must resolve as a dependency and vend the ENSKit library. A bare clone of HEAD
# stands in for the remote (SwiftPM takes file:// git URLs), so what is tested is what
# is committed.
by_url() {
  local dir=$ROOT/var/enskit-by-url
  rm -rf "$dir"; mkdir -p "$dir/App/Sources/App"
  git clone --quiet --bare "$ROOT" "$dir/ens.git"
  cat > "$dir/App/Package.swift" <<MANIFEST
// swift-tools-version: 6.0
import PackageDescription
let package = Package(
    name: "App",
    platforms: [.macOS(.v15), .iOS(.v16)],
    dependencies: [.package(url: "file://$dir/ens.git", revision: "$(git rev-parse HEAD)")],
    targets: [.executableTarget(name: "App", dependencies: [.product(name: "ENSKit", package: "ens")])]
)
MANIFEST
  echo 'import ENSKit' > "$dir/App/Sources/App/main.swift"
  echo 'print(ENSPrivacyMode.secure)' >> "$dir/App/Sources/App/main.swift"
  if ! (cd "$dir/App" && swift package resolve >"$dir/resolve.log" 2>&1 && swift package show-dependencies >"$dir/dependencies.txt" 2>&1); then
    tail -20 "$dir/resolve.log" >&2; echo "ENSKit by URL: the app package did not resolve" >&2; return 1
  fi
  local described
  described=$(cd "$dir/App" && swift package dump-package | python3 -c '
import json, sys
deps = json.load(sys.stdin)["targets"][0]["dependencies"]
print(",".join(d["product"][0] + "@" + d["product"][1] for d in deps if "product" in d))')
  if [ "$described" != "ENSKit@ens" ] || ! grep -q "swift-crypto" "$dir/dependencies.txt"; then
    echo "ENSKit by URL: unexpected product or dependencies: $described" >&2; cat "$dir/dependencies.txt" >&2; return 1
  fi
  echo "ENSKit by URL: an app package resolves this repository (HEAD $(git rev-parse --short HEAD)) and links ENSKit"
}

stack_up() {
  # Only our own leftovers: the stack under var/enskit.
  [ -d "$ENS_VAR/run" ] && scripts/stack.sh down || true
  rm -rf "$ENS_VAR"
  scripts/stack.sh up >/dev/null
}

mkdir -p var
case "${1:-}" in
  unit) build; run_unit; exit $? ;;
  up) stack_up; echo "ENSKit stack up under $ENS_VAR (port $ENS_PORT): scripts/enskit-test.sh stack; scripts/enskit-test.sh down"; exit 0 ;;
  stack) build; run_stack "${2:-}"; exit $? ;;
  down) exec scripts/stack.sh down ;;
  by-url) by_url; exit $? ;;
  "") ;;
  *) echo "usage: scripts/enskit-test.sh [unit | up | stack [REGEX] | down | by-url]" >&2; exit 2 ;;
esac

build
status=0
run_unit || status=1
by_url || status=1
trap 'scripts/stack.sh down >/dev/null' EXIT
stack_up
run_stack || status=1
exit "$status"
