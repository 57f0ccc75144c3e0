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
-- subscription and message ids, never the ids themselves. handed_at stays NULL while a
-- responder is handing the event on: a redelivery meanwhile is asked to retry, not
-- acknowledged, so a hand-off that then fails (or a responder that dies) loses nothing.
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
  handed_at DATETIME(3) NULL,
  PRIMARY KEY (record_id, item_hash),
  KEY ix_seen_at (seen_at),
  CONSTRAINT fk_seen_record FOREIGN KEY (record_id) REFERENCES EnsSubscriptionInfo (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
