-- ENS schema, version 6: Microsoft Graph subscriptions beside EWS ones.
--
-- A record served by Graph (mail_backend = 'graph') keeps:
--   backend_url              the mailbox's path under graph.url: users/<object id>
--                            (an opaque directory id, not an address)
--   backend_tenant           the Entra tenant id whose application token reaches it
--   subscription_id          Graph's subscription id (indexed: a notification names its
--                            subscription, and a batch may span several)
--   subscription_expires_at  when Graph ends the subscription unless renewed
--   renew_after              when ens-cron renews it next (half its lifetime after a
--                            renewal; now, after a lifecycle event asks for it)
--   renewed_at               the last renewal, so one is never repeated within ten
--                            minutes (Graph: never reauthorize and renew together)
-- No credential of any kind: ENS reaches Graph with its own application certificate.
--
-- MailItemsSeen remembers which new-mail events were already handed to the sender, per
-- record, for as long as a backend may deliver the same event again (Graph retries for
-- up to four hours; ens-cron reap forgets them after six). The key is a hash of the
-- subscription and message ids, never the ids themselves. A responder inserts the row
-- and commits it only once the sender has taken the event, in the same transaction as
-- the record's push reservation: a redelivery meanwhile waits on the row's lock and then
-- finds it (a duplicate) or not (the hand-off failed: it is its own to deliver). No
-- foreign key on purpose: the check would take a shared lock on the record's row, which
-- the reservation then needs exclusively, and two notifications for one mailbox would
-- deadlock; rows of a deleted record are forgotten by the reaper like any other.
-- Idempotent (IF NOT EXISTS), like every migration; adding columns keeps older binaries
-- working.
ALTER TABLE EnsSubscriptionInfo
  ADD COLUMN IF NOT EXISTS backend_tenant VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL AFTER backend_url,
  ADD COLUMN IF NOT EXISTS subscription_expires_at DATETIME(3) NULL AFTER subscription_id,
  ADD COLUMN IF NOT EXISTS renew_after DATETIME(3) NULL AFTER subscription_expires_at,
  ADD COLUMN IF NOT EXISTS renewed_at DATETIME(3) NULL AFTER renew_after,
  ADD INDEX IF NOT EXISTS ix_subscription_id (subscription_id),
  ADD INDEX IF NOT EXISTS ix_subscription_renewal (mail_backend, renew_after);

CREATE TABLE IF NOT EXISTS MailItemsSeen (
  record_id BIGINT UNSIGNED NOT NULL,
  item_hash BINARY(16) NOT NULL,
  seen_at DATETIME(3) NOT NULL,
  PRIMARY KEY (record_id, item_hash),
  KEY ix_seen_at (seen_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
