-- ENS schema, version 1. Applied by `ens-cron migrate` as the migration account.
-- Rules (see docs/security.md): no email, password, OAuth token, certificate, clear
-- APNs token or sync key is ever stored. Secrets ENS must keep are AES-256-GCM sealed
-- under the master key, which lives outside the database.

-- One row per user, keyed by userid = hex SHA-256 of the lowercased email.
CREATE TABLE IF NOT EXISTS EnsSubscriptionInfo (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  userid CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  public_key_pem VARCHAR(1024) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  private_key_sealed VARBINARY(4096) NOT NULL,
  registered TINYINT(1) NOT NULL DEFAULT 0,
  -- Bumped by every (re)registration; callback URLs carry it, older ones get Unsubscribe.
  generation INT UNSIGNED NOT NULL DEFAULT 0,
  ews_url VARCHAR(2048) NULL,
  ews_subscription_id VARCHAR(512) CHARACTER SET ascii COLLATE ascii_bin NULL,
  ews_watermark VARCHAR(1024) CHARACTER SET ascii COLLATE ascii_bin NULL,
  status_frequency_minutes INT UNSIGNED NOT NULL DEFAULT 30,
  last_callback_at DATETIME(3) NULL,
  last_checkin_at DATETIME(3) NULL,
  created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  updated_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  UNIQUE KEY uq_subscription_userid (userid),
  KEY ix_subscription_callback (registered, last_callback_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- One row per (user, APNs token). The token is stored sealed (to send to it) and as a
-- keyed hash (to find it); the unique key makes registration idempotent.
CREATE TABLE IF NOT EXISTS Devices (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  subscription_row BIGINT UNSIGNED NOT NULL,
  token_hash BINARY(32) NOT NULL,
  token_sealed VARBINARY(512) NOT NULL,
  bundle_id VARCHAR(255) NOT NULL DEFAULT '',
  default_sound VARCHAR(255) NULL,
  ews_device_id VARCHAR(255) NULL,
  badge TINYINT(1) NOT NULL DEFAULT 0,
  development TINYINT(1) NOT NULL DEFAULT 0,
  registered_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  -- Set by the sender when APNs rejects the token; cleared only by a registration after it.
  disabled_at DATETIME(3) NULL,
  last_checkin_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  last_notified_at DATETIME(3) NULL,
  sync_key_sealed VARBINARY(1024) NULL,
  sync_key_expires_at DATETIME(3) NULL,
  UNIQUE KEY uq_device_token (subscription_row, token_hash),
  KEY ix_device_token (token_hash),
  KEY ix_device_checkin (last_checkin_at),
  KEY ix_device_disabled (disabled_at),
  KEY ix_device_sync_expiry (sync_key_expires_at),
  CONSTRAINT fk_device_subscription FOREIGN KEY (subscription_row)
    REFERENCES EnsSubscriptionInfo (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- API tokens, as SHA-256 hashes only.
CREATE TABLE IF NOT EXISTS APITokens (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  token_hash BINARY(32) NOT NULL,
  label VARCHAR(255) NOT NULL,
  created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  revoked_at DATETIME(3) NULL,
  UNIQUE KEY uq_apitoken_hash (token_hash),
  KEY ix_apitoken_label (label)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Autodiscover results per email domain.
CREATE TABLE IF NOT EXISTS EWSUrlCache (
  domain VARCHAR(253) CHARACTER SET ascii COLLATE ascii_general_ci NOT NULL PRIMARY KEY,
  ews_url VARCHAR(2048) NOT NULL,
  expires_at DATETIME(3) NOT NULL,
  KEY ix_ewsurl_expiry (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Pre-generated RSA-2048 key pairs, so /getpublickey never generates on the request path.
CREATE TABLE IF NOT EXISTS KeyPool (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  public_key_pem VARCHAR(1024) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  private_key_sealed VARBINARY(4096) NOT NULL,
  created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
