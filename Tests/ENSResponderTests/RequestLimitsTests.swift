import ENSHTTP
import ENSConfig
import ENSTestSupport
@testable import ENSResponder
import Foundation
import MariaDB
import Testing
@testable import MailBackends

/// nginx's limits applied by the responders (RequestLimits): the same leaky bucket as
/// limit_req with nodelay, per zone and key, in a table that two mappings (two
/// processes) share, which never holds an address.
struct RequestLimitsTests {
    static func table(_ directory: URL, mode: RequestLimitsMode = .always,
                      configuration: ENSConfiguration = ENSConfiguration()) throws -> RequestLimits {
        try RequestLimits.file(path: directory.path + "/limits.table", mode: mode, rates: RequestLimits.rates(configuration))
    }

    /// nginx lets burst + 1 through at once (the first request leaves no excess), then
    /// refuses until the bucket has drained one request's worth at the rate.
    @Test func aBurstThenTheRateAsNginxCountsThem() throws {
        try withTemporaryDirectory { directory in
            let limits = try Self.table(directory)  // the device API: 20 r/s, burst 100
            let now: UInt64 = 1_000_000
            let first = (0..<110).map { _ in limits.refusal(path: "/alive", address: "192.0.2.7", now: now) == nil }
            #expect(first.prefix(101).allSatisfy { $0 } && first.dropFirst(101).allSatisfy { !$0 }, "\(first.filter { $0 }.count) passed")
            // Refused requests are not counted: 50 ms later one more (20 r/s) passes, then none.
            #expect(limits.refusal(path: "/alive", address: "192.0.2.7", now: now + 49) != nil)
            #expect(limits.refusal(path: "/alive", address: "192.0.2.7", now: now + 50) == nil)
            #expect(limits.refusal(path: "/alive", address: "192.0.2.7", now: now + 50) != nil)
            // Drained entirely after 5 s: a whole burst again.
            let later = (0..<102).map { _ in limits.refusal(path: "/alive", address: "192.0.2.7", now: now + 5100) == nil }
            #expect(later.filter { $0 }.count == 101)
        }
    }

    /// Two processes read the clock, then take the lock in the other order: the request
    /// stamped earlier is still counted against the same bucket, not as a new key.
    @Test func aRequestStampedEarlierThanTheLastOneCountedStillCounts() throws {
        try withTemporaryDirectory { directory in
            let limits = try Self.table(directory)  // the device API: 20 r/s, burst 100
            let now: UInt64 = 2_000_000
            #expect((0..<101).allSatisfy { _ in limits.refusal(path: "/alive", address: "192.0.2.8", now: now) == nil })
            #expect(limits.refusal(path: "/alive", address: "192.0.2.8", now: now - 3) != nil, "an earlier stamp drains nothing")
            #expect(limits.refusal(path: "/alive", address: "192.0.2.8", now: now) != nil)
            #expect(limits.refusal(path: "/alive", address: "192.0.2.8", now: now + 50) == nil, "the newest stamp was kept")
        }
    }

    /// The highest configurable rate after a long quiet spell: the bucket has drained,
    /// and the arithmetic does not overflow.
    @Test func aLongQuietSpellAtTheHighestRateDrainsTheBucket() throws {
        try withTemporaryDirectory { directory in
            var configuration = ENSConfiguration()
            configuration.limits.callbackHostRate = 100_000_000
            configuration.limits.callbackHostBurst = 0
            let limits = try Self.table(directory, configuration: configuration)
            #expect(limits.take(.callbackHosts, "192.0.2.9", now: 1000))
            #expect(!limits.take(.callbackHosts, "192.0.2.9", now: 1000))
            #expect(limits.take(.callbackHosts, "192.0.2.9", now: 1000 + 400 * 86_400_000))
        }
    }

