public import MariaDB
public import ENSModel
public import ENSVault

/// A Dovecot server registered with ENS (`ens-cron dovecot add`): where its accounts'
/// passwords are proven, the domains it serves, what its TLS is trusted by, and which
/// hook credential is current.
public struct DovecotServer: Sendable, Equatable {
    /// How the server's push plugin is set up, which decides where an account's opt-in
    /// is written (docs/dovecot.md).
    public enum Driver: String, Sendable, CaseIterable {
        /// ENS's Lua script (`dovecot/ens-push.lua`) with ENS's own METADATA key.
        case lua
        /// Dovecot's ox driver with `user_from_metadata`: the key OX App Suite and
        /// EGroupware use too, so ENS's opt-in replaces theirs.
        case ox

        /// The server-level METADATA entry that holds the opt-in.
        public var metadataKey: String {
            switch self {
            case .lua: "/private/vendor/vendor.ens/push-token"
            case .ox: "/private/vendor/vendor.dovecot/http-notify"
            }
        }

        /// The entry's value for a routing token.
        public func metadataValue(token: String) -> String {
            switch self {
            case .lua: token
            case .ox: "user=" + token
            }
        }
    }

    public let name: String
    public let imapURL: String
    public let domains: [String]
    public let caPEM: [UInt8]?
    public let driver: Driver
    public let credentialSerial: Int

    public init(name: String, imapURL: String, domains: [String], caPEM: [UInt8]?, driver: Driver = .lua, credentialSerial: Int = 1) {
        self.name = name
        self.imapURL = imapURL
        self.domains = domains
        self.caPEM = caPEM
        self.driver = driver
        self.credentialSerial = credentialSerial
    }

    /// Whether `name` may name a server: 1–64 of `a-z 0-9 - _` (it is the hook's Basic
    /// user and part of every routing token's associated data).
    public static func isValidName(_ name: String) -> Bool {
        (1...64).contains(name.utf8.count)
            && name.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x5F }
    }

    /// `imaps://host[:port]/` or `imap://host[:port]/` as servers are stored: lowercase,
    /// one trailing slash, nothing after it; nil for anything else (a path, user info, a
    /// query, another scheme). How `ens-cron dovecot add` stores a URL and how a
    /// registration's `imapUrl` is compared with it.
    public static func normalizedIMAPURL(_ text: String) -> String? {
        let lower = text.lowercased()
        guard let scheme = ["imaps", "imap"].first(where: { lower.hasPrefix($0 + "://") }) else { return nil }
        var authority = lower.dropFirst(scheme.count + 3)
        if authority.hasSuffix("/") { authority = authority.dropLast() }
        guard !authority.isEmpty, !authority.contains(where: { "/@?#% ".contains($0) }) else { return nil }
        return scheme + "://" + authority + "/"
    }

    /// The host (lowercase, an IPv6 literal without brackets) and port its URL names,
    /// the scheme's default port when it names none: what a domain's SRV record or
    /// autoconfig file must name for discovery to pick this server.
    public var hostAndPort: (host: String, port: Int) {
        let imaps = imapURL.hasPrefix("imaps://")
        let authority = imapURL.dropFirst(imaps ? 8 : 7).prefix { $0 != "/" }
        let defaultPort = imaps ? 993 : 143
        if authority.hasPrefix("["), let close = authority.firstIndex(of: "]") {
            let host = String(authority[authority.index(after: authority.startIndex)..<close])
            let rest = authority[authority.index(after: close)...]
            return (host, rest.hasPrefix(":") ? Int(rest.dropFirst()) ?? defaultPort : defaultPort)
        }
        if let colon = authority.lastIndex(of: ":") {
            return (String(authority[..<colon]), Int(authority[authority.index(after: colon)...]) ?? defaultPort)
        }
        return (String(authority), defaultPort)
    }

    /// The server the devices of its accounts are bound to (`Devices.endpoint`).
    public var endpoint: String { "dovecot:\(name)" }

    /// Whether the server serves `address`'s domain.
    public func serves(address: String) -> Bool {
        guard let at = address.lastIndex(of: "@") else { return false }
        return domains.contains(address[address.index(after: at)...].lowercased())
    }
}

/// The `DovecotServers` table (migration 026), each row bound by a `RowBinding` MAC: a
/// row a database writer made or changed is refused (logged) and treated as absent, so
/// no password is proven at a host of theirs and no hook speaks for a domain with it.
public struct DovecotServerStore {
    public let database: any SQLDatabase
    let binding: RowBinding

    public init(database: any SQLDatabase, vault: Vault) {
        self.database = database
        binding = RowBinding(vault: vault)
    }

    /// Adds a server, or replaces the one of that name (its credential serial kept).
    public func save(_ server: DovecotServer, now: Timestamp) throws(DatabaseError) {
        precondition(DovecotServer.isValidName(server.name), "DovecotServerStore.save: an invalid name")
        let domains = server.domains.joined(separator: ",")
        let mac = binding.dovecotServer(name: server.name, imapURL: server.imapURL, domains: domains, caPEM: server.caPEM,
                                        driver: server.driver.rawValue, credentialSerial: server.credentialSerial)
        try database.execute("""
            INSERT INTO DovecotServers (name, imap_url, domains, ca_pem, driver, credential_serial, created_at, binding_mac)
            VALUES (\(server.name), \(server.imapURL), \(domains), \(server.caPEM), \(server.driver.rawValue), \(Int64(server.credentialSerial)),
                    \(now.databaseString), \(mac))
            ON DUPLICATE KEY UPDATE imap_url = VALUES(imap_url), domains = VALUES(domains), ca_pem = VALUES(ca_pem), driver = VALUES(driver),
                credential_serial = VALUES(credential_serial), binding_mac = VALUES(binding_mac)
            """)
    }

    /// Every server whose row is intact, by name.
    public func all() throws(DatabaseError) -> [DovecotServer] {
        try database.query("SELECT name, imap_url, domains, ca_pem, driver, credential_serial, binding_mac FROM DovecotServers ORDER BY name")
            .compactMapTyped { row throws(DatabaseError) in try intact(row) }
    }

    /// The server named `name`, if its row is intact.
    public func server(named name: String) throws(DatabaseError) -> DovecotServer? {
        guard DovecotServer.isValidName(name), let row = try database.queryOne("""
            SELECT name, imap_url, domains, ca_pem, driver, credential_serial, binding_mac FROM DovecotServers WHERE name = \(name)
            """) else { return nil }
        return try intact(row)
    }

    public func remove(named name: String) throws(DatabaseError) -> Bool {
        try database.execute("DELETE FROM DovecotServers WHERE name = \(name)").affectedRows > 0
    }

    private func intact(_ row: Row) throws(DatabaseError) -> DovecotServer? {
        let (name, url, domains, ca, driverName, serial, mac) = try row.decode(String.self, String.self, String.self, [UInt8]?.self, String.self,
                                                                               Int64.self, [UInt8]?.self)
        guard RowBinding.matches(mac, binding.dovecotServer(name: name, imapURL: url, domains: domains, caPEM: ca, driver: driverName,
                                                            credentialSerial: Int(serial))),
              let driver = DovecotServer.Driver(rawValue: driverName) else {
            RowIntegrity.refused("DovecotServers", row: "a server's")
            return nil
        }
        return DovecotServer(name: name, imapURL: url, domains: domains.split(separator: ",").map(String.init), caPEM: ca, driver: driver,
                             credentialSerial: Int(serial))
    }
}
