-- ENS schema, version 9: a subscription's credentials kept in split form (docs/exchange.md,
-- docs/security.md).
--
-- Until now an EWS callback URL carried the user's credentials, sealed; Exchange refuses
-- URLs of 2,083 characters or more, so large OAuth tokens and ordinary RSA client
-- certificates did not fit. Now the URL carries only a random 32-byte key (with record
-- id, generation and a MAC), and this table holds the credentials sealed under a key
-- derived from the master key and that URL key:
--   record_id, generation  the subscription attempt the row belongs to; rows of older
--                          generations are erased when a newer subscription becomes the
--                          live one, rows of attempts that never did by `ens-cron reap`
--   sealed                 AES-256-GCM of the credentials, associated data binding record
--                          and generation; opened only by a callback, which brings the
--                          URL key. Neither a dump (with or without the master key) nor
--                          the URL alone opens it.
--   created_at             for reaping abandoned attempts
-- Rows go with their record (ON DELETE CASCADE). Subscriptions made before this version
-- keep their URLs, which still carry the credentials, until they are renewed.
CREATE TABLE IF NOT EXISTS MailCredentials (
  record_id BIGINT UNSIGNED NOT NULL,
  generation INT UNSIGNED NOT NULL,
  sealed MEDIUMBLOB NOT NULL,
  created_at DATETIME(3) NOT NULL,
  PRIMARY KEY (record_id, generation),
  CONSTRAINT MailCredentials_record FOREIGN KEY (record_id) REFERENCES EnsSubscriptionInfo (id) ON DELETE CASCADE
) ENGINE=InnoDB;
