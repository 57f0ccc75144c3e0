#!/usr/bin/env bash
# Starts and stops ENS's local stack: a private MariaDB, the responder pool and nginx,
# all under one directory (default var/). Used by `make run`, `make test`, `make bench`.
#
#   scripts/stack.sh up | down | status
#   scripts/stack.sh db-start | db-stop | fcgi-start | fcgi-stop | nginx-start | nginx-stop
#   scripts/stack.sh apache-start | apache-stop | apache-site-check  # Apache httpd (below)
#   scripts/stack.sh sender-start | sender-stop | sim-start | sim-stop | ews-sim-start | ews-sim-stop
#   scripts/stack.sh fcm-sim-start | fcm-sim-stop | graph-sim-start | graph-sim-stop
#   scripts/stack.sh dns-sim-start | dns-sim-stop   # SRV answers for Dovecot discovery
#   scripts/stack.sh keys-start | keys-stop  # the key-pool refiller (`ens-cron keys` every second)
#   scripts/stack.sh token LABEL     # create an API token and print it
#
# Environment: ENS_VAR (state directory, default var), ENS_PORT (HTTPS port, default
# 8443; the APNs simulator uses the next two ports, the Exchange simulator the three
# after those: HTTPS, control, plain HTTP; the FCM simulator the two after those; the
# Microsoft Graph simulator the two after those: HTTPS, control; the DNS simulator
# ENS_PORT+13 over UDP; MariaDB listens on
# ENS_PORT+20 on loopback with TLS besides its socket), ENS_BIN (directory
# holding ens-fcgi etc., default .build/release; an older release's, with ens-apns for
# ens-sender, will do), ENS_RATE (per-IP requests/s allowed
# by nginx, default 1000000 for local use), ENS_FRONT (nginx, default, or apache:
# Apache httpd on the same port for `up`), ENS_MARIADB_OPTIONS (more mariadbd options,
# for a benchmark's comparison of server settings).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VAR=$(mkdir -p "${ENS_VAR:-$ROOT/var}" && cd "${ENS_VAR:-$ROOT/var}" && pwd)
PORT=${ENS_PORT:-8443}
BIN=${ENS_BIN:-$ROOT/.build/release}
RATE=${ENS_RATE:-1000000}
DB_SOCKET=$VAR/run/mysqld.sock
# MariaDB also listens on loopback TCP with TLS (127.0.0.1 and 127.0.0.2, a host name
# its certificate does not list), for the tests of db.tls_*. No account of the stack
# may log in over TCP.
DB_PORT=$((PORT + 20))
FCGI_SOCKET=$VAR/run/fcgi.sock
CONFIG=$VAR/ens.conf
APNS_PORT=$((PORT + 1))
APNS_CONTROL_PORT=$((PORT + 2))
EWS_PORT=$((PORT + 3))
EWS_CONTROL_PORT=$((PORT + 4))
EWS_HTTP_PORT=$((PORT + 5))
FCM_PORT=$((PORT + 6))
FCM_CONTROL_PORT=$((PORT + 7))
GRAPH_PORT=$((PORT + 8))
GRAPH_CONTROL_PORT=$((PORT + 9))
DNS_PORT=$((PORT + 13))  # UDP
# The development Entra tenants the Graph simulator plays (contoso.test, fabrikam.test)
# and ENS's multi-tenant application in them: one client id and certificate, as a real
# multi-tenant app has.
GRAPH_TENANT_CONTOSO=6d1f8f38-0c55-4d7e-9d1e-5c0a3a7e0001
GRAPH_TENANT_FABRIKAM=6d1f8f38-0c55-4d7e-9d1e-5c0a3a7e0002
GRAPH_CLIENT_ID=0e5a1c2b-3d4f-4a6b-8c9d-0e1f2a3b4c5d
ME=$(id -un)

# shellcheck source=scripts/common.sh
. "$(dirname "$0")/common.sh"

# The stack listens on PORT to PORT+25. A port inside the kernel's ephemeral range can be
# held at any moment by some outgoing connection's local end, and then a listener fails
# to bind now and then; every default port here is below that range.
if read -r eph_low eph_high < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null \
  && [ "$((PORT + 25))" -ge "$eph_low" ] && [ "$PORT" -le "$eph_high" ]; then
  echo "stack: warning: ports $PORT-$((PORT + 25)) overlap the ephemeral range $eph_low-$eph_high; a listener may fail to bind" >&2
fi

# stop_by_pidfile NAME SECONDS: SIGTERM the process in $VAR/run/NAME.pid, wait up to
# SECONDS for it to finish what it is doing, then SIGKILL it; remove the pid file.
stop_by_pidfile() {
  local file="$VAR/run/$1.pid"
  pid_alive "$file" || { rm -f "$file"; return 0; }
  local pid; pid=$(cat "$file")
  kill -TERM "$pid" 2>/dev/null || true
  wait_until "$2" bash -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
  rm -f "$file"
}

init_dirs() {
  mkdir -p "$VAR"/{run,log,db,tls,secrets,nginx,lib}
  chmod 700 "$VAR/secrets"
}

