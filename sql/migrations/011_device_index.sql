-- ENS schema, version 11: Devices loses ix_device_token (token_hash alone).
--
-- Every lookup of a device by its token hash also names its record
-- (`subscription_row = ? AND token_hash = ?`), which uq_device_token serves; nothing
-- searched token_hash alone. The index cost every insert, token change and delete a
-- fourth secondary-index write: `ens-cron reap` of 1,000,000 stale devices (B5) spent
-- the difference in it. Idempotent, like every migration.
ALTER TABLE Devices DROP INDEX IF EXISTS ix_device_token;