    /// One address over its limit does not touch another's; the answer is nginx's JSON 429.
    @Test func oneAddressOverItsLimitLeavesTheOthersAlone() throws {
        try withTemporaryDirectory { directory in
            let limits = try Self.table(directory)
            for _ in 0..<101 { #expect(limits.refusal(path: "/getsubscriptionstatusv2", address: "198.51.100.1", now: 5000) == nil) }
            let refused = try #require(limits.refusal(path: "/getsubscriptionstatusv2", address: "198.51.100.1", now: 5000))
            #expect(refused.response.status == 429)
            #expect(String(decoding: refused.response.cgiBytes(includeBody: true), as: UTF8.self).contains(#""responseCode":"TooManyRequests""#))
            for other in ["198.51.100.2", "2001:db8::1", "198.51.100.10"] {
                #expect(limits.refusal(path: "/getsubscriptionstatusv2", address: other, now: 5000) == nil, "\(other)")
            }
        }
    }

    /// The zones of nginx/ens-locations.conf: /getpublickey has its own (30 a minute,
    /// burst 30) inside the device API's; callbacks are limited per URL and per
    /// address; Graph refuses with 503; /metrics is not limited.
    @Test func eachPathHasNginxsZones() throws {
        try withTemporaryDirectory { directory in
            let limits = try Self.table(directory)
            let keys = (0..<40).map { _ in limits.refusal(path: "/getpublickey", address: "203.0.113.5", now: 9000) == nil }
            #expect(keys.filter { $0 }.count == 31)
            #expect(limits.refusal(path: "/alive", address: "203.0.113.5", now: 9000) == nil, "the API zone still has room")
            // A callback URL: 10 r/s, burst 100; another URL from the same address is not refused.
            let callbacks = (0..<120).map { _ in limits.refusal(path: "/ews/k2.AAAA", address: "203.0.113.9", now: 9000) }
            #expect(callbacks.filter { $0 == nil }.count == 101)
            #expect(callbacks.last??.response.status == 429)
            #expect(limits.refusal(path: "/ews/k2.AAAB", address: "203.0.113.9", now: 9000) == nil)
            let graph = (0..<220).map { _ in limits.refusal(path: "/graph/r2.AAAA", address: "203.0.113.9", now: 9000) }
            #expect(graph.filter { $0 == nil }.count == 201)
            #expect(graph.last??.response.status == 503, "Graph retries a 503; a 4xx makes it back off")
            #expect((0..<500).allSatisfy { _ in limits.refusal(path: "/metrics", address: "127.0.0.1", now: 9000) == nil })
        }
    }

    /// Two mappings of one table (as two processes have) count together: the pool's
    /// workers, or two CGI runs, see one limit, not one each. The table holds only
    /// keyed hashes: no address and no callback path is in its bytes.
    @Test func twoMappingsShareOneCountAndHoldNoAddress() throws {
        try withTemporaryDirectory { directory in
            let first = try Self.table(directory)
            let second = try Self.table(directory)
            var passed = 0
            for index in 0..<120 where (index % 2 == 0 ? first : second).refusal(path: "/alive", address: "192.0.2.200", now: 77_000) == nil {
                passed += 1
            }
            #expect(passed == 101)
            #expect(second.refusal(path: "/ews/k2.SECRETPATH", address: "192.0.2.200", now: 77_000) == nil)
            let bytes = try Data(contentsOf: directory.appendingPathComponent("limits.table"))
            #expect(bytes.range(of: Data("192.0.2.200".utf8)) == nil)
            #expect(bytes.range(of: Data("SECRETPATH".utf8)) == nil)
        }
    }

    /// The dispatcher consults the limits first, before the method, the token and any
    /// handler, and (limits.enforce = asked) only when the web server asks with
    /// ENS_LIMITS=1, as Apache does and nginx, which limits by itself, does not.
    @Test func theDispatcherRefusesBeforeAnythingElseWhenAsked() throws {
        try withTemporaryDirectory { directory in
            var configuration = ENSConfiguration()
            configuration.limits.apiBurst = 2
            let limits = try Self.table(directory, mode: .whenAsked, configuration: configuration)
            var router = Router()
            let reached = LockedCounter()
            router.add("/alive", Route(methods: ["GET"], requiresAPIToken: false) { _, _ in
                reached.increment()
                return .ok(.alive)
            })
            let dispatcher = Dispatcher(router: router, maxBodyBytes: 1024, limits: limits, tokenCheck: { _ in false })
            let context = InProcess.context(database: Connection(configuration: MariaDBConfiguration(unixSocket: "/nonexistent",
                user: "nobody", password: "", database: nil)))
            func status(asked: Bool, address: String = "192.0.2.1", method: String = "GET") -> Int {
                let request = MemoryRequest(method: method, path: "/alive",
                                            variables: ["REMOTE_ADDR": address].merging(asked ? ["ENS_LIMITS": "1"] : [:]) { a, _ in a })
                dispatcher.respond(to: request, context: context)
                return request.status
            }
            #expect((0..<3).map { _ in status(asked: true) } == [200, 200, 200])
            #expect(status(asked: true) == 429)
            #expect(status(asked: true, method: "POST") == 429, "refused before the method check")
            #expect(status(asked: false) == 200, "nginx did not ask: its own limits apply")
            #expect(status(asked: true, address: "192.0.2.2") == 200)
            #expect(reached.value == 5)
        }
    }
}

final class LockedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func increment() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}
