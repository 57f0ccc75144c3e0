#!/usr/bin/env bash
# A local ENS cluster on this machine: three MariaDB Galera nodes, two ENS hosts (each
# its own responder pool, sender with its own spool, nginx and key refiller) and one
# nginx load balancer in front of them, with one shared set of simulators (APNs, FCM,
# Exchange, Graph). Used by `make cluster`, `make cluster-chaos`, `make test` and B9.
#
#   scripts/cluster.sh up | down | status | info
#   scripts/cluster.sh node-kill N | node-start N | node-stop N   Galera node N (1-3)
#   scripts/cluster.sh partition N | heal N    cut node N from its peers (root only)
#   scripts/cluster.sh host-kill N | host-start N   ENS host N (1-2): SIGKILL of all its processes
#   scripts/cluster.sh host-stop N             ENS host N stopped gracefully (SIGTERM: nginx
#                                              finishes its requests, the sender its deliveries)
#   scripts/cluster.sh host-config N           host N's ens.conf written again for the binaries
#                                              in ENS_BIN (host-start N takes them from there too)
#   scripts/cluster.sh lb HOSTS                which hosts the load balancer sends to (1, 2 or 1,2)
#   scripts/cluster.sh wait-synced [SIZE]      until every running node is Synced in a cluster of SIZE
#   scripts/cluster.sh sql N STATEMENT         run SQL as the administrator on node N (database ens)
#   scripts/cluster.sh token [LABEL]           a new API token
#
# As root each Galera node runs in a network namespace of its own (CLUSTER_NS prefix) with
# two links: eth0 on a bridge shared with the other nodes (10.77.0.N: replication, IST,
# SST) and a client link to this namespace (10.78.K.2/30, K = 10*CLUSTER_ID + N) on which
# it serves SQL. A partition takes eth0 down: the node is cut from its peers but still
# reachable by ENS, so its refusal (error 1047) is exercised. Without root the nodes listen
# on 127.0.0.1 with distinct ports and there is no partition fault.
# The ENS hosts run in this namespace on loopback ports (the LB reaches them there).
#
# Environment: CLUSTER_ID (0-3, default 0: several clusters side by side; make test uses 1,
# make cluster-chaos 2, B9 3), CLUSTER_PORT (the load balancer's HTTPS port, default
# 30443 - 100*CLUSTER_ID; the simulators take the nine after it, host N's nginx
# CLUSTER_PORT+10+N; without root Galera node N uses +20+N SQL, +30+N gcomm, +40+N IST,
# +50+N SST), CLUSTER_VAR (default var/cluster, var/cluster-ID), ENS_BIN (default
# .build/release), CLUSTER_MIGRATIONS (the db.migrations_dir `up` migrates from and the
# configurations name, default this tree's sql/migrations: scripts/rolling-upgrade.sh
# starts a cluster on an older release's), and stack.sh's ENS_PROCESSES, ENS_THREADS,
# ENS_LOG_LEVEL ... for the hosts.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ID=${CLUSTER_ID:-0}
case $ID in 0|1|2|3) ;; *) echo "cluster: CLUSTER_ID must be 0-3" >&2; exit 2 ;; esac
if [ "$ID" = 0 ]; then DEFAULT_VAR=$ROOT/var/cluster; else DEFAULT_VAR=$ROOT/var/cluster-$ID; fi
mkdir -p "${CLUSTER_VAR:-$DEFAULT_VAR}"
TOP=$(cd "${CLUSTER_VAR:-$DEFAULT_VAR}" && pwd)
PORT=${CLUSTER_PORT:-$((30443 - 100 * ID))}
BIN=${ENS_BIN:-$ROOT/.build/release}
STACK=$ROOT/scripts/stack.sh
GAL=$TOP/gal
NS=${CLUSTER_NS:-ens${ID}}
NODES=(1 2 3)
HOSTS=(1 2)
if [ "$(id -u)" -eq 0 ]; then NETNS=1; else NETNS=0; fi

