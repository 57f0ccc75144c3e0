#!/usr/bin/env bash
# The Debian package, tested on this machine (as root; CI runs as root): builds it
# (make deb), runs lintian, installs it with apt-get, checks what it installed and that
# its maintainer scripts created the ens user and directories but enabled and started
# nothing, configures it as docs/deployment.md "The Debian package" says (against a private MariaDB),
# runs the HTTP contract (FoundationTests, DeviceAPITests) against the INSTALLED
# binaries through a private stack under var/deb on port 28443, then purges the package
# and removes what the test made (the ens user too, unless it was there before).
# Then, when the previous release's .deb is there (make deb-previous; make test builds it
# and sets ENS_DEB_PREVIOUS_REQUIRED=1, so that its absence fails), the upgrade: that package installed, configured and its sender run, this
# one installed over it; the configuration, secrets and state (spool, token cache) kept,
# the migration asked for and applied, nothing started, this release's sender recorded.
# The previous release's sender unit, enabled before the upgrade, must stay enabled after
# it, and the program that unit starts must run the kept spool; the alias ens-apns.service
# that 0.4.0 shipped must be gone with nothing left enabled on it.
# Run by `make test` at the end of scripts/test.sh; on its own: scripts/deb-test.sh.
set -euo pipefail
# The contract tests are integration tests: the manifest builds them only when asked.
export ENS_INTEGRATION_TESTS=1
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH=/opt/swift/usr/bin:$PATH DEBIAN_FRONTEND=noninteractive

say() { printf 'deb-test: %s\n' "$*"; }
fail() { printf 'deb-test: FAIL: %s\n' "$*" >&2; failures=$((failures + 1)); }
check() { # check DESCRIPTION COMMAND...: runs COMMAND, counts a failure if it fails
  local what=$1; shift
  if "$@" >/dev/null 2>&1; then return 0; fi
  fail "$what"
}
failures=0
started=$SECONDS

# It installs and purges a package: CI runs as root; elsewhere it says so and skips.
[ "$(id -u)" -eq 0 ] || { say "skipped: installing a package needs root (CI runs this as root)"; exit 0; }
# A run that was killed before its clean-up left its installation (var/deb/installed says
# so, and whether the ens user was there before it): purge that first.
if [ -f "$ROOT/var/deb/installed" ]; then
  say "purging what an interrupted run left"
  # shellcheck disable=SC1091
  . "$ROOT/var/deb/installed"
  ENS_VAR=$ROOT/var/deb scripts/stack.sh down >/dev/null 2>&1 || true
  apt-get purge -y -qq ens >/dev/null 2>&1 || dpkg --purge ens >/dev/null 2>&1 || true
  rm -rf /etc/ens "$ROOT/var/deb/installed"
  if [ "${had_user:-1}" = 0 ] && getent passwd ens >/dev/null; then userdel ens 2>/dev/null || true; fi
fi
# Never touch a real installation or an operator's configuration.
if dpkg-query -W -f='${Status}' ens 2>/dev/null | grep -q 'installed'; then
  say "the ens package is installed on this machine already; not testing over it"; exit 1
fi
[ ! -e /etc/ens ] || { say "/etc/ens exists; not testing over an operator's configuration"; exit 1; }
had_user=0
getent passwd ens >/dev/null && had_user=1

# The private stack: its own directory and ports, and the installed binaries. scripts/test.sh
# exports its own stack's settings; every one that names a place or a port is set again here.
export ENS_VAR=$ROOT/var/deb ENS_PORT=${ENS_DEB_PORT:-28443} ENS_BIN=/usr/bin
# The stack settings scripts/test.sh uses, so the tests see the stack they expect.
export ENS_TOKEN_REFRESH=2 ENS_HEALTH_CACHE_MS=200 ENS_KEY_POOL=20
export ENS_ITEM_TIMEOUT_MS=2000 ENS_EWS_RETRY_SCALE=0.05 ENS_GRAPH_RETRY_SCALE=0.01
export ENS_CREDENTIAL_PAUSE=1 ENS_MAX_NOTIFICATIONS_PER_MINUTE=40 ENS_REGISTRATION_BUDGET_MS=4000
export ENS_MAX_CONCURRENT_REGISTRATIONS=2 ENS_RECORDS_PER_TOKEN_PER_HOUR=100
export ENS_POLICY_URL=http://127.0.0.1:$((ENS_PORT + 4))/policy/check
export ENS_TEST_VAR=$ENS_VAR ENS_TEST_PORT=$ENS_PORT ENS_TEST_ROOT=$ENS_VAR/root

