import ENSHTTP
import ENSTestSupport
@testable import ENSResponder
import Foundation
import MariaDB
import Synchronization
import Testing
@testable import MailBackends
@testable import ENSConfig
@testable import ENSStore

/// The checks every endpoint shares, in their fixed order (404, 405, 401, 413, 415,
/// 400), run in-process: a MemoryRequest instead of nginx, test routes instead of the
/// device API, and a database that is never reached (each case fails before a handler
/// would need it, or the handler throws what a database would).
struct DispatcherTests {
    /// Routes that record the request they were handed.
    final class Probe: Sendable {
        let seen = Mutex<[Request]>([])

        var router: Router {
            var router = Router()
            router.add("/form", Route(methods: ["POST"], requiresAPIToken: true) { request, _ in
                self.seen.withLock { $0.append(request) }
                return .ok(.updateSuccess, [("echo", request.parameters["name"] ?? "")])
            })
            router.add("/open", Route(methods: ["GET"], requiresAPIToken: false) { request, _ in
                self.seen.withLock { $0.append(request) }
                return .ok(.alive)
            })
            router.add(prefix: "/xml/", Route(methods: ["POST"], requiresAPIToken: false, body: .xml(limit: 64)) { request, _ in
                self.seen.withLock { $0.append(request) }
                return .ok(.updateSuccess)
            })
            router.add("/lost", Route(methods: ["POST"], requiresAPIToken: false) { _, _ in
                throw MariaDBError.connectionLost(during: "query")
            })
            router.add("/broken", Route(methods: ["POST"], requiresAPIToken: false) { _, _ in
                throw Secret(text: "password=hunter2")
            })
            return router
        }
    }

    struct Secret: Error, CustomStringConvertible {
        let text: String
        var description: String { text }
    }

    let probe = Probe()
    let context = InProcess.context(database: Connection(configuration: MariaDBConfiguration(unixSocket: "/nonexistent", user: "nobody",
                                                                                             password: "", database: nil)))

    func send(_ method: String, _ path: String, token: String? = InProcess.apiToken, contentType: String? = "application/json",
              body: String = "", variables: [String: String] = [:]) -> MemoryRequest {
        let request = MemoryRequest(method: method, path: path, headers: token.map { ["ApiToken": $0] } ?? [:], contentType: contentType,
                                    body: Array(body.utf8), variables: variables)
        InProcess.dispatcher(probe.router, maxBodyBytes: 100).respond(to: request, context: context)
        return request
    }

    @Test func anUnknownPathIs404WhateverElseIsWrong() {
        let answer = send("DELETE", "/nowhere", token: nil, contentType: "image/png", body: String(repeating: "x", count: 500))
        #expect(answer.status == 404 && answer.responseCode == "NotFound")
        #expect(probe.seen.withLock { $0.isEmpty })
    }

    @Test func aWrongMethodIs405WithAllowBeforeTheTokenIsChecked() {
        let answer = send("GET", "/form", token: nil)
        #expect(answer.status == 405 && answer.headers["allow"] == "POST")
    }

    @Test func aMissingOrWrongTokenIs401BeforeTheBodyIsLookedAt() {
        for token in [nil, "wrong", InProcess.apiToken + "x"] {
            let answer = send("POST", "/form", token: token, contentType: "image/png", body: String(repeating: "x", count: 500))
            #expect(answer.status == 401 && answer.responseCode == "Unauthorized")
        }
    }

    @Test func anOversizeBodyIs413BeforeItsTypeIsLookedAtAndWithoutReadingIt() {
        let answer = send("POST", "/form", contentType: "image/png", body: String(repeating: "x", count: 101))
        #expect(answer.status == 413)
        // A declared length over the limit is refused even when the body is short.
        let lying = send("POST", "/form", body: "{}", variables: ["CONTENT_LENGTH": "1000000"])
        #expect(lying.status == 413)
    }

    @Test func aWrongMediaTypeIs415BeforeTheBodyIsParsed() {
        #expect(send("POST", "/form", contentType: "text/plain", body: "{not json").status == 415)
        #expect(send("POST", "/xml/x", token: nil, contentType: "application/json", body: "<a/>").status == 415)
    }

    @Test func aMalformedBodyIs400() {
        for (type, body) in [("application/json", "{\"name\":"), ("application/json", "[1]"), ("application/x-www-form-urlencoded", "name=%zz")] {
            let answer = send("POST", "/form", contentType: type, body: body)
            #expect(answer.status == 400 && answer.responseCode == "InvalidRequest", "\(body)")
        }
        #expect(send("POST", "/form", body: "{}", variables: ["HTTP_BADGE": "maybe"]).status == 400)
        #expect(send("POST", "/form", body: "{}", variables: ["CONTENT_LENGTH": "-3"]).status == 400)
        #expect(probe.seen.withLock { $0.isEmpty })
    }

