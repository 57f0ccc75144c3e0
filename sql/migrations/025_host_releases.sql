-- ENS schema, version 25: each host's sender records the release it runs
-- (SenderHosts.release_version; `ens-cron status` lists it for every host), so that an
-- operator, and a later contract step, can tell which hosts still run an older one.
-- Expand only: binaries from before it write their heartbeats without it (NULL: "an
-- older release").
ALTER TABLE SenderHosts ADD COLUMN IF NOT EXISTS release_version VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL;
