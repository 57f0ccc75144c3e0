#!/usr/bin/env bash
# B1 and B2 through each web server ENS supports, in the same run: nginx (the stack's),
# Apache httpd with mod_proxy_fcgi to the same pool (apache/, on ENS_PORT+10 beside
# nginx, after the simulators' ports; the shipped site, ENS applying the rate limits;
# B1 against Apache serving a small static file through the same configuration, target
# >= 0.70; B2 against nginx, target >= 0.90; then B1 with mod_security2, the option),
# and plain CGI through Apache's mod_cgid (ens-fcgi started per request). B1 is /alive, B2 /getsubscriptionstatusv2 (one RSA-2048
# private-key operation per request); interleaved rounds, medians, ratios to nginx.
# Then what one CGI request costs, measured part by part.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
ROUNDS=${BENCH_ROUNDS:-3}
SECONDS_PER_RUN=${BENCH_SECONDS:-5}
USERS=${B2_USERS:-100}
B2_CONNECTIONS=32  # wrk's connections for B2, and for Apache's floor paced like it
APACHE_PORT=$((ENS_PORT + 10))
NGINX_URL=$BENCH_URL_BASE
APACHE_URL=https://127.0.0.1:$APACHE_PORT
export ENS_APACHE_PORT=$APACHE_PORT
trap 'scripts/stack.sh apache-stop' EXIT

ENS_TOKEN=$(scripts/stack.sh token bench-fronts)
export ENS_TOKEN
bodies=$ENS_VAR/b2-fronts-bodies.txt
fill_key_pool $((USERS + 10))
python3 bench/devices.py b2-setup "$USERS" "$bodies" >/dev/null

# rps URL CONNECTIONS [wrk args before the URL] [-- script args]: requests/s of a
# bounded wrk run; unexpected answers (B2's script reports them) go to
# $ENS_VAR/fronts-errors.txt.
rps() {
  local connections=$2; shift 2
  timeout $((SECONDS_PER_RUN + 30)) wrk -t2 -c"$connections" -d"${SECONDS_PER_RUN}s" "$@" 2>>"$ENS_VAR/fronts-errors.txt" \
    | awk '/Requests\/sec/ {print $2} /Non-2xx/ {print "non2xx " $0 > "/dev/stderr"}'
}
b1() { rps "$1" "$2" "$1/alive"; }
b2() { rps "$1" "$2" -s bench/b2-status.lua "$1/getsubscriptionstatusv2" -- "$bodies"; }

# compare NAME FUNCTION CONNECTIONS: nginx and Apache alternately, ROUNDS times each.
compare() {
  local name=$1 run=$2 connections=$3 n a round
  local nginx=() apache=() ratios=()
  SECONDS_PER_RUN=2 "$run" "$NGINX_URL" "$connections" >/dev/null  # warm-up: connections, caches
  SECONDS_PER_RUN=2 "$run" "$APACHE_URL" "$connections" >/dev/null
  for round in $(seq "$ROUNDS"); do
    n=$("$run" "$NGINX_URL" "$connections"); a=$("$run" "$APACHE_URL" "$connections")
    nginx+=("$n"); apache+=("$a"); ratios+=("$(ratio "$a" "$n")")
    printf '%s round %d: nginx %8.0f req/s   Apache (mod_proxy_fcgi) %8.0f req/s   ratio %s\n' "$name" "$round" "$n" "$a" "${ratios[-1]}"
  done
  printf '%s result: nginx %.0f req/s, Apache %.0f req/s (medians); Apache/nginx %s (median; target >= 0.90)\n' \
    "$name" "$(median "${nginx[@]}")" "$(median "${apache[@]}")" "$(median "${ratios[@]}")"
  figure "$(echo "$name" | tr 'A-Z' 'a-z').apache_over_nginx" "$(median "${ratios[@]}")"
  eval "${name}_NGINX=$(median "${nginx[@]}")"
}

# static URL CONNECTIONS: requests/s of Apache's own static file (the same Apache
# configuration, no backend): the reference for ENS behind Apache.
static() { rps "$1" "$2" "$1/bench-static.json"; }

