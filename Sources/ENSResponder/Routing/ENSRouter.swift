public import MailBackends
extension Router {
    /// Every endpoint of the device API, Exchange's callback, and the metrics page
    /// (nginx lets only loopback reach it).
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
        router.add("/updateprivacy", PrivateNotifications.updatePrivacy)
        router.add("/getnotification", PrivateNotifications.getNotification)
        router.add("/getnotificationhistory", PrivateNotifications.history)
        router.add("/marknotificationsread", PrivateNotifications.markRead)
        let ews = EWSNotifications()
        router.add(prefix: ews.pathPrefix, MailCallback.route(ews))
        router.add(prefix: GraphNotifications.pathPrefix, GraphNotifications.route)
        router.add("/metrics", MetricsEndpoint.route)
        return router
    }
}
