#!/usr/bin/env python3
"""A strict Microsoft Graph simulator: the Entra ID (Microsoft identity platform v2) token
endpoint for certificate client credentials and its OpenID metadata and signing keys, the
Graph mail and subscription API, and the change-notification (plain and rich: encrypted
resource data with signed validation tokens), lifecycle and validation calls Graph makes
to a webhook, for ENS's tests of its Exchange Online (Graph) mail backend.

Usage:
  graph_simulator.py --port P --control-port C --cert CERT.pem --key KEY.pem
      --callback-ca CA.pem --login-base URL
      --tenant TENANT_ID --client-id APP_ID --client-cert APPCERT.pem
      [--tenant ... --client-id ... --client-cert ...]   (repeatable, paired by position)
      [--retry-scale 1.0] [--max-lifetime-minutes 4230] [--ready-file PATH]

Python 3 standard library plus `cryptography`; nothing else.

Ports (127.0.0.1 only):
  P  HTTPS (TLS 1.2+, CERT/KEY), HTTP/1.1 with keep-alive, one thread per connection. It
     serves the token endpoint (/{tenant}/oauth2/v2.0/token), the identity platform's
     metadata (/common/..., IDENTITY PLATFORM below) and Graph (/v1.0/...); --login-base
     is this port's URL. Other paths -> 404 with a Graph error body.
  C  plain HTTP control API, JSON in and out.
When both listen, the PID is written to --ready-file (tmp + rename; removed again on a
clean exit). SIGTERM/SIGINT exit within a second. Every response carries Content-Length.
A request with Transfer-Encoding -> 411; a body over 1 MiB -> 413 (the connection is
then closed). A POST without Content-Length has an empty body.

Tenants: each --tenant (a GUID, compared case-insensitively) pairs with the --client-id
and --client-cert at the same position (the three are given equally often). The client
certificate (PEM X.509 with an RSA key) is ENS's application credential registered in
that tenant: its public key verifies client assertions; its SHA-1 and SHA-256
thumbprints (base64url, unpadded) are the accepted `x5t` / `x5t#S256`. Each tenant's
application also has a service principal id (a random GUID, the creatorId of app-only
subscriptions).

CLOCK: the simulator's "now" is real time plus an offset moved forward by /clock. Every
expiry (access tokens, client assertions, jti replay memory, subscriptions), every
retry due time, the 4-hour retry window and the 10-minute endpoint-health windows use
it. HTTP timeouts (3 s, 10 s, validation) are real time, and so are the times in
validation tokens (iat, nbf, exp: ENS checks them against its own clock) and
reauthorizeGraceSeconds.

LOGGING (stderr): one line per HTTPS request "graph_simulator: METHOD TEMPLATE STATUS"
where TEMPLATE is the path with every id replaced by {id} (e.g.
/v1.0/users/{id}/messages/{id}, /{tenant}/oauth2/v2.0/token) and no query; one line per
delivery attempt "graph_simulator: deliver KIND SUBID8 attempt N STATUS MSms" (KIND
notification, lifecycle, validation or raw; SUBID8 the first 8 characters of the
subscription id). Identity metadata fetches log as "GET /common/discovery/keys 200".
Access tokens, client assertions, clientState values, notification URLs, validation
tokens (handshake and JWT), encrypted content and message contents are never logged.

TOKEN ENDPOINT: POST /{tenant}/oauth2/v2.0/token (client-credentials grant with a
certificate client assertion). Failures are JSON (Content-Type application/json;
charset=utf-8) like Entra's: {"error", "error_description": "AADSTSn: text\\r\\nTrace ID:
..\\r\\nCorrelation ID: ..\\r\\nTimestamp: ..", "error_codes": [n], "timestamp",
"trace_id", "correlation_id", "error_uri"}. Checked in this order:
   0. a failure injected with /fail operation "token" -> after its delayMs, its status
      with {"error": code (default temporarily_unavailable / invalid_request by
      status), AADSTS90033 ...} and Retry-After when given. Nothing else is checked.
   1. method not POST -> 405 invalid_request (AADSTS900561). Content-Type not
      application/x-www-form-urlencoded (parameters allowed) -> 400 invalid_request
      (AADSTS900144). A body that is not a strict form (ASCII, percent-decoding to
      UTF-8) or repeats a parameter -> 400 invalid_request (AADSTS90014).
   2. tenant segment common/organizations/consumers -> 400 invalid_request
      (AADSTS50059); not a configured tenant -> 400 invalid_tenant (AADSTS90002).
   3. grant_type missing -> 400 invalid_request (AADSTS900144); not
      client_credentials -> 400 unsupported_grant_type (AADSTS70003).
   4. client_id missing -> 400 invalid_request (AADSTS900144); not that tenant's
      --client-id -> 400 unauthorized_client (AADSTS700016, application not found in the
      directory).
   5. scope missing -> 400 invalid_request (AADSTS900144); a space-separated list that
      is not exactly the one value https://graph.microsoft.com/.default -> 400
      invalid_scope: AADSTS1002012 when it is a single Graph scope without /.default,
      else AADSTS70011.
   6. client_secret present -> 401 invalid_client (AADSTS7000215; this app has only a
      certificate credential). client_assertion_type not
      urn:ietf:params:oauth:client-assertion-type:jwt-bearer, or client_assertion
      missing/empty -> 400 invalid_request (AADSTS7000216: an assertion of another type
      is no credential at all).
   7. client_assertion not a compact JWS (three unpadded base64url parts; header and
      claims JSON objects) -> 400 invalid_client (AADSTS50027). Header: alg not RS256
      or PS256, no x5t and no x5t#S256, or a given one not the registered
      certificate's thumbprint -> 401 invalid_client (AADSTS700027, key not found). The
      signature (RS256: RSASSA-PKCS1-v1_5 SHA-256; PS256: RSASSA-PSS SHA-256, MGF1
      SHA-256, salt 32) not valid for the certificate's key -> 401 invalid_client
      (AADSTS700027 "Client assertion contains an invalid signature.").
   8. Claims: aud not exactly "{--login-base}/{tenant}/oauth2/v2.0/token" (the tenant
      as configured) -> 401 invalid_client (AADSTS700023 "Client assertion audience
      claim does not match Realm issuer."); iss or sub not the client_id -> 401
      invalid_client (AADSTS700021 "Client assertion application identifier doesn't
      match 'client_id' parameter."); exp not an integer after now, nbf/iat present but
      not integers, nbf more than 300 s in the future, or exp - (nbf, else iat, else
      now) over 3600 -> 401 invalid_client (AADSTS700024 "Client assertion is not
      within its valid time range."); jti missing, not a non-empty string, or already
      used by this client within its exp -> 401 invalid_client (AADSTS700025, "jti
      replay"; the code is this simulator's choice).
   9. Success: 200 {"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599,
      "access_token"}: an opaque ~1,200-character string starting "eyJ" (it looks like
      a JWT but is random); an app-only token of that tenant's application (role
      Mail.ReadBasic.All), valid for 3599 s of simulator time. Counted in /stats
      tokens_issued[tenant].

IDENTITY PLATFORM (https on P; GET only, another method -> 405; a query is ignored).
The simulator holds RSA-2048 signing keys, each with a self-signed certificate
(CN=accounts.accesscontrol.windows.net); kid = x5t = base64url SHA-1 of its DER. One is
current (signs validation tokens); the published ones are in the JWKS. A further key is
never published (fault unknown-kid). /signing-keys/rotate makes a new current key.
  GET /common/.well-known/openid-configuration -> {"issuer":
      "https://sts.windows.net/{tenantid}/", "jwks_uri": "{login-base}/common/discovery/keys",
      "id_token_signing_alg_values_supported": ["RS256"], "token_endpoint",
      "authorization_endpoint", ...} (v1 endpoints; {tenantid} literally, as Microsoft's).
  GET /common/v2.0/.well-known/openid-configuration -> likewise with "issuer":
      "{login-base}/{tenantid}/v2.0", "jwks_uri": "{login-base}/common/discovery/v2.0/keys".
  GET /common/discovery/keys and /common/discovery/v2.0/keys -> {"keys": [{"kty": "RSA",
      "use": "sig", "kid", "x5t", "n", "e" (base64url, unpadded), "x5c": [base64 DER of
      the certificate]}]} (v2.0 keys also carry "issuer"), the current key first.
  Content-Type application/json; charset=utf-8, Cache-Control: max-age=86400, private.
  Counted in /stats openid_config_fetches and jwks_fetches; recorded in /requests (kind
  identity, operation openid-configuration|jwks).

GRAPH API (https on P, under /v1.0). Every answer carries request-id and
client-request-id (the client's, else a new GUID). Successful JSON answers have
Content-Type "application/json; odata.metadata=minimal; odata.streaming=true;
IEEE754Compatible=false; charset=utf-8"; errors are Content-Type application/json,
{"error": {"code", "message", "innerError": {"date", "request-id",
"client-request-id"}}}. Path segments: names (me, users, messages, mailFolders,
subscriptions, reauthorize) are case-insensitive; a key may be written as a segment
(users/{id}) or in OData form (users('{id}'), '' escaping a quote); segments are
percent-decoded. A user {id} is the object id (GUID) or the userPrincipalName / mail
(case-insensitive). Query options: only $select, and only where noted; any other
$-option or a repeated one -> 400 BadRequest. Order of checks for every request:
   1. Authorization "Bearer <token>" (scheme case-insensitive): missing/empty -> 401
      InvalidAuthenticationToken "Access token is empty."; not issued by this simulator
      (or forgotten by /reset) or revoked -> 401 "Access token validation failure.";
      expired by the simulator clock -> 401 "Lifetime validation failed, the token is
      expired.". Every 401 carries WWW-Authenticate: Bearer realm="",
      authorization_uri="{login-base}/common/oauth2/authorize",
      client_id="00000003-0000-0000-c000-000000000000". Two kinds of token: app
      (token endpoint; bound to its tenant and application) and delegated (control
      /user-token; bound to one user and an application id; scope Mail.ReadBasic).
   2. route: an unknown path -> 400 BadRequest "Resource not found for the segment
      '<segment>'." and a violation "unknown Graph path <template>"; a known path with
      another method -> 405 BadRequest (with Allow).
   3. the mailbox the request concerns: the path's user (or the token's user for me),
      for POST /subscriptions the user of the body's resource, for /subscriptions/{id}
      the subscription's user; none for GET /subscriptions.
   4. an injected 429 (/fail with status 429) set a Retry-After for that mailbox and
      operation; a request for both before it elapsed (real time) is recorded with
      "beforeRetryAfter": true and a violation "request before Retry-After elapsed".
   5. concurrency: at most 4 requests in flight per mailbox; a fifth -> 429
      ApplicationThrottled "Application is over its MailboxConcurrency limit." with
      Retry-After: 1 (counted in /stats throttled; max_in_flight per mailbox kept).
   6. /hold for that mailbox: the request waits ms (while counted in flight).
   7. a failure injected for the operation (/fail) -> after delayMs, that status and
      code/message (Retry-After when given); with no status only the delay.
   8. the operation's own checks, below.
  Operations (names as used by /fail):
  me  GET /v1.0/me. App token -> 400 BadRequest "/me request is only valid with
      delegated authentication flow.". $select (id, mail, userPrincipalName,
      displayName, givenName, surname, jobTitle, mobilePhone, officeLocation,
      preferredLanguage, businessPhones) -> exactly those properties plus
      "@odata.context"; an unknown property -> 400. Without $select the default user
      properties.
  get-user  GET /v1.0/users or /v1.0/users/{id} -> 403 Authorization_RequestDenied
      "Insufficient privileges to complete the operation." (no User.Read.All).
  Mailbox access (get-message, get-folder, and the resource of a subscription):
      app token: the user must exist in the token's tenant, else 404 ErrorInvalidUser
      "The requested user '<id>' is invalid."; if the tenant has an RBAC scope
      (/scope), the user must be in it, else 403 ErrorAccessDenied "Access is denied.
      Check credentials and try again.". Delegated token: an unknown user -> 404
      ErrorInvalidUser; another user than the token's -> 403 ErrorAccessDenied.
  get-message  GET /v1.0/{users/{id}|me}/messages/{messageId}. After access: counted in
      /stats message_gets[mail]. $select properties are the message's (unknown -> 400
      "Could not find a property named ..."); body, uniqueBody or bodyPreview (not
      readable with Mail.ReadBasic) -> 403 ErrorAccessDenied and a violation "message
      fetched with <p> (not in Mail.ReadBasic)"; no $select -> answered with every
      Mail.ReadBasic property and a violation "message fetched without $select".
      Unknown or deleted message -> 404 ErrorItemNotFound "The specified object was not
      found in the store.". Answer: "@odata.context", "@odata.etag", "id" and the
      selected properties (subject, from/sender {"emailAddress": {"name", "address"}},
      receivedDateTime/sentDateTime/createdDateTime/lastModifiedDateTime as
      yyyy-mm-ddThh:mm:ss.fffffffZ, isRead, ...).
  get-folder  GET /v1.0/{users/{id}|me}/mailFolders/{inbox|the inbox's id} (well-known
      name case-insensitive; another -> 404 ErrorItemNotFound). Counted in /stats
      folder_gets[mail]. $select from id, displayName, parentFolderId,
      childFolderCount, unreadItemCount, totalItemCount, sizeInBytes, isHidden; without
      $select all of them and a violation "folder fetched without $select". Answer
      "@odata.context", "id" and the selected ones; unreadItemCount counts the unread,
      not deleted messages.
  create  POST /v1.0/subscriptions, in this order:
      Content-Type not application/json (parameters allowed, a charset only utf-8) ->
      415 UnsupportedMediaType; body not a JSON object (duplicate keys, NaN refused) ->
      400 BadRequest "Unable to read JSON request payload..."; a property outside
      changeType, notificationUrl, lifecycleNotificationUrl, resource,
      expirationDateTime, clientState, includeResourceData, encryptionCertificate,
      encryptionCertificateId, latestSupportedTlsVersion, @odata.type
      (#microsoft.graph.subscription) -> 400 BadRequest "The property '<p>' does not
      exist on type 'microsoft.graph.subscription'..." (the read-only id, applicationId,
      creatorId, notificationUrlAppId -> 400 BadRequest "... is read-only";
      notificationQueryOptions / notificationContentType other than null -> 400
      InvalidRequest); a value of the wrong JSON type -> 400 BadRequest. Then 400
      InvalidRequest for: changeType missing, or not a
      comma-separated, duplicate-free subset of created, updated, deleted;
      notificationUrl missing or not an absolute https URL with a host and no fragment
      ("The Notification Url must be HTTPS."); lifecycleNotificationUrl (optional, null
      = absent) likewise; resource missing, or not one of users/{id}/messages,
      users/{id}/mailFolders('inbox')/messages, users/{id}/mailFolders/inbox/messages,
      me/messages, me/mailFolders('inbox')/messages, me/mailFolders/inbox/messages (a
      leading '/', OData keys and any case of names and of "inbox" allowed; a query
      may hold only $select and $filter) -> "Unsupported resource ..."; me/... with an
      app token -> 400 BadRequest as for /me; expirationDateTime missing or not
      yyyy-mm-ddThh:mm:ss[.f{1,7}](Z|+hh:mm|-hh:mm), or in the past -> 400; more than
      --max-lifetime-minutes (1440 with includeResourceData) ahead -> 400
      "Subscription expiration can only be N minutes in the future."; under 45 minutes
      ahead -> silently raised to 45 minutes; clientState over 128 characters -> 400;
      includeResourceData true without encryptionCertificate (base64 DER X.509 with an
      RSA 2048..4096-bit key), without encryptionCertificateId (1..128 characters),
      without $select in the resource, or selecting body/uniqueBody -> 400;
      latestSupportedTlsVersion not v1_0..v1_3 -> 400. Then mailbox access (above).
      Then 1,000 alive subscriptions on the mailbox (all applications) -> 403
      ExtensionError; an alive subscription of the same application for the same user
      with the same normalized resource (user object id, folder, query) and the same
      set of change types -> 409 Conflict "Subscription Id <existing id> already exists
      for the requested combination". Then the validation handshake of
      notificationUrl, and then (a second request with another token, even for the
      same URL) of lifecycleNotificationUrl; a failure -> 400 ValidationError
      "Subscription validation request failed. Notification endpoint must respond with
      200 OK to validation request." or, on timeout, "Subscription validation request
      timed out.". Success -> 201 with "@odata.context", id (GUID), resource (as given),
      applicationId, changeType, clientState, notificationUrl,
      lifecycleNotificationUrl, expirationDateTime (7 decimals, Z; possibly raised),
      creatorId (the tenant's service principal id for app tokens, the user's id for
      delegated), includeResourceData, latestSupportedTlsVersion (default v1_2),
      encryptionCertificate, encryptionCertificateId, notificationQueryOptions null,
      notificationContentType null. The header Prefer: IdType="ImmutableId" (case-
      insensitive, among other preferences) is stored as immutableIds; without it a
      violation "subscription created without immutable ids" is recorded. Message ids
      never change in this simulator (nothing moves).
  list  GET /v1.0/subscriptions -> {"@odata.context", "value": [...]}: the alive (live
      or paused, unexpired) subscriptions of the calling application: for an app token
      in its tenant, for a delegated token those of that user.
  Subscription by id (get-subscription GET, patch PATCH, delete DELETE, reauthorize
  POST .../reauthorize): unknown, deleted, removed or expired (simulator clock), or of
  another tenant -> 404 ResourceNotFound "The object was not found."; of another
  application (or, delegated, another user) -> 403 ErrorAccessDenied.
  patch  Content-Type and JSON object as for create; properties other than
      expirationDateTime, notificationUrl, encryptionCertificate, encryptionCertificateId
      (and @odata.type) -> 400 InvalidRequest "Property '<p>' cannot be updated."
      (unknown names -> the create error); notificationUrl must be https;
      encryptionCertificate and encryptionCertificateId only together (one alone -> 400
      InvalidRequest), only on an includeResourceData subscription (else 400
      InvalidRequest), validated as on create (400 InvalidRequest); expirationDateTime:
      past, cap and 45-minute floor as on create; if /mode validateOnPatch (default true)
      the resulting notificationUrl is validated (same messages). Success -> 200 with the
      subscription; the subscription is reauthorized (paused -> live, its backlog
      delivered), counted in renewals when expirationDateTime was given; notifications
      made afterwards are encrypted to the new certificate and carry its id (those made
      before, e.g. a backlog, keep the old one). A PATCH
      within 10 minutes (simulator clock) of a reauthorize of the same subscription,
      or a reauthorize within 10 minutes of a PATCH, records a violation "reauthorize
      and renew within 10 minutes".
  reauthorize  -> 204, no body; clears the paused state (backlog delivered); the expiry
      is unchanged; with /mode validateOnReauthorize (default false) the
      notificationUrl is validated first.
  delete  -> 204; the subscription delivers nothing afterwards.

VALIDATION HANDSHAKE (simulator -> ENS): POST {url}?validationToken=<t> (&validationToken=
when the URL already has a query), t percent-encoded with quote(t, safe=''); t is random
and contains '+', '/', ' ' and ':'. Headers Content-Type: text/plain; charset=utf-8,
Content-Length: 0, empty body. Verified against --callback-ca (re-read when it changes),
hostname checked. Success only if the status is exactly 200, the media type is text/plain
(parameters allowed) and the body equals t, byte for byte, within the timeout (10 s;
/mode validationTimeoutMs). /mode validationDelayMs delays the call; validationDropNext N
makes the next N calls never arrive (the create waits the timeout and answers the timeout
400). Every attempt is recorded in /requests (kind validation: target, operation, status,
contentType, bodyMatched, elapsedMs, outcome) and counted (validations,
validations_failed).

DELIVERY (simulator -> ENS). /newmail makes, for every message and every subscription of
the user that is alive (live or paused), not expired, has "created" among its change
types (every supported resource covers the inbox), one change notification, sent as its
own POST to the subscription's notificationUrl (query string kept byte for byte),
Content-Type application/json; charset=utf-8, body {"value": [{"id", "subscriptionId",
"subscriptionExpirationDateTime" (forms rotate: 7 decimals +00:00, 7 decimals Z, 7
decimals -07:00, 3 decimals Z), "clientState" (omitted when the subscription has none),
"changeType": "created", "resource" ("Users/{userId}/Messages/{messageId}" or
"Users('{userId}')/messages('{messageId}')": /mode resourceStyle path|odata|alternate,
default alternate per notification), "tenantId", "resourceData": {"@odata.type"
("#Microsoft.Graph.Message" and "#microsoft.graph.message" alternately), "@odata.id"
(= resource), "@odata.etag", "id": messageId}}]}. Message ids look like Graph's (about
150 characters of base64url with '-' and a trailing '=').
  Rich notifications (includeResourceData subscriptions): each item also carries
  "encryptedContent": {"data", "dataKey", "dataSignature", "encryptionCertificateId",
  "encryptionCertificateThumbprint"}, made when the notification is made, as Microsoft
  documents: the plaintext is the UTF-8 JSON {"@odata.type": "#Microsoft.Graph.Message",
  "@odata.id" (= resource), "@odata.etag", "id", then exactly the properties of the
  resource's $select (known message properties, canonical case; from/sender as
  {"emailAddress": {"name", "address"}}, bodyPreview from /newmail)}; a fresh random
  32-byte AES key per item; data = base64 AES-256-CBC (IV = key[:16], PKCS7); dataSignature
  = base64 HMAC-SHA256(key, the bytes of data); dataKey = base64 RSA-OAEP (SHA-1, MGF1
  SHA-1) of the key to the subscription's certificate; the thumbprint is the uppercase
  hex SHA-1 of the certificate's DER (Tests/tools/graph_decrypt.py decrypts). resourceData
  stays. Every POST (first attempt, retry, backlog, duplicate, batch, and the bodies of
  "deliver": false) holding rich items gets a top-level "validationTokens": one JWT per
  distinct (applicationId, tenantId) among its rich items, in their order, made for that
  POST; a POST without rich items has none. A validation token is a compact JWS
  signed RS256 with the current key, header {"typ": "JWT", "alg": "RS256", "kid", "x5t"},
  claims (/mode validationTokenVersion "1.0", default):
      {"aud": the subscription's applicationId, "iss": "https://sts.windows.net/{tid}/",
       "iat", "nbf" (= iat, now in real time), "exp" (iat + 3600), "appid":
       "0bf30f3b-4a52-48df-9a82-234910c4a086" (Graph Change Tracking), "appidacr": "2",
       "idp": "https://sts.windows.net/{tid}/", "oid" = "sub" (Change Tracking's service
       principal in that tenant), "tid", "uti" (random), "ver": "1.0"}
  and with "2.0": "iss": "{login-base}/{tid}/v2.0", "azp" and "azpacr": "2" instead of
  appid/appidacr, "ver": "2.0" ("alternate": 1.0 and 2.0 by turns, per rich POST).
  /mode blindFault NAME (with blindFaultCount n: for the next n rich POSTs, then back to
  none; without: until changed or /reset) spoils each rich POST: tampered-data (one byte
  of every rich item's data changed after dataSignature was computed), bad-signature
  (the JWT signature altered), expired (exp 10 minutes ago, iat = nbf = exp - 3600),
  not-yet-valid (nbf 10 minutes ahead, exp = nbf + 3600), wrong-audience (aud another
  GUID), wrong-azp (appid resp. azp another GUID), wrong-issuer (iss, idp and tid of
  another tenant), missing-token (no validationTokens member), null-token
  (validationTokens [null, ...], one per pair), unknown-kid (signed by the never
  published key); none clears. Each attempt record in /requests then has "rich" (items),
  "validationTokens" (count), "tokenVersion" and "blindFault" (null when none).
  A paused subscription's notifications wait in its backlog and are sent (to its
  notificationUrl at that time) when it is reauthorized or renewed. An expired, deleted or removed subscription sends nothing
  (anything pending for it is dropped and counted).
  Attempts: the first with a 3 s timeout, retries with 10 s; a 2xx within the timeout
  is delivered. Otherwise (other status, connection/TLS error, timeout) retry k is due
  2^k * --retry-scale seconds (simulator clock) after attempt k, for as long as it falls
  within 4 hours of the notification's creation; then it is dropped silently
  (notifications_dropped). A 4xx answer is retried like any failure and recorded as a
  violation "notification answered 4xx". Each attempt is recorded (kind notification,
  subscriptionId, subscriptionIds, attempt, status, elapsedMs, error, items).
  Endpoint health, per origin (scheme://host:port), from every notification attempt's
  response time in the last 10 simulated minutes, evaluated when a new notification is
  made (at least /mode healthMinSamples samples, default 20): over 15 % above dropMs
  (10000) -> "drop" for 10 minutes: new notifications for that origin are dropped, and
  when the 10 minutes end each affected, still alive subscription gets a "missed"
  lifecycle notification; else over 10 % above slowMs (3000) -> "slow" for 10 minutes:
  new notifications' first attempt is delayed by 10 minutes.
  /mode duplicates: every POST is sent twice (the same body, separate POSTs; rich ones
  each with their own validationTokens). /mode
  reorder: the items of a batch are shuffled, the POSTs of one /newmail call are sent in
  random order, and each call's sending starts after a random 0-300 ms (so consecutive
  calls made without "wait" may swap).

LIFECYCLE (simulator -> ENS): POST to lifecycleNotificationUrl, body {"value": [{
"subscriptionId", "subscriptionExpirationDateTime", "tenantId", "clientState" (omitted
when none), "lifecycleEvent"}]} (no resource, no resourceData; events for several
subscriptions with the same URL share one POST). Without a lifecycleNotificationUrl the
event is recorded as undeliverable (lifecycle_undeliverable) and nothing is sent. The
answer must be 202: another 2xx is accepted and recorded as a violation "lifecycle
answered <status>, expected 202"; a non-2xx is retried like a notification (a 4xx also a
violation "lifecycle answered 4xx"). reauthorizationRequired pauses the subscription,
subscriptionRemoved removes it (as a password reset does), missed changes nothing; the
state changes when the event is made, whether or not it can be delivered. With /mode
reauthorizeGraceSeconds s > 0, reauthorizationRequired instead leaves the subscription
live for s seconds of REAL time and then pauses it, unless it was reauthorized (POST
.../reauthorize) or successfully PATCHed in between (a further event during the grace
does not extend it; one for a paused subscription does nothing). Recorded in /requests
as kind reauthorizeGrace, outcome started (with graceSeconds), then paused,
reauthorized, patched, or ended (no longer alive when the time was up).

CONTROL API (plain HTTP/1.1 on 127.0.0.1:C, JSON). Unknown paths 404; a bad request 400
{"error": "..."}; an unknown user or subscription 404.
  POST /users {"tenant", "mail", "displayName"?, "id"? (GUID)} -> {"id", "mail",
       "tenant"}; userPrincipalName = mail (stored lowercased).
  GET  /users -> [{"id", "mail", "tenant", "messages", "unread"}].
  POST /user-token {"mail", "lifetimeSeconds"? (3600), "clientId"?} -> {"access_token",
       "expires_in"}: a delegated token (~1,500 characters, opaque) for that user, of
       application clientId (default 7f0c8a41-3d2e-4b6a-9c55-0e1f2a3b4c5d, "the
       mobile app").
  POST /revoke {"mail"} | {"tenant"} -> revokes that user's delegated tokens (or the
       tenant's app tokens): {"revoked": n}.
  POST /scope {"tenant", "mails": [...] | null} -> the RBAC for Applications scope of the
       tenant's application (null: the whole tenant).
  POST /newmail {"mail", "subject"?, "fromName"?, "fromAddress"?, "bodyPreview"? (only in
       rich notifications), "count"? (1..1000, 1), "wait"? (true), "deliver"? (true)}
       -> creates count unread messages and delivers (above):
       {"messageIds": [...], "deliveries": [{"subscriptionId", "subscriptionIds",
       "attempt", "status", "elapsedMs", "error"?, "outcome": delivered|failed|queued|
       delayed|dropped}]}; with wait the answer comes after every first attempt
       (queued, delayed and dropped ones are reported at once). With "deliver": false
       nothing is sent: {"messageIds", "notifications": [{"url", "body"}]} are the POSTs
       Graph would make (a load generator replays them; /newmail-batch too).
  POST /newmail-batch {"items": [{"mail", "subject"?, "fromName"?, "fromAddress"?,
       "bodyPreview"?}],
       "wait"?} -> one message per item and ONE POST with all their notifications (for
       subscriptions that may differ, each item with its own subscriptionId and
       clientState) to the notificationUrl of the first one; answers like /newmail.
  POST /post-raw {"subscriptionId", "body": JSON or string, "lifecycle"?: false,
       "contentType"?, "wait"? (true)} -> POSTs the body verbatim (a string as is, else
       serialized) once, no retries, 10 s timeout, to the subscription's (any state)
       notification or lifecycle URL: {"status", "contentType", "body", "elapsedMs",
       "error"?}.
  POST /lifecycle {"subscriptionId" | "mail", "event": reauthorizationRequired|
       subscriptionRemoved|missed, "wait"? (true)} -> for that alive subscription (or
       every alive one of the user): {"deliveries": [...]} (outcome undeliverable when
       there is no lifecycle URL).
  POST /delete-message {"mail", "messageId"} -> later GETs are 404.
  POST /fail {"operation": token|me|get-user|create|patch|reauthorize|delete|list|
       get-subscription|get-message|get-folder, "status"? (400..599), "code"?,
       "message"?, "retryAfter"? (seconds), "delayMs"?, "count"? (0 or absent: until
       /reset), "mail"? (only requests concerning that user; not for token)} -> the next
       count matching requests get that answer (a later /fail for the operation, and
       mail, replaces it; one for the user's mailbox is taken before one for any).
  POST /hold {"mail", "ms"} -> every API request concerning that user is held ms before
       it is processed (0 clears).
  POST /mode {"duplicates"?, "reorder"?, "resourceStyle"?, "validateOnPatch"?,
       "validateOnReauthorize"?, "validationDelayMs"?, "validationDropNext"?,
       "validationTimeoutMs"?, "healthMinSamples"?, "slowMs"?, "dropMs"?,
       "validationTokenVersion"? (1.0|2.0|alternate), "blindFault"? (none|tampered-data|
       bad-signature|expired|not-yet-valid|wrong-audience|wrong-azp|wrong-issuer|
       missing-token|null-token|unknown-kid), "blindFaultCount"? (n > 0; absent or null:
       until changed), "reauthorizeGraceSeconds"? (0..86400, real time)} -> the resulting
       mode (defaults: false, false, alternate, true, false, 0, 0, 10000, 20, 3000, 10000,
       "1.0", "none", null, 0); blindFaultCount shows what is left. validationDelayMs does
       not count toward validationTimeoutMs. POST /mode {} reads it.
  GET  /signing-keys -> {"kid" (the current key), "published": [kids]}.
  POST /signing-keys/rotate {"keepOld"? (false)} -> a new current key, published at once;
       the previous published keys stay published only with keepOld: {"kid", "published"}.
  POST /clock {"advanceSeconds"} (>= 0) -> {"offsetSeconds", "now"}; due retries and
       delayed sends run at once.
  POST /reset -> forgets users, tokens, jti memory, subscriptions and pending sends,
       failures, holds, scopes, modes (faults too), stats, requests, violations and the
       clock offset (the command-line tenants stay, and the current signing key, then the
       only published one).
  POST /wait {"delivered": n, "timeoutSeconds"? (30)} -> 200 /stats once
       notifications_delivered >= n, else 408 {"error", "stats"}.
  GET  /subscriptions -> [{"id", "tenant", "userId", "mail", "resource", "changeType",
       "expirationDateTime", "hasLifecycleUrl", "immutableIds", "state": live|paused|
       removed|deleted|expired, "creatorKind": app|delegated, "clientStateLength",
       "renewals", "reauthorizations", "backlog", "includeResourceData",
       "encryptionCertificateId", "encryptionCertificateThumbprint" (uppercase hex SHA-1;
       both null unless includeResourceData), "reauthorizeGracePending"}] (never
       clientState or URLs).
  GET  /requests -> {"requests": [...], "violations": [...]} (newest 100000);
  GET  /violations -> [...];
  GET  /stats -> {"tokens_issued": {tenant: n}, "validations", "validations_failed",
       "notifications_delivered" (notifications, i.e. items), "notification_posts_delivered",
       "notifications_failed_attempts" (POSTs), "notifications_dropped" (items),
       "lifecycle_delivered", "lifecycle_failed_attempts", "lifecycle_undeliverable",
       "first_attempt_ms": {"p50", "p99", "count"} (delivered first attempts),
       "message_gets": {mail: n}, "folder_gets": {mail: n}, "max_in_flight": {mail: n},
       "throttled": n, "openid_config_fetches", "jwks_fetches",
       "validation_tokens_issued", "now", "clockOffsetSeconds"}.
"""
import argparse
import base64
import collections
import datetime
import hashlib
import heapq
import hmac
import http.client
import json
import random
import re
import secrets
import socket
import ssl
import sys
import threading
import time
import uuid
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, padding as sym_padding, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.x509.oid import NameOID

