#!/usr/bin/env bash
# Checks a live ENS against docs/openapi.yaml with Schemathesis (property-based API
# testing): first validates the document, then fuzzes every operation twice, once with
# a valid ApiToken and once without one (every device endpoint must then answer 401).
#
#   Tests/tools/schemathesis.sh BASE_URL TOKEN_FILE
#   e.g. Tests/tools/schemathesis.sh https://localhost:8443 var/token
#   Tests/tools/schemathesis.sh --prepare    only install the tools (make test does it
#                                            beside its integration tests)
#
# TOKEN_FILE holds an API token (`scripts/stack.sh token` prints one; the first
# `ens_<64 hex>` in the file is used, else its first non-empty line). TLS verification
# is off: this is meant for the local stack's self-signed certificate on loopback.
#
# Installs Schemathesis 4.x, openapi-spec-validator and PyYAML into a venv at
# $ENS_VAR/venv-schemathesis (ENS_VAR defaults to var/) when they are missing; falls back
# to `pip install --user` when venvs are unavailable. Reports (JUnit XML) go to
# $ENS_VAR/schemathesis/. Exits 0 when every check passes, 1 on a failed check, 2 on a
# usage or setup problem.
#
# Environment: ENS_ST_MAX_EXAMPLES (test cases per operation and phase, default 100),
# ENS_ST_WORKERS (default 2), ENS_ST_TIME_LIMIT (hard limit per run in seconds, default
# 240; the two runs, side by side, normally take under a minute on 2 cores, and over
# 80 s when the host is busy with other work), ENS_ST_SEED (reproduce a run), ENS_ST_CHECKS
# (comma-separated; replaces the check lists below).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
die() { printf 'schemathesis.sh: error: %s\n' "$*" >&2; exit 2; }
log() { printf 'schemathesis.sh: %s\n' "$*" >&2; }

