internal import ENSHTTP
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

extension RequestContext {
    /// This thread's Exchange client (one libcurl handle, connections kept alive).
    func ewsClient() throws -> EWSClient {
        try threadState(EWSClient.self) { try EWSClient(configuration: settings.exchange.client) }
    }
}