# Secrets for the local stack only: random, generated once, readable by us only.
init_secrets() {
  umask 077
  [ -s "$VAR/secrets/db-service.password" ] || openssl rand -hex 24 > "$VAR/secrets/db-service.password"
  [ -s "$VAR/secrets/db-migrate.password" ] || openssl rand -hex 24 > "$VAR/secrets/db-migrate.password"
  [ -s "$VAR/secrets/master.key" ] || openssl rand -hex 32 > "$VAR/secrets/master.key"
  # The bearer token GET /metrics asks of its scraper (metrics.token_file).
  [ -s "$VAR/secrets/metrics.token" ] || openssl rand -hex 32 > "$VAR/secrets/metrics.token"
  # Certificate auth for one more bundle id: a local CA the APNs simulator trusts, and
  # a client certificate whose UID is the bundle id, as PKCS#12 with a password.
  if [ ! -s "$VAR/secrets/apns-cert-com.example.certapp.p12" ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 825 -subj "/CN=ENS dev APNs CA" \
      -keyout "$VAR/secrets/apns-client-ca.key" -out "$VAR/secrets/apns-client-ca.crt" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/UID=com.example.certapp/CN=Apple Push Services: com.example.certapp" \
      -keyout "$VAR/secrets/apns-cert.key" -out "$VAR/secrets/apns-cert.csr" 2>/dev/null
    openssl x509 -req -in "$VAR/secrets/apns-cert.csr" -CA "$VAR/secrets/apns-client-ca.crt" -CAkey "$VAR/secrets/apns-client-ca.key" \
      -CAcreateserial -days 825 -out "$VAR/secrets/apns-cert.crt" 2>/dev/null
    openssl rand -hex 12 > "$VAR/secrets/apns-cert.password"
    openssl pkcs12 -export -inkey "$VAR/secrets/apns-cert.key" -in "$VAR/secrets/apns-cert.crt" \
      -passout "file:$VAR/secrets/apns-cert.password" -out "$VAR/secrets/apns-cert-com.example.certapp.p12"
    rm -f "$VAR/secrets/apns-cert.csr" "$VAR/secrets/apns-cert.key" "$VAR/secrets/apns-cert.crt"
  fi
  # A development Firebase service account: Google's key-file JSON, with its token_uri
  # at the FCM simulator, which checks assertions against the key's public half. Made
  # again when the stack's port has changed since: its token_uri names the old one.
  if ! grep -qs "\"https://localhost:$FCM_PORT/token\"" "$VAR/secrets/fcm-service-account.json"; then
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$VAR/secrets/fcm-key.pem" 2>/dev/null
    openssl pkey -in "$VAR/secrets/fcm-key.pem" -pubout -out "$VAR/secrets/fcm-key.pub.pem" 2>/dev/null
    python3 - "$VAR/secrets/fcm-key.pem" "https://localhost:$FCM_PORT/token" > "$VAR/secrets/fcm-service-account.json" <<'PY'
import json, sys
print(json.dumps({"type": "service_account", "project_id": "ens-dev", "private_key_id": "devkey0000000000000000000000000000000001",
                  "private_key": open(sys.argv[1]).read(), "client_email": "ens-sender@ens-dev.iam.gserviceaccount.com",
                  "client_id": "100000000000000000001", "token_uri": sys.argv[2]}, indent=2))
PY
    rm -f "$VAR/secrets/fcm-key.pem"
  fi
  # ENS's development Entra application certificate (RSA, self-signed, as Entra accepts):
  # the key signs client assertions; the Graph simulator checks them against the certificate.
  if [ ! -s "$VAR/secrets/graph-app.key" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj "/CN=ENS dev Graph application" \
      -keyout "$VAR/secrets/graph-app.key" -out "$VAR/secrets/graph-app.crt" 2>/dev/null
  fi
  # A development APNs token-auth key (.p8); the simulator checks JWTs against its public half.
  if [ ! -s "$VAR/secrets/apns-auth-key.p8" ]; then
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$VAR/secrets/apns-auth-key.p8" 2>/dev/null
    openssl pkey -in "$VAR/secrets/apns-auth-key.p8" -pubout -out "$VAR/secrets/apns-auth-key.pub.pem" 2>/dev/null
  fi
  umask 022
}

# The private MariaDB's TLS: a CA of its own and a server certificate for 127.0.0.1
# and localhost (not 127.0.0.2), made on first use.
init_db_tls() {
  [ -s "$VAR/tls/mariadb-server.crt" ] && return 0
  openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj "/CN=ENS dev MariaDB CA" \
    -keyout "$VAR/tls/mariadb-ca.key" -out "$VAR/tls/mariadb-ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$VAR/tls/mariadb-server.key" -out "$VAR/tls/mariadb-server.csr" 2>/dev/null
  openssl x509 -req -in "$VAR/tls/mariadb-server.csr" -CA "$VAR/tls/mariadb-ca.crt" -CAkey "$VAR/tls/mariadb-ca.key" \
    -CAcreateserial -days 825 -extfile <(printf 'subjectAltName=DNS:localhost,IP:127.0.0.1') \
    -out "$VAR/tls/mariadb-server.crt" 2>/dev/null
  chmod 600 "$VAR/tls/mariadb-ca.key" "$VAR/tls/mariadb-server.key"
}

# A self-signed certificate for localhost, made on first use.
init_tls() {
  [ -s "$VAR/tls/server.crt" ] && return 0
  log "generating a self-signed certificate for localhost"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 825 \
    -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -keyout "$VAR/tls/server.key" -out "$VAR/tls/server.crt" 2>/dev/null
  chmod 600 "$VAR/tls/server.key"
}

write_config() {
  # Dovecot: tests start their own private Dovecot (scripts/dovecot.sh) and register it.
  # Written only for binaries that know the key (bench/ab-*.sh runs older builds).
  dovecot_settings=""
  known_keys=$("$BIN/ens-cron" config-reference --example 2>/dev/null || true)
  if grep -q '^dovecot.hook_url' <<<"$known_keys"; then
    dovecot_settings="dovecot.hook_url = https://localhost:$PORT/dovecot/"
  fi
  # Discovery's SRV lookups ask the DNS simulator (dns_sim_start).
  if grep -q '^dovecot.nameservers' <<<"$known_keys"; then
    dovecot_settings="$dovecot_settings"$'\n'"dovecot.nameservers = 127.0.0.1:$DNS_PORT"
  fi
  cat > "$CONFIG" <<CONF
# ENS configuration for the local stack (written by scripts/stack.sh).
# Every key is documented in config/ens.conf.example.
fcgi.socket = $FCGI_SOCKET
fcgi.socket_mode = 0660
fcgi.processes = ${ENS_PROCESSES:-2}
fcgi.threads = ${ENS_THREADS:-4}
http.max_body_bytes = 65536
health.cache_ms = ${ENS_HEALTH_CACHE_MS:-1000}
db.socket = $DB_SOCKET
db.name = ens
db.user = ens_service
db.password_file = $VAR/secrets/db-service.password
db.migration_user = ens_migrate
db.migration_password_file = $VAR/secrets/db-migrate.password
db.migrations_dir = $ROOT/sql/migrations
security.master_key_file = $VAR/secrets/master.key
auth.token_cache_file = $VAR/lib/api-tokens.cache
auth.refresh_seconds = ${ENS_TOKEN_REFRESH:-5}
keys.pool_size = ${ENS_KEY_POOL:-50}
push.socket = $VAR/run/apns.sock
push.spool_dir = $VAR/spool
push.credential_pause_seconds = ${ENS_CREDENTIAL_PAUSE:-60}
apns.production_url = https://localhost:$APNS_PORT
apns.sandbox_url = https://localhost:$APNS_PORT
push.ca_file = $VAR/tls/server.crt
apns.key_file = $VAR/secrets/apns-auth-key.p8
apns.key_id = DEVKEY0001
apns.team_id = DEVTEAM001
apns.certificate.com.example.certapp = $VAR/secrets/apns-cert-com.example.certapp.p12
apns.certificate_password_file.com.example.certapp = $VAR/secrets/apns-cert.password
fcm.url = https://localhost:$FCM_PORT
fcm.service_account.com.example.mail = $VAR/secrets/fcm-service-account.json
fcm.service_account.com.example.android = $VAR/secrets/fcm-service-account.json
cron.lock_file = $VAR/run/ens-cron.lock
cron.status_file = $VAR/lib/cron-status
# Microsoft Graph: the simulator plays Graph and the identity platform for two tenants.
graph.callback_url = https://localhost:$PORT/graph/
graph.url = https://localhost:$GRAPH_PORT
graph.login_url = https://localhost:$GRAPH_PORT
graph.ca_file = $VAR/tls/server.crt
graph.subscription_minutes = ${ENS_GRAPH_SUBSCRIPTION_MINUTES:-4200}
graph.slot_dir = $VAR/run/graph-slots
graph.tenant.contoso.id = $GRAPH_TENANT_CONTOSO
graph.tenant.contoso.domains = contoso.test
graph.tenant.contoso.client_id = $GRAPH_CLIENT_ID
graph.tenant.contoso.certificate_file = $VAR/secrets/graph-app.crt
graph.tenant.contoso.key_file = $VAR/secrets/graph-app.key
graph.tenant.fabrikam.id = $GRAPH_TENANT_FABRIKAM
graph.tenant.fabrikam.domains = fabrikam.test
graph.tenant.fabrikam.client_id = $GRAPH_CLIENT_ID
graph.tenant.fabrikam.certificate_file = $VAR/secrets/graph-app.crt
graph.tenant.fabrikam.key_file = $VAR/secrets/graph-app.key
$dovecot_settings
metrics.dir = $VAR/run/metrics
metrics.token_file = $VAR/secrets/metrics.token
# Exchange: the local simulator stands in for every Exchange host name (CONNECT_TO);
# TLS is still verified, against the simulator's own CA.
exchange.callback_url = https://localhost:$PORT/ews/
exchange.ca_file = $VAR/ews-sim/ca.pem
exchange.connect_to = :443:127.0.0.1:$EWS_PORT, :80:127.0.0.1:$EWS_HTTP_PORT
# The simulators live on loopback, which ENS otherwise refuses to reach for Exchange.
exchange.allowed_networks = 127.0.0.0/8, ::1/128
exchange.status_frequency_minutes = ${ENS_STATUS_FREQUENCY:-30}
exchange.item_timeout_ms = ${ENS_ITEM_TIMEOUT_MS:-5000}
exchange.max_notifications_per_minute = ${ENS_MAX_NOTIFICATIONS_PER_MINUTE:-120}
exchange.registration_budget_ms = ${ENS_REGISTRATION_BUDGET_MS:-20000}
# nginx's limits, applied by the responders for Apache (which passes ENS_LIMITS=1), from
# ENS_RATE as nginx's are (per second, bursts five times it, at most 16,000; record
# creation per minute; callbacks per address ten times it).
limits.table_file = $VAR/run/limits.table
limits.api_per_second = $RATE
limits.api_burst = $(( RATE * 5 > 16000 ? 16000 : RATE * 5 ))
limits.records_per_minute = $(( RATE > 1 ? RATE / 2 : 1 ))
limits.records_burst = $(( RATE / 2 > 16000 ? 16000 : RATE > 1 ? RATE / 2 : 1 ))
limits.callback_per_second = $RATE
limits.callback_burst = $(( RATE * 5 > 16000 ? 16000 : RATE * 5 ))
limits.callback_host_per_second = $(( RATE * 10 ))
limits.callback_host_burst = $(( RATE * 50 > 16000 ? 16000 : RATE * 50 ))
limits.graph_per_second = $RATE
limits.graph_burst = $(( RATE * 5 > 16000 ? 16000 : RATE * 5 ))
limits.graph_host_per_second = $(( RATE * 10 ))
limits.graph_host_burst = $(( RATE * 50 > 16000 ? 16000 : RATE * 50 ))
quota.records_per_token_per_hour = ${ENS_RECORDS_PER_TOKEN_PER_HOUR:-5000}
exchange.max_concurrent_registrations = ${ENS_MAX_CONCURRENT_REGISTRATIONS:-1}
policy.url = ${ENS_POLICY_URL:-}
log.level = ${ENS_LOG_LEVEL:-info}
CONF
}

db_ping() { mariadb --no-defaults -S "$DB_SOCKET" -uroot -e 'SELECT 1' >/dev/null 2>&1; }

db_start() {
  init_dirs
  if pid_alive "$VAR/run/mysqld.pid" && db_ping; then return 0; fi
  if [ ! -d "$VAR/db/mysql" ]; then
    log "creating a private MariaDB data directory in $VAR/db"
    mariadb-install-db --no-defaults --datadir="$VAR/db" --user="$ME" \
      --auth-root-authentication-method=socket --skip-test-db >"$VAR/log/mariadb-install.log" 2>&1 \
      || die "mariadb-install-db failed; see $VAR/log/mariadb-install.log"
  fi
  init_db_tls
  mariadbd --no-defaults --datadir="$VAR/db" --socket="$DB_SOCKET" \
    --bind-address=127.0.0.1,127.0.0.2 --port="$DB_PORT" --skip-name-resolve \
    --ssl-ca="$VAR/tls/mariadb-ca.crt" --ssl-cert="$VAR/tls/mariadb-server.crt" --ssl-key="$VAR/tls/mariadb-server.key" \
    --pid-file="$VAR/run/mysqld.pid" --log-error="$VAR/log/mariadb.log" --user="$ME" \
    --innodb-buffer-pool-size=256M --max-connections=500 ${ENS_MARIADB_OPTIONS:-} \
    >/dev/null 2>&1 < /dev/null &
  wait_until 30 db_ping || die "MariaDB did not start; see $VAR/log/mariadb.log"
}

db_stop() { stop_by_pidfile mysqld 30; }

# Database, accounts (restricted service account, separate migration account), schema.
db_setup() {
  init_secrets
  sed -e "s/@DB_NAME@/ens/g" \
      -e "s/@SERVICE_PASSWORD@/$(cat "$VAR/secrets/db-service.password")/g" \
      -e "s/@MIGRATE_PASSWORD@/$(cat "$VAR/secrets/db-migrate.password")/g" \
      "$ROOT/sql/accounts.sql.in" | mariadb --no-defaults -S "$DB_SOCKET" -uroot
  "$BIN/ens-cron" migrate --config "$CONFIG"
  "$BIN/ens-cron" keys --config "$CONFIG"
}

fcgi_start() {
  if pid_alive "$VAR/run/ens-fcgi.pid"; then return 0; fi
  "$BIN/ens-fcgi" --config "$CONFIG" >>"$VAR/log/ens-fcgi.log" 2>&1 < /dev/null &
  echo $! > "$VAR/run/ens-fcgi.pid"
  wait_until 20 test -S "$FCGI_SOCKET" || die "ens-fcgi did not start; see $VAR/log/ens-fcgi.log"
}

fcgi_stop() { stop_by_pidfile ens-fcgi 40; }

# start_simulator NAME LABEL SCRIPT ARGS...: runs Tests/tools/SCRIPT in the background,
# logging to $VAR/log/LABEL.log; the simulator writes its pid to $VAR/run/NAME.pid once
# its ports listen (--ready-file), which is what this waits for.
start_simulator() {
  local name=$1 label=$2 script=$3; shift 3
  if pid_alive "$VAR/run/$name.pid"; then return 0; fi
  rm -f "$VAR/run/$name.pid"
  python3 "$ROOT/Tests/tools/$script" "$@" --ready-file "$VAR/run/$name.pid" >>"$VAR/log/$label.log" 2>&1 < /dev/null &
  if ! wait_until 30 test -s "$VAR/run/$name.pid"; then
    # Its last lines here too: a CI log is often all there is to read afterwards.
    tail -n 15 "$VAR/log/$label.log" | sed "s/^/$label.log: /" >&2
    die "$script did not start; see $VAR/log/$label.log"
  fi
}

# The APNs simulator (Tests/tools/apns_simulator.py): HTTP/2 over TLS, strict about
# JWTs, headers and payloads; accepted pushes are recorded under $VAR/sim (not a log:
# it holds device tokens and payloads, as APNs would).
sim_start() {
  init_dirs; init_tls; mkdir -p "$VAR/sim"
  start_simulator apns-sim apns-simulator apns_simulator.py --port "$APNS_PORT" --control-port "$APNS_CONTROL_PORT" \
    --cert "$VAR/tls/server.crt" --key "$VAR/tls/server.key" --auth-key "$VAR/secrets/apns-auth-key.pub.pem" \
    --key-id DEVKEY0001 --team-id DEVTEAM001 --record "$VAR/sim/apns-accepted.jsonl" \
    --client-ca "$VAR/secrets/apns-client-ca.crt"
}

sim_stop() { stop_by_pidfile apns-sim 10; }

# The FCM simulator (Tests/tools/fcm_simulator.py): FCM HTTP v1 and Google's OAuth token
# endpoint over HTTP/2 and TLS, strict about assertions and messages; accepted messages
# are recorded under $VAR/sim.
fcm_sim_start() {
  init_dirs; init_secrets; init_tls; mkdir -p "$VAR/sim"
  start_simulator fcm-sim fcm-simulator fcm_simulator.py --port "$FCM_PORT" --control-port "$FCM_CONTROL_PORT" \
    --cert "$VAR/tls/server.crt" --key "$VAR/tls/server.key" --service-account-key "$VAR/secrets/fcm-key.pub.pem" \
    --key-id devkey0000000000000000000000000000000001 --client-email ens-sender@ens-dev.iam.gserviceaccount.com \
    --project ens-dev --token-uri "https://localhost:$FCM_PORT/token" --record "$VAR/sim/fcm-accepted.jsonl"
}

fcm_sim_stop() { stop_by_pidfile fcm-sim 10; }

# The Microsoft Graph simulator (Tests/tools/graph_simulator.py): Graph's subscriptions,
# change notifications and mail API, and the identity platform's token endpoint, over
# HTTPS; strict about client assertions, validation handshakes and Graph's limits. It
# calls back into nginx, trusting nginx's certificate.
graph_sim_start() {
  init_dirs; init_secrets; init_tls
  start_simulator graph-sim graph-simulator graph_simulator.py --port "$GRAPH_PORT" --control-port "$GRAPH_CONTROL_PORT" \
    --cert "$VAR/tls/server.crt" --key "$VAR/tls/server.key" --callback-ca "$VAR/tls/server.crt" \
    --login-base "https://localhost:$GRAPH_PORT" --retry-scale "${ENS_GRAPH_RETRY_SCALE:-1}" \
    --tenant "$GRAPH_TENANT_CONTOSO" --client-id "$GRAPH_CLIENT_ID" --client-cert "$VAR/secrets/graph-app.crt" \
    --tenant "$GRAPH_TENANT_FABRIKAM" --client-id "$GRAPH_CLIENT_ID" --client-cert "$VAR/secrets/graph-app.crt"
}

graph_sim_stop() { stop_by_pidfile graph-sim 10; }

# The DNS simulator (Tests/tools/dns_simulator.py, with dnslib): SRV answers from
# $VAR/dns/zone.json, read again for every query, so tests change answers by rewriting it.
# The Dovecot backend's discovery asks it (dovecot.nameservers).
dns_sim_start() {
  init_dirs; mkdir -p "$VAR/dns"
  [ -f "$VAR/dns/zone.json" ] || echo '{}' > "$VAR/dns/zone.json"
  start_simulator dns-sim dns-simulator dns_simulator.py --port "$DNS_PORT" --zone "$VAR/dns/zone.json"
}

dns_sim_stop() { stop_by_pidfile dns-sim 10; }

# The Exchange simulator (Tests/tools/ews_simulator.py): Autodiscover, EWS and push
# callbacks over HTTPS, strict about namespaces, structure and credentials. It makes
# its own CA under $VAR/ews-sim and calls back into nginx, trusting nginx's certificate.
ews_sim_start() {
  init_dirs; init_tls; mkdir -p "$VAR/ews-sim"
  start_simulator ews-sim ews-simulator ews_simulator.py --port "$EWS_PORT" --control-port "$EWS_CONTROL_PORT" \
    --http-port "$EWS_HTTP_PORT" --tls-dir "$VAR/ews-sim" --callback-ca "$VAR/tls/server.crt" \
    --minute-seconds "${ENS_EWS_MINUTE_SECONDS:-60}" --retry-scale "${ENS_EWS_RETRY_SCALE:-1}"
}

ews_sim_stop() { stop_by_pidfile ews-sim 10; }

# The sender: $BIN's ens-sender, or the ens-apns of an older release's directory
# (scripts/sender.sh); its pid file and log are ens-sender's whichever it is.
sender_start() {
  if pid_alive "$VAR/run/ens-sender.pid"; then return 0; fi
  # A sender killed with -9 leaves its socket file behind; without removing it, the
  # readiness check below would pass before the new sender listens.
  rm -f "$VAR/run/apns.sock"
  # Two malloc arenas: see deploy/systemd/ens-sender.service.
  MALLOC_ARENA_MAX=2 "$(sender_bin "$BIN")" --config "$CONFIG" >>"$VAR/log/ens-sender.log" 2>&1 < /dev/null &
  echo $! > "$VAR/run/ens-sender.pid"
  wait_until 20 test -S "$VAR/run/apns.sock" || die "$(basename "$(sender_bin "$BIN")") did not start; see $VAR/log/ens-sender.log"
}

sender_stop() { stop_by_pidfile ens-sender 40; }

nginx_render() {
  local user_directive=""
  # As root, nginx's workers would run as nobody and could not reach our sockets.
  [ "$(id -u)" -eq 0 ] && user_directive="user root root;"
  sed -e "s|@VAR@|$VAR|g" -e "s|@ROOT@|$ROOT|g" -e "s|@PORT@|$PORT|g" \
      -e "s|@FCGI_SOCKET@|$FCGI_SOCKET|g" -e "s|@RATE@|$RATE|g" -e "s|@MAX_BODY@|1m|g" \
      -e "s|@USER_DIRECTIVE@|$user_directive|g" -e "s|@NGINX_WORKERS@|${ENS_NGINX_WORKERS:-1}|g" \
      "$ROOT/nginx/ens-dev.conf.in" > "$VAR/nginx.conf"
  cp "$ROOT/nginx/ens-fastcgi.conf" "$VAR/ens-fastcgi.conf"
}

nginx_start() {
  init_dirs; init_tls; nginx_render
  if pid_alive "$VAR/run/nginx.pid"; then
    nginx -c "$VAR/nginx.conf" -p "$VAR/" -s reload 2>>"$VAR/log/nginx-error.log"
    return 0
  fi
  nginx -t -q -c "$VAR/nginx.conf" -p "$VAR/" 2>>"$VAR/log/nginx-error.log" || die "nginx config test failed; see $VAR/log/nginx-error.log"
  nginx -c "$VAR/nginx.conf" -p "$VAR/" 2>>"$VAR/log/nginx-error.log" || die "nginx did not start; see $VAR/log/nginx-error.log"
  wait_until 10 test -f "$VAR/run/nginx.pid" || die "nginx did not write its pid file"
}

nginx_stop() {
  pid_alive "$VAR/run/nginx.pid" || return 0
  local pid; pid=$(cat "$VAR/run/nginx.pid")
  nginx -c "$VAR/nginx.conf" -p "$VAR/" -s quit 2>/dev/null || kill "$pid" 2>/dev/null || true
  wait_until 10 bash -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
}

token() {
  "$BIN/ens-cron" token create --label "${1:-dev}" --config "$CONFIG"
}

# Apache httpd in nginx's place (ENS_FRONT=apache): apache/ens-dev.conf.in rendered
# into $VAR/apache.conf, its ServerRoot, pid file, logs and counters under $VAR.
# APACHE_BACKEND chooses how Apache reaches ENS: proxy-fcgi (the pool, default), fcgid
# (mod_fcgid starts ens-fcgi itself) or cgi (mod_cgid runs ens-fcgi per request).
# ENS_APACHE_PORT puts it beside nginx instead (the benchmarks compare the two).
# ENS_APACHE_MODSEC=1 puts the limits in mod_security2 (the option) instead of ENS's own.
APACHE_BACKEND=${ENS_APACHE_BACKEND:-proxy-fcgi}
APACHE_PORT=${ENS_APACHE_PORT:-$PORT}

apache_render() {
  local user_directive=""
  # Apache refuses to serve as root: as root its children run as nobody, with group
  # root so that they can reach the stack's sockets and counters (0660, 0770).
  [ "$(id -u)" -eq 0 ] && user_directive=$'User nobody\nGroup root'
  mkdir -p "$VAR/apache/run" "$VAR/apache/empty" "$VAR/apache/modsec"
  chgrp root "$VAR/apache/modsec"; chmod 770 "$VAR/apache/modsec"
  # What the backend needs at server level (apache/ens-<backend>.conf has the rest).
  local modules=/usr/lib/apache2/modules
  case $APACHE_BACKEND in
    proxy-fcgi)
      printf 'LoadModule proxy_module %s/mod_proxy.so\nLoadModule proxy_fcgi_module %s/mod_proxy_fcgi.so\n' "$modules" "$modules" ;;
    fcgid|cgi)
      # One worker of one thread per process (mod_fcgid sends one request at a time),
      # and metrics of its own, apart from the pool's.
      mkdir -p "$VAR/run/metrics-apache"; chmod 770 "$VAR/run/metrics-apache"
      # Graph's per-mailbox lock files: ENS's user under Apache must create and lock
      # them (a host runs either the pool or these, so they need not share the pool's).
      mkdir -p "$VAR/run/graph-slots-apache"; chmod 1777 "$VAR/run/graph-slots-apache"
      # The request limits' table CGI runs share (the pool's is in shared memory).
      mkdir -p "$VAR/run/limits-apache"; chmod 1777 "$VAR/run/limits-apache"
      sed -e 's/^fcgi.processes = .*/fcgi.processes = 1/' -e 's/^fcgi.threads = .*/fcgi.threads = 1/' \
          -e "s|^metrics.dir = .*|metrics.dir = $VAR/run/metrics-apache|" \
          -e "s|^graph.slot_dir = .*|graph.slot_dir = $VAR/run/graph-slots-apache|" \
          -e "s|^limits.table_file = .*|limits.table_file = $VAR/run/limits-apache/limits.table|" "$CONFIG" > "$VAR/ens-apache.conf"
      local fcgi starters ens_user ens_group
      fcgi=$(readlink -f "$BIN/ens-fcgi")
      if [ "$(id -u)" -eq 0 ]; then
        # As root, the production layout (apache/ens-fcgid.conf): Apache's children run
        # as www-data (suexec runs only for them), and ENS through suexec as a user of
        # its own. nobody:nogroup stands in for ens:ens: it reads the secrets and the
        # token cache through their group, as ens does in production; www-data cannot.
        user_directive=$'User www-data\nGroup www-data'
        ens_user=nobody ens_group=nogroup
        chgrp www-data "$VAR/apache/modsec"
        chgrp "$ens_group" "$VAR/secrets" "$VAR/secrets/master.key" "$VAR/secrets/db-service.password" \
          "$VAR/secrets/graph-app.crt" "$VAR/secrets/graph-app.key" "$VAR/secrets/metrics.token" "$VAR/run/metrics-apache"
        chmod 750 "$VAR/secrets"
        chmod 640 "$VAR/secrets/master.key" "$VAR/secrets/db-service.password" "$VAR/secrets/graph-app.crt" \
          "$VAR/secrets/graph-app.key" "$VAR/secrets/metrics.token"
        # ens-cron rewrites the token cache; the directory's group passes to each new copy.
        chgrp "$ens_group" "$VAR/lib" "$VAR/lib/api-tokens.cache" 2>/dev/null || true
        chmod g+s "$VAR/lib"
        # suexec runs only programs under its document root (/var/www), owned by the
        # target user and group and writable by no one else: one directory per stack.
        starters=/var/www/ens-stack-$APACHE_PORT
        rm -rf "$starters"
        install -d -o "$ens_user" -g "$ens_group" -m 0755 "$starters"
      else
        # Not root: Apache cannot switch users, so ENS runs as this developer, like
        # everything else of the stack (ENS_WITHOUT_SUEXEC), from the stack's directory.
        ens_user=$(id -un) ens_group=$(id -gn)
        starters=$VAR/apache/starters
        mkdir -p "$starters"
        chmod 750 "$VAR/secrets"
        chmod 640 "$VAR/secrets/master.key" "$VAR/secrets/db-service.password" "$VAR/secrets/graph-app.crt" \
          "$VAR/secrets/graph-app.key" "$VAR/secrets/metrics.token"
        printf 'Define ENS_WITHOUT_SUEXEC\n'
      fi
      # The starters of apache/, with this stack's binary and configuration.
      sed -e "s|/usr/bin/ens-fcgi|$fcgi|" -e "s|/etc/ens/ens-fcgid.conf|$VAR/ens-apache.conf|" \
        "$ROOT/apache/ens-fcgid-starter" > "$starters/ens-fcgid-starter"
      sed -e "s|/usr/bin/ens-fcgi|$fcgi|" -e "s|/etc/ens/ens.conf|$VAR/ens-apache.conf|" \
        "$ROOT/apache/ens-cgi-starter" > "$starters/ens-cgi-starter"
      chmod 0755 "$starters/ens-fcgid-starter" "$starters/ens-cgi-starter"
      [ "$(id -u)" -eq 0 ] && chown "$ens_user:$ens_group" "$starters/ens-fcgid-starter" "$starters/ens-cgi-starter"
      printf 'LoadModule suexec_module %s/mod_suexec.so\n' "$modules"
      printf 'Define ENS_USER %s\nDefine ENS_GROUP %s\n' "$ens_user" "$ens_group"
      printf 'Define ENS_FCGID_STARTER "%s"\nDefine ENS_CGI_STARTER "%s"\nDefine ENS_CGI_DIR "%s"\n' \
        "$starters/ens-fcgid-starter" "$starters/ens-cgi-starter" "$starters"
      if [ "$APACHE_BACKEND" = fcgid ]; then
        printf 'LoadModule fcgid_module %s/mod_fcgid.so\nFcgidIPCDir "%s"\nFcgidProcessTableFile "%s"\n' \
          "$modules" "$VAR/apache/fcgid" "$VAR/apache/run/fcgid_shm"
      else
        printf 'LoadModule cgid_module %s/mod_cgid.so\nScriptSock "%s"\n' "$modules" "$VAR/apache/run/cgisock"
      fi ;;
    *) die "ENS_APACHE_BACKEND must be proxy-fcgi, fcgid or cgi" ;;
  esac > "$VAR/apache-backend.conf"
  local line rendered=()
  while IFS= read -r line; do
    # ENS_APACHE_MODSEC=1: the limits in mod_security2 (the option) instead of ENS's.
    if [ "${ENS_APACHE_MODSEC:-0}" = 1 ]; then
      line=${line//@MODSEC@/$'LoadModule unique_id_module /usr/lib/apache2/modules/mod_unique_id.so\nLoadModule security2_module /usr/lib/apache2/modules/mod_security2.so\nSecDataDir "@VAR@/apache/modsec"\nDefine ENS_MODSECURITY'}
    else
      line=${line//@MODSEC@/}
    fi
    line=${line//@VAR@/$VAR}; line=${line//@ROOT@/$ROOT}; line=${line//@PORT@/$APACHE_PORT}
    line=${line//@FCGI_SOCKET@/$FCGI_SOCKET}; line=${line//@RATE@/$RATE}
    line=${line//@RECORD_RATE@/$(( RATE > 1 ? RATE / 2 : 1 ))}; line=${line//@HOST_RATE@/$(( RATE * 10 ))}
    line=${line//@USER_DIRECTIVE@/$user_directive}; line=${line//@BACKEND@/$APACHE_BACKEND}
    rendered+=("$line")
  done < "$ROOT/apache/ens-dev.conf.in"
  printf '%s\n' "${rendered[@]}" > "$VAR/apache.conf"
}

# Apache's parent and children take SIGTERM with ordinary handlers, so a signal mask
# inherited from the caller (a test process's thread that blocks it) would leave them
# unstoppable: start Apache with an empty mask.
apache2_unmasked() {
  python3 -c 'import os, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, []); os.execvp("apache2", ["apache2"] + sys.argv[1:])' "$@"
}

apache_start() {
  init_dirs; init_tls; apache_render
  if pid_alive "$VAR/run/apache.pid"; then
    apache2_unmasked -f "$VAR/apache.conf" -k graceful 2>>"$VAR/log/apache-error.log"
    return 0
  fi
  apache2 -t -f "$VAR/apache.conf" 2>>"$VAR/log/apache-error.log" >/dev/null || die "Apache config test failed; see $VAR/log/apache-error.log"
  apache2_unmasked -f "$VAR/apache.conf" -k start 2>>"$VAR/log/apache-error.log" || die "Apache did not start; see $VAR/log/apache-error.log"
  wait_until 10 test -s "$VAR/run/apache.pid" || die "Apache did not write its pid file"
  # Listening once it answers (any status: /alive is a 503 while the pool is down).
  wait_until 10 curl -s -o /dev/null --cacert "$VAR/tls/server.crt" "https://localhost:$APACHE_PORT/" || die "Apache does not answer on $APACHE_PORT"
}

# apache/ens-site.conf, the production site, through Apache's own syntax check: with
# Debian's module list, this checkout's includes and the stack's certificate; once for
# each way of reaching ENS (the pool; mod_fcgid and CGI through suexec, as `ens` if this
# host has that user, else nobody). And no file of the layout may tell anyone to put
# www-data into the ens group, which could then read the master key.
apache_site_check() {
  init_dirs; init_tls; mkdir -p "$VAR/apache/site-check"
  local dir=$VAR/apache/site-check module backend modules user=nobody group=nogroup
  if getent passwd ens >/dev/null && getent group ens >/dev/null; then user=ens group=ens; fi
  for backend in proxy-fcgi fcgid cgi; do
    modules="mpm_event authz_core authz_host alias env headers mime setenvif rewrite reqtimeout socache_shmcb ssl http2 unique_id security2"
    case $backend in
      proxy-fcgi) modules+=" proxy proxy_fcgi" ;;
      fcgid) modules+=" fcgid suexec" ;;
      cgi) modules+=" cgid suexec" ;;
    esac
    {
      printf 'ServerRoot /etc/apache2\nServerName localhost\nPidFile %s/pid\nErrorLog %s/error.log\nDefine APACHE_LOG_DIR %s\nSecDataDir %s\n' "$dir" "$dir" "$dir" "$dir"
      [ "$backend" = fcgid ] && printf 'FcgidIPCDir %s/fcgid\nFcgidProcessTableFile %s/fcgid_shm\n' "$dir" "$dir"
      [ "$backend" = cgi ] && printf 'ScriptSock %s/cgisock\n' "$dir"
      # Apache refuses SuexecUserGroup when it cannot use suexec (not root).
      [ "$(id -u)" -eq 0 ] || printf 'Define ENS_WITHOUT_SUEXEC\n'
      # mod_fcgid wants its wrapper to exist: apache/'s starters stand where /var/www/ens would be.
      printf 'Define ENS_USER %s\nDefine ENS_GROUP %s\nDefine ENS_FCGID_STARTER %s/ens-fcgid-starter\n' "$user" "$group" "$ROOT/apache"
      printf 'Define ENS_CGI_STARTER %s/ens-cgi-starter\nDefine ENS_CGI_DIR %s\n' "$ROOT/apache" "$ROOT/apache"
      for module in $modules; do
        printf 'LoadModule %s_module /usr/lib/apache2/modules/mod_%s.so\n' "$module" "$module"
      done
      sed -e "s|/etc/apache2/ens/ens-proxy-fcgi.conf|/etc/apache2/ens/ens-$backend.conf|" \
          -e "s|/etc/apache2/ens/|$ROOT/apache/|" -e "s|/usr/share/ens/apache/errors|$ROOT/apache/errors|" \
          -e "s|/etc/ssl/ens/fullchain.pem|$VAR/tls/server.crt|" -e "s|/etc/ssl/ens/privkey.pem|$VAR/tls/server.key|" "$ROOT/apache/ens-site.conf"
    } > "$dir/apache-$backend.conf"
    apache2 -t -f "$dir/apache-$backend.conf" 2>&1 | sed "s/^/apache-site-check $backend: /"
    [ "${PIPESTATUS[0]}" -eq 0 ] || return 1
  done
  local advice
  advice=$(grep -rnEi '(usermod|adduser|gpasswd|addgroup)[^#]*(www-data[^#]*\bens\b|\bens\b[^#]*www-data)' \
    "$ROOT/apache" "$ROOT/README.md" "$ROOT/docs" "$ROOT/debian" "$ROOT/deploy" || true)
  [ -z "$advice" ] || { printf 'apache-site-check: www-data must not join the ens group:\n%s\n' "$advice" >&2; return 1; }
}

apache_stop() {
  pid_alive "$VAR/run/apache.pid" || { rm -f "$VAR/run/apache.pid"; return 0; }
  local pid; pid=$(cat "$VAR/run/apache.pid")
  kill -TERM "$pid" 2>/dev/null || true
  # Its children (and mod_fcgid's ens-fcgi processes) end with it; the port is free then.
  wait_until 15 bash -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
  rm -f "$VAR/run/apache.pid"
}


# What cron's `ens-cron keys` does on a host, every second: /getpublickey takes new
# users' keys from the pool and answers 503 when it is empty. Off with ENS_KEY_REFILL=0
# (the benchmarks measure the service without key generation beside it).
keys_start() {
  [ "${ENS_KEY_REFILL:-1}" = 1 ] || return 0
  if pid_alive "$VAR/run/keys-refill.pid"; then return 0; fi
  # Detached from the caller's output, or a caller reading it would wait forever.
  # A failed run (MariaDB restarting) must not end the loop: the subshell has errexit.
  (while :; do "$BIN/ens-cron" keys --config "$CONFIG" || true; sleep 1; done) </dev/null >>"$VAR/log/ens-cron.log" 2>&1 &
  echo $! > "$VAR/run/keys-refill.pid"
}

keys_stop() { stop_by_pidfile keys-refill 5; }

# The web server in front (ENS_FRONT): nginx, or apache (Apache httpd on the same port).
front_start() {
  case ${ENS_FRONT:-nginx} in
    nginx) nginx_start ;;
    apache) apache_start ;;
    *) die "ENS_FRONT must be nginx or apache" ;;
  esac
}

