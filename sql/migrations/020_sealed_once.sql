-- ENS schema, version 20: single-use sealed values (docs/security.md "Sealed values").
--
-- A bound sealed value (one that names its `purpose` and `sealedAt`) changes state at
-- most once: the first request that opens it records a keyed hash of its plaintext
-- here, and every later request carrying the same plaintext (the same body resent
-- from a request log, or the same sealed value with a clear parameter swapped) is
-- refused. A row lives until its value could no longer pass the time window anyway;
-- `ens-cron reap` deletes the expired ones. In the user's shard, so every host of a
-- cluster sees the same rows.
--
--   SealedValuesUsed.digest      HMAC-SHA-256 of purpose, record and plaintext under a
--                                key derived from the master key: it names no value
--   SealedValuesUsed.expires_at  when the value's window has closed
CREATE TABLE IF NOT EXISTS SealedValuesUsed (
  digest BINARY(32) NOT NULL PRIMARY KEY,
  expires_at DATETIME(3) NOT NULL,
  KEY sealed_used_expiry (expires_at)
) ENGINE=InnoDB;