cleanup() {
  local status=$?
  [ -d "$ENS_VAR/run" ] && { scripts/stack.sh down >/dev/null 2>&1 || true; }
  if dpkg-query -W -f='${Status}' ens 2>/dev/null | grep -q 'installed\|config-files'; then
    rm -rf /etc/ens/ens.conf /etc/ens/secrets
    apt-get purge -y -qq ens >/dev/null 2>&1 || dpkg --purge ens >/dev/null 2>&1 || true
  fi
  rm -rf /etc/ens
  if [ "$had_user" = 0 ] && getent passwd ens >/dev/null; then userdel ens 2>/dev/null || true; fi
  getent group ens >/dev/null && [ "$had_user" = 0 ] && { groupdel ens 2>/dev/null || true; }
  rm -f "$ENS_VAR/installed"
  exit "$status"
}
trap cleanup EXIT

[ -d "$ENS_VAR/run" ] && scripts/stack.sh down || true
rm -rf "$ENS_VAR"
mkdir -p "$ENS_VAR"

# 1. Build, offline (make deb), and lint.
say "make deb"
make --no-print-directory deb > "$ENS_VAR/make-deb.out" 2>&1 || { tail -30 "$ENS_VAR/make-deb.out"; fail "make deb"; exit 1; }
deb=$(ls "$ROOT"/var/pkg/ens_*_"$(dpkg-architecture -qDEB_HOST_ARCH)".deb)
say "built $(basename "$deb") ($(du -h "$deb" | cut -f1)) in $((SECONDS - started)) s"
say "lintian -I --pedantic"
# As nobody: lintian warns when it runs as root.
lintian_out=$(runuser -u nobody -- lintian -I --pedantic "$deb" 2>&1) || fail "lintian exited non-zero"
if [ -n "$lintian_out" ]; then printf '%s\n' "$lintian_out"; fail "lintian is not clean (override a tag in debian/ens.lintian-overrides, with the reason)"; fi
# What the maintainer scripts may do with the units: reload systemd, try-restart running
# units on an upgrade, keep an operator's enablement; never start or newly enable one.
mkdir -p "$ENS_VAR/control" && dpkg-deb -e "$deb" "$ENS_VAR/control"
# (Enabling is checked after the install: deb-systemd-helper makes its symlinks even
# where systemd is not running.)
if grep -h 'deb-systemd-invoke' "$ENS_VAR/control/postinst" | grep -v 'deb-systemd-invoke try-restart '; then
  fail "the postinst may start a unit (only try-restart on an upgrade is allowed)"
fi
if grep -hE 'systemctl .*(start|enable)' "$ENS_VAR/control"/*; then fail "a maintainer script starts or enables a unit"; fi

# 2. Install (the ENS processes of other stacks on this machine run from elsewhere).
ens_processes() { # processes running an installed ENS binary
  local exe
  for exe in /proc/[0-9]*/exe; do
    case $(readlink "$exe" 2>/dev/null) in /usr/bin/ens-*) echo "${exe%/exe}";; esac
  done
}
runs() { # runs PROGRAM: some process runs it
  local exe
  for exe in /proc/[0-9]*/exe; do [ "$(readlink "$exe" 2>/dev/null)" = "$1" ] && return 0; done
  return 1
}
say "apt-get install $(basename "$deb")"
echo "had_user=$had_user" > "$ENS_VAR/installed"
apt-get install -y -qq --no-install-recommends "$deb" > "$ENS_VAR/apt-install.out" 2>&1 \
  || { cat "$ENS_VAR/apt-install.out"; fail "apt-get install"; exit 1; }

