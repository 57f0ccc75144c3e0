# shellcheck shell=bash
# Helpers scripts/stack.sh and scripts/cluster.sh share: sourced, not run. The stack
# orchestrator (stack.sh) starts and stops one host's processes; cluster.sh runs the
# Galera nodes and the load balancer and drives stack.sh once per ENS host.

# shellcheck source=scripts/sender.sh
. "$(dirname "${BASH_SOURCE[0]}")/sender.sh"

# Messages name the script that prints them ("stack: ...", "cluster: ...").
log() { printf '%s: %s\n' "$(basename "$0" .sh)" "$*" >&2; }
die() { printf '%s: error: %s\n' "$(basename "$0" .sh)" "$*" >&2; exit 1; }

# pid_alive FILE: the process whose pid FILE holds is running.
pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# wait_until SECONDS COMMAND...: polls COMMAND every 0.1 s until it succeeds; fails
# after SECONDS.
wait_until() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -ge $deadline ] && return 1
    sleep 0.1
  done
}
