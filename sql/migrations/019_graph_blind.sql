-- ENS schema, version 19: Graph's `blind` privacy mode (docs/privacy.md).
--
-- A device in `blind` mode registers an X.509 certificate of its own RSA key; Graph
-- encrypts each new mail's selected properties to that certificate (a "rich"
-- subscription, includeResourceData), and ENS forwards the ciphertext without being
-- able to open it. One rich subscription per record and certificate: devices of one
-- user that register the same certificate share it.
--
-- GraphBlindSubscriptions holds public material only: the certificate (DER), its
-- SHA-256 thumbprint, the opaque encryptionCertificateId ENS gave Graph, Graph's
-- subscription id and expiry. After a rotation (/updateprivacy) the previous id and
-- thumbprint are kept until the subscription's next renewal, so notifications Graph
-- encrypted to the old certificate still reach the device, which keeps the old key.
-- A `blind` device keeps its certificate's SHA-256 thumbprint in Devices.preview_key (the
-- column holds the key of the device's mode: a P-256 point for `encrypted`).
-- GraphSigningKeys caches the Microsoft identity platform's public signing keys (JWKS)
-- that sign the validation tokens of rich notifications; the row with kid '' records
-- when they were last fetched (at most once a minute). Idempotent, like every migration.
CREATE TABLE IF NOT EXISTS GraphBlindSubscriptions (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  record_id BIGINT NOT NULL,
  thumbprint BINARY(32) NOT NULL,
  certificate VARBINARY(8192) NOT NULL,
  certificate_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  previous_thumbprint BINARY(32) NULL,
  previous_certificate_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  resource VARCHAR(512) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  subscription_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL,
  expires_at DATETIME(3) NULL,
  renew_after DATETIME(3) NULL,
  renewed_at DATETIME(3) NULL,
  created_at DATETIME(3) NOT NULL,
  UNIQUE KEY blind_record_thumbprint (record_id, thumbprint),
  UNIQUE KEY blind_subscription (subscription_id),
  KEY blind_renew (renew_after)
) ENGINE=InnoDB;


CREATE TABLE IF NOT EXISTS GraphSigningKeys (
  kid VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
  modulus VARBINARY(1024) NOT NULL,
  exponent VARBINARY(16) NOT NULL,
  fetched_at DATETIME(3) NOT NULL
) ENGINE=InnoDB;
