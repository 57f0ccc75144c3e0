#!/usr/bin/env bash
# make run: the whole stack in the foreground of this terminal; Ctrl-C stops it.
# ENS_FRONT=apache puts Apache httpd in front instead of nginx (scripts/stack.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export ENS_VAR=${ENS_VAR:-$PWD/var} ENS_PORT=${ENS_PORT:-8443}
trap 'echo; echo "stopping..."; scripts/stack.sh down; exit 0' INT TERM
scripts/stack.sh up
token=$(scripts/stack.sh token "dev-$(date +%Y%m%d%H%M%S)")
cat <<TXT

ENS is running:  https://127.0.0.1:$ENS_PORT  (self-signed certificate: $ENS_VAR/tls/server.crt)
Web server:      ${ENS_FRONT:-nginx}  (ENS_FRONT=apache for Apache httpd)
Logs:            $ENS_VAR/log/
A new API token (shown once; only its hash is stored):
  $token

Try:
  curl --cacert $ENS_VAR/tls/server.crt https://localhost:$ENS_PORT/alive
  curl --cacert $ENS_VAR/tls/server.crt -H 'ApiToken: $token' \\
       -d email=someone@example.com https://localhost:$ENS_PORT/getpublickey
  scripts/demo.sh     # register devices with an Exchange mailbox (EWS simulator) and an
                      # Exchange Online mailbox (Graph simulator), send them new mail, and
                      # show the pushes the APNs and FCM simulators received

Ctrl-C (or 'make stop' from another terminal) stops everything.
TXT
while true; do sleep 3600 & wait $!; done