from simlib import certs, control, https, process
from simlib.failures import Failures

MAX_BODY = 1 << 20
MAX_RECORDS = 100000
GRAPH_BASE = "https://graph.microsoft.com/v1.0"
GRAPH_SCOPE = "https://graph.microsoft.com/.default"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
GRAPH_APP_ID = "00000003-0000-0000-c000-000000000000"
DEFAULT_DELEGATED_APP = "7f0c8a41-3d2e-4b6a-9c55-0e1f2a3b4c5d"
TOKEN_LIFETIME = 3599
RETRY_WINDOW = 4 * 3600
HEALTH_WINDOW = 600
STATE_SECONDS = 600
MAX_IN_FLIGHT = 4
MAILBOX_LIMIT = 1000
FLOOR_MINUTES = 45
RICH_CAP_MINUTES = 1440
FIRST_TIMEOUT = 3.0
RETRY_TIMEOUT = 10.0
RAW_TIMEOUT = 10.0
TEN_MINUTES = 600
SUCCESS_CT = ("application/json; odata.metadata=minimal; odata.streaming=true; "
              "IEEE754Compatible=false; charset=utf-8")
ERROR_CT = "application/json"
ENTRA_CT = "application/json; charset=utf-8"
NOTIFY_CT = "application/json; charset=utf-8"
DEFAULT_MODE = {"duplicates": False, "reorder": False, "resourceStyle": "alternate",
                "validateOnPatch": True, "validateOnReauthorize": False,
                "validationDelayMs": 0, "validationDropNext": 0, "validationTimeoutMs": 10000,
                "healthMinSamples": 20, "slowMs": 3000, "dropMs": 10000,
                "validationTokenVersion": "1.0", "blindFault": "none", "blindFaultCount": None,
                "reauthorizeGraceSeconds": 0}
