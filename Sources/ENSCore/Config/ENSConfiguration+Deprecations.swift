public import Logging

extension ENSConfiguration {
    /// Says once, at start-up, which renamed keys the file still uses, so an operator
    /// can rename them before the old names go.
    public func logDeprecatedKeys(_ logger: Logger) {
        for (old, new) in deprecatedKeysUsed {
            logger.warning("deprecated configuration key: rename it", metadata: ["config.key": "\(old)", "config.use": "\(new)"])
        }
    }
}
