#!/usr/bin/env bash
# B5: `ens-cron reap` removing 1,000,000 stale device rows (target <= 60 s) with flat
# memory (its peak RSS is printed). The rows are made inside MariaDB with its sequence
# engine, under 1,000 user records.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
ROWS=${B5_ROWS:-1000000}
db() { mariadb --no-defaults -S "$ENS_VAR/run/mysqld.sock" -uroot ens "$@"; }
echo "B5: inserting $ROWS stale device rows"
db -e "
  INSERT INTO EnsSubscriptionInfo (userid, public_key_pem, private_key_sealed, registered, created_at)
    SELECT LPAD(HEX(seq), 64, 'b'), 'bench', X'00', 0, NOW(3) - INTERVAL 60 DAY FROM seq_1_to_1000;
  INSERT INTO Devices (subscription_row, token_hash, token_sealed, bundle_id, last_checkin_at)
    SELECT s.id, UNHEX(SHA2(CONCAT('b5-', q.seq), 256)), X'00', 'com.example.mail', NOW(3) - INTERVAL 60 DAY
    FROM seq_1_to_$ROWS q JOIN EnsSubscriptionInfo s ON s.userid = LPAD(HEX(1 + q.seq % 1000), 64, 'b');"
start=$(date +%s.%N)
out=$(/usr/bin/time -f '%M' "$ENS_BIN/ens-cron" reap --config "$ENS_VAR/ens.conf" 2>"$ENS_VAR/b5-time.txt")
elapsed=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
peak=$(tail -1 "$ENS_VAR/b5-time.txt")
printf 'B5 result: reaped %s in %s s (target <= 60 s); ens-cron peak RSS %s MB\n' \
  "$(echo "$out" | sed 's/^reap: //')" "$elapsed" "$(python3 -c "print(f'{$peak/1024:.1f}')")"
figure b5.seconds "$elapsed"
