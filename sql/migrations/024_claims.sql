-- ENS schema, version 24: claims (docs/security.md, "Whose Exchange a device trusts").
--
-- When a device proves its credentials at its own Exchange (the ewsUrl it named), and
-- neither that server nor the record's live subscription's is confirmed by Autodiscover
-- or exchange.allowed_hosts, ENS cannot tell the mailbox's owner from someone who
-- named a server of their own first. Until now the first claimant kept the record and
-- the other got ExchangeAuthFailed. Now each gets a subscription at the server they
-- proved themselves at: a claim, a record row of its own under the user's record, and
-- each device hears only its own server's mail.
--
--   claim_of        the user's own record's userid (NULL for the user's own record);
--                   the claim's userid is a random placeholder, never a user's
--   claim_endpoint  the server (origin) the claim subscribes at
--   claim_mac       a RowBinding MAC over userid, claim_of and claim_endpoint
--
-- A claim shares the user's key: its private_key_sealed is the user's own, sealed to
-- claim_of. Binaries from before 24 never find a claim by a userid (only by the record
-- id a callback URL names), and answer its callbacks as any record's.
ALTER TABLE EnsSubscriptionInfo ADD COLUMN IF NOT EXISTS claim_of CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL;
ALTER TABLE EnsSubscriptionInfo ADD COLUMN IF NOT EXISTS claim_endpoint VARCHAR(300) CHARACTER SET ascii COLLATE ascii_bin NULL;
ALTER TABLE EnsSubscriptionInfo ADD COLUMN IF NOT EXISTS claim_mac BINARY(16) NULL;
CREATE UNIQUE INDEX IF NOT EXISTS uq_subscription_claim ON EnsSubscriptionInfo (claim_of, claim_endpoint);
