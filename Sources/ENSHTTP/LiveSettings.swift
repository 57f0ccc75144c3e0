public import ENSConfig
import Synchronization

/// A responder process's configuration as the last reload left it: its threads pick up a
/// new version before their next request (one atomic load per request). A reload takes
/// over the keys declared `reload: .responders` (`ENSConfiguration.reloading`); the rest
/// wait for a restart.
public final class LiveSettings: Sendable {
    private let current: Mutex<ENSConfiguration>
    private let versionCounter = Atomic<Int>(0)

    public init(_ settings: ENSConfiguration) {
        current = Mutex(settings)
    }

    public var version: Int { versionCounter.load(ordering: .acquiring) }
    public var settings: ENSConfiguration { current.withLock { $0 } }

    public func update(_ change: (ENSConfiguration) -> ENSConfiguration) {
        current.withLock { $0 = change($0) }
        versionCounter.add(1, ordering: .releasing)
    }
}
