-- ENS schema, version 8: several ENS hosts on one (Galera) database (docs/deployment.md).
--
-- CronLeases holds the lease that lets one `ens-cron` run a shared job at a time across
-- every host. GET_LOCK and SELECT … FOR UPDATE only exclude sessions on one Galera node,
-- so a lease is claimed by writing its row (an UPDATE that only matches a free or
-- expired lease, then COMMIT; a certification conflict means another host won):
--   name        the job group ('maintenance': reap, renew, sync-keys, keys)
--   holder      who holds it: the host name and process id, for the operator
--   token       random per claim; renewal and release match on it, so a holder whose
--               lease expired (it stalled) can neither extend nor free the next one
--   expires_at  a holder that crashes stops renewing; the lease is free after this
--
-- SenderHosts has one row per host's sender (ens-apns), written every few seconds:
--   host             the host name (push.host_name, default the system's)
--   spool_entries    notifications in its spool not yet delivered
--   oldest_entry_at  when the oldest of them was accepted; NULL when empty
--   heartbeat_at     its last write: `ens-cron status` reports a host whose heartbeat
--                    is old while its spool holds notifications (`ens-apns drain`)
-- Neither table holds anything personal. Idempotent, like every migration.
CREATE TABLE IF NOT EXISTS CronLeases (
  name VARCHAR(32) NOT NULL PRIMARY KEY,
  holder VARCHAR(128) NULL,
  token BINARY(16) NULL,
  expires_at DATETIME(3) NULL
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS SenderHosts (
  host VARCHAR(64) NOT NULL PRIMARY KEY,
  spool_entries BIGINT UNSIGNED NOT NULL DEFAULT 0,
  oldest_entry_at DATETIME(3) NULL,
  heartbeat_at DATETIME(3) NOT NULL
) ENGINE=InnoDB;
