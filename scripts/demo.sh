#!/usr/bin/env bash
# The whole product in one minute, against the stack `make run` started: a mailbox in
# the Exchange simulator, a device registering for it (key, sealed credentials,
# Autodiscover, push subscription), new mail, and the push the APNs simulator got;
# then an Android phone of the same user joins with its FCM token, and the next mail
# reaches both (the FCM simulator's record); then an Exchange Online mailbox beside it,
# through Microsoft Graph (the Graph simulator: a delegated token proves the mailbox,
# ENS subscribes with its own application, new mail arrives as a change notification).
#
#   scripts/demo.sh            (ENS_VAR and ENS_PORT as for make run)
set -euo pipefail
cd "$(dirname "$0")/.."
VAR=${ENS_VAR:-$PWD/var}
PORT=${ENS_PORT:-8443}
BASE=https://localhost:$PORT
SIM=http://127.0.0.1:$((PORT + 4))
CA=$VAR/tls/server.crt
[ -S "$VAR/run/apns.sock" ] || { echo "demo: start the stack first (make run)" >&2; exit 2; }

field() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
step() { printf '\n== %s\n' "$*"; }

token=$(scripts/stack.sh token "demo-$(date +%s)")
email="demo-$(openssl rand -hex 3)@example.test"
password=$(openssl rand -hex 8)
device=$(openssl rand -hex 32)

step "Exchange simulator: Autodiscover (POX) for example.test, mailbox $email"
curl -s -XPOST "$SIM/domains" -d '{"domain": "example.test", "mode": "pox-root"}'; echo
curl -s -XPOST "$SIM/mailboxes" -d "{\"email\": \"$email\", \"userName\": \"$email\", \"password\": \"$password\", \"unread\": 2}"; echo

step "POST /getpublickey: the user's RSA key"
answer=$(curl -s --cacert "$CA" -H "ApiToken: $token" -d "email=$email" "$BASE/getpublickey")
userid=$(field userid <<<"$answer")
field pubKey <<<"$answer" > "$VAR/demo-key.pem"
echo "userid $userid, $(field responseCode <<<"$answer")"

step "POST /registerdevicev2: credentials sealed the way a device seals them"
creds=$(printf '["{\\"apnsToken\\": \\"%s\\", \\"userName\\": \\"%s\\", \\"password\\": \\"%s\\"}"]' "$device" "$email" "$password" \
  | python3 Tests/tools/seal.py "$VAR/demo-key.pem" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0])')
curl -s --cacert "$CA" -H "ApiToken: $token" -H "badge: 1" --data-urlencode "userid=$userid" --data-urlencode "email=$email" \
  --data-urlencode "creds=$creds" -d bundleid=com.example.mail -d exchVersion=3 -d defaultSound=default "$BASE/registerdevicev2"; echo

step "New mail in the mailbox: the simulator calls ENS back like Exchange"
curl -s -XPOST "$SIM/newmail" -d "{\"email\": \"$email\", \"subject\": \"Lunch on Friday?\", \"fromName\": \"Ann Example\", \"wait\": true}"; echo

step "What the APNs simulator received for the device"
for _ in $(seq 50); do
  grep -q "$device" "$VAR/sim/apns-accepted.jsonl" 2>/dev/null && break
  sleep 0.2
done
grep "$device" "$VAR/sim/apns-accepted.jsonl" | tail -1 \
  | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print(json.dumps({k: r[k] for k in ("topic", "push_type", "priority", "collapse_id", "auth", "payload")}, indent=2))'

android="dEmO$(openssl rand -hex 8):APA91b$(openssl rand -hex 60)"
step "POST /registerdevicev2: the user's Android phone joins with its FCM token (fcmToken)"
creds=$(printf '["{\\"fcmToken\\": \\"%s\\", \\"userName\\": \\"%s\\", \\"password\\": \\"%s\\"}"]' "$android" "$email" "$password" \
  | python3 Tests/tools/seal.py "$VAR/demo-key.pem" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0])')
curl -s --cacert "$CA" -H "ApiToken: $token" --data-urlencode "userid=$userid" --data-urlencode "email=$email" \
  --data-urlencode "creds=$creds" -d bundleid=com.example.android "$BASE/registerdevicev2"; echo

step "More new mail: it reaches the iPhone through APNs and the Android phone through FCM"
curl -s -XPOST "$SIM/newmail" -d "{\"email\": \"$email\", \"subject\": \"Minutes attached\", \"fromName\": \"Ann Example\", \"wait\": true}"; echo
for _ in $(seq 50); do
  grep -q "$android" "$VAR/sim/fcm-accepted.jsonl" 2>/dev/null && break
  sleep 0.2
done
echo "FCM simulator, for the Android phone:"
grep "$android" "$VAR/sim/fcm-accepted.jsonl" | tail -1 \
  | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); m=r["message"]; print(json.dumps({k: m[k] for k in ("android", "notification", "data") if k in m}, indent=2))'

GRAPH=http://127.0.0.1:$((PORT + 9))
cloud="cloud-$(openssl rand -hex 3)@contoso.test"
phone=$(openssl rand -hex 32)
step "Graph simulator: an Exchange Online user $cloud in tenant contoso.test, signed in on a phone"
curl -s -XPOST "$GRAPH/users" -d "{\"tenant\": \"6d1f8f38-0c55-4d7e-9d1e-5c0a3a7e0001\", \"mail\": \"$cloud\", \"displayName\": \"Cloud User\"}"; echo
access=$(curl -s -XPOST "$GRAPH/user-token" -d "{\"mail\": \"$cloud\"}" | field access_token)
echo "(a delegated access token of ${#access} characters, as MSAL hands the app)"

step "POST /getpublickey and /registerdevicev2 with graphAccessToken: ENS reads /me once, then subscribes as itself"
answer=$(curl -s --cacert "$CA" -H "ApiToken: $token" -d "email=$cloud" "$BASE/getpublickey")
cloud_userid=$(field userid <<<"$answer")
field pubKey <<<"$answer" > "$VAR/demo-key.pem"
creds=$(printf '["{\\"apnsToken\\": \\"%s\\", \\"graphAccessToken\\": \\"%s\\"}"]' "$phone" "$access" \
  | python3 Tests/tools/seal.py "$VAR/demo-key.pem" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0])')
curl -s --cacert "$CA" -H "ApiToken: $token" --data-urlencode "userid=$cloud_userid" --data-urlencode "email=$cloud" \
  --data-urlencode "creds=$creds" -d bundleid=com.example.mail "$BASE/registerdevicev2"; echo
echo "Graph simulator's subscription (validated, immutable ids, created by ENS's application):"
curl -s "$GRAPH/subscriptions" | python3 -c 'import json,sys; m=sys.argv[1]; print(json.dumps([s for s in json.load(sys.stdin) if s["mail"] == m], indent=2))' "$cloud"

step "New mail in the Exchange Online mailbox: Graph posts a change notification, ENS answers 202"
curl -s -XPOST "$GRAPH/newmail" -d "{\"mail\": \"$cloud\", \"subject\": \"Quarterly numbers\", \"fromName\": \"Bea Finance\", \"wait\": true}"; echo
for _ in $(seq 50); do
  grep -q "$phone" "$VAR/sim/apns-accepted.jsonl" 2>/dev/null && break
  sleep 0.2
done
grep "$phone" "$VAR/sim/apns-accepted.jsonl" | tail -1 \
  | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print(json.dumps({k: r[k] for k in ("topic", "push_type", "collapse_id", "payload")}, indent=2))'
rm -f "$VAR/demo-key.pem"
