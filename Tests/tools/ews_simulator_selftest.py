#!/usr/bin/env python3
"""Self-test for ews_simulator.py (make test runs it after the Swift tests).

Starts the simulator on free ports with a throwaway --tls-dir, plus a small HTTPS
callback receiver (a self-signed "localhost" certificate, like ENS's nginx one, given
to the simulator as --callback-ca). Then drives every feature with urllib, ssl and
http.client: the TLS material, every Autodiscover mode (POX, SOAP, plain-HTTP redirect,
redirectAddr, redirectUrl loop), the three authentication methods, every EWS check and
operation, failure injection, SendNotification callbacks (format, OK, Unsubscribe,
retries and death, timeouts, heartbeats), the OAuth token endpoint (every check, rotation,
reuse detection, expiry, revocation, injected failures) and its access tokens at EWS and
Autodiscover, the records, logging hygiene, keep-alive,
SIGTERM, and certificate regeneration when --domains changes. Exits 0 when everything
passed, 1 (with the failed check) otherwise. Takes about 15 s.

Usage: python3 Tests/tools/ews_simulator_selftest.py
"""
import base64
import http.client
import ipaddress
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler
from xml.sax.saxutils import escape

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtensionOID, NameOID

from simlib import certs, selftest
from simlib.selftest import check, free_port, wait_for

SOAP = "http://schemas.xmlsoap.org/soap/envelope/"
M = "http://schemas.microsoft.com/exchange/services/2006/messages"
T = "http://schemas.microsoft.com/exchange/services/2006/types"
E = "http://schemas.microsoft.com/exchange/services/2006/errors"
POX_REQ = "http://schemas.microsoft.com/exchange/autodiscover/outlook/requestschema/2006"
POX_RESP = "http://schemas.microsoft.com/exchange/autodiscover/responseschema/2006"
POX_RESP_A = "http://schemas.microsoft.com/exchange/autodiscover/outlook/responseschema/2006a"
AD = "http://schemas.microsoft.com/exchange/2010/Autodiscover"
WSA = "http://www.w3.org/2005/08/addressing"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
SECRETS = ["alice-Pa55word", "bob-oauth-token-XYZ", "frank-pw-77", "dave-secret-9"]


