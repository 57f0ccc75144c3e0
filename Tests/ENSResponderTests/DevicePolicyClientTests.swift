import MailBackends
import Testing

/// The SEG policy client (MailBackends/Requests/DevicePolicyClient.swift) on its own;
/// the answers of a live policy service are shown by the integration suites.
struct DevicePolicyClientTests {
    /// No policy service answering means "unreachable" (policy.on_error decides).
    @Test func anUnreachablePolicyServiceIsReported() throws {
        let client = try DevicePolicyClient(url: "http://127.0.0.1:9/policy", caBundlePath: nil, timeout: .milliseconds(500))
        #expect(client.decision(deviceID: "ABC") == .unreachable)
    }
}
