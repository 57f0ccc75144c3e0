internal import ENSModel
internal import POSIX

/// What a key's value may be: its parser, the reverse (how a value is written in the
/// file, which gives each key's documented default from the component's typed one), and
/// the same in words for the documentation. Every error names the key the file used.
public struct ConfigValue<Value: Sendable & Equatable>: Sendable {
    let summary: String
    /// The numbers allowed, for a number or a duration.
    var range: ClosedRange<Int>?
    let parse: @Sendable (_ key: String, _ value: String) throws(ConfigError) -> Value
    /// The text that parses back to `value` (ConfigDeclarationTests checks each default).
    let format: @Sendable (_ value: Value) -> String

    init(_ summary: String, range: ClosedRange<Int>? = nil, format: @escaping @Sendable (Value) -> String,
         parse: @escaping @Sendable (_ key: String, _ value: String) throws(ConfigError) -> Value) {
        self.summary = summary
        self.range = range
        self.format = format
        self.parse = parse
    }

    /// Empty means none (nil); anything else must be a `wrapped`.
    static func optional<Wrapped>(_ wrapped: ConfigValue<Wrapped>) -> ConfigValue where Value == Wrapped? {
        ConfigValue("\(wrapped.summary), or empty for none", format: { $0.map(wrapped.format) ?? "" }) { key, value throws(ConfigError) in
            value.isEmpty ? nil : try wrapped.parse(key, value)
        }
    }

    /// One of a few words, each standing for a value.
    static func oneOf(_ choices: [(word: String, value: Value)]) -> ConfigValue {
        let words = choices.map(\.word)
        let phrase = words.count == 2 ? "\(words[0]) or \(words[1])" : "one of \(words.joined(separator: ", "))"
        let wordOf: @Sendable (Value) -> String = { value in
            guard let choice = choices.first(where: { $0.value == value }) else { preconditionFailure("\(value) is none of \(phrase)") }
            return choice.word
        }
        return ConfigValue(phrase, format: wordOf) { key, value throws(ConfigError) in
            guard let choice = choices.first(where: { $0.word == value }) else { throw ConfigError(key: key, problem: "must be \(phrase)") }
            return choice.value
        }
    }
}

extension ConfigValue where Value == String {
    /// A text value, written as it is.
    init(_ summary: String, parse: @escaping @Sendable (_ key: String, _ value: String) throws(ConfigError) -> Value) {
        self.init(summary, format: { $0 }, parse: parse)
    }
}

/// A time as a whole number of one unit (the key's name says which: `_ms`, `_seconds`, ...).
enum DurationUnit: String, Sendable {
    case milliseconds, seconds, minutes, hours, days

    func duration(_ count: Int) -> Duration {
        switch self {
        case .milliseconds: .milliseconds(count)
        case .seconds: .seconds(count)
        case .minutes: .minutes(count)
        case .hours: .hours(count)
        case .days: .days(count)
        }
    }

    /// How many whole units `duration` is (it is one: the defaults are whole units).
    func count(_ duration: Duration) -> Int {
        let unit = self.duration(1)
        let count = Int(duration / unit)
        precondition(self.duration(count) == duration, "\(duration) is not a whole number of \(rawValue)")
        return count
    }
}

extension ConfigValue where Value == Int {
    static func integer(_ range: ClosedRange<Int>) -> ConfigValue {
        ConfigValue("an integer from \(range.lowerBound) to \(range.upperBound)",
                    range: range, format: { String($0) }) { key, value throws(ConfigError) in
            try integer(key, value, range)
        }
    }

    static func integer(_ key: String, _ value: String, _ range: ClosedRange<Int>) throws(ConfigError) -> Int {
        guard let number = Int(value), range.contains(number) else {
            throw ConfigError(key: key, problem: "must be an integer from \(range.lowerBound) to \(range.upperBound), got '\(value.prefix(40))'")
        }
        return number
    }
}

extension ConfigValue where Value == Int32 {
    static func int32(_ range: ClosedRange<Int32>) -> ConfigValue {
        let wide = Int(range.lowerBound)...Int(range.upperBound)
        return ConfigValue("an integer from \(range.lowerBound) to \(range.upperBound)",
                           range: wide, format: { String($0) }) { key, value throws(ConfigError) in
            Int32(try ConfigValue<Int>.integer(key, value, wide))
        }
    }
}

extension ConfigValue where Value == Duration {
    static func duration(_ range: ClosedRange<Int>, _ unit: DurationUnit) -> ConfigValue {
        ConfigValue("\(unit.rawValue), from \(range.lowerBound) to \(range.upperBound)", range: range,
                    format: { String(unit.count($0)) }) { key, value throws(ConfigError) in
            unit.duration(try ConfigValue<Int>.integer(key, value, range))
        }
    }
}

extension ConfigValue where Value == UInt32 {
    static let octalMode = ConfigValue("an octal file mode such as 0660", format: { "0" + String($0, radix: 8) }) { key, value throws(ConfigError) in
        guard let mode = UInt32(value, radix: 8), mode <= 0o777 else {
            throw ConfigError(key: key, problem: "must be an octal file mode such as 0660")
        }
        return mode
    }
}

