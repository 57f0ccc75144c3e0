internal import POSIX

extension ENSConfiguration {
    /// Whether `name` may name a host in SenderHosts (push.host_name): 1–64 characters
    /// of A–Z, a–z, 0–9, '.', '_' and '-', so it fits the column and is safe in a log
    /// line or a shell command `ens-cron status` suggests.
    public static func isValidSenderHostName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        return (1...64).contains(bytes.count) && bytes.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
        }
    }

    static func senderHostName(_ key: String, _ value: String) throws(ConfigError) -> String {
        guard isValidSenderHostName(value) else {
            throw ConfigError(key: key, problem: "must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'")
        }
        return value
    }

}

extension PushSettings {
    /// The name this host's sender writes its heartbeat under: push.host_name, else the
    /// system's host name, which must then pass the same check (set push.host_name if not).
    public func senderHostName() throws(ConfigError) -> String {
        if let hostName { return hostName }
        let system = ProcessInfoLite.hostName
        guard ENSConfiguration.isValidSenderHostName(system) else {
            throw ConfigError(key: "push.host_name",
                              problem: "is not set and the system host name '\(system.prefix(80))' does not fit (1 to 64 characters of A-Z, a-z, " +
                                       "0-9, '.', '_' and '-'): set it")
        }
        return system
    }
}