# 3. What it installed and created.
for program in ens-fcgi ens-sender ens-cron; do
  check "/usr/bin/$program is not executable" test -x "/usr/bin/$program"
  check "$program --help fails" "/usr/bin/$program" --help
  check "$program needs a Swift runtime" bash -c "! ldd /usr/bin/$program | grep -qiE 'swift|foundation|not found'"
  check "no man page for $program" test -s "/usr/share/man/man1/$program.1.gz"
done
# ens-apns, the sender's name up to 0.3.0, an alias in 0.4.0 only: gone since 0.5.0.
for gone in /usr/bin/ens-apns /usr/share/man/man1/ens-apns.1.gz /usr/lib/systemd/system/ens-apns.service; do
  check "$gone is still installed (the old name went in 0.5.0)" test ! -e "$gone" -a ! -L "$gone"
done
for unit in ens-fcgi.service ens-fcgi.socket ens-sender.service ens-cron.service ens-cron.timer; do
  file=/usr/lib/systemd/system/$unit
  check "$file missing" test -s "$file"
  check "$unit names /usr/local" bash -c "! grep -q /usr/local $file"
  check "$unit lacks ConditionPathExists=/etc/ens/ens.conf" grep -qx 'ConditionPathExists=/etc/ens/ens.conf' "$file"
  check "$unit is enabled" bash -c "! ls /etc/systemd/system/*.wants/$unit"
done
for unit in ens-fcgi.service ens-sender.service ens-cron.service; do
  program=${unit%.service}
  check "$unit does not start /usr/bin/$program" grep -q "^ExecStart=/usr/bin/$program " "/usr/lib/systemd/system/$unit"
done
if command -v systemd-analyze >/dev/null; then
  verify=$(systemd-analyze verify --man=no /usr/lib/systemd/system/ens-* 2>&1) || true
  [ -z "$verify" ] || { printf '%s\n' "$verify"; fail "systemd-analyze verify of the installed units"; }
fi
check "sysusers.d file" test -s /usr/lib/sysusers.d/ens.conf
check "tmpfiles.d file" test -s /usr/lib/tmpfiles.d/ens.conf
check "logrotate file" test -s /etc/logrotate.d/ens
check "the cron.d job is installed as a job (it is an example)" test ! -e /etc/cron.d/ens
check "cron.d example" grep -q ' /usr/bin/ens-cron all ' /usr/share/ens/deploy/cron.d/ens
check "example config" test -s /usr/share/ens/ens.conf.example
check "accounts.sql.in" test -s /usr/share/ens/accounts.sql.in
for file in nginx/ens-site.conf nginx/ens-locations.conf nginx/ens-fastcgi.conf apache/ens-site.conf \
            apache/ens-locations.conf apache/ens-proxy-fcgi.conf apache/ens-fcgid.conf apache/ens-cgi.conf \
            apache/ens-fcgid-starter apache/ens-cgi-starter apache/errors/503.json; do
  check "/usr/share/ens/$file" cmp -s "$file" "/usr/share/ens/$file"
