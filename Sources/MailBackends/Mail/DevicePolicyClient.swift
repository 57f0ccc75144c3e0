internal import ENSConfig
internal import ENSHTTP
public import Curl
internal import ENSModel

/// Asks the SEG (secure email gateway) policy service whether a device may receive
/// mail notifications. Protocol (docs/exchange.md, "SEG policy"): `POST <url>` with
/// `{"deviceId": "<EAS device id>"}`; the service answers 200 `{"allowed": true|false}`.
/// Any other answer, or none within the timeout, counts as "unreachable", and the
/// configured `onError` decides (default: deny).
public final class DevicePolicyClient {
    public enum Decision: Sendable, Equatable { case allowed, denied, unreachable }

    private let url: String
    private let http: HTTPClient

    public init(url: String, caBundlePath: String?, timeout: Duration) throws(CurlError) {
        self.url = url
        http = try HTTPClient(configuration: HTTPClientConfiguration(
            caBundlePath: caBundlePath, connectTimeout: min(timeout, .seconds(3)), totalTimeout: timeout, preferHTTP2: false
        ))
    }

    public func decision(deviceID: String) -> Decision {
        var body = JSONObjectWriter()
        body.add("deviceId", deviceID)
        guard let response = try? http.send(HTTPRequest(method: .post, url: url,
                                                        headers: [("Content-Type", "application/json")], body: body.finished())),
              response.status == 200,
              case .object(let members)? = try? JSONParser.parse(response.body),
              case .bool(let allowed)? = members["allowed"] else { return .unreachable }
        return allowed ? .allowed : .denied
    }
}

extension RequestContext {
    /// This thread's SEG policy client; nil when no policy service is configured.
    func policyClient() throws -> DevicePolicyClient? {
        let policy = settings.policy
        guard !policy.url.isEmpty else { return nil }
        return try threadState(DevicePolicyClient.self) {
            try DevicePolicyClient(url: policy.url, caBundlePath: policy.caFile, timeout: policy.timeout)
        }
    }
}
