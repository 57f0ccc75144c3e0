#!/usr/bin/env python3
"""A strict Exchange Web Services (EWS) simulator: Autodiscover, push subscriptions,
SendNotification callbacks and an OAuth 2.0 token endpoint, for ENS's tests and benchmarks.

Usage:
  ews_simulator.py --port P --control-port C --http-port H --tls-dir DIR
      --callback-ca FILE [--domains d1,d2,...] [--minute-seconds 60]
      [--retry-scale 1.0] [--callback-timeout 30] [--ready-file PATH]

Python 3 standard library plus `cryptography`; nothing else.

Ports (all on 127.0.0.1):
  P  HTTPS (TLS 1.2+), HTTP/1.1 with keep-alive, one thread per connection; the TLS
     handshake happens in the connection's thread. The client under test connects to
     made-up names (example.test, autodiscover.example.test, mail.example.test, ...)
     that it maps to 127.0.0.1:P (libcurl CONNECT_TO), so every decision is made from
     the Host header (lowercased, port and a trailing dot removed). Client certificates
     issued by the client CA are requested but optional (CERT_OPTIONAL).
  H  plain HTTP, only for the Autodiscover "HTTP redirect" method.
  C  plain HTTP control API, JSON bodies.
When all three listen, the PID is written to --ready-file (tmp + rename; removed again
on clean exit). SIGTERM/SIGINT exit within a second. Every response carries
Content-Length. Request bodies need Content-Length (else 411) and may not exceed 1 MiB
(413). One line per HTTPS/HTTP request goes to stderr (method, host, path, operation,
status) and one per callback attempt (kind, subscription id prefix, attempt, result);
passwords, tokens, Authorization headers, callback URLs and bodies are never logged.

TLS material in DIR (made with `cryptography`, EC P-256, under an flock on DIR/.lock):
  ca.pem/ca.key            server CA; made when ca.pem is missing (or when the server
                           certificate must be remade and ca.key is missing).
  server.pem/server.key    signed by the CA; SANs: for every --domains entry D both D and
                           *.D, plus localhost and IP 127.0.0.1. Remade when the CA is
                           new, a file is missing, or DIR/domains.txt (the comma-joined
                           list) differs.
  client-ca.pem/.key       client-certificate CA; made when missing.
Default --domains: example.test,pox.test,soap.test,redirect.test,addr.test,loop.test,
nowhere.test,bench.test.

Namespaces (always compared as URIs, never by prefix; the https:// spellings found in
some Microsoft pages are different URIs and therefore errors):
  soap  http://schemas.xmlsoap.org/soap/envelope/
  m     http://schemas.microsoft.com/exchange/services/2006/messages
  t     http://schemas.microsoft.com/exchange/services/2006/types
  e     http://schemas.microsoft.com/exchange/services/2006/errors
  POX request   http://schemas.microsoft.com/exchange/autodiscover/outlook/requestschema/2006
  POX outer     http://schemas.microsoft.com/exchange/autodiscover/responseschema/2006
  POX inner     http://schemas.microsoft.com/exchange/autodiscover/outlook/responseschema/2006a
  a     http://schemas.microsoft.com/exchange/2010/Autodiscover
  wsa   http://www.w3.org/2005/08/addressing
Any XML body containing "<!DOCTYPE" or "<!ENTITY" (any case) or a NUL byte is answered
400 before parsing. Bodies are parsed with xml.etree.ElementTree.

AUTHENTICATION (EWS and every answering Autodiscover endpoint)
  If an Authorization header is present it alone decides:
    Basic base64(userName:password)  matches a mailbox with that userName and password.
    Bearer <token>                   matches a mailbox with that (static, never
                                     expiring) oauthToken, or the mailbox of a live
                                     OAuth access token (OAUTH TOKEN ENDPOINT); either
                                     way the request must carry X-AnchorMailbox equal
                                     (case-insensitive) to that mailbox's email. An
                                     OAuth access token that has expired or whose grant
                                     is revoked matches nothing, and its 401 carries
                                     `WWW-Authenticate: Basic realm="sim", Bearer
                                     error="invalid_token"` (one header) instead.
    any other scheme                 matches nothing.
  Without an Authorization header, a client certificate (verified against the client
  CA) matches the mailbox whose issued certificate has the same SHA-256 fingerprint.
  An X-AnchorMailbox header naming another address than the matched mailbox -> no match.
  No match -> 401, empty body, `WWW-Authenticate: Basic realm="sim", Bearer`.
  Authentication is checked before anything else about the request (as IIS does).
  The recorded "auth" is the kind of credential presented (basic, bearer, certificate,
  none, or another scheme lowercased), whether or not it matched.

VERSIONS
  Known: Exchange2007, Exchange2007_SP1, Exchange2010, Exchange2010_SP1,
  Exchange2010_SP2, Exchange2013, Exchange2013_SP1, Exchange2015, Exchange2016 and the
  V2015_10_05 ... V2018_01_08 names. A mailbox accepts its "versions" (default
  Exchange2007_SP1, Exchange2010, Exchange2010_SP1, Exchange2010_SP2, Exchange2013,
  Exchange2013_SP1, Exchange2016). A RequestServerVersion Version outside that set
  (known or not) -> SOAP fault ErrorInvalidServerVersion, HTTP 500.

AUTODISCOVER (https on P; plain http on H)
  The host decides: "autodiscover.D" and "mail.D" belong to domain D (unless that whole
  name was itself registered with /domains); any other host H is domain H itself.
  Paths are compared case-insensitively without the query. Modes (POST /domains):
    pox-root          POX at https://D/autodiscover/autodiscover.xml only.
    pox-autodiscover  POX at https://autodiscover.D/autodiscover/autodiscover.xml only.
    soap              SOAP at https://autodiscover.D/autodiscover/autodiscover.svc only.
    http-redirect     every https /autodiscover/ path on D and autodiscover.D -> 404;
                      GET http://autodiscover.D/autodiscover/autodiscover.xml on H ->
                      302, Location https://mail.D/autodiscover/autodiscover.xml, which
                      answers POX.
    redirect-addr     POX at https://D/... answers Action redirectAddr, RedirectAddr =
                      the domain's "target", to any authenticated caller.
    redirect-loop     POX at https://D/... answers Action redirectUrl, RedirectUrl =
                      https://D/autodiscover/autodiscover.xml, to any authenticated caller.
    autoconfig        GET https://autoconfig.D/mail/config-v1.1.xml answers Thunderbird's
                      autoconfig file naming the IMAP server "target" (HOST:PORT:SOCKETTYPE).
    autoconfig-wellknown  the same at https://D/.well-known/autoconfig/mail/config-v1.1.xml.
    none              (also every unregistered domain) 404 everywhere.
  Everything else under /autodiscover/ -> 404 (no authentication needed for a 404).
  An answering endpoint called with another method than POST -> 405.
  The EWS URL handed out is https://mail.E/EWS/Exchange.asmx, E = the domain of the
  address being discovered.

  POX (operation "Autodiscover-POX"), in this order:
    401 (authentication) -> injected failure -> Content-Type must be text/xml (a charset
    parameter, if any, utf-8), else HTTP 400 -> DOCTYPE/ENTITY 400 -> the body must be
    {requestschema/2006}Autodiscover/Request with EMailAddress (non-empty) and
    AcceptableResponseSchema, else POX error 600 "Invalid Request" (HTTP 200);
    AcceptableResponseSchema not exactly .../outlook/responseschema/2006a -> POX error
    601 "The requested schema version is not supported" -> redirect modes answer their
    redirect -> no mailbox with that address -> POX error 500 "The e-mail address cannot
    be found." -> the mailbox is not the authenticated one -> 401 -> success.
    Success: Autodiscover (responseschema/2006) / Response (responseschema/2006a) /
    User (DisplayName, LegacyDN, AutoDiscoverSMTPAddress, DeploymentId) and Account
    (AccountType email, Action settings, Protocol Type EXCH and Type EXPR, each with
    Server, ASUrl and EwsUrl = the EWS URL). Errors: Autodiscover/Response (both in
    responseschema/2006)/Error Time Id (ErrorCode, Message, DebugData).
  SOAP GetUserSettings (operation "Autodiscover-SOAP"), in this order:
    401 -> injected failure -> Content-Type text/xml (charset, if any, utf-8), else 400
    -> DOCTYPE 400 -> structure, else HTTP 400 with a SOAP fault whose faultstring starts
    "ErrorSchemaValidation:". Structure: soap Envelope with Header holding
    a:RequestedServerVersion (Exchange2010, Exchange2010_SP1, Exchange2010_SP2,
    Exchange2013 or Exchange2013_SP1), wsa:Action (whitespace-trimmed) =
    http://schemas.microsoft.com/exchange/2010/Autodiscover/Autodiscover/GetUserSettings
    and wsa:To (an https URL whose host and path equal this request's); Body holding
    a:GetUserSettingsRequestMessage/a:Request with, in order, a:Users (1+ a:User, each
    with a:Mailbox), a:RequestedSettings (1+ a:Setting, including ExternalEwsUrl) and an
    optional a:RequestedVersion. A Mailbox that is an existing mailbox other than the
    authenticated one -> 401. Answer (HTTP 200): GetUserSettingsResponseMessage/Response
    ErrorCode NoError, UserResponses/UserResponse per user: unknown address -> ErrorCode
    InvalidUser; else NoError, RedirectTarget i:nil, UserSettingErrors (one
    UserSettingError InvalidSetting per requested name the simulator does not know) and
    UserSettings/UserSetting i:type="StringSetting" (Name, Value) for each requested one
    of: ExternalEwsUrl, InternalEwsUrl (both the EWS URL), EwsSupportedSchemas (the
    mailbox's versions, ", "-joined), UserDisplayName, CasVersion, UserDN,
    AutoDiscoverSMTPAddress, GroupingInformation. Only requested settings are returned.
  HTTP method (port H, operation "Autodiscover-HTTP"): any request on H that carries an
    Authorization header -> 400 and a violation is recorded. Otherwise GET of
    /autodiscover/autodiscover.xml on autodiscover.D with D in http-redirect mode -> 302;
    other methods there -> 405; everything else -> 404.

EWS (POST https://<any host>/EWS/Exchange.asmx, path case-insensitive; other methods
405). Checks in order:
   1. authentication -> 401 (above).
   2. Content-Type must be text/xml with charset=utf-8 -> else 415, empty body.
   3. DOCTYPE/ENTITY/NUL -> 400, empty body.
   4. XML well-formed, root soap:Envelope whose children are an optional soap:Header and
      then soap:Body, the Body holding exactly one element, in namespace m -> else fault
      ErrorSchemaValidation. That element's local name is the operation.
   5. an injected failure for the operation (Subscribe, GetItem, GetFolder) fires.
   6. soap:Header must hold exactly one t:RequestServerVersion with a Version attribute
      (else ErrorSchemaValidation); Version not accepted -> ErrorInvalidServerVersion.
   7. operation other than Subscribe/GetItem/GetFolder -> fault ErrorInvalidRequest.
   8. the operation's own checks (below).
  Faults are HTTP 500, text/xml; charset=utf-8: soap:Envelope/soap:Body/soap:Fault with
  faultcode a:<code> (a = types), faultstring, detail/e:ResponseCode and e:Message (and
  t:MessageXml/t:Value Name="BackOffMilliseconds" when a failure injected with
  backOffMs). Successful answers (and response-message errors) are HTTP 200 with
  soap:Header/h:ServerVersionInfo and one response message per requested object;
  error messages are ResponseClass="Error" with m:MessageText, m:ResponseCode,
  m:DescriptiveLinkKey 0.

  Subscribe: m:Subscribe holds exactly one m:PushSubscriptionRequest without attributes
  (SubscribeToAllFolders is not supported) whose children are exactly, in order:
  t:FolderIds (exactly one t:DistinguishedFolderId, Id exactly "inbox", optional
  ChangeKey, no children), t:EventTypes (1+ t:EventType, each exactly one of
  NewMailEvent CreatedEvent DeletedEvent ModifiedEvent MovedEvent CopiedEvent
  FreeBusyChangedEvent, at least one NewMailEvent), optional t:Watermark,
  t:StatusFrequency (integer 1..1440), t:URL. Any deviation -> fault
  ErrorSchemaValidation. Then, as HTTP 200 response messages (ResponseClass Error):
  URL not 1..2082 characters, containing whitespace/control characters, not http/https,
  without a host or with a bad port -> ErrorInvalidPushSubscriptionUrl; Watermark not
  issued for this mailbox -> ErrorInvalidWatermark; 20 live subscriptions already ->
  ErrorExceededSubscriptionCount. Success: m:SubscribeResponse/m:ResponseMessages/
  m:SubscribeResponseMessage ResponseClass="Success" (m:ResponseCode NoError,
  m:SubscriptionId, m:Watermark), both base64 of random bytes. The subscription records
  id, mailbox, url, frequency, version (the request's) and watermark (the one just
  returned). Subscribing with a watermark does not replay events.
  GetItem: m:GetItem holds exactly m:ItemShape then m:ItemIds. ItemShape: t:BaseShape
  (IdOnly, Default or AllProperties) then optionally t:AdditionalProperties with 1+
  t:FieldURI FieldURI="prefix:Name". ItemIds: 1+ t:ItemId with a non-empty Id (ChangeKey
  optional). Per id, in order: an item of this mailbox -> Success with m:Items/t:Message
  holding t:ItemId Id ChangeKey and then, for Default/AllProperties all of, for IdOnly
  only those named in AdditionalProperties: t:ParentFolderId (item:ParentFolderId),
  t:ItemClass IPM.Note (item:ItemClass), t:Subject (item:Subject), t:DateTimeReceived
  (item:DateTimeReceived), t:Sender (message:Sender), t:From (message:From; both as
  t:Mailbox/t:Name, t:EmailAddress, t:RoutingType SMTP), t:IsRead false (message:IsRead),
  in schema order; otherwise Error ErrorItemNotFound with an empty m:Items.
  GetFolder: m:GetFolder holds exactly m:FolderShape (as ItemShape) then m:FolderIds
  with 1+ of t:DistinguishedFolderId Id="inbox" (other Ids -> ErrorSchemaValidation) or
  t:FolderId Id=<the inbox's id> (another Id -> response message ErrorFolderNotFound).
  A DistinguishedFolderId may hold one t:Mailbox with one t:EmailAddress (any other
  child -> ErrorSchemaValidation): the authenticated mailbox's own address (any case),
  or any address of a redirect-addr domain whose target it is (a proxy address), opens it; another existing mailbox's -> response message ErrorAccessDenied (no
  delegation is simulated); an unknown address -> ErrorNonExistentMailbox.
  Success: m:Folders/t:Folder with t:FolderId Id ChangeKey, then for Default/AllProperties
  (for IdOnly: the folder:* FieldURIs named) t:DisplayName Inbox, t:TotalCount,
  t:ChildFolderCount 0, t:UnreadCount. "unread" starts at the mailbox's value; TotalCount
  starts equal to it; each new mail adds one to both.

HOSTILE EWS: a domain in mode "hostile" plays an attacker's own Exchange. EWS requests to
  that domain or any host under it accept any credentials (none needed) and answer every
  well-formed Subscribe with a new subscription id and watermark and every GetFolder with
  an Inbox of 0 unread, for any mailbox named; nothing is delivered from it. Its requests
  are recorded like any others (operation, auth, host), so a test can tell whether ENS
  ever sent it a Subscribe.

Every recorded request names its "connection" (the client's address and port), and an
authenticated EWS request its "mailbox", so a test can tell whose requests shared a
connection.

TARPIT: a domain in mode "tarpit" plays a server that accepts and never finishes: every
  HTTPS request to that domain or a host under it (after its body is read) gets the
  bytes of "HTTP/1.1 200 OK" one per second for up to 60 s, then the connection is
  closed. Recorded with operation "tarpit".

OAUTH TOKEN ENDPOINT (the simulator as the identity provider, Azure AD / ADFS style: the
  RFC 6749 refresh_token grant, for public clients only)
  POST https://<any host>/oauth2/token or https://<any host>/<tenant>/oauth2/v2.0/token
  (tenant: one path segment of [A-Za-z0-9.-]+; the path is compared case-insensitively;
  other paths -> 404). Operation "Token"; the recorded "auth" is "none" or the
  Authorization scheme lowercased (a client certificate is ignored). Every answer carries
  `Cache-Control: no-store` and `Pragma: no-cache`. Errors are HTTP 400 (401 for
  invalid_client, with `WWW-Authenticate: Basic realm="sim"`), Content-Type
  application/json;charset=UTF-8, body {"error": code, "error_description": text}; no
  token is ever echoed. Checks, in this order:
   1. method other than POST -> 405, `Allow: POST`, empty body.
   2. an injected failure for "Token" fires (FAILURE INJECTION).
   3. a query string (even a bare "?") -> invalid_request.
   4. Content-Type not application/x-www-form-urlencoded (parameters allowed; a charset,
      if any, utf-8) -> invalid_request.
   5. an Authorization header (any scheme), or a parameter named client_secret,
      client_assertion or client_assertion_type (even empty; found by a lenient parse)
      -> 401 invalid_client: these clients are public and must not authenticate.
   6. the body is decoded as UTF-8 and parsed by urllib.parse.parse_qsl with
      strict_parsing=True, keep_blank_values=True, errors="strict", max_num_fields=64:
      invalid UTF-8 (raw or percent-encoded), an empty field ("a=1&&b=2", a trailing
      "&"), a field without "=", a parameter without a name, more than 64 fields ->
      invalid_request; a parameter name given more than once (even with empty values) ->
      invalid_request (RFC 6749 §3.2). An empty body has no parameters. From here on a
      parameter with an empty value counts as omitted (RFC 6749 §3.1).
   7. grant_type missing -> invalid_request; any value but exactly "refresh_token"
      (authorization_code, password, client_credentials, ...) -> unsupported_grant_type.
   8. client_id missing -> invalid_request; not a registered client (POST /oauth/clients)
      -> 401 invalid_client.
   9. refresh_token missing -> invalid_request. Then invalid_grant, checked in this order,
      when it is unknown; was issued to another client_id; belongs to a revoked grant;
      was already exchanged (rotated away): refresh-token reuse, which also revokes the
      grant (its current refresh token and all its access tokens stop working) and sets
      its reuseDetected; has expired (refreshLifetime after it was issued).
  10. scope, if given: scope tokens (RFC 6749 §3.3 characters) separated by single
      spaces, each one (case-sensitively) in the grant's scope, else invalid_scope.
  11. success: HTTP 200, {"token_type": "Bearer", "access_token": A, "expires_in": the
      client's accessLifetime rounded up to whole seconds, "scope": the requested scope
      tokens (duplicates dropped, order kept) or else the grant's whole scope,
      "refresh_token": R}. A is new. With the client's rotate true R is new (good for
      refreshLifetime from now) and the presented token becomes used (presenting it again
      is reuse, step 9); with rotate false R is the presented token, expiry unchanged.
      The grant's refreshes + 1; its scope never changes.
  Every answer other than 200 counts one refusal for each grant whose refresh token
  (current or used) a refresh_token parameter of the body names (found by a lenient
  parse, so malformed bodies and injected failures count too).
  Access tokens (issued here or by POST /oauth/grants) look like JWTs: base64url(JSON
  header) "." base64url(JSON claims aud, iss, iat, nbf, exp, appid, upn, scp, jti) "."
  base64url(accessTokenBytes random bytes), so they start with "eyJ" and are about
  accessTokenBytes * 4/3 + 400 characters long. Nothing checks a signature; the claims
  are informational (exp does not follow /oauth/expire). They authenticate EWS and
  Autodiscover (AUTHENTICATION) until they expire (accessLifetime after issue, or POST
  /oauth/expire) or their grant is revoked (refresh-token reuse, POST /oauth/revoke);
  their scope is not checked. Refresh tokens are "rt." and 64 random base64url
  characters. Lifetimes are measured with time.monotonic(). The simulator keeps tokens
  only as SHA-256 digests and never logs them.

FAILURE INJECTION: POST /fail {"operation": "Subscribe"|"GetItem"|"GetFolder"|
  "Autodiscover"|"Token", "status"?: 400..599, "responseCode"?: s, "delayMs"?: n,
  "backOffMs"?: n, "count"?: N}. The next N requests for that operation (0/absent: all
  until /reset; a later /fail for the same operation replaces it) that pass
  authentication are delayed by delayMs, then:
    status 500  EWS: fault with responseCode (default ErrorInternalServerError; with
                backOffMs, MessageXml BackOffMilliseconds). SOAP Autodiscover: fault.
                POX: POX error 603 with HTTP 500.
    other status  that status, empty body (401 also carries WWW-Authenticate).
    no status, responseCode  HTTP 200: EWS: one error response message per requested
                id (ResponseClass Error, that code); SOAP Autodiscover: Response ErrorCode
                = responseCode; POX: POX error with ErrorCode = responseCode if numeric,
                else 603 and Message = responseCode.
    neither     only the delay; the request is then processed normally.
  "Autodiscover" covers POX and SOAP requests at answering endpoints (not the plain-HTTP
  redirect). "Token" covers every POST to the token endpoint (no authentication there;
  a GET is answered 405 without using the failure), and answers differently:
    status 5xx or 429  that status, {"error": "temporarily_unavailable",
                "error_description": "Injected failure."}; with backOffMs also
                `Retry-After: ceil(backOffMs / 1000)` seconds.
    other status  that status, empty body (401 also carries `WWW-Authenticate: Basic
                realm="sim"`).
    no status, responseCode  HTTP 400 {"error": responseCode, "error_description":
                "Injected failure."}.
    neither     only the delay.
  (all with the token endpoint's no-store headers; JSON as application/json;charset=UTF-8).
  POST /reset clears injected failures (not mailboxes, subscriptions, records, OAuth
  clients or grants).

CALLBACKS (the simulator acting as Exchange)
  Each live subscription has its own sender thread; notifications for one subscription
  go out one at a time, in order. A SendNotification is a POST to the subscription URL
  (path and query kept) with Content-Type "text/xml; charset=utf-8", SOAPAction
  http://schemas.microsoft.com/exchange/services/2006/messages/SendNotification, Accept
  text/xml and no Authorization. https URLs are verified against --callback-ca (re-read
  when the file changes), hostname included. Body: XML declaration; soap11:Envelope;
  soap11:Header/t:RequestServerVersion Version=<the subscription's version>;
  soap11:Body/m:SendNotification/m:ResponseMessages/m:SendNotificationResponseMessage
  ResponseClass="Success"/(m:ResponseCode NoError, m:Notification/(t:SubscriptionId,
  t:PreviousWatermark, t:MoreEvents false, events)), every t: element at the top of the
  Notification declaring xmlns:t itself. Events: t:NewMailEvent (t:Watermark,
  t:TimeStamp, t:ItemId Id ChangeKey, t:ParentFolderId Id ChangeKey) or t:StatusEvent
  (t:Watermark). Each event has a new watermark (a mailbox-wide one per mail, shared by
  that mailbox's subscriptions); PreviousWatermark is the subscription's watermark when
  the notification is first sent: the Subscribe watermark, then the last event watermark
  of the last notification delivered successfully. The body is fixed at the first
  attempt and re-sent unchanged on retries.
  A good answer is HTTP 200, Content-Type text/xml (any parameters), a soap Envelope
  whose Body holds m:SendNotificationResult/m:SubscriptionStatus with text exactly OK or
  Unsubscribe (any prefix or a default namespace). Unsubscribe -> the subscription is
  dead. Anything else (other status, other content type, bad XML, other text, no answer
  within --callback-timeout seconds, connection/TLS error) is a failure: retry k (k = 1,
  2, ...) is sent 30 * 2^(k-1) * retry-scale seconds after the first attempt, for every
  k whose offset is below StatusFrequency * minute-seconds seconds (30, 60, 120, ... s:
  Exchange's 0:30, 1:00, 2:00, ... schedule); after the last one fails the subscription
  is dead. Notifications still queued for a dead subscription are dropped.
  Heartbeats: a subscription with no successful notification (or since its creation)
  for StatusFrequency * minute-seconds seconds gets a StatusEvent.

CONTROL API (plain HTTP/1.1, JSON, 127.0.0.1:C). Errors: 400/404 {"error": "..."}.
  POST /mailboxes {"email", "userName"?, "password"?, "oauthToken"?, "certificate"?:
      true, "versions"?: [...], "unread"?: n, "displayName"?: s}
      Creates the mailbox, or updates an existing one (same email, case-insensitive):
      credentials and versions are replaced (omitted ones removed), "unread" is set when
      given, items/watermarks/subscriptions are kept. With "certificate": true (or "ec",
      "rsa2048", "rsa4096", "rsa2048-chain") a client certificate with that key (CN =
      email, issued by the client CA, or for "-chain" by an issuing CA under it that the
      bundle carries and the client must send; extensions only basicConstraints CA:false
      and extendedKeyUsage clientAuth) is issued, replacing any earlier one: {"ok": true, "pkcs12": base64, "pkcs12Password": s} (PKCS#12 with
      BestAvailableEncryption). Otherwise {"ok": true}.
  GET  /mailboxes  [{"email", "unread", "total", "items", "liveSubscriptions"}].
  POST /domains {"domain", "mode", "target"?} (target required for redirect-addr).
  POST /fail, POST /reset  (above).
  POST /newmail {"email", "subject"?, "fromName"?, "fromAddress"?, "count"?: 1 (1..1000),
      "wait"?: true, "deliver"?: true}   (the values shown are the defaults)
      Creates count messages in the Inbox (unread and total += count) and queues one
      notification with one NewMailEvent per message for every live subscription of the
      mailbox. With "wait": true it returns after each notification's first attempt
      (waiting at most callback-timeout + 5 s in all): {"ok": true, "items": [ids],
      "callbacks": [{"subscriptionId", "httpStatus", "subscriptionStatus" (OK/Unsubscribe/
      null), "error"? (only on failure)}]}, in subscription order; with "wait": false
      at once: {"ok": true, "items": [ids], "subscriptions": [ids]}. With "deliver": false nothing is queued or sent and the answer is
      {"ok": true, "items", "notifications": [{"subscriptionId", "url", "body"}]}, body
      being the exact SendNotification it would have sent (the subscription's watermark
      is not advanced).
  POST /heartbeat {"email"?, "wait"?: true}  queues a StatusEvent for every live
      subscription (of that mailbox); same answer shapes as /newmail, without "items".
  GET  /requests  {"requests": [{"time" (ms), "scheme", "host", "path", "method",
      "operation" (Autodiscover-POX, Autodiscover-SOAP, Autodiscover-HTTP, Subscribe,
      GetItem, GetFolder, another body element's local name, Token, tarpit, or null),
      "auth", "version"
      (RequestServerVersion / RequestedServerVersion, or null), "status",
      "subscribeUrl" (Subscribe: the t:URL text, else null)}], "violations": [strings]}.
      The newest 100000 requests are kept.
  GET  /subscriptions  [{"id", "email", "url", "frequency", "version", "alive",
      "watermark"}].
  GET  /callbacks  [{"time", "subscriptionId", "kind" (heartbeat/newmail), "attempt",
      "httpStatus", "subscriptionStatus", "error"}] (newest 100000).
  POST /clear-records  empties requests, violations and callbacks.
  POST /policy {"deny": [ids]}  a stand-in SEG policy service: sets the EAS device ids
               to deny (replacing the list).
  POST /policy/check {"deviceId": s}  -> {"allowed": bool} (what ENS's policy.url asks).
  OAuth (OAUTH TOKEN ENDPOINT); these four POSTs answer 400 for keys they do not know:
  POST /oauth/clients {"clientId": s ([A-Za-z0-9_.-]+), "accessLifetime"?: 3600,
      "refreshLifetime"?: 7776000 (seconds, numbers > 0, fractions allowed), "rotate"?:
      true, "scope"?: "https://outlook.office365.com/EWS.AccessAsUser.All
      offline_access", "accessTokenBytes"?: 1200 (64..8192)}   (defaults shown)
      Registers a public client, or replaces its settings: {"ok": true}. Existing grants
      and tokens keep working and keep their expiry and scope; the new lifetimes, rotate
      and accessTokenBytes apply to exchanges from then on, the new scope to new grants.
  POST /oauth/grants {"email", "clientId"}  a user's consent: a new grant of the client's
      scope for that mailbox, with a first access and refresh token: {"ok": true,
      "grantId": n, "accessToken", "refreshToken", "expiresIn", "scope"}. Unknown
      mailbox or client -> 404.
  GET  /oauth/grants  [{"id", "email", "clientId", "scope", "refreshes" (successful
      exchanges), "refusals" (token-endpoint answers other than 200 naming one of its
      refresh tokens), "revoked", "reuseDetected", "accessTokensLive" (unexpired and the
      grant not revoked)}], in creation order. No token values.
  POST /oauth/expire {"email"}  every access token of that mailbox's grants expires now
      (refresh tokens stay good; the static oauthToken is untouched): {"ok": true,
      "expired": n}, n = how many of them were live. Unknown mailbox -> 404.
  POST /oauth/revoke {"email"}  every grant of that mailbox is revoked (its refresh and
      access tokens stop working): {"ok": true, "revoked": n}, n = grants not revoked
      before. Unknown mailbox -> 404.
"""
import argparse
import base64
import collections
import datetime
import fcntl
import hashlib
import http.client
import ipaddress
import json
import math
import os
import re
import secrets
import socket
import ssl
import sys
import threading
import time
import xml.etree.ElementTree as ET
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit
from xml.sax.saxutils import escape

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID

