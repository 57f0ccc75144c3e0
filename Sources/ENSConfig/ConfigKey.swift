/// One configuration key, declared once, beside the property it sets, in the file of the
/// component that owns it (`SettingsComponent`, Sources/ENSConfig/Components): its name,
/// what its value may be, its default (the property's own, written as the file would
/// write it), when a change takes effect, and its documentation. Parsing
/// (`ENSConfiguration(file:)`), reloads (`ConfigReload`, `ENSConfiguration.reloading`),
/// config/ens.conf.example and ens.conf(5) (`ConfigReference`) all read these
/// declarations; `make lint` fails when the committed example or man page differ from
/// what they generate.
public struct ConfigKey: Sendable {
    /// When a changed value takes effect in a running process.
    public enum Reload: Sendable, Equatable {
        /// At the next start (a SIGHUP reload names it as needing a restart).
        case restart
        /// Every ENS process applies it on SIGHUP.
        case everyProcess
        /// The responders (ens-fcgi) apply it on SIGHUP; the other processes read it at start.
        case responders
    }

    /// What the example file writes for the key.
    public enum Example: Sendable, Equatable {
        /// `key = <default>`.
        case defaultValue
        /// `key = <value>`: a value most hosts change (a URL naming the host).
        case value(String)
        /// `# key = <value>`: no default worth writing; the line shows the form.
        case commented(String)
    }

    public let name: String
    /// What the value may be, in words ("an integer from 1 to 64").
    public let summary: String
    /// The numbers allowed, for a number or a duration (in the unit its name says).
    public let range: ClosedRange<Int>?
    /// The default as the file writes it (empty: none), formatted from the component's
    /// typed default. nil: the key is unset by default and has no empty form (apns.key_id).
    public let defaultValue: String?
    public let reload: Reload
    /// One line: what the key is.
    public let doc: String
    /// More, for the example file and the man page: paragraphs separated by a blank line;
    /// lines indented by two spaces are kept as they are (examples).
    public let details: String
    public let example: Example
    /// Old names still accepted for this key, each logged as deprecated at start-up.
    public private(set) var aliases: [ConfigAlias] = []

    /// Parses a value and sets the property; errors name `key` (the name the file used).
    let apply: @Sendable (_ config: inout ENSConfiguration, _ key: String, _ value: String) throws(ConfigError) -> Void
    /// Whether two configurations hold the same value for this key.
    let sameValue: @Sendable (ENSConfiguration, ENSConfiguration) -> Bool
    /// Sets this key's value in `config` to the one in `source` (a reload).
    let copy: @Sendable (_ config: inout ENSConfiguration, _ source: ENSConfiguration) -> Void
    /// Whether the default, written out, parses back to itself.
    let defaultRoundTrips: @Sendable () -> Bool

    init<Component: SettingsComponent, Value>(
        _ name: String, _ property: any WritableKeyPath<Component, Value> & Sendable, _ value: ConfigValue<Value>,
        hasDefault: Bool, reload: Reload, example: Example, doc: String, details: String
    ) {
        let component = Component.configuration
        let builtIn = Component()[keyPath: property]
        self.name = name
        self.summary = value.summary
        self.range = value.range
        self.defaultValue = hasDefault ? value.format(builtIn) : nil
        self.reload = reload
        self.example = example
        self.doc = doc
        self.details = details
        apply = { config, key, text throws(ConfigError) in config[keyPath: component][keyPath: property] = try value.parse(key, text) }
        sameValue = { $0[keyPath: component][keyPath: property] == $1[keyPath: component][keyPath: property] }
        copy = { config, source in config[keyPath: component][keyPath: property] = source[keyPath: component][keyPath: property] }
        defaultRoundTrips = { !hasDefault || (try? value.parse(name, value.format(builtIn))) == builtIn }
    }

    /// This key, also accepted under an old name; `note` says why it changed and what to do.
    func formerly(_ old: String, _ note: String) -> ConfigKey {
        var key = self
        key.aliases.append(ConfigAlias(old: old, new: name, note: note))
        return key
    }
}

/// A renamed key: the old name still works, as the new one, and start-up logs that it is
/// deprecated. Setting both names is an error.
public struct ConfigAlias: Sendable, Equatable {
    public let old: String
    public let new: String
    /// The migration note: since when, and what to change.
    public let note: String
}

/// A family of keys whose name carries a name of the operator's choosing:
/// `apns.certificate.<bundle id>`, `graph.tenant.<name>.<field>`.
public struct ConfigPattern: Sendable {
    /// How the variable part of the name is checked.
    struct Instance: Sendable {
        /// "<bundle id>", "<name>".
        let placeholder: String
        /// What the variable part is called in an error about an unknown field ("tenant").
        let noun: String
        let isValid: @Sendable (String) -> Bool
        let problem: String
    }