extension ConfigValue where Value == [DNSResolver.Nameserver] {
    static let nameservers = ConfigValue(
        "nameserver addresses (IP or IP:port), comma-separated, or empty",
        format: { $0.map(\.description).joined(separator: ", ") }
    ) { key, value throws(ConfigError) in
        var servers: [DNSResolver.Nameserver] = []
        for item in ConfigValue<[String]>.list(value) {
            guard let server = DNSResolver.Nameserver(item) else {
                throw ConfigError(key: key, problem: "must be IP addresses, each with an optional :port (\(item) is not)")
            }
            servers.append(server)
        }
        return servers
    }
}

extension ConfigValue where Value == Bool {
    static let boolean = ConfigValue("yes or no (also true/false, on/off, 1/0)", format: { $0 ? "yes" : "no" }) { key, value throws(ConfigError) in
        switch value.lowercased() {
        case "yes", "true", "on", "1": return true
        case "no", "false", "off", "0": return false
        default: throw ConfigError(key: key, problem: "must be yes or no")
        }
    }
}

extension ConfigValue where Value == String {
    static let path = ConfigValue("an absolute path") { key, value throws(ConfigError) in
        guard value.hasPrefix("/") else { throw ConfigError(key: key, problem: "must be an absolute path") }
        return value
    }

    /// Empty (off) or a `value`.
    static func emptyOr(_ value: ConfigValue) -> ConfigValue {
        ConfigValue("\(value.summary), or empty for none") { key, text throws(ConfigError) in
            text.isEmpty ? "" : try value.parse(key, text)
        }
    }

    static let nonEmpty = ConfigValue("a host name or address") { key, value throws(ConfigError) in
        guard !value.isEmpty else { throw ConfigError(key: key, problem: "must not be empty") }
        return value
    }

    static let identifier = ConfigValue("1 to 64 letters, digits or underscores") { key, value throws(ConfigError) in
        guard !value.isEmpty, value.count <= 64, value.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }) else {
            throw ConfigError(key: key, problem: "must be 1–64 letters, digits or underscores")
        }
        return value
    }

    static let httpsURL = ConfigValue("an https:// URL without a trailing slash") { key, value throws(ConfigError) in
        guard value.hasPrefix("https://"), value.utf8.count > 8, !value.hasSuffix("/") else {
            throw ConfigError(key: key, problem: "must be an https:// URL without a trailing slash")
        }
        return value
    }

    static let httpURL = ConfigValue("an http:// or https:// URL") { key, value throws(ConfigError) in
        guard value.hasPrefix("https://") || value.hasPrefix("http://"), !value.contains(" ") else {
            throw ConfigError(key: key, problem: "must be an http:// or https:// URL")
        }
        return value
    }

    /// The public https URL of one of ENS's own locations (`/ews/`, `/graph/`), or empty.
    static func callbackURL(path: String, location: String) -> ConfigValue {
        ConfigValue("an https:// URL ending in \(path), or empty") { key, value throws(ConfigError) in
            guard value.isEmpty || value.hasPrefix("https://"), value.isEmpty || value.hasSuffix(path), value.utf8.count < 200,
                  !value.contains(where: { $0 == " " || $0 == "?" || $0 == "#" }) else {
                throw ConfigError(key: key,
                                  problem: "must be the https:// URL of \(location), ending in \(path) (e.g. https://ens.example.com\(path))")
            }
            return value
        }
    }

    /// An HTTP proxy: `http://host:port` and nothing more (no user info: a password
    /// does not belong in this file; no path). Lowercased.
    static let proxyURL = ConfigValue("http://host:port") { key, value throws(ConfigError) in
        let problem = ConfigError(key: key,
            problem: "must be an http://host:port URL of an HTTP proxy (e.g. http://proxy.example.com:3128), without user info or path")
        let text = value.lowercased()
        guard text.hasPrefix("http://") else { throw problem }
        var authority = text.dropFirst(7)
        if authority.hasSuffix("/") { authority = authority.dropLast() }
        guard let colon = authority.lastIndex(of: ":"), let port = Int(authority[authority.index(after: colon)...]),
              (1...65535).contains(port) else { throw problem }
        let host = authority[..<colon]
        let bracketed = host.hasPrefix("[") && host.hasSuffix("]")
        guard !host.isEmpty, host.utf8.count <= 255, !host.contains(":") || bracketed,
              host.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || [0x2D, 0x2E, 0x5B, 0x5D, 0x3A].contains($0) }) else {
            throw problem
        }
        return "http://\(host):\(port)"
    }

    /// Apple's Key ID and Team ID: 10 characters, letters and digits.
    static let appleIdentifier = ConfigValue("the 10-character identifier from the Apple developer account") { key, value throws(ConfigError) in
        guard value.utf8.count == 10, value.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) else {
            throw ConfigError(key: key, problem: "must be the 10-character identifier from the Apple developer account")
        }
        return value
    }

    static let senderHostName = ConfigValue("1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'") { key, value throws(ConfigError) in
        try ENSConfiguration.senderHostName(key, value)
    }

    /// An Entra id: a GUID, lowercased.
    static let guid = ConfigValue("a GUID") { key, value throws(ConfigError) in
        let text = value.lowercased()
        let groups = text.split(separator: "-", omittingEmptySubsequences: false).map(\.utf8.count)
        guard groups == [8, 4, 4, 4, 12], text.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x66) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D }) else {
            throw ConfigError(key: key, problem: "must be a GUID (e.g. 72f988bf-86f1-41af-91ab-2d7cd011db47)")
        }
        return text
    }

    static let logLevel = ConfigValue.oneOf(["trace", "debug", "info", "notice", "warning", "error", "critical"].map { ($0, $0) })
}