CHANGE_TRACKING_APP = "0bf30f3b-4a52-48df-9a82-234910c4a086"
BLIND_FAULTS = {"none", "tampered-data", "bad-signature", "expired", "not-yet-valid",
                "wrong-audience", "wrong-azp", "wrong-issuer", "missing-token", "null-token",
                "unknown-kid"}
VALIDATION_TOKEN_LIFETIME = 3600
OPENID_PATHS = {"/common/.well-known/openid-configuration": "1.0",
                "/common/v2.0/.well-known/openid-configuration": "2.0"}
JWKS_PATHS = {"/common/discovery/keys": "1.0", "/common/discovery/v2.0/keys": "2.0"}
IDENTITY_CT = "application/json; charset=utf-8"
FAIL_OPERATIONS = {"token", "me", "get-user", "create", "patch", "reauthorize", "delete",
                   "list", "get-subscription", "get-message", "get-folder"}
LIFECYCLE_EVENTS = {"reauthorizationRequired", "subscriptionRemoved", "missed"}
CHANGE_TYPES = ("created", "updated", "deleted")
TLS_VERSIONS = {"v1_0", "v1_1", "v1_2", "v1_3"}
CREATE_PROPS = {"changeType": str, "notificationUrl": str, "lifecycleNotificationUrl": str,
                "resource": str, "expirationDateTime": str, "clientState": str,
                "includeResourceData": bool, "encryptionCertificate": str,
                "encryptionCertificateId": str, "latestSupportedTlsVersion": str,
                "@odata.type": str}
SUBSCRIPTION_PROPS = set(CREATE_PROPS) | {"id", "applicationId", "creatorId",
                                          "notificationQueryOptions", "notificationContentType",
                                          "notificationUrlAppId"}
PATCHABLE = {"expirationDateTime", "notificationUrl", "encryptionCertificate",
             "encryptionCertificateId", "@odata.type"}
MESSAGE_PROPS = ["id", "createdDateTime", "lastModifiedDateTime", "changeKey", "categories",
                 "receivedDateTime", "sentDateTime", "hasAttachments", "internetMessageId",
                 "subject", "bodyPreview", "importance", "parentFolderId", "conversationId",
                 "conversationIndex", "isDeliveryReceiptRequested", "isReadReceiptRequested",
                 "isRead", "isDraft", "webLink", "inferenceClassification", "body",
                 "uniqueBody", "sender", "from", "toRecipients", "ccRecipients",
                 "bccRecipients", "replyTo", "flag"]
NOT_READBASIC = {"body", "uniqueBody", "bodyPreview"}
FOLDER_PROPS = ["id", "displayName", "parentFolderId", "childFolderCount", "unreadItemCount",
                "totalItemCount", "sizeInBytes", "isHidden"]
USER_PROPS = ["id", "businessPhones", "displayName", "givenName", "jobTitle", "mail",
              "mobilePhone", "officeLocation", "preferredLanguage", "surname",
              "userPrincipalName"]
ACCESS_DENIED = "Access is denied. Check credentials and try again."
VALIDATION_FAILED = ("Subscription validation request failed. Notification endpoint must "
                     "respond with 200 OK to validation request.")
VALIDATION_TIMEOUT = "Subscription validation request timed out."
B64URL_RE = re.compile(r"[A-Za-z0-9_-]*")
GUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
ISO_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,7})?(Z|[+-]\d{2}:\d{2})")
ODATA_KEY_RE = re.compile(r"([A-Za-z]+)\('((?:[^']|'')*)'\)", re.S)


# -- small helpers -------------------------------------------------------------------------
def now_ms():
    return int(time.time() * 1000)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(part):
    if not B64URL_RE.fullmatch(part) or len(part) % 4 == 1:
        raise ValueError("not unpadded base64url")
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def guid():
    return str(uuid.uuid4())


def media_type(value):
    """-> (lowercase type, {lowercase name: value})."""
    parts = (value or "").split(";")
    params = {}
    for p in parts[1:]:
        k, _, v = p.partition("=")
        params[k.strip().lower()] = v.strip().strip('"')
    return parts[0].strip().lower(), params


def is_json_ct(value):
    kind, params = media_type(value)
    return kind == "application/json" and params.get("charset", "utf-8").lower() in ("utf-8", "utf8")


def dt_of(ts):
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc)


def iso7(ts, offset_minutes=0, z=True, digits=7):
    """ts as yyyy-mm-ddThh:mm:ss.fffffff followed by Z or +hh:mm / -hh:mm."""
    whole = int(ts // 1)
    frac = min(int(round((ts - whole) * 1e7)), 9999999)
    local = dt_of(whole) + datetime.timedelta(minutes=offset_minutes)
    text = local.strftime("%Y-%m-%dT%H:%M:%S") + "." + f"{frac:07d}"[:digits]
    if z and offset_minutes == 0:
        return text + "Z"
    sign = "+" if offset_minutes >= 0 else "-"
    m = abs(offset_minutes)
    return text + f"{sign}{m // 60:02d}:{m % 60:02d}"


def parse_iso(value):
    """-> POSIX seconds (float) or None."""
    if not isinstance(value, str):
        return None
    m = ISO_RE.fullmatch(value)
    if not m:
        return None
    try:
        base = datetime.datetime(int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]),
                                 int(m[6]), tzinfo=datetime.timezone.utc)
    except ValueError:
        return None
    ts = base.timestamp() + (float(m[7]) if m[7] else 0.0)
    if m[8] != "Z":
        sign = 1 if m[8][0] == "+" else -1
        hh, mm = int(m[8][1:3]), int(m[8][4:6])
        if hh > 23 or mm > 59:
            return None
        ts -= sign * (hh * 3600 + mm * 60)
    return ts


def graph_id(prefix="AAMkAG"):
    """A Graph-looking item id: ~150 characters of base64url with '-' and a final '='."""
    s = b64url(secrets.token_bytes(108))
    return f"{prefix}{s[:50]}-{s[50:100]}_{s[100:]}AAA="


def opaque_token(payload_bytes):
    header = b64url(json.dumps({"typ": "JWT", "nonce": b64url(secrets.token_bytes(24)),
                                "alg": "RS256", "x5t": b64url(secrets.token_bytes(20))},
                               separators=(",", ":")).encode())
    return (header + "." + b64url(secrets.token_bytes(payload_bytes)) + "."
            + b64url(secrets.token_bytes(256)))


def validation_token():
    """Random, with characters that need percent-decoding: '+', '/', ' ' and ':'."""
    a, b = base64.b64encode(secrets.token_bytes(9)).decode(), base64.b64encode(
        secrets.token_bytes(9)).decode()
    return (f"Validation: Testing client application reachability for subscription "
            f"Request-Id: {guid()} {a}+{b}/{secrets.token_hex(4)}")