def basic(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# -- the callback receiver (plays ENS's callback endpoint) ---------------------------------
RESULT_M = (f'<?xml version="1.0" encoding="utf-8"?><s:Envelope xmlns:s="{SOAP}"><s:Body>'
            f'<m:SendNotificationResult xmlns:m="{M}"><m:SubscriptionStatus>{{}}'
            '</m:SubscriptionStatus></m:SendNotificationResult></s:Body></s:Envelope>')
RESULT_DEFAULT_NS = (f'<Envelope xmlns="{SOAP}"><Body><SendNotificationResult xmlns="{M}">'
                     '<SubscriptionStatus>OK</SubscriptionStatus></SendNotificationResult>'
                     '</Body></Envelope>')


class Receiver(selftest.Receiver):
    """Records every callback; answers per path according to `behaviour`."""

    def __init__(self, certfile, keyfile):
        self.lock = threading.Lock()
        self.got = []          # (path, headers dict, body bytes)
        self.behaviour = {}    # path (no query) -> ok|default|unsub|fail|badxml|flaky|slow|lower
        self.hits = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = self.path.split("?", 1)[0]
                with receiver.lock:
                    receiver.got.append((self.path, dict(self.headers.items()), body))
                    receiver.hits[path] = receiver.hits.get(path, 0) + 1
                    hit = receiver.hits[path]
                    how = receiver.behaviour.get(path, "ok")
                status, ctype, out = 200, "text/xml; charset=utf-8", None
                if how == "ok":
                    out = RESULT_M.format("OK")
                elif how == "default":
                    out = RESULT_DEFAULT_NS
                elif how == "unsub":
                    out = RESULT_M.format("Unsubscribe")
                elif how == "lower":
                    out = RESULT_M.format("ok")
                elif how == "fail":
                    status, out = 500, ""
                elif how == "badxml":
                    out = "<s:Envelope"
                elif how == "flaky":
                    status, out = (503, "") if hit == 1 else (200, RESULT_M.format("OK"))
                elif how == "slow":
                    time.sleep(1.6)
                    out = RESULT_M.format("OK")
                out = out.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        super().__init__(certfile, keyfile, Handler)

    def for_path(self, path):
        with self.lock:
            return [g for g in self.got if g[0].split("?", 1)[0] == path]


# -- talking to the simulator --------------------------------------------------------------
class Conn(http.client.HTTPSConnection):
    """HTTPS to 127.0.0.1:port while presenting `host` (SNI, verification, Host header),
    like libcurl's CONNECT_TO."""

    def __init__(self, host, port, context):
        super().__init__(host, port, context=context, timeout=20)
        self.real_port = port

    def connect(self):
        sock = socket.create_connection(("127.0.0.1", self.real_port), self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


class Sim:
    def __init__(self, port, http_port, control_port, ca, client_cert=None):
        self.port, self.http_port, self.control_port = port, http_port, control_port
        self.ctx = ssl.create_default_context(cafile=ca)
        self.conns = {}
        self.cert_ctx = None

    def control(self, path, body=None):
        return selftest.control_call(self.control_port, "GET" if body is None else "POST", path, body)

    def ok(self, path, body=None):
        return selftest.control(self.control_port, "GET" if body is None else "POST", path, body)

    def post(self, host, path, body, headers=None, ctx=None, fresh=False):
        """-> (status, headers dict (lowercase), body bytes, connection)."""
        key = (host, id(ctx))
        conn = self.conns.get(key)
        if conn is None or fresh:
            conn = Conn(host, self.port, ctx or self.ctx)
            if not fresh:
                self.conns[key] = conn
        h = {"Content-Type": "text/xml; charset=utf-8"}
        h.update(headers or {})
        h = {k: v for k, v in h.items() if v is not None}
        conn.request("POST", path, body.encode() if isinstance(body, str) else body, h)
        r = conn.getresponse()
        data = r.read()
        check(r.getheader("Content-Length") == str(len(data)), "Content-Length always set")
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data, conn

    def plain_get(self, host, path, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=10)
        h = {"Host": host}
        h.update(headers or {})
        conn.request("GET", path, headers=h)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def envelope(op, version="Exchange2010_SP2", soap_ns=SOAP, header=True):
    head = (f'<soap:Header><t:RequestServerVersion Version="{version}"/></soap:Header>'
            if header else "")
    return (f'<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="{soap_ns}"'
            f' xmlns:m="{M}" xmlns:t="{T}">{head}<soap:Body>{op}</soap:Body></soap:Envelope>')


def subscribe_op(url, freq=1440, watermark=None, folder="inbox", events=("NewMailEvent",),
                 swap=False):
    parts = [f'<t:FolderIds><t:DistinguishedFolderId Id="{folder}"/></t:FolderIds>',
             "<t:EventTypes>" + "".join(f"<t:EventType>{e}</t:EventType>" for e in events)
             + "</t:EventTypes>"]
    if swap:
        parts.reverse()
    if watermark is not None:
        parts.append(f"<t:Watermark>{watermark}</t:Watermark>")
    parts += [f"<t:StatusFrequency>{freq}</t:StatusFrequency>", f"<t:URL>{escape(url)}</t:URL>"]
    return f"<m:Subscribe><m:PushSubscriptionRequest>{''.join(parts)}</m:PushSubscriptionRequest></m:Subscribe>"


def get_item_op(ids, shape="IdOnly", props=("item:Subject", "message:From", "item:DateTimeReceived")):
    add = ("<t:AdditionalProperties>" + "".join(f'<t:FieldURI FieldURI="{p}"/>' for p in props)
           + "</t:AdditionalProperties>") if props else ""
    return (f"<m:GetItem><m:ItemShape><t:BaseShape>{shape}</t:BaseShape>{add}</m:ItemShape>"
            "<m:ItemIds>" + "".join(f'<t:ItemId Id="{i}"/>' for i in ids) + "</m:ItemIds></m:GetItem>")


GET_FOLDER = ('<m:GetFolder><m:FolderShape><t:BaseShape>Default</t:BaseShape></m:FolderShape>'
              '<m:FolderIds><t:DistinguishedFolderId Id="inbox"/></m:FolderIds></m:GetFolder>')


def pox_request(email, schema=POX_RESP_A, ns=POX_REQ):
    return (f'<?xml version="1.0" encoding="utf-8"?><Autodiscover xmlns="{ns}"><Request>'
            f"<EMailAddress>{email}</EMailAddress><AcceptableResponseSchema>{schema}"
            "</AcceptableResponseSchema></Request></Autodiscover>")


def soap_ad_request(host, email, settings=("ExternalEwsUrl", "EwsSupportedSchemas"), ad_ns=AD):
    return (f'<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="{SOAP}"'
            f' xmlns:a="{ad_ns}" xmlns:wsa="{WSA}"><soap:Header>'
            "<a:RequestedServerVersion>Exchange2013</a:RequestedServerVersion>"
            f"<wsa:Action>{AD}/Autodiscover/GetUserSettings</wsa:Action>"
            f"<wsa:To>https://{host}/autodiscover/autodiscover.svc</wsa:To></soap:Header>"
            "<soap:Body><a:GetUserSettingsRequestMessage><a:Request><a:Users><a:User>"
            f"<a:Mailbox>{email}</a:Mailbox></a:User></a:Users><a:RequestedSettings>"
            + "".join(f"<a:Setting>{s}</a:Setting>" for s in settings)
            + "</a:RequestedSettings></a:Request></a:GetUserSettingsRequestMessage></soap:Body>"
            "</soap:Envelope>")


def xml(data):
    return ET.fromstring(data)


def fault_code(data):
    el = xml(data).find(f".//{{{E}}}ResponseCode")
    return el.text if el is not None else None


def messages(data, name):
    return xml(data).findall(f".//{{{M}}}{name}ResponseMessage")


def response_code(msg):
    return msg.find(f"{{{M}}}ResponseCode").text


def text(el, path):
    found = el.find(path)
    return None if found is None else found.text


# -- OAuth token endpoint -------------------------------------------------------------------
FORM = "application/x-www-form-urlencoded"
EWS_SCOPE = "https://outlook.office365.com/EWS.AccessAsUser.All offline_access"
OAUTH_TOKENS = []   # every token value seen: none may reach the simulator's log


def form(*pairs, **fields):
    return urllib.parse.urlencode(list(pairs) + list(fields.items()))


def refresh_form(rt, client_id="ens-app", **extra):
    return form(grant_type="refresh_token", client_id=client_id, refresh_token=rt, **extra)


def token_request(sim, body, headers=None, path="/oauth2/token", method="POST", ctype=FORM):
    """-> (status, headers (lowercase), JSON object or None, raw body)."""
    conn = getattr(sim, "token_conn", None)
    if conn is None:
        conn = sim.token_conn = Conn("login.example.test", sim.port, sim.ctx)
    h = {} if ctype is None else {"Content-Type": ctype}
    h.update(headers or {})
    data = body.encode() if isinstance(body, str) else body
    conn.request(method, path, data, h)
    r = conn.getresponse()
    raw = r.read()
    hd = {k.lower(): v for k, v in r.getheaders()}
    check(r.getheader("Content-Length") == str(len(raw)), "token endpoint: Content-Length")
    check(hd.get("cache-control") == "no-store" and hd.get("pragma") == "no-cache",
          f"token endpoint {r.status}: no-store headers")
    obj = None
    if raw:
        check(hd.get("content-type") == "application/json;charset=UTF-8", "token endpoint: JSON")
        obj = json.loads(raw)
        if r.status == 200:
            OAUTH_TOKENS.extend([obj["access_token"], obj["refresh_token"]])
        else:
            check(set(obj) == {"error", "error_description"}, f"error body fields {obj}")
            check(b"rt." not in raw and b"eyJ" not in raw, "error bodies echo no token")
    return r.status, hd, obj, raw


def expect_error(sim, body, status, error, what, **kw):
    st, hd, obj, _ = token_request(sim, body, **kw)
    check(st == status and obj is not None and obj["error"] == error,
          f"{what}: want {status} {error}, got {st} {obj}")
    if error == "invalid_client":
        check(hd.get("www-authenticate") == 'Basic realm="sim"', f"{what}: WWW-Authenticate")
    return obj


def grants_of(sim, email):
    return [g for g in sim.ok("/oauth/grants") if g["email"] == email]


def jwt_part(token, i):
    part = token.split(".")[i]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def oauth_checks(sim):
    EWS = "/EWS/Exchange.asmx"
    OLGA = "olga@example.test"
    sim.ok("/mailboxes", {"email": OLGA, "userName": "olga", "password": "olga-pw-5"})

    def ews(token, anchor=OLGA):
        st, hd, body, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER),
                                   {"Authorization": "Bearer " + token, "X-AnchorMailbox": anchor})
        return st, hd, body

    def ews_ok(token, what):
        st, _, body = ews(token)
        check(st == 200 and text(xml(body), f".//{{{T}}}DisplayName") == "Inbox", f"{what}: {st}")

    def ews_invalid(token, what):
        st, hd, body = ews(token)
        check(st == 401 and body == b"" and hd.get("www-authenticate")
              == 'Basic realm="sim", Bearer error="invalid_token"', f"{what}: {st} {hd}")

    # clients: validation
    for bad in ({"clientId": ""}, {"clientId": "a b"}, {"clientId": 7}, {},
                {"clientId": "x", "accessLifetime": 0}, {"clientId": "x", "accessLifetime": "60"},
                {"clientId": "x", "accessLifetime": True}, {"clientId": "x", "refreshLifetime": -1},
                {"clientId": "x", "rotate": "no"}, {"clientId": "x", "accessTokenBytes": 63},
                {"clientId": "x", "accessTokenBytes": 8193}, {"clientId": "x", "accessTokenBytes": 100.0},
                {"clientId": "x", "scope": ""}, {"clientId": "x", "scope": "a  b"},
                {"clientId": "x", "scope": 'a"b'}, {"clientId": "x", "accesslifetime": 60}):
        check(sim.control("/oauth/clients", bad)[0] == 400, f"/oauth/clients rejects {bad}")
    sim.ok("/oauth/clients", {"clientId": "ens-app"})
    sim.ok("/oauth/clients", {"clientId": "other-app", "scope": "offline_access"})
    check(sim.control("/oauth/grants", {"email": "nobody@example.test", "clientId": "ens-app"})[0] == 404,
          "grant for an unknown mailbox -> 404")
    check(sim.control("/oauth/grants", {"email": OLGA, "clientId": "no-app"})[0] == 404,
          "grant for an unknown client -> 404")
    check(sim.control("/oauth/grants", {"email": OLGA, "clientId": "ens-app", "x": 1})[0] == 400,
          "grant with an unknown key -> 400")
    check(sim.control("/oauth/grants", {"email": OLGA})[0] == 400, "grant without clientId -> 400")

    # a grant: JWT-looking, long access token; opaque refresh token
    g = sim.ok("/oauth/grants", {"email": "Olga@Example.test", "clientId": "ens-app"})
    a1, rt1 = g["accessToken"], g["refreshToken"]
    OAUTH_TOKENS.extend([a1, rt1])
    check(set(g) == {"ok", "grantId", "accessToken", "refreshToken", "expiresIn", "scope"}
          and g["expiresIn"] == 3600 and g["scope"] == EWS_SCOPE, f"grant answer {set(g)}")
    check(a1.startswith("eyJ") and a1.count(".") == 2 and len(a1) > 1600, f"JWT-like access token ({len(a1)})")
    check(jwt_part(a1, 0)["typ"] == "JWT" and jwt_part(a1, 1)["upn"] == OLGA
          and jwt_part(a1, 1)["appid"] == "ens-app", "access token claims")
    check(rt1.startswith("rt.") and len(rt1) == 67 and "." not in rt1[3:], "opaque refresh token")

    # the access token opens EWS and Autodiscover like a static oauthToken
    ews_ok(a1, "grant access token opens EWS")
    st, _, _ = ews(a1, anchor=None)
    check(st == 401, "grant access token without X-AnchorMailbox -> 401")
    st, hd, _ = ews(a1, anchor="bob@example.test")
    check(st == 401 and "invalid_token" not in hd.get("www-authenticate", ""),
          "grant access token with another anchor -> plain 401")
    st, _, body, _ = sim.post("autodiscover.example.test", "/autodiscover/autodiscover.xml",
                              pox_request(OLGA), {"Authorization": "Bearer " + a1, "X-AnchorMailbox": OLGA})
    check(st == 200 and b"EwsUrl" in body, f"grant access token opens Autodiscover {st}")
    st, hd, _ = ews("eyJ" + a1[3:-8] + "AAAAAAAA")
    check(st == 401 and hd.get("www-authenticate") == 'Basic realm="sim", Bearer',
          "unknown bearer -> plain challenge")

    # refresh with rotation
    st, hd, obj, _ = token_request(sim, refresh_form(rt1))
    check(st == 200 and set(obj) == {"token_type", "access_token", "expires_in", "scope", "refresh_token"},
          f"refresh -> 200 {st} {obj if st != 200 else ''}")
    check(obj["token_type"] == "Bearer" and obj["expires_in"] == 3600 and type(obj["expires_in"]) is int
          and obj["scope"] == EWS_SCOPE, "refresh answer values")
    a2, rt2 = obj["access_token"], obj["refresh_token"]
    check(rt2 != rt1 and rt2.startswith("rt.") and a2 != a1 and a2.startswith("eyJ"), "rotation")
    ews_ok(a2, "refreshed access token opens EWS")
    ews_ok(a1, "the earlier access token still works")
    [gr] = grants_of(sim, OLGA)
    check(gr["refreshes"] == 1 and gr["accessTokensLive"] == 2 and not gr["revoked"]
          and not gr["reuseDetected"] and gr["clientId"] == "ens-app" and gr["id"] == g["grantId"]
          and gr["refusals"] == 0, f"/oauth/grants after a refresh {gr}")
    check(not any(isinstance(v, str) and ("rt." in v or "eyJ" in v) for v in gr.values()),
          "/oauth/grants shows no token")
    # the tenant path, any case, a charset utf-8 parameter
    st, _, obj, _ = token_request(sim, refresh_form(rt2), path="/Contoso.onmicrosoft.com/OAuth2/V2.0/Token",
                                  ctype=FORM + "; charset=UTF-8")
    check(st == 200, f"/<tenant>/oauth2/v2.0/token -> {st} {obj}")
    rt3 = obj["refresh_token"]
    for path in ("/oauth2/v2.0/token", "/a/b/oauth2/v2.0/token", "/oauth2/token/", "/t_x/oauth2/v2.0/token"):
        st, _, _, _, = sim.post("login.example.test", path, refresh_form(rt3), {"Content-Type": FORM})
        check(st == 404, f"{path} -> 404")

    # the checks in order
    st, hd, obj, _ = token_request(sim, None, method="GET", ctype=None)
    check(st == 405 and hd.get("allow") == "POST" and obj is None, "GET -> 405")
    expect_error(sim, refresh_form(rt3), 400, "invalid_request", "a query", path="/oauth2/token?x=1")
    expect_error(sim, refresh_form(rt3), 400, "invalid_request", "a bare ?", path="/oauth2/token?")
    for ctype in ("text/plain", "application/json", None, FORM + "; charset=ISO-8859-1",
                  "multipart/form-data"):
        expect_error(sim, refresh_form(rt3), 400, "invalid_request", f"Content-Type {ctype}", ctype=ctype)
    expect_error(sim, refresh_form(rt3), 401, "invalid_client", "Authorization Basic",
                 headers={"Authorization": basic("ens-app", "secret")})
    expect_error(sim, refresh_form(rt3), 401, "invalid_client", "Authorization Bearer",
                 headers={"Authorization": "Bearer " + a2})
    expect_error(sim, refresh_form(rt3, client_secret="s3cret"), 401, "invalid_client", "client_secret")
    expect_error(sim, refresh_form(rt3, client_secret=""), 401, "invalid_client", "empty client_secret")
    expect_error(sim, refresh_form(rt3, client_assertion="eyJx.y.z",
                                   client_assertion_type="urn:ietf:params:oauth:client-assertion-type:jwt-bearer"),
                 401, "invalid_client", "client_assertion")
    for body, what in (("grant_type=refresh_token&&client_id=ens-app", "an empty field"),
                       (refresh_form(rt3) + "&", "a trailing &"),
                       ("grant_type=refresh_token&client_id", "a field without ="),
                       ("=x&" + refresh_form(rt3), "a nameless parameter"),
                       ("grant_type=refresh_token&client_id=ens-%FF", "percent-encoded non-UTF-8"),
                       (b"grant_type=refresh_token&client_id=ens-\xff", "raw non-UTF-8"),
                       ("&".join(f"p{i}=1" for i in range(65)), "65 fields")):
        expect_error(sim, body, 400, "invalid_request", what)
    expect_error(sim, refresh_form(rt3) + "&grant_type=refresh_token", 400, "invalid_request",
                 "grant_type twice")
    expect_error(sim, refresh_form(rt3) + "&refresh_token=" + urllib.parse.quote(rt3), 400,
                 "invalid_request", "refresh_token twice")
    expect_error(sim, refresh_form(rt3) + "&scope=&scope=", 400, "invalid_request", "empty scope twice")
    expect_error(sim, form(client_id="ens-app", refresh_token=rt3), 400, "invalid_request", "no grant_type")
    expect_error(sim, form(grant_type="", client_id="ens-app", refresh_token=rt3), 400, "invalid_request",
                 "empty grant_type")
    for gt in ("authorization_code", "password", "client_credentials", "Refresh_Token",
               "urn:ietf:params:oauth:grant-type:device_code"):
        expect_error(sim, form(grant_type=gt, client_id="ens-app", refresh_token=rt3, code="c",
                               username="u", password="p"), 400, "unsupported_grant_type", gt)
    expect_error(sim, form(grant_type="refresh_token", refresh_token=rt3), 400, "invalid_request",
                 "no client_id")
    expect_error(sim, refresh_form(rt3, client_id="stranger-app"), 401, "invalid_client", "unknown client")
    expect_error(sim, form(grant_type="refresh_token", client_id="ens-app"), 400, "invalid_request",
                 "no refresh_token")
    expect_error(sim, refresh_form(""), 400, "invalid_request", "empty refresh_token")
    expect_error(sim, refresh_form("rt." + "A" * 64), 400, "invalid_grant", "unknown refresh token")
    expect_error(sim, refresh_form(a2), 400, "invalid_grant", "an access token as refresh token")
    expect_error(sim, refresh_form(rt3, client_id="other-app"), 400, "invalid_grant", "another client's token")
    expect_error(sim, refresh_form(rt3, scope="https://graph.microsoft.com/Mail.Read"), 400, "invalid_scope",
                 "a scope beyond the grant")
    expect_error(sim, refresh_form(rt3, scope="offline_access  " + EWS_SCOPE.split()[0]), 400,
                 "invalid_scope", "a malformed scope")
    expect_error(sim, refresh_form(rt3, scope="OFFLINE_ACCESS"), 400, "invalid_scope", "scopes are case-sensitive")
    [gr] = grants_of(sim, OLGA)
    check(not gr["revoked"] and gr["refreshes"] == 2, f"refusals do not revoke {gr}")
    refusals = gr["refusals"]
    check(refusals >= 20, f"refusals counted {refusals}")
    # a scope subset; an empty scope counts as omitted
    st, _, obj, _ = token_request(sim, refresh_form(rt3, scope="offline_access offline_access"))
    check(st == 200 and obj["scope"] == "offline_access", f"scope subset {obj}")
    ews_ok(obj["access_token"], "scope is not checked by EWS")
    st, _, obj, _ = token_request(sim, refresh_form(obj["refresh_token"], scope=""))
    check(st == 200 and obj["scope"] == EWS_SCOPE, "empty scope = the grant's scope")
    rt4, a4 = obj["refresh_token"], obj["access_token"]

    # refresh-token reuse: invalid_grant, and the whole grant is revoked
    expect_error(sim, refresh_form(rt1), 400, "invalid_grant", "reuse of a rotated refresh token")
    [gr] = grants_of(sim, OLGA)
    check(gr["revoked"] and gr["reuseDetected"] and gr["accessTokensLive"] == 0
          and gr["refusals"] == refusals + 1 and gr["refreshes"] == 4, f"reuse revokes the grant {gr}")
    expect_error(sim, refresh_form(rt4), 400, "invalid_grant", "the current token after reuse")
    for token in (a1, a2, a4):
        ews_invalid(token, "access tokens of a revoked grant")

    # /oauth/expire: EWS answers invalid_token; a refresh then works
    g2 = sim.ok("/oauth/grants", {"email": OLGA, "clientId": "ens-app"})
    OAUTH_TOKENS.extend([g2["accessToken"], g2["refreshToken"]])
    ews_ok(g2["accessToken"], "a second grant")
    sim.ok("/mailboxes", {"email": "bob@example.test", "oauthToken": "bob-oauth-token-XYZ"})
    check(sim.control("/oauth/expire", {"email": "nobody@example.test"})[0] == 404, "expire unknown -> 404")
    check(sim.control("/oauth/expire", {})[0] == 400, "expire without email -> 400")
    check(sim.ok("/oauth/expire", {"email": OLGA}) == {"ok": True, "expired": 1}, "/oauth/expire counts live tokens")
    ews_invalid(g2["accessToken"], "an expired access token -> invalid_token")
    st, _, obj, _ = token_request(sim, refresh_form(g2["refreshToken"]))
    check(st == 200, "refresh after /oauth/expire")
    ews_ok(obj["access_token"], "the refreshed token after /oauth/expire")
    check(grants_of(sim, OLGA)[1]["accessTokensLive"] == 1, "accessTokensLive after expire")
    st, _, _, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER),
                           {"Authorization": "Bearer bob-oauth-token-XYZ", "X-AnchorMailbox": "bob@example.test"})
    check(st == 200, "the static oauthToken still works")
    # /oauth/revoke
    g2_rt, g2_a = obj["refresh_token"], obj["access_token"]
    check(sim.ok("/oauth/revoke", {"email": OLGA}) == {"ok": True, "revoked": 1}, "/oauth/revoke")
    ews_invalid(g2_a, "a revoked grant's access token")
    expect_error(sim, refresh_form(g2_rt), 400, "invalid_grant", "a revoked grant's refresh token")
    check(sim.ok("/oauth/revoke", {"email": OLGA})["revoked"] == 0, "/oauth/revoke again -> 0")
    check(sim.control("/oauth/revoke", {"email": "nobody@example.test"})[0] == 404, "revoke unknown -> 404")
    check(not grants_of(sim, OLGA)[1]["reuseDetected"], "revocation is not reuse")

    # rotate false; short lifetimes; small tokens; natural expiry
    sim.ok("/oauth/clients", {"clientId": "fixed-app", "rotate": False, "accessLifetime": 0.8,
                              "accessTokenBytes": 64})
    sim.ok("/oauth/clients", {"clientId": "short-app", "refreshLifetime": 0.8})
    g3 = sim.ok("/oauth/grants", {"email": OLGA, "clientId": "fixed-app"})
    g4 = sim.ok("/oauth/grants", {"email": OLGA, "clientId": "short-app"})
    OAUTH_TOKENS.extend([g3["accessToken"], g3["refreshToken"], g4["accessToken"], g4["refreshToken"]])
    check(g3["expiresIn"] == 1 and len(g3["accessToken"]) < 600, "fractional lifetime, small token")
    fixed = []
    for _ in range(2):
        st, _, obj, _ = token_request(sim, refresh_form(g3["refreshToken"], client_id="fixed-app"))
        check(st == 200 and obj["refresh_token"] == g3["refreshToken"] and obj["expires_in"] == 1,
              f"rotate false keeps the refresh token {st}")
        fixed.append(obj["access_token"])
    check(len(set(fixed + [g3["accessToken"]])) == 3, "new access tokens each time")
    ews_ok(fixed[0], "a rotate-false access token")
    time.sleep(1.0)
    ews_invalid(fixed[0], "an access token past its lifetime")
    expect_error(sim, refresh_form(g4["refreshToken"], client_id="short-app"), 400, "invalid_grant",
                 "an expired refresh token")
    st, _, obj, _ = token_request(sim, refresh_form(g3["refreshToken"], client_id="fixed-app"))
    check(st == 200, "rotate false: still good")
    by_id = {gr["id"]: gr for gr in sim.ok("/oauth/grants")}
    check(by_id[g3["grantId"]]["refreshes"] == 3 and not by_id[g3["grantId"]]["revoked"],
          f"rotate false refreshes {by_id[g3['grantId']]}")
    # re-registering a client: new lifetimes for new tokens, grants keep working
    sim.ok("/oauth/clients", {"clientId": "fixed-app", "rotate": False, "accessLifetime": 120})
    st, _, obj, _ = token_request(sim, refresh_form(g3["refreshToken"], client_id="fixed-app"))
    check(st == 200 and obj["expires_in"] == 120 and len(obj["access_token"]) > 1600,
          "re-registered client settings apply")

    # injected Token failures
    rt = g3["refreshToken"]
    check(sim.control("/fail", {"operation": "Token", "status": 503, "count": 1})[0] == 200, "/fail Token")
    st, hd, obj, _ = token_request(sim, refresh_form(rt, client_id="fixed-app"))
    check(st == 503 and obj["error"] == "temporarily_unavailable" and "retry-after" not in hd,
          f"injected 503 {st} {obj}")
    st, _, _, _ = token_request(sim, refresh_form(rt, client_id="fixed-app"))
    check(st == 200, "count 1 used up")
    sim.ok("/fail", {"operation": "Token", "status": 429, "backOffMs": 2500, "count": 1})
    st, hd, obj, _ = token_request(sim, refresh_form(rt, client_id="fixed-app"))
    check(st == 429 and obj["error"] == "temporarily_unavailable" and hd.get("retry-after") == "3",
          f"injected 429 with Retry-After {hd}")
    sim.ok("/fail", {"operation": "Token", "status": 400, "count": 1})
    st, _, obj, raw = token_request(sim, refresh_form(rt, client_id="fixed-app"))
    check(st == 400 and raw == b"", "injected 400: empty body")
    sim.ok("/fail", {"operation": "Token", "responseCode": "server_error", "count": 1})
    st, _, obj, _ = token_request(sim, refresh_form(rt, client_id="fixed-app"))
    check(st == 400 and obj["error"] == "server_error", f"injected responseCode {obj}")
    sim.ok("/fail", {"operation": "Token", "delayMs": 300, "count": 1})
    t0 = time.monotonic()
    st, _, obj, _ = token_request(sim, refresh_form(rt, client_id="fixed-app"))
    check(st == 200 and time.monotonic() - t0 >= 0.3, "injected delay")
    sim.ok("/fail", {"operation": "Token", "status": 500})
    st, _, _, _ = token_request(sim, None, method="GET", ctype=None)
    check(st == 405, "GET does not use an injected failure")
    for _ in range(2):
        st, _, obj, _ = token_request(sim, refresh_form(rt, client_id="fixed-app"))
        check(st == 500 and obj["error"] == "temporarily_unavailable", "injected 500 until /reset")
    sim.ok("/reset", {})
    st, _, _, _ = token_request(sim, refresh_form(rt, client_id="fixed-app"))
    check(st == 200, "/reset clears Token failures")
    gr = {gr["id"]: gr for gr in sim.ok("/oauth/grants")}[g3["grantId"]]
    check(gr["refusals"] == 6 and gr["refreshes"] == 7, f"injected failures count as refusals {gr}")
    check(len(sim.ok("/oauth/grants")) == 4, "/reset keeps grants")

    # records
    recs = [r for r in sim.ok("/requests")["requests"] if r["operation"] == "Token"]
    check(len(recs) > 60 and {r["auth"] for r in recs} == {"none", "basic", "bearer"}
          and all(r["host"] == "login.example.test" for r in recs), "Token records")
    check(any(r["status"] == 405 and r["method"] == "GET" for r in recs), "405 recorded")


