#!/usr/bin/env bash
# Capacity as a ratio to its floor, both measured in one run: bench/capacity.sh (the
# whole stack at the model's peak) and bench/capacity-floor.sh (the floor at the same
# pace), BENCH_ROUNDS rounds (default 2) with the order swapped every round, so a change
# in this host's speed during the run falls on both. The last round's capacity run also
# measures each main class alone (capacity.py split), printed beside its floor at that
# pace. Prints every round's ratio, their
# median, and the figures `make bench-check` holds to bench/thresholds/.
#
# Run by bench/run.sh (BENCHES=capacity-ratio) on the bench stack. BENCH_SECONDS is
# capacity.sh's window (default 60); the floor's measurements take FLOOR_SECONDS each
# (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
ROUNDS=${BENCH_ROUNDS:-2}
out=$ENS_VAR/capacity-ratio
mkdir -p "$out"

# capacity FRESH ROUND SPLIT
capacity() { CAP_FRESH=$1 CAP_SPLIT=$3 bench/capacity.sh >"$out/capacity.$2" 2>&1 || { cat "$out/capacity.$2" >&2; exit 1; }; }
floor() { BENCH_SECONDS=${FLOOR_SECONDS:-5} bench/capacity-floor.sh >"$out/floor.$1" 2>&1 || { cat "$out/floor.$1" >&2; exit 1; }; }
# users per core from a capacity or a floor output (the floor's at the bench's pace).
users() { grep -E "$2" "$1" | grep -oE '[0-9][0-9,]* users per core' | tail -1 | tr -d , | awk '{print $1}'; }

ratios=() worst=0
for ((round = 1; round <= ROUNDS; round++)); do
  fresh=$([ "$round" = 1 ] && echo 1 || echo 0)
  split=$([ "$round" = "$ROUNDS" ] && echo 1 || echo 0)
  if ((round % 2)); then capacity "$fresh" "$round" "$split"; floor "$round"; else floor "$round"; capacity "$fresh" "$round" "$split"; fi
  ens=$(users "$out/capacity.$round" '^Capacity result')
  bottom=$(users "$out/floor.$round" "^Capacity floor at the capacity bench's pace")
  p99=$(grep -oE 'worst class p99 [0-9.]+' "$out/capacity.$round" | awk '{print $4}')
  ratio=$(python3 -c "print(f'{$ens / $bottom:.3f}')")
  ratios+=("$ratio")
  worst=$(python3 -c "print(max($worst, $p99))")
  printf 'Capacity round %d (%s first): ENS %s users per core, its floor at the same pace %s: ratio %s; worst class p99 %s ms\n' \
    "$round" "$( ((round % 2)) && echo ENS || echo floor)" "$ens" "$bottom" "$ratio" "$p99"
done
printf 'Capacity over its floor: %s (median of %s; target 0.6)\n' "$(median "${ratios[@]}")" "${ratios[*]}"
figure capacity.over_floor "$(median "${ratios[@]}")"
figure capacity.worst_p99_ms "$worst"

# Each class alone, beside its floor at the pace (the last round's).
grep '^Capacity split' "$out/capacity.$ROUNDS" | tee "$out/split"
last=$out/floor.$ROUNDS
# over_floor FIGURE TEXT SPENT FLOOR: prints "TEXT: SPENT/FLOOR x the floor" and records
# the ratio as FIGURE; a figure missing from the split or the floor ends the run.
over_floor() {
  [ -n "$3" ] && [ -n "$4" ] || { echo "capacity-ratio: no figure for $1 in $out/split or no floor for it in $last" >&2; exit 1; }
  local ratio
  ratio=$(python3 -c "print(f'{$3 / $4:.2f}')")
  printf '%s: %s x the floor\n' "$2" "$ratio"
  figure "$1" "$ratio"
}
for class in ews-mail:new-mail ews-heartbeat:heartbeat checkin:check-in; do
  kind=${class%%:*} name=${class#*:}
  stack=$(grep "^Capacity split $kind:" "$out/split" | grep -oE 'stack [0-9.]+' | awk '{print $2}')
  bottom=$(grep "^Capacity floor at the capacity bench's pace" "$last" | grep -oE "$name( callback)? [0-9.]+ ms" | grep -oE '[0-9.]+ ms' | awk '{print $1}')
  over_floor "capacity.${kind//-/_}_over_floor" "Capacity class $kind: stack $stack ms of CPU, its floor at the pace $bottom ms" "$stack" "$bottom"
done

# The sender's share of a new-mail callback beside its floor at the pace: the callback's
# pushes and one durable append, each done alone as paced arrivals come (at most 2x).
sender=$(grep '^Capacity split ews-mail:' "$out/split" | grep -oE 'ens-sender [0-9.]+' | awk '{print $2}')
bottom=$(grep "^Capacity floor at the capacity bench's pace" "$last" | grep -oE 'a sync\) [0-9.]+ ms' | grep -oE '[0-9.]+')
over_floor capacity.sender_over_floor \
  "Capacity sender: ens-sender $sender ms of CPU per new-mail callback, its pushes and durable append at the pace $bottom ms" "$sender" "$bottom"

# Where a new-mail callback's cost over its floor lies, process by process, each against
# its own part of the floor at the pace: nginx's proxying, MariaDB's least work, the lookup
# (all ens-fcgi's floor has: parsing, the database client, sealing and the hand-off are
# not in it), and the sender's pushes and durable append. What 0.6 of the floor would
# leave for all of them together is printed beside it.
python3 - "$out/split" "$last" <<'PY'
import re, sys
split = next(l for l in open(sys.argv[1]) if l.startswith("Capacity split ews-mail:"))
paced = next(l for l in open(sys.argv[2]) if l.startswith("Capacity floor at the capacity bench's pace"))
def num(pattern, text):
    found = re.search(pattern, text)
    if not found:
        sys.exit(f"capacity-ratio: no match for {pattern!r} in {text.strip()!r}")
    return float(found.group(1))
spent = {p: num(rf"{p} ([0-9.]+)", split) for p in ("ens-fcgi", "nginx", "mariadb", "ens-sender")}
part = {"ens-fcgi": num(r"lookup ([0-9.]+)", paced), "nginx": num(r"nginx ([0-9.]+) ms per request", paced),
        "mariadb": num(r"MariaDB ([0-9.]+) ms per callback", paced), "ens-sender": num(r"a sync\) ([0-9.]+) ms", paced)}
floor = num(r"new-mail callback ([0-9.]+) ms", paced)
over = {p: spent[p] - part[p] for p in spent}
print("Capacity new mail over its floor, by process (ms of CPU per callback, spent - its part of the floor): "
      + ", ".join(f"{p} {spent[p]:.3f} - {part[p]:.3f} = {over[p]:+.3f}" for p in sorted(over, key=over.get, reverse=True))
      + f"; {sum(over.values()):+.3f} in all, where 0.6 of the floor leaves {floor / 0.6 - floor:+.3f}")
PY
