#!/usr/bin/env bash
# A private Dovecot for tests and the demo: its own directory, 127.0.0.1 high ports, an
# unprivileged user (nobody when started as root, else the caller), nothing written
# outside DIR and no system-wide change. Ready in well under a second.
#
#   scripts/dovecot.sh up DIR PORT [EXTRA [CA]]   IMAPS on PORT, IMAP (STARTTLS) on PORT+1,
#                                                  LMTP on PORT+2; EXTRA is a file of more
#                                                  configuration (what `ens-cron dovecot
#                                                  config` prints), CA a PEM file Dovecot
#                                                  trusts when it pushes over https
#   scripts/dovecot.sh user DIR LOGIN PASSWORD     adds an account (password file, PLAIN)
#   scripts/dovecot.sh deliver DIR PORT RCPT FILE  delivers FILE (a message) over LMTP
#   scripts/dovecot.sh down DIR
#
# DIR/ca.crt is the certificate IMAPS presents (self-signed for 127.0.0.1 and localhost),
# to trust in a client; DIR/dovecot.log says what Dovecot did.
set -euo pipefail
# shellcheck source=scripts/common.sh
. "$(dirname "$0")/common.sh"

command -v dovecot >/dev/null || die "dovecot is not installed: run scripts/deps.sh (dovecot-core, dovecot-imapd, dovecot-lmtpd)"

# Dovecot's processes run as this user: nobody when we are root (dovecot would otherwise
# switch to its own system users), else whoever runs the tests.
if [ "$(id -u)" -eq 0 ]; then
  run_user=nobody
  run_group=$(id -gn nobody)
else
  run_user=$(id -un)
  run_group=$(id -gn)
fi

up() {
  local dir=$1 port=$2 extra=${3:-} client_ca=${4:-}
  if [ -z "$dir" ] || [ -z "$port" ]; then die "usage: dovecot.sh up DIR PORT [EXTRA [CA]]"; fi
  mkdir -p "$dir/run" "$dir/state" "$dir/home"
  dir=$(cd "$dir" && pwd)
  [ -f "$dir/pid" ] && pid_alive "$dir/pid" && die "a Dovecot already runs from $dir"
  if [ ! -f "$dir/server.key" ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 825 \
      -subj "/CN=ENS test Dovecot" -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
      -keyout "$dir/server.key" -out "$dir/ca.crt" 2>/dev/null
  fi
  touch "$dir/users"
  if [ -n "$client_ca" ]; then cat "$dir/ca.crt" "$client_ca" > "$dir/client-ca.crt"; else cp "$dir/ca.crt" "$dir/client-ca.crt"; fi
  cat > "$dir/dovecot.conf" <<EOF
# Written by scripts/dovecot.sh: a private test instance.
base_dir = $dir/run
state_dir = $dir/state
log_path = $dir/dovecot.log
protocols = imap lmtp
listen = 127.0.0.1
default_login_user = $run_user
default_internal_user = $run_user
default_internal_group = $run_group
ssl = yes
ssl_cert = <$dir/ca.crt
ssl_key = <$dir/server.key
ssl_client_ca_file = $dir/client-ca.crt
disable_plaintext_auth = no
auth_mechanisms = plain login
passdb {
  driver = passwd-file
  args = scheme=PLAIN username_format=%u $dir/users
}
userdb {
  driver = passwd-file
  args = username_format=%u $dir/users
  default_fields = home=$dir/home/%u uid=$(id -u "$run_user") gid=$(getent group "$run_group" | cut -d: -f3)
}
first_valid_uid = 0
mail_location = maildir:~/Maildir
mail_attribute_dict = file:%h/dovecot-attributes
protocol imap {
  imap_metadata = yes
}
service anvil {
  chroot =
}
service imap-login {
  chroot =
  inet_listener imaps {
    port = $port
    ssl = yes
  }
  inet_listener imap {
    port = $((port + 1))
  }
}
service lmtp {
  inet_listener lmtp {
    port = $((port + 2))
  }
  unix_listener lmtp {
    mode = 0600
  }
}
service stats {
  chroot =
}
EOF
  if [ -n "$extra" ]; then
    printf '\n# Added from %s:\n' "$extra" >> "$dir/dovecot.conf"
    cat "$extra" >> "$dir/dovecot.conf"
  fi
  chmod 600 "$dir/server.key"
  touch "$dir/dovecot.log"
  [ "$(id -u)" -eq 0 ] && chown -R "$run_user:$run_group" "$dir"
  if [ "$(id -u)" -eq 0 ]; then
    setpriv --reuid="$run_user" --regid="$run_group" --clear-groups dovecot -F -c "$dir/dovecot.conf" >>"$dir/dovecot.out" 2>&1 &
  else
    dovecot -F -c "$dir/dovecot.conf" >>"$dir/dovecot.out" 2>&1 &
  fi
  echo $! > "$dir/pid"
  wait_until 10 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" \
    || { tail -n 20 "$dir/dovecot.log" "$dir/dovecot.out" >&2; die "Dovecot did not open port $port (log above)"; }
}

user() {
  local dir=$1 login=$2 password=$3
  printf '%s:{PLAIN}%s::::::\n' "$login" "$password" >> "$dir/users"
}

deliver() {
  local port=$2 recipient=$3 file=$4
  python3 - "$port" "$recipient" "$file" <<'EOF'
import smtplib, sys
port, recipient, path = int(sys.argv[1]) + 2, sys.argv[2], sys.argv[3]
with open(path, "rb") as message:
    body = message.read()
client = smtplib.LMTP("127.0.0.1", port)
refused = client.sendmail("sender@example.net", [recipient], body)
client.quit()
sys.exit(1 if refused else 0)
EOF
}

down() {
  local dir=$1
  [ -f "$dir/pid" ] || return 0
  local pid
  pid=$(cat "$dir/pid")
  # A test instance keeps nothing worth a clean shutdown, and Dovecot's own waits
  # for its children for seconds: stop them all at once.
  pkill -KILL -P "$pid" 2>/dev/null || true
  kill -KILL "$pid" 2>/dev/null || true
  # Killed, Dovecot leaves its pid file and sockets, which would stop the next start.
  rm -rf "$dir/pid" "$dir/run"
}

case "${1:-}" in
  up) shift; up "$@" ;;
  user) shift; user "$@" ;;
  deliver) shift; deliver "$@" ;;
  down) shift; down "$@" ;;
  *) die "usage: dovecot.sh up DIR PORT [EXTRA [CA]] | user DIR LOGIN PASSWORD | deliver DIR PORT RCPT FILE | down DIR" ;;
esac
