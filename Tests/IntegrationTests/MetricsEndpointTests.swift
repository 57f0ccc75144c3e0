import Curl
import ENSCore
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

    /// Every process reports when it started, and every family the endpoint renders is
    /// declared (so has HELP and TYPE lines).
    @Test func everyProcessHasAStartTimeAndEveryFamilyIsDeclared() throws {
        let text = try TestStack.get("/metrics").bodyText
        let starts = text.split(separator: "\n").filter { $0.hasPrefix("process_start_time_seconds{process=") }
        #expect(starts.contains { $0.contains(#"process="apns""#) })
        #expect(starts.contains { $0.contains(#"process="fcgi-"#) })
        let now = Date().timeIntervalSince1970
        #expect(starts.allSatisfy { line in
            let value = Double(line.split(separator: " ").last ?? "") ?? 0
            return value > now - 86_400 && value <= now + 1
        })
        let rendered = Set(text.split(separator: "\n").compactMap { line -> String? in
            line.hasPrefix("# ") ? nil : String(line.prefix { $0 != "{" && $0 != " " })
        })
        let undeclared = rendered.filter { name in
            MetricsText.families[name] == nil
                && !["_bucket", "_sum", "_count"].contains { name.hasSuffix($0) && MetricsText.families[String(name.dropLast($0.count))] != nil }
        }
        #expect(undeclared.isEmpty, "rendered but not declared: \(undeclared.sorted())")
        #expect(text.contains("# TYPE process_start_time_seconds gauge"))
    }

    /// The Grafana dashboard in deploy/grafana only asks for series ENS exports: every
    /// metric name in every panel's expression is a declared family (or a histogram's
    /// part), and the dashboard covers the families an operator alerts on.
    @Test func theGrafanaDashboardNamesOnlyMetricsENSExports() throws {
        let path = TestStack.root + "/deploy/grafana/ens-overview.json"
        let object = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path)))
        let panels = try #require((object as? [String: Any])?["panels"] as? [[String: Any]])
        let expressions = panels.flatMap { ($0["targets"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String } }
        #expect(expressions.count >= panels.count)
        let names = Set(expressions.flatMap { expression in
            expression.matches(of: /\b(?:ens|process)_[a-z_]+\b/).map { String($0.output) }
        })
        #expect(!names.isEmpty)
        for name in names {
            let family = ["_bucket", "_sum", "_count"].first { name.hasSuffix($0) }.map { String(name.dropLast($0.count)) } ?? name
            #expect(MetricsText.families[family] != nil, "the dashboard asks for \(name), which ENS does not export")
        }
        for needed in ["ens_http_requests_total", "ens_push_spool_depth", "ens_push_paused_credentials", "ens_subscriptions", "process_start_time_seconds"] {
            #expect(names.contains(needed), "the dashboard shows \(needed)")
        }
    }

    @Test func onlyGetIsAllowed() throws {
        let response = try TestStack.post("/metrics", body: [], contentType: nil)
        #expect(response.status == 405)
    }
}