    /// The name as documented: "graph.tenant.<name>.id".
    public var name: String { prefix + instance.placeholder + (field.map { "." + $0 } ?? "") }
    /// The fixed start of the name: "apns.certificate.", "graph.tenant.".
    public let prefix: String
    /// The fixed end after the instance's name, if any ("id" in graph.tenant.<name>.id).
    public let field: String?
    public let summary: String
    public let doc: String
    public let details: String
    /// Commented example lines for the example file (whole `key = value` lines).
    public let examples: [String]
    let instance: Instance
    let apply: @Sendable (_ config: inout ENSConfiguration, _ instance: String, _ key: String, _ value: String) throws(ConfigError) -> Void

    init<Component: SettingsComponent, Value>(
        _ prefix: String, _ instance: Instance, field: String? = nil, _ value: ConfigValue<Value>,
        doc: String, details: String = "", examples: [String] = [],
        apply: @escaping @Sendable (_ settings: inout Component, _ instance: String, _ value: Value) -> Void
    ) {
        let component = Component.configuration
        self.prefix = prefix
        self.instance = instance
        self.field = field
        self.summary = value.summary
        self.doc = doc
        self.details = details
        self.examples = examples
        self.apply = { config, name, key, text throws(ConfigError) in apply(&config[keyPath: component], name, try value.parse(key, text)) }
    }
}

/// The keys of one component, in the order the example file and the man page list them.
public struct ConfigSection: Sendable {
    public let title: String
    /// Said once before the section's keys (optional).
    public let intro: String
    public let keys: [ConfigKey]
    public let patterns: [ConfigPattern]

    public init(_ title: String, intro: String = "", keys: [ConfigKey], patterns: [ConfigPattern] = []) {
        self.title = title
        self.intro = intro
        self.keys = keys
        self.patterns = patterns
    }
}

/// Every declaration, and the look-ups parsing needs.
public enum ConfigSchema {
    /// The components' sections, in the order of the example file and the man page.
    public static let sections: [ConfigSection] = ENSConfiguration.components.map { $0.section }

    public static let keys: [ConfigKey] = sections.flatMap(\.keys)
    public static let patterns: [ConfigPattern] = sections.flatMap(\.patterns)
    public static let aliases: [ConfigAlias] = keys.flatMap(\.aliases)

    static let keysByName: [String: ConfigKey] = {
        var byName: [String: ConfigKey] = [:]
        for key in keys {
            precondition(byName[key.name] == nil, "configuration key \(key.name) is declared twice")
            byName[key.name] = key
        }
        for alias in aliases {
            precondition(byName[alias.old] == nil, "deprecated configuration key \(alias.old) is also declared as a key")
        }
        return byName
    }()

    static let aliasesByOldName: [String: ConfigAlias] = Dictionary(uniqueKeysWithValues: aliases.map { ($0.old, $0) })

    /// The keys (and their old names) that processes of `scope` apply on SIGHUP.
    public static func names(reloading scope: ConfigKey.Reload) -> Set<String> {
        Set(keys.filter { $0.reload == scope }.flatMap { [$0.name] + $0.aliases.map(\.old) })
    }

    /// The patterns whose prefix `key` starts with (one family), or nil.
    static func patternFamily(of key: String) -> [ConfigPattern]? {
        guard let prefix = patterns.first(where: { key.hasPrefix($0.prefix) })?.prefix else { return nil }
        return patterns.filter { $0.prefix == prefix }
    }

    /// Applies a key of a pattern family (`patternFamily(of:)`).
    static func apply(_ family: [ConfigPattern], key: String, value: String, to config: inout ENSConfiguration) throws(ConfigError) {
        let first = family[0]
        let rest = String(key.dropFirst(first.prefix.count))
        guard first.field != nil else {
            guard first.instance.isValid(rest) else { throw ConfigError(key: key, problem: first.instance.problem) }
            try first.apply(&config, rest, key, value)
            return
        }
        guard let dot = rest.lastIndex(of: "."), case let name = String(rest[..<dot]), first.instance.isValid(name) else {
            throw ConfigError(key: key, problem: first.instance.problem)
        }
        let field = String(rest[rest.index(after: dot)...])
        guard let pattern = family.first(where: { $0.field == field }) else {
            let fields = family.compactMap(\.field).joined(separator: ", ")
            throw ConfigError(key: key, problem: "is not a \(first.instance.noun) setting (\(fields))")
        }
        try pattern.apply(&config, name, key, value)
    }
}
