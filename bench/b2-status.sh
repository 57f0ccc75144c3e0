#!/usr/bin/env bash
# B2: /getsubscriptionstatusv2 (one RSA-2048 private-key operation + database writes per
# request) through nginx, against `openssl speed -multi <cores> rsa2048` private-key
# operations/s measured in the same run. Target: ratio >= 0.70.
# Also prints the CPU each part of the stack spent per request (process CPU time over
# the run), which shows how much of the machine is left for the RSA operation.
# And ens-fcgi's CPU per check-in over one RSA operation (target: at most 1.25).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
USERS=${B2_USERS:-100}
SECONDS_PER_RUN=${BENCH_SECONDS:-10}
cores=$(nproc)
ENS_TOKEN=$(scripts/stack.sh token bench-b2)
export ENS_TOKEN
bodies=$ENS_VAR/b2-bodies.txt
fill_key_pool $((USERS + 10))
python3 bench/devices.py b2-setup "$USERS" "$bodies"

# The RSA reference and the check-ins alternate in slices of the run, and each slice's
# check-ins are held against the RSA speed measured just before them: this host's speed
# drifts by more than the few percent the ratio is read for, so one
# `openssl speed` for the whole run cannot settle it.
SLICES=${B2_SLICES:-5}
slice_seconds=$(( SECONDS_PER_RUN / SLICES > 2 ? SECONDS_PER_RUN / SLICES : 2 ))
mapfile -t fcgi < <(stack_pids fcgi); mapfile -t db < <(stack_pids mariadb); mapfile -t web < <(stack_pids nginx)
slices=$ENS_VAR/b2-slices.txt
: > "$slices"; : > "$ENS_VAR/b2-errors.txt"
for _ in $(seq "$SLICES"); do
  rsa=$(openssl speed -multi "$cores" -seconds "$slice_seconds" rsa2048 2>/dev/null | awk '/^rsa 2048 bits/ {print $(NF-1)}')
  before="$(cpu_ticks "${fcgi[@]}") $(cpu_ticks "${db[@]}") $(cpu_ticks "${web[@]}")"
  /usr/bin/time -o "$ENS_VAR/b2-wrk-cpu.txt" -f '%U %S' timeout $((slice_seconds + 30)) wrk -t2 -c32 -d"${slice_seconds}s" \
    -s bench/b2-status.lua "$BENCH_URL_BASE/getsubscriptionstatusv2" -- "$bodies" >"$ENS_VAR/b2-wrk.txt" 2>>"$ENS_VAR/b2-errors.txt"
  after="$(cpu_ticks "${fcgi[@]}") $(cpu_ticks "${db[@]}") $(cpu_ticks "${web[@]}")"
  # rsa ops/s, requests, seconds, ticks before (3), after (3), wrk user, wrk system
  echo "$rsa $(awk '/requests in/ {print $1}' "$ENS_VAR/b2-wrk.txt") $slice_seconds $before $after $(cat "$ENS_VAR/b2-wrk-cpu.txt")" >> "$slices"
done
errors=$(wc -l < "$ENS_VAR/b2-errors.txt")
python3 - "$slices" "$cores" "$(getconf CLK_TCK)" "$errors" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1]) if line.strip()]
cores, hz, errors = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
requests = seconds = 0
cpu = {"ens-fcgi": 0.0, "MariaDB": 0.0, "nginx": 0.0, "wrk": 0.0}
ratios, rsa_ms_each = [], []
for row in rows:
    rsa, n, secs = float(row[0]), int(row[1]), int(row[2])
    before, after = [int(x) for x in row[3:6]], [int(x) for x in row[6:9]]
    fcgi = (after[0] - before[0]) / hz
    requests += n; seconds += secs
    cpu["ens-fcgi"] += fcgi; cpu["MariaDB"] += (after[1] - before[1]) / hz
    cpu["nginx"] += (after[2] - before[2]) / hz; cpu["wrk"] += float(row[9]) + float(row[10])
    rsa_ms = cores * 1000 / rsa
    rsa_ms_each.append(rsa_ms)
    ratios.append(fcgi * 1000 / n / rsa_ms)
rsa_ms = statistics.median(rsa_ms_each)
rsa = cores * 1000 / rsa_ms
rps = requests / seconds
ms = lambda seconds: seconds * 1000 / requests
print(f"B2 result: /getsubscriptionstatusv2 {rps:.0f} req/s ({errors} unexpected answers); openssl speed -multi {cores} rsa2048 "
      f"{rsa:.0f} private ops/s (median of {len(rows)} slices); ratio {rps / rsa:.4f} (target >= 0.70)")
budget = cores * 1000 / (0.70 * rsa)
print("B2 CPU per request: " + ", ".join(f"{name} {ms(c):.3f} ms" for name, c in cpu.items())
      + f"; one RSA-2048 private-key operation {rsa_ms:.3f} ms of a core."
      + f" Ratio 0.70 leaves {budget:.3f} ms of CPU per request for everything, {budget - rsa_ms:.3f} ms besides the RSA operation;"
      + f" this run spent {sum(ms(c) for c in cpu.values()) - rsa_ms:.3f} ms besides it,"
      + f" {ms(cpu['MariaDB']) + ms(cpu['nginx']) + ms(cpu['wrk']):.3f} ms of that outside ENS.")
print(f"B2 ens-fcgi per check-in over one RSA operation: {statistics.median(ratios):.4f} (median of "
      + " ".join(f"{r:.3f}" for r in ratios) + "; each slice against the RSA speed measured just before it; target <= 1.25)")
PY