# B1 through Apache alternates with Apache's static file and with nginx in each round:
# Apache's own work per request, not ENS's, is what bounds it.
b1_apache() {
  local round n a s
  local nginx=() apache=() files=() to_file=() to_nginx=()
  SECONDS_PER_RUN=2 b1 "$NGINX_URL" 64 >/dev/null; SECONDS_PER_RUN=2 b1 "$APACHE_URL" 64 >/dev/null
  SECONDS_PER_RUN=2 static "$APACHE_URL" 64 >/dev/null
  for round in $(seq "$ROUNDS"); do
    if ((round % 2)); then s=$(static "$APACHE_URL" 64); a=$(b1 "$APACHE_URL" 64); n=$(b1 "$NGINX_URL" 64)
    else n=$(b1 "$NGINX_URL" 64); a=$(b1 "$APACHE_URL" 64); s=$(static "$APACHE_URL" 64); fi
    nginx+=("$n"); apache+=("$a"); files+=("$s"); to_file+=("$(ratio "$a" "$s")"); to_nginx+=("$(ratio "$a" "$n")")
    printf 'B1 round %d: Apache /alive %8.0f req/s, Apache static file %8.0f req/s (ratio %s), nginx /alive %8.0f req/s\n' \
      "$round" "$a" "$s" "${to_file[-1]}" "$n"
  done
  printf 'B1 result (%s): Apache /alive %.0f req/s, its static file %.0f req/s: ratio %s (median; target >= 0.70); nginx /alive %.0f req/s, Apache/nginx %s\n' \
    "$1" "$(median "${apache[@]}")" "$(median "${files[@]}")" "$(median "${to_file[@]}")" "$(median "${nginx[@]}")" "$(median "${to_nginx[@]}")"
  # The default arrangement's figure (the mod_security2 round is the option's cost).
  if [ "$1" = "limits in ENS" ]; then figure b1.apache.alive_over_static "$(median "${to_file[@]}")"; fi
  B1_NGINX=$(median "${nginx[@]}")
}

# The most B2 through Apache can reach, from Apache's own cost (target 0.90). In each
# round: B2 through nginx, with every process's CPU per check-in; then Apache's floor,
# B2's bodies and headers POSTed to /alive (ENS answers 405 at once) at the pace nginx
# carried B2, with Apache's CPU per request. On 2 busy cores the ratio of throughputs is
# the inverse ratio of CPU per request, so Apache at its floor, everything else as it was
# through nginx, reaches (X + nginx) / (X + Apache's floor), X being ENS, MariaDB and
# wrk per check-in.
b2_ceiling() {
  local round n gap split floor_split
  local -a ceilings=()
  mapfile -t fcgi_pids < <(stack_pids fcgi); mapfile -t db_pids < <(stack_pids mariadb)
  mapfile -t nginx_pids < <(stack_pids nginx); mapfile -t apache_pids < <(stack_pids apache)
  for round in $(seq "$ROUNDS"); do
    split=$(cpu_split -s bench/b2-status.lua "$NGINX_URL/getsubscriptionstatusv2" -- "$bodies")
    n=${split%% *}
    gap=$((B2_CONNECTIONS * 1000 * SECONDS_PER_RUN / (n > 0 ? n : 1)))  # ms between a connection's requests
    floor_split=$(cpu_split -s bench/b2-paced-alive.lua "$APACHE_URL/alive" -- "$bodies" "$gap")
    ceilings+=("$(python3 bench/fronts-ceiling.py "$split" "$floor_split" "$(getconf CLK_TCK)" "$SECONDS_PER_RUN" "$round")")
  done
  printf 'B2 Apache ceiling: Apache/nginx at most %s (median; Apache at its own floor, the rest as through nginx; target >= 0.90)\n' \
    "$(median "${ceilings[@]}")"
}

# cpu_split WRK-ARGS...: one wrk run of B2_CONNECTIONS connections; prints the requests,
# the CPU ticks of ens-fcgi, MariaDB, nginx and Apache over it (the processes
# b2_ceiling listed in fcgi_pids, db_pids, nginx_pids and apache_pids), and wrk's CPU
# seconds.
cpu_split() {
  local before=("$(cpu_ticks "${fcgi_pids[@]}")" "$(cpu_ticks "${db_pids[@]}")" "$(cpu_ticks "${nginx_pids[@]}")" "$(cpu_ticks "${apache_pids[@]}")")
  /usr/bin/time -o "$ENS_VAR/fronts-wrk-cpu.txt" -f '%U %S' timeout $((SECONDS_PER_RUN + 30)) \
    wrk -t2 -c"$B2_CONNECTIONS" -d"${SECONDS_PER_RUN}s" "$@" >"$ENS_VAR/fronts-wrk.txt" 2>>"$ENS_VAR/fronts-errors.txt"
  echo "$(awk '/requests in/ {print $1}' "$ENS_VAR/fronts-wrk.txt")" \
    "$(($(cpu_ticks "${fcgi_pids[@]}") - before[0]))" "$(($(cpu_ticks "${db_pids[@]}") - before[1]))" \
    "$(($(cpu_ticks "${nginx_pids[@]}") - before[2]))" "$(($(cpu_ticks "${apache_pids[@]}") - before[3]))" \
    "$(awk '{print $1 + $2}' "$ENS_VAR/fronts-wrk-cpu.txt")"
}

