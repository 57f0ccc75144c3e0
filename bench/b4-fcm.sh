#!/usr/bin/env bash
# B4-FCM: pushes/s from the Unix socket through ens-sender (spool, OAuth access token
# fetched once, HTTP/2 multiplexing) to the FCM simulator, against h2load sending the
# same messages:send requests to the same simulator in the same run (target >= 0.80 of
# h2load's rate, as for APNs).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
PUSHES=${B4_PUSHES:-20000}
FCM_PORT=$((ENS_PORT + 6))
CONTROL="http://127.0.0.1:$((ENS_PORT + 7))"
sock=$ENS_VAR/run/apns.sock

simulator=$(stack_pids fcm-sim | head -1)
sender=$(stack_pids sender | head -1)
curl -s -X POST -d '{}' "$CONTROL/reset" >/dev/null
sim_before=$(cpu_ticks "$simulator"); sender_before=$(cpu_ticks "$sender")
start=$(date +%s%N)
read -r ok _ < <(python3 bench/pushes.py submit "$sock" "$PUSHES" 16 fcm)
stats=$(curl -s --max-time 90 "$CONTROL/wait?accepted=$PUSHES&timeout=60")
elapsed=$(( $(date +%s%N) - start ))
done_count=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["accepted"])' "$stats")
tokens=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("tokens_issued", "?"))' "$(curl -s "$CONTROL/stats")")
ens_rate=$(python3 -c "print(f'{$done_count / ($elapsed / 1e9):.0f}')")
sim_ens=$(( $(cpu_ticks "$simulator") - sim_before )); sender_cpu=$(( $(cpu_ticks "$sender") - sender_before ))

# h2load: one access token from the simulator's token endpoint (as ens-sender holds one),
# then the body ens-sender sends for the same payload, 2 connections x 100 streams. h2load
# repeats one body, so its requests share one registration token and collapse key.
assertion=$(python3 bench/pushes.py fcm-assertion "$ENS_VAR/secrets/fcm-service-account.json")
access=$(curl -s --http2 --cacert "$ENS_VAR/tls/server.crt" --data-urlencode "grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer" \
  --data-urlencode "assertion=$assertion" "https://localhost:$FCM_PORT/token" | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
python3 bench/pushes.py fcm-message > "$ENS_VAR/b4-fcm-message.json"
sim_before=$(cpu_ticks "$simulator")
h2_rate=$(timeout 120 h2load -n "$PUSHES" -c 2 -m 100 -d "$ENS_VAR/b4-fcm-message.json" -H "authorization: Bearer $access" \
  -H "content-type: application/json" "https://localhost:$FCM_PORT/v1/projects/ens-dev/messages:send" 2>/dev/null \
  | awk '/^finished in/ {gsub(",", "", $4); print $4}')
sim_h2=$(( $(cpu_ticks "$simulator") - sim_before ))
printf 'B4-FCM result: ens-sender %s messages/s to FCM (%s of %s accepted by the simulator, %s acknowledged; %s access tokens fetched); h2load %s req/s with the same requests; ratio %s (target >= 0.80)\n' \
  "$ens_rate" "$done_count" "$PUSHES" "$ok" "$tokens" "$h2_rate" "$(ratio "$ens_rate" "$h2_rate")"
figure b4fcm.fcm_over_h2load "$(ratio "$ens_rate" "$h2_rate")"
python3 -c "import sys; hz, n = $(getconf CLK_TCK), $PUSHES
print(f'B4-FCM CPU per message: simulator {$sim_ens / hz * 1000 / n:.3f} ms for ens-sender requests, {$sim_h2 / hz * 1000 / n:.3f} ms for h2load requests; ens-sender {$sender_cpu / hz * 1000 / n:.3f} ms')"
