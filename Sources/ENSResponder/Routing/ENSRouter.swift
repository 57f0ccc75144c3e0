extension Router {
    /// Every endpoint of the device API, and Exchange's callback.
    public static func ens() -> Router {
        var router = Router()
        router.add("/alive", AliveEndpoint.route)
        router.add("/getpublickey", DeviceAPI.getPublicKey)
        router.add("/registerdevicev2", DeviceAPI.registerDevice)
        router.add("/unregister", DeviceAPI.unregister)
        router.add("/updatedevice", DeviceAPI.updateDevice)
        router.add("/getsubscriptionstatus", DeviceAPI.subscriptionStatusV1)
        router.add("/getsubscriptionstatusv2", DeviceAPI.subscriptionStatusV2)
        router.add("/updatesynckey", DeviceAPI.updateSyncKey)
        router.add(prefix: ExchangeCallback.prefix, ExchangeCallback.route)
        return router
    }
}
