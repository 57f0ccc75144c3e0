-- ENS schema, version 10: OAuth refresh for a subscription's stored credentials
-- (docs/exchange.md, "OAuth refresh").
--
-- A device may hand over a refresh token (with its token endpoint and client id) beside
-- its OAuth access token; both live only inside MailCredentials.sealed. When a callback
-- finds the access token expired, it asks the token endpoint for a new one and re-seals
-- the row with the answer (the refresh token rotates). These columns coordinate that and
-- hold no secret:
--   refresh_claim        random per attempt: at most one refresh per subscription runs
--                        at a time, across every responder and host (the claim is an
--                        UPDATE that matches only an unclaimed or expired claim, as
--                        CronLeases are); the attempt's write matches on it, so fresh
--                        credentials adopted meanwhile are never overwritten
--   refresh_claim_until  when an attempt that crashed stops holding the claim
--   refused_at           the token endpoint refused the refresh token (revoked, expired,
--                        reused): callbacks stop asking it, notifications go generic, and
--                        check-ins are told to register again, until new credentials come
-- Idempotent, like every migration.
ALTER TABLE MailCredentials
  ADD COLUMN IF NOT EXISTS refresh_claim BINARY(16) NULL,
  ADD COLUMN IF NOT EXISTS refresh_claim_until DATETIME(3) NULL,
  ADD COLUMN IF NOT EXISTS refused_at DATETIME(3) NULL;
