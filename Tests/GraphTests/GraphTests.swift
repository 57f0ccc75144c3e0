import ENSTestSupport
import Codecs
@testable import ENSConfig
@testable import ENSModel
@testable import ENSVault
@testable import ENSResponder
import Foundation
@testable import Graph
import OpenSSL
@testable import POSIX
import Testing
@testable import MailBackends

/// Graph's wire formats and ENS's own parts of the protocol, without a network: change
/// notification batches as Graph varies them, its timestamps, the notification URL's
/// routing token, the validation token's decoding, the per-mailbox gate, the tenant
/// configuration, and the client assertion — the last cross-checked with the openssl CLI.
struct GraphWireTests {
    let subscription = "7f105c7d-2dc5-4530-97cd-4e7af6534c07"

    func batch(_ items: [Any]) throws -> ChangeNotificationBatch {
        try ChangeNotificationBatch(json: Array(JSONSerialization.data(withJSONObject: ["value": items])))
    }

    @Test func changeNotificationsAreReadInBothResourceStyles() throws {
        let parsed = try batch([
            ["subscriptionId": subscription, "clientState": "cs", "changeType": "created", "tenantId": "t",
             "subscriptionExpirationDateTime": "2026-11-26T10:00:00.1234567+00:00",
             "resource": "Users/u-1/Messages/AAMkAGI2=", "resourceData": ["@odata.type": "#Microsoft.Graph.Message", "id": "AAMkAGI2="]],
            ["subscriptionId": subscription, "clientState": "cs", "changeType": "created",
             "resource": "Users('u-1')/messages('AAMk-Other=')"],
            ["subscriptionId": subscription, "clientState": "cs", "lifecycleEvent": "reauthorizationRequired"],
            ["subscriptionId": subscription, "lifecycleEvent": "missed"],
        ])
        #expect(parsed.items == [
            .created(subscriptionID: subscription, clientState: "cs", messageID: "AAMkAGI2="),
            .created(subscriptionID: subscription, clientState: "cs", messageID: "AAMk-Other="),
            .lifecycle(subscriptionID: subscription, clientState: "cs", event: .reauthorizationRequired),
            .lifecycle(subscriptionID: subscription, clientState: nil, event: .missed),
        ])
        #expect(parsed.unreadable == 0)
    }

    @Test func unreadableItemsAreCountedNotFatal() throws {
        let parsed = try batch([
            ["subscriptionId": subscription, "changeType": "updated", "resourceData": ["id": "x"]],
            ["changeType": "created", "resourceData": ["id": "x"]],
            ["subscriptionId": "has space", "changeType": "created", "resourceData": ["id": "x"]],
            ["subscriptionId": subscription, "lifecycleEvent": "somethingNew"],
            ["subscriptionId": subscription, "clientState": 5, "changeType": "created", "resourceData": ["id": "x"]],
            ["subscriptionId": subscription, "clientState": "cs", "changeType": "created", "resourceData": ["id": "ok"]],
            "not an object",
        ])
        #expect(parsed.items.count == 1 && parsed.unreadable == 6)
    }

    @Test func garbageIsRefusedWithAReason() {
        for body in ["", "{", "[]", #"{"value": 1}"#, #"{"value": {}}"#, "\u{0}"] {
            #expect(throws: ChangeNotificationBatch.Malformed.self, "\(body)") { try ChangeNotificationBatch(json: Array(body.utf8)) }
        }
        let many = "{\"value\": [" + Array(repeating: "{}", count: 1001).joined(separator: ",") + "]}"
        #expect(throws: ChangeNotificationBatch.Malformed.self) { try ChangeNotificationBatch(json: Array(many.utf8)) }
    }

    @Test func graphTimestampsParseWithSevenDecimalsAndOffsets() throws {
        let utc = try #require(Timestamp(isoString: "2026-11-24T18:10:09.1234567Z"))
        #expect(utc.isoString == "2026-11-24T18:10:09.123Z")
        #expect(Timestamp(isoString: "2026-11-24T23:40:09.123+05:30") == Timestamp(isoString: "2026-11-24T18:10:09.123Z"))
        #expect(Timestamp(isoString: "2026-11-24T18:10:09Z") == Timestamp(isoString: "2026-11-24T18:10:09.000Z"))
        #expect(Timestamp(isoString: "2026-11-24T18:10:09-01:00")?.isoString == "2026-11-24T19:10:09.000Z")
        for bad in ["2026-11-24 18:10:09Z", "2026-11-24T18:10:09", "2026-13-01T00:00:00Z", "2026-11-24T18:10:09.Z", "2026-11-24T18:10:09+5:30", ""] {
            #expect(Timestamp(isoString: bad) == nil, "\(bad)")
        }
    }

    @Test func routingTokensAuthenticateRecordAndGeneration() throws {
        let vault = Vault(masterKey: try AESGCMKey(bytes: Array(repeating: 7, count: 32)))
        // The URL's form since 2026-11-25: sealed, so neither record id nor generation shows.
        let sealed = RoutingToken(recordID: 42, generation: 3).path(vault: vault)
        #expect(sealed.hasPrefix("r2.") && sealed.utf8.count == 3 + 59 && !sealed.contains("/"))
        #expect(RoutingToken(path: sealed, vault: vault) == RoutingToken(recordID: 42, generation: 3))
        #expect(RoutingToken(path: RoutingToken(recordID: Int64(Int32.max) * 4, generation: 0).path(vault: vault), vault: vault)
                == RoutingToken(recordID: Int64(Int32.max) * 4, generation: 0))
        var flipped = Array(sealed.utf8)
        for index in [3, 10, 30, flipped.count - 2] {
            flipped = Array(sealed.utf8)
            flipped[index] = flipped[index] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            #expect(RoutingToken(path: String(decoding: flipped, as: UTF8.self), vault: vault) == nil, "byte \(index)")
        }
        for forged in ["r2.", "r2." + String(sealed.dropFirst(3).dropLast(4)), sealed + "AAAA", "r2.!!!!", "r3." + sealed.dropFirst(3)] {
            #expect(RoutingToken(path: forged, vault: vault) == nil, "\(forged)")
        }
        // Subscriptions created before carry the authenticated form, still read.
        let path = RoutingToken(recordID: 42, generation: 3).legacyPath(vault: vault)
        #expect(RoutingToken(path: path, vault: vault) == RoutingToken(recordID: 42, generation: 3))
        let parts = path.split(separator: "/").map(String.init)
        for forged in ["43/3/\(parts[2])", "42/4/\(parts[2])", "042/3/\(parts[2])",
                       "42/3/\(parts[2].dropLast())A", "42/3", "42/3/\(parts[2])/x", ""] {
            #expect(RoutingToken(path: forged, vault: vault) == nil, "\(forged)")
        }
        let other = Vault(masterKey: try AESGCMKey(bytes: Array(repeating: 8, count: 32)))
        #expect(RoutingToken(path: path, vault: other) == nil)
        #expect(RoutingToken(path: sealed, vault: other) == nil)
        // The clientState is derived, fits Graph's 128 characters, and differs per generation.
        let state = vault.graphClientState(recordID: 42, generation: 3)
        #expect(state.utf8.count <= 128 && state != vault.graphClientState(recordID: 42, generation: 4))
    }

    @Test func validationTokensAreDecodedOnce() {
        #expect(GraphNotifications.validationToken(in: "validationToken=a%2Bb%2Fc%20d%3A") == "a+b/c d:")
        #expect(GraphNotifications.validationToken(in: "x=1&validationToken=Validation%3A+Testing") == "Validation: Testing")
        #expect(GraphNotifications.validationToken(in: "") == nil)
        #expect(GraphNotifications.validationToken(in: "validationtoken=a") == nil)
        #expect(GraphNotifications.validationToken(in: "validationToken=%ZZ") == nil)
        #expect(GraphNotifications.validationToken(in: "validationToken=" + String(repeating: "a", count: 5000)) == nil)
    }

    /// Two gates on one slot directory (two responder processes): a Retry-After the one
    /// was told keeps the other from asking.
    @Test func aRetryAfterHoldsAcrossGatesOfOneHost() throws {
        let directory = NSTemporaryDirectory() + "gate-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let told = MailboxGate(limit: 4, hostSlots: try FileSlots(directory: directory, slots: 4))
        let other = MailboxGate(limit: 4, hostSlots: try FileSlots(directory: directory, slots: 4))
        #expect(other.withSlot(mailbox: "users/x", nowNanoseconds: 0) { true } == true)
        told.block(mailbox: "users/x", for: .seconds(30), nowNanoseconds: 0)
        #expect(other.withSlot(mailbox: "users/x", nowNanoseconds: 0) { true } == nil)
        #expect(other.withSlot(mailbox: "users/y",
            nowNanoseconds: 0) { true } == true || FileSlots.stableHash("users/x") % 1024 == FileSlots.stableHash("users/y") % 1024)
    }

    @Test func theMailboxGateAdmitsItsLimitAndHonoursRetryAfter() {
        let gate = MailboxGate(limit: 2)
        var depth = 0
        var third: Int? = 0
        gate.withSlot(mailbox: "m", nowNanoseconds: 0) {
            depth += 1
            gate.withSlot(mailbox: "m", nowNanoseconds: 0) {
                depth += 1
                third = gate.withSlot(mailbox: "m", nowNanoseconds: 0) { 3 }
            }
        }
        #expect(depth == 2 && third == nil, "a third request in flight is not admitted")
        #expect(gate.withSlot(mailbox: "other", nowNanoseconds: 0) { 1 } == 1)
        gate.block(mailbox: "m", for: .seconds(30), nowNanoseconds: 1_000_000_000)
        #expect(gate.withSlot(mailbox: "m", nowNanoseconds: 20_000_000_000) { 1 } == nil)
        #expect(gate.withSlot(mailbox: "m", nowNanoseconds: 32_000_000_000) { 1 } == 1)
    }

    /// One application token per tenant serves every request until five minutes before
    /// it expires; a token Graph refused is forgotten.
    @Test func applicationTokensAreReusedUntilTheMarginAndForgottenOnRefusal() {
        let tokens = GraphAppTokens()
        let expiry: Int64 = 10_000_000
        tokens.store(tenantID: "t1", token: "token-1", expiresAt: expiry)
        #expect(tokens.cached(tenantID: "t1", nowMilliseconds: 0) == "token-1")
        #expect(tokens.cached(tenantID: "t1", nowMilliseconds: expiry - 300_001) == "token-1")
        #expect(tokens.cached(tenantID: "t1", nowMilliseconds: expiry - 300_000) == nil, "renewed five minutes before expiry")
        #expect(tokens.cached(tenantID: "t2", nowMilliseconds: 0) == nil, "per tenant")
        tokens.forget(tenantID: "t1")
        #expect(tokens.cached(tenantID: "t1", nowMilliseconds: 0) == nil)
    }

    @Test func tenantsAreConfiguredCompletelyOrRefused() throws {
        let good = """
            graph.tenant.contoso.id = 72F988BF-86F1-41AF-91AB-2D7CD011DB47
            graph.tenant.contoso.domains = Contoso.com, contoso.onmicrosoft.com
            graph.tenant.contoso.client_id = 0e5a1c2b-3d4f-4a6b-8c9d-0e1f2a3b4c5d
            graph.tenant.contoso.certificate_file = /etc/ens/app.crt
            graph.tenant.contoso.key_file = /etc/ens/app.key
            """
        let tenants = try ENSConfiguration(file: ConfigFile(parsing: good)).graph.completeTenants()
        #expect(tenants.count == 1 && tenants[0].tenantID == "72f988bf-86f1-41af-91ab-2d7cd011db47" && tenants[0].domains == ["contoso.com",
            "contoso.onmicrosoft.com"])
        let incomplete = try ENSConfiguration(file: ConfigFile(parsing: "graph.tenant.x.id = 72f988bf-86f1-41af-91ab-2d7cd011db47"))
        #expect(throws: ConfigError.self) { try incomplete.graph.completeTenants() }
        let twice = good + "\n" + good.replacingOccurrences(of: "tenant.contoso.", with: "tenant.other.")
        #expect(throws: ConfigError.self) { try ENSConfiguration(file: ConfigFile(parsing: twice)).graph.completeTenants() }
        for bad in ["graph.tenant.x.id = not-a-guid", "graph.tenant.X.id = 72f988bf-86f1-41af-91ab-2d7cd011db47", "graph.tenant.x.color = red",
                    "graph.tenant.x.domains = localhost", "graph.callback_url = https://ens.example.com/ews/", "graph.subscription_minutes = 20000"] {
            #expect(throws: ConfigError.self, "\(bad)") { try ENSConfiguration(file: ConfigFile(parsing: bad)) }
        }
    }

    /// The client assertion Entra gets: header and claims as Microsoft documents them,
    /// the signature verified by `openssl dgst`, x5t equal to openssl's SHA-1 fingerprint.
    @Test func theClientAssertionVerifiesWithTheOpensslCLI() throws {
        try withTemporaryDirectory { directory in
            let key = directory.appendingPathComponent("app.key").path
            let certificate = directory.appendingPathComponent("app.crt").path
            _ = try Shell.run("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=ens-app -keyout \"$1\" -out \"$2\" 2>/dev/null",
                              [key, certificate])
            let application = try GraphApplication(settings: GraphTenantSettings(
                name: "t", tenantID: "72f988bf-86f1-41af-91ab-2d7cd011db47", domains: ["contoso.test"],
                clientID: "0e5a1c2b-3d4f-4a6b-8c9d-0e1f2a3b4c5d", certificateFile: certificate, keyFile: key))
            let audience = "https://login.microsoftonline.com/72f988bf-86f1-41af-91ab-2d7cd011db47/oauth2/v2.0/token"
            let jwt = try application.assertion(audience: audience, now: 1_800_000_000)
            let parts = jwt.split(separator: ".").map(String.init)
            try #require(parts.count == 3)
            let header = try #require(try JSONSerialization.jsonObject(with: Data(Base64.decodeURLSafe(parts[0]) ?? [])) as? [String: Any])
            let claims = try #require(try JSONSerialization.jsonObject(with: Data(Base64.decodeURLSafe(parts[1]) ?? [])) as? [String: Any])
            #expect(header["alg"] as? String == "RS256" && header["typ"] as? String == "JWT")
            #expect(claims["aud"] as? String == audience)
            #expect(claims["iss"] as? String == application.clientID && claims["sub"] as? String == application.clientID)
            #expect(claims["exp"] as? Int == 1_800_000_600 && claims["nbf"] as? Int == 1_800_000_000)
            #expect((claims["jti"] as? String)?.count == 32)
            #expect(try application.assertion(audience: audience, now: 1_800_000_000).split(separator: ".")[1] != parts[1][...],
                    "a fresh jti each time")
            // x5t: base64url of the certificate's SHA-1, as openssl computes it.
            let fingerprint = try Shell.run("openssl x509 -in \"$1\" -noout -fingerprint -sha1 | sed 's/.*=//; s/://g'", [certificate])
            #expect(header["x5t"] as? String == Base64.encodeURLSafe(Hex.decode(fingerprint.lowercased()) ?? []))
            // The signature over header.claims verifies with the certificate's public key.
            let input = directory.appendingPathComponent("input")
            let signature = directory.appendingPathComponent("signature")
            try input.write(parts[0] + "." + parts[1])
            try signature.write(Base64.decodeURLSafe(parts[2]) ?? [])
            let verdict = try Shell.run("""
                openssl x509 -in "$1" -pubkey -noout > "$1.pub" && \
                openssl dgst -sha256 -verify "$1.pub" -signature "$2" "$3" 2>/dev/null || echo REFUSED
                """, [certificate, signature.path, input.path])
            #expect(verdict == "Verified OK")
            try input.write(parts[0] + "." + parts[1] + "x")
            #expect(try Shell.run("openssl dgst -sha256 -verify \"$1.pub\" -signature \"$2\" \"$3\" >/dev/null 2>&1 || echo REFUSED",
                                  [certificate, signature.path, input.path]) == "REFUSED")
            // A key that is not the certificate's is refused when the tenant is read.
            let otherKey = directory.appendingPathComponent("other.key").path
            _ = try Shell.run("openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out \"$1\" 2>/dev/null", [otherKey])
            #expect(throws: GraphApplication.Invalid.self) {
                try GraphApplication(settings: GraphTenantSettings(name: "t",
                    tenantID: application.tenantID, domains: ["x.test"], clientID: application.clientID,
                                                                   certificateFile: certificate, keyFile: otherKey))
            }
        }
    }

    @Test func percentEncodingKeepsOnlyUnreservedCharacters() {
        #expect(PercentEncoding.escape("AAMk+/=-_.~ é") == "AAMk%2B%2F%3D-_.~%20%C3%A9")
        #expect(String(decoding: PercentEncoding.form([("a b", "c&d"), ("e", "")]), as: UTF8.self) == "a%20b=c%26d&e=")
    }
}
