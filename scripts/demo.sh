#!/usr/bin/env bash
# The whole product in one minute, against the stack `make run` started: a mailbox in
# the Exchange simulator, a device registering for it (key, sealed credentials,
# Autodiscover, push subscription), new mail, and the push the APNs simulator got;
# then an Android phone of the same user joins with its FCM token, and the next mail
# reaches both (the FCM simulator's record); then an Exchange Online mailbox beside it,
# through Microsoft Graph (the Graph simulator: a delegated token proves the mailbox,
# ENS subscribes with its own application, new mail arrives as a change notification);
# last a Dovecot mailbox (a private Dovecot registered with `ens-cron dovecot add`, an
# IMAP password proven, mail over LMTP pushed by Dovecot's own plugin).
# The devices are `ens-client` (clients/ENSKit), built on ENSKit as an app would be: it
# seals, keeps each device's keys under var/demo-devices, and opens what it receives.
#
#   scripts/demo.sh            (ENS_VAR and ENS_PORT as for make run)
set -euo pipefail
cd "$(dirname "$0")/.."
# clients/ENSKit links ENSKit from the root manifest, which leaves it out for the
# server's builds (ENS_SERVER_ONLY, set by make).
unset ENS_SERVER_ONLY
VAR=${ENS_VAR:-$PWD/var}
PORT=${ENS_PORT:-8443}
BASE=https://localhost:$PORT
SIM=http://127.0.0.1:$((PORT + 4))
CA=$VAR/tls/server.crt
[ -S "$VAR/run/apns.sock" ] || { echo "demo: start the stack first (make run)" >&2; exit 2; }

field() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
step() { printf '\n== %s\n' "$*"; }
# show_push TOKEN FIELD...: waits up to 10 s for the APNs simulator's record of a push to
# TOKEN, then prints the fields named of the newest one.
show_push() {
  local token=$1; shift
  for _ in $(seq 50); do
    grep -q "$token" "$VAR/sim/apns-accepted.jsonl" 2>/dev/null && break
    sleep 0.2
  done
  grep "$token" "$VAR/sim/apns-accepted.jsonl" | tail -1 \
    | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print(json.dumps({k: r[k] for k in sys.argv[1:]}, indent=2, ensure_ascii=False))' "$@"
}

# ens-client, built on ENSKit (debug build: the first one compiles swift-crypto, a few minutes).
echo "building ens-client (clients/ENSKit)"
(cd clients/ENSKit && swift build --product ens-client >/dev/null) || { echo "demo: ens-client did not build" >&2; exit 1; }
rm -rf "$VAR/demo-devices"
# device NAME COMMAND ...: ens-client as the device NAME (its own state directory).
device() {
  local name=$1; shift
  local command=$1; shift
  clients/ENSKit/.build/debug/ens-client "$command" --base-url "$BASE" --api-token "$token" --ca-file "$CA" \
    --state "$VAR/demo-devices/$name" "$@"
}

token=$(scripts/stack.sh token "demo-$(date +%s)")
email="demo-$(openssl rand -hex 3)@example.test"
password=$(openssl rand -hex 8)
device=$(openssl rand -hex 32)

step "Exchange simulator: Autodiscover (POX) for example.test, mailbox $email"
curl -s -XPOST "$SIM/domains" -d '{"domain": "example.test", "mode": "pox-root"}'; echo
curl -s -XPOST "$SIM/mailboxes" -d "{\"email\": \"$email\", \"userName\": \"$email\", \"password\": \"$password\", \"unread\": 2}"; echo

step "ens-client public-key: POST /getpublickey, the user's RSA key (ENSKit pins it)"
device iphone public-key --email "$email"

step "ens-client register: POST /registerdevicev2, the credentials sealed by ENSKit under that key"
device iphone register --badge --email "$email" --apns-token "$device" --password "$password" --exchange-version 3 --sound default

step "New mail in the mailbox: the simulator calls ENS back like Exchange"
curl -s -XPOST "$SIM/newmail" -d "{\"email\": \"$email\", \"subject\": \"Lunch on Friday?\", \"fromName\": \"Ann Example\", \"wait\": true}"; echo

step "What the APNs simulator received for the device"
show_push "$device" topic push_type priority collapse_id auth payload
echo "The iPhone reads it (ens-client open-push, ENSPush):"
grep "$device" "$VAR/sim/apns-accepted.jsonl" | tail -1 | python3 -c 'import json,sys; print(json.dumps(json.loads(sys.stdin.read())["payload"]))' \
  | device iphone open-push

android="dEmO$(openssl rand -hex 8):APA91b$(openssl rand -hex 60)"
step "ens-client register: the user's Android phone joins with its FCM token, in the encrypted mode (a P-256 key ENSKit made)"
device android register --email "$email" --fcm-token "$android" --password "$password" --privacy encrypted --bundle-id com.example.android

step "More new mail: it reaches the iPhone through APNs and the Android phone through FCM"
curl -s -XPOST "$SIM/newmail" -d "{\"email\": \"$email\", \"subject\": \"Minutes attached\", \"fromName\": \"Ann Example\", \"wait\": true}"; echo
for _ in $(seq 50); do
  grep -q "$android" "$VAR/sim/fcm-accepted.jsonl" 2>/dev/null && break
  sleep 0.2