    @Test func aGoodRequestReachesItsHandlerWithItsParametersAndHeaders() {
        let json = send("POST", "/form", body: #"{"name":"value","n":3}"#, variables: ["HTTP_BADGE": "1"])
        #expect(json.status == 200 && json.json["echo"] == "value")
        let form = send("POST", "/form", contentType: "application/x-www-form-urlencoded; charset=utf-8", body: "name=a%20b")
        #expect(form.json["echo"] == "a b")
        let seen = probe.seen.withLock { $0 }
        #expect(seen.count == 2 && seen[0].badge == true && seen[0].parameters["n"] == "3" && seen[1].badge == nil)
    }

    @Test func headAnswersLikeGetWithoutABody() {
        let get = send("GET", "/open", token: nil, contentType: nil)
        let head = send("HEAD", "/open", token: nil, contentType: nil)
        #expect(get.status == 200 && head.status == 200 && !get.responseBody.isEmpty && head.responseBody.isEmpty)
        #expect(head.headers["content-length"] == get.headers["content-length"])
    }

    @Test func anXMLRouteGetsItsRawBodyWithinItsOwnLimit() {
        #expect(send("POST", "/xml/a", token: nil, contentType: "text/xml; charset=utf-8", body: "<a/>").status == 200)
        #expect(probe.seen.withLock { $0.last?.body } == Array("<a/>".utf8))
        #expect(send("POST", "/xml/a", token: nil, contentType: "text/xml", body: String(repeating: "x", count: 65)).status == 413)
        #expect(send("POST", "/xml/a", token: nil, contentType: "text/xml", body: "").status == 400)
    }

    @Test func aLostDatabaseIs503AndAnyOtherFailureAGeneric500() {
        #expect(send("POST", "/lost", token: nil, body: "{}").status == 503)
        let broken = send("POST", "/broken", token: nil, body: "{}")
        #expect(broken.status == 500 && broken.responseCode == "InternalError")
        #expect(!broken.responseBody.contains("hunter2"))
    }
}

/// The dispatcher routes a request to its user's shard before the handler, and answers
/// 503 for a bucket being moved without reaching any database.
@Suite struct ShardRoutingTests {
    /// A map whose shard 1 (buckets 800-fff) sits where nothing listens: a request
    /// routed there fails to connect, so reaching the 503 proves no statement ran.
    static func context(_ mapText: String) throws -> RequestContext {
        let base = DatabaseSettings(unixSocket: "/nonexistent/mysqld.sock", user: "ens_service", password: "x", database: "ens")
        let shards = ShardConnections(ShardDatabases(map: try ShardMap(parsing: mapText), base: base))
        let plain = InProcess.context(database: shards.global)
        return RequestContext(settings: plain.settings, services: plain.services, shards: shards, logger: plain.logger)
    }

    static let shard1User = "abc" + String(repeating: "0", count: 61)
    static let shard0User = "123" + String(repeating: "0", count: 61)

    @Test func aFrozenBucketIsAnswered503WithRetryAfter() throws {
        let context = try Self.context("shard 1 buckets 800-fff socket /nonexistent/mysqld.sock name s1\nfreeze abc\n")
        let answer = try InProcess.call("/getpublickey", ["userid": Self.shard1User], context: context)
        #expect(answer.status == 503 && answer.headers["retry-after"] == "30", "\(answer.headers)")
        #expect(context.shard == 1 && context.bucketIsFrozen)
    }

    @Test func eachRequestIsRoutedByItsUserAndOthersGoToShardZero() throws {
        let context = try Self.context("shard 1 buckets 800-fff socket /nonexistent/mysqld.sock name s1\n")
        _ = try InProcess.call("/getpublickey", ["userid": Self.shard1User], context: context)
        #expect(context.shard == 1 && context.bucketsInURLs && context.pushShard == 1)
        _ = try InProcess.call("/getpublickey", ["userid": Self.shard0User], context: context)
        #expect(context.shard == 0 && context.pushShard == nil)
        _ = try InProcess.call("/getpublickey", ["userid": Self.shard1User], context: context)
        _ = try InProcess.call("/getpublickey", ["userid": "not hex"], context: context)
        #expect(context.shard == 0, "an invalid identity goes to shard 0, where its handler refuses it")
        #expect(context.urlBucket(userID: Self.shard1User) == 0xabc)
    }

    @Test func withoutAMapNothingIsRoutedAndURLsNameNoBucket() throws {
        let context = InProcess.context(database: Databases.connection(DatabaseSettings(unixSocket: "/nonexistent", user: "u",
                                                                                        password: "", database: "ens")))
        _ = try InProcess.call("/getpublickey", ["userid": Self.shard1User], context: context)
        #expect(context.shard == 0 && !context.bucketsInURLs && context.urlBucket(userID: Self.shard1User) == nil)
    }
}
