#!/usr/bin/env python3
"""A strict FCM simulator: Firebase Cloud Messaging's HTTP v1 API and Google's OAuth 2.0
token endpoint for service accounts, for ENS's tests and `make run`.

Usage:
  fcm_simulator.py --port P --control-port C --cert CERT.pem --key KEY.pem
      --service-account-key PUB.pem --key-id KID --client-email EMAIL
      [--service-account-key PUB2.pem --key-id KID2 --client-email EMAIL2 ...]
      --project PROJECT [--project PROJECT2 ...] --record FILE.jsonl
      [--token-uri URL] [--token-lifetime SECONDS] [--ready-file PATH]

Service accounts: each --service-account-key (a PEM RSA public key, or the private key,
whose public half is used) pairs with the --key-id (the key file's private_key_id) and
--client-email given at the same position; the three options must be given equally
often. One account may have several keys (repeat its e-mail with another key and id).
Any account may send to any --project.

Transport: HTTP/2 over TLS (1.2 or later) on 127.0.0.1:P with CERT/KEY as the server
certificate. ALPN must select "h2"; a client that does not offer it is disconnected.
One event loop serves every connection; SETTINGS_MAX_CONCURRENT_STREAMS is 1000
(exceeding it is a protocol error and ends the connection); receive windows are 1 MiB
per stream and grow the connection window by 16 MiB, and received data is acknowledged
as it arrives. PING is answered. The client's first bytes must be the connection
preface followed by a SETTINGS frame (RFC 9113 3.4), else GOAWAY PROTOCOL_ERROR. A
malformed connection (TLS, HTTP/2 or anything else) only ends that connection. When
both ports listen, the PID is written to --ready-file (atomically; removed again on
clean exit). SIGTERM/SIGINT exit promptly.
Request bodies over 65536 bytes are cut there (and refused as too large below).

Two endpoints share port P; the query string is ignored when routing.

TOKEN ENDPOINT: the path of --token-uri (default https://localhost:P/token, so /token).
Google's JWT bearer grant for service accounts (RFC 7523). Checked in this order; the
first failure is answered with JSON {"error": ..., "error_description": ...}:
   1. `:method` not POST -> 405 invalid_request (with `allow: POST`).
   2. content-type not application/x-www-form-urlencoded (parameters allowed) -> 400
      invalid_request; body over 65536 bytes, not a valid form (strict parsing, UTF-8
      after percent-decoding) or a parameter given twice -> 400 invalid_request.
   3. grant_type missing -> 400 invalid_request; not
      urn:ietf:params:oauth:grant-type:jwt-bearer -> 400 unsupported_grant_type.
   4. assertion missing -> 400 invalid_request.
   5. assertion not a compact JWS (three unpadded base64url parts, header and claims
      JSON objects) -> 400 invalid_grant.
   6. header: `alg` not RS256, `typ` present but not "JWT", `kid` missing -> 400
      invalid_grant. Other header keys are ignored.
   7. `iss` not the --client-email of a configured account -> 400 invalid_grant
      ("Invalid grant: account not found"); `kid` not one of that account's --key-id
      values, or the signature (RSASSA-PKCS1-v1_5 with SHA-256 over "header.claims")
      not valid for that key -> 400 invalid_grant ("Invalid JWT Signature.").
   8. `aud` not exactly --token-uri -> 400 invalid_grant ("Failed audience check").
   9. `iat` and `exp` not both integers; `iat` more than 300 s in the future; `exp` not
      after now; `exp` - `iat` over 3600 or not positive -> 400 invalid_grant ("Token
      must be a short-lived token (60 minutes) and in a reasonable timeframe").
  10. `scope` missing, not a string or empty -> 400 invalid_scope (Google's answer).
      Any non-empty scope is granted, as Google does; whether it allows sending is
      decided by the messages endpoint (step 3 below).
  11. `sub` present and not equal to `iss` (domain-wide delegation, which FCM does not
      use) -> 401 unauthorized_client.
  12. otherwise 200 {"access_token": "ya29.<random>", "expires_in": --token-lifetime
      (default 3600), "token_type": "Bearer"}, counted in /stats tokens_issued.

MESSAGES ENDPOINT: POST /v1/projects/{project}/messages:send. Checked in this order;
the first failure is answered like Google (content-type application/json):
   {"error": {"code": <HTTP status>, "message": "...", "status": "<google.rpc.Code>",
              "details": [...]}}
where details hold {"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError",
"errorCode": "<ErrorCode>"} for FCM's own verdicts, {"@type":
"type.googleapis.com/google.rpc.BadRequest", "fieldViolations": [{"field",
"description"}]} for requests that do not parse as a SendMessageRequest, and
{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason", "domain", "metadata"}
for authentication failures. Messages are modelled on Google's; a client should key on
the status and errorCode only.
   1. path not /v1/projects/<one segment>/messages:send, or `:method` not POST -> 404
      NOT_FOUND (Google routes by method and path alike; no details).
   2. `authorization` missing -> 401 UNAUTHENTICATED (ErrorInfo CREDENTIALS_MISSING);
      not `Bearer <token>` (scheme case-insensitive, one space), or a token this
      simulator never issued or has revoked (/revoke-tokens) -> 401 UNAUTHENTICATED
      (ACCESS_TOKEN_TYPE_UNSUPPORTED); a token past its expires_in -> 401
      UNAUTHENTICATED (ACCESS_TOKEN_EXPIRED). Every 401 here carries
      `www-authenticate: Bearer realm="https://accounts.google.com/"` (with
      error="invalid_token" when a token was presented).
   3. the token's scope includes neither https://www.googleapis.com/auth/firebase.messaging
      nor https://www.googleapis.com/auth/cloud-platform -> 403 PERMISSION_DENIED
      (ErrorInfo ACCESS_TOKEN_SCOPE_INSUFFICIENT).
   4. {project} not a --project -> 404 NOT_FOUND "Requested entity was not found."
   5. content-type not application/json (a charset parameter, if any, utf-8) -> 400
      INVALID_ARGUMENT; body over 65536 bytes -> 400 INVALID_ARGUMENT.
   6. body not UTF-8 JSON (no NaN/Infinity, no lone surrogates) whose top level is an
      object -> 400 INVALID_ARGUMENT "Invalid JSON payload received. ..." (BadRequest).
   7. the body must parse as a SendMessageRequest with proto3 JSON rules, else 400
      INVALID_ARGUMENT with a BadRequest detail naming the field (no FcmError):
      - field names: the proto name (collapse_key) or its lowerCamelCase JSON name
        (collapseKey); an unknown name at any level -> "Unknown name ... Cannot find
        field." (Google rejects unknown fields). A null value counts as absent,
        except as a map value.
      - SendMessageRequest: validate_only (bool), message (Message, required).
      - Message: name, token, topic, condition (strings); data (map of string to
        string: every value a JSON string); notification {title, body, image: strings};
        android (below); webpush {headers, data: maps of strings; notification: any
        object; fcm_options {link, analytics_label}}; apns {headers: map of strings;
        payload: any object; fcm_options {analytics_label, image}; live_activity_token};
        fcm_options {analytics_label}. At most one of token/topic/condition.
      - AndroidConfig: collapse_key, restricted_package_name (strings); priority "NORMAL"
        or "HIGH" (the enum's names only; proto3's integer form is refused); ttl a
        Duration string matching ^\\d+(\\.\\d{1,9})?s$; data (map of strings);
        notification (AndroidNotification); fcm_options {analytics_label};
        direct_boot_ok, bandwidth_constrained_ok, restricted_satellite_ok (bools).
      - AndroidNotification: title, body, icon, color, sound, tag, click_action,
        body_loc_key, title_loc_key, channel_id, ticker, image (strings); body_loc_args,
        title_loc_args (string lists); sticky, local_only, default_sound,
        default_vibrate_timings, default_light_settings, bypass_proxy_notification
        (bools); event_time (RFC 3339 timestamp); notification_priority (PRIORITY_
        followed by UNSPECIFIED, MIN, LOW, DEFAULT, HIGH or MAX); visibility
        (VISIBILITY_UNSPECIFIED, PRIVATE, PUBLIC, SECRET); proxy (PROXY_UNSPECIFIED,
        ALLOW, DENY, IF_PRIORITY_LOWERED); notification_count (int32);
        vibrate_timings (Duration list); light_settings {color {red, green, blue, alpha:
        numbers}, light_on_duration, light_off_duration: Durations}.
   8. FCM's own checks, each 400 INVALID_ARGUMENT with FcmError INVALID_ARGUMENT:
      - no target (token, topic or condition) -> "Recipient of the message is not set."
      - token not 1..4096 characters of [A-Za-z0-9_:-] -> "The registration token is not
        a valid FCM registration token"; topic not [A-Za-z0-9-_.~%]{1,900} (so no
        "/topics/" prefix) -> "Invalid topic name"; condition empty -> invalid.
      - a data key (message.data or android.data) that FCM reserves: "from",
        "message_type", or starting with "google" or "gcm" -> "Invalid data key".
      - android.ttl over 2419200 s (4 weeks) -> "TTL exceeds the maximum".
      - payload over 4096 bytes (2048 to a topic or condition) -> "Message is too big".
        Counted: the UTF-8 bytes of every key and value of message.data and
        android.data, plus title, body and image of message.notification and
        android.notification.
   9. a failure injected for this token, else one injected for all (control API) ->
      its status, Google's body with FcmError errorCode (or no details when injected
      without one), and `retry-after` when injected with retry_after. validate_only
      requests meet injected failures too (Google validates the token on a dry run).
  10. otherwise 200 {"name": "projects/{project}/messages/0:<microseconds>%<16 hex>"}. With
      "validate_only": true the name is projects/{project}/messages/fake_message_id (as
      Google answers dry runs), nothing is recorded and only /stats "validated" counts
      it. Else one JSON line is appended (and flushed) to --record: {"time": ms,
      "name", "project", "token" (or null), "topic" (or null), "condition" (or null),
      "message" (as sent, parsed), "client_email" (the token's account),
      "access_token", "access_token_age_s" (seconds since it was issued, 3 decimals)}.

Control API: plain HTTP/1.1 with JSON bodies on 127.0.0.1:C.
  POST /fail   {"token": T, "status": 404, "error_code": "UNREGISTERED",
                "message": M?, "retry_after": S?, "count": N?}
               The next N valid requests for token T get that answer; count absent or 0
               means every request until /reset. error_code is one of UNSPECIFIED_ERROR,
               INVALID_ARGUMENT, UNREGISTERED, SENDER_ID_MISMATCH, QUOTA_EXCEEDED,
               UNAVAILABLE, INTERNAL, THIRD_PARTY_AUTH_ERROR, or absent/null for a body
               without details. The body's "status" follows the HTTP status (404
               NOT_FOUND, 429 RESOURCE_EXHAUSTED, ...); message defaults to Google's
               text for the code. retry_after (seconds) adds `retry-after`. A later
               /fail for the same token replaces the earlier one. Answers {"ok": true}.
  POST /fail-all  The same without "token": for every request that has no failure of
               its own (an outage); count counts requests of any token.
  POST /revoke-tokens  Every access token issued so far is invalid from now on (401);
               answers {"ok": true, "revoked": n}.
  POST /reset  Clears injected failures and all counters; keeps issued access tokens
               and the record file (read accepted messages from the record file).
  GET  /stats  {"requests": n (messages:send requests), "accepted": n, "validated": n
               (validate_only answered 200), "rejected": {"<status> <errorCode, or
               Google status when none>": n, ...}, "tokens_issued": n, "token_errors":
               {"<status> <error>": n, ...}, "access_tokens_used": n (distinct access
               tokens on accepted messages), "connections": n (since start or /reset),
               "open_connections": n}.
  GET  /wait?accepted=N&timeout=S
               The same answer as /stats, once N messages have been accepted since the
               last /reset or S seconds have passed (for benchmarks).
"""
import argparse
import base64
import json
import os
import re
import secrets
import sys
import threading
import time
import urllib.parse
from collections import Counter

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from simlib import certs, control, process
from simlib.failures import Failures
from simlib.h2server import ConnectionCount, H2Server