done
echo "FCM simulator, for the Android phone (no sender or subject in clear: enc is sealed to the phone's key):"
grep "$android" "$VAR/sim/fcm-accepted.jsonl" | tail -1 \
  | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); m=r["message"]; print(json.dumps({k: m[k] for k in ("android", "notification", "data") if k in m}, indent=2))'
echo "The Android phone opens it with its own key (ens-client open-push):"
grep "$android" "$VAR/sim/fcm-accepted.jsonl" | tail -1 | device android open-push --bundle-id com.example.android

GRAPH=http://127.0.0.1:$((PORT + 9))
cloud="cloud-$(openssl rand -hex 3)@contoso.test"
phone=$(openssl rand -hex 32)
step "Graph simulator: an Exchange Online user $cloud in tenant contoso.test, signed in on a phone"
curl -s -XPOST "$GRAPH/users" -d "{\"tenant\": \"6d1f8f38-0c55-4d7e-9d1e-5c0a3a7e0001\", \"mail\": \"$cloud\", \"displayName\": \"Cloud User\"}"; echo
access=$(curl -s -XPOST "$GRAPH/user-token" -d "{\"mail\": \"$cloud\"}" | field access_token)
echo "(a delegated access token of ${#access} characters, as MSAL hands the app)"

step "ens-client register with a Graph token (graphAccessToken): ENS reads /me once, then subscribes as itself"
device cloud register --email "$cloud" --apns-token "$phone" --graph-token "$access"
echo "Graph simulator's subscription (validated, immutable ids, created by ENS's application):"
curl -s "$GRAPH/subscriptions" | python3 -c 'import json,sys; m=sys.argv[1]; print(json.dumps([s for s in json.load(sys.stdin) if s["mail"] == m], indent=2))' "$cloud"

step "New mail in the Exchange Online mailbox: Graph posts a change notification, ENS answers 202"
curl -s -XPOST "$GRAPH/newmail" -d "{\"mail\": \"$cloud\", \"subject\": \"Quarterly numbers\", \"fromName\": \"Bea Finance\", \"wait\": true}"; echo
show_push "$phone" topic push_type collapse_id payload

# A Dovecot mailbox, as an IMAP hosting provider runs one: a private Dovecot (from
# Debian's packages, run as nobody under $VAR/demo-dovecot) registered with ENS.
DOVECOT=$VAR/demo-dovecot
DOVECOT_PORT=$((PORT + 30))
hosted="hosted-$(openssl rand -hex 3)@hosting.test"
hosted_password=$(openssl rand -hex 8)
reader=$(openssl rand -hex 32)
ENS_CRON=${ENS_BIN:-$PWD/.build/debug}/ens-cron
step "Dovecot: a private server on 127.0.0.1:$DOVECOT_PORT with the mailbox $hosted"
scripts/dovecot.sh down "$DOVECOT"
rm -rf "$DOVECOT"
scripts/dovecot.sh up "$DOVECOT" "$DOVECOT_PORT"
scripts/dovecot.sh user "$DOVECOT" "$hosted" "$hosted_password"
step "ens-cron dovecot add: the hosting admin's server registered with ENS; the configuration it prints"
"$ENS_CRON" dovecot add demo --config "$VAR/ens.conf" --imap-url "imaps://127.0.0.1:$DOVECOT_PORT/" --domains hosting.test \
  --ca-file "$DOVECOT/ca.crt" > "$VAR/demo-dovecot.conf"
sed 's/\(ens_push_auth = Basic \).*/\1<the server'"'"'s credential>/' "$VAR/demo-dovecot.conf"
# Installed as printed, with the script from this tree, and ENS's address for its name
# (the Lua driver's HTTP client does not resolve names from a delivery; docs/dovecot.md).
sed -e "s|/usr/share/ens/dovecot/|$PWD/dovecot/|" -e "s|https://localhost:|https://127.0.0.1:|" "$VAR/demo-dovecot.conf" > "$VAR/demo-dovecot.installed"
scripts/dovecot.sh down "$DOVECOT"
scripts/dovecot.sh up "$DOVECOT" "$DOVECOT_PORT" "$VAR/demo-dovecot.installed" "$CA"

step "ens-client register with the IMAP password: ENS logs in, writes the opt-in into METADATA, forgets the password"
device hosted register --email "$hosted" --apns-token "$reader" --password "$hosted_password" --imap-url "imaps://127.0.0.1:$DOVECOT_PORT/"
echo "The account's opt-in (server-level METADATA, read with doveadm): $(doveadm -c "$DOVECOT/dovecot.conf" mailbox metadata get -u "$hosted" -s '' /private/vendor/vendor.ens/push-token)"

step "Mail delivered over LMTP: Dovecot's push plugin tells ENS, the subject RFC 2047-encoded"
printf 'From: =?UTF-8?Q?J=C3=BCrgen_M=C3=BCller?= <j@example.net>\r\nSubject: =?UTF-8?B?R3LDvMOfZSBhdXMgS8O2bG4=?=\r\n\r\nHallo.\r\n' > "$VAR/demo-message.eml"
scripts/dovecot.sh deliver "$DOVECOT" "$DOVECOT_PORT" "$hosted" "$VAR/demo-message.eml"
show_push "$reader" topic collapse_id payload
scripts/dovecot.sh down "$DOVECOT"