extension ConfigValue where Value == [String] {
    /// A comma-separated list, entries trimmed, empty ones dropped.
    static func list(_ value: String) -> [String] {
        value.split(separator: ",").map { $0.trimmingCharacters(in: " \t") }.filter { !$0.isEmpty }
    }

    static let list = ConfigValue("a comma-separated list", format: { $0.joined(separator: ", ") }) { _, value in list(value) }

    /// Host names, lowercased; `what` says which in an error ("host names", "mail domains").
    static func hostNames(_ what: String, example: String) -> ConfigValue {
        ConfigValue("\(what), comma-separated", format: { $0.joined(separator: ", ") }) { key, value throws(ConfigError) in
            try list(value).map { text throws(ConfigError) in
                let host = text.lowercased()
                guard host.utf8.count <= 253, !host.hasPrefix("."), !host.hasSuffix("."), host.contains("."),
                      host.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x2E }) else {
                    throw ConfigError(key: key, problem: "must list \(what) (e.g. \(example)), got '\(text)'")
                }
                return host
            }
        }
    }
}

extension ConfigValue where Value == [IPNetwork] {
    static let networks = ConfigValue("networks in CIDR form, comma-separated",
                                      format: { $0.map(\.description).joined(separator: ", ") }) { key, value throws(ConfigError) in
        try ConfigValue<[String]>.list(value).map { text throws(ConfigError) in
            guard let network = IPNetwork(text) else {
                throw ConfigError(key: key, problem: "must list networks in CIDR form (e.g. 10.1.0.0/16, fd00::/8), got '\(text)'")
            }
            return network
        }
    }
}

extension ConfigValue where Value == PrivacyMode {
    static let privacyMode = ConfigValue.oneOf(PrivacyMode.floors.map { ($0.name, $0) })
}

extension ConfigValue where Value == [DatabaseEndpoint] {
    /// `host:port` entries, comma-separated: an IPv6 address in brackets, 3306 when the
    /// port is left out. Empty: none (db.host and db.port apply).
    static let endpoints = ConfigValue("host:port entries, comma-separated (at most 16; an IPv6 address in brackets)",
                                       format: { $0.map(\.description).joined(separator: ", ") }) { key, value throws(ConfigError) in
        let entries = ConfigValue<[String]>.list(value)
        guard entries.count <= 16 else { throw ConfigError(key: key, problem: "lists \(entries.count) servers; at most 16") }
        var parsed: [DatabaseEndpoint] = []
        for entry in entries {
            let bad = ConfigError(key: key, problem: "'\(entry.prefix(80))' is not host:port (an IPv6 address goes in brackets: [2001:db8::1]:3306)")
            var host = Substring(entry)
            var portText: Substring?
            if host.hasPrefix("[") {
                guard let close = host.firstIndex(of: "]") else { throw bad }
                let rest = host[host.index(after: close)...]
                host = host[host.index(after: host.startIndex)..<close]
                if !rest.isEmpty {
                    guard rest.hasPrefix(":") else { throw bad }
                    portText = rest.dropFirst()
                }
            } else if let colon = host.firstIndex(of: ":") {
                portText = host[host.index(after: colon)...]
                host = host[..<colon]
            }
            guard !host.isEmpty,
                  host.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: ",") && $0 != UInt8(ascii: "/") }) else { throw bad }
            var port = 3306
            if let portText {
                guard let number = Int(portText), (1...65535).contains(number) else { throw bad }
                port = number
            }
            parsed.append(.init(host: String(host), port: port))
        }
        return parsed
    }
}

extension ConfigPattern.Instance {
    /// An app's bundle id (iOS) or package name (Android) after the key's prefix.
    static let bundleID = ConfigPattern.Instance(
        placeholder: "<bundle id>", noun: "bundle",
        isValid: { id in !id.isEmpty && id.utf8.count <= 255 && !id.utf8.contains(where: { $0 < 0x21 || $0 > 0x7E }) },
        problem: "must end with a bundle id (e.g. apns.certificate.com.example.mail)"
    )

    /// A Graph tenant's name in `graph.tenant.<name>.<field>`.
    static let tenant = ConfigPattern.Instance(
        placeholder: "<name>", noun: "tenant",
        isValid: { name in
            !name.isEmpty && name.utf8.count <= 64
                && name.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x5F })
        },
        problem: "must be graph.tenant.<name>.<field>, the name in lowercase letters, digits, - and _ (e.g. graph.tenant.contoso.id)"
    )
}
