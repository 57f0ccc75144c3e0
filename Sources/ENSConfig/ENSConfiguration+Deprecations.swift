public import Logging

extension ENSConfiguration {
    /// Keys renamed since they were introduced, old name to new name: the old name still
    /// works, as the new one, and start-up logs that it is deprecated. Setting both is an
    /// error. Declared with the new key (`ConfigKey.formerly`), with a migration note that
    /// ens.conf(5) lists under DEPRECATED KEYS.
    public static let deprecatedKeys: [String: String] = Dictionary(uniqueKeysWithValues: ConfigSchema.aliases.map { ($0.old, $0.new) })

    /// Says once, at start-up, which renamed keys the file still uses, so an operator
    /// can rename them before the old names go.
    public func logDeprecatedKeys(_ logger: Logger) {
        for (old, new) in deprecatedKeysUsed {
            logger.warning("deprecated configuration key: rename it", metadata: ["config.key": "\(old)", "config.use": "\(new)"])
        }
    }
}