from simlib import certs, control, https, process
from simlib.failures import Failures

NS_SOAP = "http://schemas.xmlsoap.org/soap/envelope/"
NS_M = "http://schemas.microsoft.com/exchange/services/2006/messages"
NS_T = "http://schemas.microsoft.com/exchange/services/2006/types"
NS_E = "http://schemas.microsoft.com/exchange/services/2006/errors"
NS_POX_REQ = "http://schemas.microsoft.com/exchange/autodiscover/outlook/requestschema/2006"
NS_POX_RESP = "http://schemas.microsoft.com/exchange/autodiscover/responseschema/2006"
NS_POX_RESP_A = "http://schemas.microsoft.com/exchange/autodiscover/outlook/responseschema/2006a"
NS_AD = "http://schemas.microsoft.com/exchange/2010/Autodiscover"
NS_WSA = "http://www.w3.org/2005/08/addressing"
NS_XSI = "http://www.w3.org/2001/XMLSchema-instance"
GUS_ACTION = "http://schemas.microsoft.com/exchange/2010/Autodiscover/Autodiscover/GetUserSettings"
SOAP_ACTION_SEND = "http://schemas.microsoft.com/exchange/services/2006/messages/SendNotification"

KNOWN_VERSIONS = ["Exchange2007", "Exchange2007_SP1", "Exchange2010", "Exchange2010_SP1",
                  "Exchange2010_SP2", "Exchange2013", "Exchange2013_SP1", "Exchange2015",
                  "Exchange2016", "V2015_10_05", "V2016_01_06", "V2016_04_13", "V2016_07_13",
                  "V2016_10_10", "V2017_01_07", "V2017_04_14", "V2017_07_11", "V2017_10_09",
                  "V2018_01_08"]