# shellcheck source=scripts/common.sh
. "$(dirname "$0")/common.sh"

# --- addresses ------------------------------------------------------------------------

client_net() { echo $((10 * ID + $1)); }               # the K of node N's client link
node_sql_host() { if [ $NETNS = 1 ]; then echo "10.78.$(client_net "$1").2"; else echo 127.0.0.1; fi; }
node_sql_port() { if [ $NETNS = 1 ]; then echo 3306; else echo $((PORT + 20 + $1)); fi; }
node_gcomm() { if [ $NETNS = 1 ]; then echo "10.77.0.$1:4567"; else echo "127.0.0.1:$((PORT + 30 + $1))"; fi; }
node_ist() { if [ $NETNS = 1 ]; then echo "10.77.0.$1:4568"; else echo "127.0.0.1:$((PORT + 40 + $1))"; fi; }
node_sst() { if [ $NETNS = 1 ]; then echo "10.77.0.$1:4444"; else echo "127.0.0.1:$((PORT + 50 + $1))"; fi; }
client_hosts() { if [ $NETNS = 1 ]; then echo "10.78.%"; else echo "127.0.0.1"; fi; }
host_port() { echo $((PORT + 10 + $1)); }
host_var() { echo "$TOP/host$1"; }
# In node N's namespace (or here, without root).
in_node() { local n=$1; shift; if [ $NETNS = 1 ]; then ip netns exec "$NS-g$n" "$@"; else "$@"; fi; }

# --- network namespaces -----------------------------------------------------------------

net_up() {
  [ $NETNS = 1 ] || return 0
  net_down
  ip netns add "$NS-br"
  ip -n "$NS-br" link add br0 type bridge
  ip -n "$NS-br" link set br0 up
  local n k
  for n in "${NODES[@]}"; do
    k=$(client_net "$n")
    ip netns add "$NS-g$n"
    ip -n "$NS-g$n" link set lo up
    # Replication link: eth0 on the bridge.
    ip link add "$NS-b$n" type veth peer name eth0 netns "$NS-g$n"
    ip link set "$NS-b$n" netns "$NS-br"
    ip -n "$NS-br" link set "$NS-b$n" master br0
    ip -n "$NS-br" link set "$NS-b$n" up
    ip -n "$NS-g$n" addr add "10.77.0.$n/24" dev eth0
    ip -n "$NS-g$n" link set eth0 up
    # Client link: SQL from this namespace.
    ip link add "$NS-c$n" type veth peer name cl0 netns "$NS-g$n"
    ip addr add "10.78.$k.1/30" dev "$NS-c$n"
    ip link set "$NS-c$n" up
    ip -n "$NS-g$n" addr add "10.78.$k.2/30" dev cl0
    ip -n "$NS-g$n" link set cl0 up
  done
}

net_down() {
  [ $NETNS = 1 ] || return 0
  local n
  for n in "${NODES[@]}"; do
    ip link del "$NS-c$n" 2>/dev/null || true
    ip netns del "$NS-g$n" 2>/dev/null || true
  done
  ip netns del "$NS-br" 2>/dev/null || true
}

# --- Galera nodes -------------------------------------------------------------------------

node_dir() { echo "$GAL/n$1"; }
node_pidfile() { echo "$GAL/n$1/mysqld.pid"; }
node_socket() { echo "$GAL/n$1/mysqld.sock"; }

