/// Every column of every table ENS keeps, and why a writer to the database who changes
/// it gets no credentials, no content, no control of a device's privacy and no way to put
/// text on a phone (docs/security.md, "A writer to the database"). One declaration, three
/// checks: `make lint` fails when a migration adds a column this does not name
/// (scripts/check_inventory.py), `InventoryTests` compares it with the live schema, and
/// `RowTamperingTests` edits every `.bound` column of a live row in MariaDB and shows the
/// path that reads it refuses the row.
public enum ColumnInventory {
    public enum Protection: Sendable, Equatable {
        /// Covered by a MAC or an AEAD: the `RowBinding` MAC column named, or a sealed
        /// column whose associated data holds it. An edited value is refused where it is
        /// read, logged, and nothing is sent, pushed or downgraded.
        case bound(by: String)
        /// A `RowBinding` MAC.
        case mac
        /// Sealed under a key derived from the master key; how it is bound to its place.
        case sealed(String)
        /// What a change can do, none of it moving mail, credentials or privacy.
        case inert(String)
        /// Not yet covered: what a writer can do with it (docs/security.md lists these).
        case gap(String)
    }

    public struct Column: Sendable {
        public let table: String
        public let name: String
        public let protection: Protection
    }

    public static let columns: [Column] = tables.flatMap { table, columns in
        columns.map { Column(table: table, name: $0.0, protection: $0.1) }
    }

    /// What a change of a timestamp can do.
    private static let time = """
        a time that orders or expires work: a change delays, repeats or drops that work, and moves no mail, \
        credentials or privacy
        """

