-- ENS schema, version 23: the last two gaps of the column inventory
-- (Sources/ENSStore/ColumnInventory.swift; docs/security.md, "A writer to the database").
--
--   MailCredentials.supplier_mac       a RowBinding MAC over the record, generation and
--   MailCredentialsFresh.supplier_mac  supplied_by (fresh rows: and their box). Stored
--                                      credentials are erased when the device that
--                                      supplied them leaves; a supplier a writer cleared
--                                      or swapped fails its MAC, and the credentials go
--                                      at once instead of outliving their device.
--   EnsSubscriptionInfo.device_epoch   the record's freshness counter for its devices:
--                                      every change to one of them advances it and
--                                      rebinds them all (Devices.binding_mac covers it),
--                                      so a device row restored alone from an older
--                                      backup fails. 0: no change since this version
--                                      (the MACs of before stay valid).
--
-- The credentials already there get their supplier MACs when `ens-cron migrate`
-- applies this file (it reads the master key): what they say then is trusted once.
ALTER TABLE MailCredentials ADD COLUMN IF NOT EXISTS supplier_mac BINARY(16) NULL;
ALTER TABLE MailCredentialsFresh ADD COLUMN IF NOT EXISTS supplier_mac BINARY(16) NULL;
ALTER TABLE EnsSubscriptionInfo ADD COLUMN IF NOT EXISTS device_epoch BIGINT UNSIGNED NOT NULL DEFAULT 0;
