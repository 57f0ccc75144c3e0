public import ENSConfig
public import ENSHTTP
public import ENSModel
public import ENSStore
public import ENSVault
public import SenderWire

extension SharedServices {
    /// The registrars of the configured mail backends, in `MailBackendTable` order.
    public var mailBackends: MailRegistrars {
        guard let registrars = backends[MailRegistrars.self] else {
            preconditionFailure("SharedServices: the mail backends' registrars were not set when the process started")
        }
        return registrars
    }

    /// Services with the mail backends' shared parts set: their registrars, and Graph's
    /// applications and tokens when a tenant is configured.
    public convenience init(vault: Vault, apiTokens: APITokenSet, privateKeys: PrivateKeyCache, liveness: LivenessRecorder,
                            mailBackends: MailRegistrars, graph: GraphServices? = nil,
                            registrationGate: ConcurrencyGate = ConcurrencyGate(.concurrent(1)),
                            callbackGate: ConcurrencyGate = ConcurrencyGate(.slow(2, afterMilliseconds: 1000)), metricsToken: String? = nil,
                            senderConnections: SenderConnections = SenderConnections()) {
        var backends = BackendServices()
        backends[MailRegistrars.self] = mailBackends
        backends[GraphServices.self] = graph
        self.init(vault: vault, apiTokens: apiTokens, privateKeys: privateKeys, liveness: liveness, backends: backends,
                  registrationGate: registrationGate, callbackGate: callbackGate, metricsToken: metricsToken,
                  senderConnections: senderConnections)
    }

    /// The services of one responder process, from its configuration: the pool's
    /// workers and a CGI run differ only in how much they keep (`keyCacheSize`) and how
    /// many threads the gates admit.
    public static func responder(_ configuration: ENSConfiguration, keyCacheSize: Int,
                                 concurrentRegistrations: Int, slowCallbacks: Int) throws -> SharedServices {
        let graph = try GraphServices.responder(configuration)
        return SharedServices(
            vault: Vault(masterKey: try configuration.secrets.masterKey()),
            apiTokens: APITokenSet(path: configuration.secrets.apiTokenCacheFile, checkInterval: configuration.secrets.apiTokenRefresh),
            privateKeys: PrivateKeyCache(capacity: keyCacheSize),
            liveness: LivenessRecorder(),
            mailBackends: MailBackendTable.registrars(configuration, graph: graph),
            graph: graph,
            registrationGate: ConcurrencyGate(.concurrent(concurrentRegistrations)),
            callbackGate: ConcurrencyGate(.slow(slowCallbacks, afterMilliseconds: 1000)),
            metricsToken: try configuration.metrics.token()
        )
    }
}
