-- ENS schema, version 12: a fencing token for the OAuth refresh claim (docs/exchange.md,
-- "OAuth refresh").
--
-- A refresh claim expires by the database's clock (UTC_TIMESTAMP(3)), and a claimant
-- that paused past its expiry (a stalled host, a Galera flow-control pause) may wake
-- after another took over and rotated the refresh token. Each claim raises refresh_fence and keeps
-- the value it set; the claimant's checks and its write of the renewed credentials
-- match on it, so a superseded claimant neither sends the spent refresh token nor
-- overwrites the newer one (providers that detect reuse revoke the whole grant).
-- Adopting fresh credentials raises it too. It holds no secret. Idempotent, like every
-- migration.
ALTER TABLE MailCredentials
  ADD COLUMN IF NOT EXISTS refresh_fence BIGINT NOT NULL DEFAULT 0;
