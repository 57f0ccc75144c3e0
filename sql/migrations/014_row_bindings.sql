-- ENS schema, version 14: what a callback, a registration or a sealing takes from the
-- database is authenticated under the master key (docs/security.md, "A writer to the
-- database").
--
--   EnsSubscriptionInfo.binding_mac  16 bytes of HMAC-SHA-256 (RowBinding) over the
--                                    record id, generation, backend, backend_url,
--                                    backend_tenant and endpoint: a callback whose row
--                                    fails it sends nothing anywhere, and a Graph
--                                    renewal does not run
--   MailCredentials.box_key_mac      the same over record id, generation and
--                                    box_public_key: fresh credentials are sealed only
--                                    to a box key ENS itself stored
--
-- Rows written before this version get their MACs when `ens-cron migrate` applies this
-- file (it reads the master key for that): whatever the rows say at that moment is
-- trusted once; from then on an edited row is refused.
ALTER TABLE EnsSubscriptionInfo ADD COLUMN IF NOT EXISTS binding_mac BINARY(16) NULL;
ALTER TABLE MailCredentials ADD COLUMN IF NOT EXISTS box_key_mac BINARY(16) NULL;