done
for migration in sql/migrations/*.sql; do
  check "/usr/share/ens/$migration" cmp -s "$migration" "/usr/share/ens/$migration"
done
check "the ens user" bash -c "getent passwd ens | grep -q ':/var/lib/ens:/usr/sbin/nologin$'"
check "the ens user is not a system user" test "$(id -u ens)" -lt 1000
check "the ens group" getent group ens
check "/run/ens is not 0710 ens:www-data" test "$(stat -c '%a %U:%G' /run/ens)" = "710 ens:www-data"
check "/var/lib/ens is not 0750 ens:ens" test "$(stat -c '%a %U:%G' /var/lib/ens)" = "750 ens:ens"
check "/etc/ens/secrets is not 0750 root:ens" test "$(stat -c '%a %U:%G' /etc/ens/secrets)" = "750 root:ens"
running=$(ens_processes)
[ -z "$running" ] || fail "installing started ENS processes: $running"

# 4. Configure it as docs/deployment.md "The Debian package" says. The database is a private MariaDB
# (the stack's, started alone first), under names of its own so that the stack's
# accounts are untouched: docs/deployment.md step 6 says to edit the names in accounts.sql.in when
# db.name, db.user or db.migration_user change.
say "configuring as docs/deployment.md says"
scripts/stack.sh db-start
db_socket=$ENS_VAR/run/mysqld.sock
# configure_etc NAME: /etc/ens/ens.conf and secrets, and the database NAME with the accounts
# NAME_service and NAME_migrate (step 7 configures the previous release the same way).
configure_etc() {
  local name=$1 svc mig sql
  install -d -m 0755 /etc/ens
  install -d -m 0750 -g ens /etc/ens/secrets
  install -m 0640 -g ens /usr/share/ens/ens.conf.example /etc/ens/ens.conf
  (umask 077
   openssl rand -hex 32 > /etc/ens/secrets/master.key
   openssl rand -hex 24 > /etc/ens/secrets/db-service.password
   openssl rand -hex 24 > /etc/ens/secrets/db-migrate.password
   openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out /etc/ens/secrets/apns-auth-key.p8 2>/dev/null)
  chgrp ens /etc/ens/secrets/master.key /etc/ens/secrets/db-service.password /etc/ens/secrets/apns-auth-key.p8
  chmod 0640 /etc/ens/secrets/master.key /etc/ens/secrets/db-service.password /etc/ens/secrets/apns-auth-key.p8
  sed -i -e "s|^db.socket = .*|db.socket = $db_socket|" -e "s|^db.name = .*|db.name = $name|" \
    -e "s|^db.user = .*|db.user = ${name}_service|" -e "s|^db.migration_user = .*|db.migration_user = ${name}_migrate|" \
    -e 's|^keys.pool_size = .*|keys.pool_size = 3|' /etc/ens/ens.conf
  printf 'apns.key_id = DEBTEST001\napns.team_id = DEBTEAM001\n' >> /etc/ens/ens.conf
  svc=$(< /etc/ens/secrets/db-service.password)
  mig=$(< /etc/ens/secrets/db-migrate.password)
  sql=$(< /usr/share/ens/accounts.sql.in)
  sql=${sql//@DB_NAME@/$name}
  sql=${sql//\'ens_service\'/\'${name}_service\'}
  sql=${sql//\'ens_migrate\'/\'${name}_migrate\'}
  sql=${sql//@SERVICE_PASSWORD@/"$svc"}
  sql=${sql//@MIGRATE_PASSWORD@/"$mig"}
  printf '%s\n' "$sql" | mariadb --no-defaults -S "$db_socket" -uroot || fail "accounts.sql.in"
}
configure_etc ens_deb
# The migrations come from the built-in default, /usr/share/ens/sql/migrations.
migrated=$(ens-cron migrate --config /etc/ens/ens.conf 2>&1) || { printf '%s\n' "$migrated"; fail "ens-cron migrate"; }
last=$(basename "$(ls sql/migrations/*.sql | tail -1)")
grep -q "$last" <<<"$migrated" || { printf '%s\n' "$migrated"; fail "ens-cron migrate did not apply $last"; }
check "ens-cron keys as ens" runuser -u ens -- ens-cron keys --config /etc/ens/ens.conf
token=$(runuser -u ens -- ens-cron token create --label deb-test --config /etc/ens/ens.conf 2>/dev/null | tail -1) || fail "ens-cron token create as ens"
check "ens-cron api-keys as ens" runuser -u ens -- ens-cron api-keys --config /etc/ens/ens.conf
check "the token cache is not the ens user's" test "$(stat -c %U /var/lib/ens/api-tokens.cache)" = ens
check "ens-fcgi --check as ens" bash -c "runuser -u ens -- ens-fcgi --check --config /etc/ens/ens.conf | grep -q 'configuration OK'"
check "ens-sender --check as ens" bash -c "runuser -u ens -- ens-sender --check --config /etc/ens/ens.conf | grep -q 'configuration OK'"
check "the migration password is readable by ens" bash -c "! runuser -u ens -- cat /etc/ens/secrets/db-migrate.password"
# The installed responder, as ens with /etc/ens/ens.conf, answers a request (as a CGI
# program: no socket or web server needed) from the database set up as docs/deployment.md says.
cgi() { # cgi PATH [HTTP_APITOKEN]
  runuser -u ens -- env -i GATEWAY_INTERFACE=CGI/1.1 SERVER_PROTOCOL=HTTP/1.1 REQUEST_METHOD=GET \
    SCRIPT_NAME= PATH_INFO="$1" QUERY_STRING= REMOTE_ADDR=127.0.0.1 CONTENT_LENGTH=0 \
    ${2:+HTTP_APITOKEN="$2"} ENS_CONFIG=/etc/ens/ens.conf PATH=/usr/bin:/bin /usr/bin/ens-fcgi </dev/null 2>/dev/null
}
alive=$(cgi /alive) || true
grep -q '"responseCode":"Alive"' <<<"$alive" || { printf '%s\n' "$alive"; fail "/alive through the installed ens-fcgi with the configuration docs/deployment.md gives"; }
[ -n "${token:-}" ] || fail "no API token printed"
running=$(ens_processes)
[ -z "$running" ] || fail "ENS processes left running after configuring: $running"

# 5. The HTTP contract against the installed binaries: a private stack (MariaDB, the
# simulators, nginx) that runs /usr/bin/ens-fcgi and /usr/bin/ens-sender. The tests find
# ens-cron under ENS_TEST_ROOT/.build/debug: a root whose binaries are the installed ones.
say "the contract against /usr/bin (stack on port $ENS_PORT)"
mkdir -p "$ENS_TEST_ROOT/.build/debug"
for entry in "$ROOT"/* "$ROOT"/.ci; do ln -s "$entry" "$ENS_TEST_ROOT/"; done
for program in ens-fcgi ens-sender ens-cron; do ln -s "/usr/bin/$program" "$ENS_TEST_ROOT/.build/debug/$program"; done
swift build --build-tests > "$ENS_VAR/swift-build.out" 2>&1 || { tail -20 "$ENS_VAR/swift-build.out"; fail "swift build --build-tests"; exit 1; }
scripts/stack.sh up > "$ENS_VAR/stack-up.out" 2>&1 || { tail -20 "$ENS_VAR/stack-up.out"; fail "scripts/stack.sh up"; exit 1; }
for program in ens-fcgi ens-sender; do
  check "the stack does not run /usr/bin/$program" runs "/usr/bin/$program"
done
swift test --skip-build --no-parallel --filter 'FoundationTests|DeviceAPITests' > "$ENS_VAR/swift-test.out" 2>&1 \
  || fail "the contract tests against the installed binaries (output: $ENS_VAR/swift-test.out)"
grep -E '✘|^.? ?Test run with|Executed [0-9]+ tests' "$ENS_VAR/swift-test.out" || true
scripts/stack.sh down >/dev/null 2>&1 || fail "scripts/stack.sh down"

# 6. Purge: the package's files and what its postinst made go; the operator's files are
# removed first (the postrm keeps a non-empty /etc/ens).
say "apt-get purge ens"
rm -rf /etc/ens/ens.conf /etc/ens/secrets/*
apt-get purge -y -qq ens > "$ENS_VAR/apt-purge.out" 2>&1 || { cat "$ENS_VAR/apt-purge.out"; fail "apt-get purge"; }
check "still installed after purge" bash -c "! dpkg-query -W -f='\${Status}' ens 2>/dev/null | grep -q installed"
for path in /usr/bin/ens-fcgi /usr/bin/ens-sender /usr/lib/systemd/system/ens-fcgi.service /usr/lib/systemd/system/ens-sender.service \
            /usr/share/ens /etc/logrotate.d/ens /var/lib/ens /run/ens /etc/ens \
            /var/lib/systemd/deb-systemd-helper-enabled/ens-fcgi.socket.dsh-also; do
  check "$path is left after purge" test ! -e "$path" -a ! -L "$path"
done

# 7. The upgrade from the previous release's package (scripts/rolling-upgrade.sh names the
# release; `make deb-previous` builds its .deb, a release build of about 2.5 minutes that
# make test spends beside its integration tests). That package installed and configured as in step 4, its
# sender run and stopped (SIGTERM) so that the spool and SenderHosts hold its state;
# this one installed over it. The operator's files and the state must be as they were,
# the postinst must ask for the migration, and nothing may start. Without systemd here
# the restart of running units is not run: on an upgrade the postinst try-restarts the
# running units in one transaction, and the prerm stops none (checked below); no order
# loses a notification, since a responder acknowledges a callback only once the sender
# has spooled its notifications (else the mail server sends it again), and the sender
# keeps its spool across a stop (scripts/rolling-upgrade.sh runs that under load).
prev_deb=$(scripts/rolling-upgrade.sh previous-deb 2>/dev/null) || prev_deb=
if [ -z "$prev_deb" ] && [ "${ENS_DEB_PREVIOUS_REQUIRED:-0}" = 1 ]; then
  fail "upgrade from the previous release: no previous .deb (scripts/rolling-upgrade.sh build-previous-deb failed? var/prebuild.log)"
elif [ -z "$prev_deb" ]; then
  say "upgrade from the previous release: not tested (no previous .deb here; make deb-previous builds it)"
else
  upgrade_started=$SECONDS
  prev_version=$(dpkg-deb -f "$prev_deb" Version)
  version=$(dpkg-deb -f "$deb" Version)
  say "upgrade: $(basename "$prev_deb") installed and configured, then $(basename "$deb") over it"
  installed_version() { dpkg-query -W -f='${Version}' ens 2>/dev/null; }
  # unit_exec UNIT: the command line UNIT starts (ExecStart=), read from the file its name
  # leads to (an alias followed, as systemd does). Without systemd here, sender_run runs
  # it as the unit's User= would.
  unit_exec() { sed -n 's/^ExecStart=//p' "$(readlink -f "/usr/lib/systemd/system/$1")"; }
  # sender_run LABEL COMMAND [N]: the installed sender (COMMAND, a unit's ExecStart) as ens
  # until it has written a heartbeat to
  # SenderHosts (at most 20 s), N notifications handed to it on its socket (as a
  # responder does: each acknowledged once spooled), then SIGTERM, after which it must
  # exit 0 (a clean stop); sets SENDER_RELEASE to the release the heartbeat recorded and
  # SENDER_EXE to the program the process ran.
  sender_run() {
    local pid rc=0 from command
    from=$(date +%s)
    SENDER_RELEASE='' SENDER_EXE=''
    read -r -a command <<<"$2"
    setpriv --reuid ens --regid ens --init-groups "${command[@]}" \
      >>"$ENS_VAR/upgrade-sender.log" 2>&1 </dev/null &
    pid=$!
    for _ in $(seq 1 100); do
      SENDER_RELEASE=$(mariadb --no-defaults -S "$db_socket" -uroot -N -B ens_upg \
        -e "SELECT IFNULL(release_version, 'none') FROM SenderHosts WHERE heartbeat_at >= FROM_UNIXTIME($from)" 2>/dev/null | head -1)
      if [ -n "$SENDER_RELEASE" ] || ! kill -0 "$pid" 2>/dev/null; then break; fi
      sleep 0.2
    done
    SENDER_EXE=$(readlink "/proc/$pid/exe" 2>/dev/null || echo "not running")
    if [ "${3:-0}" -gt 0 ]; then
      python3 - "$ROOT/bench/pushes.py" "$3" <<'PY' || fail "$1: the sender did not acknowledge $3 notifications"
import importlib.util, json, secrets, socket, sys, time
spec = importlib.util.spec_from_file_location("pushes", sys.argv[1])
pushes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pushes)
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(10)
sock.connect("/run/ens/apns.sock")
for n in range(int(sys.argv[2])):
    note = {"id": secrets.token_hex(16), "token": secrets.token_hex(32), "topic": "com.example.mail",
            "environment": "production", "pushType": "alert", "expiration": int(time.time()) + 86400,
            "payload": {"aps": {"alert": {"title": "Upgrade", "body": f"spooled {n}"}}, "ens": {"userid": "deb-test"}}}
    sock.sendall(pushes.frame(1, json.dumps(note).encode()))
    kind, body = pushes.read_frame(sock)
    if kind != 2:
        sys.exit(f"refused: {body[:80]!r}")
PY
    fi
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" || rc=$?
    [ "$rc" -eq 0 ] || fail "$1: the sender ($2) exited $rc after SIGTERM (see $ENS_VAR/upgrade-sender.log)"
    SENDER_RELEASE=${SENDER_RELEASE:-no heartbeat}
  }
  # What the upgrade must keep: the operator's files, the state, their owners and modes.
  kept() {
    {
      find /etc/ens /var/lib/ens -exec stat -c '%n %a %U:%G' {} + | sort
      find /etc/ens /var/lib/ens -type f -exec sha256sum {} + | sort -k2
      id ens
    } 2>&1
  }
  apt-get install -y -qq --no-install-recommends "$prev_deb" > "$ENS_VAR/apt-install-previous.out" 2>&1 \
    || { cat "$ENS_VAR/apt-install-previous.out"; fail "apt-get install of the previous package"; }
  check "the previous package ($prev_version) is not what is installed" test "$(installed_version)" = "$prev_version"
  scripts/stack.sh db-start
  configure_etc ens_upg
  # APNs at a closed loopback port: what the previous sender is handed stays in its spool.
  sed -i -e 's|^apns.production_url = .*|apns.production_url = https://127.0.0.1:9|' \
    -e 's|^apns.sandbox_url = .*|apns.sandbox_url = https://127.0.0.1:9|' /etc/ens/ens.conf
  ens-cron migrate --config /etc/ens/ens.conf > "$ENS_VAR/upgrade-migrate-previous.out" 2>&1 \
    || { cat "$ENS_VAR/upgrade-migrate-previous.out"; fail "ens-cron migrate of $prev_version"; }
  check "ens-cron keys of $prev_version as ens" runuser -u ens -- ens-cron keys --config /etc/ens/ens.conf
  check "ens-cron token create of $prev_version as ens" runuser -u ens -- ens-cron token create --label deb-upgrade --config /etc/ens/ens.conf
  # The previous release's sender unit, ens-sender.service, enabled as docs/deployment.md
  # says (offline: systemctl makes the multi-user.target.wants/ link), and run.
  wants=/etc/systemd/system/multi-user.target.wants
  systemctl enable ens-sender.service >"$ENS_VAR/upgrade-enable.out" 2>&1 || { cat "$ENS_VAR/upgrade-enable.out"; fail "systemctl enable ens-sender.service of $prev_version"; }
  check "systemctl enable ens-sender.service of $prev_version made no $wants/ens-sender.service" test -L "$wants/ens-sender.service"
  sender_run "$prev_version" "$(unit_exec ens-sender.service)" 3; before_release=$SENDER_RELEASE before_exe=$SENDER_EXE
  spooled=$(grep 'delivery stopped' "$ENS_VAR/upgrade-sender.log" | tail -1 | grep -o 'spool.size=[0-9]*' | cut -d= -f2)
  check "the previous sender stopped with ${spooled:-no} notifications in its spool, not 3" test "${spooled:-0}" = 3
  check "the previous sender recorded release '$before_release' in SenderHosts, not $prev_version" test "$before_release" = "$prev_version"
  check "the previous sender made no spool directory" test -d /var/lib/ens/spool
  kept > "$ENS_VAR/upgrade-kept-before.txt"
  # The same version (this tree has no new release number yet) is installed over with
  # --reinstall, which apt needs to install it at all; dpkg runs the same scripts.
  reinstall=(); [ "$version" != "$prev_version" ] || reinstall=(--reinstall)
  apt-get install -y --no-install-recommends "${reinstall[@]}" "$deb" > "$ENS_VAR/apt-upgrade.out" 2>&1 \
    || { cat "$ENS_VAR/apt-upgrade.out"; fail "apt-get install of $version over $prev_version"; }
  check "$version is not what is installed after the upgrade" test "$(installed_version)" = "$version"
  kept > "$ENS_VAR/upgrade-kept-after.txt"
  diff "$ENS_VAR/upgrade-kept-before.txt" "$ENS_VAR/upgrade-kept-after.txt" \
    || fail "the upgrade changed the configuration, secrets or state (above: before <, after >)"
  asked="migrate asked for"
  grep -q 'ens-cron migrate' "$ENS_VAR/apt-upgrade.out" \
    || { asked="migrate NOT asked for"; grep -v 'Reading database' "$ENS_VAR/apt-upgrade.out"; fail "the upgrade does not ask for ens-cron migrate"; }
  running=$(ens_processes)
  [ -z "$running" ] || fail "the upgrade started ENS processes: $running"
  mkdir -p "$ENS_VAR/control-upgrade" && dpkg-deb -e "$deb" "$ENS_VAR/control-upgrade"
  # shellcheck disable=SC2016  # "$1" as the prerm spells it
  grep -B4 'deb-systemd-invoke stop' "$ENS_VAR/control-upgrade/prerm" | grep -q '"$1" = remove' \
    || fail "the prerm may stop the units on an upgrade (only on remove)"
  migrated=$(ens-cron migrate --config /etc/ens/ens.conf 2>&1) || { printf '%s\n' "$migrated"; fail "ens-cron migrate of $version after the upgrade"; }
  # The sender's unit after the upgrade: ens-sender.service still enabled, the alias
  # ens-apns.service gone with the package's link and nothing enabled on it; the program
  # the enabled unit starts runs the kept spool.
  check "ens-sender.service is not enabled after the upgrade" \
    test "$(readlink -f "$wants/ens-sender.service")" = "$(readlink -f /usr/lib/systemd/system/ens-sender.service)"
  check "systemctl is-enabled ens-sender.service: '$(systemctl is-enabled ens-sender.service 2>&1)', not enabled" \
    test "$(systemctl is-enabled ens-sender.service 2>/dev/null)" = enabled
  for gone in "$wants/ens-apns.service" /usr/lib/systemd/system/ens-apns.service /usr/bin/ens-apns; do
    check "the upgrade left $gone (the old name went in 0.5.0)" test ! -e "$gone" -a ! -L "$gone"
  done
  after_exec=$(unit_exec ens-sender.service)
  check "ens-sender.service starts '$after_exec', not /usr/bin/ens-sender" grep -q '^/usr/bin/ens-sender ' <<<"$after_exec"
  sender_run "$version" "$after_exec"; after_release=$SENDER_RELEASE after_exe=$SENDER_EXE
  check "the upgraded sender ran $after_exe, not /usr/bin/ens-sender" test "$after_exe" = /usr/bin/ens-sender
  replayed=$(grep 'replaying spooled notifications' "$ENS_VAR/upgrade-sender.log" | tail -1 | grep -o 'spool.size=[0-9]*' | cut -d= -f2)
  check "the upgraded sender found ${replayed:-no} notifications in the kept spool, not 3" test "${replayed:-0}" = 3
  check "the upgraded sender recorded release '$after_release' in SenderHosts, not $version" test "$after_release" = "$version"
  check "ens-fcgi --check of $version with the kept configuration" \
    bash -c "runuser -u ens -- ens-fcgi --check --config /etc/ens/ens.conf | grep -q 'configuration OK'"
  alive=$(cgi /alive) || true
  grep -q '"responseCode":"Alive"' <<<"$alive" || { printf '%s\n' "$alive"; fail "/alive through the upgraded ens-fcgi"; }
  say "upgrade $prev_version -> $version: configuration, secrets and state kept (the spool's ${spooled:-0} notifications found by the new sender: ${replayed:-0}); $asked, then $(tail -1 <<<"$migrated"); SenderHosts $before_release -> $after_release; the sender unit ens-sender.service ($before_exe -> $after_exe), enabled ($((SECONDS - upgrade_started)) s)"
  scripts/stack.sh down >/dev/null 2>&1 || fail "scripts/stack.sh down"
  rm -rf /etc/ens/ens.conf /etc/ens/secrets/*
  apt-get purge -y -qq ens > "$ENS_VAR/apt-purge-upgrade.out" 2>&1 || { cat "$ENS_VAR/apt-purge-upgrade.out"; fail "apt-get purge after the upgrade"; }
  for link in "$wants/ens-sender.service" "$wants/ens-apns.service" \
              /var/lib/systemd/deb-systemd-helper-enabled/ens-apns.service.dsh-also \
              /var/lib/systemd/deb-systemd-helper-enabled/ens-sender.service.dsh-also; do
    check "$link is left after the purge" test ! -e "$link" -a ! -L "$link"
  done
fi

if [ "$failures" -gt 0 ]; then say "$failures check(s) failed ($((SECONDS - started)) s)"; exit 1; fi
say "OK ($((SECONDS - started)) s)"
