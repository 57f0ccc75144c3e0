import ENSTestSupport
import Foundation
import Testing
@testable import ENSMetrics
@testable import ENSModel

/// The metrics files and their sum in the Prometheus text format.
@Suite struct MetricsTests {
    @Test func keysEscapeLabelValues() {
        #expect(MetricsText.key("m") == "m")
        #expect(MetricsText.key("m", [("a", "x\"y\\z\nw")]) == #"m{a="x\"y\\z\nw"}"#)
    }

    @Test func histogramsAreCumulativeAndRenderInOrder() {
        let counters = RequestCounters(labels: ["/alive", "other"])
        counters.record(label: "/alive", status: 200, seconds: 0.003)
        counters.record(label: "/alive", status: 200, seconds: 0.2)
        let recorder = MetricsRecorder(file: nil)
        recorder.publish([counters], baseline: [:])
        let text = MetricsText.render(recorder.snapshot)
        let lines = text.split(separator: "\n").map(String.init)
        #expect(lines.contains(#"ens_http_request_duration_seconds_bucket{endpoint="/alive",le="0.005"} 1"#))
        #expect(lines.contains(#"ens_http_request_duration_seconds_bucket{endpoint="/alive",le="0.25"} 2"#))
        #expect(lines.contains(#"ens_http_request_duration_seconds_bucket{endpoint="/alive",le="+Inf"} 2"#))
        #expect(lines.contains(#"ens_http_request_duration_seconds_count{endpoint="/alive"} 2"#))
        #expect(lines.contains(#"ens_http_requests_total{code="200",endpoint="/alive"} 2"#)
            || lines.contains(#"ens_http_requests_total{endpoint="/alive",code="200"} 2"#))
        #expect(lines.contains("# TYPE ens_http_request_duration_seconds histogram"))
        #expect(lines.contains("# TYPE ens_http_requests_total counter"))
        // Buckets of one series are in le order, +Inf last.
        let buckets = lines.filter { $0.hasPrefix("ens_http_request_duration_seconds_bucket") }
        #expect(buckets.last?.contains("+Inf") == true)
    }

    @Test func filesAddUpAndRestartsContinue() throws {
        try withTemporaryDirectory { directory in
            let a = MetricsRecorder(file: directory.appendingPathComponent("fcgi-0.prom").path)
            let b = MetricsRecorder(file: directory.appendingPathComponent("apns.prom").path)
            a.add("ens_http_requests_total{endpoint=\"/alive\",code=\"200\"}", 3)
            b.add("ens_http_requests_total{endpoint=\"/alive\",code=\"200\"}", 4)
            b.set("ens_push_spool_depth", 7)
            try a.write()
            try b.write()
            try directory.appendingPathComponent("notes.txt").write("ens_push_spool_depth 1000\n")  // not a .prom file
            let (values, sources, stale) = try MetricsText.collect(directory: directory.path)
            #expect(sources == 2 && stale == 0)
            #expect(values["ens_http_requests_total{endpoint=\"/alive\",code=\"200\"}"] == 7)
            #expect(values["ens_push_spool_depth"] == 7)
            // A replacement process continues from its predecessor's file.
            let again = MetricsRecorder(file: directory.appendingPathComponent("fcgi-0.prom").path)
            again.add("ens_http_requests_total{endpoint=\"/alive\",code=\"200\"}")
            #expect(again.snapshot["ens_http_requests_total{endpoint=\"/alive\",code=\"200\"}"] == 4)
        }
    }

    /// A process that is gone stops counting towards the gauges (a killed sender's spool
    /// depth is not today's), but its counters stay in the sums so they never go down.
    @Test func aStaleFileKeepsItsCountersButNotItsGauges() throws {
        try withTemporaryDirectory { directory in
            let live = MetricsRecorder(file: directory.appendingPathComponent("fcgi-0.prom").path)
            let gone = MetricsRecorder(file: directory.appendingPathComponent("apns.prom").path)
            let counter = MetricsText.key("ens_push_notifications_total", [("provider", "apns"), ("outcome", "delivered")])
            live.add(counter, 2)
            gone.add(counter, 5)
            gone.set("ens_push_spool_depth", 9)
            try live.write()
            try gone.write()
            // Seen from 11 s later: neither process has written since.
            let later = Timestamp(millisecondsSinceEpoch: Timestamp.now().millisecondsSinceEpoch + 11_000)
            let before = try MetricsText.collect(directory: directory.path)
            #expect(before.values["ens_push_spool_depth"] == 9 && before.sources == 2 && before.staleSources == 0)
            let (values, sources, stale) = try MetricsText.collect(directory: directory.path, now: later)
            #expect(sources == 0 && stale == 2)
            #expect(values[counter] == 7)
            #expect(values["ens_push_spool_depth"] == nil)
            #expect(values.keys.allSatisfy { !$0.hasPrefix("process_start_time_seconds") })
        }
    }

    /// Each process says when it started, under its own label, and a restart in the same
    /// slot replaces its predecessor's value instead of adding to it.
    @Test func eachProcessHasItsOwnStartTime() throws {
        try withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("fcgi-3.prom").path
            let first = MetricsRecorder(file: path, startedAt: Timestamp(millisecondsSinceEpoch: 1_700_000_000_500))
            try first.write()
            let restarted = MetricsRecorder(file: path, startedAt: Timestamp(millisecondsSinceEpoch: 1_800_000_000_000))
            try restarted.write()
            try MetricsRecorder(file: directory.appendingPathComponent("apns.prom").path,
                                startedAt: Timestamp(millisecondsSinceEpoch: 1_750_000_000_000)).write()
            let (values, _, _) = try MetricsText.collect(directory: directory.path)
            #expect(values[MetricsText.startTimeKey(process: "fcgi-3")] == 1_800_000_000)
            #expect(values[MetricsText.startTimeKey(process: "apns")] == 1_750_000_000)
            let text = MetricsText.render(values)
            #expect(text.contains("# TYPE process_start_time_seconds gauge"))
            #expect(text.contains(#"process_start_time_seconds{process="fcgi-3"} 1800000000"#))
        }
    }

