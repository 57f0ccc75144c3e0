-- ENS schema, version 13: devices are bound to the mail server they proved themselves
-- at (docs/security.md, "Whose Exchange a device trusts").
--
-- Until now a record had one subscription and every device of the record heard every
-- callback of it, wherever it came from. Someone holding the app's ApiToken could
-- register a victim's unregistered (or lapsed) address at an EWS of their own, and the
-- owner's devices, joining later, were then asked to prove themselves there: their
-- credentials went to that server and its callbacks reached their phones.
--
--   EnsSubscriptionInfo.endpoint  the live subscription's server: for EWS its origin,
--                                 "https://host:port" (lower case, port explicit),
--                                 for Graph "graph:" and the tenant id
--   Devices.endpoint              the server this device proved its credentials at;
--                                 a callback notifies only the devices whose endpoint
--                                 is the live subscription's
--
-- Existing devices and subscriptions are bound to the server the record subscribes at
-- now: the same origin rules as the code's (URLParts.origin), written in SQL once.
ALTER TABLE EnsSubscriptionInfo ADD COLUMN IF NOT EXISTS endpoint VARCHAR(300) NULL;
ALTER TABLE Devices ADD COLUMN IF NOT EXISTS endpoint VARCHAR(300) NULL;

UPDATE EnsSubscriptionInfo
SET endpoint = CONCAT(
    SUBSTRING_INDEX(LOWER(backend_url), '://', 1), '://',
    SUBSTRING_INDEX(SUBSTRING_INDEX(SUBSTRING_INDEX(SUBSTRING_INDEX(LOWER(backend_url), '/', 3), '://', -1), '@', -1), '?', 1),
    IF(SUBSTRING_INDEX(SUBSTRING_INDEX(SUBSTRING_INDEX(SUBSTRING_INDEX(LOWER(backend_url), '/', 3), '://', -1), '@', -1), '?', 1)
         REGEXP ':[0-9]+$', '',
       IF(LOWER(backend_url) LIKE 'https://%', ':443', ':80')))
WHERE endpoint IS NULL AND mail_backend = 'ews' AND backend_url LIKE '%://%';

UPDATE EnsSubscriptionInfo SET endpoint = CONCAT('graph:', backend_tenant)
WHERE endpoint IS NULL AND mail_backend = 'graph' AND backend_tenant IS NOT NULL;

UPDATE Devices d JOIN EnsSubscriptionInfo s ON s.id = d.subscription_row
SET d.endpoint = s.endpoint
WHERE d.endpoint IS NULL;