MAX_BODY = 65536
MAX_BODY_KEPT = MAX_BODY + 1  # enough to tell "too large"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
SEND_SCOPES = {"https://www.googleapis.com/auth/firebase.messaging",
               "https://www.googleapis.com/auth/cloud-platform"}
FCM_ERROR = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
SEND_PATH_RE = re.compile(r"/v1/projects/([^/]+)/messages:send")
B64URL_RE = re.compile(r"[A-Za-z0-9_-]*")
TOKEN_RE = re.compile(r"[A-Za-z0-9_:-]{1,4096}")
TOPIC_RE = re.compile(r"[A-Za-z0-9_.~%-]{1,900}")
DURATION_RE = re.compile(r"(\d+)(\.\d{1,9})?s")
TIMESTAMP_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)")
MAX_TTL = 2419200  # four weeks
ALL = object()  # the /fail-all key in Simulator.failures

# HTTP status -> google.rpc.Code name, as Google's JSON errors spell them.
STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                404: "NOT_FOUND", 409: "ABORTED", 412: "FAILED_PRECONDITION",
                429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL",
                501: "UNIMPLEMENTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
# FCM's ErrorCode enum -> Google's message for it.
ERROR_MESSAGES = {
    "UNSPECIFIED_ERROR": "Unspecified error.",
    "INVALID_ARGUMENT": "The registration token is not a valid FCM registration token",
    "UNREGISTERED": "Requested entity was not found.",
    "SENDER_ID_MISMATCH": "SenderId mismatch",
    "QUOTA_EXCEEDED": "Quota exceeded for the message target.",
    "UNAVAILABLE": "The service is currently unavailable.",
    "INTERNAL": "Internal error encountered.",
    "THIRD_PARTY_AUTH_ERROR": "Auth error from APNS or Web Push Service",
}
UNAUTHENTICATED = ("Request had invalid authentication credentials. Expected OAuth 2 access "
                   "token, login cookie or other valid authentication credential. See "
                   "https://developers.google.com/identity/sign-in/web/devconsole-project.")
