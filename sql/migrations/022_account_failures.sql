-- ENS schema, version 22: failed logins per account name, across records
-- (docs/security.md, "Credentials go only where a challenge asks").
--
-- ProofFailures counts per record (by device and by network); this counts per account
-- name, whatever record, device or address presented it, so that ENS cannot be made to
-- lock a directory account. No record owns a row, so deleting a record (its last device
-- unregistered) resets nothing. `ens-cron reap` deletes rows whose window has ended.
--
--   AccountFailures.throttle_key       HMAC-SHA-256 of the user name under the proof
--                                      throttle's key: names no account
--   AccountFailures.failures           failed logins in the window
--   AccountFailures.window_started_at  when the window began
CREATE TABLE IF NOT EXISTS AccountFailures (
  throttle_key BINARY(32) NOT NULL PRIMARY KEY,
  failures INT UNSIGNED NOT NULL,
  window_started_at DATETIME(3) NOT NULL,
  KEY account_failures_window (window_started_at)
) ENGINE=InnoDB;