# -- the test ------------------------------------------------------------------------------
def run(tmp):
    tls_dir = os.path.join(tmp, "tls")
    cb_cert, cb_key = os.path.join(tmp, "cb.pem"), os.path.join(tmp, "cb.key")
    certs.write_self_signed(cb_cert, cb_key)
    receiver = Receiver(cb_cert, cb_key)
    port, http_port, control_port = free_port(), free_port(), free_port()
    ready = os.path.join(tmp, "ready.pid")
    log_path = os.path.join(tmp, "sim.log")
    log = open(log_path, "wb")
    cmd = selftest.simulator("ews_simulator.py") + [
        "--port", str(port), "--control-port", str(control_port), "--http-port", str(http_port),
        "--tls-dir", tls_dir, "--callback-ca", cb_cert, "--minute-seconds", "1",
        "--retry-scale", "0.01", "--callback-timeout", "1", "--ready-file", ready]
    proc = selftest.start(cmd, ready, stdout=log, stderr=log)
    try:
        scenario(tls_dir, receiver, port, http_port, control_port, log_path)
        selftest.stop(proc, ready)
        log.close()
        with open(log_path, "rb") as f:
            logged = f.read()
        for secret in SECRETS + [basic("alice", "alice-Pa55word").split()[1]]:
            check(secret.encode() not in logged, f"secret {secret!r} not logged")
        check(len(OAUTH_TOKENS) > 20, "OAuth tokens collected")
        for token in OAUTH_TOKENS:
            check(token.encode() not in logged and token[-40:].encode() not in logged,
                  "no OAuth token logged")
        check(b"eyJ" not in logged, "no JWT-like text logged")
        check(b"authorization" not in logged.lower(), "no Authorization header logged")
        check(b"/cb/" not in logged, "callback URLs not logged")
        check(b"Traceback" not in logged and b"internal error" not in logged,
              "no internal errors: " + logged.decode(errors="replace")[-2000:])
        check(logged.count(b"ews_simulator: POST ") > 50, "one log line per request")
        restart_with_other_domains(cmd, tls_dir, ready)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def restart_with_other_domains(cmd, tls_dir, ready):
    with open(os.path.join(tls_dir, "ca.pem"), "rb") as f:
        ca = f.read()
    with open(os.path.join(tls_dir, "server.pem"), "rb") as f:
        server = f.read()
    cmd = list(cmd)
    for flag in ("--port", "--control-port", "--http-port"):
        cmd[cmd.index(flag) + 1] = str(free_port())
    cmd += ["--domains", "example.test,other.test"]
    proc = selftest.start(cmd, ready, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with open(os.path.join(tls_dir, "ca.pem"), "rb") as f:
            check(f.read() == ca, "CA kept across restarts")
        with open(os.path.join(tls_dir, "server.pem"), "rb") as f:
            new = f.read()
        check(new != server, "server certificate regenerated when --domains changes")
        with open(os.path.join(tls_dir, "domains.txt")) as f:
            check(f.read().strip() == "example.test,other.test", "domains.txt updated")
        san = x509.load_pem_x509_certificate(new).extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value
        check("*.other.test" in san.get_values_for_type(x509.DNSName)
              and "pox.test" not in san.get_values_for_type(x509.DNSName), "new SANs")
    finally:
        selftest.stop(proc, ready, signal.SIGINT)


def scenario(tls_dir, rx, port, http_port, control_port, log_path):
    ca = os.path.join(tls_dir, "ca.pem")
    for name in ("ca.pem", "ca.key", "server.pem", "server.key", "client-ca.pem",
                 "client-ca.key", "domains.txt"):
        check(os.path.exists(os.path.join(tls_dir, name)), f"{name} generated")
    with open(os.path.join(tls_dir, "server.pem"), "rb") as f:
        cert = x509.load_pem_x509_certificate(f.read())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = san.get_values_for_type(x509.DNSName)
    for d in ("example.test", "*.example.test", "*.bench.test", "localhost"):
        check(d in dns, f"SAN {d}")
    check(ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress), "SAN IP")
    check(isinstance(cert.public_key(), ec.EllipticCurvePublicKey), "EC server key")

    sim = Sim(port, http_port, control_port, ca)
    # TLS 1.2 is enough
    ctx12 = ssl.create_default_context(cafile=ca)
    ctx12.maximum_version = ssl.TLSVersion.TLSv1_2

    # -- mailboxes and domains ------------------------------------------------------------
    sim.ok("/mailboxes", {"email": "alice@example.test", "userName": "alice",
                          "password": "alice-Pa55word", "unread": 3})
    sim.ok("/mailboxes", {"email": "bob@example.test", "oauthToken": "bob-oauth-token-XYZ"})
    carol = sim.ok("/mailboxes", {"email": "carol@example.test", "certificate": True})
    sim.ok("/mailboxes", {"email": "dave@soap.test", "userName": "SOAP\\dave",
                          "password": "dave-secret-9", "versions": ["Exchange2013_SP1"]})
    sim.ok("/mailboxes", {"email": "erin@pox.test", "userName": "erin", "password": "erin-pw"})
    sim.ok("/mailboxes", {"email": "frank@example.test", "userName": "frank",
                          "password": "frank-pw-77"})
    sim.ok("/mailboxes", {"email": "gina@redirect.test", "userName": "gina", "password": "gina-pw"})
    sim.ok("/mailboxes", {"email": "max@example.test", "userName": "max", "password": "max-pw"})
    check(sim.control("/mailboxes", {"email": "nobody"})[0] == 400, "bad mailbox rejected")
    check(sim.control("/mailboxes", {"email": "x@y.test", "versions": ["Exchange2099"]})[0] == 400,
          "unknown version rejected")
    for domain, mode, target in (("pox.test", "pox-root", None),
                                 ("example.test", "pox-autodiscover", None),
                                 ("soap.test", "soap", None),
                                 ("redirect.test", "http-redirect", None),
                                 ("addr.test", "redirect-addr", "frank@example.test"),
                                 ("loop.test", "redirect-loop", None),
                                 ("nowhere.test", "none", None)):
        sim.ok("/domains", {"domain": domain, "mode": mode, "target": target})
    check(sim.control("/domains", {"domain": "x.test", "mode": "bogus"})[0] == 400, "bad mode")
    ALICE = {"Authorization": basic("alice", "alice-Pa55word")}
    ERIN = {"Authorization": basic("erin", "erin-pw")}
    FRANK = {"Authorization": basic("frank", "frank-pw-77")}
    DAVE = {"Authorization": basic("SOAP\\dave", "dave-secret-9")}
    BOB = {"Authorization": "Bearer bob-oauth-token-XYZ", "X-AnchorMailbox": "Bob@Example.test"}
    POX = "/autodiscover/autodiscover.xml"
    SVC = "/autodiscover/autodiscover.svc"
    EWS = "/EWS/Exchange.asmx"

    # client certificate from the PKCS#12
    key, ccert, _ = pkcs12.load_key_and_certificates(base64.b64decode(carol["pkcs12"]),
                                                     carol["pkcs12Password"].encode())
    check(ccert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "carol@example.test",
          "client cert CN = email")
    check({e.oid for e in ccert.extensions} == {ExtensionOID.BASIC_CONSTRAINTS,
                                                 ExtensionOID.EXTENDED_KEY_USAGE},
          "client cert has only basicConstraints and extendedKeyUsage")
    with open(os.path.join(tls_dir, "client-ca.pem"), "rb") as f:
        client_ca = x509.load_pem_x509_certificate(f.read())
    check(ccert.issuer == client_ca.subject, "client cert issued by the client CA")
    cpath = os.path.join(os.path.dirname(tls_dir), "carol.pem")
    with open(cpath, "wb") as f:
        f.write(ccert.public_bytes(serialization.Encoding.PEM))
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    cert_ctx = ssl.create_default_context(cafile=ca)
    cert_ctx.load_cert_chain(cpath)

    # -- Autodiscover: POX ------------------------------------------------------------------
    st, hd, body, _ = sim.post("pox.test", POX, pox_request("erin@pox.test"), ERIN)
    check(st == 200 and hd["content-type"].startswith("text/xml"), f"POX pox-root {st}")
    root = xml(body)
    check(root.tag == f"{{{POX_RESP}}}Autodiscover", "POX outer namespace")
    resp = root.find(f"{{{POX_RESP_A}}}Response")
    check(resp is not None, "POX inner namespace 2006a")
    a = lambda p: "/".join(f"{{{POX_RESP_A}}}{x}" for x in p.split("/"))  # noqa: E731
    check(text(resp, a("Account/Action")) == "settings", "Action settings")
    check(text(resp, a("Account/AccountType")) == "email", "AccountType email")
    check(text(resp, a("User/DisplayName")) == "erin", "DisplayName")
    protos = {text(p, a("Type")): text(p, a("EwsUrl")) for p in resp.findall(a("Account/Protocol"))}
    check(protos.get("EXPR") == "https://mail.pox.test/EWS/Exchange.asmx"
          and protos.get("EXCH") == protos["EXPR"], f"EwsUrl in EXPR and EXCH: {protos}")
    st, _, body, _ = sim.post("Autodiscover.POX.test", POX.upper(), pox_request("erin@pox.test"), ERIN)
    check(st == 404, "pox-root: autodiscover.D -> 404")
    st, _, body, _ = sim.post("pox.test", POX, pox_request("nobody@pox.test"), ERIN)
    err = xml(body).find(f"{{{POX_RESP}}}Response/{{{POX_RESP}}}Error")
    check(st == 200 and err is not None and text(err, f"{{{POX_RESP}}}ErrorCode") == "500"
          and text(err, f"{{{POX_RESP}}}Message") == "The e-mail address cannot be found.",
          "POX unknown address -> ErrorCode 500")
    st, hd, body, _ = sim.post("pox.test", POX, pox_request("erin@pox.test"), {})
    check(st == 401 and body == b"" and hd.get("www-authenticate") == 'Basic realm="sim", Bearer',
          "POX without credentials -> 401 + WWW-Authenticate")
    st, _, _, _ = sim.post("pox.test", POX, pox_request("erin@pox.test"), ALICE)
    check(st == 401, "POX with another mailbox's credentials -> 401")
    st, _, _, _ = sim.post("pox.test", POX, pox_request("erin@pox.test"),
                           {"Authorization": basic("erin", "wrong")})
    check(st == 401, "POX wrong password -> 401")
    st, _, body, _ = sim.post("pox.test", POX, pox_request("erin@pox.test", schema=POX_RESP_A.replace(
        "http:", "https:")), ERIN)
    check(text(xml(body), f".//{{{POX_RESP}}}ErrorCode") == "601", "wrong AcceptableResponseSchema -> 601")
    st, _, body, _ = sim.post("pox.test", POX, pox_request("erin@pox.test", ns=POX_REQ.replace(
        "http:", "https:")), ERIN)
    check(text(xml(body), f".//{{{POX_RESP}}}ErrorCode") == "600", "https request namespace -> 600")
    st, _, body, _ = sim.post("pox.test", POX, "<Autodiscover", ERIN)
    check(text(xml(body), f".//{{{POX_RESP}}}ErrorCode") == "600", "malformed POX -> 600")
    st, _, _, _ = sim.post("pox.test", POX, '<!DOCTYPE x [<!ENTITY a "b">]>' + pox_request(
        "erin@pox.test")[38:], ERIN)
    check(st == 400, "DOCTYPE -> 400")
    st, _, _, _ = sim.post("pox.test", POX, pox_request("erin@pox.test"),
                           dict(ERIN, **{"Content-Type": "application/json"}))
    check(st == 400, "POX wrong Content-Type -> 400")
    # pox-autodiscover
    st, _, body, _ = sim.post("autodiscover.example.test", POX, pox_request("alice@example.test"), ALICE)
    check(st == 200 and b"https://mail.example.test/EWS/Exchange.asmx" in body, "pox-autodiscover")
    st, _, _, _ = sim.post("example.test", POX, pox_request("alice@example.test"), ALICE)
    check(st == 404, "pox-autodiscover: https://D -> 404")
    st, _, body, _ = sim.post("autodiscover.example.test", POX, pox_request("bob@example.test"), BOB)
    check(st == 200 and b"mail.example.test" in body, "POX with bearer + X-AnchorMailbox")
    st, _, _, _ = sim.post("autodiscover.example.test", POX, pox_request("bob@example.test"),
                           {"Authorization": BOB["Authorization"]})
    check(st == 401, "bearer without X-AnchorMailbox -> 401")
    st, _, _, _ = sim.post("autodiscover.example.test", POX, pox_request("bob@example.test"),
                           dict(BOB, **{"X-AnchorMailbox": "alice@example.test"}))
    check(st == 401, "bearer with another X-AnchorMailbox -> 401")
    st, _, body, _ = sim.post("autodiscover.example.test", POX, pox_request("carol@example.test"),
                              ctx=cert_ctx)
    check(st == 200 and b"carol" in body, "POX with a client certificate")
    # redirect-addr, redirect-loop, none
    st, _, body, _ = sim.post("addr.test", POX, pox_request("someone@addr.test"), FRANK)
    check(st == 200 and text(xml(body), f".//{{{POX_RESP_A}}}Action") == "redirectAddr"
          and text(xml(body), f".//{{{POX_RESP_A}}}RedirectAddr") == "frank@example.test",
          "redirect-addr")
    st, _, body, _ = sim.post("loop.test", POX, pox_request("x@loop.test"), ALICE)
    check(text(xml(body), f".//{{{POX_RESP_A}}}Action") == "redirectUrl"
          and text(xml(body), f".//{{{POX_RESP_A}}}RedirectUrl")
          == "https://loop.test/autodiscover/autodiscover.xml", "redirect-loop")
    st, _, _, _ = sim.post("loop.test", POX, pox_request("x@loop.test"), {})
    check(st == 401, "redirects need authentication")
    for host in ("nowhere.test", "autodiscover.nowhere.test", "bench.test"):
        st, _, _, _ = sim.post(host, POX, pox_request("x@nowhere.test"), ALICE)
        check(st == 404, f"none: {host} -> 404")
        st, _, _, _ = sim.post(host, SVC, "", ALICE)
        check(st == 404, f"none: {host} svc -> 404")

    # -- Autodiscover: HTTP redirect ------------------------------------------------------
    for host in ("redirect.test", "autodiscover.redirect.test"):
        st, _, _, _ = sim.post(host, POX, pox_request("gina@redirect.test"),
                               {"Authorization": basic("gina", "gina-pw")})
        check(st == 404, f"http-redirect: https {host} -> 404")
    st, hd, _ = sim.plain_get("autodiscover.redirect.test:80", POX)
    check(st == 302 and hd.get("location") == "https://mail.redirect.test/autodiscover/autodiscover.xml",
          f"http-redirect 302: {st} {hd}")
    st, _, body, _ = sim.post("mail.redirect.test", POX, pox_request("gina@redirect.test"),
                              {"Authorization": basic("gina", "gina-pw")})
    check(st == 200 and b"https://mail.redirect.test/EWS/Exchange.asmx" in body, "redirect target POX")
    st, _, _ = sim.plain_get("autodiscover.pox.test", POX)
    check(st == 404, "plain HTTP for a non-redirect domain -> 404")
    check(sim.ok("/requests")["violations"] == [], "no violations yet")
    st, _, _ = sim.plain_get("autodiscover.redirect.test", POX, {"Authorization": basic("gina", "gina-pw")})
    check(st == 400, "credentials over plain HTTP -> 400")
    viol = sim.ok("/requests")["violations"]
    check(len(viol) == 1 and "plain HTTP" in viol[0] and "gina-pw" not in viol[0], f"violation {viol}")

    # -- Autodiscover: SOAP ---------------------------------------------------------------
    st, hd, body, _ = sim.post("autodiscover.soap.test", SVC,
                               soap_ad_request("autodiscover.soap.test", "dave@soap.test"), DAVE)
    check(st == 200, f"SOAP GetUserSettings {st} {body[:300]}")
    r = xml(body).find(f".//{{{AD}}}GetUserSettingsResponseMessage/{{{AD}}}Response")
    check(text(r, f"{{{AD}}}ErrorCode") == "NoError", "SOAP ErrorCode NoError")
    ur = r.find(f"{{{AD}}}UserResponses/{{{AD}}}UserResponse")
    check(text(ur, f"{{{AD}}}ErrorCode") == "NoError", "UserResponse NoError")
    settings = {text(s, f"{{{AD}}}Name"): (text(s, f"{{{AD}}}Value"), s.get(f"{{{XSI}}}type"))
                for s in ur.findall(f"{{{AD}}}UserSettings/{{{AD}}}UserSetting")}
    check(settings.get("ExternalEwsUrl") == ("https://mail.soap.test/EWS/Exchange.asmx", "StringSetting"),
          f"ExternalEwsUrl {settings}")
    check(settings.get("EwsSupportedSchemas", ("",))[0] == "Exchange2013_SP1", "EwsSupportedSchemas")
    st, _, body, _ = sim.post("autodiscover.soap.test", SVC,
                              soap_ad_request("autodiscover.soap.test", "ghost@soap.test"), DAVE)
    check(text(xml(body), f".//{{{AD}}}UserResponse/{{{AD}}}ErrorCode") == "InvalidUser",
          "SOAP unknown user -> InvalidUser")
    st, _, body, _ = sim.post("autodiscover.soap.test", SVC,
                              soap_ad_request("autodiscover.soap.test", "dave@soap.test",
                                              ad_ns=AD.replace("http:", "https:")), DAVE)
    check(st == 400 and b"ErrorSchemaValidation" in body, "SOAP https namespace -> 400")
    st, _, body, _ = sim.post("autodiscover.soap.test", SVC,
                              soap_ad_request("autodiscover.soap.test", "dave@soap.test",
                                              settings=("InternalEwsUrl",)), DAVE)
    check(st == 400, "SOAP without ExternalEwsUrl -> 400")
    st, _, _, _ = sim.post("autodiscover.soap.test", SVC,
                           soap_ad_request("autodiscover.soap.test", "dave@soap.test"), ALICE)
    check(st == 401, "SOAP with another mailbox's credentials -> 401")
    st, _, _, _ = sim.post("autodiscover.soap.test", SVC,
                           soap_ad_request("elsewhere.test", "dave@soap.test"), DAVE)
    check(st == 400, "SOAP wsa:To for another endpoint -> 400")
    st, _, _, _ = sim.post("autodiscover.soap.test", POX, pox_request("dave@soap.test"), DAVE)
    check(st == 404, "soap mode: .xml -> 404")

    # -- EWS basics -----------------------------------------------------------------------
    st, hd, body, conn = sim.post("mail.example.test", EWS, envelope(GET_FOLDER), ALICE)
    check(st == 200 and hd["content-type"] == "text/xml; charset=utf-8", f"GetFolder {st} {body[:300]}")
    folder = xml(body).find(f".//{{{T}}}Folder")
    check(text(folder, f"{{{T}}}DisplayName") == "Inbox" and text(folder, f"{{{T}}}UnreadCount") == "3"
          and text(folder, f"{{{T}}}TotalCount") == "3", "GetFolder counts")
    inbox_id = folder.find(f"{{{T}}}FolderId").get("Id")
    check(inbox_id and folder.find(f"{{{T}}}FolderId").get("ChangeKey"), "FolderId Id/ChangeKey")
    sock = conn.sock
    # An explicit t:Mailbox opens only the authenticated mailbox (no delegation).
    def inbox_of(address):
        return GET_FOLDER.replace('<t:DistinguishedFolderId Id="inbox"/>',
                                  '<t:DistinguishedFolderId Id="inbox"><t:Mailbox><t:EmailAddress>'
                                  f'{address}</t:EmailAddress></t:Mailbox></t:DistinguishedFolderId>')
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(inbox_of("ALICE@example.test")), ALICE)
    check(st == 200 and [response_code(m) for m in messages(body, "GetFolder")] == ["NoError"],
          "GetFolder of the authenticated mailbox by address")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(inbox_of("max@example.test")), ALICE)
    check([response_code(m) for m in messages(body, "GetFolder")] == ["ErrorAccessDenied"],
          "GetFolder of another mailbox -> ErrorAccessDenied")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(inbox_of("ghost@example.test")), ALICE)
    check([response_code(m) for m in messages(body, "GetFolder")] == ["ErrorNonExistentMailbox"],
          "GetFolder of an unknown mailbox -> ErrorNonExistentMailbox")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(inbox_of("x").replace(
        "<t:EmailAddress>x</t:EmailAddress>", "<t:Name>x</t:Name>")), ALICE)
    check(fault_code(body) == "ErrorSchemaValidation", "t:Mailbox without t:EmailAddress -> schema fault")
    # A hostile domain plays an attacker's EWS: any credentials, any mailbox, Subscribe OK.
    sim.ok("/domains", {"domain": "evil.test", "mode": "hostile"})
    st, _, body, _ = sim.post("mail.evil.test", EWS, envelope(inbox_of("max@example.test")),
                              {"Authorization": basic("junk", "junk")})
    check(st == 200 and [response_code(m) for m in messages(body, "GetFolder")] == ["NoError"],
          "hostile EWS answers GetFolder for anyone")
    st, _, body, _ = sim.post("mail.evil.test", EWS, envelope(subscribe_op("https://127.0.0.1/ews/x")), {})
    check(st == 200 and [response_code(m) for m in messages(body, "Subscribe")] == ["NoError"],
          "hostile EWS answers Subscribe without credentials")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER), {"Authorization": basic("junk", "junk")})
    check(st == 401, "a hostile domain changes nothing for other hosts")
    st, _, body, conn = sim.post("mail.example.test", EWS, envelope(
        GET_FOLDER.replace('<t:DistinguishedFolderId Id="inbox"/>', f'<t:FolderId Id="{inbox_id}"/>'
                           '<t:FolderId Id="AAAA"/>')), ALICE)
    msgs = messages(body, "GetFolder")
    check([response_code(m) for m in msgs] == ["NoError", "ErrorFolderNotFound"], "GetFolder by FolderId")
    check(conn.sock is sock and sock is not None, "HTTP/1.1 keep-alive reuses the connection")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(
        GET_FOLDER.replace("Default", "IdOnly").replace(
            "</t:BaseShape>", '</t:BaseShape><t:AdditionalProperties><t:FieldURI FieldURI='
            '"folder:UnreadCount"/></t:AdditionalProperties>')), ALICE)
    f2 = xml(body).find(f".//{{{T}}}Folder")
    check(text(f2, f"{{{T}}}UnreadCount") == "3" and f2.find(f"{{{T}}}DisplayName") is None,
          "IdOnly + folder:UnreadCount")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER), ctx=cert_ctx)
    check(st == 200 and text(xml(body), f".//{{{T}}}UnreadCount") == "0", "EWS with client cert")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER), BOB)
    check(st == 200, "EWS with bearer")
    st, hd, body, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER), {})
    check(st == 401 and body == b"" and "Bearer" in hd.get("www-authenticate", ""), "EWS no creds -> 401")
    st, _, _, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER),
                           dict(ALICE, **{"X-AnchorMailbox": "bob@example.test"}))
    check(st == 401, "EWS with a foreign X-AnchorMailbox -> 401")
    st, _, _, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER),
                           dict(ALICE, **{"Content-Type": "text/xml"}))
    check(st == 415, "EWS without charset -> 415")
    st, _, _, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER),
                           dict(ALICE, **{"Content-Type": "application/soap+xml; charset=utf-8"}))
    check(st == 415, "EWS SOAP 1.2 content type -> 415")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER, soap_ns=SOAP.replace(
        "http:", "https:")), ALICE)
    check(st == 500 and fault_code(body) == "ErrorSchemaValidation", "https envelope -> schema fault")
    check(xml(body).find(f".//{{{SOAP}}}Fault/faultcode").text.endswith(":ErrorSchemaValidation"),
          "faultcode")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER + GET_FOLDER), ALICE)
    check(st == 500 and fault_code(body) == "ErrorSchemaValidation", "two operations -> schema fault")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER, header=False), ALICE)
    check(st == 500 and fault_code(body) == "ErrorSchemaValidation", "no RequestServerVersion -> fault")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER, version="Exchange2099"), ALICE)
    check(st == 500 and fault_code(body) == "ErrorInvalidServerVersion", "unknown version -> fault")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER, version="Exchange2010_SP2"), DAVE)
    check(st == 500 and fault_code(body) == "ErrorInvalidServerVersion", "version not accepted -> fault")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER, version="Exchange2013_SP1"), DAVE)
    check(st == 200, "accepted version")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(
        "<m:FindItem><m:ItemShape><t:BaseShape>IdOnly</t:BaseShape></m:ItemShape></m:FindItem>"), ALICE)
    check(st == 500 and fault_code(body) == "ErrorInvalidRequest", "unknown operation -> ErrorInvalidRequest")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(
        GET_FOLDER.replace("<m:GetFolder>", f'<GetFolder xmlns="{T}">').replace("</m:GetFolder>",
                                                                                "</GetFolder>")), ALICE)
    check(st == 500 and fault_code(body) == "ErrorSchemaValidation", "operation in the types ns -> fault")
    st, _, body, _ = sim.post("mail.example.test", EWS, "<soap:Envelope", ALICE)
    check(st == 500 and fault_code(body) == "ErrorSchemaValidation", "malformed XML -> fault")
    st, _, _, _ = sim.post("mail.example.test", EWS, '<?xml version="1.0"?><!DOCTYPE a [<!ENTITY b "c">]><a/>', ALICE)
    check(st == 400, "EWS DOCTYPE -> 400")
    # prefixes do not matter
    other = envelope(GET_FOLDER).replace("soap:", "S:").replace("xmlns:soap", "xmlns:S") \
        .replace("m:", "msg:").replace("xmlns:m=", "xmlns:msg=")
    st, _, body, _ = sim.post("mail.example.test", EWS, other, ALICE)
    check(st == 200, "other prefixes accepted")

    # -- Subscribe --------------------------------------------------------------------------
    def subscribe(op, who=ALICE, version="Exchange2010_SP2"):
        st, _, body, _ = sim.post("mail.example.test", EWS, envelope(op, version=version), who)
        return st, body

    st, body = subscribe(subscribe_op(rx.url("/cb/ok?user=alice&k=1")))
    check(st == 200, f"Subscribe {st} {body[:300]}")
    msg = messages(body, "Subscribe")[0]
    check(msg.get("ResponseClass") == "Success" and response_code(msg) == "NoError", "Subscribe success")
    sub_id, wm0 = text(msg, f"{{{M}}}SubscriptionId"), text(msg, f"{{{M}}}Watermark")
    check(sub_id and wm0 and base64.b64decode(sub_id) and base64.b64decode(wm0), "id and watermark base64")
    subs = {s["id"]: s for s in sim.ok("/subscriptions")}
    check(subs[sub_id] == {"id": sub_id, "email": "alice@example.test", "url": rx.url("/cb/ok?user=alice&k=1"),
                           "frequency": 1440, "version": "Exchange2010_SP2", "alive": True, "watermark": wm0},
          f"/subscriptions {subs.get(sub_id)}")
    for op, what in ((subscribe_op(rx.url("/x"), folder="Inbox"), "Inbox (capital)"),
                     (subscribe_op(rx.url("/x"), events=("StatusEvent", "NewMailEvent")), "StatusEvent"),
                     (subscribe_op(rx.url("/x"), events=("CreatedEvent",)), "no NewMailEvent"),
                     (subscribe_op(rx.url("/x"), events=("NewMailEvents",)), "unknown event"),
                     (subscribe_op(rx.url("/x"), freq=0), "frequency 0"),
                     (subscribe_op(rx.url("/x"), freq=1441), "frequency 1441"),
                     (subscribe_op(rx.url("/x"), freq="ten"), "frequency text"),
                     (subscribe_op(rx.url("/x"), swap=True), "wrong order"),
                     (subscribe_op(rx.url("/x")).replace("<m:PushSubscriptionRequest>",
                                                         "<t:PushSubscriptionRequest>").replace(
                         "</m:PushSubscriptionRequest>", "</t:PushSubscriptionRequest>"), "request in t:"),
                     (subscribe_op(rx.url("/x")).replace("<t:URL>", "<m:URL>").replace("</t:URL>", "</m:URL>"),
                      "URL in m:"),
                     (subscribe_op(rx.url("/x")).replace("</t:FolderIds>",
                                                         '<t:DistinguishedFolderId Id="inbox"/></t:FolderIds>'),
                      "two folders"),
                     (subscribe_op(rx.url("/x")).replace("<m:PushSubscriptionRequest>",
                                                         '<m:PushSubscriptionRequest SubscribeToAllFolders="true">'),
                      "SubscribeToAllFolders")):
        st, body = subscribe(op)
        check(st == 500 and fault_code(body) == "ErrorSchemaValidation", f"Subscribe {what} -> schema fault")
    for url in ("ftp://localhost/x", "https://", "not a url", "https://localhost:99999/x", "x" * 2083, ""):
        st, body = subscribe(subscribe_op(url))
        msg = messages(body, "Subscribe")
        check(st == 200 and msg and msg[0].get("ResponseClass") == "Error"
              and response_code(msg[0]) == "ErrorInvalidPushSubscriptionUrl", f"bad URL {url[:30]!r}")
    st, body = subscribe(subscribe_op(rx.url("/cb/ok"), watermark="AAAAbm90LWEtd2F0ZXJtYXJr"))
    msg = messages(body, "Subscribe")[0]
    check(st == 200 and response_code(msg) == "ErrorInvalidWatermark", "unknown watermark")
    st, body = subscribe(subscribe_op(rx.url("/cb/ok"), watermark=wm0), who=FRANK)
    check(response_code(messages(body, "Subscribe")[0]) == "ErrorInvalidWatermark",
          "another mailbox's watermark")
    st, body = subscribe(subscribe_op(rx.url("/cb/ok2"), watermark=wm0), version="Exchange2013")
    msg = messages(body, "Subscribe")[0]
    check(response_code(msg) == "NoError", "known watermark accepted")
    sub2 = text(msg, f"{{{M}}}SubscriptionId")
    rx.behaviour["/cb/ok2"] = "default"
    # the 20-subscription limit
    MAX = {"Authorization": basic("max", "max-pw")}
    for i in range(20):
        st, body = subscribe(subscribe_op(rx.url(f"/cb/max?i={i}")), who=MAX)
        check(response_code(messages(body, "Subscribe")[0]) == "NoError", f"subscription {i + 1}")
    st, body = subscribe(subscribe_op(rx.url("/cb/max?i=21")), who=MAX)
    check(response_code(messages(body, "Subscribe")[0]) == "ErrorExceededSubscriptionCount", "21st subscription")

    # -- new mail, callbacks, GetItem -------------------------------------------------------
    answer = sim.ok("/newmail", {"email": "alice@example.test", "subject": "Hello <&> \u00e9",
                                 "fromName": "Zed Sender", "fromAddress": "zed@far.test",
                                 "count": 2, "wait": True})
    items = answer["items"]
    check(len(items) == 2, "two items")
    cbs = {c["subscriptionId"]: c for c in answer["callbacks"]}
    check(cbs.get(sub_id) == {"subscriptionId": sub_id, "httpStatus": 200, "subscriptionStatus": "OK"},
          f"callback answer {answer['callbacks']}")
    check(cbs.get(sub2, {}).get("subscriptionStatus") == "OK", "default-namespace reply is OK")
    got = rx.for_path("/cb/ok")
    check(len(got) == 1 and got[0][0] == "/cb/ok?user=alice&k=1", "callback path and query kept")
    path, headers, raw = got[0]
    lh = {k.lower(): v for k, v in headers.items()}
    check(lh.get("content-type") == "text/xml; charset=utf-8", "callback Content-Type")
    check(lh.get("soapaction") == "http://schemas.microsoft.com/exchange/services/2006/messages/SendNotification",
          "callback SOAPAction")
    check(lh.get("accept") == "text/xml" and "authorization" not in lh, "callback Accept, no Authorization")
    check(raw.startswith(b'<?xml version="1.0" encoding="utf-8"?><soap11:Envelope'), "declaration + soap11")
    n = xml(raw)
    check(n.find(f"{{{SOAP}}}Header/{{{T}}}RequestServerVersion").get("Version") == "Exchange2010_SP2",
          "callback RequestServerVersion")
    rm = n.find(f"{{{SOAP}}}Body/{{{M}}}SendNotification/{{{M}}}ResponseMessages/"
                f"{{{M}}}SendNotificationResponseMessage")
    check(rm.get("ResponseClass") == "Success" and text(rm, f"{{{M}}}ResponseCode") == "NoError", "RM")
    note = rm.find(f"{{{M}}}Notification")
    check(text(note, f"{{{T}}}SubscriptionId") == sub_id, "t:SubscriptionId")
    check(text(note, f"{{{T}}}PreviousWatermark") == wm0, "PreviousWatermark = subscribe watermark")
    check(text(note, f"{{{T}}}MoreEvents") == "false", "MoreEvents false")
    events = note.findall(f"{{{T}}}NewMailEvent")
    check([e.find(f"{{{T}}}ItemId").get("Id") for e in events] == items, "one NewMailEvent per item")
    for e in events:
        check(e.find(f"{{{T}}}ItemId").get("ChangeKey") and e.find(f"{{{T}}}ParentFolderId").get("Id") == inbox_id,
              "ItemId ChangeKey, ParentFolderId")
        check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", text(e, f"{{{T}}}TimeStamp")), "TimeStamp")
    wms = [text(e, f"{{{T}}}Watermark") for e in events]
    check(len(set(wms + [wm0])) == 3, "each event has a new watermark")
    check(sim.ok("/subscriptions") and {s["id"]: s for s in sim.ok("/subscriptions")}[sub_id]["watermark"]
          == wms[-1], "subscription watermark advanced")
    check(len(rx.for_path("/cb/max")) == 0, "other mailboxes' subscriptions get nothing")

    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(get_item_op(items + ["bm9wZQ=="])), ALICE)
    msgs = messages(body, "GetItem")
    check(st == 200 and [m.get("ResponseClass") for m in msgs] == ["Success", "Success", "Error"],
          f"GetItem classes {body[:400]}")
    check(response_code(msgs[2]) == "ErrorItemNotFound", "unknown id -> ErrorItemNotFound")
    m0 = msgs[0].find(f"{{{M}}}Items/{{{T}}}Message")
    check(m0.find(f"{{{T}}}ItemId").get("Id") == items[0] and m0.find(f"{{{T}}}ItemId").get("ChangeKey"),
          "GetItem ItemId")
    check(text(m0, f"{{{T}}}Subject") == "Hello <&> \u00e9", "GetItem Subject (escaped)")
    check(text(m0, f"{{{T}}}From/{{{T}}}Mailbox/{{{T}}}Name") == "Zed Sender"
          and text(m0, f"{{{T}}}From/{{{T}}}Mailbox/{{{T}}}EmailAddress") == "zed@far.test", "GetItem From")
    check(text(m0, f"{{{T}}}DateTimeReceived") == text(events[0], f"{{{T}}}TimeStamp"), "DateTimeReceived")
    check(m0.find(f"{{{T}}}IsRead") is None, "IdOnly returns only what was asked")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(get_item_op(items[:1], "Default", ())), ALICE)
    m0 = messages(body, "GetItem")[0].find(f"{{{M}}}Items/{{{T}}}Message")
    check([c.tag.split("}")[1] for c in m0] == ["ItemId", "ParentFolderId", "ItemClass", "Subject",
                                                "DateTimeReceived", "Sender", "From", "IsRead"],
          "Default shape, schema order")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(get_item_op(items[:1])), FRANK)
    check(response_code(messages(body, "GetItem")[0]) == "ErrorItemNotFound", "items are per mailbox")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(
        get_item_op(items[:1]).replace("<t:BaseShape>IdOnly</t:BaseShape>", "")), ALICE)
    check(st == 500 and fault_code(body) == "ErrorSchemaValidation", "GetItem without BaseShape")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(get_item_op([])), ALICE)
    check(st == 500 and fault_code(body) == "ErrorSchemaValidation", "GetItem without ids")
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER), ALICE)
    check(text(xml(body), f".//{{{T}}}UnreadCount") == "5", "unread += count")

    # second notification: PreviousWatermark chains
    answer = sim.ok("/newmail", {"email": "alice@example.test", "subject": "Again", "fromName": "Z",
                                 "fromAddress": "z@far.test", "wait": True})
    got = rx.for_path("/cb/ok")
    check(len(got) == 2, "second callback")
    n2 = xml(got[1][2]).find(f".//{{{M}}}Notification")
    check(text(n2, f"{{{T}}}PreviousWatermark") == wms[-1], "PreviousWatermark chains")
    wm_last = text(n2, f"{{{T}}}NewMailEvent/{{{T}}}Watermark")
    # an event watermark is valid for a new Subscribe
    st, body = subscribe(subscribe_op(rx.url("/cb/unsub"), watermark=wm_last))
    msg = messages(body, "Subscribe")[0]
    check(response_code(msg) == "NoError", "event watermark accepted by Subscribe")
    sub_unsub = text(msg, f"{{{M}}}SubscriptionId")
    rx.behaviour["/cb/unsub"] = "unsub"

    # deliver: false
    before = len(rx.got)
    answer = sim.ok("/newmail", {"email": "alice@example.test", "subject": "Bench", "fromName": "B",
                                 "fromAddress": "b@far.test", "deliver": False})
    notes = {n["subscriptionId"]: n for n in answer["notifications"]}
    check(set(notes) == {sub_id, sub2, sub_unsub} and notes[sub_id]["url"] == rx.url("/cb/ok?user=alice&k=1"),
          "deliver false lists the notifications")
    nb = xml(notes[sub_id]["body"].encode())
    check(nb.find(f".//{{{T}}}NewMailEvent/{{{T}}}ItemId").get("Id") == answer["items"][0], "body names the item")
    time.sleep(0.3)
    check(len(rx.got) == before, "deliver false sends nothing")

    # wait: false answers at once; then Unsubscribe
    answer = sim.ok("/newmail", {"email": "alice@example.test", "subject": "U", "fromName": "U",
                                 "fromAddress": "u@far.test", "wait": False})
    check(set(answer["subscriptions"]) == {sub_id, sub2, sub_unsub} and "callbacks" not in answer,
          "wait false lists the subscriptions")
    wait_for(lambda: len([c for c in sim.ok("/callbacks") if c["subscriptionId"] == sub_unsub]) == 1,
             3, "the Unsubscribe callback")
    answer = {"callbacks": [c for c in sim.ok("/callbacks") if c["subscriptionId"] == sub_unsub]}
    cbs = {c["subscriptionId"]: c for c in answer["callbacks"]}
    check(cbs[sub_unsub]["subscriptionStatus"] == "Unsubscribe", "Unsubscribe answer")
    subs = {s["id"]: s for s in sim.ok("/subscriptions")}
    check(subs[sub_unsub]["alive"] is False and subs[sub_id]["alive"] is True, "Unsubscribe kills only that one")
    n_unsub = len(rx.for_path("/cb/unsub"))
    answer = sim.ok("/newmail", {"email": "alice@example.test", "wait": True})
    check(sub_unsub not in {c["subscriptionId"] for c in answer["callbacks"]}, "dead subscription skipped")
    check(len(rx.for_path("/cb/unsub")) == n_unsub, "no callback after Unsubscribe")

    # retries until death: freq 2 -> window 2 s; retries at 0.3, 0.6, 1.2 s
    sim.ok("/mailboxes", {"email": "hank@example.test", "userName": "hank", "password": "hank-pw"})
    HANK = {"Authorization": basic("hank", "hank-pw")}
    ids = {}
    for path, how, freq in (("/cb/fail", "fail", 2), ("/cb/flaky", "flaky", 1440),
                            ("/cb/badxml", "badxml", 1), ("/cb/lower", "lower", 1),
                            ("/cb/slow", "slow", 1)):
        rx.behaviour[path] = how
        st, body = subscribe(subscribe_op(rx.url(path), freq=freq), who=HANK)
        ids[path] = text(messages(body, "Subscribe")[0], f"{{{M}}}SubscriptionId")
    t0 = time.monotonic()
    answer = sim.ok("/newmail", {"email": "hank@example.test", "wait": True})
    cbs = {c["subscriptionId"]: c for c in answer["callbacks"]}
    check(cbs[ids["/cb/fail"]]["httpStatus"] == 500 and "error" in cbs[ids["/cb/fail"]], "500 is a failure")
    check(cbs[ids["/cb/flaky"]]["httpStatus"] == 503, "first flaky attempt fails")
    check("XML" in cbs[ids["/cb/badxml"]]["error"], "bad XML is a failure")
    check("'ok'" in cbs[ids["/cb/lower"]]["error"], "lowercase ok is a failure")
    check(cbs[ids["/cb/slow"]]["error"] == "timeout", f"slow answer -> timeout {cbs[ids['/cb/slow']]}")
    check(time.monotonic() - t0 < 4, "wait returns after the first attempts")

    def dead(path):
        return not {s["id"]: s for s in sim.ok("/subscriptions")}[ids[path]]["alive"]
    wait_for(lambda: dead("/cb/fail"), 4, "the failing subscription to die")
    tries = [c for c in sim.ok("/callbacks") if c["subscriptionId"] == ids["/cb/fail"]]
    check([c["attempt"] for c in tries] == [1, 2, 3, 4], f"attempts 1..4: {tries}")
    check(all(c["kind"] == "newmail" and c["httpStatus"] == 500 for c in tries), "retried the same")
    bodies = [g[2] for g in rx.for_path("/cb/fail")]
    check(len(bodies) == 4 and len(set(bodies)) == 1, "retries resend the identical body")
    stamps = [c["time"] for c in tries]
    gaps = [(b - stamps[0]) / 1000 for b in stamps[1:]]
    check(0.2 < gaps[0] < 0.6 and 0.5 < gaps[1] < 0.9 and 1.1 < gaps[2] < 1.6, f"retry schedule {gaps}")
    wait_for(lambda: dead("/cb/badxml") and dead("/cb/lower"), 4, "bad answers to kill their subscriptions")
    wait_for(lambda: dead("/cb/slow"), 8, "timeouts to kill the subscription")
    flaky = [c for c in sim.ok("/callbacks") if c["subscriptionId"] == ids["/cb/flaky"]]
    check([(c["attempt"], c["subscriptionStatus"]) for c in flaky] == [(1, None), (2, "OK")], f"flaky {flaky}")
    check(not dead("/cb/flaky"), "a retry that succeeds keeps the subscription")
    check(len(rx.for_path("/cb/fail")) == 4, "no callbacks after death")

    # heartbeats: automatic (freq 1 -> every 1 s here) and on demand
    sim.ok("/mailboxes", {"email": "ivy@example.test", "userName": "ivy", "password": "ivy-pw"})
    IVY = {"Authorization": basic("ivy", "ivy-pw")}
    st, body = subscribe(subscribe_op(rx.url("/cb/hb"), freq=1), who=IVY, version="Exchange2013_SP1")
    hb_msg = messages(body, "Subscribe")[0]
    hb_id, hb_wm = text(hb_msg, f"{{{M}}}SubscriptionId"), text(hb_msg, f"{{{M}}}Watermark")
    got = wait_for(lambda: len(rx.for_path("/cb/hb")) >= 2 and rx.for_path("/cb/hb"), 3.5, "two heartbeats")
    h1, h2 = (xml(g[2]) for g in got[:2])
    check(h1.find(f"{{{SOAP}}}Header/{{{T}}}RequestServerVersion").get("Version") == "Exchange2013_SP1",
          "heartbeat carries the subscription's version")
    se1 = h1.find(f".//{{{T}}}StatusEvent")
    check(se1 is not None and h1.find(f".//{{{T}}}NewMailEvent") is None, "StatusEvent")
    check(text(h1, f".//{{{T}}}PreviousWatermark") == hb_wm
          and text(h2, f".//{{{T}}}PreviousWatermark") == text(se1, f"{{{T}}}Watermark"),
          "heartbeat watermarks chain")
    answer = sim.ok("/heartbeat", {"email": "alice@example.test", "wait": True})
    check({c["subscriptionId"] for c in answer["callbacks"]} == {sub_id, sub2}
          and all(c["subscriptionStatus"] == "OK" for c in answer["callbacks"]), f"/heartbeat {answer}")
    check(xml(rx.for_path("/cb/ok")[-1][2]).find(f".//{{{T}}}StatusEvent") is not None, "on-demand StatusEvent")
    check(any(c["kind"] == "heartbeat" and c["subscriptionId"] == hb_id for c in sim.ok("/callbacks")),
          "/callbacks records heartbeats")
    rx.behaviour["/cb/hb"] = "unsub"
    wait_for(lambda: not {s["id"]: s for s in sim.ok("/subscriptions")}[hb_id]["alive"], 3,
             "heartbeat Unsubscribe")

    # -- failure injection ------------------------------------------------------------------
    sim.ok("/fail", {"operation": "Subscribe", "status": 503, "count": 1})
    st, body = subscribe(subscribe_op(rx.url("/cb/ok")), who=FRANK)
    check(st == 503 and body == b"", "injected 503")
    st, body = subscribe(subscribe_op(rx.url("/cb/ok")), who=FRANK)
    check(st == 200 and response_code(messages(body, "Subscribe")[0]) == "NoError", "count 1 used up")
    sim.ok("/fail", {"operation": "GetItem", "status": 500, "responseCode": "ErrorServerBusy",
                     "backOffMs": 1234})
    for _ in range(2):
        st, _, body, _ = sim.post("mail.example.test", EWS, envelope(get_item_op(items)), ALICE)
        check(st == 500 and fault_code(body) == "ErrorServerBusy"
              and text(xml(body), f".//{{{T}}}MessageXml/{{{T}}}Value") == "1234", "injected ErrorServerBusy")
    sim.ok("/reset", {})
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(get_item_op(items)), ALICE)
    check(st == 200, "/reset clears failures")
    sim.ok("/fail", {"operation": "GetFolder", "responseCode": "ErrorServerBusy", "count": 1})
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER), ALICE)
    msg = messages(body, "GetFolder")
    check(st == 200 and msg[0].get("ResponseClass") == "Error" and response_code(msg[0]) == "ErrorServerBusy",
          "injected 200 error response message")
    sim.ok("/fail", {"operation": "GetFolder", "delayMs": 300, "count": 1})
    t0 = time.monotonic()
    st, _, body, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER), ALICE)
    check(st == 200 and time.monotonic() - t0 >= 0.3 and text(xml(body), f".//{{{T}}}UnreadCount"),
          "injected delay")
    sim.ok("/fail", {"operation": "Autodiscover", "status": 401, "count": 1})
    st, hd, _, _ = sim.post("pox.test", POX, pox_request("erin@pox.test"), ERIN)
    check(st == 401 and "www-authenticate" in hd, "injected Autodiscover 401")
    st, _, _, _ = sim.post("pox.test", POX, pox_request("erin@pox.test"), ERIN)
    check(st == 200, "Autodiscover after the injected failure")
    check(sim.control("/fail", {"operation": "FindItem", "status": 500})[0] == 400, "bad /fail")

    # -- OAuth token endpoint ------------------------------------------------------------
    oauth_checks(sim)

    # -- records ------------------------------------------------------------------------------
    recs = sim.ok("/requests")["requests"]
    ops = {r["operation"] for r in recs}
    for op in ("Autodiscover-POX", "Autodiscover-SOAP", "Autodiscover-HTTP", "Subscribe", "GetItem",
               "GetFolder", "FindItem"):
        check(op in ops, f"/requests has {op}")
    check({r["auth"] for r in recs} >= {"basic", "bearer", "certificate", "none"}, "auth kinds")
    subs_recs = [r for r in recs if r["operation"] == "Subscribe" and r["status"] == 200]
    check(any(r["subscribeUrl"] == rx.url("/cb/ok?user=alice&k=1") and r["version"] == "Exchange2010_SP2"
              and r["host"] == "mail.example.test" and r["path"] == EWS and r["method"] == "POST"
              for r in subs_recs), "Subscribe record")
    check(any(r["scheme"] == "http" and r["status"] == 302 for r in recs), "plain HTTP recorded")
    check(all(set(r) >= {"time", "host", "path", "method", "operation", "auth", "version", "status",
                         "subscribeUrl"} for r in recs), "record fields")
    sim.ok("/clear-records", {})
    recs = sim.ok("/requests")
    check(recs == {"requests": [], "violations": []} and sim.ok("/callbacks") == [], "/clear-records")
    boxes = {b["email"]: b for b in sim.ok("/mailboxes")}
    check(boxes["alice@example.test"]["liveSubscriptions"] == 2, "GET /mailboxes")

    # -- a tiny benchmark (informational) --------------------------------------------------
    conn = Conn("mail.bench.test", port, ssl.create_default_context(cafile=ca))
    body = envelope(get_item_op(items[:1])).encode()
    t0 = time.monotonic()
    n = 300
    for _ in range(n):
        conn.request("POST", EWS, body, {"Content-Type": "text/xml; charset=utf-8", **ALICE})
        r = conn.getresponse()
        r.read()
        check(r.status == 200, "bench GetItem")
    rate = n / (time.monotonic() - t0)
    print(f"ews_simulator_selftest: GetItem over one keep-alive connection: {rate:.0f} req/s")
    conn.close()
    # TLS 1.2 client
    st, _, _, _ = sim.post("mail.example.test", EWS, envelope(GET_FOLDER), ALICE, ctx=ctx12, fresh=True)
    check(st == 200, "TLS 1.2 client")


if __name__ == "__main__":
    sys.exit(selftest.main("ews simulator", run, log_name="sim.log"))
