/// The settings of one component (the responder pool, the database, Exchange, Graph,
/// ...): a struct whose properties carry their built-in defaults, and beside them the
/// keys of ens.conf that set them (`section`). A setting is declared once, in its
/// component's file under Sources/ENSConfig/Components; `ENSConfiguration` holds one
/// value of each component and lists them in `ENSConfiguration.components`.
public protocol SettingsComponent: Sendable {
    /// The built-in defaults.
    init()
    /// Where the component sits in the configuration (`\ENSConfiguration.exchange`).
    static var configuration: any WritableKeyPath<ENSConfiguration, Self> & Sendable { get }
    /// Its keys, in the order the example file and the man page list them.
    static var section: ConfigSection { get }
    /// Checks across keys, once the whole file has been applied; errors name a key.
    func check(_ file: ConfigFile) throws(ConfigError)
}

extension SettingsComponent {
    public func check(_ file: ConfigFile) throws(ConfigError) {}

    /// The key `name` sets `property`, whose value in `init()` is its default.
    /// `hasDefault: false`: unset by default, with no empty form (apns.key_id).
    static func key<Value>(
        _ name: String, _ property: any WritableKeyPath<Self, Value> & Sendable, _ value: ConfigValue<Value>, hasDefault: Bool = true,
        reload: ConfigKey.Reload = .restart, example: ConfigKey.Example = .defaultValue, doc: String, details: String = ""
    ) -> ConfigKey {
        ConfigKey(name, property, value, hasDefault: hasDefault, reload: reload, example: example, doc: doc, details: details)
    }
}

extension SettingsComponent {
    /// A family of keys whose name carries a name of the operator's choosing
    /// (`apns.certificate.<bundle id>`); `apply` sets what one of them says.
    static func pattern<Value>(
        _ prefix: String, _ instance: ConfigPattern.Instance, field: String? = nil, _ value: ConfigValue<Value>,
        doc: String, details: String = "", examples: [String] = [],
        apply: @escaping @Sendable (_ settings: inout Self, _ instance: String, _ value: Value) -> Void
    ) -> ConfigPattern {
        ConfigPattern(prefix, instance, field: field, value, doc: doc, details: details, examples: examples, apply: apply)
    }
}