MISSING_CREDENTIALS = ("Request is missing required authentication credential. Expected OAuth 2 "
                       "access token, login cookie or other valid authentication credential. See "
                       "https://developers.google.com/identity/sign-in/web/devconsole-project.")
SHORT_LIVED = ("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable "
               "timeframe. Check your iat and exp values in the JWT claim.")

# The SendMessageRequest schema, by proto field name. A dict is a message type (with
# its proto type name under "."); ("enum", type, names); ("list", item); ("map",) is
# map<string, string>; "struct" is google.protobuf.Struct (any JSON object).
STRING, BOOL, INT32, FLOAT, DURATION, TIMESTAMP, MAP, STRUCT = (
    "string", "bool", "int32", "float", "duration", "timestamp", ("map",), "struct")
COLOR = {".": "google.type.Color", "red": FLOAT, "green": FLOAT, "blue": FLOAT, "alpha": FLOAT}
ANDROID_NOTIFICATION = {
    ".": "google.firebase.fcm.v1.AndroidNotification",
    **{name: STRING for name in ("title", "body", "icon", "color", "sound", "tag", "click_action",
                                 "body_loc_key", "title_loc_key", "channel_id", "ticker", "image")},
    **{name: BOOL for name in ("sticky", "local_only", "default_sound", "default_vibrate_timings",
                               "default_light_settings", "bypass_proxy_notification")},
    "body_loc_args": ("list", STRING), "title_loc_args": ("list", STRING),
    "event_time": TIMESTAMP, "notification_count": INT32,
    "notification_priority": ("enum", "google.firebase.fcm.v1.AndroidNotification.NotificationPriority",
                              {"PRIORITY_UNSPECIFIED", "PRIORITY_MIN", "PRIORITY_LOW",
                               "PRIORITY_DEFAULT", "PRIORITY_HIGH", "PRIORITY_MAX"}),
    "visibility": ("enum", "google.firebase.fcm.v1.AndroidNotification.Visibility",
                   {"VISIBILITY_UNSPECIFIED", "PRIVATE", "PUBLIC", "SECRET"}),
    "proxy": ("enum", "google.firebase.fcm.v1.AndroidNotification.Proxy",
              {"PROXY_UNSPECIFIED", "ALLOW", "DENY", "IF_PRIORITY_LOWERED"}),
    "vibrate_timings": ("list", DURATION),
    "light_settings": {".": "google.firebase.fcm.v1.LightSettings", "color": COLOR,
                       "light_on_duration": DURATION, "light_off_duration": DURATION},
}
ANDROID_CONFIG = {
    ".": "google.firebase.fcm.v1.AndroidConfig",
    "collapse_key": STRING, "restricted_package_name": STRING,
    "priority": ("enum", "google.firebase.fcm.v1.AndroidMessagePriority", {"NORMAL", "HIGH"}),
    "ttl": DURATION, "data": MAP, "notification": ANDROID_NOTIFICATION,
    "fcm_options": {".": "google.firebase.fcm.v1.AndroidFcmOptions", "analytics_label": STRING},
    "direct_boot_ok": BOOL, "bandwidth_constrained_ok": BOOL, "restricted_satellite_ok": BOOL,
}
MESSAGE = {
    ".": "google.firebase.fcm.v1.Message",
    "name": STRING, "token": STRING, "topic": STRING, "condition": STRING, "data": MAP,
    "notification": {".": "google.firebase.fcm.v1.Notification",
                     "title": STRING, "body": STRING, "image": STRING},
    "android": ANDROID_CONFIG,
    "webpush": {".": "google.firebase.fcm.v1.WebpushConfig", "headers": MAP, "data": MAP,
                "notification": STRUCT,
                "fcm_options": {".": "google.firebase.fcm.v1.WebpushFcmOptions",
                                "link": STRING, "analytics_label": STRING}},
    "apns": {".": "google.firebase.fcm.v1.ApnsConfig", "headers": MAP, "payload": STRUCT,
             "live_activity_token": STRING,
             "fcm_options": {".": "google.firebase.fcm.v1.ApnsFcmOptions",
                             "analytics_label": STRING, "image": STRING}},
    "fcm_options": {".": "google.firebase.fcm.v1.FcmOptions", "analytics_label": STRING},
}
SEND_REQUEST = {".": "google.firebase.fcm.v1.SendMessageRequest",
                "validate_only": BOOL, "message": MESSAGE}
