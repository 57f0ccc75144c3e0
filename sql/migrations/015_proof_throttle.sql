-- ENS schema, version 15: the proof-of-possession throttle counts per presenting device
-- and per client address, not per record (docs/security.md, "Proof of possession").
--
-- Until now five failed proofs within exchange.proof_window_seconds closed a record to
-- every registration (EnsSubscriptionInfo.proof_failures): anyone holding the app's
-- ApiToken could keep a user's own new devices out for ever, and feed the mailbox
-- directory's lockout counter while doing it. Now each failed proof counts twice, in
-- one row per key:
--   throttle_key       HMAC-SHA-256 under a master-derived key of ("device", record id,
--                      the presenting push token's hash) or of ("source", record id, the
--                      client's address: an IPv4 address or an IPv6 /64); a database
--                      reader learns neither the device nor the address
--   record_id          the mailbox's record (rows go with it)
--   failures           failed proofs since window_started_at
--   window_started_at  the first failure of the current window
-- A registration is refused (429, Exchange not contacted) while its device's row, or
-- its address's row, holds exchange.proof_failure_limit failures in the window; a
-- device already registered on the record is held by its own row only. `ens-cron reap`
-- removes rows whose window ended a day ago or more (the longest window is a day).
--
-- EnsSubscriptionInfo.proof_failures and proof_window_started_at are no longer used;
-- they stay for binaries of the previous version during a rolling upgrade.
-- Idempotent, like every migration.
CREATE TABLE IF NOT EXISTS ProofFailures (
  throttle_key BINARY(32) NOT NULL PRIMARY KEY,
  record_id BIGINT UNSIGNED NOT NULL,
  failures INT UNSIGNED NOT NULL DEFAULT 0,
  window_started_at DATETIME(3) NOT NULL,
  KEY ProofFailures_window (window_started_at),
  CONSTRAINT ProofFailures_record FOREIGN KEY (record_id) REFERENCES EnsSubscriptionInfo (id) ON DELETE CASCADE
) ENGINE=InnoDB;
