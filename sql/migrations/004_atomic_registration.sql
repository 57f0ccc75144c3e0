-- ENS schema, version 4: registration that never breaks a working subscription, caps
-- per record, and a per-token quota on new records.
--
-- A (re)registration no longer advances `generation` before Exchange has answered.
-- It takes a *pending* generation (pending_generation, one higher than any handed out
-- so far) for its callback URL, and only a successful Subscribe makes it the live
-- generation, and only if no later registration already won. A failed attempt leaves
-- generation, registered and the subscription columns as they were.
-- proof_failures counts failed proofs of possession (credentials Exchange refused, or
-- an EWS endpoint that is not the mailbox's) in a window, to throttle guessing.
-- notify_count counts the pushes a record's callbacks made in the current minute, for
-- exchange.max_notifications_per_minute.
-- Idempotent (ADD COLUMN IF NOT EXISTS), like every migration.
ALTER TABLE EnsSubscriptionInfo
  ADD COLUMN IF NOT EXISTS pending_generation INT UNSIGNED NOT NULL DEFAULT 0 AFTER generation,
  ADD COLUMN IF NOT EXISTS pending_started_at DATETIME(3) NULL AFTER pending_generation,
  ADD COLUMN IF NOT EXISTS proof_failures INT UNSIGNED NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS proof_window_started_at DATETIME(3) NULL,
  ADD COLUMN IF NOT EXISTS notify_count INT UNSIGNED NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS notify_window_started_at DATETIME(3) NULL;

-- New user records per API token per hour (/getpublickey creates one for any address):
-- one row per token, keyed by the SHA-256 of the token (the token itself is never
-- stored), counting the records created in the current hour.
CREATE TABLE IF NOT EXISTS RecordQuota (
  token_hash BINARY(32) NOT NULL PRIMARY KEY,
  window_started_at DATETIME(3) NOT NULL,
  created INT UNSIGNED NOT NULL DEFAULT 0
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