SCALAR_NAMES = {STRING: "TYPE_STRING", BOOL: "TYPE_BOOL", INT32: "TYPE_INT32", FLOAT: "TYPE_FLOAT",
                DURATION: "type.googleapis.com/google.protobuf.Duration",
                TIMESTAMP: "type.googleapis.com/google.protobuf.Timestamp",
                STRUCT: "type.googleapis.com/google.protobuf.Struct"}


class Reject(Exception):
    """A Google JSON error answer for the messages endpoint."""

    def __init__(self, status, message, error_code=None, field=None, info=None,
                 retry_after=None, authenticate=None):
        super().__init__(f"{status} {message}")
        self.status, self.message, self.error_code = status, message, error_code
        self.field, self.info, self.retry_after, self.authenticate = field, info, retry_after, authenticate

    def stats_key(self):
        return f"{self.status} {self.error_code or STATUS_NAMES.get(self.status, 'UNKNOWN')}"

    def body(self):
        error = {"code": self.status, "message": self.message,
                 "status": STATUS_NAMES.get(self.status, "UNKNOWN")}
        details = []
        if self.error_code:
            details.append({"@type": FCM_ERROR, "errorCode": self.error_code})
        if self.field is not None:
            details.append({"@type": BAD_REQUEST, "fieldViolations": [
                {"field": self.field, "description": self.message}]})
        if self.info:
            details.append({"@type": ERROR_INFO, "reason": self.info, "domain": "googleapis.com",
                            "metadata": {"service": "fcm.googleapis.com",
                                         "method": "google.firebase.fcm.v1.FcmService.SendMessage"}})
        if details:
            error["details"] = details
        return json.dumps({"error": error}, separators=(",", ":")).encode()


