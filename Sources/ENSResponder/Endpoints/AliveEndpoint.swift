internal import ENSHTTP
internal import MailBackends
/// `GET|HEAD /alive`: 200 Alive when this responder can query MariaDB, else 503.
enum AliveEndpoint {
    static let route = Route(methods: ["GET"], requiresAPIToken: false) { _, context in
        guard context.databaseIsHealthy() else { throw APIError.serviceUnavailable }
        return aliveResponse
    }

    private static let aliveResponse = APIResponse.ok(.alive)
}
