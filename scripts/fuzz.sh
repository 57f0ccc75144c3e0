#!/usr/bin/env bash
# make fuzz: builds the libFuzzer targets in Fuzz/ and runs each for a bounded time,
# starting from the committed seeds in Fuzz/corpus/<target>/.
#
#   FUZZ_SECONDS=N     run every target for N seconds; unset, each gets its share of
#                      about 9.5 minutes (fast parsers longer, see BUDGET below)
#   FUZZ_TARGETS="a b" run only these targets (default: all of them)
#   FUZZ_SANITIZE=none build without AddressSanitizer (about twice the executions);
#                      default: address
#   FUZZ_BUILD_ONLY=1  build the targets and stop (make test does, so they cannot rot)
#
# What fuzzing finds goes to var/fuzz/corpus/<target>/ (kept between runs, so the
# committed seeds stay small); crashing inputs to var/fuzz/artifacts/, each target's
# log to var/fuzz/logs/. Prints executions, exec/s and crashes per target and in total;
# exits 1 when any target crashed, hung, ran out of memory or leaked.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"

# Seconds per target when FUZZ_SECONDS is unset (570 s in all). Exchange's XML goes
# through libxml2 and sealed parameters through one RSA private-key operation per
# block, so those run slower; the pure-Swift parsers get the time that buys executions.
declare -A BUDGET=(
  [json]=90 [callback]=90 [frames]=90 [form]=60 [base64]=60
  [soap]=60 [autodiscover]=60 [config]=30 [sealed]=30 [dovecot]=30
)
ORDER=(json callback frames form base64 soap autodiscover config sealed dovecot)
# Extra libFuzzer flags per target: dictionaries (Fuzz/dict/).
declare -A FLAGS=(
  [soap]="-dict=Fuzz/dict/xml.dict"
  [autodiscover]="-dict=Fuzz/dict/xml.dict"
  [config]="-dict=Fuzz/dict/config.dict" [frames]="-dict=Fuzz/dict/frames.dict"
  [sealed]="-max_len=1400"
)

sanitize=${FUZZ_SANITIZE:-address}
case "$sanitize" in
  address) sanitizers="fuzzer,address" ;;
  none) sanitizers="fuzzer" ;;
  *) echo "fuzz: FUZZ_SANITIZE must be address or none" >&2; exit 2 ;;
esac
read -r -a targets <<< "${FUZZ_TARGETS:-${ORDER[*]}}"
for target in "${targets[@]}"; do
  [ -n "${BUDGET[$target]:-}" ] || { echo "fuzz: unknown target '$target' (known: ${ORDER[*]})" >&2; exit 2; }
done

# The fuzz targets live in the main manifest behind ENS_FUZZ=1, built into a scratch
# directory of their own so the instrumented objects never mix with the normal build.
scratch="Fuzz/.build/$sanitize"
echo "fuzz: building the fuzz targets (ENS_FUZZ=1, -sanitize=$sanitizers, release) in $scratch"
for target in "${targets[@]}"; do
  ENS_FUZZ=1 swift build --scratch-path "$scratch" -c release --product "fuzz-$target" \
    -Xswiftc "-sanitize=$sanitizers" -Xswiftc -parse-as-library -Xswiftc -enable-testing
done
bin="$scratch/release"
if [ "${FUZZ_BUILD_ONLY:-0}" = 1 ]; then
  echo "fuzz: built ${#targets[@]} targets in $bin"
  exit 0
fi

out=var/fuzz
mkdir -p "$out/artifacts" "$out/logs"
export SWIFT_BACKTRACE=enable=no  # let libFuzzer's handler report traps and keep the input

printf '%-13s %6s %12s %9s %7s %8s  %s\n' target seconds executions exec/s corpus crashes status
total_runs=0 total_seconds=0 total_crashes=0 failed=0
started=$(date +%s)
for target in "${targets[@]}"; do
  seconds=${FUZZ_SECONDS:-${BUDGET[$target]}}
  corpus="$out/corpus/$target"
  log="$out/logs/$target.log"
  mkdir -p "$corpus"
  before=$(find "$out/artifacts" -name "$target-*" | wc -l)
  # New inputs go to the first directory (var/fuzz); the committed seeds are read only.
  read -r -a extra <<< "${FLAGS[$target]:-}"
  status=ok
  "$bin/fuzz-$target" "$corpus" "Fuzz/corpus/$target" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$out/artifacts/$target-" "${extra[@]}" >"$log" 2>&1 || status="FAILED (exit $?)"
  crashes=$(( $(find "$out/artifacts" -name "$target-*" | wc -l) - before ))
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  units=$(find "$corpus" -type f | wc -l)
  if [ "$status" != ok ] || [ "$crashes" -gt 0 ]; then
    failed=1
    [ "$status" != ok ] || status=FAILED
    status="$status, see $log"
  fi
  printf '%-13s %6s %12s %9s %7s %8s  %s\n' "$target" "$seconds" "${runs:-?}" "${rate:-?}" "$units" "$crashes" "$status"
  total_runs=$(( total_runs + ${runs:-0} ))
  total_seconds=$(( total_seconds + seconds ))
  total_crashes=$(( total_crashes + crashes ))
done
wall=$(( $(date +%s) - started ))
printf '%-13s %6s %12s %9s %7s %8s  %s\n' total "$total_seconds" "$total_runs" "$(( total_runs / (wall > 0 ? wall : 1) ))" - "$total_crashes" \
  "wall ${wall}s; sanitizers: $sanitizers"
if [ "$failed" -ne 0 ]; then
  echo "fuzz: FAILED; crashing inputs are in $out/artifacts/ (reproduce: $bin/fuzz-TARGET FILE)" >&2
  exit 1
fi
echo "fuzz: OK"