DEFAULT_VERSIONS = ["Exchange2007_SP1", "Exchange2010", "Exchange2010_SP1", "Exchange2010_SP2",
                    "Exchange2013", "Exchange2013_SP1", "Exchange2016"]
AD_VERSIONS = {"Exchange2010", "Exchange2010_SP1", "Exchange2010_SP2", "Exchange2013",
               "Exchange2013_SP1"}
DEFAULT_DOMAINS = ("example.test,pox.test,soap.test,redirect.test,addr.test,loop.test,"
                   "nowhere.test,bench.test,evil.test,tarpit.test,hosted.test")
MODES = {"pox-root", "pox-autodiscover", "soap", "http-redirect", "redirect-addr",
         "redirect-loop", "none", "hostile", "tarpit", "autoconfig", "autoconfig-wellknown"}
EVENT_TYPES = {"NewMailEvent", "CreatedEvent", "DeletedEvent", "ModifiedEvent", "MovedEvent",
               "CopiedEvent", "FreeBusyChangedEvent"}
SHAPES = {"IdOnly", "Default", "AllProperties"}
FAIL_OPERATIONS = {"Subscribe", "GetItem", "GetFolder", "Autodiscover", "Token"}
MAX_SUBSCRIPTIONS = 20
MAX_BODY = 1 << 20
MAX_RECORDS = 100000
FIELD_URI_RE = re.compile(r"[A-Za-z]+:[A-Za-z0-9]+")
INT_RE = re.compile(r"\s*\+?[0-9]{1,9}\s*")
AUTH_CHALLENGE = (("WWW-Authenticate", 'Basic realm="sim", Bearer'),)
INVALID_TOKEN_CHALLENGE = (("WWW-Authenticate", 'Basic realm="sim", Bearer error="invalid_token"'),)
# -- OAuth 2.0 token endpoint (RFC 6749 refresh_token grant, public clients) --
TOKEN_PATH_RE = re.compile(r"/oauth2/token|/[a-z0-9.-]+/oauth2/v2\.0/token")  # lowercased path
FORM_CT = "application/x-www-form-urlencoded"
OAUTH_JSON_CT = "application/json;charset=UTF-8"
NO_STORE = (("Cache-Control", "no-store"), ("Pragma", "no-cache"))
CLIENT_CHALLENGE = (("WWW-Authenticate", 'Basic realm="sim"'),)
CLIENT_AUTH_PARAMS = {"client_secret", "client_assertion", "client_assertion_type"}
DEFAULT_SCOPE = "https://outlook.office365.com/EWS.AccessAsUser.All offline_access"
SCOPE_TOKEN_RE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # RFC 6749 scope-token (NQCHAR)
CLIENT_ID_RE = re.compile(r"[\w.-]+", re.ASCII)
MAX_FORM_FIELDS = 64
XML_CT = "text/xml; charset=utf-8"
MESSAGES = {
    "ErrorSchemaValidation": "The request failed schema validation.",
    "ErrorInvalidServerVersion": "The specified server version is invalid.",
    "ErrorInvalidRequest": "The request is invalid.",
    "ErrorInvalidPushSubscriptionUrl": "The specified Push subscription URL is invalid.",
    "ErrorInvalidWatermark": "The watermark used for creating this subscription was not found.",
    "ErrorExceededSubscriptionCount": "You have exceeded the available subscriptions for your account.",
    "ErrorItemNotFound": "The specified object was not found in the store.",
    "ErrorFolderNotFound": "The specified folder could not be found in the store.",
    "ErrorServerBusy": "The server cannot service this request right now. Try again later.",
    "ErrorInternalServerError": "An internal server error occurred. The operation failed.",
}
SERVER_VERSION_INFO = (
    f'<s:Header><h:ServerVersionInfo MajorVersion="15" MinorVersion="1" MajorBuildNumber="2507"'
    f' MinorBuildNumber="6" Version="V2017_07_11" xmlns:h="{NS_T}" xmlns="{NS_T}"'
    f' xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:xsi="{NS_XSI}"/></s:Header>')
EWS_HEAD = (f'<?xml version="1.0" encoding="utf-8"?><s:Envelope xmlns:s="{NS_SOAP}">'
            + SERVER_VERSION_INFO + f'<s:Body xmlns:xsi="{NS_XSI}"'
            ' xmlns:xsd="http://www.w3.org/2001/XMLSchema">')
EWS_TAIL = "</s:Body></s:Envelope>"


def now_ms():
    return int(time.time() * 1000)


def utc_stamp():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rand_b64(n):
    return base64.b64encode(secrets.token_bytes(n)).decode()


def attr(value):
    return escape(value, {'"': "&quot;"})


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token_key(token):
    """OAuth tokens are kept only as their SHA-256 (never the value itself)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def scope_list(value):
    """RFC 6749 §3.3 scope: scope-tokens separated by single spaces -> [tokens] (order
    kept, duplicates dropped), or None when malformed."""
    tokens = value.split(" ")
    if not all(SCOPE_TOKEN_RE.fullmatch(t) for t in tokens):
        return None
    return list(dict.fromkeys(tokens))


def oauth_error(status, code, description, headers=()):
    body = json.dumps({"error": code, "error_description": description}).encode()
    return Bad(status, body, OAUTH_JSON_CT, NO_STORE + tuple(headers))


def media_type(value):
    """-> (lowercase type, {lowercase name: lowercase value})."""
    parts = (value or "").split(";")
    params = {}
    for p in parts[1:]:
        k, _, v = p.partition("=")
        params[k.strip().lower()] = v.strip().strip('"').lower()
    return parts[0].strip().lower(), params


def unsafe_xml(body):
    upper = body.upper()
    return b"<!DOCTYPE" in upper or b"<!ENTITY" in upper or b"\x00" in body


def children(el):
    return list(el)


class Bad(Exception):
    """A request the simulator rejects; carries the finished answer."""

    def __init__(self, status, body=b"", ctype=None, headers=()):
        super().__init__(status)
        self.status, self.body, self.ctype, self.headers = status, body, ctype, headers


class SchemaError(Exception):
    pass


def fault(code, message=None, backoff=None, status=500):
    message = message or MESSAGES.get(code, code)
    extra = ""
    if backoff is not None:
        extra = (f'<t:MessageXml xmlns:t="{NS_T}"><t:Value Name="BackOffMilliseconds">'
                 f'{int(backoff)}</t:Value></t:MessageXml>')
    body = (f'<?xml version="1.0" encoding="utf-8"?><s:Envelope xmlns:s="{NS_SOAP}"><s:Body>'
            f'<s:Fault><faultcode xmlns:a="{NS_T}">a:{escape(code)}</faultcode>'
            f'<faultstring xml:lang="en-US">{escape(message)}</faultstring><detail>'
            f'<e:ResponseCode xmlns:e="{NS_E}">{escape(code)}</e:ResponseCode>'
            f'<e:Message xmlns:e="{NS_E}">{escape(message)}</e:Message>{extra}</detail>'
            '</s:Fault></s:Body></s:Envelope>')
    return Bad(status, body.encode(), XML_CT)


def error_message(element, code, message=None, extra=""):
    message = message or MESSAGES.get(code, code)
    return (f'<m:{element} ResponseClass="Error"><m:MessageText>{escape(message)}</m:MessageText>'
            f'<m:ResponseCode>{escape(code)}</m:ResponseCode><m:DescriptiveLinkKey>0'
            f'</m:DescriptiveLinkKey>{extra}</m:{element}>')


def ews_answer(operation, messages):
    return (EWS_HEAD + f'<m:{operation}Response xmlns:m="{NS_M}" xmlns:t="{NS_T}">'
            f'<m:ResponseMessages>{"".join(messages)}</m:ResponseMessages>'
            f'</m:{operation}Response>' + EWS_TAIL).encode()


# -- TLS material ------------------------------------------------------------------------
def ensure_tls(directory, domains):
    os.makedirs(directory, exist_ok=True)
    p = lambda name: os.path.join(directory, name)  # noqa: E731
    with open(p(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wanted = ",".join(domains)
        try:
            with open(p("domains.txt")) as f:
                current = f.read().strip()
        except OSError:
            current = None
        fresh_ca = not os.path.exists(p("ca.pem"))
        stale = (fresh_ca or current != wanted or not os.path.exists(p("server.pem"))
                 or not os.path.exists(p("server.key")))
        if fresh_ca or (stale and not os.path.exists(p("ca.key"))):
            key, cert = certs.make_ca("EWS Simulator CA")
            certs.write_file(p("ca.key"), certs.pem_key(key), private=True)
            certs.write_file(p("ca.pem"), certs.pem_cert(cert))
        if stale:
            with open(p("ca.key"), "rb") as f:
                ca_key = serialization.load_pem_private_key(f.read(), None)
            with open(p("ca.pem"), "rb") as f:
                ca_cert = x509.load_pem_x509_certificate(f.read())
            key = ec.generate_private_key(ec.SECP256R1())
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            for d in domains:
                names += [x509.DNSName(d), x509.DNSName("*." + d)]
            now = datetime.datetime.now(datetime.timezone.utc)
            cert = (x509.CertificateBuilder()
                    .subject_name(certs.name(domains[0] if domains else "localhost"))
                    .issuer_name(ca_cert.subject).public_key(key.public_key())
                    .serial_number(x509.random_serial_number())
                    .not_valid_before(now - datetime.timedelta(days=1))
                    .not_valid_after(now + datetime.timedelta(days=820))
                    .add_extension(x509.SubjectAlternativeName(names), critical=False)
                    .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                    .add_extension(x509.KeyUsage(True, False, False, False, False, False, False,
                                                 False, False), critical=True)
                    .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                                   critical=False)
                    .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                                   critical=False)
                    .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                        ca_key.public_key()), critical=False)
                    .sign(ca_key, hashes.SHA256()))
            certs.write_file(p("server.key"), certs.pem_key(key), private=True)
            certs.write_file(p("server.pem"), certs.pem_cert(cert))
            certs.write_file(p("domains.txt"), (wanted + "\n").encode())
        if not (os.path.exists(p("client-ca.pem")) and os.path.exists(p("client-ca.key"))):
            key, cert = certs.make_ca("EWS Simulator Client CA")
            certs.write_file(p("client-ca.key"), certs.pem_key(key), private=True)
            certs.write_file(p("client-ca.pem"), certs.pem_cert(cert))
        with open(p("client-ca.key"), "rb") as f:
            client_ca_key = serialization.load_pem_private_key(f.read(), None)
        with open(p("client-ca.pem"), "rb") as f:
            client_ca_cert = x509.load_pem_x509_certificate(f.read())
    return client_ca_key, client_ca_cert


# -- state -------------------------------------------------------------------------------
class Item:
    __slots__ = ("id", "change_key", "subject", "from_name", "from_address", "received",
                 "watermark")


class Mailbox:
    def __init__(self, email):
        self.email = email  # lowercase
        self.display_name = email.split("@")[0]
        self.user = self.password = self.token = self.fingerprint = None
        self.versions = set(DEFAULT_VERSIONS)
        self.unread = self.total = 0
        self.items = {}
        self.inbox_id = rand_b64(45)
        self.inbox_ck = rand_b64(15)
        self.watermarks = set()
        self.subscriptions = []


class Notification:
    def __init__(self, kind, items=()):
        self.kind, self.items = kind, list(items)
        self.body = None
        self.last_watermark = None
        self.done = threading.Event()
        self.result = None


class Subscription:
    def __init__(self, sim, mailbox, url, frequency, version, watermark):
        self.id = rand_b64(35)
        self.mailbox, self.url, self.frequency, self.version = mailbox, url, frequency, version
        self.watermark = watermark
        self.alive = True
        self.queue = collections.deque()
        self.cond = threading.Condition(sim.lock)
        self.last_success = time.monotonic()

    def describe(self):
        return {"id": self.id, "email": self.mailbox.email, "url": self.url,
                "frequency": self.frequency, "version": self.version, "alive": self.alive,
                "watermark": self.watermark}


class OAuthClient:
    __slots__ = ("id", "access_lifetime", "refresh_lifetime", "rotate", "scope", "token_bytes")


class Grant:
    """A user's consent to a client: the refresh-token chain and its access tokens."""

    def __init__(self, gid, mailbox, client_id, scope):
        self.id, self.mailbox, self.client_id, self.scope = gid, mailbox, client_id, scope
        self.refreshes = self.refusals = 0
        self.revoked = self.reuse_detected = False
        self.access = []   # AccessToken

    def live_access(self, now):
        return [] if self.revoked else [a for a in self.access if a.expires > now]

    def describe(self, now):
        return {"id": self.id, "email": self.mailbox.email, "clientId": self.client_id,
                "scope": self.scope, "refreshes": self.refreshes, "refusals": self.refusals,
                "revoked": self.revoked, "reuseDetected": self.reuse_detected,
                "accessTokensLive": len(self.live_access(now))}


