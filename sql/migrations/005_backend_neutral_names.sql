-- ENS schema, version 5: a record's subscription in words every mail backend shares.
--
-- Until now the only backend was Exchange Web Services, and the subscription columns
-- were named after it. A record now says which backend serves it (mail_backend: 'ews'
-- for every existing row), and what any backend's push subscription has is named
-- neutrally:
--   ews_url                  -> backend_url         where the backend is reached for this
--                                                   mailbox (the EWS URL)
--   ews_subscription_id      -> subscription_id
--   ews_watermark            -> watermark           where the backend would resume from
--   ews_version              -> backend_version     the protocol version the server took
--   status_frequency_minutes -> heartbeat_minutes   how often the backend promised a sign
--                                                   of life (EWS: StatusFrequency)
-- What stays EWS's own keeps its name: EWSUrlCache (Autodiscover's answers) and
-- Devices.ews_device_id (the id a Secure Email Gateway knows the device by).
--
-- Renames keep every value. Upgrade order (README, "Upgrading"): stop the responders
-- and the cron job, run `ens-cron migrate`, start the new binaries; binaries older than
-- this schema cannot read it.
-- Idempotent (IF EXISTS / IF NOT EXISTS), like every migration.
ALTER TABLE EnsSubscriptionInfo
  ADD COLUMN IF NOT EXISTS mail_backend VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'ews' AFTER generation,
  RENAME COLUMN IF EXISTS ews_url TO backend_url,
  RENAME COLUMN IF EXISTS ews_subscription_id TO subscription_id,
  RENAME COLUMN IF EXISTS ews_watermark TO watermark,
  RENAME COLUMN IF EXISTS ews_version TO backend_version,
  RENAME COLUMN IF EXISTS status_frequency_minutes TO heartbeat_minutes;
