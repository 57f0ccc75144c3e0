extension Router {
    /// Every endpoint of the device API.
    public static func ens() -> Router {
        var router = Router()
        router.add("/alive", AliveEndpoint.route)
        return router
    }
}
