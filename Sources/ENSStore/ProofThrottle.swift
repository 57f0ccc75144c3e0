public import MariaDB
internal import OpenSSL
internal import POSIX
public import ENSModel
public import ENSVault

/// Who presents a proof of possession (/registerdevicev2): the device, by its push
/// token's hash, and the client's network, as the web server saw it (`REMOTE_ADDR`).
public struct ProofPresenter: Sendable, Equatable {
    /// The presenting device's `Vault.tokenHash`.
    public let tokenHash: [UInt8]
    /// An IPv4 address whole, an IPv6 address's /64 (a subscriber's network is at least
    /// a /64, so each address in it is no new source); nil when the web server sent no
    /// address ENS can read. Never logged, never stored: only inside a keyed hash.
    public let source: [UInt8]?
    /// The account the credentials log in as, when a wrong password counts towards its
    /// lockout at the directory: a Basic user name, trimmed and lowercased. Never
    /// logged, never stored: only inside a keyed hash.
    public let identity: [UInt8]?

    public init(tokenHash: [UInt8], remoteAddress: String?, userName: String? = nil) {
        self.tokenHash = tokenHash
        source = remoteAddress.flatMap(Self.network(of:))
        identity = userName.map { Array($0.trimmingCharacters(in: " \t").lowercased().utf8) }.flatMap { $0.isEmpty ? nil : $0 }
    }

    static func network(of text: String) -> [UInt8]? {
        guard let address = IPAddress(text) else { return nil }
        let mapped: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF]
        if Array(address.bytes.prefix(12)) == mapped { return address.bytes }
        return Array(address.bytes.prefix(8))
    }
}

/// The proof-of-possession throttle (migration 015, docs/security.md "Proof of
/// possession"): failed proofs for a record are counted per presenting device and per
/// client network, each against `exchange.proof_failure_limit` per
/// `exchange.proof_window_seconds`. Someone hammering a record with wrong passwords is
/// held at their own device and address, while the owner's registration from another
/// device or network still reaches the mailbox's Exchange; the per-network count keeps
/// one address from sending more than the limit of wrong passwords to a mailbox
/// (whatever device tokens it invents), so it cannot lock the owner's directory
/// account out either. A device already registered on the record (it proved itself
/// before: the owner's, or a delegate's) is held only by its own count and does not
/// feed its network's, so a stale password on an old phone cannot lock the owner's new
/// phone out of the same Wi-Fi.
///
/// And per account: every failed credentialed request for one user name counts against
/// `identityFailureLimit` per window, whatever record, device or address presented it,
/// so that ENS cannot be used to lock a directory account, however many records someone
/// makes for it. The owner's success clears that count.
public struct ProofThrottle {
    public let database: any SQLDatabase
    private let key: [UInt8]

    /// Failed logins one account name may cost at its server per window: below the
    /// lockout thresholds directories use (Active Directory's are commonly 10 or more).
    public static let identityFailureLimit = 5

    public init(database: any SQLDatabase, vault: Vault) {
        self.database = database
        key = vault.proofThrottleKey
    }

    public enum Verdict: Sendable, Equatable {
        case allowed
        /// This device's failures for the record reached the limit.
        case deviceHeld
        /// Failures from this network for the record reached the limit.
        case sourceHeld
        /// Failures for this account name, on any record, reached `identityFailureLimit`.
        case identityHeld
    }

    /// Whether a proof presented by `presenter` may be tried now, in one round trip.
    public func verdict(recordID: Int64, presenter: ProofPresenter, limit: Int, window: Duration, now: Timestamp) throws(DatabaseError) -> Verdict {
        let cutoff = now.subtracting(window).databaseString
        guard let row = try database.queryOne("""
            SELECT (SELECT IF(window_started_at > \(cutoff), failures, 0) FROM ProofFailures WHERE throttle_key = \(deviceKey(recordID, presenter))),
                   (SELECT IF(window_started_at > \(cutoff), failures, 0) FROM ProofFailures WHERE throttle_key = \(sourceKey(recordID, presenter))),
                   EXISTS (SELECT 1 FROM Devices WHERE subscription_row = \(recordID) AND token_hash = \(presenter.tokenHash)),
                   (SELECT IF(window_started_at > \(cutoff), failures, 0) FROM AccountFailures WHERE throttle_key = \(identityKey(presenter)))
            """) else { return .allowed }
        let (deviceFailures, sourceFailures, registered, identityFailures) = try row.decode(Int64?.self, Int64?.self, Bool.self, Int64?.self)
        if (deviceFailures ?? 0) >= limit { return .deviceHeld }
        if !registered && (sourceFailures ?? 0) >= limit { return .sourceHeld }
        if (identityFailures ?? 0) >= min(limit, Self.identityFailureLimit) { return .identityHeld }
        return .allowed
    }