PREPARE=0
if [ $# -eq 1 ] && [ "$1" = --prepare ]; then
  PREPARE=1
else
  [ $# -eq 2 ] || { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
  BASE_URL=${1%/}
  TOKEN_FILE=$2
  [[ $BASE_URL == http://* || $BASE_URL == https://* ]] || die "BASE_URL must start with http:// or https://"
  [ -r "$TOKEN_FILE" ] || die "cannot read TOKEN_FILE $TOKEN_FILE"
fi

VAR=$(mkdir -p "${ENS_VAR:-$ROOT/var}" && cd "${ENS_VAR:-$ROOT/var}" && pwd)
VENV=$VAR/venv-schemathesis
WORK=$VAR/schemathesis
SPEC=$ROOT/docs/openapi.yaml
MAX_EXAMPLES=${ENS_ST_MAX_EXAMPLES:-100}
WORKERS=${ENS_ST_WORKERS:-2}
TIME_LIMIT=${ENS_ST_TIME_LIMIT:-240}
REQUIREMENTS=("schemathesis>=4.32,<5" "openapi-spec-validator>=0.7,<1" "PyYAML>=6")

# ---- tools -------------------------------------------------------------------------
have_tools() { # have_tools PYTHON
  "$1" - <<'PY' >/dev/null 2>&1
import importlib.metadata as md
import openapi_spec_validator, yaml, schemathesis  # noqa: F401
major, minor = (int(x) for x in md.version("schemathesis").split(".")[:2])
assert major == 4 and minor >= 32
PY
}

PYTHON=""
if [ -x "$VENV/bin/python" ] && have_tools "$VENV/bin/python"; then
  PYTHON=$VENV/bin/python
elif have_tools python3; then
  PYTHON=$(command -v python3)
else
  log "installing ${REQUIREMENTS[*]} into $VENV"
  if [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${REQUIREMENTS[@]}" \
      || die "pip could not install ${REQUIREMENTS[*]} into $VENV"
    PYTHON=$VENV/bin/python
  else
    rm -rf "$VENV"
    log "python3 -m venv is unavailable (Debian: apt-get install python3-venv); trying pip --user"
    python3 -m pip install -q --user --disable-pip-version-check "${REQUIREMENTS[@]}" \
      || die "cannot install ${REQUIREMENTS[*]}: install python3-venv (apt-get install python3-venv) and retry"
    PYTHON=$(command -v python3)
  fi
  have_tools "$PYTHON" || die "the installed tools do not import; see the pip output above"
fi
SCHEMATHESIS=("$PYTHON" -m schemathesis.cli)
log "using $("${SCHEMATHESIS[@]}" --version 2>/dev/null | head -1) ($PYTHON)"
[ "$PREPARE" = 0 ] || exit 0

# ---- 1. the document ---------------------------------------------------------------
"$PYTHON" "$ROOT/Tests/tools/validate_openapi.py" "$SPEC" || exit 1

# ---- 2. the live server ------------------------------------------------------------
TOKEN=$(grep -oE 'ens_[0-9a-f]{64}' "$TOKEN_FILE" | head -1 || true)
[ -n "$TOKEN" ] || TOKEN=$(grep -m1 -v '^[[:space:]]*$' "$TOKEN_FILE" | tr -d '[:space:]' || true)
[ -n "$TOKEN" ] || die "TOKEN_FILE $TOKEN_FILE holds no token"

alive=$(curl -sk --max-time 10 -o /dev/null -w '%{http_code}' "$BASE_URL/alive" || true)
[ "$alive" = 200 ] || die "$BASE_URL/alive answered '${alive:-nothing}', not 200: is the stack up?"
# An empty body gets past the token check and stops at the parameters (400): no record is made.
auth=$(curl -sk --max-time 10 -o /dev/null -w '%{http_code}' -H @- -X POST "$BASE_URL/getpublickey" <<< "ApiToken: $TOKEN" || true)
[ "$auth" = 400 ] || die "POST /getpublickey with the token from $TOKEN_FILE answered '${auth:-nothing}', not 400: is the token live?"

rm -rf "$WORK"
mkdir -p "$WORK"
chmod 700 "$WORK"
# The token reaches Schemathesis through the environment, never the command line.
# Headers set here override the ApiToken values Schemathesis generates itself.
cat > "$WORK/with-token.toml" <<'TOML'
headers = { ApiToken = "${ENS_ST_API_TOKEN}" }
TOML
: > "$WORK/without-token.toml"

# ENS-specific checks, loaded by Schemathesis through SCHEMATHESIS_HOOKS.
cat > "$WORK/ens_checks.py" <<'PY'
"""ENS's own checks on every response (see Tests/tools/schemathesis.sh)."""
import os

import schemathesis

MODE = os.environ.get("ENS_ST_MODE", "")
TOKEN = os.environ.get("ENS_ST_API_TOKEN", "")


def _is_text(value):
    """What ENS takes as header text: UTF-8 with no control character."""
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return False
    elif any(ord(c) > 0x7E for c in value):  # sent as Latin-1 bytes, not valid UTF-8
        return False
    return not any(ord(c) < 0x20 or ord(c) == 0x7F for c in value)


@schemathesis.check
def ens_not_a_server_error(ctx, response, case):
    """No 5xx, except the contract's 503 ServiceUnavailable ("retry later"): what
    /getpublickey rightly answers when the fuzzer's stream of new users has emptied the
    key pool faster than the refiller (about five keys a second here) fills it. Any
    other 5xx, or a 503 without that body, is a server error."""
    status = response.status_code
    if status < 500:
        return True
    if status == 503:
        try:
            if response.json().get("responseCode") == "ServiceUnavailable":
                return True
        except ValueError:
            pass
    raise AssertionError(f"server error {status}: {response.text[:200]}")


@schemathesis.check
class ens_api_token:  # noqa: N801 (the check's name, as given to --checks)
    """With the live token a device endpoint never answers 401, and each one answers 2xx at
    least once; without a valid token it answers nothing but 401 (400 when the ApiToken
    header is not valid text), and each one does so at least once."""

    def __init__(self):
        self.tested = set()
        self.reached = set()

    def after_response(self, ctx, response, case):
        # /alive needs no token; a method the path does not take is refused first (405).
        operation = case.operation
        if operation.path == "/alive" or response.request.method.upper() != operation.method.upper():
            return
        label = f"{operation.method.upper()} {operation.path}"
        self.tested.add(label)
        status = response.status_code
        if status in (429, 503):
            return
        sent = response.request.headers.get("ApiToken")
        if MODE == "with-token" and sent == TOKEN:
            if status == 401:
                raise AssertionError("401 although the request carried the live ApiToken")
            if 200 <= status < 300:
                self.reached.add(label)
        elif MODE == "without-token":
            if status == 401:
                self.reached.add(label)
            elif not (status == 400 and sent is not None and not _is_text(sent)):
                shown = "absent" if sent is None else "a wrong value"
                raise AssertionError(f"expected 401 without a valid ApiToken (header {shown}), got {status}")

    def after_run(self, ctx):
        missing = sorted(self.tested - self.reached)
        if missing:
            wanted = "a 2xx answer with the live token" if MODE == "with-token" else "a 401 answer"
            raise AssertionError(f"never got {wanted}: " + ", ".join(missing))
PY

# The contract's checks. Schemathesis's not_a_server_error is replaced by
# ens_not_a_server_error (above), which lets the contract's 503 through. Left out, with
# the reason:
#  - positive_data_acceptance: a schema-valid request can rightly get 400, because what
#    decides it cannot be said in JSON Schema: `userid` must be the SHA-256 of `email`,
#    and a sealed parameter must decrypt under the user's key.
#  - negative_data_rejection: ENS answers 200 UserSubscriptionNotFound for an unknown
#    user before it opens sealed parameters (as the contract orders), and it takes JSON
#    numbers and booleans as text for every parameter, so schema-invalid values rightly
#    get 200.
DEFAULT_CHECKS=ens_not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance,ignored_auth,unsupported_method,allow_header_conformance,missing_required_header,ens_api_token
NO_TOKEN_CHECKS=ens_not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance,ens_api_token
CHECKS=${ENS_ST_CHECKS:-$DEFAULT_CHECKS}
[ -n "${ENS_ST_CHECKS:-}" ] && NO_TOKEN_CHECKS=$ENS_ST_CHECKS

run() { # run NAME CHECKS [extra schemathesis args...]
  local name=$1 checks=$2; shift 2
  local args=(
    "$SPEC" --url "$BASE_URL" --tls-verify false
    --checks "$checks" --max-examples "$MAX_EXAMPLES" --workers "$WORKERS"
    --request-timeout 10 --generation-database "$WORK/examples-$name"
    --report junit --report-junit-path "$WORK/junit-$name.xml" --no-color
  )
  [ -n "${ENS_ST_SEED:-}" ] && args+=(--seed "$ENS_ST_SEED")
  log "run '$name': checks $checks, max $MAX_EXAMPLES examples per operation, limit ${TIME_LIMIT}s"
  local start=$SECONDS status=0
  (cd "$WORK" && ENS_ST_MODE=$name SCHEMATHESIS_HOOKS="$WORK/ens_checks.py" \
    timeout --kill-after=10 "$TIME_LIMIT" "${SCHEMATHESIS[@]}" --config-file "$WORK/$name.toml" run "${args[@]}" "$@") \
    2>&1 | tee "$WORK/$name.out" || status=${PIPESTATUS[0]}
  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then log "run '$name' hit the ${TIME_LIMIT}s limit"; fi
  log "run '$name': exit $status after $((SECONDS - start))s (output in $WORK/$name.out)"
  return "$status"
}

export ENS_ST_API_TOKEN=$TOKEN
failed=0
# The two runs at once (each has its own examples database, report and output), then
# their output one after the other. In the second, Schemathesis sends its own made-up
# ApiToken values (or none), which must all be refused; its warning that operations
# "returned only 401/403 responses" is the point.
run with-token "$CHECKS" > "$WORK/with-token.console" 2>&1 &
with_token=$!
run without-token "$NO_TOKEN_CHECKS" > "$WORK/without-token.console" 2>&1 &
without_token=$!
wait "$with_token" || failed=1
wait "$without_token" || failed=1
cat "$WORK/with-token.console" "$WORK/without-token.console"

if [ "$failed" -eq 0 ]; then
  log "OK: every check passed (reports in $WORK)"
else
  log "FAILED: see the failures above (reports in $WORK)"
fi
exit "$failed"
