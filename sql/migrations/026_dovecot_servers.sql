-- ENS schema, version 26: Dovecot servers (docs/dovecot.md). A hosting admin's Dovecot
-- pushes each delivery to ENS through its push_notification plugin; `ens-cron dovecot
-- add` registers the server here once.
--
--   name               the operator's name for the server: the hook's Basic user
--   imap_url           imaps://host:port/ (or imap:// with STARTTLS): where devices'
--                      passwords are proven and their opt-in written
--   domains            the mail domains it serves, lowercase, comma-separated: a
--                      registration for an address there goes to this server
--   ca_pem             the certificate(s) its IMAP TLS is trusted by; NULL: the system store
--   driver             how its push plugin is set up: 'lua' (ENS's script, ENS's own
--                      METADATA key) or 'ox' (Dovecot's ox driver and its shared key)
--   credential_serial  which hook credential is current: the credential is derived from
--                      the master key, the name and this serial, and never stored
--   binding_mac        a RowBinding MAC over all of the above
--
-- Expand only: binaries from before 26 never read the table. Their records are never
-- 'dovecot'; a 'dovecot' record they meet (a registration a newer host made) they treat
-- as a backend they do not know.
CREATE TABLE IF NOT EXISTS DovecotServers (
    name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    imap_url VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    domains VARCHAR(2048) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    ca_pem BLOB NULL,
    driver VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'lua',
    credential_serial INT UNSIGNED NOT NULL DEFAULT 1,
    created_at DATETIME(3) NOT NULL,
    binding_mac BINARY(16) NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB;
