internal import Codecs
public import MariaDB
public import OpenSSL
internal import POSIX
internal import ENSModel

/// API tokens: created and revoked through `ens-cron token`, stored only as SHA-256
/// hashes in `APITokens`, and handed to responders as a cache file of hashes.
public enum APITokens {
    /// A new token: 32 random bytes as 64 hex characters, prefixed so a leaked one is
    /// recognisable in a secret scanner.
    public static func generate() throws(OpenSSLError) -> String {
        "ens_" + Hex.encode(try Digest.randomBytes(32))
    }

    /// A new token; the CSPRNG failing is no state to go on in (`randomBytes`).
    static func freshToken() -> String {
        "ens_" + Hex.encode(randomBytes(32))
    }

    public static func hash(_ token: String) -> [UInt8] {
        Digest.sha256(token)
    }

    public struct Listing: Sendable {
        public let id: Int64
        public let label: String
        public let createdAt: String
        public let revokedAt: String?
    }

    /// Stores a new token's hash; returns the token, which is shown once and never again.
    public static func create(label: String, database: any SQLDatabase) throws(DatabaseError) -> String {
        let token = freshToken()
        try database.execute("INSERT INTO APITokens (token_hash, label) VALUES (\(hash(token)), \(label))")
        return token
    }

    /// Revokes by label or id; returns how many tokens were revoked.
    public static func revoke(labelOrID: String, database: any SQLDatabase) throws(DatabaseError) -> Int {
        if let id = Int64(labelOrID) {
            return try database.execute("UPDATE APITokens SET revoked_at = CURRENT_TIMESTAMP(3) WHERE id = \(id) AND revoked_at IS NULL")
                .affectedRows
        }
        return try database.execute("UPDATE APITokens SET revoked_at = CURRENT_TIMESTAMP(3) WHERE label = \(labelOrID) AND revoked_at IS NULL")
            .affectedRows
    }

    public static func list(database: any SQLDatabase) throws(DatabaseError) -> [Listing] {
        try database.query("SELECT id, label, created_at, revoked_at FROM APITokens ORDER BY id LIMIT 10000").map { row throws(DatabaseError) in
            let (id, label, createdAt, revokedAt) = try row.decode(Int64.self, String.self, String.self, String?.self)
            return Listing(id: id, label: label, createdAt: createdAt, revokedAt: revokedAt)
        }
    }

    /// Writes the hashes of all live tokens to `path`, atomically, one hex hash a line.
    /// Returns how many were written.
    @discardableResult
    /// Throws a statement's `DatabaseError` or the file's `SystemError`.
    public static func writeCache(path: String, database: any SQLDatabase) throws -> Int {
        var hashes: [String] = []
        var lastID: Int64 = 0
        // Bounded batches, never the whole table at once.
        while true {
            let rows = try database.query("SELECT id, token_hash FROM APITokens WHERE revoked_at IS NULL AND id > \(lastID) ORDER BY id LIMIT 1000")
            for row in rows {
                let (id, hash) = try row.decode(Int64.self, [UInt8].self)
                lastID = id
                hashes.append(Hex.encode(hash))
            }
            if rows.count < 1000 { break }
        }
        let text = "# ENS API token hashes; written by ens-cron api-keys\n" + hashes.map { $0 + "\n" }.joined()
        try Files.writeAtomically(Array(text.utf8), to: path, mode: 0o640)
        return hashes.count
    }
}

/// The responders' view of valid tokens: the hashes from the cache file, reloaded when
/// the file changes (checked with one stat call every `auth.refresh_seconds`), so
/// authentication costs no database round trip.
public final class APITokenSet: Sendable {
    private struct State {
        var hashes: [[UInt8]] = []
        var signature: (inode: UInt64, modified: Int64, size: Int64)?
        var lastCheck: UInt64 = 0
    }

    private let path: String
    private let checkIntervalMilliseconds: UInt64
    private let state: SynchronizedBox<State>

    public init(path: String, checkInterval: Duration) {
        self.path = path
        self.checkIntervalMilliseconds = UInt64(max(checkInterval.wholeMilliseconds, 1000))
        self.state = SynchronizedBox(State())
    }

    /// Whether `token` is a live API token. Compares in constant time against every
    /// known hash, so timing says nothing about which (if any) matched.
    public func isValid(_ token: String?) -> Bool {
        guard let token, !token.isEmpty, token.utf8.count <= 256 else { return false }
        let candidate = APITokens.hash(token)
        if contains(candidate, in: currentHashes(maximumAge: checkIntervalMilliseconds)) { return true }
        // A token created since the last look (say by `ens-cron token create` a moment
        // ago) works at once: a miss looks at the file again. That is one stat call,
        // and the file is only re-read when it changed.
        return contains(candidate, in: currentHashes(maximumAge: 0))
    }

    private func contains(_ candidate: [UInt8], in hashes: [[UInt8]]) -> Bool {
        var found = false
        for hash in hashes where Digest.constantTimeEqual(hash, candidate) { found = true }
        return found
    }

    /// The number of tokens currently loaded.
    public var count: Int { currentHashes(maximumAge: checkIntervalMilliseconds).count }

    private func currentHashes(maximumAge: UInt64) -> [[UInt8]] {
        state.withLock { state in
            let now = MonotonicClock.milliseconds()
            if state.lastCheck != 0 && now &- state.lastCheck < maximumAge { return state.hashes }
            state.lastCheck = now
            let signature = Files.signature(path)
            if let signature, let old = state.signature, old == signature { return state.hashes }
            state.signature = signature
            state.hashes = Self.load(path)
            return state.hashes
        }
    }

    static func load(_ path: String) -> [[UInt8]] {
        guard let bytes = try? Files.read(path, limit: 8 << 20) else { return [] }
        return String(decoding: bytes, as: UTF8.self)
            .split(separator: "\n")
            .filter { !$0.hasPrefix("#") }
            .compactMap { Hex.decode(String($0).trimmingCharacters(in: " \t\r")) }
            .filter { $0.count == 32 }
    }
}
