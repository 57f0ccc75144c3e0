#!/usr/bin/env bash
# The Debian package, tested on this machine (as root; CI runs as root): builds it
# (make deb), runs lintian, installs it with apt-get, checks what it installed and that
# its maintainer scripts created the ens user and directories but enabled and started
# nothing, configures it as docs/deployment.md "The Debian package" says (against a private MariaDB),
# runs the HTTP contract (FoundationTests, DeviceAPITests) against the INSTALLED
# binaries through a private stack under var/deb on port 28443, then purges the package
# and removes what the test made (the ens user too, unless it was there before).
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
for program in ens-fcgi ens-apns ens-cron; do
  check "/usr/bin/$program is not executable" test -x "/usr/bin/$program"
  check "$program --help fails" "/usr/bin/$program" --help
  check "$program needs a Swift runtime" bash -c "! ldd /usr/bin/$program | grep -qiE 'swift|foundation|not found'"
  check "no man page for $program" test -s "/usr/share/man/man1/$program.1.gz"
done
for unit in ens-fcgi.service ens-fcgi.socket ens-apns.service ens-cron.service ens-cron.timer; do
  file=/usr/lib/systemd/system/$unit
  check "$file missing" test -s "$file"
  check "$unit names /usr/local" bash -c "! grep -q /usr/local $file"
  check "$unit lacks ConditionPathExists=/etc/ens/ens.conf" grep -qx 'ConditionPathExists=/etc/ens/ens.conf' "$file"
  check "$unit is enabled" bash -c "! ls /etc/systemd/system/*.wants/$unit"
done
for unit in ens-fcgi.service ens-apns.service ens-cron.service; do
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
sed -i -e "s|^db.socket = .*|db.socket = $db_socket|" -e 's|^db.name = .*|db.name = ens_deb|' \
  -e 's|^db.user = .*|db.user = ens_deb_service|' -e 's|^db.migration_user = .*|db.migration_user = ens_deb_migrate|' \
  -e 's|^keys.pool_size = .*|keys.pool_size = 3|' /etc/ens/ens.conf
printf 'apns.key_id = DEBTEST001\napns.team_id = DEBTEAM001\n' >> /etc/ens/ens.conf
svc=$(< /etc/ens/secrets/db-service.password)
mig=$(< /etc/ens/secrets/db-migrate.password)
sql=$(< /usr/share/ens/accounts.sql.in)
sql=${sql//@DB_NAME@/ens_deb}
sql=${sql//\'ens_service\'/\'ens_deb_service\'}
sql=${sql//\'ens_migrate\'/\'ens_deb_migrate\'}
sql=${sql//@SERVICE_PASSWORD@/"$svc"}
sql=${sql//@MIGRATE_PASSWORD@/"$mig"}
printf '%s\n' "$sql" | mariadb --no-defaults -S "$db_socket" -uroot || fail "accounts.sql.in"
unset svc mig sql
# The migrations come from the built-in default, /usr/share/ens/sql/migrations.
migrated=$(ens-cron migrate --config /etc/ens/ens.conf 2>&1) || { printf '%s\n' "$migrated"; fail "ens-cron migrate"; }
last=$(basename "$(ls sql/migrations/*.sql | tail -1)")
grep -q "$last" <<<"$migrated" || { printf '%s\n' "$migrated"; fail "ens-cron migrate did not apply $last"; }
check "ens-cron keys as ens" runuser -u ens -- ens-cron keys --config /etc/ens/ens.conf
token=$(runuser -u ens -- ens-cron token create --label deb-test --config /etc/ens/ens.conf 2>/dev/null | tail -1) || fail "ens-cron token create as ens"
check "ens-cron api-keys as ens" runuser -u ens -- ens-cron api-keys --config /etc/ens/ens.conf
check "the token cache is not the ens user's" test "$(stat -c %U /var/lib/ens/api-tokens.cache)" = ens
check "ens-fcgi --check as ens" bash -c "runuser -u ens -- ens-fcgi --check --config /etc/ens/ens.conf | grep -q 'configuration OK'"
check "ens-apns --check as ens" bash -c "runuser -u ens -- ens-apns --check --config /etc/ens/ens.conf | grep -q 'configuration OK'"
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
# simulators, nginx) that runs /usr/bin/ens-fcgi and /usr/bin/ens-apns. The tests find
# ens-cron under ENS_TEST_ROOT/.build/debug: a root whose binaries are the installed ones.
say "the contract against /usr/bin (stack on port $ENS_PORT)"
mkdir -p "$ENS_TEST_ROOT/.build/debug"
for entry in "$ROOT"/* "$ROOT"/.ci; do ln -s "$entry" "$ENS_TEST_ROOT/"; done
for program in ens-fcgi ens-apns ens-cron; do ln -s "/usr/bin/$program" "$ENS_TEST_ROOT/.build/debug/$program"; done
swift build --build-tests > "$ENS_VAR/swift-build.out" 2>&1 || { tail -20 "$ENS_VAR/swift-build.out"; fail "swift build --build-tests"; exit 1; }
scripts/stack.sh up > "$ENS_VAR/stack-up.out" 2>&1 || { tail -20 "$ENS_VAR/stack-up.out"; fail "scripts/stack.sh up"; exit 1; }
for program in ens-fcgi ens-apns; do
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
for path in /usr/bin/ens-fcgi /usr/lib/systemd/system/ens-fcgi.service /usr/share/ens /etc/logrotate.d/ens \
            /var/lib/ens /run/ens /etc/ens /var/lib/systemd/deb-systemd-helper-enabled/ens-fcgi.socket.dsh-also; do
  check "$path is left after purge" test ! -e "$path"
done

if [ "$failures" -gt 0 ]; then say "$failures check(s) failed ($((SECONDS - started)) s)"; exit 1; fi
say "OK ($((SECONDS - started)) s)"
