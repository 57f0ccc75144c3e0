#!/usr/bin/env bash
# A one-node MariaDB Galera cluster for the database client's tests (ClusterDatabaseTests):
# a real wsrep node whose state the tests can change. Loopback only; runs as the mysql
# user (research/galera.md, gotcha 1), so it needs root.
#
#   galera-node.sh start DIR SQL_PORT GCOMM_PORT PASSWORD
#                                                  bootstrap the node, create database ens
#                                                  and the DML-only account
#                                                  ens_cluster_test@127.0.0.1
#   galera-node.sh refuse DIR                      every table refused with 1047, as a node
#                                                  outside the Primary component refuses them
#                                                  (wsrep_reject_queries = ALL, the operator's
#                                                  maintenance switch; it answers SELECT 1)
#   galera-node.sh desync DIR                      Donor/Desynced (wsrep_local_state 2), as
#                                                  during a backup: it still serves, but a
#                                                  health check must not call it Synced
#   galera-node.sh stop DIR
set -euo pipefail

command=${1:-}; dir=${2:-}
if [ -z "$command" ] || [ -z "$dir" ]; then sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2; fi

admin() { mariadb --no-defaults -S "$dir/mysqld.sock" -uroot "$@"; }

case $command in
  start)
    sql_port=$3 gcomm_port=$4 password=$5
    mkdir -p "$dir"
    cat > "$dir/my.cnf" <<CNF
[mysqld]
user=mysql
datadir=$dir/data
socket=$dir/mysqld.sock
pid-file=$dir/mysqld.pid
log-error=$dir/err.log
port=$sql_port
bind-address=127.0.0.1
skip-name-resolve
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
innodb_buffer_pool_size=32M
wsrep_on=ON
wsrep_provider=/usr/lib/galera/libgalera_smm.so
wsrep_cluster_name=ens_client_test
wsrep_cluster_address=gcomm://127.0.0.1:$gcomm_port
wsrep_node_address=127.0.0.1:$gcomm_port
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:$gcomm_port;gcache.size=8M"
CNF
    [ -d "$dir/data/mysql" ] || mariadb-install-db --no-defaults --datadir="$dir/data" --user=root --skip-test-db >"$dir/install.log" 2>&1
    chown -R mysql:mysql "$dir"
    # The node a previous test stopped may still hold its ports for a moment (a node
    # started twice on them fails to bind gcomm and exits).
    for _ in $(seq 100); do
      [ -z "$(ss -Hltn "( sport = :$sql_port or sport = :$gcomm_port )" 2>/dev/null)" ] && break; sleep 0.1
    done
    setsid mariadbd --defaults-file="$dir/my.cnf" --wsrep-new-cluster >/dev/null 2>&1 < /dev/null &
    up=0
    for _ in $(seq 300); do admin -e 'SELECT 1' >/dev/null 2>&1 && { up=1; break; }; sleep 0.1; done
    if [ $up = 0 ]; then
      echo "galera-node.sh: the node did not answer within 30 s; its log:" >&2; tail -20 "$dir/err.log" >&2 || true; exit 1
    fi
    admin -e "CREATE DATABASE IF NOT EXISTS ens;
      CREATE USER IF NOT EXISTS 'ens_cluster_test'@'127.0.0.1' IDENTIFIED BY '$password';
      GRANT SELECT, INSERT, UPDATE, DELETE ON ens.* TO 'ens_cluster_test'@'127.0.0.1';"
    ;;
  refuse) admin -e "SET GLOBAL wsrep_reject_queries = ALL" ;;
  desync) admin -e "SET GLOBAL wsrep_desync = ON" ;;
  stop)
    # By its pid file, and by its command line: a node stopped before it wrote the pid
    # file would otherwise live on, holding the ports the next start needs.
    if [ -s "$dir/mysqld.pid" ]; then kill -9 "$(cat "$dir/mysqld.pid")" 2>/dev/null || true; fi
    pkill -9 -f -- "--defaults-file=$dir/my.cnf" 2>/dev/null || true
    for _ in $(seq 50); do pgrep -f -- "--defaults-file=$dir/my.cnf" >/dev/null || break; sleep 0.1; done
    rm -rf "$dir"
    ;;
  *) echo "galera-node.sh: unknown command $command" >&2; exit 2 ;;
esac