    @Test func garbageLinesAreSkipped() {
        #expect(MetricsText.parse("a 1\nnot a number\n\nb{x=\"1\"} 2.5\nc NaNx\n") == ["a": 1, "b{x=\"1\"}": 2.5])
    }

    /// The rendered text parses with the reference parser (prometheus_client, installed
    /// by scripts/deps.sh), so a scraper accepts it.
    @Test func renderedTextParsesWithPrometheusClient() throws {
        let counters = RequestCounters(labels: ["/ews/", "other"])
        counters.record(label: "/ews/", status: 200, seconds: 0.02)
        let recorder = MetricsRecorder(file: nil)
        recorder.publish([counters], baseline: [:])
        recorder.add(MetricsText.key("ens_push_responses_total", [("provider", "apns"), ("code", "410"), ("reason", "Unregistered")]))
        recorder.set("ens_push_spool_depth", 3)
        let text = MetricsText.render(recorder.snapshot)
        try withTemporaryDirectory { directory in
            let file = directory.appendingPathComponent("m.txt")
            try file.write(text)
            let families = try Shell.python("""
                import sys
                from prometheus_client.parser import text_string_to_metric_families
                names = sorted(f.name + ":" + f.type for f in text_string_to_metric_families(open(sys.argv[1]).read()))
                print(" ".join(names))
                """, [file.path])
            #expect(families.contains("ens_http_request_duration_seconds:histogram"))
            #expect(families.contains("ens_push_responses:counter"))
            #expect(families.contains("ens_push_spool_depth:gauge"))
        }
    }

    @Test func threadCountersAddUpWithTheBaseline() {
        let labels = ["/alive", "/ews/", "other"]
        let first = RequestCounters(labels: labels)
        let second = RequestCounters(labels: labels)
        first.record(label: "/alive", status: 200, seconds: 0.0004)
        first.record(label: "/alive", status: 503, seconds: 0.03)
        second.record(label: "/alive", status: 200, seconds: 20)
        second.record(label: "/nope", status: 418, seconds: 0.002)
        let recorder = MetricsRecorder(file: nil)
        let key200 = MetricsText.key("ens_http_requests_total", [("endpoint", "/alive"), ("code", "200")])
        recorder.publish([first, second], baseline: [key200: 10])
        let values = recorder.snapshot
        #expect(values[key200] == 12)
        #expect(values[MetricsText.key("ens_http_requests_total", [("endpoint", "/alive"), ("code", "503")])] == 1)
        #expect(values[MetricsText.key("ens_http_requests_total", [("endpoint", "other"), ("code", "other")])] == 1)
        #expect(values[MetricsText.key("ens_http_request_duration_seconds_bucket", [("endpoint", "/alive"), ("le", "0.001")])] == 1)
        #expect(values[MetricsText.key("ens_http_request_duration_seconds_bucket", [("endpoint", "/alive"), ("le", "0.05")])] == 2)
        #expect(values[MetricsText.key("ens_http_request_duration_seconds_bucket", [("endpoint", "/alive"), ("le", "10")])] == 2)
        #expect(values[MetricsText.key("ens_http_request_duration_seconds_bucket", [("endpoint", "/alive"), ("le", "+Inf")])] == 3)
        #expect(values[MetricsText.key("ens_http_request_duration_seconds_count", [("endpoint", "/alive")])] == 3)
        #expect(values[MetricsText.key("ens_http_requests_total", [("endpoint", "/ews/"), ("code", "200")])] == nil)
    }

    @Test func keyCacheGivesWhatKeyMakesAndStaysBounded() {
        let cache = MetricsText.KeyCache(capacity: 4)
        for round in 0..<2 {
            for index in 0..<10 {
                let labels = [("provider", "apns"), ("reason", "R\(index)\"x")]
                #expect(cache.key("ens_push_responses_total", labels) == MetricsText.key("ens_push_responses_total", labels), "\(round) \(index)")
            }
        }
        // Same name and values, told apart by how they split into labels.
        #expect(cache.key("m", [("a", "b")]) != cache.key("m", [("ab", "")]))
    }

    /// No directory yet is no sources; a path that cannot be listed (here a file, since
    /// root reads any directory) is an error, not a host where nothing runs.
    @Test func aMissingDirectoryIsNoSourcesAndAnUnreadableOneAnError() throws {
        try withTemporaryDirectory { directory in
            let missing = try MetricsText.collect(directory: directory.appendingPathComponent("not-yet").path)
            #expect(missing.sources == 0 && missing.staleSources == 0 && missing.values.isEmpty)
            let file = directory.appendingPathComponent("a-file")
            try file.write("x")
            #expect(throws: (any Error).self) { try MetricsText.collect(directory: file.path) }
        }
    }
}