def strict_json(raw):
    def no_dupes(pairs):
        obj = {}
        for k, v in pairs:
            if k in obj:
                raise ValueError(f"duplicate key {k!r}")
            obj[k] = v
        return obj

    def no_constant(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(raw.decode("utf-8"), object_pairs_hook=no_dupes, parse_constant=no_constant)


def split_segments(path):
    """'users('a''b')/messages/x' -> ['users', "a'b", 'messages', 'x']; None if malformed."""
    out = []
    for raw in path.split("/"):
        seg = unquote(raw, errors="strict") if "%" in raw else raw
        if seg == "":
            return None
        m = ODATA_KEY_RE.fullmatch(seg)
        if m:
            out += [m[1], m[2].replace("''", "'")]
        else:
            out.append(seg)
    return out


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


def https_url(value):
    if not isinstance(value, str) or not value or any(c.isspace() or ord(c) < 32 for c in value):
        return False
    try:
        u = urlsplit(value)
        u.port  # noqa: B018 -- raises on a bad port
    except ValueError:
        return False
    return u.scheme.lower() == "https" and bool(u.hostname) and not u.fragment and "#" not in value


def origin_of(url):
    u = urlsplit(url)
    return f"{u.scheme.lower()}://{(u.hostname or '').lower()}:{u.port or 443}"


# -- errors --------------------------------------------------------------------------------
class GraphError(Exception):
    def __init__(self, status, code, message, headers=()):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, tuple(headers)


class EntraError(Exception):
    def __init__(self, status, error, aadsts, text, headers=()):
        super().__init__(text)
        self.status, self.error, self.aadsts, self.text = status, error, aadsts, text
        self.headers = tuple(headers)


def bad_request(message, code="BadRequest"):
    return GraphError(400, code, message)


def invalid(message):
    return GraphError(400, "InvalidRequest", message)


# -- state ---------------------------------------------------------------------------------
class Tenant:
    def __init__(self, tenant_id, client_id, cert_path):
        with open(cert_path, "rb") as f:
            cert = x509.load_pem_x509_certificate(f.read())
        der = cert.public_bytes(serialization.Encoding.DER)
        self.key = cert.public_key()
        if not isinstance(self.key, rsa.RSAPublicKey):
            sys.exit(f"graph_simulator: {cert_path} does not hold an RSA key")
        self.id = tenant_id.lower()
        self.client_id = client_id.lower()
        self.x5t = b64url(hashlib.sha1(der).digest())
        self.x5t256 = b64url(hashlib.sha256(der).digest())
        self.sp_id = guid()
        self.change_tracking_oid = guid()  # Graph Change Tracking's service principal here
        self.scope = None  # None or a set of lowercase mails


class Message:
    __slots__ = ("id", "subject", "from_name", "from_address", "received", "is_read",
                 "deleted", "etag", "change_key", "conversation_id", "internet_id", "preview")


class User:
    def __init__(self, tenant, mail, uid, display):
        self.tenant, self.mail, self.id, self.display = tenant, mail, uid, display
        self.messages = {}
        self.folder_id = graph_id("AQMkAD")


class Token:
    __slots__ = ("kind", "tenant", "user", "app_id", "expires", "revoked")

    def __init__(self, kind, tenant, user, app_id, expires):
        self.kind, self.tenant, self.user, self.app_id = kind, tenant, user, app_id
        self.expires, self.revoked = expires, False


class Subscription:
    def __init__(self):
        self.id = guid()
        self.state = "live"  # live | deleted | removed (paused and expired are derived)
        self.paused = False
        self.backlog = []
        self.renewals = self.reauthorizations = 0
        self.last_patch = self.last_reauth = None
        self.grace = None  # a pending reauthorizeGraceSeconds timer's number
        self.select = []
        self.cert_key = self.cert_thumb = None

    def set_certificate(self, cert, cert_id):
        der = base64.b64decode(cert)
        self.cert, self.cert_id = cert, cert_id
        self.cert_key = x509.load_der_x509_certificate(der).public_key()
        self.cert_thumb = hashlib.sha1(der).hexdigest().upper()

    def status(self, now):
        if self.state != "live":
            return self.state
        if now >= self.expires:
            return "expired"
        return "paused" if self.paused else "live"

    def alive(self, now):
        return self.status(now) in ("live", "paused")


class SigningKey:
    """An RSA-2048 key of the simulated identity platform, with a self-signed certificate
    (as Microsoft publishes in x5c); kid = x5t = base64url SHA-1 of the certificate."""

    def __init__(self):
        self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pub = self.private.public_key()
        now = datetime.datetime.now(datetime.timezone.utc)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                             "accounts.accesscontrol.windows.net")])
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(pub)
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=5 * 365))
                .sign(self.private, hashes.SHA256()))
        self.der = cert.public_bytes(serialization.Encoding.DER)
        self.x5t = self.kid = b64url(hashlib.sha1(self.der).digest())
        nums = pub.public_numbers()
        self.n = b64url(nums.n.to_bytes((nums.n.bit_length() + 7) // 8, "big"))
        self.e = b64url(nums.e.to_bytes((nums.e.bit_length() + 7) // 8, "big"))

    def jwk(self):
        return {"kty": "RSA", "use": "sig", "kid": self.kid, "x5t": self.x5t, "n": self.n,
                "e": self.e, "x5c": [base64.b64encode(self.der).decode()]}


class Delivery:
    """One POST (and its retries) of notifications or lifecycle events."""

    def __init__(self, kind, url, items, created, generation):
        self.kind, self.url, self.items, self.created = kind, url, items, created
        self.generation = generation
        self.attempt = 0
        self.done = threading.Event()
        self.result = None

    def finish(self, **result):
        if self.result is None:
            subs = [s.id for s, _ in self.items] or [None]
            self.result = {"subscriptionId": subs[0], "subscriptionIds": subs,
                           "attempt": self.attempt, "status": None, "elapsedMs": None}
            self.result.update(result)
            self.done.set()


class Call:
    """One Graph API request being processed."""

    def __init__(self, h, body, query, rec, request_id, client_request_id):
        self.h, self.body, self.query, self.rec = h, body, query, rec
        self.request_id, self.client_request_id = request_id, client_request_id
        self.token = self.route = self.user = None
        self.parsed = None


class Simulator:
    def __init__(self, args):
        n = {len(args.tenant or ()), len(args.client_id or ()), len(args.client_cert or ())}
        if len(n) != 1 or 0 in n:
            sys.exit("graph_simulator: give --tenant, --client-id and --client-cert equally "
                     "often (at least once)")
        self.tenants = {}
        for tid, cid, cert in zip(args.tenant, args.client_id, args.client_cert):
            t = Tenant(tid, cid, cert)
            self.tenants[t.id] = t
        self.login_base = args.login_base.rstrip("/")
        self.retry_scale = args.retry_scale
        self.max_minutes = args.max_lifetime_minutes
        self.callback_trust = certs.CallbackTrust(args.callback_ca)
        self.failures = Failures()  # operation -> dict
        self.lock = threading.RLock()
        self.delivered_cond = threading.Condition(self.lock)
        self.sched_cond = threading.Condition(threading.Lock())
        self.heap = []
        self.seq = 0
        self.stopping = threading.Event()
        self.generation = 0
        self.requests = collections.deque(maxlen=MAX_RECORDS)
        self.violations = collections.deque(maxlen=MAX_RECORDS)
        self.signing_key = SigningKey()        # signs validation tokens
        self.unpublished_key = SigningKey()    # never in the JWKS (fault unknown-kid)
        self.published_keys = [self.signing_key]
        self.reset()
        threading.Thread(target=self.scheduler, daemon=True).start()

    def reset(self):
        with self.lock:
            self.generation += 1
            self.offset = 0.0
            self.users = {}          # id -> User
            self.by_mail = {}        # lowercase mail -> User
            self.tokens = {}         # access token -> Token
            self.jtis = {}           # (client id, jti) -> exp
            self.subscriptions = {}  # id -> Subscription
            self.failures.clear()
            self.holds = {}
            self.retry_after = {}    # (mail, operation) -> monotonic deadline
            self.in_flight = collections.Counter()
            self.mode = dict(DEFAULT_MODE)
            self.health = {}
            self.counter = 0
            self.rich_posts = 0
            self.grace_seq = 0
            self.published_keys = [self.signing_key]
            for t in self.tenants.values():
                t.scope = None
            self.requests.clear()
            self.violations.clear()
            self.stats = {"tokens_issued": collections.Counter(), "validations": 0,
                          "validations_failed": 0, "notifications_delivered": 0,
                          "notification_posts_delivered": 0, "notifications_failed_attempts": 0,
                          "notifications_dropped": 0, "lifecycle_delivered": 0,
                          "lifecycle_failed_attempts": 0, "lifecycle_undeliverable": 0,
                          "message_gets": collections.Counter(),
                          "folder_gets": collections.Counter(),
                          "max_in_flight": collections.Counter(), "throttled": 0,
                          "openid_config_fetches": 0, "jwks_fetches": 0,
                          "validation_tokens_issued": 0}
            self.first_ms = []
        with self.sched_cond:
            self.heap.clear()
            self.sched_cond.notify_all()

    # -- clock, records ------------------------------------------------------------------
    def now(self):
        return time.time() + self.offset

    def record(self, rec):
        with self.lock:
            self.requests.append(rec)

    def violation(self, text):
        with self.lock:
            self.violations.append(text)

    def next_counter(self):
        with self.lock:
            self.counter += 1
            return self.counter

    # -- scheduler (simulator-clock due times) -------------------------------------------
    def schedule(self, due, fn):
        with self.sched_cond:
            self.seq += 1
            heapq.heappush(self.heap, (due, self.seq, fn))
            self.sched_cond.notify_all()

    def scheduler(self):
        while not self.stopping.is_set():
            with self.sched_cond:
                if not self.heap:
                    self.sched_cond.wait(0.5)
                    continue
                wait = self.heap[0][0] - self.now()
                if wait > 0:
                    self.sched_cond.wait(min(wait, 0.5))
                    continue
                _, _, fn = heapq.heappop(self.heap)
            threading.Thread(target=fn, daemon=True).start()

    def advance(self, seconds):
        with self.lock:
            self.offset += seconds
        with self.sched_cond:
            self.sched_cond.notify_all()

    # == token endpoint ===================================================================
    def token_endpoint(self, h, tenant_seg, body, rec):
        rec["operation"] = "token"
        try:
            tenant, token = self.exchange(h, tenant_seg, body)
        except EntraError as e:
            rec["error"] = e.error
            rec["errorCode"] = e.aadsts
            trace, corr = guid(), guid()
            stamp = dt_of(self.now()).strftime("%Y-%m-%d %H:%M:%SZ")
            out = {"error": e.error,
                   "error_description": f"AADSTS{e.aadsts}: {e.text}\r\nTrace ID: {trace}\r\n"
                                        f"Correlation ID: {corr}\r\nTimestamp: {stamp}",
                   "error_codes": [e.aadsts], "timestamp": stamp, "trace_id": trace,
                   "correlation_id": corr,
                   "error_uri": f"{self.login_base}/error?code={e.aadsts}"}
            headers = list(e.headers)
            if e.status == 405:
                headers.append(("Allow", "POST, OPTIONS"))
            return e.status, json.dumps(out).encode(), ENTRA_CT, headers
        rec["tenant"] = tenant.id
        out = {"token_type": "Bearer", "expires_in": TOKEN_LIFETIME,
               "ext_expires_in": TOKEN_LIFETIME, "access_token": token}
        return 200, json.dumps(out).encode(), ENTRA_CT, [("Cache-Control", "no-store, no-cache"),
                                                         ("Pragma", "no-cache")]

    def exchange(self, h, tenant_seg, body):
        failure = self.failures.take("token")
        if failure:
            if failure.get("delayMs"):
                time.sleep(failure["delayMs"] / 1000)
            if failure.get("status"):
                status = failure["status"]
                headers = [("Retry-After", str(failure["retryAfter"]))] \
                    if failure.get("retryAfter") is not None else []
                default = "temporarily_unavailable" if status >= 500 or status == 429 else "invalid_request"
                raise EntraError(status, failure.get("code") or default, 90033,
                                 failure.get("message") or "A transient error has occurred. "
                                 "Please try again.", headers)
        if h.command != "POST":
            raise EntraError(405, "invalid_request", 900561, "The endpoint only accepts POST, "
                             f"OPTIONS requests. Received a {h.command} request.")
        if media_type(h.headers.get("Content-Type"))[0] != "application/x-www-form-urlencoded":
            raise EntraError(400, "invalid_request", 900144, "The request body must contain "
                             "the following parameter: 'grant_type'.")
        try:
            pairs = parse_qsl(body.decode("ascii"), keep_blank_values=True,
                              strict_parsing=bool(body), encoding="utf-8", errors="strict")
        except (ValueError, UnicodeDecodeError):
            raise EntraError(400, "invalid_request", 90014, "The request body is not a valid "
                             "application/x-www-form-urlencoded form.")
        form = {}
        for name, value in pairs:
            if name in form:
                raise EntraError(400, "invalid_request", 90014,
                                 f"The request contains the parameter '{name}' more than once.")
            form[name] = value
        seg = tenant_seg.lower()
        if seg in ("common", "organizations", "consumers"):
            raise EntraError(400, "invalid_request", 50059, "No tenant-identifying information "
                             "found in either the request or implied by any provided credentials.")
        tenant = self.tenants.get(seg)
        if tenant is None:
            raise EntraError(400, "invalid_tenant", 90002, f"Tenant '{tenant_seg}' not found. "
                             "Check to make sure you have the correct tenant ID and are signing "
                             "into the correct cloud.")

        def need(name):
            value = form.get(name)
            if not value:
                raise EntraError(400, "invalid_request", 900144, "The request body must "
                                 f"contain the following parameter: '{name}'.")
            return value
        grant = need("grant_type")
        if grant != "client_credentials":
            raise EntraError(400, "unsupported_grant_type", 70003,
                             f"The app requested an unsupported grant type '{grant}'.")
        client_id = need("client_id")
        if client_id.lower() != tenant.client_id:
            raise EntraError(400, "unauthorized_client", 700016,
                             f"Application with identifier '{client_id}' was not found in the "
                             f"directory '{tenant.id}'. This can happen if the application has "
                             "not been installed by the administrator of the tenant or "
                             "consented to by any user in the tenant. You may have sent your "
                             "authentication request to the wrong tenant.")
        scope = need("scope")
        scopes = scope.split(" ")
        if scopes != [GRAPH_SCOPE]:
            if len(scopes) == 1 and scope.lower().startswith("https://graph.microsoft.com/"):
                raise EntraError(400, "invalid_scope", 1002012, f"The provided value for scope "
                                 f"{scope} is not valid. Client credential flows must have a "
                                 "scope value with /.default suffixed to the resource identifier "
                                 "(application ID URI).")
            raise EntraError(400, "invalid_scope", 70011, "The provided value for the input "
                             f"parameter 'scope' is not valid. The scope {scope} is not valid.")
        if "client_secret" in form:
            raise EntraError(401, "invalid_client", 7000215, "Invalid client secret provided. "
                             "Ensure the secret being sent in the request is the client secret "
                             "value, not the client secret ID, for a secret added to app "
                             f"'{tenant.client_id}'.")
        if form.get("client_assertion_type") != ASSERTION_TYPE or not form.get("client_assertion"):
            raise EntraError(400, "invalid_request", 7000216, "'client_assertion', "
                             "'client_secret' or 'request' is required for the "
                             "'client_credentials' grant type.")
        self.check_assertion(tenant, form["client_assertion"])
        token = opaque_token(560)
        with self.lock:
            self.tokens[token] = Token("app", tenant, None, tenant.client_id,
                                       self.now() + TOKEN_LIFETIME)
            self.stats["tokens_issued"][tenant.id] += 1
        return tenant, token

    def check_assertion(self, tenant, assertion):
        try:
            parts = assertion.split(".")
            if len(parts) != 3:
                raise ValueError("not three parts")
            header = json.loads(b64url_decode(parts[0]))
            claims = json.loads(b64url_decode(parts[1]))
            signature = b64url_decode(parts[2])
            if not isinstance(header, dict) or not isinstance(claims, dict):
                raise ValueError("not objects")
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise EntraError(400, "invalid_client", 50027, "JWT token is invalid or malformed.")
        alg = header.get("alg")
        x5t, x5t256 = header.get("x5t"), header.get("x5t#S256")
        if alg not in ("RS256", "PS256") or (x5t is None and x5t256 is None) \
                or (x5t is not None and x5t != tenant.x5t) \
                or (x5t256 is not None and x5t256 != tenant.x5t256):
            raise EntraError(401, "invalid_client", 700027, "Client assertion failed signature "
                             "validation. [Reason - The key was not found.]")
        signed = (parts[0] + "." + parts[1]).encode()
        try:
            if alg == "RS256":
                tenant.key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
            else:
                tenant.key.verify(signature, signed, padding.PSS(
                    mgf=padding.MGF1(hashes.SHA256()), salt_length=32), hashes.SHA256())
        except InvalidSignature:
            raise EntraError(401, "invalid_client", 700027,
                             "Client assertion contains an invalid signature.")
        expected = f"{self.login_base}/{tenant.id}/oauth2/v2.0/token"
        if claims.get("aud") != expected:
            raise EntraError(401, "invalid_client", 700023,
                             "Client assertion audience claim does not match Realm issuer.")
        if claims.get("iss") != tenant.client_id or claims.get("sub") != tenant.client_id:
            raise EntraError(401, "invalid_client", 700021, "Client assertion application "
                             "identifier doesn't match 'client_id' parameter.")
        now = self.now()
        exp, nbf, iat = claims.get("exp"), claims.get("nbf"), claims.get("iat")
        start = nbf if nbf is not None else iat if iat is not None else now
        if not is_int(exp) or exp <= now or (nbf is not None and not is_int(nbf)) \
                or (iat is not None and not is_int(iat)) \
                or (nbf is not None and nbf > now + 300) or exp - start > 3600:
            raise EntraError(401, "invalid_client", 700024,
                             "Client assertion is not within its valid time range.")
        jti = claims.get("jti")
        with self.lock:
            for key in [k for k, e in self.jtis.items() if e <= now]:
                del self.jtis[key]
            if not isinstance(jti, str) or not jti or (tenant.client_id, jti) in self.jtis:
                raise EntraError(401, "invalid_client", 700025, "Client assertion jti replay: "
                                 "the assertion's jti is missing or was used before.")
            self.jtis[(tenant.client_id, jti)] = exp

    # == Graph API ========================================================================
    def graph(self, h, path, query, body, rec):
        request_id = guid()
        client_request_id = h.headers.get("client-request-id") or guid()
        call = Call(h, body, query, rec, request_id, client_request_id)
        headers = [("request-id", request_id), ("client-request-id", client_request_id)]
        try:
            status, obj, extra = self.graph_call(call, path)
            headers += list(extra)
            if obj is None:
                return status, b"", None, headers
            return status, json.dumps(obj).encode(), SUCCESS_CT, headers
        except GraphError as e:
            headers += list(e.headers)
            if e.status == 401:
                headers.append(("WWW-Authenticate",
                                f'Bearer realm="", authorization_uri="{self.login_base}/common/'
                                f'oauth2/authorize", client_id="{GRAPH_APP_ID}"'))
            rec["error"] = e.code
            out = {"error": {"code": e.code, "message": e.message, "innerError": {
                "date": dt_of(self.now()).strftime("%Y-%m-%dT%H:%M:%S"),
                "request-id": request_id, "client-request-id": client_request_id}}}
            return e.status, json.dumps(out).encode(), ERROR_CT, headers

    def graph_call(self, call, path):
        call.token = self.authenticate(call.h.headers)
        tok = call.token
        call.rec["tokenKind"] = "app" if tok.kind == "app" else "delegated"
        call.rec["tenant"] = tok.tenant.id
        route = self.route(call.h.command, path, call.rec)
        call.route = route
        op = route["op"]
        call.rec["operation"] = op
        mail = self.concerned_mail(call)
        call.rec["mail"] = mail
        key = (mail or "-", op)
        with self.lock:
            deadline = self.retry_after.get(key)
            if deadline is not None:
                if time.monotonic() < deadline:
                    call.rec["beforeRetryAfter"] = True
                    self.violations.append(f"request before Retry-After elapsed ({op})")
                else:
                    del self.retry_after[key]
            if mail is not None:
                if self.in_flight[mail] >= MAX_IN_FLIGHT:
                    self.stats["throttled"] += 1
                    raise GraphError(429, "ApplicationThrottled", "Application is over its "
                                     "MailboxConcurrency limit.", [("Retry-After", "1")])
                self.in_flight[mail] += 1
                self.stats["max_in_flight"][mail] = max(self.stats["max_in_flight"][mail],
                                                        self.in_flight[mail])
            hold = self.holds.get(mail, 0) if mail is not None else 0
        try:
            if hold:
                time.sleep(hold / 1000)
            failure = self.failures.take((op, (mail or "").lower()), op)
            if failure:
                if failure.get("delayMs"):
                    time.sleep(failure["delayMs"] / 1000)
                if failure.get("status"):
                    status = failure["status"]
                    headers = []
                    if failure.get("retryAfter") is not None:
                        headers.append(("Retry-After", str(failure["retryAfter"])))
                        if status == 429:
                            with self.lock:
                                self.retry_after[key] = time.monotonic() + failure["retryAfter"]
                    raise GraphError(status, failure.get("code") or default_code(status),
                                     failure.get("message") or default_message(status), headers)
            return getattr(self, "op_" + op.replace("-", "_"))(call)
        finally:
            if mail is not None:
                with self.lock:
                    self.in_flight[mail] -= 1

    def authenticate(self, headers):
        authz = headers.get("Authorization")
        scheme, _, cred = (authz or "").strip().partition(" ")
        cred = cred.strip()
        if not authz or not cred or scheme.lower() != "bearer":
            raise GraphError(401, "InvalidAuthenticationToken", "Access token is empty.")
        with self.lock:
            tok = self.tokens.get(cred)
        if tok is None or tok.revoked:
            raise GraphError(401, "InvalidAuthenticationToken", "Access token validation failure.")
        if self.now() >= tok.expires:
            raise GraphError(401, "InvalidAuthenticationToken",
                             "Lifetime validation failed, the token is expired.")
        return tok

    def route(self, method, path, rec):
        rest = path[len("/v1.0"):]
        segs = split_segments(rest[1:]) if rest.startswith("/") and len(rest) > 1 else None

        def unknown(seg, template):
            rec["path"] = template
            self.violation(f"unknown Graph path {template}")
            return bad_request(f"Resource not found for the segment '{seg}'.")
        if not segs:
            raise unknown("", "/v1.0/")
        names = [s.lower() for s in segs]
        r = None
        if names[0] in ("me", "users"):
            me = names[0] == "me"
            if not me and len(segs) == 1:
                r = {"op": "get-user", "template": "/v1.0/users", "methods": ("GET",)}
            else:
                base = ("/v1.0/me", 1) if me else ("/v1.0/users/{id}", 2)
                tail, tnames = segs[base[1]:], names[base[1]:]
                user_ref = None if me else segs[1]
                if not tail:
                    r = {"op": "me" if me else "get-user", "template": base[0], "methods": ("GET",)}
                elif len(tail) == 2 and tnames[0] == "messages":
                    r = {"op": "get-message", "template": base[0] + "/messages/{id}",
                         "methods": ("GET",), "message": tail[1]}
                elif len(tail) == 2 and tnames[0] == "mailfolders":
                    r = {"op": "get-folder", "template": base[0] + "/mailFolders/{id}",
                         "methods": ("GET",), "folder": tail[1]}
                else:
                    tmpl = base[0] + "".join("/" + (s if s in ("messages", "mailfolders") else "{x}")
                                             for s in tnames)
                    raise unknown(tail[0] if tnames[0] not in ("messages", "mailfolders")
                                  else tail[-1], tmpl)
                r["me"], r["user"] = me, user_ref
        elif names[0] == "subscriptions":
            if len(segs) == 1:
                r = {"op": "list" if method == "GET" else "create", "template": "/v1.0/subscriptions",
                     "methods": ("GET", "POST")}
            elif len(segs) == 2:
                ops = {"GET": "get-subscription", "PATCH": "patch", "DELETE": "delete"}
                r = {"op": ops.get(method, "get-subscription"),
                     "template": "/v1.0/subscriptions/{id}", "methods": ("GET", "PATCH", "DELETE"),
                     "sub": segs[1]}
            elif len(segs) == 3 and names[2] == "reauthorize":
                r = {"op": "reauthorize", "template": "/v1.0/subscriptions/{id}/reauthorize",
                     "methods": ("POST",), "sub": segs[1]}
            else:
                raise unknown(segs[2], "/v1.0/subscriptions/{id}/{x}")
        else:
            raise unknown(segs[0], "/v1.0/{x}")
        rec["path"] = r["template"]
        if method not in r["methods"]:
            raise GraphError(405, "BadRequest", f"The HTTP method '{method}' is not allowed for "
                             "the requested resource.", [("Allow", ", ".join(r["methods"]))])
        return r

    def concerned_mail(self, call):
        r = call.route
        user = None
        with self.lock:
            if r["op"] in ("me", "get-message", "get-folder"):
                user = call.token.user if r["me"] else self.find_user(r["user"])
            elif r["op"] == "create":
                try:
                    body = strict_json(call.body)
                    parsed = parse_resource(body.get("resource")) if isinstance(body, dict) else None
                except (ValueError, UnicodeDecodeError, RecursionError):
                    parsed = None
                if parsed:
                    user = call.token.user if parsed["me"] else self.find_user(parsed["ref"])
            elif "sub" in r:
                sub = self.subscriptions.get(r["sub"].lower())
                user = sub.user if sub else None
        return user.mail if user else None

    def find_user(self, ref):
        """Caller holds self.lock."""
        if not isinstance(ref, str):
            return None
        return self.users.get(ref.lower()) or self.by_mail.get(ref.lower())

    def mailbox(self, call, me, ref):
        """Access check for a mailbox; -> User."""
        tok = call.token
        if me:
            if tok.kind == "app":
                raise bad_request("/me request is only valid with delegated authentication flow.")
            return tok.user
        with self.lock:
            user = self.find_user(ref)
            if tok.kind == "app":
                if user is None or user.tenant is not tok.tenant:
                    raise GraphError(404, "ErrorInvalidUser", f"The requested user '{ref}' is invalid.")
                if tok.tenant.scope is not None and user.mail not in tok.tenant.scope:
                    raise GraphError(403, "ErrorAccessDenied", ACCESS_DENIED)
            else:
                if user is None:
                    raise GraphError(404, "ErrorInvalidUser", f"The requested user '{ref}' is invalid.")
                if user is not tok.user:
                    raise GraphError(403, "ErrorAccessDenied", ACCESS_DENIED)
        return user

    def select(self, call, props, type_name):
        """-> list of canonical property names, or None without $select."""
        seen = {}
        try:
            pairs = parse_qsl(call.query, keep_blank_values=True, strict_parsing=bool(call.query),
                              errors="strict")
        except (ValueError, UnicodeDecodeError):
            raise bad_request("The query specified in the URI is not valid.")
        for name, value in pairs:
            if name.startswith("$"):
                if name != "$select" or name in seen:
                    raise bad_request(f"Query option '{name}' is not allowed or is repeated.")
                seen[name] = value
        if "$select" not in seen:
            return None
        canon = {p.lower(): p for p in props}
        out = []
        for item in seen["$select"].split(","):
            p = canon.get(item.strip().lower())
            if p is None:
                raise bad_request(f"Could not find a property named '{item.strip()}' on type "
                                  f"'microsoft.graph.{type_name}'.")
            if p not in out:
                out.append(p)
        call.rec["select"] = out
        return out

    # -- user, message, folder ---------------------------------------------------------
    def op_me(self, call):
        user = self.mailbox(call, True, None)
        sel = self.select(call, USER_PROPS, "user")
        values = {"id": user.id, "businessPhones": [], "displayName": user.display,
                  "givenName": user.display.split(" ")[0], "jobTitle": None, "mail": user.mail,
                  "mobilePhone": None, "officeLocation": None, "preferredLanguage": "en-US",
                  "surname": user.display.split(" ")[-1], "userPrincipalName": user.mail}
        ctx = f"{GRAPH_BASE}/$metadata#users({','.join(sel)})/$entity" if sel else \
            f"{GRAPH_BASE}/$metadata#users/$entity"
        out = {"@odata.context": ctx}
        for p in sel or USER_PROPS:
            out[p] = values[p]
        return 200, out, ()

    def op_get_user(self, call):
        raise GraphError(403, "Authorization_RequestDenied",
                         "Insufficient privileges to complete the operation.")

    def op_get_message(self, call):
        r = call.route
        user = self.mailbox(call, r["me"], r["user"])
        sel = self.select(call, MESSAGE_PROPS, "message")
        with self.lock:
            self.stats["message_gets"][user.mail] += 1
        if sel is None:
            self.violation("message fetched without $select")
        else:
            for p in sel:
                if p in NOT_READBASIC:
                    self.violation(f"message fetched with {p} (not in Mail.ReadBasic)")
                    raise GraphError(403, "ErrorAccessDenied", ACCESS_DENIED)
        with self.lock:
            msg = user.messages.get(r["message"])
            if msg is None or msg.deleted:
                raise GraphError(404, "ErrorItemNotFound",
                                 "The specified object was not found in the store.")
            values = self.message_values(user, msg)
        props = sel or [p for p in MESSAGE_PROPS if p not in NOT_READBASIC]
        ctx = f"{GRAPH_BASE}/$metadata#users('{user.id}')/messages"
        ctx += f"({','.join(sel)})/$entity" if sel else "/$entity"
        out = {"@odata.context": ctx, "@odata.etag": msg.etag, "id": msg.id}
        for p in props:
            out[p] = values[p]
        return 200, out, ()

    @staticmethod
    def message_values(user, msg):
        sender = {"emailAddress": {"name": msg.from_name, "address": msg.from_address}}
        when = iso7(msg.received)
        return {"id": msg.id, "createdDateTime": when, "lastModifiedDateTime": when,
                "changeKey": msg.change_key, "categories": [], "receivedDateTime": when,
                "sentDateTime": iso7(msg.received - 2), "hasAttachments": False,
                "internetMessageId": msg.internet_id, "subject": msg.subject,
                "importance": "normal", "parentFolderId": user.folder_id,
                "conversationId": msg.conversation_id,
                "conversationIndex": base64.b64encode(secrets.token_bytes(22)).decode(),
                "isDeliveryReceiptRequested": False, "isReadReceiptRequested": False,
                "isRead": msg.is_read, "isDraft": False,
                "webLink": "https://outlook.office365.com/owa/?ItemID=" + quote(msg.id, safe="")
                           + "&exvsurl=1&viewmodel=ReadMessageItem",
                "inferenceClassification": "focused", "sender": sender, "from": sender,
                "toRecipients": [{"emailAddress": {"name": user.display, "address": user.mail}}],
                "ccRecipients": [], "bccRecipients": [], "replyTo": [],
                "flag": {"flagStatus": "notFlagged"}}

    def op_get_folder(self, call):
        r = call.route
        user = self.mailbox(call, r["me"], r["user"])
        sel = self.select(call, FOLDER_PROPS, "mailFolder")
        with self.lock:
            self.stats["folder_gets"][user.mail] += 1
            if r["folder"].lower() != "inbox" and r["folder"] != user.folder_id:
                raise GraphError(404, "ErrorItemNotFound",
                                 "The specified object was not found in the store.")
            live = [m for m in user.messages.values() if not m.deleted]
            values = {"id": user.folder_id, "displayName": "Inbox",
                      "parentFolderId": "AQMkAD" + b64url(user.id.encode())[:40] + "AAAAEIAAAA=",
                      "childFolderCount": 0,
                      "unreadItemCount": sum(1 for m in live if not m.is_read),
                      "totalItemCount": len(live), "sizeInBytes": 4096 * len(live),
                      "isHidden": False}
        if sel is None:
            self.violation("folder fetched without $select")
        ctx = f"{GRAPH_BASE}/$metadata#users('{user.id}')/mailFolders"
        ctx += f"({','.join(sel)})/$entity" if sel else "/$entity"
        out = {"@odata.context": ctx, "id": user.folder_id}
        for p in sel or FOLDER_PROPS:
            out[p] = values[p]
        return 200, out, ()

    # -- subscriptions -------------------------------------------------------------------
    def json_body(self, call):
        if not is_json_ct(call.h.headers.get("Content-Type")):
            raise GraphError(415, "UnsupportedMediaType",
                             "The request's Content-Type must be application/json.")
        try:
            body = strict_json(call.body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            body = None
        if not isinstance(body, dict):
            raise bad_request("Unable to read JSON request payload. Please ensure Content-Type "
                              "header is set and payload is of valid JSON format.")
        for k, v in body.items():
            if k not in SUBSCRIPTION_PROPS:
                raise bad_request(f"The property '{k}' does not exist on type "
                                  "'microsoft.graph.subscription'. Make sure to only use "
                                  "property names that are defined by the type or mark the "
                                  "type as open type.")
            want = CREATE_PROPS.get(k)
            if want is not None and v is not None and not isinstance(v, want):
                raise bad_request(f"Cannot convert the value of property '{k}' to the expected "
                                  "type.")
            if k == "@odata.type" and str(v).lower() != "#microsoft.graph.subscription":
                raise bad_request(f"The type '{v}' is not a subscription type.")
        return body

    def expiry(self, value, rich):
        """-> the effective expiry (floor applied), or raises."""
        if value is None:
            raise invalid("expirationDateTime is a required property for subscription creation.")
        ts = parse_iso(value)
        if ts is None:
            raise bad_request(f"The value '{value}' is not a valid DateTimeOffset for "
                              "expirationDateTime.")
        now = self.now()
        if ts <= now:
            raise invalid("Subscription expiration must be in the future.")
        cap = RICH_CAP_MINUTES if rich else self.max_minutes
        if ts > now + cap * 60:
            raise invalid(f"Subscription expiration can only be {cap} minutes in the future.")
        return max(ts, now + FLOOR_MINUTES * 60)

    def op_create(self, call):
        tok = call.token
        body = self.json_body(call)
        for k in ("id", "applicationId", "creatorId", "notificationUrlAppId"):
            if k in body:
                raise bad_request(f"Property '{k}' is read-only and cannot be set.")
        for k in ("notificationQueryOptions", "notificationContentType"):
            if body.get(k) is not None:
                raise invalid(f"Property '{k}' is not supported for Outlook resources.")
        call.rec["immutableIdHeader"] = immutable = wants_immutable_ids(call.h.headers)
        change = body.get("changeType")
        if change is None:
            raise invalid("changeType is a required property for subscription creation.")
        kinds = [c.strip() for c in change.split(",")]
        if not kinds or any(c not in CHANGE_TYPES for c in kinds) or len(set(kinds)) != len(kinds):
            raise invalid(f"Invalid change type '{change}'. Valid change types are created, "
                          "updated and deleted.")
        url = body.get("notificationUrl")
        if url is None:
            raise invalid("notificationUrl is a required property for subscription creation.")
        if not https_url(url):
            raise invalid("The Notification Url must be HTTPS.")
        lurl = body.get("lifecycleNotificationUrl")
        if lurl is not None and not https_url(lurl):
            raise invalid("The Lifecycle Notification Url must be HTTPS.")
        resource = body.get("resource")
        if resource is None:
            raise invalid("resource is a required property for subscription creation.")
        parsed = parse_resource(resource)
        if parsed is None:
            raise invalid(f"Unsupported resource '{resource}'. Supported: users/{{id}}/messages "
                          "and users/{id}/mailFolders('inbox')/messages.")
        if parsed["me"] and tok.kind == "app":
            raise bad_request("/me request is only valid with delegated authentication flow.")
        rich = body.get("includeResourceData") is True
        expires = self.expiry(body.get("expirationDateTime"), rich)
        state = body.get("clientState")
        if state is not None and len(state) > 128:
            raise invalid("clientState must be at most 128 characters long.")
        cert, cert_id = body.get("encryptionCertificate"), body.get("encryptionCertificateId")
        if rich:
            if not cert or not valid_encryption_cert(cert):
                raise invalid("A valid encryptionCertificate is required when "
                              "includeResourceData is true.")
            if not cert_id or len(cert_id) > 128:
                raise invalid("encryptionCertificateId is required when includeResourceData is "
                              "true.")
            if not parsed["select"]:
                raise invalid("A $select query is required in the resource when "
                              "includeResourceData is true.")
            if {p.lower() for p in parsed["select"]} & {"body", "uniquebody"}:
                raise invalid("$select=body and uniqueBody are not supported with "
                              "includeResourceData.")
        tls = body.get("latestSupportedTlsVersion") or "v1_2"
        if tls not in TLS_VERSIONS:
            raise invalid(f"Invalid latestSupportedTlsVersion '{tls}'.")
        user = self.mailbox(call, parsed["me"], parsed["ref"])
        norm = (user.id, parsed["folder"], parsed["query"].lower(), frozenset(kinds))
        self.check_limits(user, tok, norm)
        for target, u in (("notificationUrl", url), ("lifecycleNotificationUrl", lurl)):
            if u is not None:
                self.require_validation(u, target, "create")
        with self.lock:
            self.check_limits(user, tok, norm)
            sub = Subscription()
            sub.tenant, sub.user, sub.app_id = user.tenant, user, tok.app_id
            sub.creator_kind = "app" if tok.kind == "app" else "delegated"
            sub.creator_id = tok.tenant.sp_id if tok.kind == "app" else user.id
            sub.resource, sub.norm, sub.change_type = resource, norm, change
            sub.notification_url, sub.lifecycle_url, sub.client_state = url, lurl, state
            sub.expires, sub.rich, sub.tls = expires, rich, tls
            sub.cert, sub.cert_id, sub.immutable = cert, cert_id, immutable
            if rich:
                sub.set_certificate(cert, cert_id)
                sub.select = rich_select(parsed["select"])
            sub.created = self.now()
            self.subscriptions[sub.id] = sub
            if not immutable:
                self.violations.append("subscription created without immutable ids")
            call.rec["subscriptionId"] = sub.id
            return 201, self.sub_json(sub, context=True), ()

    def check_limits(self, user, tok, norm):
        now = self.now()
        with self.lock:
            alive = [s for s in self.subscriptions.values() if s.user is user and s.alive(now)]
            if len(alive) >= MAILBOX_LIMIT:
                raise GraphError(403, "ExtensionError", "Operation: Create; Exception: [Status "
                                 "Code: Forbidden; Reason: The maximum number of subscriptions "
                                 f"({MAILBOX_LIMIT}) for this mailbox has been reached.]")
            for s in alive:
                if s.app_id == tok.app_id and s.norm == norm:
                    raise GraphError(409, "Conflict", f"Subscription Id {s.id} already exists "
                                     "for the requested combination")

    def sub_json(self, sub, context=False):
        out = {}
        if context:
            out["@odata.context"] = f"{GRAPH_BASE}/$metadata#subscriptions/$entity"
        out.update({"id": sub.id, "resource": sub.resource, "applicationId": sub.app_id,
                    "changeType": sub.change_type, "clientState": sub.client_state,
                    "notificationUrl": sub.notification_url, "notificationQueryOptions": None,
                    "lifecycleNotificationUrl": sub.lifecycle_url,
                    "expirationDateTime": iso7(sub.expires), "creatorId": sub.creator_id,
                    "includeResourceData": sub.rich, "latestSupportedTlsVersion": sub.tls,
                    "encryptionCertificate": sub.cert, "encryptionCertificateId": sub.cert_id,
                    "notificationUrlAppId": None, "notificationContentType": None})
        return out

    def owned(self, sub, tok):
        if sub.app_id != tok.app_id:
            return False
        if tok.kind == "app":
            return sub.tenant is tok.tenant
        return sub.user is tok.user

    def op_list(self, call):
        tok = call.token
        now = self.now()
        with self.lock:
            subs = [self.sub_json(s) for s in self.subscriptions.values()
                    if s.alive(now) and self.owned(s, tok)]
        return 200, {"@odata.context": f"{GRAPH_BASE}/$metadata#subscriptions", "value": subs}, ()

    def subscription(self, call):
        """The alive subscription the path names, owned by the caller."""
        tok = call.token
        with self.lock:
            sub = self.subscriptions.get(call.route["sub"].lower())
            if sub is None or not sub.alive(self.now()) or sub.tenant is not tok.tenant:
                raise GraphError(404, "ResourceNotFound", "The object was not found.")
            if not self.owned(sub, tok):
                raise GraphError(403, "ErrorAccessDenied", ACCESS_DENIED)
            call.rec["subscriptionId"] = sub.id
            return sub

    def op_get_subscription(self, call):
        sub = self.subscription(call)
        with self.lock:
            return 200, self.sub_json(sub, context=True), ()

    def op_delete(self, call):
        sub = self.subscription(call)
        with self.lock:
            sub.state = "deleted"
            dropped = len(sub.backlog)
            sub.backlog = []
            self.stats["notifications_dropped"] += dropped
        return 204, None, ()

    def op_patch(self, call):
        sub = self.subscription(call)
        body = self.json_body(call)
        for k in body:
            if k not in PATCHABLE:
                raise invalid(f"Property '{k}' cannot be updated.")
        url = body.get("notificationUrl")
        if url is not None and not https_url(url):
            raise invalid("The Notification Url must be HTTPS.")
        cert, cert_id = body.get("encryptionCertificate"), body.get("encryptionCertificateId")
        if cert is not None or cert_id is not None:
            if not sub.rich:
                raise invalid("encryptionCertificate can only be updated on a subscription with "
                              "includeResourceData.")
            if cert is None or cert_id is None:
                raise invalid("encryptionCertificate and encryptionCertificateId must be "
                              "updated together.")
            if not valid_encryption_cert(cert):
                raise invalid("A valid encryptionCertificate is required when "
                              "includeResourceData is true.")
            if not cert_id or len(cert_id) > 128:
                raise invalid("encryptionCertificateId must be 1..128 characters.")
        expires = None
        if body.get("expirationDateTime") is not None:
            expires = self.expiry(body["expirationDateTime"], sub.rich)
        with self.lock:
            mode = self.mode["validateOnPatch"]
            target = url or sub.notification_url
        if mode:
            self.require_validation(target, "notificationUrl", "patch")
        with self.lock:
            if not sub.alive(self.now()):
                raise GraphError(404, "ResourceNotFound", "The object was not found.")
            now = self.now()
            if sub.last_reauth is not None and now - sub.last_reauth < TEN_MINUTES:
                self.violations.append("reauthorize and renew within 10 minutes")
            sub.last_patch = now
            if url is not None:
                sub.notification_url = url
            if expires is not None:
                sub.expires = expires
                sub.renewals += 1
            if cert is not None:
                sub.set_certificate(cert, cert_id)
                call.rec["certificateRotated"] = True
            self.end_grace_by(sub, "patched")
            backlog = self.resume(sub)
            out = self.sub_json(sub, context=True)
        self.send_group(backlog)
        return 200, out, ()

    def op_reauthorize(self, call):
        sub = self.subscription(call)
        with self.lock:
            mode = self.mode["validateOnReauthorize"]
        if mode:
            self.require_validation(sub.notification_url, "notificationUrl", "reauthorize")
        with self.lock:
            now = self.now()
            if sub.last_patch is not None and now - sub.last_patch < TEN_MINUTES:
                self.violations.append("reauthorize and renew within 10 minutes")
            sub.last_reauth = now
            sub.reauthorizations += 1
            self.end_grace_by(sub, "reauthorized")
            backlog = self.resume(sub)
        self.send_group(backlog)
        return 204, None, ()

    def end_grace_by(self, sub, how):
        """Caller holds self.lock. A reauthorize or PATCH during a reauthorizeGraceSeconds
        period: the subscription stays live."""
        if sub.grace is not None:
            sub.grace = None
            self.requests.append({"time": now_ms(), "kind": "reauthorizeGrace",
                                  "subscriptionId": sub.id, "outcome": how})

    def grace_ended(self, sub, number, generation):
        with self.lock:
            if generation != self.generation or sub.grace != number:
                return
            sub.grace = None
            alive = sub.alive(self.now())
            if alive:
                sub.paused = True
            self.requests.append({"time": now_ms(), "kind": "reauthorizeGrace",
                                  "subscriptionId": sub.id,
                                  "outcome": "paused" if alive else "ended"})

    def resume(self, sub):
        """Caller holds self.lock. Clears the paused state; -> the backlog to send."""
        sub.paused = False
        backlog, sub.backlog = sub.backlog, []
        for d in backlog:
            d.url = sub.notification_url  # a PATCH may have moved it
        return backlog

    # == validation handshake ==============================================================
    def post(self, url, body, ctype, timeout):
        """-> (status or None, content type, body bytes, elapsed ms, error or None)."""
        t0 = time.monotonic()
        status, rtype, data, error = None, None, b"", None
        try:
            u = urlsplit(url)
            target = (u.path or "/") + ("?" + u.query if u.query else "")
            conn = http.client.HTTPSConnection(u.hostname, u.port or 443, timeout=timeout,
                                               context=self.callback_trust.get())
            try:
                conn.request("POST", target, body, {"Content-Type": ctype,
                                                    "Content-Length": str(len(body))})
                resp = conn.getresponse()
                status, rtype = resp.status, resp.getheader("Content-Type")
                data = resp.read(MAX_BODY)
            finally:
                conn.close()
        except (socket.timeout, TimeoutError):
            error = "timeout"
        except ssl.SSLError as e:
            error = f"TLS error: {e.reason or type(e).__name__}"
        except (OSError, http.client.HTTPException, ValueError) as e:
            error = f"connection error: {type(e).__name__}"
        elapsed = int((time.monotonic() - t0) * 1000)
        if error is None and elapsed > timeout * 1000:
            status, error = None, "timeout"
        return status, rtype, data, elapsed, error

    def validate(self, url, target, operation):
        """-> None on success, else "failed" or "timeout"."""
        with self.lock:
            delay = self.mode["validationDelayMs"]
            timeout = self.mode["validationTimeoutMs"] / 1000
            drop = self.mode["validationDropNext"] > 0
            if drop:
                self.mode["validationDropNext"] -= 1
        token = validation_token()
        if delay:
            time.sleep(delay / 1000)
        t0 = time.monotonic()
        if drop:
            time.sleep(timeout)
            status, rtype, data, error = None, None, b"", "timeout"
        else:
            full = (url + ("&" if "?" in url else "?") + "validationToken="
                    + quote(token, safe=""))
            status, rtype, data, _, error = self.post(full, b"", "text/plain; charset=utf-8",
                                                      timeout)
        elapsed = int((time.monotonic() - t0) * 1000)
        if error is None and elapsed > timeout * 1000:
            error = "timeout"
        matched = error is None and data == token.encode()
        ok = (error is None and status == 200 and media_type(rtype)[0] == "text/plain"
              and matched)
        outcome = "ok" if ok else "timeout" if error == "timeout" else "failed"
        self.record({"time": now_ms(), "kind": "validation", "target": target,
                     "operation": operation, "status": status, "contentType": rtype,
                     "bodyMatched": matched, "elapsedMs": elapsed, "outcome": outcome,
                     "dropped": drop, "error": error})
        with self.lock:
            self.stats["validations"] += 1
            if not ok:
                self.stats["validations_failed"] += 1
        log(f"deliver validation {target} attempt 1 {status or error} {elapsed}ms")
        return None if ok else outcome

    def require_validation(self, url, target, operation):
        outcome = self.validate(url, target, operation)
        if outcome == "timeout":
            raise GraphError(400, "ValidationError", VALIDATION_TIMEOUT)
        if outcome:
            raise GraphError(400, "ValidationError", VALIDATION_FAILED)

    # == delivery ==========================================================================
    def new_message(self, user, subject, from_name, from_address, preview):
        """Caller holds self.lock."""
        m = Message()
        m.id = graph_id()
        m.subject, m.from_name, m.from_address = subject, from_name, from_address
        m.preview = preview
        m.received = self.now()
        m.is_read = m.deleted = False
        m.change_key = "CQAAABYAAAD" + b64url(secrets.token_bytes(18))
        m.etag = f'W/"{m.change_key}"'
        m.conversation_id = graph_id("AAQkAG")
        m.internet_id = f"<{secrets.token_hex(12)}@{from_address.rpartition('@')[2] or 'example.test'}>"
        user.messages[m.id] = m
        return m

    def notification_item(self, sub, msg):
        """Caller holds self.lock."""
        n = self.next_counter()
        style = self.mode["resourceStyle"]
        if style == "alternate":
            style = "path" if n % 2 else "odata"
        uid = sub.user.id
        resource = (f"Users/{uid}/Messages/{msg.id}" if style == "path"
                    else f"Users('{uid}')/messages('{msg.id}')")
        item = {"id": b64url(secrets.token_bytes(9)), "subscriptionId": sub.id,
                "subscriptionExpirationDateTime": self.expiry_text(sub, n)}
        if sub.client_state is not None:
            item["clientState"] = sub.client_state
        item.update({"changeType": "created", "resource": resource, "tenantId": sub.tenant.id,
                     "resourceData": {"@odata.type": "#Microsoft.Graph.Message" if n % 2
                                      else "#microsoft.graph.message",
                                      "@odata.id": resource, "@odata.etag": msg.etag,
                                      "id": msg.id}})
        if sub.rich:
            values = self.message_values(sub.user, msg)
            values["bodyPreview"] = msg.preview
            data = {"@odata.type": "#Microsoft.Graph.Message", "@odata.id": resource,
                    "@odata.etag": msg.etag, "id": msg.id}
            for p in sub.select:
                data[p] = values[p]
            item["encryptedContent"] = encrypt_content(sub, json.dumps(data).encode("utf-8"))
        return item

    # -- rich notifications: the POST body and its validation tokens -------------------
    def take_blind_fault(self):
        """Caller holds self.lock. The fault for this rich POST (None for none)."""
        name = self.mode["blindFault"]
        if name == "none":
            return None
        left = self.mode["blindFaultCount"]
        if left is not None:
            left -= 1
            self.mode["blindFaultCount"] = left if left > 0 else None
            if left <= 0:
                self.mode["blindFault"] = "none"
        return name

    def notification_body(self, items):
        """Caller holds self.lock. items: [(sub, item)] -> (body bytes, record fields).
        A POST with rich items gets validationTokens: one per distinct (applicationId,
        tenantId) among them, made now, in real time; a blindFault applies to it."""
        value = [item for _, item in items]
        rich = [(s, i) for s, i in items if "encryptedContent" in i]
        if not rich:
            return json.dumps({"value": value}).encode(), {}
        self.rich_posts += 1
        fault = self.take_blind_fault()
        version = self.mode["validationTokenVersion"]
        if version == "alternate":
            version = "1.0" if self.rich_posts % 2 else "2.0"
        if fault == "tampered-data":
            value = [tampered(i) if "encryptedContent" in i else i for i in value]
        pairs = []
        for s, _ in rich:
            if (s.app_id, s.tenant) not in pairs:
                pairs.append((s.app_id, s.tenant))
        body = {"value": value}
        if fault == "null-token":
            body["validationTokens"] = [None] * len(pairs)
        elif fault != "missing-token":
            body["validationTokens"] = [self.validation_jwt(app, tenant, version, fault)
                                        for app, tenant in pairs]
            self.stats["validation_tokens_issued"] += len(pairs)
        return json.dumps(body).encode(), {"rich": len(rich), "tokenVersion": version,
                                           "validationTokens": len(pairs), "blindFault": fault}

    def validation_jwt(self, app_id, tenant, version, fault):
        """Caller holds self.lock. A validation token like the identity platform's access
        tokens for Graph Change Tracking, in REAL time (not the simulator clock)."""
        now = int(time.time())
        iat = nbf = now
        exp = now + VALIDATION_TOKEN_LIFETIME
        if fault == "expired":
            exp = now - 600
            iat = nbf = exp - VALIDATION_TOKEN_LIFETIME
        elif fault == "not-yet-valid":
            nbf = now + 600
            exp = nbf + VALIDATION_TOKEN_LIFETIME
        tid = guid() if fault == "wrong-issuer" else tenant.id
        caller = guid() if fault == "wrong-azp" else CHANGE_TRACKING_APP
        aud = guid() if fault == "wrong-audience" else app_id
        sts = f"https://sts.windows.net/{tid}/"
        oid = tenant.change_tracking_oid
        uti = b64url(secrets.token_bytes(16))
        if version == "2.0":
            claims = {"aud": aud, "iss": f"{self.login_base}/{tid}/v2.0", "iat": iat,
                      "nbf": nbf, "exp": exp, "azp": caller, "azpacr": "2", "idp": sts,
                      "oid": oid, "sub": oid, "tid": tid, "uti": uti, "ver": "2.0"}
        else:
            claims = {"aud": aud, "iss": sts, "iat": iat, "nbf": nbf, "exp": exp,
                      "appid": caller, "appidacr": "2", "idp": sts, "oid": oid, "sub": oid,
                      "tid": tid, "uti": uti, "ver": "1.0"}
        key = self.unpublished_key if fault == "unknown-kid" else self.signing_key
        header = {"typ": "JWT", "alg": "RS256", "kid": key.kid, "x5t": key.x5t}
        signing = (b64url(json.dumps(header, separators=(",", ":")).encode()) + "."
                   + b64url(json.dumps(claims, separators=(",", ":")).encode()))
        sig = bytearray(key.private.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256()))
        if fault == "bad-signature":
            sig[len(sig) // 2] ^= 0x01
        return signing + "." + b64url(bytes(sig))

    @staticmethod
    def expiry_text(sub, n):
        form = (n - 1) % 4
        if form == 0:
            return iso7(sub.expires, z=False)
        if form == 1:
            return iso7(sub.expires)
        if form == 2:
            return iso7(sub.expires, offset_minutes=-420)
        return iso7(sub.expires, digits=3)

    def eligible(self, user, now):
        """Caller holds self.lock."""
        return [s for s in self.subscriptions.values()
                if s.user is user and s.alive(now) and "created" in s.norm[3]]

    def plan(self, groups):
        """groups: [(url, [(sub, item)])] of new notifications. Caller holds self.lock.
        -> (deliveries to send now, all deliveries made) after paused/slow/drop rules."""
        now = self.now()
        send, made = [], []
        for url, items in groups:
            ready = []
            for sub, item in items:
                if sub.paused:
                    d = Delivery("notification", sub.notification_url, [(sub, item)], now,
                                 self.generation)
                    sub.backlog.append(d)
                    d.finish(outcome="queued")
                    made.append(d)
                else:
                    ready.append((sub, item))
            if not ready:
                continue
            if self.mode["reorder"]:
                random.shuffle(ready)
            copies = 2 if self.mode["duplicates"] else 1
            state = self.endpoint_state(origin_of(url), now)
            for _ in range(copies):
                d = Delivery("notification", url, list(ready), now, self.generation)
                made.append(d)
                if state == "drop":
                    self.stats["notifications_dropped"] += len(ready)
                    self.health[origin_of(url)]["affected"].update(s for s, _ in ready)
                    self.requests.append({"time": now_ms(), "kind": "dropped",
                                          "subscriptionId": ready[0][0].id,
                                          "reason": "endpoint in drop state"})
                    d.finish(outcome="dropped")
                elif state == "slow":
                    self.schedule(now + STATE_SECONDS, lambda d=d: self.attempt(d))
                    d.finish(outcome="delayed")
                else:
                    send.append(d)
        return send, made

    def endpoint_state(self, origin, now):
        """Caller holds self.lock."""
        h = self.health.setdefault(origin, {"samples": collections.deque(), "state": "ok",
                                            "until": 0.0, "affected": set()})
        if h["state"] != "ok" and now < h["until"]:
            return h["state"]
        h["state"] = "ok"
        while h["samples"] and h["samples"][0][0] <= now - HEALTH_WINDOW:
            h["samples"].popleft()
        samples = [ms for t, ms in h["samples"] if t <= now]
        n = len(samples)
        if n and n >= self.mode["healthMinSamples"]:
            if sum(1 for ms in samples if ms > self.mode["dropMs"]) / n > 0.15:
                h["state"], h["until"] = "drop", now + STATE_SECONDS
                h["affected"] = set()
                self.schedule(h["until"], lambda h=h, g=self.generation: self.end_drop(h, g))
            elif sum(1 for ms in samples if ms > self.mode["slowMs"]) / n > 0.10:
                h["state"], h["until"] = "slow", now + STATE_SECONDS
        return h["state"]

    def end_drop(self, h, generation):
        with self.lock:
            if generation != self.generation:
                return
            affected, h["affected"] = h["affected"], set()
            now = self.now()
            subs = [s for s in affected if s.alive(now)]
        for sub in subs:
            self.lifecycle([sub], "missed")

    def send_group(self, deliveries, jitter=False):
        if not deliveries:
            return

        def run():
            if jitter:
                time.sleep(random.uniform(0, 0.3))
            for d in deliveries:
                self.attempt(d)
        threading.Thread(target=run, daemon=True).start()

    def attempt(self, d):
        with self.lock:
            if d.generation != self.generation or self.stopping.is_set():
                d.finish(outcome="dropped")
                return
            now = self.now()
            if d.kind == "notification":
                keep = []
                for sub, item in d.items:
                    st = sub.status(now)
                    if st == "paused":
                        single = Delivery("notification", sub.notification_url, [(sub, item)],
                                          d.created, d.generation)
                        single.attempt = d.attempt
                        sub.backlog.append(single)
                    elif st == "live":
                        keep.append((sub, item))
                    else:
                        self.stats["notifications_dropped"] += 1
                        self.requests.append({"time": now_ms(), "kind": "dropped",
                                              "subscriptionId": sub.id,
                                              "reason": f"subscription {st}"})
                if not keep:
                    d.finish(outcome="queued" if any(s.status(now) == "paused"
                                                     for s, _ in d.items) else "dropped")
                    return
                d.items = keep
            if now - d.created > RETRY_WINDOW:
                self.drop(d, "retry window of 4 hours passed")
                return
            d.attempt += 1
            if d.kind == "notification":
                body, rich_info = self.notification_body(d.items)
            else:
                body, rich_info = json.dumps({"value": [item for _, item in d.items]}).encode(), {}
        timeout = FIRST_TIMEOUT if d.attempt == 1 else RETRY_TIMEOUT
        status, rtype, data, elapsed, error = self.post(d.url, body, NOTIFY_CT, timeout)
        ok = error is None and 200 <= status < 300
        sub_id = d.items[0][0].id
        log(f"deliver {d.kind} {sub_id[:8]} attempt {d.attempt} {status or error} {elapsed}ms")
        with self.lock:
            if d.generation != self.generation:
                d.finish(outcome="dropped")
                return
            now = self.now()
            self.requests.append({"time": now_ms(), "kind": d.kind, "subscriptionId": sub_id,
                                  "subscriptionIds": [s.id for s, _ in d.items],
                                  "attempt": d.attempt, "status": status, "elapsedMs": elapsed,
                                  "error": error, "items": len(d.items),
                                  "events": [i.get("lifecycleEvent") for _, i in d.items]
                                  if d.kind == "lifecycle" else None, **rich_info})
            if d.kind == "notification":
                self.health.setdefault(origin_of(d.url), {
                    "samples": collections.deque(), "state": "ok", "until": 0.0,
                    "affected": set()})["samples"].append((now, elapsed))
            if status is not None and 400 <= status < 500:
                self.violations.append(f"{d.kind} answered 4xx")
            if ok:
                if d.kind == "notification":
                    self.stats["notifications_delivered"] += len(d.items)
                    self.stats["notification_posts_delivered"] += 1
                    if d.attempt == 1:
                        self.first_ms.append(elapsed)
                    self.delivered_cond.notify_all()
                else:
                    self.stats["lifecycle_delivered"] += len(d.items)
                    if status != 202:
                        self.violations.append(f"lifecycle answered {status}, expected 202")
            else:
                key = "notifications_failed_attempts" if d.kind == "notification" \
                    else "lifecycle_failed_attempts"
                self.stats[key] += 1
                due = now + (2 ** d.attempt) * self.retry_scale
                if due - d.created > RETRY_WINDOW:
                    self.drop(d, "retry window of 4 hours passed")
                else:
                    self.schedule(due, lambda: self.attempt(d))
            d.finish(status=status, elapsedMs=elapsed, attempt=d.attempt,
                     outcome="delivered" if ok else "failed",
                     **({"error": error} if error else {}))

    def drop(self, d, reason):
        """Caller holds self.lock."""
        if d.kind == "notification":
            self.stats["notifications_dropped"] += len(d.items)
        self.requests.append({"time": now_ms(), "kind": "dropped", "subscriptionId":
                              d.items[0][0].id, "reason": reason, "deliveryKind": d.kind})
        d.finish(outcome="dropped")

    def lifecycle(self, subs, event):
        """Makes the event for each subscription, applies its effect, sends it.
        -> [(Delivery or None, sub)] (None: undeliverable)."""
        with self.lock:
            now = self.now()
            groups, out = {}, []
            for sub in subs:
                item = {"subscriptionId": sub.id,
                        "subscriptionExpirationDateTime": self.expiry_text(sub, self.next_counter()),
                        "tenantId": sub.tenant.id}
                if sub.client_state is not None:
                    item["clientState"] = sub.client_state
                item["lifecycleEvent"] = event
                if event == "reauthorizationRequired":
                    grace = self.mode["reauthorizeGraceSeconds"]
                    if not grace:
                        sub.paused = True
                    elif sub.grace is None and not sub.paused:
                        self.grace_seq += 1
                        sub.grace = self.grace_seq
                        timer = threading.Timer(grace, self.grace_ended,
                                                (sub, sub.grace, self.generation))
                        timer.daemon = True
                        timer.start()
                        self.requests.append({"time": now_ms(), "kind": "reauthorizeGrace",
                                              "subscriptionId": sub.id, "outcome": "started",
                                              "graceSeconds": grace})
                elif event == "subscriptionRemoved":
                    sub.state = "removed"
                    self.stats["notifications_dropped"] += len(sub.backlog)
                    sub.backlog = []
                if sub.lifecycle_url is None:
                    self.stats["lifecycle_undeliverable"] += 1
                    self.requests.append({"time": now_ms(), "kind": "lifecycle",
                                          "subscriptionId": sub.id, "event": event,
                                          "outcome": "undeliverable"})
                    out.append((None, sub))
                    continue
                groups.setdefault(sub.lifecycle_url, []).append((sub, item))
            deliveries = []
            for url, items in groups.items():
                d = Delivery("lifecycle", url, items, now, self.generation)
                deliveries.append(d)
                out += [(d, s) for s, _ in items]
        self.send_group(deliveries)
        return out

    # == control operations ================================================================
    def control_user(self, req):
        tenant = self.tenants.get(str(req.get("tenant", "")).lower())
        if tenant is None:
            raise ValueError("'tenant' must be a configured tenant id")
        mail = req.get("mail")
        if not isinstance(mail, str) or "@" not in mail:
            raise ValueError("'mail' must be an address")
        uid = req.get("id") or guid()
        if not isinstance(uid, str) or not GUID_RE.fullmatch(uid):
            raise ValueError("'id' must be a GUID")
        display = req.get("displayName") or mail.split("@")[0]
        with self.lock:
            if mail.lower() in self.by_mail or uid.lower() in self.users:
                raise ValueError("a user with that mail or id exists")
            user = User(tenant, mail.lower(), uid.lower(), str(display))
            self.users[user.id] = user
            self.by_mail[user.mail] = user
        return {"id": user.id, "mail": user.mail, "tenant": tenant.id}

    def user_of(self, req):
        with self.lock:
            user = self.by_mail.get(str(req.get("mail", "")).lower())
        if user is None:
            raise LookupError("no such user")
        return user

    def control_user_token(self, req):
        user = self.user_of(req)
        life = req.get("lifetimeSeconds", 3600)
        if not is_int(life) or life <= 0:
            raise ValueError("'lifetimeSeconds' must be a positive integer")
        app = req.get("clientId") or DEFAULT_DELEGATED_APP
        token = opaque_token(780)
        with self.lock:
            self.tokens[token] = Token("user", user.tenant, user, str(app).lower(),
                                       self.now() + life)
        return {"access_token": token, "expires_in": life}

    def control_revoke(self, req):
        with self.lock:
            if "tenant" in req and "mail" not in req:
                tenant = self.tenants.get(str(req["tenant"]).lower())
                if tenant is None:
                    raise LookupError("no such tenant")
                match = [t for t in self.tokens.values() if t.kind == "app" and t.tenant is tenant]
            else:
                user = self.user_of(req)
                match = [t for t in self.tokens.values() if t.user is user]
            for t in match:
                t.revoked = True
        return {"revoked": len(match)}

    def control_scope(self, req):
        tenant = self.tenants.get(str(req.get("tenant", "")).lower())
        if tenant is None:
            raise ValueError("'tenant' must be a configured tenant id")
        mails = req.get("mails")
        if mails is not None and (not isinstance(mails, list)
                                  or not all(isinstance(m, str) for m in mails)):
            raise ValueError("'mails' must be a list of addresses or null")
        with self.lock:
            tenant.scope = None if mails is None else {m.lower() for m in mails}
        return {"ok": True}

    def control_newmail(self, req, batch=False):
        if batch:
            items = req.get("items")
            if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
                raise ValueError("'items' must be a non-empty list of objects")
        else:
            count = req.get("count", 1)
            if not is_int(count) or not 1 <= count <= 1000:
                raise ValueError("'count' must be 1..1000")
            items = [req] * count
        users = [self.user_of(i) for i in items]
        with self.lock:
            now = self.now()
            ids, notes = [], []
            for user, i in zip(users, items):
                msg = self.new_message(user, str(i.get("subject", "Hello")),
                                       str(i.get("fromName", "Sender")),
                                       str(i.get("fromAddress", "sender@example.test")),
                                       str(i.get("bodyPreview", "Message body preview.")))
                ids.append(msg.id)
                for sub in self.eligible(user, now):
                    notes.append((sub, self.notification_item(sub, msg)))
            if batch:
                groups = [(notes[0][0].notification_url, notes)] if notes else []
            else:
                groups = [(s.notification_url, [(s, item)]) for s, item in notes]
            if req.get("deliver", True) is False:
                # For a load generator: the POSTs Graph would send, not sent.
                return {"messageIds": ids,
                        "notifications": [{"url": url,
                                           "body": self.notification_body(group)[0].decode()}
                                          for url, group in groups]}
            send, made = self.plan(groups)
            reorder = self.mode["reorder"]
            if reorder:
                random.shuffle(send)
        self.send_group(send, jitter=reorder)
        return self.answer(req, made, {"messageIds": ids})

    @staticmethod
    def answer(req, made, out):
        wait = req.get("wait", True) is not False
        results = []
        deadline = time.monotonic() + 30 + FIRST_TIMEOUT * len(made)
        for d in made:
            if wait:
                d.done.wait(max(0.0, deadline - time.monotonic()))
            results.append(d.result or {"subscriptionId": d.items[0][0].id if d.items else None,
                                        "attempt": 0, "status": None, "elapsedMs": None,
                                        "outcome": "pending"})
        out["deliveries"] = results
        return out

    def control_lifecycle(self, req):
        event = req.get("event")
        if event not in LIFECYCLE_EVENTS:
            raise ValueError(f"'event' must be one of {sorted(LIFECYCLE_EVENTS)}")
        with self.lock:
            now = self.now()
            if req.get("subscriptionId") is not None:
                sub = self.subscriptions.get(str(req["subscriptionId"]).lower())
                if sub is None or not sub.alive(now):
                    raise LookupError("no such alive subscription")
                subs = [sub]
            else:
                user = self.user_of(req)
                subs = [s for s in self.subscriptions.values() if s.user is user and s.alive(now)]
        pairs = self.lifecycle(subs, event)
        wait = req.get("wait", True) is not False
        results = []
        for d, sub in pairs:
            if d is None:
                results.append({"subscriptionId": sub.id, "outcome": "undeliverable"})
                continue
            if wait:
                d.done.wait(30)
            results.append(dict(d.result or {"subscriptionId": sub.id, "outcome": "pending"},
                                subscriptionId=sub.id))
        return {"deliveries": results}

    def control_post_raw(self, req):
        with self.lock:
            sub = self.subscriptions.get(str(req.get("subscriptionId", "")).lower())
            if sub is None:
                raise LookupError("no such subscription")
            url = sub.lifecycle_url if req.get("lifecycle") else sub.notification_url
        if url is None:
            raise ValueError("that subscription has no lifecycle URL")
        body = req.get("body")
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        ctype = req.get("contentType") or NOTIFY_CT

        def run():
            status, rtype, out, elapsed, error = self.post(url, data, ctype, RAW_TIMEOUT)
            log(f"deliver raw {sub.id[:8]} attempt 1 {status or error} {elapsed}ms")
            self.record({"time": now_ms(), "kind": "raw", "subscriptionId": sub.id,
                         "attempt": 1, "status": status, "elapsedMs": elapsed, "error": error})
            result = {"status": status, "contentType": rtype,
                      "body": out.decode("utf-8", "replace"), "elapsedMs": elapsed}
            if error:
                result["error"] = error
            return result
        if req.get("wait", True) is False:
            threading.Thread(target=run, daemon=True).start()
            return {"ok": True}
        return run()

    def control_delete_message(self, req):
        user = self.user_of(req)
        with self.lock:
            msg = user.messages.get(str(req.get("messageId", "")))
            if msg is None:
                raise LookupError("no such message")
            msg.deleted = True
        return {"ok": True}

    def control_fail(self, req):
        op = req.get("operation")
        if op not in FAIL_OPERATIONS:
            raise ValueError(f"'operation' must be one of {sorted(FAIL_OPERATIONS)}")
        status = req.get("status")
        if status is not None and (not is_int(status) or not 400 <= status <= 599):
            raise ValueError("'status' must be 400..599")
        for name in ("retryAfter", "delayMs", "count"):
            v = req.get(name)
            if v is not None and (not is_int(v) or v < 0):
                raise ValueError(f"'{name}' must be a non-negative integer")
        for name in ("code", "message"):
            if req.get(name) is not None and not isinstance(req[name], str):
                raise ValueError(f"'{name}' must be a string")
        mail = req.get("mail")
        if mail is not None and (not isinstance(mail, str) or op == "token"):
            raise ValueError("'mail' must be a string, and names no mailbox for 'token'")
        # Scoped to one mailbox, a failure cannot be taken by another test's mailbox
        # (suites run side by side against one simulator).
        self.failures.inject(op if mail is None else (op, mail.lower()),
                             {"status": status, "code": req.get("code"),
                              "message": req.get("message"), "retryAfter": req.get("retryAfter"),
                              "delayMs": req.get("delayMs")}, req.get("count"))
        return {"ok": True}

    def control_hold(self, req):
        user = self.user_of(req)
        ms = req.get("ms", 0)
        if not is_int(ms) or ms < 0:
            raise ValueError("'ms' must be a non-negative integer")
        with self.lock:
            if ms:
                self.holds[user.mail] = ms
            else:
                self.holds.pop(user.mail, None)
        return {"ok": True}

    def control_mode(self, req):
        kinds = {"duplicates": bool, "reorder": bool, "validateOnPatch": bool,
                 "validateOnReauthorize": bool, "resourceStyle": str, "validationDelayMs": int,
                 "validationDropNext": int, "validationTimeoutMs": int, "healthMinSamples": int,
                 "slowMs": int, "dropMs": int, "validationTokenVersion": str,
                 "blindFault": str, "blindFaultCount": int, "reauthorizeGraceSeconds": float}
        for k, v in req.items():
            want = kinds.get(k)
            if want is None:
                raise ValueError(f"unknown mode {k!r}")
            if k == "blindFaultCount" and v is None:
                continue  # until changed
            if want is float:
                if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= 86400:
                    raise ValueError(f"bad value for {k!r}")
            elif (want is int and (not is_int(v) or v < 0)) \
                    or (want is not int and not isinstance(v, want)):
                raise ValueError(f"bad value for {k!r}")
            if k == "resourceStyle" and v not in ("path", "odata", "alternate"):
                raise ValueError("'resourceStyle' must be path, odata or alternate")
            if k == "validationTimeoutMs" and v == 0:
                raise ValueError("'validationTimeoutMs' must be positive")
            if k == "validationTokenVersion" and v not in ("1.0", "2.0", "alternate"):
                raise ValueError("'validationTokenVersion' must be 1.0, 2.0 or alternate")
            if k == "blindFault" and v not in BLIND_FAULTS:
                raise ValueError(f"'blindFault' must be one of {sorted(BLIND_FAULTS)}")
            if k == "blindFaultCount" and v == 0:
                raise ValueError("'blindFaultCount' must be positive")
        with self.lock:
            self.mode.update(req)
            if "blindFault" in req and "blindFaultCount" not in req:
                self.mode["blindFaultCount"] = None  # until changed
            if self.mode["blindFault"] == "none":
                self.mode["blindFaultCount"] = None
            return dict(self.mode)

    def control_rotate(self, req):
        keep = req.get("keepOld", False)
        if not isinstance(keep, bool):
            raise ValueError("'keepOld' must be a boolean")
        key = SigningKey()
        with self.lock:
            self.published_keys = [key] + (self.published_keys if keep else [])
            self.signing_key = key
            return self.control_signing_keys()

    def control_signing_keys(self):
        with self.lock:
            return {"kid": self.signing_key.kid,
                    "published": [k.kid for k in self.published_keys]}

    # == identity platform metadata (HTTPS) ================================================
    def identity(self, h, path, rec):
        openid = OPENID_PATHS.get(path)
        version = openid or JWKS_PATHS[path]
        rec["kind"], rec["path"] = "identity", path
        rec["operation"] = "openid-configuration" if openid else "jwks"
        if h.command != "GET":
            raise GraphError(405, "MethodNotAllowed", f"The HTTP method '{h.command}' is not "
                             "allowed.", [("Allow", "GET")])
        lb = self.login_base
        with self.lock:
            if openid:
                self.stats["openid_config_fetches"] += 1
                v2 = "/v2.0" if version == "2.0" else ""
                out = {"token_endpoint": f"{lb}/common/oauth2{v2}/token",
                       "token_endpoint_auth_methods_supported": [
                           "client_secret_post", "private_key_jwt", "client_secret_basic"],
                       "jwks_uri": f"{lb}/common/discovery{v2}/keys",
                       "response_modes_supported": ["query", "fragment", "form_post"],
                       "subject_types_supported": ["pairwise"],
                       "id_token_signing_alg_values_supported": ["RS256"],
                       "response_types_supported": ["code", "id_token", "code id_token",
                                                    "id_token token"],
                       "scopes_supported": ["openid", "profile", "email", "offline_access"],
                       "issuer": (f"{lb}/{{tenantid}}/v2.0" if v2
                                  else "https://sts.windows.net/{tenantid}/"),
                       "request_uri_parameter_supported": False,
                       "authorization_endpoint": f"{lb}/common/oauth2{v2}/authorize",
                       "end_session_endpoint": f"{lb}/common/oauth2{v2}/logout",
                       "http_logout_supported": True, "frontchannel_logout_supported": True,
                       "tenant_region_scope": None, "cloud_instance_name": "microsoftonline.com",
                       "cloud_graph_host_name": "graph.windows.net",
                       "msgraph_host": "graph.microsoft.com", "rbac_url": "https://pas.windows.net"}
            else:
                self.stats["jwks_fetches"] += 1
                keys = [k.jwk() for k in self.published_keys]
                if version == "2.0":
                    for k in keys:
                        k["issuer"] = f"{lb}/{{tenantid}}/v2.0"
                out = {"keys": keys}
        return 200, json.dumps(out).encode(), IDENTITY_CT, [("Cache-Control",
                                                              "max-age=86400, private")]

    def control_clock(self, req):
        s = req.get("advanceSeconds")
        if not isinstance(s, (int, float)) or isinstance(s, bool) or s < 0:
            raise ValueError("'advanceSeconds' must be a non-negative number")
        self.advance(float(s))
        return {"offsetSeconds": self.offset, "now": iso7(self.now())}

    def control_wait(self, req):
        n = req.get("delivered")
        timeout = req.get("timeoutSeconds", 30)
        if not is_int(n) or not isinstance(timeout, (int, float)):
            raise ValueError("want {delivered: n, timeoutSeconds?: s}")
        deadline = time.monotonic() + timeout
        with self.lock:
            while self.stats["notifications_delivered"] < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.delivered_cond.wait(min(left, 0.5))
        return True

    def control_subscriptions(self):
        now = self.now()
        with self.lock:
            return [{"id": s.id, "tenant": s.tenant.id, "userId": s.user.id, "mail": s.user.mail,
                     "resource": s.resource, "changeType": s.change_type,
                     "expirationDateTime": iso7(s.expires), "hasLifecycleUrl": s.lifecycle_url
                     is not None, "immutableIds": s.immutable, "state": s.status(now),
                     "creatorKind": s.creator_kind,
                     "clientStateLength": None if s.client_state is None else len(s.client_state),
                     "renewals": s.renewals, "reauthorizations": s.reauthorizations,
                     "backlog": len(s.backlog), "includeResourceData": s.rich,
                     "encryptionCertificateId": s.cert_id if s.rich else None,
                     "encryptionCertificateThumbprint": s.cert_thumb,
                     "reauthorizeGracePending": s.grace is not None}
                    for s in self.subscriptions.values()]

    def control_stats(self):
        with self.lock:
            out = {}
            for k, v in self.stats.items():
                out[k] = dict(v) if isinstance(v, collections.Counter) else v
            out["first_attempt_ms"] = {"p50": percentile(self.first_ms, 50),
                                       "p99": percentile(self.first_ms, 99),
                                       "count": len(self.first_ms)}
            out["now"] = iso7(self.now())
            out["clockOffsetSeconds"] = self.offset
            return out


def default_code(status):
    return {400: "BadRequest", 401: "InvalidAuthenticationToken", 403: "ErrorAccessDenied",
            404: "ResourceNotFound", 409: "Conflict", 429: "TooManyRequests",
            500: "InternalServerError", 502: "BadGateway", 503: "ServiceUnavailable",
            504: "GatewayTimeout"}.get(status, "UnknownError")


def default_message(status):
    return {429: "Too many requests, please try again later.",
            503: "The service is currently unavailable.",
            504: "The operation timed out."}.get(status, "An injected error occurred.")


def wants_immutable_ids(headers):
    for value in headers.get_all("Prefer") or []:
        for pref in value.split(","):
            name, _, val = pref.strip().partition("=")
            if name.strip().lower() == "idtype" and val.strip().strip('"').lower() == "immutableid":
                return True
    return False


def rich_select(select):
    """A rich subscription's $select as message property names (canonical case, no
    duplicates, without id, unknown names skipped)."""
    canon = {p.lower(): p for p in MESSAGE_PROPS}
    out = []
    for item in select or ():
        p = canon.get(item.lower())
        if p and p != "id" and p not in out:
            out.append(p)
    return out


def encrypt_content(sub, plaintext):
    """Graph's encryptedContent for one item: a fresh AES-256 key; data AES-CBC with
    IV = key[:16] and PKCS7; dataSignature HMAC-SHA256(key, data); dataKey RSA-OAEP
    (SHA-1, MGF1-SHA-1) of the key to the subscription's certificate."""
    key = secrets.token_bytes(32)
    padder = sym_padding.PKCS7(128).padder()
    padded = padder.update(plaintext) + padder.finalize()
    enc = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    data = enc.update(padded) + enc.finalize()
    wrapped = sub.cert_key.encrypt(key, padding.OAEP(mgf=padding.MGF1(hashes.SHA1()),
                                                     algorithm=hashes.SHA1(), label=None))
    signature = hmac.new(key, data, hashlib.sha256).digest()
    return {"data": base64.b64encode(data).decode(),
            "dataSignature": base64.b64encode(signature).decode(),
            "dataKey": base64.b64encode(wrapped).decode(),
            "encryptionCertificateId": sub.cert_id,
            "encryptionCertificateThumbprint": sub.cert_thumb}


def tampered(item):
    """A copy of a rich item with one byte of data changed (dataSignature kept)."""
    content = dict(item["encryptedContent"])
    raw = bytearray(base64.b64decode(content["data"]))
    raw[len(raw) // 2] ^= 0x01
    content["data"] = base64.b64encode(bytes(raw)).decode()
    return dict(item, encryptedContent=content)


def valid_encryption_cert(text):
    try:
        cert = x509.load_der_x509_certificate(base64.b64decode(text, validate=True))
        key = cert.public_key()
    except (ValueError, TypeError):
        return False
    return isinstance(key, rsa.RSAPublicKey) and 2048 <= key.key_size <= 4096


def parse_resource(resource):
    """-> {"me", "ref", "folder" (inbox|all), "select", "query"} or None if unsupported."""
    if not isinstance(resource, str) or not resource:
        return None
    path, _, query = resource.partition("?")
    if path.startswith("/"):
        path = path[1:]
    try:
        segs = split_segments(path)
    except UnicodeDecodeError:
        return None
    if not segs:
        return None
    names = [s.lower() for s in segs]
    if names[0] == "me":
        me, ref, tail = True, None, names[1:]
    elif names[0] == "users" and len(segs) >= 2:
        me, ref, tail = False, segs[1], names[2:]
    else:
        return None
    if tail == ["messages"]:
        folder = "all"
    elif tail == ["mailfolders", "inbox", "messages"]:
        folder = "inbox"
    else:
        return None
    select = None
    if query:
        try:
            pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True, errors="strict")
        except (ValueError, UnicodeDecodeError):
            return None
        seen = set()
        for name, value in pairs:
            if name not in ("$select", "$filter") or name in seen:
                return None
            seen.add(name)
            if name == "$select":
                select = [p.strip() for p in value.split(",") if p.strip()]
    return {"me": me, "ref": ref, "folder": folder, "select": select, "query": query}


LOG_LOCK = threading.Lock()


def log(text):
    # One write per line under a lock: print() writes the text and the newline
    # separately, so two threads' lines could interleave in the log.
    with LOG_LOCK:
        sys.stderr.write(f"graph_simulator: {text}\n")
        sys.stderr.flush()


# -- servers -------------------------------------------------------------------------------
TOKEN_PATH_RE = re.compile(r"/([^/]+)/oauth2/v2\.0/token")
BODY_ERRORS = {411: ("LengthRequired", "Content-Length is required."),
               400: ("BadRequest", "Bad Content-Length."),
               413: ("RequestEntityTooLarge", "The request is too large.")}


def make_handler(sim):
    class Handler(https.RequestHandler):

        def dispatch(self):
            path, _, query = self.path.partition("?")
            rec = {"time": now_ms(), "kind": "api", "method": self.command, "path": None,
                   "operation": None, "status": None, "mail": None, "tenant": None,
                   "tokenKind": None, "select": None, "beforeRetryAfter": False}
            headers = []
            try:
                try:
                    body = https.read_body(self, MAX_BODY)
                except https.BodyError as e:
                    raise GraphError(e.status, *BODY_ERRORS[e.status])
                m = TOKEN_PATH_RE.fullmatch(path)
                if path in OPENID_PATHS or path in JWKS_PATHS:
                    status, out, ctype, headers = sim.identity(self, path, rec)
                elif m:
                    rec["kind"], rec["path"] = "token", "/{tenant}/oauth2/v2.0/token"
                    status, out, ctype, headers = sim.token_endpoint(self, unquote(m[1]), body, rec)
                elif path == "/v1.0" or path.startswith("/v1.0/"):
                    rec["path"] = "/v1.0/{x}"
                    status, out, ctype, headers = sim.graph(self, path, query, body, rec)
                else:
                    rec["path"] = "/{x}"
                    raise GraphError(404, "NotFound", "The requested URL was not found.")
            except GraphError as e:
                status = e.status
                out = json.dumps({"error": {"code": e.code, "message": e.message}}).encode()
                ctype, headers = ERROR_CT, list(e.headers)
            except Exception as e:  # a simulator bug: answer 500 and say so (no data logged)
                tb = e.__traceback__
                while tb.tb_next is not None:
                    tb = tb.tb_next
                log(f"internal error: {type(e).__name__} at line {tb.tb_lineno}")
                status, out, ctype, headers = 500, b"", None, []
            rec["status"] = status
            sim.record(rec)
            log(f"{self.command} {rec['path']} {status}")
            https.send_answer(self, status, ctype, headers, out)

    return Handler


def control_handler(sim):
    def users():
        return [{"id": u.id, "mail": u.mail, "tenant": u.tenant.id,
                 "messages": sum(1 for m in u.messages.values() if not m.deleted),
                 "unread": sum(1 for m in u.messages.values() if not m.deleted and not m.is_read)}
                for u in sim.users.values()]

    def reset(req):
        sim.reset()
        return {"ok": True}

    def wait(req):
        if sim.control_wait(req):
            return sim.control_stats()
        return control.Answer(408, {"error": "timed out", "stats": sim.control_stats()})

    def records():
        return {"requests": list(sim.requests), "violations": list(sim.violations)}

    gets = {"/requests": control.locked(sim.lock, records),
            "/violations": control.locked(sim.lock, lambda: list(sim.violations)),
            "/subscriptions": sim.control_subscriptions, "/stats": sim.control_stats,
            "/signing-keys": sim.control_signing_keys,
            "/users": control.locked(sim.lock, users)}
    posts = {"/users": sim.control_user, "/user-token": sim.control_user_token,
             "/revoke": sim.control_revoke, "/scope": sim.control_scope,
             "/newmail": sim.control_newmail,
             "/newmail-batch": lambda r: sim.control_newmail(r, batch=True),
             "/post-raw": sim.control_post_raw, "/lifecycle": sim.control_lifecycle,
             "/delete-message": sim.control_delete_message, "/fail": sim.control_fail,
             "/hold": sim.control_hold, "/mode": sim.control_mode,
             "/clock": sim.control_clock, "/reset": reset, "/wait": wait,
             "/signing-keys/rotate": sim.control_rotate}

    class Handler(control.ControlHandler):
        max_body = MAX_BODY

        def do_GET(self):
            self.get_json(gets)

        def do_POST(self):
            self.post_json(posts)

    return Handler


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--control-port", type=int, required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--callback-ca", required=True)
    p.add_argument("--login-base", required=True)
    p.add_argument("--tenant", action="append", required=True)
    p.add_argument("--client-id", action="append", required=True)
    p.add_argument("--client-cert", action="append", required=True)
    p.add_argument("--retry-scale", type=float, default=1.0)
    p.add_argument("--max-lifetime-minutes", type=int, default=4230)
    p.add_argument("--ready-file")
    args = p.parse_args()
    if args.retry_scale <= 0 or args.max_lifetime_minutes < FLOOR_MINUTES:
        p.error("--retry-scale must be > 0 and --max-lifetime-minutes at least 45")
    sim = Simulator(args)

    tls = certs.server_context(args.cert, args.key, "http/1.1")
    process.serve_in_threads([https.TLSServer(("127.0.0.1", args.port), make_handler(sim), tls),
                              control.control_server(args.control_port, control_handler(sim))])
    try:
        with process.running(args.ready_file):
            process.wait_for_signal()
    finally:
        sim.stopping.set()

if __name__ == "__main__":
    main()