node_config() {
  local n=$1 dir; dir=$(node_dir "$n")
  local gcomm="" m
  for m in "${NODES[@]}"; do gcomm+="${gcomm:+,}$(node_gcomm "$m")"; done
  local user=mysql; [ $NETNS = 1 ] || user=$(id -un)
  mkdir -p "$dir/data"
  cat > "$dir/my.cnf" <<CNF
# Galera node $n of the local ENS cluster (written by scripts/cluster.sh).
[mysqld]
user=$user
datadir=$dir/data
socket=$dir/mysqld.sock
pid-file=$dir/mysqld.pid
log-error=$dir/err.log
bind-address=$(node_sql_host "$n")
port=$(node_sql_port "$n")
skip-name-resolve
max_connections=500
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
innodb_buffer_pool_size=128M
innodb_log_file_size=48M
# Every commit is in two other nodes' memory before it is acknowledged; the log is
# flushed once a second, as usual with Galera.
innodb_flush_log_at_trx_commit=2
character_set_server=utf8mb4
collation_server=utf8mb4_bin
wsrep_on=ON
wsrep_provider=/usr/lib/galera/libgalera_smm.so
wsrep_cluster_name=ens_cluster_$ID
wsrep_cluster_address=gcomm://$gcomm
wsrep_node_name=n$n
wsrep_node_address=$(node_gcomm "$n")
wsrep_provider_options="gmcast.listen_addr=tcp://$(node_gcomm "$n");ist.recv_addr=$(node_ist "$n");gcache.size=64M"
wsrep_sst_receive_address=$(node_sst "$n")
wsrep_sst_method=rsync
wsrep_slave_threads=2
# Causal reads: a request answered by one host must see what another host's request just
# committed through another node (/getpublickey on one host, /registerdevicev2 on the
# other got UserSubscriptionNotFound without it; galera.md 3d). Reads wait for the
# node to apply what the cluster committed before them.
wsrep_sync_wait=1
CNF
}

# node_sql N ARGS...: the mariadb client as the administrator on node N's socket (the
# account of the user running this, which mariadb-install-db made: root as root).
node_sql() { local n=$1; shift; mariadb --no-defaults -S "$(node_socket "$n")" -u"$(id -un)" "$@"; }

