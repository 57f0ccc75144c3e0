import Curl
import Foundation
import Testing

/// GET /metrics through nginx: the sum of every process's counters in the Prometheus
/// text format, plus subscription and device gauges from MariaDB.
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct MetricsEndpointTests {
    func value(_ text: String, _ series: String) -> Double? {
        text.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
    }

    @Test func countsRequestsAcrossWorkersAndReportsTheSender() throws {
        let before = try TestStack.get("/metrics")
        #expect(before.status == 200)
        #expect(before.header("Content-Type")?.hasPrefix("text/plain; version=0.0.4") == true)
        let series = #"ens_http_requests_total{endpoint="/alive",code="200"}"#
        let start = value(before.bodyText, series) ?? 0
        for _ in 0..<20 { #expect(try TestStack.get("/alive").status == 200) }
        // Each process writes its file once a second.
        var text = ""
        #expect(try TestStack.eventually(within: 5) {
            text = try TestStack.get("/metrics").bodyText
            return (value(text, series) ?? 0) >= start + 20
        })
        #expect(text.contains("# TYPE ens_http_request_duration_seconds histogram"))
        #expect(text.contains(#"ens_http_request_duration_seconds_bucket{endpoint="/alive",le="+Inf"}"#))
        #expect(value(text, "ens_push_spool_depth") != nil)
        #expect(value(text, #"ens_subscriptions{state="healthy"}"#) != nil)
        #expect(value(text, #"ens_devices{state="enabled"}"#) != nil)
        // Two responder processes and ens-apns.
        #expect((value(text, "ens_metrics_sources") ?? 0) >= 3)
        // Callback paths carry sealed tokens: only the route is ever a label.
        #expect(!text.contains(#"endpoint="/ews/1"#) && !text.split(separator: "\n").contains { $0.contains("endpoint=\"/ews/") && !$0.contains("endpoint=\"/ews/\"") })
        // An unknown path is one label, not one per path.
        _ = try TestStack.post("/ews/nope", body: Array("<x/>".utf8), contentType: "text/xml")
        #expect(!text.contains("nope"))
    }

    @Test func onlyGetIsAllowed() throws {
        let response = try TestStack.post("/metrics", body: [], contentType: nil)
        #expect(response.status == 405)
    }
}