class OAuthReject(Exception):
    """An OAuth 2.0 error answer for the token endpoint (RFC 6749 5.2)."""

    def __init__(self, status, error, description):
        super().__init__(f"{status} {error}: {description}")
        self.status, self.error, self.description = status, error, description


def invalid(where, kind, value):
    """The error Google's JSON transcoding gives for a value of the wrong type."""
    if isinstance(kind, dict):
        type_name = "type.googleapis.com/" + kind["."]
    elif isinstance(kind, tuple) and kind[0] == "enum":
        type_name = "type.googleapis.com/" + kind[1]
    else:
        type_name = SCALAR_NAMES.get(kind, "TYPE_STRING")
    shown = json.dumps(value, ensure_ascii=False)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return Reject(400, f"Invalid value at '{where}' ({type_name}), {shown}", field=where)


def field_name(name, fields):
    """The proto field a JSON member names: its proto name or its lowerCamelCase name."""
    if name == "." or (name in fields):
        return None if name == "." else name
    if "_" in name:
        return None
    snake = re.sub(r"[A-Z]", lambda m: "_" + m.group().lower(), name)
    return snake if snake in fields and snake != "." else None


def check_value(value, kind, where):
    """Checks one JSON value against the schema the way proto3 JSON parsing does."""
    if value is None:
        return  # proto3 JSON: null is the field's default, as if absent
    if isinstance(kind, dict):
        if not isinstance(value, dict):
            raise invalid(where, kind, value)
        for name, member in value.items():
            field = field_name(name, kind)
            if field is None:
                at = f" at '{where}'" if where else ""
                raise Reject(400, f"Invalid JSON payload received. Unknown name \"{name}\"{at}: "
                             "Cannot find field.", field=where or name)
            check_value(member, kind[field], f"{where}.{field}" if where else field)
    elif kind is MAP:
        if not isinstance(value, dict):
            raise invalid(where, kind, value)
        for index, (key, item) in enumerate(value.items()):
            if not isinstance(item, str):
                raise invalid(f"{where}[{index}].value", STRING, item)
    elif isinstance(kind, tuple) and kind[0] == "list":
        if not isinstance(value, list):
            raise invalid(where, kind[1], value)
        for index, item in enumerate(value):
            check_value(item, kind[1], f"{where}[{index}]")
    elif isinstance(kind, tuple) and kind[0] == "enum":
        if not isinstance(value, str) or value not in kind[2]:
            raise invalid(where, kind, value)
    elif kind == STRING:
        if not isinstance(value, str):
            raise invalid(where, kind, value)
    elif kind == BOOL:
        if not isinstance(value, bool):
            raise invalid(where, kind, value)
    elif kind == INT32:
        if not isinstance(value, int) or isinstance(value, bool) or not -2**31 <= value < 2**31:
            raise invalid(where, kind, value)
    elif kind == FLOAT:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise invalid(where, kind, value)
    elif kind == DURATION:
        if not isinstance(value, str) or not DURATION_RE.fullmatch(value):
            raise invalid(where, kind, value)
    elif kind == TIMESTAMP:
        if not isinstance(value, str) or not TIMESTAMP_RE.fullmatch(value):
            raise invalid(where, kind, value)
    elif kind == STRUCT:
        if not isinstance(value, dict):
            raise invalid(where, kind, value)


def member(obj, name):
    """A field of a parsed (and checked) message by proto name, whichever spelling was sent."""
    if not isinstance(obj, dict):
        return None
    if name in obj:
        return obj[name]
    head, *rest = name.split("_")
    return obj.get(head + "".join(part.capitalize() for part in rest))


def reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def b64url(part):
    if not B64URL_RE.fullmatch(part) or len(part) % 4 == 1:
        raise ValueError("not unpadded base64url")
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def media_type(value, wanted):
    """True if a content-type is `wanted`, with parameters allowed (a charset only utf-8)."""
    if value is None:
        return False
    kind, *params = value.split(";")
    if kind.strip().lower() != wanted:
        return False
    for param in params:
        name, _, val = param.partition("=")
        if name.strip().lower() == "charset" and val.strip().strip('"').lower() not in ("utf-8", "utf8"):
            return False
    return True


