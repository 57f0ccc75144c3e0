-- ENS schema, version 7: private notifications (docs/privacy.md).
--
-- Devices gain their privacy mode and, for `encrypted`, the P-256 public key the
-- previews are sealed to (65 bytes, uncompressed point; a public key, not a secret):
--   privacy_mode  0 preview, 1 generic, 2 encrypted, 3 secure (PrivacyMode.swift); the
--                 operator's privacy.minimum_mode raises it when pushes are made
--   preview_key   the device's key for `encrypted`; NULL otherwise
--
-- NotificationLog holds one row per notification made for a device:
--   id                  the notification id (the push's ens.id and collapse id)
--   created_at          the server's time in the push (ens.ts): a check-in compares its
--                       lastNotificationTs with the device's newest row, not with the
--                       device's clock
--   summary_sealed      sender and subject for the device's history, sealed under the
--                       master key bound to the row; NULL when history is off
--   content_sealed      what a `secure` device fetches (sender, subject, badge, sync
--                       key), sealed the same way; erased by its first fetch
--   content_expires_at  when unfetched content is erased (privacy.fetch_ttl_seconds)
--   read_at             set by the device (/marknotificationsread)
-- Rows go with their device (ON DELETE CASCADE: unregister, eviction, the reaper's
-- stale devices, a deleted record), and `ens-cron reap` erases content past its expiry
-- and rows past history.retention_hours or beyond history.count per device.
-- Idempotent (IF NOT EXISTS), like every migration; older binaries ignore the new
-- columns (their defaults are today's behaviour) and the new table.
ALTER TABLE Devices
  ADD COLUMN IF NOT EXISTS privacy_mode TINYINT UNSIGNED NOT NULL DEFAULT 0 AFTER development,
  ADD COLUMN IF NOT EXISTS preview_key VARBINARY(65) NULL AFTER privacy_mode;

CREATE TABLE IF NOT EXISTS NotificationLog (
  id BINARY(16) NOT NULL PRIMARY KEY,
  device_id BIGINT UNSIGNED NOT NULL,
  created_at DATETIME(3) NOT NULL,
  summary_sealed VARBINARY(2048) NULL,
  content_sealed VARBINARY(8192) NULL,
  content_expires_at DATETIME(3) NULL,
  read_at DATETIME(3) NULL,
  KEY ix_log_device (device_id, created_at),
  KEY ix_log_created (created_at),
  KEY ix_log_content_expiry (content_expires_at),
  CONSTRAINT fk_log_device FOREIGN KEY (device_id) REFERENCES Devices (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
