public import ENSConfig
public import EWS
internal import POSIX

extension ExchangeSettings {
    /// Where and how Exchange servers are reached: CA bundle, test redirections, the
    /// destination policy, the proxy.
    public var client: EWSClientConfiguration {
        EWSClientConfiguration(
            caBundlePath: caFile, connectTo: connectTo, totalTimeout: timeout,
            destinationPolicy: DestinationPolicy(allowedNetworks: allowedNetworks, allowedHostSuffixes: allowedHosts), proxy: proxy
        )
    }
}