class Simulator:
    def __init__(self, args):
        counts = {len(args.service_account_key or ()), len(args.key_id or ()), len(args.client_email or ())}
        if len(counts) != 1 or 0 in counts:
            sys.exit("fcm_simulator: give --service-account-key, --key-id and --client-email "
                     "equally often (at least once)")
        self.accounts = {}  # client email -> {key id: RSA public key}
        for path, kid, email in zip(args.service_account_key, args.key_id, args.client_email):
            with open(path, "rb") as f:
                pem = f.read()
            try:
                key = serialization.load_pem_public_key(pem)
            except ValueError:  # a private key is accepted too
                key = serialization.load_pem_private_key(pem, None).public_key()
            if not isinstance(key, rsa.RSAPublicKey):
                sys.exit(f"fcm_simulator: {path} is not an RSA key")
            self.accounts.setdefault(email, {})[kid] = key
        self.projects = set(args.project)
        self.token_uri = args.token_uri or f"https://localhost:{args.port}/token"
        self.token_path = urllib.parse.urlsplit(self.token_uri).path or "/"
        self.token_lifetime = args.token_lifetime
        self.record = open(args.record, "a", encoding="utf-8")
        self.lock = threading.Lock()
        self.waiters = control.Waiters(self.lock)
        self.count = ConnectionCount()
        self.grants = {}    # access token -> (issued at, expires at, client email, may send)
        self.failures = Failures()  # token (or ALL) -> (status, error code, message, retry after)
        self.reset()

    def reset(self):
        self.failures.clear()
        self.count.reset()
        with self.lock:
            self.requests, self.accepted, self.validated = 0, 0, 0
            self.rejected, self.token_errors = Counter(), Counter()
            self.tokens_issued, self.used_tokens = 0, set()

    def revoke(self):
        with self.lock:
            revoked = len(self.grants)
            self.grants = {}
        return revoked

    def stats(self):
        with self.lock:
            return {"requests": self.requests, "accepted": self.accepted, "validated": self.validated,
                    "rejected": dict(self.rejected), "tokens_issued": self.tokens_issued,
                    "token_errors": dict(self.token_errors), "access_tokens_used": len(self.used_tokens),
                    "connections": self.count.established, "open_connections": self.count.open}

    # -- one request -------------------------------------------------------------------
    @staticmethod
    def session(peer_certificate):
        """Client certificates mean nothing to FCM."""
        return None

    def handle(self, headers, body, body_length, session):
        """Returns (response headers, response body bytes) for h2server."""
        route = (headers.get(":path") or "").partition("?")[0]
        if route == self.token_path:
            status, extra, body = self.token_endpoint(headers, body, body_length)
        else:
            status, extra, body = self.send_endpoint(headers, body, body_length, route)
        return [(":status", str(status)), ("content-type", "application/json; charset=UTF-8"),
                ("content-length", str(len(body)))] + extra, body

    # -- the OAuth token endpoint ------------------------------------------------------
    def token_endpoint(self, headers, body, body_length):
        try:
            grant = self.exchange(headers, body, body_length)
        except OAuthReject as r:
            with self.lock:
                self.token_errors[f"{r.status} {r.error}"] += 1
            extra = [("allow", "POST")] if r.status == 405 else []
            reply = {"error": r.error, "error_description": r.description}
            return r.status, extra, json.dumps(reply).encode()
        token = "ya29." + secrets.token_urlsafe(96)
        with self.lock:
            self.grants[token] = grant
            self.tokens_issued += 1
        reply = {"access_token": token, "expires_in": self.token_lifetime, "token_type": "Bearer"}
        return 200, [("cache-control", "no-store"), ("pragma", "no-cache")], json.dumps(reply).encode()

    def exchange(self, headers, body, body_length):
        """Checks a token request; returns the grant to store for the new access token."""
        if headers.get(":method") != "POST":
            raise OAuthReject(405, "invalid_request", "The token endpoint only accepts POST.")
        if not media_type(headers.get("content-type"), "application/x-www-form-urlencoded"):
            raise OAuthReject(400, "invalid_request",
                              "Content-Type must be application/x-www-form-urlencoded.")
        if body_length > MAX_BODY:
            raise OAuthReject(400, "invalid_request", "Request too large.")
        try:
            pairs = urllib.parse.parse_qsl(bytes(body).decode("ascii"), keep_blank_values=True,
                                           strict_parsing=bool(body), encoding="utf-8", errors="strict")
        except ValueError:
            raise OAuthReject(400, "invalid_request", "Malformed form body.")
        form = {}
        for name, value in pairs:
            if name in form:
                raise OAuthReject(400, "invalid_request", f"Duplicate parameter: {name}")
            form[name] = value
        grant_type = form.get("grant_type")
        if not grant_type:
            raise OAuthReject(400, "invalid_request", "Missing required parameter: grant_type")
        if grant_type != JWT_BEARER:
            raise OAuthReject(400, "unsupported_grant_type", f"Invalid grant_type: {grant_type}")
        assertion = form.get("assertion")
        if not assertion:
            raise OAuthReject(400, "invalid_request", "Missing required parameter: assertion")
        try:
            parts = assertion.split(".")
            if len(parts) != 3:
                raise ValueError("not three parts")
            header, claims = json.loads(b64url(parts[0])), json.loads(b64url(parts[1]))
            signature = b64url(parts[2])
            if not isinstance(header, dict) or not isinstance(claims, dict):
                raise ValueError("not objects")
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise OAuthReject(400, "invalid_grant", "Invalid JWT: malformed assertion.")
        if header.get("alg") != "RS256" or header.get("typ", "JWT") != "JWT" \
                or not isinstance(header.get("kid"), str):
            raise OAuthReject(400, "invalid_grant", "Invalid JWT Signature.")
        email = claims.get("iss")
        keys = self.accounts.get(email) if isinstance(email, str) else None
        if keys is None:
            raise OAuthReject(400, "invalid_grant", "Invalid grant: account not found")
        key = keys.get(header["kid"])
        if key is None:
            raise OAuthReject(400, "invalid_grant", "Invalid JWT Signature.")
        try:
            key.verify(signature, (parts[0] + "." + parts[1]).encode(), padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            raise OAuthReject(400, "invalid_grant", "Invalid JWT Signature.")
        if claims.get("aud") != self.token_uri:
            raise OAuthReject(400, "invalid_grant",
                              f"Invalid JWT: Failed audience check. The right audience is {self.token_uri}")
        iat, exp, now = claims.get("iat"), claims.get("exp"), time.time()
        if not (is_int(iat) and is_int(exp)) or iat > now + 300 or exp <= now \
                or not 0 < exp - iat <= 3600:
            raise OAuthReject(400, "invalid_grant", SHORT_LIVED)
        scope = claims.get("scope")
        if not isinstance(scope, str) or not scope.split():
            raise OAuthReject(400, "invalid_scope", "Invalid OAuth scope or ID token audience provided.")
        if claims.get("sub", email) != email:
            raise OAuthReject(401, "unauthorized_client",
                              "Client is unauthorized to retrieve access tokens using this method.")
        return (now, now + self.token_lifetime, email, bool(SEND_SCOPES & set(scope.split())))

    # -- the messages endpoint ---------------------------------------------------------
    def send_endpoint(self, headers, body, body_length, route):
        try:
            record = self.validate(headers, body, body_length, route)
        except Reject as r:
            extra = []
            if r.retry_after is not None:
                extra.append(("retry-after", str(r.retry_after)))
            if r.authenticate:
                extra.append(("www-authenticate", r.authenticate))
            with self.lock:
                self.requests += 1
                self.rejected[r.stats_key()] += 1
            return r.status, extra, r.body()
        reply = json.dumps({"name": record["name"]}).encode()
        with self.lock:
            self.requests += 1
            if record.get("validate_only"):
                self.validated += 1
                return 200, [], reply
            self.accepted += 1
            self.waiters.counted(self.accepted)
            self.used_tokens.add(record["access_token"])
            self.record.write(json.dumps(record) + "\n")
            self.record.flush()
        return 200, [], reply

    def authorize(self, value):
        """The grant of the access token in an authorization header, or a Reject."""
        realm = 'Bearer realm="https://accounts.google.com/"'
        if value is None:
            raise Reject(401, MISSING_CREDENTIALS, info="CREDENTIALS_MISSING", authenticate=realm)
        scheme, _, token = value.partition(" ")
        grant = self.grants.get(token) if scheme.lower() == "bearer" else None
        if grant is None:
            raise Reject(401, UNAUTHENTICATED, info="ACCESS_TOKEN_TYPE_UNSUPPORTED",
                         authenticate=realm + ', error="invalid_token"')
        if time.time() >= grant[1]:
            raise Reject(401, UNAUTHENTICATED, info="ACCESS_TOKEN_EXPIRED",
                         authenticate=realm + ', error="invalid_token"')
        if not grant[3]:
            raise Reject(403, "Request had insufficient authentication scopes.",
                         info="ACCESS_TOKEN_SCOPE_INSUFFICIENT",
                         authenticate=realm + ', error="insufficient_scope", scope="'
                         + " ".join(sorted(SEND_SCOPES)) + '"')
        return token, grant

    def validate(self, h, body, body_length, route):
        match = SEND_PATH_RE.fullmatch(route)
        if not match or h.get(":method") != "POST":
            raise Reject(404, "Requested entity was not found.")
        token, grant = self.authorize(h.get("authorization"))
        project = match.group(1)
        if project not in self.projects:
            raise Reject(404, "Requested entity was not found.")
        if not media_type(h.get("content-type"), "application/json"):
            raise Reject(400, "Invalid JSON payload received. Content-Type must be application/json.")
        if body_length > MAX_BODY:
            raise Reject(400, f"Request payload size exceeds the limit: {MAX_BODY} bytes.")
        try:
            request = json.loads(bytes(body).decode("utf-8"), parse_constant=reject_constant)
            json.dumps(request, ensure_ascii=False).encode("utf-8")  # lone surrogates
        except (ValueError, RecursionError, UnicodeError) as e:
            raise Reject(400, f"Invalid JSON payload received. {str(e)[:120]}", field="")
        if not isinstance(request, dict):
            raise Reject(400, "Invalid JSON payload received. Expected an object.", field="")
        check_value(request, SEND_REQUEST, "")
        message = member(request, "message")
        if message is None:
            raise Reject(400, "Invalid JSON payload received. Missing required field 'message'.",
                         field="message")
        targets = [name for name in ("token", "topic", "condition") if member(message, name) is not None]
        if len(targets) > 1:
            raise Reject(400, f"Invalid value at 'message' (oneof), oneof field 'target' is already "
                         f"set. Cannot set '{targets[1]}'", field=f"message.{targets[1]}")
        self.check_message(message, targets)
        validate_only = member(request, "validate_only") is True
        target = member(message, targets[0])
        failure = self.failures.take(*([target] if targets[0] == "token" else []), ALL)
        if failure:
            status, code, text, retry_after = failure
            raise Reject(status, text, error_code=code, retry_after=retry_after)
        if validate_only:
            return {"name": f"projects/{project}/messages/fake_message_id", "validate_only": True}
        now = time.time()
        return {"time": int(now * 1000),
                "name": f"projects/{project}/messages/0:{int(now * 1e6)}%{os.urandom(8).hex()}",
                "project": project, "token": member(message, "token"),
                "topic": member(message, "topic"), "condition": member(message, "condition"),
                "message": message, "client_email": grant[2], "access_token": token,
                "access_token_age_s": round(now - grant[0], 3)}

    @staticmethod
    def check_message(message, targets):
        """FCM's own checks of a message that parsed (step 8 of the spec)."""
        def bad(text):
            return Reject(400, text, error_code="INVALID_ARGUMENT")
        if not targets:
            raise bad("Recipient of the message is not set.")
        target = member(message, targets[0])
        if targets[0] == "token" and not TOKEN_RE.fullmatch(target):
            raise bad("The registration token is not a valid FCM registration token")
        if targets[0] == "topic" and not TOPIC_RE.fullmatch(target):
            raise bad("Invalid topic name")
        if targets[0] == "condition" and not target.strip():
            raise bad("Invalid condition expression")
        android = member(message, "android") or {}
        size = 0
        for data in (member(message, "data"), member(android, "data")):
            for key, value in (data or {}).items():
                if key in ("from", "message_type") or key.startswith(("google", "gcm")):
                    raise bad(f"Invalid data key: {key}")
                size += len(key.encode("utf-8")) + len(value.encode("utf-8"))
        for notification in (member(message, "notification"), member(android, "notification")):
            for name in ("title", "body", "image"):
                size += len((member(notification, name) or "").encode("utf-8"))
        ttl = member(android, "ttl")
        if ttl is not None and int(DURATION_RE.fullmatch(ttl).group(1)) > MAX_TTL:
            raise bad("TTL exceeds the maximum of 4 weeks (2419200s)")
        if size > (4096 if targets[0] == "token" else 2048):
            raise bad("Message is too big")


def parse_failure(req, with_token):
    """A /fail or /fail-all body -> (token or ALL, failure, count); ValueError if malformed."""
    if not isinstance(req, dict):
        raise ValueError
    token = req.get("token") if with_token else ALL
    status, code, message = req.get("status"), req.get("error_code"), req.get("message")
    retry_after, count = req.get("retry_after"), req.get("count") or 0
    if (with_token and (not isinstance(token, str) or not token)) \
            or not is_int(status) or not 400 <= status <= 599 \
            or (code is not None and code not in ERROR_MESSAGES) \
            or (message is not None and not isinstance(message, str)) \
            or (retry_after is not None and (not is_int(retry_after) or retry_after < 0)) \
            or not is_int(count) or count < 0:
        raise ValueError
    if message is None:
        message = ERROR_MESSAGES.get(code) or {
            400: "Request contains an invalid argument.", 401: UNAUTHENTICATED,
            403: "The caller does not have permission", 404: "Requested entity was not found.",
            429: "Resource has been exhausted (e.g. check quota).",
            503: "The service is currently unavailable."}.get(status, "Internal error encountered.")
    return token, (status, code, message, retry_after), count


def control_handler(simulator):
    class Handler(control.StatsHandler):
        sim = simulator
        max_body = MAX_BODY

        def do_POST(self):
            raw = self.read()
            if self.path == "/reset":
                simulator.reset()
                return self.reply(200, {"ok": True})
            if self.path == "/revoke-tokens":
                return self.reply(200, {"ok": True, "revoked": simulator.revoke()})
            if self.path not in ("/fail", "/fail-all"):
                return self.reply(404, {"error": "not found"})
            try:
                token, failure, count = parse_failure(json.loads(raw), self.path == "/fail")
            except (ValueError, RecursionError):
                return self.reply(400, {"error": "want {" + ("token, " if self.path == "/fail" else "")
                                        + "status, error_code?, message?, retry_after?, count?}"})
            simulator.failures.inject(token, failure, count)
            self.reply(200, {"ok": True})

    return Handler


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name in ("cert", "key", "record"):
        p.add_argument("--" + name, required=True)
    for name in ("service-account-key", "key-id", "client-email", "project"):
        p.add_argument("--" + name, action="append", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--control-port", type=int, required=True)
    p.add_argument("--token-uri", help="the service account's token_uri (default https://localhost:P/token)")
    p.add_argument("--token-lifetime", type=int, default=3600, help="expires_in of access tokens, seconds")
    p.add_argument("--ready-file")
    args = p.parse_args()
    if args.token_lifetime <= 0:
        p.error("--token-lifetime must be positive")

    sim = Simulator(args)
    tls = certs.server_context(args.cert, args.key, "h2")
    server = H2Server(sim, args.port, tls, "fcm_simulator", sim.count, MAX_BODY_KEPT, strict_preface=True)
    process.serve_in_threads([control.control_server(args.control_port, control_handler(sim))])
    try:
        with process.running(args.ready_file):
            server.serve()
    finally:
        with sim.lock:
            sim.record.close()

if __name__ == "__main__":
    main()