class AccessToken:
    __slots__ = ("grant", "expires")

    def __init__(self, grant, expires):
        self.grant, self.expires = grant, expires


class RefreshToken:
    __slots__ = ("grant", "expires", "used")

    def __init__(self, grant, expires):
        self.grant, self.expires, self.used = grant, expires, False


class Simulator:
    def __init__(self, args, client_ca_key, client_ca_cert):
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.minute_seconds = args.minute_seconds
        self.retry_scale = args.retry_scale
        self.callback_timeout = args.callback_timeout
        self.callback_trust = certs.CallbackTrust(args.callback_ca)
        self.client_ca_key, self.client_ca_cert = client_ca_key, client_ca_cert
        self.mailboxes = {}   # lowercase email -> Mailbox
        self.by_basic = {}    # (user, password) -> Mailbox
        self.by_token = {}    # token -> Mailbox
        self.by_fp = {}       # sha256 hex -> Mailbox
        self.domains = {}     # domain -> (mode, target)
        self.failures = Failures()  # operation -> dict
        self.denied_devices = set()  # SEG policy stand-in: EAS device ids to deny
        self.oauth_clients = {}   # client id -> OAuthClient
        self.grants = []          # Grant, in creation order
        self.access_tokens = {}   # token_key(access token) -> AccessToken
        self.refresh_tokens = {}  # token_key(refresh token) -> RefreshToken
        self.policy_checks = 0
        self.subscriptions = {}
        self.requests = collections.deque(maxlen=MAX_RECORDS)
        self.callbacks = collections.deque(maxlen=MAX_RECORDS)
        self.violations = []

    # -- helpers ---------------------------------------------------------------------
    def new_watermark(self, mailbox):
        wm = rand_b64(28)
        mailbox.watermarks.add(wm)  # callers hold self.lock
        return wm

    def site_of(self, host):
        """-> (domain, role): role is root, autodiscover, autoconfig or mail."""
        if host not in self.domains:
            for prefix in ("autodiscover.", "autoconfig.", "mail."):
                if host.startswith(prefix):
                    return host[len(prefix):], prefix[:-1]
        return host, "root"

    def authenticate(self, headers, fingerprint):
        """-> (kind presented, Mailbox or None, the 401's headers when None)."""
        authz = headers.get("Authorization")
        mailbox = None
        challenge = AUTH_CHALLENGE
        if authz is not None:
            scheme, _, cred = authz.strip().partition(" ")
            kind = scheme.lower() or "unknown"
            cred = cred.strip()
            if kind == "basic":
                try:
                    user, sep, password = base64.b64decode(cred, validate=True).decode(
                        "utf-8").partition(":")
                    if sep:
                        mailbox = self.by_basic.get((user, password))
                except (ValueError, UnicodeDecodeError):
                    pass
            elif kind == "bearer":
                mailbox = self.by_token.get(cred) if cred else None
                if mailbox is None and cred:
                    with self.lock:
                        token = self.access_tokens.get(token_key(cred))
                        if token is None:
                            pass
                        elif token.grant.revoked or token.expires <= time.monotonic():
                            challenge = INVALID_TOKEN_CHALLENGE
                        else:
                            mailbox = token.grant.mailbox
                if mailbox is not None and headers.get("X-AnchorMailbox") is None:
                    mailbox = None
        elif fingerprint is not None:
            kind, mailbox = "certificate", self.by_fp.get(fingerprint)
        else:
            kind = "none"
        anchor = headers.get("X-AnchorMailbox")
        if mailbox is not None and anchor is not None and anchor.strip().lower() != mailbox.email:
            mailbox = None
        return kind, mailbox, challenge

    @staticmethod
    def ews_url(email):
        return f"https://mail.{email.rpartition('@')[2]}/EWS/Exchange.asmx"

    # -- HTTPS requests --------------------------------------------------------------
    def handle_https(self, h, body, rec):
        path = h.path.split("?", 1)[0].lower()
        if path == "/ews/exchange.asmx":
            if h.command != "POST":
                raise Bad(405, headers=(("Allow", "POST"),))
            return self.ews(h, body, rec)
        if path in ("/mail/config-v1.1.xml", "/.well-known/autoconfig/mail/config-v1.1.xml"):
            return self.autoconfig(h, path, rec)
        if path in ("/autodiscover/autodiscover.xml", "/autodiscover/autodiscover.svc"):
            pox = path.endswith(".xml")
            rec["operation"] = "Autodiscover-POX" if pox else "Autodiscover-SOAP"
            domain, role = self.site_of(rec["host"])
            mode, target = self.domains.get(domain, ("none", None))
            if pox:
                answers = ((role == "root" and mode in ("pox-root", "redirect-addr", "redirect-loop"))
                           or (role == "autodiscover" and mode == "pox-autodiscover")
                           or (role == "mail" and mode == "http-redirect"))
            else:
                answers = role == "autodiscover" and mode == "soap"
            if not answers:
                raise Bad(404)
            if h.command != "POST":
                raise Bad(405, headers=(("Allow", "POST"),))
            kind, mailbox, challenge = self.authenticate(h.headers, h.fingerprint)
            rec["auth"] = kind
            if mailbox is None:
                raise Bad(401, headers=challenge)
            failure = self.failures.take("Autodiscover")
            if pox:
                return self.pox(h, body, rec, mailbox, mode, target, failure)
            return self.soap_autodiscover(h, body, rec, mailbox, failure)
        if TOKEN_PATH_RE.fullmatch(path):
            rec["operation"] = "Token"
            try:
                return self.token_endpoint(h, body, rec)
            except Bad:
                self.count_refusal(body)
                raise
        raise Bad(404)

    @staticmethod
    def apply_delay(failure):
        if failure and failure.get("delayMs"):
            time.sleep(failure["delayMs"] / 1000)

    # -- POX Autodiscover ------------------------------------------------------------
    def autoconfig(self, h, path, rec):
        """Thunderbird's autoconfig file (clientConfig 1.1), for the Dovecot backend's
        discovery: mode autoconfig at https://autoconfig.D/mail/config-v1.1.xml,
        autoconfig-wellknown at https://D/.well-known/autoconfig/mail/config-v1.1.xml;
        the target is HOST:PORT:SOCKETTYPE (SSL, STARTTLS or plain)."""
        rec["operation"] = "Autoconfig"
        domain, role = self.site_of(rec["host"])
        mode, target = self.domains.get(domain, ("none", None))
        answers = ((mode == "autoconfig" and role == "autoconfig" and path == "/mail/config-v1.1.xml")
                   or (mode == "autoconfig-wellknown" and role == "root" and path.startswith("/.well-known/")))
        if not answers:
            raise Bad(404)
        if h.command != "GET":
            raise Bad(405, headers=(("Allow", "GET"),))
        host, port, socket_type = target.rsplit(":", 2)
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n<clientConfig version="1.1">'
                f'<emailProvider id="{escape(domain)}"><domain>{escape(domain)}</domain>'
                '<incomingServer type="pop3"><hostname>pop.example.invalid</hostname><port>995</port>'
                '<socketType>SSL</socketType></incomingServer>'
                f'<incomingServer type="imap"><hostname>{escape(host)}</hostname><port>{escape(port)}</port>'
                f'<socketType>{escape(socket_type)}</socketType><username>%EMAILADDRESS%</username>'
                '<authentication>password-cleartext</authentication></incomingServer>'
                '</emailProvider></clientConfig>')
        return 200, body.encode(), "application/xml"

    @staticmethod
    def pox_error(code, message, status=200):
        body = (f'<?xml version="1.0" encoding="utf-8"?><Autodiscover xmlns="{NS_POX_RESP}">'
                f'<Response><Error Time="{datetime.datetime.now().strftime("%H:%M:%S.%f")}"'
                f' Id="{secrets.randbelow(4000000000)}"><ErrorCode>{escape(str(code))}</ErrorCode>'
                f'<Message>{escape(message)}</Message><DebugData /></Error></Response>'
                '</Autodiscover>')
        return status, body.encode(), XML_CT

    @staticmethod
    def pox_account(account):
        body = (f'<?xml version="1.0" encoding="utf-8"?><Autodiscover xmlns="{NS_POX_RESP}">'
                f'<Response xmlns="{NS_POX_RESP_A}">{account}</Response></Autodiscover>')
        return 200, body.encode(), XML_CT

    def pox(self, h, body, rec, mailbox, mode, target, failure):
        if failure:
            self.apply_delay(failure)
            status, code = failure.get("status"), failure.get("responseCode")
            if status == 500:
                return self.pox_error(603, code or "Internal server error", 500)
            if status:
                raise Bad(status, headers=AUTH_CHALLENGE if status == 401 else ())
            if code:
                return self.pox_error(code if code.isdigit() else 603, code)
        mt, params = media_type(h.headers.get("Content-Type"))
        if mt != "text/xml" or params.get("charset", "utf-8") != "utf-8":
            raise Bad(400)
        if unsafe_xml(body):
            raise Bad(400)
        try:
            root = ET.fromstring(body)
            if root.tag != f"{{{NS_POX_REQ}}}Autodiscover":
                raise SchemaError
            request = [c for c in root if c.tag == f"{{{NS_POX_REQ}}}Request"]
            if len(request) != 1 or len(root) != 1:
                raise SchemaError
            fields = {c.tag: (c.text or "").strip() for c in request[0]}
            email = fields.get(f"{{{NS_POX_REQ}}}EMailAddress")
            schema = fields.get(f"{{{NS_POX_REQ}}}AcceptableResponseSchema")
            if not email or schema is None:
                raise SchemaError
        except (ET.ParseError, SchemaError):
            return self.pox_error(600, "Invalid Request")
        if schema != NS_POX_RESP_A:
            return self.pox_error(601, "The requested schema version is not supported.")
        if mode == "redirect-addr":
            return self.pox_account(f"<Account><AccountType>email</AccountType><Action>redirectAddr"
                                    f"</Action><RedirectAddr>{escape(target)}</RedirectAddr>"
                                    "</Account>")
        if mode == "redirect-loop":
            return self.pox_account(f"<Account><AccountType>email</AccountType><Action>redirectUrl"
                                    f"</Action><RedirectUrl>https://{escape(rec['host'])}"
                                    "/autodiscover/autodiscover.xml</RedirectUrl></Account>")
        asked = self.mailboxes.get(email.lower())
        if asked is None:
            return self.pox_error(500, "The e-mail address cannot be found.")
        if asked is not mailbox:
            raise Bad(401, headers=AUTH_CHALLENGE)
        url = escape(self.ews_url(asked.email))
        server = escape(url.split("/")[2])
        protocols = "".join(
            f"<Protocol><Type>{t}</Type><Server>{server}</Server><ASUrl>{url}</ASUrl>"
            f"<EwsUrl>{url}</EwsUrl></Protocol>" for t in ("EXCH", "EXPR"))
        return self.pox_account(
            f"<User><DisplayName>{escape(asked.display_name)}</DisplayName>"
            f"<LegacyDN>/o=Simulator/ou=Exchange Administrative Group/cn=Recipients/cn="
            f"{escape(asked.email.split('@')[0])}</LegacyDN>"
            f"<AutoDiscoverSMTPAddress>{escape(asked.email)}</AutoDiscoverSMTPAddress>"
            "<DeploymentId>5e6a7b1c-0d2e-4f30-8a41-9b52c6d7e8f9</DeploymentId></User>"
            f"<Account><AccountType>email</AccountType><Action>settings</Action>{protocols}"
            "</Account>")

    # -- SOAP Autodiscover -----------------------------------------------------------
    @staticmethod
    def soap_ad_answer(response):
        body = (f'<?xml version="1.0" encoding="utf-8"?><s:Envelope xmlns:s="{NS_SOAP}"'
                f' xmlns:a="{NS_WSA}"><s:Header><a:Action s:mustUnderstand="1">{GUS_ACTION}'
                f'Response</a:Action><h:ServerVersionInfo xmlns:h="{NS_AD}" xmlns:i="{NS_XSI}">'
                '<h:MajorVersion>15</h:MajorVersion><h:MinorVersion>1</h:MinorVersion>'
                '<h:MajorBuildNumber>2507</h:MajorBuildNumber><h:MinorBuildNumber>6'
                '</h:MinorBuildNumber><h:Version>Exchange2013_SP1</h:Version>'
                '</h:ServerVersionInfo></s:Header><s:Body>'
                f'<GetUserSettingsResponseMessage xmlns="{NS_AD}"><Response xmlns:i="{NS_XSI}">'
                f'{response}</Response></GetUserSettingsResponseMessage></s:Body></s:Envelope>')
        return 200, body.encode(), XML_CT

    @staticmethod
    def soap_ad_schema(reason):
        body = (f'<?xml version="1.0" encoding="utf-8"?><s:Envelope xmlns:s="{NS_SOAP}"><s:Body>'
                f'<s:Fault><faultcode>s:Client</faultcode><faultstring xml:lang="en-US">'
                f'ErrorSchemaValidation: {escape(reason)}</faultstring></s:Fault></s:Body>'
                '</s:Envelope>')
        return Bad(400, body.encode(), XML_CT)

    def soap_autodiscover(self, h, body, rec, mailbox, failure):
        if failure:
            self.apply_delay(failure)
            status, code = failure.get("status"), failure.get("responseCode")
            if status == 500:
                raise fault(code or "InternalServerError")
            if status:
                raise Bad(status, headers=AUTH_CHALLENGE if status == 401 else ())
            if code:
                return self.soap_ad_answer(f"<ErrorCode>{escape(code)}</ErrorCode><ErrorMessage>"
                                           f"{escape(code)}</ErrorMessage><UserResponses />")
        mt, params = media_type(h.headers.get("Content-Type"))
        if mt != "text/xml" or params.get("charset", "utf-8") != "utf-8":
            raise Bad(400)
        if unsafe_xml(body):
            raise Bad(400)
        a = lambda n: f"{{{NS_AD}}}{n}"  # noqa: E731
        try:
            root = ET.fromstring(body)
        except ET.ParseError as e:
            raise self.soap_ad_schema(f"not well-formed XML ({e})")
        if root.tag != f"{{{NS_SOAP}}}Envelope":
            raise self.soap_ad_schema("the root is not a SOAP 1.1 Envelope")
        parts = children(root)
        if [p.tag for p in parts] != [f"{{{NS_SOAP}}}Header", f"{{{NS_SOAP}}}Body"]:
            raise self.soap_ad_schema("the Envelope must hold Header and Body")
        header, soap_body = parts
        found = {}
        for el in header:
            found.setdefault(el.tag, []).append((el.text or "").strip())
        version = found.get(a("RequestedServerVersion"), [None])
        rec["version"] = version[0]
        if len(version) != 1 or version[0] not in AD_VERSIONS:
            raise self.soap_ad_schema("a:RequestedServerVersion missing or invalid")
        action = found.get(f"{{{NS_WSA}}}Action", [])
        if action != [GUS_ACTION]:
            raise self.soap_ad_schema("wsa:Action missing or not GetUserSettings")
        to = found.get(f"{{{NS_WSA}}}To", [])
        try:
            u = urlsplit(to[0]) if len(to) == 1 else None
            ok = (u is not None and u.scheme.lower() == "https"
                  and (u.hostname or "").rstrip(".") == rec["host"]
                  and u.path.lower() == "/autodiscover/autodiscover.svc")
        except ValueError:
            ok = False
        if not ok:
            raise self.soap_ad_schema("wsa:To missing or not this endpoint")
        ops = children(soap_body)
        if len(ops) != 1 or ops[0].tag != a("GetUserSettingsRequestMessage"):
            raise self.soap_ad_schema("the Body must hold one a:GetUserSettingsRequestMessage")
        req = children(ops[0])
        if len(req) != 1 or req[0].tag != a("Request"):
            raise self.soap_ad_schema("a:GetUserSettingsRequestMessage must hold a:Request")
        kids = children(req[0])
        tags = [k.tag for k in kids]
        if tags not in ([a("Users"), a("RequestedSettings")],
                        [a("Users"), a("RequestedSettings"), a("RequestedVersion")]):
            raise self.soap_ad_schema("a:Request must hold a:Users, a:RequestedSettings"
                                      " (, a:RequestedVersion)")
        users = []
        for user in kids[0]:
            boxes = children(user)
            if user.tag != a("User") or len(boxes) != 1 or boxes[0].tag != a("Mailbox") \
                    or not (boxes[0].text or "").strip():
                raise self.soap_ad_schema("a:Users must hold a:User/a:Mailbox elements")
            users.append(boxes[0].text.strip())
        settings = []
        for s in kids[1]:
            if s.tag != a("Setting") or not (s.text or "").strip():
                raise self.soap_ad_schema("a:RequestedSettings must hold a:Setting elements")
            settings.append(s.text.strip())
        if not users or not settings:
            raise self.soap_ad_schema("no users or no settings requested")
        if "ExternalEwsUrl" not in settings:
            raise self.soap_ad_schema("ExternalEwsUrl was not requested")
        responses = []
        for email in users:
            asked = self.mailboxes.get(email.lower())
            if asked is not None and asked is not mailbox:
                raise Bad(401, headers=AUTH_CHALLENGE)
            if asked is None:
                responses.append("<UserResponse><ErrorCode>InvalidUser</ErrorCode><ErrorMessage>"
                                 f"Invalid user: '{escape(email)}'</ErrorMessage>"
                                 '<RedirectTarget i:nil="true" /><UserSettingErrors />'
                                 "<UserSettings /></UserResponse>")
                continue
            url = self.ews_url(asked.email)
            values = {
                "ExternalEwsUrl": url, "InternalEwsUrl": url,
                "EwsSupportedSchemas": ", ".join(v for v in KNOWN_VERSIONS if v in asked.versions),
                "UserDisplayName": asked.display_name, "CasVersion": "15.01.2507.006",
                "UserDN": "/o=Simulator/ou=Exchange Administrative Group/cn=Recipients/cn="
                          + asked.email.split("@")[0],
                "AutoDiscoverSMTPAddress": asked.email,
                "GroupingInformation": "SIM" + hashlib.sha256(asked.email.encode()).hexdigest()[:8],
            }
            good = "".join(f'<UserSetting i:type="StringSetting"><Name>{escape(n)}</Name>'
                           f'<Value>{escape(values[n])}</Value></UserSetting>'
                           for n in settings if n in values)
            bad = "".join(f"<UserSettingError><ErrorCode>InvalidSetting</ErrorCode><ErrorMessage>"
                          f"The requested setting is invalid.</ErrorMessage><SettingName>"
                          f"{escape(n)}</SettingName></UserSettingError>"
                          for n in settings if n not in values)
            responses.append("<UserResponse><ErrorCode>NoError</ErrorCode><ErrorMessage>No error."
                             '</ErrorMessage><RedirectTarget i:nil="true" />'
                             f"<UserSettingErrors>{bad}</UserSettingErrors>"
                             f"<UserSettings>{good}</UserSettings></UserResponse>")
        return self.soap_ad_answer("<ErrorCode>NoError</ErrorCode><ErrorMessage />"
                                   f"<UserResponses>{''.join(responses)}</UserResponses>")

    # -- EWS -------------------------------------------------------------------------
    def ews(self, h, body, rec):
        kind, mailbox, challenge = self.authenticate(h.headers, h.fingerprint)
        rec["auth"] = kind
        hostile = self.domains.get(self.site_of(rec["host"])[0], ("none", None))[0] == "hostile"
        if hostile:
            mailbox = Mailbox("victim@hostile.invalid")
            mailbox.versions = set(KNOWN_VERSIONS)
        if mailbox is None:
            raise Bad(401, headers=challenge)
        rec["mailbox"] = mailbox.email
        mt, params = media_type(h.headers.get("Content-Type"))
        if mt != "text/xml" or params.get("charset") != "utf-8":
            raise Bad(415)
        if unsafe_xml(body):
            raise Bad(400)
        try:
            root = ET.fromstring(body)
        except ET.ParseError:
            raise fault("ErrorSchemaValidation", "The request failed schema validation: the XML"
                        " is not well-formed.")
        if root.tag != f"{{{NS_SOAP}}}Envelope":
            raise fault("ErrorSchemaValidation", "The request failed schema validation: the root"
                        " element is not a SOAP 1.1 Envelope.")
        parts = children(root)
        tags = [p.tag for p in parts]
        if tags == [f"{{{NS_SOAP}}}Body"]:
            header, soap_body = None, parts[0]
        elif tags == [f"{{{NS_SOAP}}}Header", f"{{{NS_SOAP}}}Body"]:
            header, soap_body = parts
        else:
            raise fault("ErrorSchemaValidation", "The request failed schema validation: the"
                        " Envelope must hold an optional Header and a Body.")
        ops = children(soap_body)
        if len(ops) != 1:
            raise fault("ErrorSchemaValidation", "The request failed schema validation: the Body"
                        " must hold exactly one operation.")
        op = ops[0]
        ns, _, name = op.tag[1:].partition("}") if op.tag.startswith("{") else ("", "", op.tag)
        rec["operation"] = name
        if ns != NS_M:
            raise fault("ErrorSchemaValidation", "The request failed schema validation: the"
                        " operation element is not in the messages namespace.")
        rsv = [] if header is None else [e for e in header if e.tag == f"{{{NS_T}}}RequestServerVersion"]
        version = rsv[0].get("Version") if len(rsv) == 1 else None
        rec["version"] = version
        if name in ("Subscribe", "GetItem", "GetFolder"):
            failure = self.failures.take(name)
            if failure:
                self.apply_delay(failure)
                answer = self.injected_ews(name, op, failure)
                if answer is not None:
                    return answer
        if version is None:
            raise fault("ErrorSchemaValidation", "The request failed schema validation: the"
                        " header must hold one t:RequestServerVersion with a Version attribute.")
        if version not in mailbox.versions:
            raise fault("ErrorInvalidServerVersion")
        try:
            if hostile and name == "Subscribe":
                return self.hostile_subscribe(op, rec)
            if name == "Subscribe":
                return self.subscribe(op, rec, mailbox, version)
            if name == "GetItem":
                return self.get_item(op, mailbox)
            if name == "GetFolder":
                return self.get_folder(op, mailbox, hostile=hostile)
        except SchemaError as e:
            raise fault("ErrorSchemaValidation", f"The request failed schema validation: {e}")
        raise fault("ErrorInvalidRequest", f"The request is invalid: {name} is not supported"
                    " by the simulator.")

    @staticmethod
    def injected_ews(name, op, failure):
        status, code = failure.get("status"), failure.get("responseCode")
        if status == 500:
            raise fault(code or "ErrorInternalServerError", backoff=failure.get("backOffMs"))
        if status:
            raise Bad(status, headers=AUTH_CHALLENGE if status == 401 else ())
        if not code:
            return None
        if name == "GetItem":
            n, extra = max(1, sum(1 for _ in op.iter(f"{{{NS_T}}}ItemId"))), "<m:Items />"
        elif name == "GetFolder":
            n = max(1, sum(1 for e in op.iter() if e.tag in (f"{{{NS_T}}}FolderId",
                                                             f"{{{NS_T}}}DistinguishedFolderId")))
            extra = "<m:Folders />"
        else:
            n, extra = 1, ""
        return 200, ews_answer(name, [error_message(name + "ResponseMessage", code, extra=extra)] * n), XML_CT

    def subscribe(self, op, rec, mailbox, version):
        t = lambda n: f"{{{NS_T}}}{n}"  # noqa: E731
        reqs = children(op)
        if len(reqs) != 1 or reqs[0].tag != f"{{{NS_M}}}PushSubscriptionRequest":
            raise SchemaError("m:Subscribe must hold exactly one m:PushSubscriptionRequest")
        psr = reqs[0]
        kids = children(psr)
        url_el = next((k for k in kids if k.tag == t("URL")), None)
        if url_el is not None:
            rec["subscribeUrl"] = url_el.text or ""
        if psr.attrib:
            raise SchemaError("PushSubscriptionRequest attributes are not supported")
        tags = [k.tag for k in kids]
        if tags == [t("FolderIds"), t("EventTypes"), t("StatusFrequency"), t("URL")]:
            folders, events, freq, url = kids
            watermark = None
        elif tags == [t("FolderIds"), t("EventTypes"), t("Watermark"), t("StatusFrequency"), t("URL")]:
            folders, events, wm_el, freq, url = kids
            watermark = wm_el.text or ""
        else:
            raise SchemaError("PushSubscriptionRequest must hold t:FolderIds, t:EventTypes,"
                              " t:Watermark?, t:StatusFrequency, t:URL in this order")
        fids = children(folders)
        if (len(fids) != 1 or fids[0].tag != t("DistinguishedFolderId") or len(fids[0])
                or fids[0].get("Id") != "inbox" or set(fids[0].attrib) - {"Id", "ChangeKey"}):
            raise SchemaError('t:FolderIds must hold one t:DistinguishedFolderId Id="inbox"')
        kinds = []
        for e in events:
            if e.tag != t("EventType") or e.text not in EVENT_TYPES or len(e):
                raise SchemaError(f"invalid t:EventType {e.text!r}")
            kinds.append(e.text)
        if "NewMailEvent" not in kinds:
            raise SchemaError("t:EventTypes must include NewMailEvent")
        if not INT_RE.fullmatch(freq.text or "") or not 1 <= int(freq.text) <= 1440:
            raise SchemaError("t:StatusFrequency must be an integer 1..1440")
        frequency = int(freq.text)
        url = url.text or ""
        if not self.valid_push_url(url):
            return 200, ews_answer("Subscribe", [error_message(
                "SubscribeResponseMessage", "ErrorInvalidPushSubscriptionUrl")]), XML_CT
        with self.lock:
            if watermark is not None and watermark not in mailbox.watermarks:
                code = "ErrorInvalidWatermark"
            elif sum(1 for s in mailbox.subscriptions if s.alive) >= MAX_SUBSCRIPTIONS:
                code = "ErrorExceededSubscriptionCount"
            else:
                code = None
                sub = Subscription(self, mailbox, url, frequency, version, self.new_watermark(mailbox))
                mailbox.subscriptions = [s for s in mailbox.subscriptions if s.alive] + [sub]
                self.subscriptions[sub.id] = sub
        if code:
            return 200, ews_answer("Subscribe", [error_message("SubscribeResponseMessage", code)]), XML_CT
        threading.Thread(target=self.run_subscription, args=(sub,), daemon=True,
                         name="sub-" + sub.id[:8]).start()
        return 200, ews_answer("Subscribe", [
            '<m:SubscribeResponseMessage ResponseClass="Success"><m:ResponseCode>NoError'
            f'</m:ResponseCode><m:SubscriptionId>{sub.id}</m:SubscriptionId><m:Watermark>'
            f'{sub.watermark}</m:Watermark></m:SubscribeResponseMessage>']), XML_CT

    @staticmethod
    def valid_push_url(url):
        if not 0 < len(url) < 2083 or any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7f for c in url):
            return False
        try:
            u = urlsplit(url)
            u.port  # noqa: B018 (raises ValueError for a bad port)
        except ValueError:
            return False
        return u.scheme.lower() in ("http", "https") and bool(u.hostname)

    @staticmethod
    def parse_shape(shape, what):
        kids = children(shape)
        if not kids or kids[0].tag != f"{{{NS_T}}}BaseShape" or kids[0].text not in SHAPES:
            raise SchemaError(f"{what} must start with t:BaseShape IdOnly|Default|AllProperties")
        fields = set()
        if len(kids) == 2 and kids[1].tag == f"{{{NS_T}}}AdditionalProperties":
            props = children(kids[1])
            if not props:
                raise SchemaError("t:AdditionalProperties is empty")
            for p in props:
                uri = p.get("FieldURI") or ""
                if p.tag != f"{{{NS_T}}}FieldURI" or not FIELD_URI_RE.fullmatch(uri):
                    raise SchemaError("t:AdditionalProperties must hold t:FieldURI elements")
                fields.add(uri)
        elif len(kids) != 1:
            raise SchemaError(f"{what} holds t:BaseShape and optionally t:AdditionalProperties")
        return kids[0].text, fields

    def get_item(self, op, mailbox):
        kids = children(op)
        if [k.tag for k in kids] != [f"{{{NS_M}}}ItemShape", f"{{{NS_M}}}ItemIds"]:
            raise SchemaError("m:GetItem must hold m:ItemShape and m:ItemIds")
        base, fields = self.parse_shape(kids[0], "m:ItemShape")
        ids = children(kids[1])
        if not ids:
            raise SchemaError("m:ItemIds is empty")
        for i in ids:
            if i.tag != f"{{{NS_T}}}ItemId" or not i.get("Id"):
                raise SchemaError("m:ItemIds must hold t:ItemId elements with an Id")
        everything = base != "IdOnly"
        want = lambda f: everything or f in fields  # noqa: E731
        messages = []
        for i in ids:
            item = mailbox.items.get(i.get("Id"))
            if item is None:
                messages.append(error_message("GetItemResponseMessage", "ErrorItemNotFound",
                                              extra="<m:Items />"))
                continue
            parts = [f'<t:ItemId Id="{item.id}" ChangeKey="{item.change_key}"/>']
            if want("item:ParentFolderId"):
                parts.append(f'<t:ParentFolderId Id="{mailbox.inbox_id}" ChangeKey="{mailbox.inbox_ck}"/>')
            if want("item:ItemClass"):
                parts.append("<t:ItemClass>IPM.Note</t:ItemClass>")
            if want("item:Subject"):
                parts.append(f"<t:Subject>{escape(item.subject)}</t:Subject>")
            if want("item:DateTimeReceived"):
                parts.append(f"<t:DateTimeReceived>{item.received}</t:DateTimeReceived>")
            who = (f"<t:Mailbox><t:Name>{escape(item.from_name)}</t:Name><t:EmailAddress>"
                   f"{escape(item.from_address)}</t:EmailAddress><t:RoutingType>SMTP</t:RoutingType>"
                   "</t:Mailbox>")
            if want("message:Sender"):
                parts.append(f"<t:Sender>{who}</t:Sender>")
            if want("message:From"):
                parts.append(f"<t:From>{who}</t:From>")
            if want("message:IsRead"):
                parts.append("<t:IsRead>false</t:IsRead>")
            messages.append('<m:GetItemResponseMessage ResponseClass="Success"><m:ResponseCode>'
                            f'NoError</m:ResponseCode><m:Items><t:Message>{"".join(parts)}'
                            '</t:Message></m:Items></m:GetItemResponseMessage>')
        return 200, ews_answer("GetItem", messages), XML_CT

    @staticmethod
    def hostile_subscribe(op, rec):
        if not len(op) or op[0].tag != f"{{{NS_M}}}PushSubscriptionRequest":
            raise SchemaError("m:Subscribe must hold exactly one m:PushSubscriptionRequest")
        # What an attacker's server learns: the callback URL, recorded like a real one's.
        url = next((k for k in op[0] if k.tag == f"{{{NS_T}}}URL"), None)
        rec["subscribeUrl"] = url.text or "" if url is not None else ""
        message = ('<m:SubscribeResponseMessage ResponseClass="Success"><m:ResponseCode>NoError'
                   f'</m:ResponseCode><m:SubscriptionId>{rand_b64(24)}</m:SubscriptionId>'
                   f'<m:Watermark>{rand_b64(30)}</m:Watermark></m:SubscribeResponseMessage>')
        return 200, ews_answer("Subscribe", [message]), XML_CT

    def mailbox_access(self, folder, mailbox, hostile):
        """None when a DistinguishedFolderId's optional t:Mailbox is one the credentials
        may open, else the EWS error code."""
        boxes = children(folder)
        if not boxes:
            return None
        addresses = children(boxes[0]) if len(boxes) == 1 and boxes[0].tag == f"{{{NS_T}}}Mailbox" else []
        if len(addresses) != 1 or addresses[0].tag != f"{{{NS_T}}}EmailAddress":
            raise SchemaError("t:DistinguishedFolderId may hold one t:Mailbox with one t:EmailAddress")
        address = (addresses[0].text or "").strip().lower()
        # Every address of a redirect-addr domain is a proxy address of its target's
        # mailbox (as Autodiscover there says), and Exchange resolves proxy addresses.
        mode, target = self.domains.get(address.rpartition("@")[2], ("none", None))
        if mode == "redirect-addr" and target:
            address = target.lower()
        if hostile or address == mailbox.email:
            return None
        with self.lock:
            known = address in self.mailboxes
        return "ErrorAccessDenied" if known else "ErrorNonExistentMailbox"

    def get_folder(self, op, mailbox, hostile=False):
        kids = children(op)
        if [k.tag for k in kids] != [f"{{{NS_M}}}FolderShape", f"{{{NS_M}}}FolderIds"]:
            raise SchemaError("m:GetFolder must hold m:FolderShape and m:FolderIds")
        base, fields = self.parse_shape(kids[0], "m:FolderShape")
        ids = children(kids[1])
        if not ids:
            raise SchemaError("m:FolderIds is empty")
        found = []
        for f in ids:
            if f.tag == f"{{{NS_T}}}DistinguishedFolderId" and f.get("Id") == "inbox":
                found.append(self.mailbox_access(f, mailbox, hostile) or True)
            elif f.tag == f"{{{NS_T}}}FolderId" and f.get("Id"):
                found.append(f.get("Id") == mailbox.inbox_id)
            else:
                raise SchemaError('m:FolderIds must hold t:DistinguishedFolderId Id="inbox" or'
                                  " t:FolderId elements")
        everything = base != "IdOnly"
        want = lambda f: everything or f in fields  # noqa: E731
        with self.lock:
            total, unread = mailbox.total, mailbox.unread
        parts = [f'<t:FolderId Id="{mailbox.inbox_id}" ChangeKey="{mailbox.inbox_ck}"/>']
        if want("folder:DisplayName"):
            parts.append("<t:DisplayName>Inbox</t:DisplayName>")
        if want("folder:TotalCount"):
            parts.append(f"<t:TotalCount>{total}</t:TotalCount>")
        if want("folder:ChildFolderCount"):
            parts.append("<t:ChildFolderCount>0</t:ChildFolderCount>")
        if want("folder:UnreadCount"):
            parts.append(f"<t:UnreadCount>{unread}</t:UnreadCount>")
        folder = ('<m:GetFolderResponseMessage ResponseClass="Success"><m:ResponseCode>NoError'
                  f'</m:ResponseCode><m:Folders><t:Folder>{"".join(parts)}</t:Folder></m:Folders>'
                  '</m:GetFolderResponseMessage>')
        def refused(code):
            return error_message("GetFolderResponseMessage", code, extra="<m:Folders />")
        return 200, ews_answer("GetFolder", [folder if ok is True else refused(ok or "ErrorFolderNotFound")
                                             for ok in found]), XML_CT

    # -- OAuth 2.0 token endpoint ----------------------------------------------------
    def issue_access(self, grant, client, scope):
        """Caller holds self.lock. -> (access token, expires_in)."""
        now = time.time()
        header = {"typ": "JWT", "alg": "RS256", "kid": "sim"}
        claims = {"aud": "https://outlook.office365.com", "iss": "https://sts.sim.test/",
                  "iat": int(now), "nbf": int(now), "exp": int(now + client.access_lifetime),
                  "appid": client.id, "upn": grant.mailbox.email, "scp": scope,
                  "jti": secrets.token_urlsafe(16)}
        token = ".".join((b64url(json.dumps(header, separators=(",", ":")).encode()),
                          b64url(json.dumps(claims, separators=(",", ":")).encode()),
                          b64url(secrets.token_bytes(client.token_bytes))))
        access = AccessToken(grant, time.monotonic() + client.access_lifetime)
        grant.access.append(access)
        self.access_tokens[token_key(token)] = access
        return token, math.ceil(client.access_lifetime)

    def issue_refresh(self, grant, client):
        """Caller holds self.lock."""
        token = "rt." + secrets.token_urlsafe(48)
        self.refresh_tokens[token_key(token)] = RefreshToken(
            grant, time.monotonic() + client.refresh_lifetime)
        return token

    def count_refusal(self, body):
        """A non-200 token-endpoint answer: one refusal for every grant whose refresh
        token (current or used) the body names, however malformed the body."""
        try:
            pairs = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        except ValueError:
            return
        with self.lock:
            grants = {id(t.grant): t.grant for t in
                      (self.refresh_tokens.get(token_key(v)) for k, v in pairs
                       if k == "refresh_token" and v) if t is not None}
            for grant in grants.values():
                grant.refusals += 1

    def token_endpoint(self, h, body, rec):
        authz = h.headers.get("Authorization")
        rec["auth"] = ((authz.strip().partition(" ")[0].lower() or "unknown")
                       if authz is not None else "none")
        if h.command != "POST":
            raise Bad(405, headers=(("Allow", "POST"),) + NO_STORE)
        failure = self.failures.take("Token")
        if failure:
            self.apply_delay(failure)
            status, code = failure.get("status"), failure.get("responseCode")
            if status:
                extra = CLIENT_CHALLENGE if status == 401 else ()
                if status >= 500 or status == 429:
                    if failure.get("backOffMs") is not None:
                        extra += (("Retry-After", str(math.ceil(failure["backOffMs"] / 1000))),)
                    raise oauth_error(status, "temporarily_unavailable", "Injected failure.", extra)
                raise Bad(status, headers=NO_STORE + extra)
            if code:
                raise oauth_error(400, code, "Injected failure.")
        if "?" in h.path:
            raise oauth_error(400, "invalid_request", "The token endpoint takes no query string.")
        mt, params = media_type(h.headers.get("Content-Type"))
        if mt != FORM_CT or params.get("charset", "utf-8") != "utf-8":
            raise oauth_error(400, "invalid_request",
                              "The Content-Type must be application/x-www-form-urlencoded.")
        names = {k for k, _ in parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)}
        if authz is not None or names & CLIENT_AUTH_PARAMS:
            raise oauth_error(401, "invalid_client", "Public clients must not authenticate.",
                              CLIENT_CHALLENGE)
        try:
            pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=True,
                              errors="strict", max_num_fields=MAX_FORM_FIELDS)
        except ValueError:  # UnicodeDecodeError included
            raise oauth_error(400, "invalid_request",
                              "The body is not UTF-8 application/x-www-form-urlencoded.")
        seen = collections.Counter(k for k, _ in pairs)
        if "" in seen:
            raise oauth_error(400, "invalid_request", "A parameter has no name.")
        twice = sorted(k for k, n in seen.items() if n > 1)
        if twice:
            raise oauth_error(400, "invalid_request",
                              f"Parameter {twice[0][:40]!r} is included more than once.")
        form = {k: v for k, v in pairs if v != ""}  # RFC 6749 §3.1: empty = omitted
        grant_type = form.get("grant_type")
        if grant_type is None:
            raise oauth_error(400, "invalid_request", "grant_type is missing.")
        if grant_type != "refresh_token":
            raise oauth_error(400, "unsupported_grant_type", "Only refresh_token is supported.")
        client_id = form.get("client_id")
        if client_id is None:
            raise oauth_error(400, "invalid_request", "client_id is missing.")
        refresh = form.get("refresh_token")
        scope = form.get("scope")
        with self.lock:
            client = self.oauth_clients.get(client_id)
            if client is None:
                raise oauth_error(401, "invalid_client", "Unknown client.", CLIENT_CHALLENGE)
            if refresh is None:
                raise oauth_error(400, "invalid_request", "refresh_token is missing.")
            entry = self.refresh_tokens.get(token_key(refresh))
            if entry is None:
                raise oauth_error(400, "invalid_grant", "Unknown refresh token.")
            grant = entry.grant
            if grant.client_id != client_id:
                raise oauth_error(400, "invalid_grant",
                                  "The refresh token was issued to another client.")
            if grant.revoked:
                raise oauth_error(400, "invalid_grant", "The grant has been revoked.")
            if entry.used:
                grant.revoked = grant.reuse_detected = True
                raise oauth_error(400, "invalid_grant", "The refresh token was already used;"
                                  " the grant has been revoked.")
            if entry.expires <= time.monotonic():
                raise oauth_error(400, "invalid_grant", "The refresh token has expired.")
            granted = grant.scope.split(" ")
            if scope is None:
                asked = granted
            else:
                asked = scope_list(scope)
                if asked is None or not set(asked) <= set(granted):
                    raise oauth_error(400, "invalid_scope",
                                      "The requested scope exceeds the granted scope.")
            access, expires_in = self.issue_access(grant, client, " ".join(asked))
            if client.rotate:
                entry.used = True
                refresh = self.issue_refresh(grant, client)
            grant.refreshes += 1
        body = json.dumps({"token_type": "Bearer", "access_token": access,
                           "expires_in": expires_in, "scope": " ".join(asked),
                           "refresh_token": refresh}).encode()
        return 200, body, OAUTH_JSON_CT, NO_STORE

    # -- plain HTTP (Autodiscover redirect method) -----------------------------------
    def handle_http(self, h, body, rec):
        path = h.path.split("?", 1)[0].lower()
        if path == "/autodiscover/autodiscover.xml":
            rec["operation"] = "Autodiscover-HTTP"
        if h.headers.get("Authorization") is not None:
            rec["auth"] = (h.headers["Authorization"].strip().partition(" ")[0].lower()
                           or "unknown")
            with self.lock:
                self.violations.append(
                    f"{now_ms()}: credentials ({rec['auth']}) sent over plain HTTP to "
                    f"http://{rec['host']}{h.path.split('?', 1)[0]}")
            raise Bad(400)
        domain, role = self.site_of(rec["host"])
        mode = self.domains.get(domain, ("none", None))[0]
        if path == "/autodiscover/autodiscover.xml" and role == "autodiscover" \
                and mode == "http-redirect":
            if h.command != "GET":
                raise Bad(405, headers=(("Allow", "GET"),))
            raise Bad(302, headers=(("Location", f"https://mail.{domain}/autodiscover/autodiscover.xml"),))
        raise Bad(404)

    # -- callbacks -------------------------------------------------------------------
    def post_notification(self, url, body):
        """-> (httpStatus or None, subscriptionStatus or None, error or None)."""
        status = None
        try:
            u = urlsplit(url)
            target = u.path or "/"
            if u.query:
                target += "?" + u.query
            if u.scheme.lower() == "https":
                conn = http.client.HTTPSConnection(u.hostname, u.port or 443,
                                                   timeout=self.callback_timeout,
                                                   context=self.callback_trust.get())
            else:
                conn = http.client.HTTPConnection(u.hostname, u.port or 80,
                                                  timeout=self.callback_timeout)
            try:
                conn.request("POST", target, body, {
                    "Content-Type": XML_CT, "SOAPAction": SOAP_ACTION_SEND, "Accept": "text/xml"})
                resp = conn.getresponse()
                status = resp.status
                data = resp.read(MAX_BODY + 1)
                ctype = resp.getheader("Content-Type")
            finally:
                conn.close()
        except (socket.timeout, TimeoutError):
            return status, None, "timeout"
        except ssl.SSLError as e:
            return status, None, f"TLS error: {e.reason or e}"
        except (OSError, http.client.HTTPException, ValueError) as e:
            return status, None, f"connection error: {type(e).__name__}: {e}"
        if status != 200:
            return status, None, f"HTTP status {status}"
        if media_type(ctype)[0] != "text/xml":
            return status, None, f"Content-Type {ctype!r} is not text/xml"
        if len(data) > MAX_BODY or unsafe_xml(data):
            return status, None, "answer too large or contains a DOCTYPE/ENTITY"
        try:
            root = ET.fromstring(data)
        except ET.ParseError as e:
            return status, None, f"answer is not well-formed XML: {e}"
        bodies = [c for c in root if c.tag == f"{{{NS_SOAP}}}Body"] \
            if root.tag == f"{{{NS_SOAP}}}Envelope" else []
        result = [c for c in bodies[0] if c.tag == f"{{{NS_M}}}SendNotificationResult"] \
            if len(bodies) == 1 else []
        sst = [c for c in result[0] if c.tag == f"{{{NS_M}}}SubscriptionStatus"] \
            if len(result) == 1 else []
        if len(sst) != 1:
            return status, None, "answer lacks soap:Envelope/soap:Body/m:SendNotificationResult/" \
                                 "m:SubscriptionStatus"
        if sst[0].text not in ("OK", "Unsubscribe"):
            return status, None, f"SubscriptionStatus {sst[0].text!r} is not OK or Unsubscribe"
        return status, sst[0].text, None

    def build_notification(self, sub, note):
        """Fixes note.body; caller holds self.lock."""
        events = []
        if note.kind == "newmail":
            for item in note.items:
                events.append(
                    f'<t:NewMailEvent xmlns:t="{NS_T}"><t:Watermark>{item.watermark}</t:Watermark>'
                    f'<t:TimeStamp>{item.received}</t:TimeStamp><t:ItemId Id="{item.id}"'
                    f' ChangeKey="{item.change_key}" /><t:ParentFolderId Id="{sub.mailbox.inbox_id}"'
                    f' ChangeKey="{sub.mailbox.inbox_ck}" /></t:NewMailEvent>')
                note.last_watermark = item.watermark
        else:
            note.last_watermark = self.new_watermark(sub.mailbox)
            events.append(f'<t:StatusEvent xmlns:t="{NS_T}"><t:Watermark>{note.last_watermark}'
                          '</t:Watermark></t:StatusEvent>')
        note.body = (
            f'<?xml version="1.0" encoding="utf-8"?><soap11:Envelope xmlns:soap11="{NS_SOAP}">'
            f'<soap11:Header><t:RequestServerVersion xmlns:t="{NS_T}" Version="{attr(sub.version)}"'
            ' /></soap11:Header><soap11:Body>'
            f'<m:SendNotification xmlns:m="{NS_M}"><m:ResponseMessages>'
            '<m:SendNotificationResponseMessage ResponseClass="Success"><m:ResponseCode>NoError'
            f'</m:ResponseCode><m:Notification><t:SubscriptionId xmlns:t="{NS_T}">{sub.id}'
            f'</t:SubscriptionId><t:PreviousWatermark xmlns:t="{NS_T}">{sub.watermark}'
            f'</t:PreviousWatermark><t:MoreEvents xmlns:t="{NS_T}">false</t:MoreEvents>'
            + "".join(events) + '</m:Notification></m:SendNotificationResponseMessage>'
            '</m:ResponseMessages></m:SendNotification></soap11:Body></soap11:Envelope>').encode()

    def kill(self, sub, why):
        """Caller holds self.lock."""
        sub.alive = False
        while sub.queue:
            note = sub.queue.popleft()
            if not note.done.is_set():
                note.result = {"subscriptionId": sub.id, "httpStatus": None,
                               "subscriptionStatus": None, "error": why}
                note.done.set()
        sub.cond.notify_all()

    def run_subscription(self, sub):
        period = sub.frequency * self.minute_seconds
        while True:
            with self.lock:
                while True:
                    if self.stopping.is_set() or not sub.alive:
                        if sub.alive:
                            self.kill(sub, "simulator stopping")
                        return
                    if sub.queue:
                        note = sub.queue[0]
                        break
                    wait = sub.last_success + period - time.monotonic()
                    if wait <= 0:
                        note = Notification("heartbeat")
                        sub.queue.appendleft(note)
                        break
                    sub.cond.wait(min(wait, 1.0))
                if note.body is None:
                    self.build_notification(sub, note)
            self.deliver(sub, note, period)

    def deliver(self, sub, note, period):
        first = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            http_status, sub_status, error = self.post_notification(sub.url, note.body)
            entry = {"time": now_ms(), "subscriptionId": sub.id, "kind": note.kind,
                     "attempt": attempt, "httpStatus": http_status,
                     "subscriptionStatus": sub_status, "error": error}
            print(f"ews_simulator: callback {note.kind} sub={sub.id[:8]} attempt={attempt} -> "
                  f"{http_status} {sub_status or error}", file=sys.stderr, flush=True)
            with self.lock:
                self.callbacks.append(entry)
                if attempt == 1:
                    note.result = {"subscriptionId": sub.id, "httpStatus": http_status,
                                   "subscriptionStatus": sub_status}
                    if error:
                        note.result["error"] = error
                    note.done.set()
                if error is None:
                    if sub.queue and sub.queue[0] is note:
                        sub.queue.popleft()
                    sub.last_success = time.monotonic()
                    sub.watermark = note.last_watermark
                    if sub_status == "Unsubscribe":
                        self.kill(sub, "the subscription was unsubscribed")
                    return
                offset = 30 * self.retry_scale * 2 ** (attempt - 1)
                if offset >= period or not sub.alive:
                    self.kill(sub, "retries exhausted; the subscription is dead")
                    return
            if self.stopping.wait(max(0.0, first + offset - time.monotonic())):
                return

    def enqueue(self, subs, make):
        """Caller holds self.lock. -> [(sub, note)]."""
        out = []
        for sub in subs:
            note = make(sub)
            sub.queue.append(note)
            sub.cond.notify_all()
            out.append((sub, note))
        return out

    def wait_results(self, pairs):
        results = []
        deadline = time.monotonic() + self.callback_timeout + 5
        for sub, note in pairs:
            if not note.done.wait(max(0.0, deadline - time.monotonic())):
                results.append({"subscriptionId": sub.id, "httpStatus": None,
                                "subscriptionStatus": None,
                                "error": "no attempt yet (queued behind another notification)"})
            else:
                results.append(note.result)
        return results

    # -- control operations ----------------------------------------------------------
    def put_mailbox(self, req):
        email = req.get("email")
        if not isinstance(email, str) or email.count("@") != 1 or not email.split("@")[1] \
                or not email.split("@")[0]:
            raise ValueError("email must be an address")
        for key in ("userName", "password", "oauthToken", "displayName"):
            if req.get(key) is not None and not isinstance(req[key], str):
                raise ValueError(f"{key} must be a string")
        versions = req.get("versions")
        if versions is not None and (not isinstance(versions, list) or not versions
                                     or any(v not in KNOWN_VERSIONS for v in versions)):
            raise ValueError(f"versions must be a non-empty list of {KNOWN_VERSIONS}")
        unread = req.get("unread")
        if unread is not None and (not isinstance(unread, int) or isinstance(unread, bool)
                                   or unread < 0):
            raise ValueError("unread must be a non-negative integer")
        answer = {"ok": True}
        fingerprint = None
        kind = req.get("certificate")
        if kind is not None and kind is not False:
            kind = "ec" if kind is True else kind
            if kind not in ("ec", "rsa2048", "rsa4096", "rsa2048-chain"):
                raise ValueError("certificate must be true, ec, rsa2048, rsa4096 or rsa2048-chain")
            key = (ec.generate_private_key(ec.SECP256R1()) if kind == "ec"
                   else rsa.generate_private_key(65537, 4096 if kind == "rsa4096" else 2048))
            now = datetime.datetime.now(datetime.timezone.utc)
            issuer_key, issuer_cert, chain = self.client_ca_key, self.client_ca_cert, None
            if kind.endswith("-chain"):
                # An issuing CA under the client CA: the server trusts only the root, so
                # the client must send the intermediate after its certificate.
                issuer_key = ec.generate_private_key(ec.SECP256R1())
                issuer_cert = (x509.CertificateBuilder().subject_name(certs.name("ENS simulator issuing CA"))
                               .issuer_name(self.client_ca_cert.subject).public_key(issuer_key.public_key())
                               .serial_number(x509.random_serial_number())
                               .not_valid_before(now - datetime.timedelta(hours=1))
                               .not_valid_after(now + datetime.timedelta(days=365))
                               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                               .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                                              critical=True)
                               .sign(self.client_ca_key, hashes.SHA256()))
                chain = [issuer_cert]
            cert = (x509.CertificateBuilder().subject_name(certs.name(email))
                    .issuer_name(issuer_cert.subject).public_key(key.public_key())
                    .serial_number(x509.random_serial_number())
                    .not_valid_before(now - datetime.timedelta(hours=1))
                    .not_valid_after(now + datetime.timedelta(days=365))
                    .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                    .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                                   critical=False)
                    .sign(issuer_key, hashes.SHA256()))
            password = secrets.token_urlsafe(18)
            p12 = pkcs12.serialize_key_and_certificates(
                email.encode(), key, cert, chain,
                serialization.BestAvailableEncryption(password.encode()))
            fingerprint = cert.fingerprint(hashes.SHA256()).hex()
            answer.update(pkcs12=base64.b64encode(p12).decode(), pkcs12Password=password)
        with self.lock:
            mb = self.mailboxes.get(email.lower())
            if mb is None:
                mb = self.mailboxes[email.lower()] = Mailbox(email.lower())
                mb.unread = mb.total = unread or 0
            elif unread is not None:
                mb.unread = unread
                mb.total = max(mb.total, unread)
            for table, old in ((self.by_basic, (mb.user, mb.password)), (self.by_token, mb.token),
                               (self.by_fp, mb.fingerprint)):
                if table.get(old) is mb:
                    del table[old]
            mb.user, mb.password = req.get("userName"), req.get("password")
            mb.token = req.get("oauthToken") or None
            mb.fingerprint = fingerprint
            mb.display_name = req.get("displayName") or email.split("@")[0]
            mb.versions = set(versions or DEFAULT_VERSIONS)
            if mb.user is not None and mb.password is not None:
                self.by_basic[(mb.user, mb.password)] = mb
            if mb.token:
                self.by_token[mb.token] = mb
            if fingerprint:
                self.by_fp[fingerprint] = mb
        return answer

    def new_mail(self, req):
        mb = self.mailboxes.get(str(req.get("email", "")).lower())
        if mb is None:
            raise LookupError("no such mailbox")
        count = req.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 1000:
            raise ValueError("count must be 1..1000")
        subject = str(req.get("subject", "Test message"))
        from_name = str(req.get("fromName", "Test Sender"))
        from_address = str(req.get("fromAddress", "sender@example.test"))
        with self.lock:
            items = []
            for _ in range(count):
                item = Item()
                item.id, item.change_key = rand_b64(70), rand_b64(28)
                item.subject, item.from_name, item.from_address = subject, from_name, from_address
                item.received = utc_stamp()
                item.watermark = self.new_watermark(mb)
                mb.items[item.id] = item
                items.append(item)
            mb.unread += count
            mb.total += count
            live = [s for s in mb.subscriptions if s.alive]
            answer = {"ok": True, "items": [i.id for i in items]}
            if req.get("deliver", True) is False:
                notes = []
                for sub in live:
                    note = Notification("newmail", items)
                    self.build_notification(sub, note)
                    notes.append({"subscriptionId": sub.id, "url": sub.url,
                                  "body": note.body.decode()})
                answer["notifications"] = notes
                return answer
            pairs = self.enqueue(live, lambda sub: Notification("newmail", items))
        return self.finish_enqueue(answer, pairs, req)

    def heartbeat(self, req):
        with self.lock:
            if req.get("email") is not None:
                mb = self.mailboxes.get(str(req["email"]).lower())
                if mb is None:
                    raise LookupError("no such mailbox")
                subs = [s for s in mb.subscriptions if s.alive]
            else:
                subs = [s for s in self.subscriptions.values() if s.alive]
            pairs = self.enqueue(subs, lambda sub: Notification("heartbeat"))
        return self.finish_enqueue({"ok": True}, pairs, req)

    def finish_enqueue(self, answer, pairs, req):
        if req.get("wait", True) is not False:
            answer["callbacks"] = self.wait_results(pairs)
        else:
            answer["subscriptions"] = [sub.id for sub, _ in pairs]
        return answer

    def set_failure(self, req):
        op = req.get("operation")
        if op not in FAIL_OPERATIONS:
            raise ValueError(f"operation must be one of {sorted(FAIL_OPERATIONS)}")
        status, code = req.get("status"), req.get("responseCode")
        delay, backoff, count = req.get("delayMs"), req.get("backOffMs"), req.get("count") or 0
        if status is not None and (not isinstance(status, int) or not 400 <= status <= 599):
            raise ValueError("status must be 400..599")
        if code is not None and (not isinstance(code, str) or not re.fullmatch(r"\w+", code)):
            raise ValueError("responseCode must be a word")
        for name, v in (("delayMs", delay), ("backOffMs", backoff), ("count", count)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ValueError(f"{name} must be a non-negative integer")
        self.failures.inject(op, {"status": status, "responseCode": code, "delayMs": delay,
                                  "backOffMs": backoff}, count)
        return {"ok": True}

    def set_domain(self, req):
        domain, mode, target = req.get("domain"), req.get("mode"), req.get("target")
        if not isinstance(domain, str) or not domain:
            raise ValueError("domain must be a string")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {sorted(MODES)}")
        if mode == "redirect-addr" and (not isinstance(target, str) or "@" not in target):
            raise ValueError("redirect-addr needs a target address")
        if mode.startswith("autoconfig") and (not isinstance(target, str) or target.count(":") < 2):
            raise ValueError("autoconfig needs a target HOST:PORT:SOCKETTYPE")
        with self.lock:
            self.domains[domain.lower().rstrip(".")] = (mode, target)
        return {"ok": True}

    # -- OAuth control operations ----------------------------------------------------
    @staticmethod
    def only_keys(req, allowed):
        unknown = sorted(set(req) - set(allowed))
        if unknown:
            raise ValueError(f"unknown keys {unknown}; allowed: {sorted(allowed)}")

    def oauth_mailbox(self, req):
        """Caller holds self.lock."""
        email = req.get("email")
        if not isinstance(email, str) or not email:
            raise ValueError("email must be a non-empty string")
        mb = self.mailboxes.get(email.lower())
        if mb is None:
            raise LookupError("no such mailbox")
        return mb

    def put_oauth_client(self, req):
        self.only_keys(req, ("clientId", "accessLifetime", "refreshLifetime", "rotate", "scope",
                             "accessTokenBytes"))
        client = OAuthClient()
        client.id = req.get("clientId")
        if not isinstance(client.id, str) or not CLIENT_ID_RE.fullmatch(client.id):
            raise ValueError("clientId must be a non-empty string of [A-Za-z0-9_.-]")
        for name, attr_name, default in (("accessLifetime", "access_lifetime", 3600),
                                         ("refreshLifetime", "refresh_lifetime", 7776000)):
            v = req.get(name)
            v = default if v is None else v
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v <= 0:
                raise ValueError(f"{name} must be a number of seconds > 0")
            setattr(client, attr_name, v)
        client.rotate = True if req.get("rotate") is None else req["rotate"]
        if not isinstance(client.rotate, bool):
            raise ValueError("rotate must be true or false")
        client.scope = DEFAULT_SCOPE if req.get("scope") is None else req["scope"]
        if not isinstance(client.scope, str) or scope_list(client.scope) is None:
            raise ValueError("scope must be scope tokens separated by single spaces")
        client.scope = " ".join(scope_list(client.scope))
        n = req.get("accessTokenBytes")
        client.token_bytes = 1200 if n is None else n
        if isinstance(client.token_bytes, bool) or not isinstance(client.token_bytes, int) \
                or not 64 <= client.token_bytes <= 8192:
            raise ValueError("accessTokenBytes must be an integer 64..8192")
        with self.lock:
            self.oauth_clients[client.id] = client
        return {"ok": True}

    def put_grant(self, req):
        self.only_keys(req, ("email", "clientId"))
        client_id = req.get("clientId")
        if not isinstance(client_id, str) or not client_id:
            raise ValueError("clientId must be a non-empty string")
        with self.lock:
            mb = self.oauth_mailbox(req)
            client = self.oauth_clients.get(client_id)
            if client is None:
                raise LookupError("no such OAuth client")
            grant = Grant(len(self.grants) + 1, mb, client.id, client.scope)
            self.grants.append(grant)
            access, expires_in = self.issue_access(grant, client, grant.scope)
            refresh = self.issue_refresh(grant, client)
        return {"ok": True, "grantId": grant.id, "accessToken": access, "refreshToken": refresh,
                "expiresIn": expires_in, "scope": grant.scope}

    def expire_access(self, req):
        self.only_keys(req, ("email",))
        with self.lock:
            mb = self.oauth_mailbox(req)
            now = time.monotonic()
            n = 0
            for grant in self.grants:
                if grant.mailbox is mb:
                    for access in grant.access:
                        if access.expires > now:
                            n += not grant.revoked
                            access.expires = now
        return {"ok": True, "expired": n}

    def revoke_grants(self, req):
        self.only_keys(req, ("email",))
        with self.lock:
            mb = self.oauth_mailbox(req)
            n = 0
            for grant in self.grants:
                if grant.mailbox is mb and not grant.revoked:
                    grant.revoked = True
                    n += 1
        return {"ok": True, "revoked": n}


# -- servers -----------------------------------------------------------------------------
def host_of(value):
    host = (value or "").strip().lower()
    if host.startswith("["):
        host = host[:host.find("]") + 1]
    else:
        host = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return host.rstrip(".")


def make_handler(sim, scheme):
    class Handler(https.RequestHandler):
        fingerprint = None

        def setup(self):
            super().setup()
            if scheme == "https":
                der = self.connection.getpeercert(binary_form=True)
                if der:
                    self.fingerprint = hashlib.sha256(der).hexdigest()

        def dispatch(self):
            rec = {"time": now_ms(), "scheme": scheme, "host": host_of(self.headers.get("Host")),
                   "path": self.path, "method": self.command, "operation": None, "auth": None,
                   "version": None, "status": None, "subscribeUrl": None,
                   "connection": f"{self.client_address[0]}:{self.client_address[1]}"}
            try:
                try:
                    body = https.read_body(self, MAX_BODY)
                except https.BodyError as e:
                    raise Bad(e.status)
                if self.headers.get("Content-Length") is None and self.command == "POST":
                    raise Bad(411)
                if scheme == "https" and sim.domains.get(sim.site_of(rec["host"])[0], ("none", None))[0] == "tarpit":
                    rec["operation"] = "tarpit"
                    with sim.lock:
                        sim.requests.append(rec)
                    self.close_connection = True
                    for byte in b"HTTP/1.1 200 OK\r\n"[:60]:
                        try:
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                        except OSError:
                            break
                        time.sleep(1)
                    return
                if scheme == "https":
                    answer = sim.handle_https(self, body, rec)
                else:
                    answer = sim.handle_http(self, body, rec)
                status, out, ctype = answer[:3]
                headers = answer[3] if len(answer) > 3 else ()
            except Bad as bad:
                status, out, ctype, headers = bad.status, bad.body, bad.ctype, bad.headers
            except Exception as e:  # a simulator bug: answer 500 and say so
                print(f"ews_simulator: internal error: {e!r}", file=sys.stderr, flush=True)
                status, out, ctype, headers = 500, b"", None, ()
            if rec["auth"] is None:
                authz = self.headers.get("Authorization")
                rec["auth"] = ((authz.strip().partition(" ")[0].lower() or "unknown") if authz
                               else "certificate" if self.fingerprint else "none")
            rec["status"] = status
            with sim.lock:
                sim.requests.append(rec)
            print(f"ews_simulator: {self.command} {rec['host']} {self.path.split('?', 1)[0]} "
                  f"{rec['operation'] or '-'} {status}", file=sys.stderr, flush=True)
            https.send_answer(self, status, ctype, headers, out)

    return Handler


def control_handler(sim):
    def mailboxes():
        return [{"email": m.email, "unread": m.unread, "total": m.total, "items": len(m.items),
                 "liveSubscriptions": sum(1 for s in m.subscriptions if s.alive)}
                for m in sim.mailboxes.values()]

    def reset(req):
        sim.failures.clear()
        return {"ok": True}

    # A stand-in SEG policy service (ENS's policy.url points here in tests): /policy
    # sets the denied EAS device ids; /policy/check answers ENS.
    def policy(req):
        deny = req.get("deny", [])
        if not isinstance(deny, list) or not all(isinstance(d, str) for d in deny):
            raise ValueError("'deny' must be a list of device ids")
        with sim.lock:
            sim.denied_devices = set(deny)
        return {"ok": True}

    def policy_check(req):
        device = req.get("deviceId")
        if not isinstance(device, str) or not device:
            raise ValueError("'deviceId' must be a non-empty string")
        with sim.lock:
            allowed = device not in sim.denied_devices
            sim.policy_checks += 1
        return {"allowed": allowed}

    def clear_records(req):
        with sim.lock:
            sim.requests.clear()
            sim.callbacks.clear()
            sim.violations.clear()
        return {"ok": True}

    def records():
        return {"requests": list(sim.requests), "violations": list(sim.violations)}

    gets = {path: control.locked(sim.lock, read) for path, read in {
        "/requests": records, "/subscriptions": lambda: [s.describe() for s in sim.subscriptions.values()],
        "/callbacks": lambda: list(sim.callbacks), "/mailboxes": mailboxes,
        "/oauth/grants": lambda: [g.describe(time.monotonic()) for g in sim.grants]}.items()}
    posts = {"/mailboxes": sim.put_mailbox, "/domains": sim.set_domain, "/fail": sim.set_failure,
             "/reset": reset, "/oauth/clients": sim.put_oauth_client, "/oauth/grants": sim.put_grant,
             "/oauth/expire": sim.expire_access, "/oauth/revoke": sim.revoke_grants,
             "/newmail": sim.new_mail, "/heartbeat": sim.heartbeat, "/policy": policy,
             "/policy/check": policy_check, "/clear-records": clear_records}

    class Handler(control.ControlHandler):
        def do_GET(self):
            self.get_json(gets)

        def do_POST(self):
            self.post_json(posts)

    return Handler


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--control-port", type=int, required=True)
    p.add_argument("--http-port", type=int, required=True)
    p.add_argument("--tls-dir", required=True)
    p.add_argument("--callback-ca", required=True)
    p.add_argument("--domains", default=DEFAULT_DOMAINS)
    p.add_argument("--minute-seconds", type=float, default=60.0)
    p.add_argument("--retry-scale", type=float, default=1.0)
    p.add_argument("--callback-timeout", type=float, default=30.0)
    p.add_argument("--ready-file")
    args = p.parse_args()
    if args.minute_seconds <= 0 or args.retry_scale <= 0 or args.callback_timeout <= 0:
        sys.exit("ews_simulator: --minute-seconds, --retry-scale and --callback-timeout must be > 0")
    domains = [d.strip().lower().rstrip(".") for d in args.domains.split(",") if d.strip()]
    client_ca_key, client_ca_cert = ensure_tls(args.tls_dir, domains)
    sim = Simulator(args, client_ca_key, client_ca_cert)

    tls = certs.server_context(os.path.join(args.tls_dir, "server.pem"),
                               os.path.join(args.tls_dir, "server.key"), "http/1.1",
                               client_ca=os.path.join(args.tls_dir, "client-ca.pem"))
    plain = ThreadingHTTPServer(("127.0.0.1", args.http_port), make_handler(sim, "http"))
    plain.daemon_threads = True
    process.serve_in_threads([https.TLSServer(("127.0.0.1", args.port), make_handler(sim, "https"), tls),
                              plain, control.control_server(args.control_port, control_handler(sim))])
    try:
        with process.running(args.ready_file):
            process.wait_for_signal()
    finally:
        sim.stopping.set()

if __name__ == "__main__":
    main()
