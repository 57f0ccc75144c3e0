-- ENS schema, version 18: the gauges GET /metrics reports, counted by ens-cron.
--
-- /metrics used to count EnsSubscriptionInfo and Devices in full on every scrape, on
-- every host, however often a scraper (or anyone who reached the endpoint) asked.
-- `ens-cron gauges` (part of `ens-cron all`, once a minute under the cluster's cron
-- lease) now counts them once and writes one row per series here; /metrics reads these
-- few rows. `series` is the Prometheus series (`ens_devices{state="enabled"}`);
-- `counted_at` is when the count ran (UTC), reported as ens_gauges_counted_at_seconds.
-- Counts only: no user id, address or token. Idempotent, like every migration.
CREATE TABLE IF NOT EXISTS MetricGauges (
  series VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
  value BIGINT NOT NULL,
  counted_at DATETIME(3) NOT NULL
) ENGINE=InnoDB;