: > "$ENS_VAR/fronts-errors.txt"
# The shipped site: ENS applies the limits (SetEnv ENS_LIMITS 1), no mod_security2.
scripts/stack.sh apache-start
b1_apache "limits in ENS"
compare B2 b2 "$B2_CONNECTIONS"
b2_ceiling 2>&1

# The option: mod_security2 applies the limits (and the body cap) instead.
scripts/stack.sh apache-stop
ENS_APACHE_MODSEC=1 scripts/stack.sh apache-start
ROUNDS=1 b1_apache "limits in mod_security2, the option"

# Plain CGI: one process per request, so few connections (each waits for a process).
scripts/stack.sh apache-stop
ENS_APACHE_BACKEND=cgi scripts/stack.sh apache-start
cgi_b1=$(b1 "$APACHE_URL" 8); cgi_b2=$(b2 "$APACHE_URL" 8)
printf 'B1 CGI (Apache mod_cgid): %.0f req/s, %s of nginx\n' "$cgi_b1" "$(ratio "$cgi_b1" "$B1_NGINX")"
printf 'B2 CGI (Apache mod_cgid): %.0f req/s, %s of nginx\n' "$cgi_b2" "$(ratio "$cgi_b2" "$B2_NGINX")"
unexpected=$(grep -c 'unexpected answer' "$ENS_VAR/fronts-errors.txt" || true)
echo "B2 unexpected answers over all runs: $unexpected"

# Where a CGI request's time goes: the same binary run 50 times each way, wall time.
# 1. start and exit: exec, dynamic linking, Swift runtime start-up (a configuration it
#    cannot read, so it exits at once); 2. plus reading the configuration and secrets
#    (--check); 3. a whole /alive as mod_cgid runs it, without Apache: plus connecting
#    to MariaDB and the health query; 4. through Apache (B1 CGI above).
fcgi=$(readlink -f "$ENS_BIN/ens-fcgi")
config=$ENS_VAR/ens.conf
per_run_ms() {  # per_run_ms COMMAND...: mean wall milliseconds of 50 runs
  local start end
  start=$(date +%s%N)
  for _ in $(seq 50); do "$@" >/dev/null 2>&1 || true; done
  end=$(date +%s%N)
  python3 -c "print(f'{($end - $start) / 50 / 1e6:.2f}')"
}
start_ms=$(per_run_ms env -i GATEWAY_INTERFACE=CGI/1.1 REQUEST_METHOD=GET ENS_CONFIG=/nonexistent "$fcgi")
config_ms=$(per_run_ms "$fcgi" --check --config "$config")
alive_ms=$(per_run_ms env -i GATEWAY_INTERFACE=CGI/1.1 REQUEST_METHOD=GET PATH_INFO=/alive SCRIPT_NAME= ENS_CONFIG="$config" "$fcgi")
libraries=$(ldd "$fcgi" | grep -c '=>')
loader=$(LD_DEBUG=statistics "$fcgi" --help 2>&1 >/dev/null | awk '/total startup time in dynamic loader/ {print $(NF-1)}' | head -1)
mhz=$(awk -F: '/^cpu MHz/ {print $2; exit}' /proc/cpuinfo)
python3 - "$start_ms" "$config_ms" "$alive_ms" "$cgi_b1" "$libraries" "${loader:-0}" "${mhz:-0}" <<'PY'
import sys
start, config, alive, cgi_rps, libraries, loader, mhz = (float(x) for x in sys.argv[1:8])
linking = f", {loader / mhz / 1000:.2f} ms of it in the dynamic loader (LD_DEBUG=statistics)" if loader and mhz else ""
print(f"CGI cost per request (ens-fcgi links {libraries:.0f} shared libraries{linking}):")
print(f"  process start, dynamic linking, runtime start-up and exit  {start:6.2f} ms")
print(f"  + reading the configuration and secrets                     {config - start:6.2f} ms")
print(f"  + MariaDB connection, health query, answer                  {alive - config:6.2f} ms")
print(f"  = /alive as a CGI program, run directly                     {alive:6.2f} ms of wall time")
print(f"  through Apache mod_cgid with 8 clients on 2 cores: {cgi_rps:.0f} req/s, {2000 / cgi_rps:.2f} ms of the machine per request")
PY
