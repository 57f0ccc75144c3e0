#!/usr/bin/env bash
# B2: /getsubscriptionstatusv2 (one RSA-2048 private-key operation + database writes per
# request) through nginx, against `openssl speed -multi <cores> rsa2048` private-key
# operations/s measured in the same run. Target: ratio >= 0.70.
# Also prints the CPU each part of the stack spent per request (process CPU time over
# the run), which shows how much of the machine is left for the RSA operation.
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

rsa=$(openssl speed -multi "$cores" -seconds "$SECONDS_PER_RUN" rsa2048 2>/dev/null | awk '/^rsa 2048 bits/ {print $(NF-1)}')
mapfile -t fcgi < <(stack_pids fcgi); mapfile -t db < <(stack_pids mariadb); mapfile -t web < <(stack_pids nginx)
before=("$(cpu_ticks "${fcgi[@]}")" "$(cpu_ticks "${db[@]}")" "$(cpu_ticks "${web[@]}")")
/usr/bin/time -o "$ENS_VAR/b2-wrk-cpu.txt" -f '%U %S' timeout $((SECONDS_PER_RUN + 30)) wrk -t2 -c32 -d"${SECONDS_PER_RUN}s" \
  -s bench/b2-status.lua "$BENCH_URL_BASE/getsubscriptionstatusv2" -- "$bodies" >"$ENS_VAR/b2-wrk.txt" 2>"$ENS_VAR/b2-errors.txt"
after=("$(cpu_ticks "${fcgi[@]}")" "$(cpu_ticks "${db[@]}")" "$(cpu_ticks "${web[@]}")")
rps=$(awk '/Requests\/sec/ {print $2}' "$ENS_VAR/b2-wrk.txt")
requests=$(awk '/requests in/ {print $1}' "$ENS_VAR/b2-wrk.txt")
errors=$(wc -l < "$ENS_VAR/b2-errors.txt")
printf 'B2 result: /getsubscriptionstatusv2 %.0f req/s (%d unexpected answers); openssl speed -multi %d rsa2048 %.0f private ops/s; ratio %s (target >= 0.70)\n' \
  "$rps" "$errors" "$cores" "$rsa" "$(ratio "$rps" "$rsa")"
read -r wrk_user wrk_system < "$ENS_VAR/b2-wrk-cpu.txt"
python3 - "$requests" "$cores" "$rsa" "$(getconf CLK_TCK)" "${before[@]}" "${after[@]}" "$wrk_user" "$wrk_system" <<'PY'
import sys
requests, cores, rsa, hz = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
before, after = [int(x) for x in sys.argv[5:8]], [int(x) for x in sys.argv[8:11]]
wrk = float(sys.argv[11]) + float(sys.argv[12])
ms = lambda seconds: seconds * 1000 / requests
parts = {"ens-fcgi": (after[0] - before[0]) / hz, "MariaDB": (after[1] - before[1]) / hz, "nginx": (after[2] - before[2]) / hz, "wrk": wrk}
rsa_ms = cores * 1000 / rsa
budget = cores * 1000 / (0.70 * rsa)
print("B2 CPU per request: " + ", ".join(f"{name} {ms(cpu):.3f} ms" for name, cpu in parts.items())
      + f"; one RSA-2048 private-key operation {rsa_ms:.3f} ms of a core."
      + f" Ratio 0.70 leaves {budget:.3f} ms of CPU per request for everything, {budget - rsa_ms:.3f} ms besides the RSA operation;"
      + f" this run spent {sum(ms(c) for c in parts.values()) - rsa_ms:.3f} ms besides it,"
      + f" {ms(parts['MariaDB']) + ms(parts['nginx']) + ms(parts['wrk']):.3f} ms of that outside ENS.")
PY
