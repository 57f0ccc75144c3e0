#!/usr/bin/env bash
# After the test suite: dump the database and read every log; none may contain any of
# the secrets the tests handed to the server (emails, passwords, OAuth tokens, APNs
# tokens, sync keys, client certificates and their private keys, callback URLs' keys,
# and the sealed bytes of stored credentials that were erased: CredentialErasureTests),
# listed one per line in $ENS_VAR/test-secrets.txt; and the push
# simulators' records may not contain what was meant for private-mode devices only
# ($ENS_VAR/private-secrets.txt).
# Prints "secret scan: N passed, M failed" and exits non-zero on any leak.
set -euo pipefail
VAR=${ENS_VAR:?}
secrets=$VAR/test-secrets.txt
dump=$VAR/dump.sql
mysqldump --no-defaults -S "$VAR/run/mysqld.sock" -uroot --hex-blob=false --skip-extended-insert ens > "$dump"
# The same with binary columns in hex: secrets that are bytes (a callback URL's key, a
# client certificate's private key) are remembered as hex and must not be stored either.
mysqldump --no-defaults -S "$VAR/run/mysqld.sock" -uroot --hex-blob --skip-extended-insert ens > "$VAR/dump-hex.sql"
haystacks=("$dump" "$VAR/dump-hex.sql" "$VAR"/log/*.log)
# The rest of what ENS writes: the sender's spool (sealed segments; whatever is left in
# them) and what GET /metrics shows its scraper.
if [ -d "$VAR/spool" ]; then
  while IFS= read -r -d '' file; do haystacks+=("$file"); done < <(find "$VAR/spool" -type f -print0)
fi
if [ -n "${ENS_PORT:-}" ] && [ -s "$VAR/secrets/metrics.token" ]; then
  curl -fsk -H "Authorization: Bearer $(cat "$VAR/secrets/metrics.token")" "https://localhost:$ENS_PORT/metrics" > "$VAR/metrics-scrape.txt" \
    || echo "secret scan: GET /metrics failed; its output is not scanned"
  haystacks+=("$VAR/metrics-scrape.txt")
fi
if [ ! -s "$secrets" ]; then
  echo "secret scan: no secrets were recorded; the device tests did not run"; exit 1
fi
# One pass over everything with all secrets as fixed strings (case-insensitive: hex
# tokens may be stored in either case). In the C locale: -i then folds ASCII only (the
# secrets are hex, base64, addresses and test passwords; any other byte still matches
# exactly), and tens of thousands of patterns take a second instead of a hundred and more.
total=$(grep -c . "$secrets")
leaked=$(LC_ALL=C grep -rhoiaF -f <(grep . "$secrets") "${haystacks[@]}" | tr 'A-Z' 'a-z' | sort -u || true)
failed=0
if [ -n "$leaked" ]; then
  failed=$(printf '%s\n' "$leaked" | wc -l)
  while IFS= read -r secret; do
    echo "secret scan: LEAK of a test secret (${#secret} chars, starts '${secret:0:4}') in: $(LC_ALL=C grep -rFlia -- "$secret" "${haystacks[@]}" | tr '\n' ' ')"
  done <<< "$leaked"
fi
passed=$((total - failed))
# What only devices in a private mode were sent (their senders, subjects and sync keys:
# PrivateNotificationTests) must never have reached a push service: the APNs and FCM
# simulators' records of every push they accepted are searched for it too.
private=$VAR/private-secrets.txt
records=("$VAR"/sim/*-accepted.jsonl)
if [ ! -s "$private" ]; then
  echo "secret scan: no private-mode secrets were recorded; the privacy tests did not run"; failed=$((failed + 1))
else
  private_total=$(grep -c . "$private")
  exposed=$(grep -hoiF -f <(grep . "$private") "${records[@]}" | tr 'A-Z' 'a-z' | sort -u || true)
  if [ -n "$exposed" ]; then
    while IFS= read -r secret; do
      echo "secret scan: a private-mode secret (${#secret} chars, starts '${secret:0:4}') reached a push service: $(grep -Fli -- "$secret" "${records[@]}" | tr '\n' ' ')"
      failed=$((failed + 1))
    done <<< "$exposed"
  else
    passed=$((passed + private_total))
  fi
fi
# Private keys must be sealed: no PEM private key may appear anywhere.
if grep -q "PRIVATE KEY" "${haystacks[@]}"; then echo "secret scan: a private key in clear"; failed=$((failed + 1)); fi
echo "secret scan: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
