import Curl
@testable import ENSStore
import Foundation
import MariaDB
import Testing
@testable import ENSMetrics

/// GET /metrics through nginx (and Apache): the sum of every process's counters in the
/// Prometheus text format, plus the subscription and device gauges `ens-cron gauges`
/// last stored; only for a scraper with the bearer token (metrics.token_file).
@Suite(.serialized, .enabled(if: TestStack.isRunning, "needs the stack scripts/test.sh starts"))
struct MetricsEndpointTests {
    func value(_ text: String, _ series: String) -> Double? {
        text.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
    }

    @Test func countsRequestsAcrossWorkersAndReportsTheSender() throws {
        let before = try TestStack.metrics()
        #expect(before.status == 200)
        #expect(before.header("Content-Type")?.hasPrefix("text/plain; version=0.0.4") == true)
        let series = #"ens_http_requests_total{endpoint="/alive",code="200"}"#
        let start = value(before.bodyText, series) ?? 0
        for _ in 0..<20 { #expect(try TestStack.get("/alive").status == 200) }
        // Each process writes its file once a second.
        var text = ""
        #expect(try TestStack.eventually(within: 5) {
            text = try TestStack.metrics().bodyText
            return (value(text, series) ?? 0) >= start + 20
        })
        #expect(text.contains("# TYPE ens_http_request_duration_seconds histogram"))
        #expect(text.contains(#"ens_http_request_duration_seconds_bucket{endpoint="/alive",le="+Inf"}"#))
        #expect(value(text, "ens_push_spool_depth") != nil)
        #expect(value(text, #"ens_subscriptions{state="healthy"}"#) != nil)
        #expect(value(text, #"ens_devices{state="enabled"}"#) != nil)
        // Two responder processes and ens-sender.
        #expect((value(text, "ens_metrics_sources") ?? 0) >= 3)
        // Callback paths carry sealed tokens: only the route is ever a label.
        #expect(!text.contains(#"endpoint="/ews/1"#) && !text.split(separator: "\n").contains { $0.contains("endpoint=\"/ews/")
            && !$0.contains("endpoint=\"/ews/\"") })
        // An unknown path is one label, not one per path.
        _ = try TestStack.post("/ews/nope", body: Array("<x/>".utf8), contentType: "text/xml")
        #expect(!text.contains("nope"))
    }

    /// Every process reports when it started, and every family the endpoint renders is
    /// declared (so has HELP and TYPE lines).
    @Test func everyProcessHasAStartTimeAndEveryFamilyIsDeclared() throws {
        let text = try TestStack.metrics().bodyText
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
        for needed in ["ens_http_requests_total", "ens_push_spool_depth", "ens_push_paused_credentials",
                       "ens_subscriptions", "process_start_time_seconds"] {
            #expect(names.contains(needed), "the dashboard shows \(needed)")
        }
    }

    @Test func onlyGetIsAllowed() throws {
        let response = try TestStack.post("/metrics", body: [], contentType: nil)
        #expect(response.status == 405)
    }

    /// The endpoint had no authentication of its own: anything that reached it (a process
    /// on the host, a proxy in front) read how busy the service is and how many users it
    /// has. Without the token, with a wrong one (same length, last character changed),
    /// with another scheme or the token alone: 401 and not one series.
    @Test func aScrapeWithoutTheBearerTokenIsRefused() throws {
        let token = TestStack.metricsToken
        #expect(token.count >= 32)
        let last = token.last == "0" ? "1" : "0"
        for authorization in [nil, "Bearer " + token.dropLast() + last, "Bearer ", "Basic " + token, token, "Bearer " + token + "x"] as [String?] {
            let refused = try TestStack.metrics(authorization: authorization)
            #expect(refused.status == 401, "\(authorization.map { String($0.prefix(8)) } ?? "none")")
            #expect(refused.json["responseCode"] == "Unauthorized")
            #expect(!refused.bodyText.contains("ens_"))
        }
        #expect(try TestStack.metrics(authorization: nil).header("www-authenticate")?.hasPrefix("Bearer") == true)
        let granted = try TestStack.metrics(authorization: "bearer " + token)
        #expect(granted.status == 200 && granted.bodyText.contains("ens_http_requests_total"))
    }

    /// A scrape used to count EnsSubscriptionInfo and Devices in full. It reads what
    /// `ens-cron gauges` stored instead: after a count the gauges match the tables, and
    /// a value changed in MetricGauges is what the next scrape shows (nothing recounted).
    @Test func theGaugesAreWhatTheCronJobLastCounted() throws {
        let database = try TestStack.serviceConnection()
        _ = try TestStack.run(TestStack.root + "/.build/debug/ens-cron", ["gauges", "--config", TestStack.configPath])
        let enabledDevices = try #require(try database.queryOne("SELECT COUNT(*) FROM Devices WHERE disabled_at IS NULL")?.int(0))
        var text = try TestStack.metrics().bodyText
        #expect(value(text, #"ens_devices{state="enabled"}"#) == Double(enabledDevices))
        let countedAt = try #require(value(text, "ens_gauges_counted_at_seconds"))
        #expect(abs(countedAt - Date().timeIntervalSince1970) < 300)

        let series = #"ens_devices{state="enabled"}"#
        try database.execute("UPDATE MetricGauges SET value = 987654321 WHERE series = \(series)")
        defer { _ = try? TestStack.run(TestStack.root + "/.build/debug/ens-cron", ["gauges", "--config", TestStack.configPath]) }
        text = try TestStack.metrics().bodyText
        #expect(value(text, #"ens_devices{state="enabled"}"#) == 987_654_321)
        _ = try TestStack.run(TestStack.root + "/.build/debug/ens-cron", ["gauges", "--config", TestStack.configPath])
        #expect(value(try TestStack.metrics().bodyText, #"ens_devices{state="enabled"}"#) == Double(enabledDevices))
    }
}
