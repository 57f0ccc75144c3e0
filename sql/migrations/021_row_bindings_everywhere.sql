-- ENS schema, version 21: every row a writer to the database could use to move mail,
-- credentials or privacy carries a `RowBinding` MAC under a key derived from the
-- master key (docs/security.md, "A writer to the database"; the inventory of every
-- column is Sources/ENSStore/ColumnInventory.swift).
--
--   Devices.binding_mac                  over the row's id, record, token and secret
--                                        hashes, app, privacy mode and key, and server:
--                                        a row copied to another record, given another
--                                        device's token or secret, or another mode, is
--                                        no device (no push, no history, no change)
--   EWSUrlCache.binding_mac              over domain, EWS URL and expiry: the next
--                                        user of a domain sends credentials there
--   GraphBlindSubscriptions.binding_mac  over the row, record, resource and the
--                                        certificates Graph encrypts to
--   GraphSigningKeys.binding_mac         over the key: a key of a writer's own would
--                                        sign validation tokens for forged notifications
--
-- Devices and GraphBlindSubscriptions rows already there get their MACs when
-- `ens-cron migrate` applies this file (it reads the master key): what they say then is
-- trusted once. The two caches are emptied instead: Autodiscover and Microsoft's
-- published keys fill them again, so nothing in them is trusted unchecked.
ALTER TABLE Devices ADD COLUMN IF NOT EXISTS binding_mac BINARY(16) NULL;
ALTER TABLE EWSUrlCache ADD COLUMN IF NOT EXISTS binding_mac BINARY(16) NULL;
ALTER TABLE GraphBlindSubscriptions ADD COLUMN IF NOT EXISTS binding_mac BINARY(16) NULL;
ALTER TABLE GraphSigningKeys ADD COLUMN IF NOT EXISTS binding_mac BINARY(16) NULL;
DELETE FROM EWSUrlCache;
DELETE FROM GraphSigningKeys;