# node_status N: "ready state status size" (e.g. "ON 4 Primary 3"), or "down".
node_status() {
  local out
  out=$(node_sql "$1" -N -B --connect-timeout=2 -e "SELECT
      MAX(IF(VARIABLE_NAME='WSREP_READY',VARIABLE_VALUE,NULL)), MAX(IF(VARIABLE_NAME='WSREP_LOCAL_STATE',VARIABLE_VALUE,NULL)),
      MAX(IF(VARIABLE_NAME='WSREP_CLUSTER_STATUS',VARIABLE_VALUE,NULL)), MAX(IF(VARIABLE_NAME='WSREP_CLUSTER_SIZE',VARIABLE_VALUE,NULL))
    FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN ('WSREP_READY','WSREP_LOCAL_STATE','WSREP_CLUSTER_STATUS','WSREP_CLUSTER_SIZE')" 2>/dev/null) \
    || { echo down; return 0; }
  echo "$out" | tr '\t' ' '
}

node_synced() { # node_synced N [SIZE]
  local s; s=$(node_status "$1")
  [[ $s == "ON 4 Primary "* ]] || return 1
  [ -z "${2:-}" ] || [ "${s##* }" = "$2" ]
}

node_running() { pid_alive "$(node_pidfile "$1")"; }

# node_launch N [ARGS...]: starts mariadbd for node N in its namespace, detached.
node_launch() {
  local n=$1; shift
  local dir; dir=$(node_dir "$n")
  [ $NETNS = 1 ] && chown -R mysql:mysql "$dir"
  rm -f "$dir/mysqld.pid"
  in_node "$n" setsid /usr/sbin/mariadbd --defaults-file="$dir/my.cnf" "$@" </dev/null >>"$dir/stdout.log" 2>&1 &
  wait_until 30 test -s "$dir/mysqld.pid" || die "node $n did not start; see $dir/err.log"
}

nodes_create() {
  rm -rf "$GAL"; mkdir -p "$GAL"
  [ $NETNS = 1 ] && chmod 755 "$GAL"
  local n
  for n in "${NODES[@]}"; do node_config "$n"; done
  mariadb-install-db --no-defaults --datadir="$(node_dir 1)/data" --user="$(id -un)" --skip-test-db \
    >"$GAL/install.log" 2>&1 || die "mariadb-install-db failed; see $GAL/install.log"
  log "bootstrapping Galera node 1"
  node_launch 1 --wsrep-new-cluster
  wait_until 60 node_synced 1 || die "node 1 did not become Synced; see $(node_dir 1)/err.log"
  for n in 2 3; do
    log "node $n joins (SST)"
    node_launch "$n"
    wait_until 120 node_synced "$n" || die "node $n did not become Synced; see $(node_dir "$n")/err.log"
  done
  wait_until 30 node_synced 1 3 || die "the cluster did not reach 3 nodes"
}

# A crashed node rejoins by IST when it is started at its recovered position
# (galera.md 3g: a plain restart takes a full SST).
node_start() {
  local n=$1 dir; dir=$(node_dir "$n")
  node_running "$n" && { log "node $n is running"; return 0; }
  local others=() m size=0
  for m in "${NODES[@]}"; do [ "$m" = "$n" ] || { node_running "$m" && others+=("$m"); }; done
  [ ${#others[@]} -gt 0 ] || die "no other node is running: bootstrapping a whole cluster again is not automated (galera.md 3h)"
  # Only once the survivors have dropped this node (galera.md 3g: a restart before that
  # re-bootstraps the primary component).
  size=$(( ${#others[@]} ))
  wait_until 30 node_synced "${others[0]}" "$size" || log "warning: node ${others[0]} does not show a cluster of $size yet"
  [ $NETNS = 1 ] && chown -R mysql:mysql "$dir"
  rm -f "$dir/recover.log"
  in_node "$n" /usr/sbin/mariadbd --defaults-file="$dir/my.cnf" --wsrep-recover --log-error="$dir/recover.log" \
    </dev/null >/dev/null 2>&1 || true
  local position
  position=$(grep -ao 'Recovered position: [0-9a-f-]*:[-0-9]*' "$dir/recover.log" 2>/dev/null | tail -1 | awk '{print $3}')
  if [ -n "$position" ]; then
    log "node $n starts at its recovered position $position"
    node_launch "$n" --wsrep-start-position="$position"
  else
    log "node $n: no recovered position (see $dir/recover.log); plain start"
    node_launch "$n"
  fi
}

node_kill() {
  local file; file=$(node_pidfile "$1")
  pid_alive "$file" || { log "node $1 is not running"; return 0; }
  local pid; pid=$(cat "$file")
  kill -9 "$pid"
  wait_until 10 bash -c "! kill -0 $pid" || die "node $1 (pid $pid) survived SIGKILL"
}

node_stop() {
  local file; file=$(node_pidfile "$1")
  pid_alive "$file" || return 0
  local pid; pid=$(cat "$file")
  kill -TERM "$pid" 2>/dev/null || true
  wait_until 60 bash -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
}

partition() {
  [ $NETNS = 1 ] || die "partition needs network namespaces (root); not available without root"
  ip -n "$NS-g$1" link set eth0 down
}

heal() {
  [ $NETNS = 1 ] || die "heal needs network namespaces (root)"
  ip -n "$NS-g$1" link set eth0 up
}

# --- accounts, configuration ------------------------------------------------------------

db_accounts() {
  local service migrate where
  service=$(cat "$TOP/secrets/db-service.password")
  migrate=$(cat "$TOP/secrets/db-migrate.password")
  where=$(client_hosts)
  # The same accounts and grants as sql/accounts.sql.in, for TCP clients on the client links.
  sed -e "s/@DB_NAME@/ens/g" -e "s/@SERVICE_PASSWORD@/$service/g" -e "s/@MIGRATE_PASSWORD@/$migrate/g" \
      -e "s/'localhost'/'$where'/g" "$ROOT/sql/accounts.sql.in" | node_sql 1
}

# The node list of host H's configuration: its own node first (host 1: 1,2,3; host 2: 2,3,1).
host_node_order() {
  local h=$1 i n out=()
  for i in 0 1 2; do n=$(( (h - 1 + i) % 3 + 1 )); out+=("$n"); done
  echo "${out[@]}"
}

# db_lines FIRST_NODE...: the db.* connection lines for a node list.
db_lines() {
  echo "db.socket ="
  local list="" n
  for n in "$@"; do list+="${list:+, }$(node_sql_host "$n"):$(node_sql_port "$n")"; done
  echo "db.hosts = $list"
}

# $TOP/ens.conf: the administrator's view (tokens, migrations, keys), node 1 first.
# stack.sh writes it with the simulators' ports derived from the load balancer's port,
# and callback URLs at the load balancer.
top_config() {
  ENS_VAR=$TOP ENS_PORT=$PORT ENS_BIN=$BIN "$STACK" config
  local lines; lines=$(db_lines 1 2 3)
  python3 - "$TOP/ens.conf" "$lines" "${CLUSTER_MIGRATIONS:-}" <<'PY'
import sys
path, db, migrations = sys.argv[1], sys.argv[2], sys.argv[3]
out = []
for line in open(path).read().splitlines():
    if line.startswith("db.socket ="):
        out.extend(db.splitlines())
    elif migrations and line.startswith("db.migrations_dir ="):
        out.append(f"db.migrations_dir = {migrations}")
    else:
        out.append(line)
open(path, "w").write("\n".join(out) + "\n")
PY
}

# Host H: its own directory, configuration (paths under it; same secrets, copied; the
# shared API token cache), node order. From $TOP/ens.conf, or from SRC, a configuration
# stack.sh wrote under SRC_TOP (host_reconfig).
host_config() {
  local h=$1 src=${2:-$TOP/ens.conf} src_top=${3:-$TOP} dir; dir=$(host_var "$1")
  mkdir -p "$dir"/{run,log,lib,nginx,ews-sim}
  rm -rf "$dir/secrets" "$dir/tls"
  cp -a "$TOP/secrets" "$TOP/tls" "$dir/"
  cp "$TOP/ews-sim/ca.pem" "$dir/ews-sim/ca.pem"
  local order lines
  read -r -a order <<<"$(host_node_order "$h")"
  lines=$(db_lines "${order[@]}")
  python3 - "$src" "$dir/ens.conf" "$src_top" "$dir" "$lines" "ens$ID-host$h" "$TOP" <<'PY'
import re, sys
src, dst, top, host, db, name, cluster_top = sys.argv[1:8]
out = []
for line in open(src).read().splitlines():
    key = line.split(" =", 1)[0]
    if key.startswith("db.") and key in ("db.socket", "db.host", "db.port", "db.hosts"):
        if key == "db.socket":
            out.extend(db.splitlines())
        continue
    if key != "auth.token_cache_file":
        line = line.replace(top + "/", host + "/")
    else:
        line = line.replace(top + "/", cluster_top + "/")
    out.append(line)
out[0] = "# ENS host configuration of the local cluster (written by scripts/cluster.sh)."
# Both hosts share this machine's host name: each sender's heartbeat row needs its own.
out.append(f"push.host_name = {name}")
open(dst, "w").write("\n".join(out) + "\n")
PY
}

# host-config H: host H's configuration written again as `up` writes it, but for the
# binaries in ENS_BIN, which may be another release's than the ones `up` ran: stack.sh
# writes a key only when those binaries know it (an older release refuses a key it does
# not know; a newer one may take keys the older lacks). Takes effect at the next
# host-start; run while the host is stopped.
host_reconfig() {
  local h=$1 gen=$TOP/host$1-config
  rm -rf "$gen"; mkdir -p "$gen"
  # The cluster's secrets and certificates, so that stack.sh makes none of its own.
  cp -a "$TOP/secrets" "$TOP/tls" "$gen/"
  ENS_VAR=$gen ENS_PORT=$PORT ENS_BIN=$BIN "$STACK" config
  [ -z "${CLUSTER_MIGRATIONS:-}" ] || sed -i "s|^db.migrations_dir = .*|db.migrations_dir = $CLUSTER_MIGRATIONS|" "$gen/ens.conf"
  host_config "$h" "$gen/ens.conf" "$gen"
  rm -rf "$gen"
}

# --- ENS hosts ----------------------------------------------------------------------------

host_env() { env ENS_VAR="$(host_var "$1")" ENS_PORT="$(host_port "$1")" ENS_BIN="$BIN" "${@:2}"; }

host_start() {
  local h=$1 dir; dir=$(host_var "$1")
  [ -f "$dir/ens.conf" ] || die "host $h has no configuration: run up first"
  # What a SIGKILL left behind.
  local f
  for f in ens-fcgi ens-sender nginx keys-refill; do pid_alive "$dir/run/$f.pid" || rm -f "$dir/run/$f.pid"; done
  pid_alive "$dir/run/ens-fcgi.pid" || rm -f "$dir/run/fcgi.sock"
  host_env "$h" "$STACK" sender-start
  host_env "$h" "$STACK" fcgi-start
  host_env "$h" "$STACK" nginx-start
  host_env "$h" "$STACK" keys-start
  wait_until 20 curl -s -o /dev/null --cacert "$TOP/tls/server.crt" "https://localhost:$(host_port "$h")/alive" \
    || die "host $h's nginx does not answer"
}

host_stop() {
  local h=$1
  [ -d "$(host_var "$h")/run" ] || return 0
  host_env "$h" "$STACK" keys-stop
  host_env "$h" "$STACK" nginx-stop
  host_env "$h" "$STACK" fcgi-stop
  host_env "$h" "$STACK" sender-stop
}

# Every process of host H: its nginx (master and workers), the responder supervisor and
# workers, the sender, the key refiller loop and what it runs.
host_pids() {
  local dir; dir=$(host_var "$1")
  local f pid
  for f in nginx ens-fcgi ens-sender keys-refill; do
    if pid_alive "$dir/run/$f.pid"; then
      pid=$(cat "$dir/run/$f.pid"); echo "$pid"; pgrep -P "$pid" || true
    fi
  done
  pgrep -f -- "--config $dir/ens.conf" || true
  pgrep -f -- "nginx -c $dir/nginx.conf" || true
}

host_kill() {
  local pids
  mapfile -t pids < <(host_pids "$1" | sort -u)
  [ ${#pids[@]} -gt 0 ] || { log "host $1 runs nothing"; return 0; }
  # Stop them first so that none replaces another, then kill all at once.
  kill -STOP "${pids[@]}" 2>/dev/null || true
  kill -KILL "${pids[@]}" 2>/dev/null || true
  local pid
  for pid in "${pids[@]}"; do wait_until 10 bash -c "! kill -0 $pid" || log "warning: pid $pid survived SIGKILL"; done
  echo "${#pids[@]}"
}

# --- load balancer ----------------------------------------------------------------------

lb_render() { # lb_render "1 2"
  local upstreams="" h user_directive=""
  for h in $1; do
    upstreams+="        server 127.0.0.1:$(host_port "$h") max_fails=1 fail_timeout=5s;"$'\n'
  done
  [ "$(id -u)" -eq 0 ] && user_directive="user root root;"
  mkdir -p "$TOP/lb" "$TOP/log" "$TOP/run"
  python3 - "$ROOT/nginx/ens-lb.conf.in" "$TOP/lb/nginx.conf" "$TOP" "$PORT" "$user_directive" "${upstreams%$'\n'}" <<'PY'
import sys
src, dst, var, port, user, upstreams = sys.argv[1:7]
text = open(src).read()
for key, value in (("@VAR@", var), ("@PORT@", port), ("@USER_DIRECTIVE@", user), ("@UPSTREAMS@", upstreams)):
    text = text.replace(key, value)
open(dst, "w").write(text)
PY
}

lb_start() {
  lb_render "${1:-1 2}"
  nginx -t -q -c "$TOP/lb/nginx.conf" -p "$TOP/lb/" 2>>"$TOP/log/lb-error.log" || die "the load balancer's config is refused; see $TOP/log/lb-error.log"
  if pid_alive "$TOP/run/lb-nginx.pid"; then
    nginx -c "$TOP/lb/nginx.conf" -p "$TOP/lb/" -s reload 2>>"$TOP/log/lb-error.log"
    sleep 0.5  # the new workers take over
    return 0
  fi
  nginx -c "$TOP/lb/nginx.conf" -p "$TOP/lb/" 2>>"$TOP/log/lb-error.log" || die "the load balancer did not start"
  wait_until 10 test -s "$TOP/run/lb-nginx.pid" || die "the load balancer wrote no pid file"
}

lb_stop() {
  pid_alive "$TOP/run/lb-nginx.pid" || return 0
  local pid; pid=$(cat "$TOP/run/lb-nginx.pid")
  kill -TERM "$pid" 2>/dev/null || true
  wait_until 10 bash -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
  rm -f "$TOP/run/lb-nginx.pid"
}

# --- whole cluster --------------------------------------------------------------------------

top_env() { env ENS_VAR="$TOP" ENS_PORT="$PORT" ENS_BIN="$BIN" "$@"; }

check_ports() {
  local port
  for port in $(seq "$PORT" $((PORT + 12))); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then die "port $port is in use (another cluster with CLUSTER_ID=$ID?)"; fi
  done
}

up() {
  local bin
  for bin in "$BIN/ens-fcgi" "$(sender_bin "$BIN")" "$BIN/ens-cron"; do [ -x "$bin" ] || die "$bin is missing: build first (make build)"; done
  down >/dev/null 2>&1 || true
  check_ports
  rm -rf "$TOP"; mkdir -p "$TOP/run" "$TOP/log"
  [ $NETNS = 1 ] || log "not root: Galera nodes on 127.0.0.1 ports $((PORT + 21))-$((PORT + 23)), no network namespaces, no partition fault"
  net_up
  nodes_create
  top_env "$STACK" config >/dev/null  # secrets, TLS directories
  top_env "$STACK" sim-start
  top_env "$STACK" fcm-sim-start
  top_env "$STACK" ews-sim-start
  top_env "$STACK" graph-sim-start
  top_config
  db_accounts
  ln -sfn "$(node_socket 1)" "$TOP/run/mysqld.sock"   # bench/devices.py's administrator access
  "$BIN/ens-cron" migrate --config "$TOP/ens.conf" >"$TOP/log/migrate.log" 2>&1 || die "migrations failed; see $TOP/log/migrate.log"
  "$BIN/ens-cron" keys --config "$TOP/ens.conf" >>"$TOP/log/ens-cron.log" 2>&1 || die "the key pool could not be filled"
  local h
  for h in "${HOSTS[@]}"; do host_config "$h"; host_start "$h"; done
  ln -sfn "$(host_var 1)/run/apns.sock" "$TOP/run/apns.sock"   # scripts/demo.sh's check that a stack is up
  lb_start "1 2"
  wait_until 20 curl -sf -o /dev/null --cacert "$TOP/tls/server.crt" "https://localhost:$PORT/alive" || die "the load balancer's /alive does not answer 200"
  log "up: load balancer https://localhost:$PORT, hosts on $(host_port 1) and $(host_port 2), Galera $(for n in "${NODES[@]}"; do printf '%s:%s ' "$(node_sql_host "$n")" "$(node_sql_port "$n")"; done)"
}

# Everything stops in parallel where order does not matter (each stop waits up to about
# 2 s here for its process to be reaped).
down() {
  lb_stop
  local h n name
  for h in "${HOSTS[@]}"; do
    (
      host_stop "$h" >/dev/null 2>&1 || true
      # Whatever a kill left (a host-kill'd host has stale pid files).
      mapfile -t pids < <(host_pids "$h" 2>/dev/null | sort -u)
      [ ${#pids[@]} -eq 0 ] || kill -9 "${pids[@]}" 2>/dev/null || true
    ) &
  done
  for name in graph-sim ews-sim fcm-sim sim; do top_env "$STACK" "$name-stop" >/dev/null 2>&1 & done
  wait
  # The nodes last: the hosts' pools close their connections first.
  for n in "${NODES[@]}"; do node_stop "$n" & done
  wait
  net_down
}

status() {
  local n h f
  for n in "${NODES[@]}"; do
    if node_running "$n"; then echo "galera node $n ($(node_sql_host "$n"):$(node_sql_port "$n")): $(node_status "$n")"; else echo "galera node $n: stopped"; fi
  done
  for h in "${HOSTS[@]}"; do
    local parts=()
    for f in ens-fcgi ens-sender nginx keys-refill; do
      if pid_alive "$(host_var "$h")/run/$f.pid"; then parts+=("$f up"); else parts+=("$f down"); fi
    done
    echo "ens host $h (port $(host_port "$h")): ${parts[*]}"
  done
  if pid_alive "$TOP/run/lb-nginx.pid"; then echo "load balancer: https://localhost:$PORT"; else echo "load balancer: stopped"; fi
}

wait_synced() { # every running node Synced in a Primary component of SIZE (default: the running count)
  local size=${1:-} n running=()
  for n in "${NODES[@]}"; do node_running "$n" && running+=("$n"); done
  [ -n "$size" ] || size=${#running[@]}
  for n in "${running[@]}"; do wait_until "${WAIT_SECONDS:-90}" node_synced "$n" "$size" || die "node $n is not Synced in a cluster of $size: $(node_status "$n")"; done
}

info() {
  cat <<EOF
ENS cluster is up: three Galera nodes, two ENS hosts, one load balancer.
  load balancer   https://localhost:$PORT   (CA: $TOP/tls/server.crt)
  ENS hosts       https://localhost:$(host_port 1), https://localhost:$(host_port 2)   ($TOP/host1, $TOP/host2)
  Galera nodes    $(for n in "${NODES[@]}"; do printf '%s:%s ' "$(node_sql_host "$n")" "$(node_sql_port "$n")"; done)$( [ $NETNS = 1 ] && echo "(namespaces $NS-g1..3)")

  API token:      $1
  try:            curl --cacert $TOP/tls/server.crt https://localhost:$PORT/alive
                  curl --cacert $TOP/tls/server.crt -H 'ApiToken: $1' -d email=someone@example.test https://localhost:$PORT/getpublickey
  the demo:       ENS_VAR=$TOP ENS_PORT=$PORT scripts/demo.sh
  faults:         scripts/cluster.sh node-kill 2 | node-start 2 | partition 1 | heal 1 | host-kill 2 | host-start 2 | status
  stop:           make cluster-stop
EOF
}

need_n() { [[ ${2:-} =~ ^[1-$1]$ ]] || die "expected a number 1-$1"; }

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  info) info "$(top_env "$STACK" token "cluster-$(date +%s)")" ;;
  token) top_env "$STACK" token "${2:-cluster}" ;;
  node-kill) need_n 3 "${2:-}"; node_kill "$2" ;;
  node-stop) need_n 3 "${2:-}"; node_stop "$2" ;;
  node-start) need_n 3 "${2:-}"; node_start "$2" ;;
  node-status) need_n 3 "${2:-}"; node_status "$2" ;;
  partition) need_n 3 "${2:-}"; partition "$2" ;;
  heal) need_n 3 "${2:-}"; heal "$2" ;;
  host-kill) need_n 2 "${2:-}"; host_kill "$2" ;;
  host-start) need_n 2 "${2:-}"; host_start "$2" ;;
  host-stop) need_n 2 "${2:-}"; host_stop "$2" ;;
  host-config) need_n 2 "${2:-}"; host_reconfig "$2" ;;
  lb) lb_start "${2//,/ }" ;;
  wait-synced) wait_synced "${2:-}" ;;
  sql) need_n 3 "${2:-}"; node_sql "$2" -N -B ens -e "$3" ;;
  *) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