    /// Counts a failed proof against the device and, unless the device is registered on
    /// the record, against its network: the first failure after a window ended opens a
    /// new one. (SET runs left to right: the count is decided on the old window start.)
    public func recordFailure(recordID: Int64, presenter: ProofPresenter, window: Duration, now: Timestamp) throws(DatabaseError) {
        let cutoff = now.subtracting(window).databaseString
        let time = now.databaseString
        try database.execute("""
            INSERT INTO ProofFailures (throttle_key, record_id, failures, window_started_at)
            VALUES (\(deviceKey(recordID, presenter)), \(recordID), 1, \(time))
            ON DUPLICATE KEY UPDATE failures = IF(window_started_at > \(cutoff), failures + 1, 1),
                window_started_at = IF(window_started_at > \(cutoff), window_started_at, \(time))
            """)
        try database.execute("""
            INSERT INTO ProofFailures (throttle_key, record_id, failures, window_started_at)
            SELECT \(sourceKey(recordID, presenter)), \(recordID), 1, \(time) FROM DUAL
            WHERE NOT EXISTS (SELECT 1 FROM Devices WHERE subscription_row = \(recordID) AND token_hash = \(presenter.tokenHash))
            ON DUPLICATE KEY UPDATE failures = IF(window_started_at > \(cutoff), failures + 1, 1),
                window_started_at = IF(window_started_at > \(cutoff), window_started_at, \(time))
            """)
        // The account's count belongs to no record: deleting one resets nothing.
        guard presenter.identity != nil else { return }
        try database.execute("""
            INSERT INTO AccountFailures (throttle_key, failures, window_started_at) VALUES (\(identityKey(presenter)), 1, \(time))
            ON DUPLICATE KEY UPDATE failures = IF(window_started_at > \(cutoff), failures + 1, 1),
                window_started_at = IF(window_started_at > \(cutoff), window_started_at, \(time))
            """)
    }

    /// A proof succeeded: the device's earlier failures (a mistyped password) no longer
    /// count. Its network's stay until their window ends: a success there by the owner
    /// must not give someone else behind the same address a new round of guesses.
    public func recordSuccess(recordID: Int64, presenter: ProofPresenter) throws(DatabaseError) {
        try database.execute("DELETE FROM ProofFailures WHERE throttle_key = \(deviceKey(recordID, presenter))")
        // The password was right: the directory's own count is back to zero too.
        if presenter.identity != nil {
            try database.execute("DELETE FROM AccountFailures WHERE throttle_key = \(identityKey(presenter))")
        }
    }

    /// One row per account name, for every record (record 0 in the MAC). A presenter
    /// without an identity names a key no account's row has (its own marker byte, where
    /// a name's key starts with another).
    private func identityKey(_ presenter: ProofPresenter) -> [UInt8] {
        mac("identity", 0, presenter.identity.map { [1] + $0 } ?? [0])
    }

    private func deviceKey(_ recordID: Int64, _ presenter: ProofPresenter) -> [UInt8] {
        mac("device", recordID, presenter.tokenHash)
    }

    /// Every client whose address is unknown shares one row per record: a front that
    /// passes no REMOTE_ADDR gets the old per-record throttle back, never none.
    private func sourceKey(_ recordID: Int64, _ presenter: ProofPresenter) -> [UInt8] {
        mac("source", recordID, presenter.source ?? [])
    }

    /// Length-prefixed fields, so no two inputs share an encoding.
    private func mac(_ kind: String, _ recordID: Int64, _ value: [UInt8]) -> [UInt8] {
        var message = Array("ens-proof-throttle/1/\(kind)/\(recordID)/".utf8)
        let length = UInt32(value.count)
        message += [UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)]
        message += value
        return Digest.hmacSHA256(key: key, message: message)
    }
}