up() {
  init_dirs; init_secrets; init_tls; write_config
  db_start; db_setup; sim_start; fcm_sim_start; ews_sim_start; graph_sim_start; dns_sim_start; sender_start; fcgi_start; front_start; keys_start
}

down() {
  keys_stop; apache_stop; nginx_stop; fcgi_stop; sender_stop; dns_sim_stop; graph_sim_stop; ews_sim_stop; fcm_sim_stop; sim_stop; db_stop
  # The suexec starters a root run of mod_fcgid or CGI left under /var/www.
  [ "$(id -u)" -ne 0 ] || rm -rf "/var/www/ens-stack-$APACHE_PORT"
}

status() {
  for name in mysqld apns-sim fcm-sim ews-sim graph-sim dns-sim ens-sender ens-fcgi nginx apache; do
    if pid_alive "$VAR/run/$name.pid"; then echo "$name: running (pid $(cat "$VAR/run/$name.pid"))"; else echo "$name: stopped"; fi
  done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  config) init_dirs; init_secrets; write_config ;;
  db-start) db_start ;;
  db-stop) db_stop ;;
  db-setup) db_setup ;;
  fcgi-start) fcgi_start ;;
  fcgi-stop) fcgi_stop ;;
  nginx-start) nginx_start ;;
  nginx-stop) nginx_stop ;;
  apache-start) apache_start ;;
  apache-stop) apache_stop ;;
  apache-site-check) apache_site_check ;;
  sender-start) sender_start ;;
  sender-stop) sender_stop ;;
  sim-start) sim_start ;;
  sim-stop) sim_stop ;;
  ews-sim-start) ews_sim_start ;;
  ews-sim-stop) ews_sim_stop ;;
  fcm-sim-start) fcm_sim_start ;;
  fcm-sim-stop) fcm_sim_stop ;;
  graph-sim-start) graph_sim_start ;;
  graph-sim-stop) graph_sim_stop ;;
  dns-sim-start) dns_sim_start ;;
  dns-sim-stop) dns_sim_stop ;;
  keys-start) keys_start ;;
  keys-stop) keys_stop ;;
  token) token "${2:-dev}" ;;
  *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
