public import ENSHTTP
internal import MailBackends
extension Router {
    /// Every endpoint of the device API, every mail backend's callback location
    /// (`MailBackendTable`), and the metrics page.
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
        MailBackendTable.addRoutes(to: &router)
        router.add("/metrics", MetricsEndpoint.route)
        return router
    }
}