    private static let tables: [(String, [(String, Protection)])] = [
        // The app's ApiTokens, by keyed hash.
        ("APITokens", [
            ("id", .inert("the row's number")),
            ("token_hash", .inert("a writer can add or restore an ApiToken; the ApiToken is public and gets no one's mail (docs/security.md)")),
            ("label", .inert("the operator's name for the token")),
            ("created_at", .inert(time)),
            ("revoked_at", .inert("clearing it revives a revoked ApiToken: public, as above")),
        ]),
        // Which host runs a shared ens-cron job now.
        ("CronLeases", [
            ("name", .inert("which job")),
            ("holder", .inert("which host holds it: a writer can make a job wait or run twice; each job is idempotent")),
            ("token", .inert("the holder's claim, as above")),
            ("expires_at", .inert(time)),
        ]),
        // One row per registered device.
        ("Devices", [
            ("id", .bound(by: "binding_mac")),
            ("subscription_row", .bound(by: "binding_mac")),
            ("token_hash", .bound(by: "binding_mac")),
            ("token_sealed", .sealed("""
                the push token, AES-GCM under the device-token key; where it is opened its keyed hash must equal the \
                bound token_hash, so a sealed token copied from another row pushes nothing
                """)),
            ("bundle_id", .bound(by: "binding_mac")),
            ("default_sound", .inert("the name of the alert sound a preview push asks for")),
            ("ews_device_id", .inert("the id the client names itself by; shown to no one and used for nothing that opens mail")),
            ("badge", .inert("whether pushes carry a badge count")),
            ("development", .inert("which APNs environment: a wrong one fails the push at Apple; it reaches no other phone")),
            ("privacy_mode", .bound(by: "binding_mac")),
            ("preview_key", .bound(by: "binding_mac")),
            ("registered_at", .inert(time)),
            ("disabled_at", .inert("""
                set, the device gets no pushes (denial); cleared, a token the push service rejected is tried again \
                and rejected
                """)),
            ("last_checkin_at", .inert("when the device is reaped: a writer can have it reaped early (denial) or kept")),
            ("last_notified_at", .inert("what the v1 check-in compares: a wrong answer asks the device to register again")),
            ("sync_key_sealed", .sealed("AES-GCM under the sync-key key, bound to the device's token hash")),
            ("sync_key_expires_at", .inert("until when the sync key rides along; it opens only for its own token hash")),
            ("last_wakeup_at", .inert("when the next wake-up push may go: a change repeats or skips one (it carries no mail)")),
            ("endpoint", .bound(by: "binding_mac")),
            ("secret_hash", .bound(by: "binding_mac")),
            ("binding_mac", .mac),
        ]),
        // One row per user: the key, the live subscription and its counters.
        ("EnsSubscriptionInfo", [
            ("id", .bound(by: "binding_mac")),
            ("userid", .bound(by: "private_key_sealed")),
            ("public_key_pem", .inert("""
                never read: the public key ENS hands out is made from private_key_sealed \
                (SubscriptionStore.publicKeyPEM); written for older binaries
                """)),
            ("private_key_sealed", .sealed("the record's RSA key, AES-GCM under the private-key key with 'user:' + userid as associated data")),
            ("registered", .inert("""
                whether the subscription the bound columns describe is live; set without them it gets nothing (a \
                live subscription needs binding_mac), cleared it ends delivery (denial)
                """)),
            ("generation", .bound(by: "binding_mac")),
            ("mail_backend", .bound(by: "binding_mac")),
            ("pending_generation", .inert("a registration under way: callbacks of that attempt, whose URLs ENS sealed, are held until it ends")),
            ("pending_started_at", .inert(time)),
            ("backend_url", .bound(by: "binding_mac")),
            ("backend_tenant", .bound(by: "binding_mac")),
            ("subscription_id", .inert("""
                Exchange's or Graph's id, compared with what they send; which record a callback is for comes from \
                its sealed URL and, for Graph, the record's clientState
                """)),
            ("subscription_expires_at", .inert(time)),
            ("renew_after", .inert(time)),
            ("renewed_at", .inert(time)),
            ("watermark", .inert("""
                EWS's position in the event stream: a change repeats or skips events, each fetched with the record's \
                own credentials from its own server
                """)),
            ("backend_version", .inert("the EWS schema version to speak: a wrong one is refused by Exchange and stepped down")),
            ("heartbeat_minutes", .inert("when a silent subscription counts as lapsed: a change ends it early (denial) or late")),
            ("last_callback_at", .inert(time)),
            ("last_checkin_at", .inert(time)),
            ("created_at", .inert(time)),
            ("updated_at", .inert(time)),
            ("proof_failures", .inert("unused since migration 015 (ProofFailures)")),
            ("proof_window_started_at", .inert("unused since migration 015")),
            ("notify_count", .inert("the per-minute push cap: a reset lets the record's real mail reach the cap sooner, never other text")),
            ("notify_window_started_at", .inert(time)),
            ("endpoint", .bound(by: "binding_mac")),
            ("binding_mac", .mac),
            ("claim_of", .bound(by: "claim_mac")),
            ("claim_endpoint", .bound(by: "claim_mac")),
            ("claim_mac", .mac),
            ("device_epoch", .inert("""
                the freshness counter every device MAC of the record covers (Devices.binding_mac): changed alone, every \
                device of the record is refused (denial); set back together with device rows from the same older \
                backup, it restores that older state, as restoring the whole record does (docs/security.md)
                """)),
        ]),
        // Dovecot servers registered with `ens-cron dovecot add` (migration 026).
        ("DovecotServers", [
            ("name", .bound(by: "binding_mac")),
            ("imap_url", .bound(by: "binding_mac")),
            ("domains", .bound(by: "binding_mac")),
            ("ca_pem", .bound(by: "binding_mac")),
            ("driver", .bound(by: "binding_mac")),
            ("credential_serial", .bound(by: "binding_mac")),
            ("created_at", .inert(time)),
            ("binding_mac", .mac),
        ]),
        // Autodiscover's answers per domain.
        ("EWSUrlCache", [
            ("domain", .bound(by: "binding_mac")),
            ("ews_url", .bound(by: "binding_mac")),
            ("expires_at", .bound(by: "binding_mac")),
            ("binding_mac", .mac),
        ]),
        // Blind mode's rich Graph subscriptions.
        ("GraphBlindSubscriptions", [
            ("id", .bound(by: "binding_mac")),
            ("record_id", .bound(by: "binding_mac")),
            ("thumbprint", .bound(by: "binding_mac")),
            ("certificate", .bound(by: "binding_mac")),
            ("certificate_id", .bound(by: "binding_mac")),
            ("previous_thumbprint", .bound(by: "binding_mac")),
            ("previous_certificate_id", .bound(by: "binding_mac")),
            ("resource", .bound(by: "binding_mac")),
            ("subscription_id", .inert("Graph's id, compared with what Graph sends; the row a POST is for comes from its sealed URL")),
            ("expires_at", .inert(time)),
            ("renew_after", .inert(time)),
            ("renewed_at", .inert(time)),
            ("created_at", .inert(time)),
            ("binding_mac", .mac),
        ]),
        // The Microsoft identity platform's public keys for validation tokens.
        ("GraphSigningKeys", [
            ("kid", .bound(by: "binding_mac")),
            ("modulus", .bound(by: "binding_mac")),
            ("exponent", .bound(by: "binding_mac")),
            ("fetched_at", .inert("when the keys were last fetched (at most once a minute): a change fetches sooner or later")),
            ("binding_mac", .mac),
        ]),
        // RSA keys made ahead for new records.
        ("KeyPool", [
            ("id", .inert("the row's number")),
            ("public_key_pem", .inert("""
                never read: the public key a new record gets is made from private_key_sealed (KeyPool.take); written \
                for older binaries
                """)),
            ("private_key_sealed", .sealed("""
                AES-GCM under the private-key key with 'pool' as associated data; sealed anew to its userid when a \
                record takes it
                """)),
            ("created_at", .inert(time)),
        ]),
        // A subscription's credentials, sealed for its callbacks.
        ("MailCredentials", [
            ("record_id", .bound(by: "sealed")),
            ("generation", .bound(by: "sealed")),
            ("sealed", .sealed("""
                the credentials, AES-GCM under a key made of a master-key share and the callback URL's share, record \
                and generation as associated data
                """)),
            ("box_public_key", .bound(by: "box_key_mac")),
            ("created_at", .inert(time)),
            ("refresh_claim", .inert("which responder refreshes an OAuth token now: a change makes two refresh or none (denial)")),
            ("refresh_claim_until", .inert(time)),
            ("refused_at", .inert("""
                whether the token endpoint refused the refresh token: a change makes check-ins ask for new \
                credentials or not; previews need working credentials either way
                """)),
            ("refresh_fence", .inert("orders refreshes, as refresh_claim")),
            ("box_key_mac", .mac),
            ("supplied_by", .bound(by: "supplier_mac")),
            ("supplier_mac", .mac),
        ]),
        // Credentials a device left for the next callback, sealed to the box key.
        ("MailCredentialsFresh", [
            ("id", .inert("the row's number")),
            ("record_id", .bound(by: "box")),
            ("generation", .bound(by: "box")),
            ("box", .sealed("P-256 ECIES to the subscription's box key (box_key_mac), record and generation as associated data")),
            ("created_at", .inert(time)),
            ("supplied_by", .bound(by: "supplier_mac")),
            ("supplier_mac", .mac),
        ]),
        // Graph events already delivered.
        ("MailItemsSeen", [
            ("record_id", .inert("dedup: a deleted row lets Graph's redelivery (or Dovecot's retry) push the same real mail again; "
                                 + "an added one drops a push (denial)")),
            ("item_hash", .inert("as record_id")),
            ("seen_at", .inert(time)),
        ]),
        // Gauges ens-cron counts for /metrics.
        ("MetricGauges", [
            ("series", .inert("a metric's name")),
            ("value", .inert("a metric's value: what dashboards show")),
            ("counted_at", .inert(time)),
        ]),
        // History and secure content, sealed per device.
        ("NotificationLog", [
            ("id", .bound(by: "summary_sealed")),
            ("device_id", .bound(by: "summary_sealed")),
            ("created_at", .inert("the history's order and retention")),
            ("summary_sealed", .sealed("sender and subject, AES-GCM under the log key with notification id and device id as associated data")),
            ("content_sealed", .sealed("a secure push's content, as summary_sealed")),
            ("content_expires_at", .inert(time)),
            ("read_at", .inert("whether the device marked it read")),
        ]),
        // Failed proofs of possession, by keyed hash of record and device or network.
        ("ProofFailures", [
            ("throttle_key", .inert("""
                a writer who clears counts lets more password guesses reach a mailbox's server; one who adds them \
                holds registrations (denial)
                """)),
            ("record_id", .inert("as throttle_key")),
            ("failures", .inert("as throttle_key")),
            ("window_started_at", .inert(time)),
        ]),
        // Failed logins per account name, across records (keyed hash).
        ("AccountFailures", [
            ("throttle_key", .inert("""
                a writer who clears counts lets more wrong passwords reach an account's server; one who adds them \
                holds that account's registrations (denial)
                """)),
            ("failures", .inert("as throttle_key")),
            ("window_started_at", .inert(time)),
        ]),
        // New records per ApiToken per hour.
        ("RecordQuota", [
            ("token_hash", .inert("a writer can lift or exhaust the quota of new records: no mail, credentials or privacy")),
            ("window_started_at", .inert(time)),
            ("created", .inert("as token_hash")),
        ]),
        // Which migrations ran.
        ("schema_migrations", [
            ("version", .inert("a writer can make ens-cron migrate run an idempotent migration again")),
            ("name", .inert("as version")),
            ("applied_at", .inert(time)),
        ]),
        // Bound sealed values already used.
        ("SealedValuesUsed", [
            ("digest", .inert("""
                deleting a mark lets that logged value be used again within its window: a writer who also reads \
                request logs can repeat a device's own last change, never make a new one
                """)),
            ("expires_at", .inert(time)),
        ]),
        // The senders of a cluster and their spools.
        ("SenderHosts", [
            ("host", .inert("a sender's name")),
            ("spool_entries", .inert("what ens-cron status reports")),
            ("oldest_entry_at", .inert(time)),
            ("heartbeat_at", .inert(time)),
            ("release_version", .inert("which release a host's sender runs: what ens-cron status shows")),
        ]),
    ]
}
