-- ENS schema, version 3: the EWS schema version (RequestServerVersion) a subscription
-- was made with, so callbacks speak to the server in the version it accepted.
-- Idempotent (ADD COLUMN IF NOT EXISTS), like every migration.
ALTER TABLE EnsSubscriptionInfo ADD COLUMN IF NOT EXISTS ews_version VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL AFTER ews_watermark;
