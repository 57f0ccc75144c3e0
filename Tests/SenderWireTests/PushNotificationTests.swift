import ENSTestSupport
import Testing
@testable import ENSModel
@testable import SenderWire

@Suite struct PushNotificationTests {
    static let id = "0123456789abcdef0123456789abcdef"
    static let tokenHex = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"

    static func alert(deviceRowID: Int64? = 42) throws -> PushNotification {
        PushNotification(
            id: id, deviceToken: try #require(DeviceToken(hex: tokenHex)), topic: "com.example.mail",
            environment: .production, pushType: .alert, expiration: 1_900_000_000,
            payload: Array(#"{"aps":{"alert":{"body":"Mail from \"Bob\"","title":"New mail"},"sound":"default"},"m":"x/y"}"#.utf8),
            deviceRowID: deviceRowID)
    }

    static func background() throws -> PushNotification {
        PushNotification(
            id: "ffffffffffffffffffffffffffffffff", deviceToken: try #require(DeviceToken(hex: "00112233445566778899aabbccddeeff")),
            topic: "com.example.mail", environment: .sandbox, pushType: .background, expiration: 0,
            payload: Array(#"{"aps":{"content-available":1}}"#.utf8), deviceRowID: nil)
    }

    /// A valid submission as a JSON object whose members a test can replace or remove.
    static func members() -> [String: JSONValue] {
        [
            "id": .string(id),
            "token": .string(tokenHex),
            "topic": .string("com.example.mail"),
            "environment": .string("production"),
            "pushType": .string("alert"),
            "expiration": .number("1900000000"),
            "device": .number("42"),
            "payload": .object(["aps": .object(["alert": .string("hi")])]),
        ]
    }

    static func parse(_ members: [String: JSONValue]) throws(PushNotification.Invalid) -> PushNotification {
        try PushNotification(json: JSONValue.object(members).encoded)
    }

    static func expectInvalid(_ members: [String: JSONValue], _ fragment: String, _ comment: Comment? = nil,
                              sourceLocation: SourceLocation = #_sourceLocation) {
        expectInvalid(JSONValue.object(members).encoded, fragment, comment, sourceLocation: sourceLocation)
    }

    static func expectInvalid(_ bytes: [UInt8], _ fragment: String, _ comment: Comment? = nil,
                              sourceLocation: SourceLocation = #_sourceLocation) {
        do throws(PushNotification.Invalid) {
            let notification = try PushNotification(json: bytes)
            Issue.record("accepted \(notification) (\(comment.map { "\($0)" } ?? ""))", sourceLocation: sourceLocation)
        } catch {
            #expect(error.problem.contains(fragment), "\(error.problem) (\(comment.map { "\($0)" } ?? ""))", sourceLocation: sourceLocation)
        }
    }

    // MARK: Round trips

    @Test func alertRoundTrip() throws {
        let notification = try Self.alert()
        let parsed = try PushNotification(json: notification.json)
        #expect(parsed == notification)
        #expect(parsed.priority == 10)
        #expect(parsed.deviceRowID == 42)
    }

    @Test func backgroundRoundTrip() throws {
        let notification = try Self.background()
        let parsed = try PushNotification(json: notification.json)
        #expect(parsed == notification)
        #expect(parsed.priority == 5)
        #expect(parsed.deviceRowID == nil)
        #expect(parsed.environment == .sandbox)
    }

    @Test func priorityFollowsPushType() throws {
        var notification = try Self.alert()
        #expect(notification.priority == 10)
        notification.pushType = .background
        #expect(notification.priority == 5)
    }

    @Test func jsonIsAnObjectWithTheDocumentedMembers() throws {
        let value = try JSONParser.parse(try Self.alert().json)
        guard case .object(let members) = value else {
            Issue.record("not an object")
            return
        }
        #expect(Set(members.keys) == ["id", "provider", "token", "topic", "environment", "pushType", "expiration", "device", "payload"])
        #expect(members["expiration"] == .number("1900000000"))
        #expect(members["device"] == .number("42"))
        #expect(members["token"] == .string(Self.tokenHex))
        let withoutRow = try JSONParser.parse(try Self.alert(deviceRowID: nil).json)
        #expect(withoutRow["device"] == nil)
    }

    @Test func payloadGoesOnAsSubmitted() throws {
        // The payload is parsed and checked, then kept as the bytes it came in (the
        // responders write it compact); only one over the limit is made compact
        // (payloadLimitCountsTheStoredForm).
        var bytes = Array((#"{"id":"0123456789abcdef0123456789abcdef","token":"a1b2c3d4e5f60718","topic":"t","environment":"sandbox","# +
                           #""pushType":"alert","expiration":1,"payload":{ "z" : [1, 2],"aps" : { "badge" : 3 } }}"#).utf8)
        var parsed = try PushNotification(json: bytes)
        #expect(parsed.payload == Array(#"{ "z" : [1, 2],"aps" : { "badge" : 3 } }"#.utf8))
        #expect(try PushNotification(json: parsed.json) == parsed)
        // Uppercase token hex is accepted and kept lowercase.
        bytes = Array((#"{"id":"0123456789abcdef0123456789abcdef","token":"A1B2C3D4E5F60718","topic":"t","environment":"sandbox","# +
                       #""pushType":"alert","expiration":1,"payload":{"aps":{}}}"#).utf8)
        parsed = try PushNotification(json: bytes)
        #expect(parsed.deviceToken.value == "a1b2c3d4e5f60718")
    }

    @Test func validMembersParse() throws {
        let parsed = try Self.parse(Self.members())
        #expect(parsed.id == Self.id)
        #expect(parsed.topic == "com.example.mail")
        #expect(parsed.expiration == 1_900_000_000)
        #expect(parsed.payload == Array(#"{"aps":{"alert":"hi"}}"#.utf8))
        var members = Self.members()
        members["device"] = nil
        #expect(try Self.parse(members).deviceRowID == nil)
        members["expiration"] = .number("-1")
        #expect(try Self.parse(members).expiration == -1)
        members["topic"] = .string(String(repeating: "a", count: 255))
        #expect(try Self.parse(members).topic.count == 255)
    }

    // MARK: Refusals

    @Test func notJSON() {
        for text in ["", "not json", "{", #"{"id":}"#, "[1,2]", "\"string\"", "42", "null"] {
            Self.expectInvalid(Array(text.utf8),
                text.hasPrefix("[") || text.hasPrefix("\"") || text == "42" || text == "null" ? "not a JSON object" : "not JSON", "\(text)")
        }
        Self.expectInvalid([0xFF, 0xFE], "not JSON")
    }

    @Test func badID() {
        var members = Self.members()
        members["id"] = nil
        Self.expectInvalid(members, "'id'")
        for id in ["", "0123456789abcdef0123456789abcde", "0123456789abcdef0123456789abcdef0",
                   "0123456789ABCDEF0123456789abcdef", "0123456789abcdeg0123456789abcdef",
                   "0123456789abcdef 123456789abcdef", "０123456789abcdef0123456789abcde"] {
            members["id"] = .string(id)
            Self.expectInvalid(members, "'id'", "\(id)")
        }
        members["id"] = .number("12345678901234567890123456789012")
        Self.expectInvalid(members, "'id'")
    }

    @Test func badToken() {
        var members = Self.members()
        members["token"] = nil
        Self.expectInvalid(members, "'token'")
        for token in ["", "abc", "0123456789abcde", "0123456789abcdef0", "0123456789abcdeg", "0123456789abcdef 0",
                      String(repeating: "ab", count: 101)] {
            members["token"] = .string(token)
            Self.expectInvalid(members, "'token'", "\(token)")
        }
        members["token"] = .number("1234567890123456")
        Self.expectInvalid(members, "'token'")
    }

    @Test func badTopic() {
        var members = Self.members()
        members["topic"] = nil
        Self.expectInvalid(members, "'topic'")
        for topic in ["", "com.example mail", " com.example", "com.example\t", "com.example\n", "com.exämple", "com.\u{7F}",
                      String(repeating: "a", count: 256)] {
            members["topic"] = .string(topic)
            Self.expectInvalid(members, "'topic'", "\(topic.debugDescription)")
        }
    }

    @Test func badEnvironmentAndPushType() {
        var members = Self.members()
        for environment in ["", "Production", "prod", "development"] {
            members["environment"] = .string(environment)
            Self.expectInvalid(members, "'environment'", "\(environment)")
        }
        members["environment"] = nil
        Self.expectInvalid(members, "'environment'")
        members = Self.members()
        for pushType in ["", "Alert", "voip", "location"] {
            members["pushType"] = .string(pushType)
            Self.expectInvalid(members, "'pushType'", "\(pushType)")
        }
        members["pushType"] = .bool(true)
        Self.expectInvalid(members, "'pushType'")
    }

    @Test func badExpiration() {
        var members = Self.members()
        members["expiration"] = nil
        Self.expectInvalid(members, "missing 'expiration'")
        for value: JSONValue in [.string("1900000000"), .number("1.5"), .number("1e9"), .number("99999999999999999999"), .null, .bool(true)] {
            members["expiration"] = value
            Self.expectInvalid(members, "'expiration'", "\(value)")
        }
    }

    @Test func badDeviceRow() {
        var members = Self.members()
        for value: JSONValue in [.string("42"), .number("4.2"), .null] {
            members["device"] = value
            Self.expectInvalid(members, "'device'", "\(value)")
        }
    }

    @Test func badPayload() {
        var members = Self.members()
        members["payload"] = nil
        Self.expectInvalid(members, "'payload'")
        for payload: JSONValue in [
            .string(#"{"aps":{}}"#), .array([.object(["aps": .object([:])])]), .object([:]),
            .object(["APS": .object([:])]), .object(["aps": .string("x")]), .object(["aps": .null]),
            .object(["aps": .array([])]), .null,
        ] {
            members["payload"] = payload
            Self.expectInvalid(members, "'payload'", "\(payload)")
        }
    }

    @Test func payloadSizeLimit() throws {
        // {"aps":{},"x":"…"} is 17 bytes plus the filler.
        func members(filler: Int) -> [String: JSONValue] {
            var members = Self.members()
            members["payload"] = .object(["aps": .object([:]), "x": .string(String(repeating: "y", count: filler))])
            return members
        }
        let atLimit = try Self.parse(members(filler: PushNotification.maximumPayload - 17))
        #expect(atLimit.payload.count == PushNotification.maximumPayload)
        Self.expectInvalid(members(filler: PushNotification.maximumPayload - 16), "payload over 4096")
        Self.expectInvalid(members(filler: 10_000), "payload over 4096")
    }

    @Test func payloadLimitCountsTheStoredForm() throws {
        // The limit applies to the compact stored form, not to the submitted text:
        // whitespace and escapes that the stored form spells shorter do not count.
        let prefix = #"{"id":"0123456789abcdef0123456789abcdef","token":"a1b2c3d4e5f60718","topic":"t","environment":"sandbox","pushType":"alert","# +
                     #""expiration":1,"payload":"#
        let padded = #"{"aps" :       {},    "x":""# + String(repeating: "y", count: 4096 - 17) + "\"}"
        #expect(try PushNotification(json: Array((prefix + padded + "}").utf8)).payload.count == 4096)
        let escaped = #"{"aps":{},"x":""# + String(repeating: "\\u0079", count: 4096 - 17) + "\"}"
        #expect(escaped.utf8.count > 20_000)
        let accepted = try PushNotification(json: Array((prefix + escaped + "}").utf8))
        #expect(accepted.payload == Array(#"{"aps":{},"x":""#.utf8) + [UInt8](repeating: 0x79, count: 4096 - 17) + Array("\"}".utf8))
        let over = #"{"aps":{},"x":""# + String(repeating: "\\u0079", count: 4096 - 16) + "\"}"
        Self.expectInvalid(Array((prefix + over + "}").utf8), "payload over")
    }

    @Test func invalidErrorsDoNotEchoThePayload() {
        var members = Self.members()
        members["payload"] = .object(["aps": .string("secret-subject-line")])
        do {
            _ = try Self.parse(members)
            Issue.record("accepted")
        } catch {
            #expect(!"\(error)".contains("secret-subject-line"))
        }
    }

    // MARK: JSONValue.encoded

    @Test func encodedSortsKeys() {
        let value = JSONValue.object(["b": .number("1"), "a": .number("2"), "A": .number("3"), "aa": .object(["z": .null, "y": .bool(false)])])
        #expect(value.encoded == Array(#"{"A":3,"a":2,"aa":{"y":false,"z":null},"b":1}"#.utf8))
        #expect(JSONValue.object([:]).encoded == Array("{}".utf8))
        #expect(JSONValue.array([]).encoded == Array("[]".utf8))
        #expect(JSONValue.array([.bool(true), .null, .number("-0.5e+3"), .string("")]).encoded == Array(#"[true,null,-0.5e+3,""]"#.utf8))
    }

    @Test func encodedEscapes() throws {
        let text = "q\"b\\s/n\nr\rt\tnul\u{0}bell\u{7}us\u{1F}del\u{7F}é😀\u{2028}"
        let encoded = JSONValue.string(text).encoded
        #expect(encoded == Array(#""q\"b\\s/n\nr\rt\tnul\u0000bell\u0007us\u001fdel"#.utf8) + Array("\u{7F}é😀\u{2028}\"".utf8))
        #expect(try JSONParser.parse(encoded) == .string(text))
        // Keys are escaped the same way.
        let object = JSONValue.object(["k\"\n": .string("v")])
        #expect(object.encoded == Array(#"{"k\"\n":"v"}"#.utf8))
        #expect(try JSONParser.parse(object.encoded) == object)
    }

    static func randomString(_ generator: inout SeededGenerator) -> String {
        let alphabet: [Unicode.Scalar] = ["a", "Z", "0", " ", "\"", "\\", "/", "\n", "\r", "\t", "\u{0}", "\u{8}", "\u{C}", "\u{1F}",
                                          "\u{7F}", "\u{80}", "é", "ß", "€", "\u{FFFD}", "😀", "𝄞", "\u{2028}"]
        var scalars = String.UnicodeScalarView()
        for _ in 0..<Int.random(in: 0...12, using: &generator) {
            scalars.append(alphabet[Int.random(in: 0..<alphabet.count, using: &generator)])
        }
        return String(scalars)
    }

    static func randomValue(_ generator: inout SeededGenerator, depth: Int) -> JSONValue {
        let choice = Int.random(in: 0..<(depth >= 5 ? 4 : 6), using: &generator)
        switch choice {
        case 0: return .string(randomString(&generator))
        case 1: return .number(["0", "-1", "42", "3.25", "-0.5e-7", "1E+30", "12345678901234567890"][Int.random(in: 0..<7, using: &generator)])
        case 2: return .bool(Bool.random(using: &generator))
        case 3: return .null
        case 4: return .array((0..<Int.random(in: 0...4, using: &generator)).map { _ in randomValue(&generator, depth: depth + 1) })
        default:
            var members: [String: JSONValue] = [:]
            for _ in 0..<Int.random(in: 0...4, using: &generator) {
                members[randomString(&generator)] = randomValue(&generator, depth: depth + 1)
            }
            return .object(members)
        }
    }

    @Test func encodedRoundTripsThroughTheParser() throws {
        var generator = SeededGenerator(seed: 0x150B)
        for index in 0..<500 {
            let value = Self.randomValue(&generator, depth: 0)
            let encoded = value.encoded
            let parsed = try JSONParser.parse(encoded)
            #expect(parsed == value, "case \(index)")
            // Canonical: encoding the parsed value gives the same bytes.
            #expect(parsed.encoded == encoded, "case \(index)")
        }
    }

    @Test func encodedIsCanonicalRegardlessOfSourceOrder() throws {
        let a = try JSONParser.parse(Array(#"{"b":{"y":1,"x":[2,{"d":0,"c":1}]},"a":"s"}"#.utf8))
        let b = try JSONParser.parse(Array(#"{ "a" : "s", "b" : { "x" : [ 2 , { "c" : 1 , "d" : 0 } ] , "y" : 1 } }"#.utf8))
        #expect(a.encoded == b.encoded)
        #expect(a.encoded == Array(#"{"a":"s","b":{"x":[2,{"c":1,"d":0}],"y":1}}"#.utf8))
    }

    // MARK: Provider

    @Test func theTokensProviderTravelsWithTheNotification() throws {
        let notification = try Self.alert()
        #expect(notification.deviceToken.provider == .apns)
        let json = try JSONParser.parse(notification.json)
        #expect(json["provider"]?.stringValue == "apns")
        #expect(try PushNotification(json: notification.json) == notification)
    }

    /// Spool records and frames written before tokens carried a provider are APNs's.
    @Test func anFCMRecordNeedsAnFCMToken() throws {
        var members = Self.members()
        members["provider"] = .string("fcm")
        members["token"] = .string("cA1b2C3d4E5f6:APA91bHx_example-token_0123456789")
        let parsed = try Self.parse(members)
        #expect(parsed.deviceToken.provider == .fcm && parsed.deviceToken.value == "cA1b2C3d4E5f6:APA91bHx_example-token_0123456789")
        members["token"] = .string("not/a token")
        #expect(throws: PushNotification.Invalid.self) { try Self.parse(members) }
        // The hex of an APNs token is not taken for FCM's or the reverse by accident:
        // the record says which, and an APNs record with FCM's alphabet is refused.
        members["provider"] = .string("apns")
        members["token"] = .string("cA1b2C3d4E5f6:APA91bHx_example-token_0123456789")
        #expect(throws: PushNotification.Invalid.self) { try Self.parse(members) }
    }

    @Test func aRecordWithoutAProviderIsAPNs() throws {
        var members = Self.members()
        members["provider"] = nil
        #expect(try Self.parse(members).deviceToken.provider == .apns)
        members["provider"] = .string("apns")
        #expect(try Self.parse(members).deviceToken.provider == .apns)
    }

    @Test(arguments: [JSONValue.string("gcm"), .string("APNS"), .string("FCM"), .string(""), .number("1"), .null])
    func anUnknownProviderIsRefused(provider: JSONValue) {
        var members = Self.members()
        members["provider"] = provider
        #expect(throws: PushNotification.Invalid.self) { try Self.parse(members) }
    }
}

/// A push names its device's shard (`shard`) so the sender writes feedback there; one
/// spooled before shards names none and means shard 0.
@Suite struct PushNotificationShardTests {
    @Test func theShardRoundTripsAndIsLeftOutForShardZero() throws {
        var notification = try PushNotificationTests.alert()
        let plain = String(decoding: notification.json, as: UTF8.self)
        #expect(!plain.contains("shard"), "a host without a map writes what it wrote before")
        #expect(try PushNotification(json: notification.json).shard == nil)
        notification.shard = 2
        #expect(String(decoding: notification.json, as: UTF8.self).contains(#""shard":2"#))
        #expect(try PushNotification(json: notification.json) == notification)
    }

    @Test func anOldEntryWithoutAShardIsShardZeros() throws {
        let parsed = try PushNotificationTests.parse(PushNotificationTests.members())
        #expect(parsed.shard == nil && parsed.deviceRowID == 42)
    }

    @Test func aBadShardIsRefused() {
        for bad: JSONValue in [.number("-1"), .number("1000"), .string("1")] {
            var members = PushNotificationTests.members()
            members["shard"] = bad
            #expect(throws: PushNotification.Invalid.self) { try PushNotificationTests.parse(members) }
        }
    }

    // MARK: The log row the sender writes

    @Test func theLogRowRoundTripsAndIsLeftOutWithoutOne() throws {
        var notification = try PushNotificationTests.alert()
        #expect(!String(decoding: notification.json, as: UTF8.self).contains("log"), "a notification without one writes what it wrote before")
        notification.logRow = PushNotification.LogRow(createdAtMilliseconds: 1_900_000_000_123, summarySealed: [0, 1, 2, 0xFF])
        #expect(String(decoding: notification.json, as: UTF8.self).contains(#""log":{"at":1900000000123,"summary":"AAEC/w=="}"#))
        #expect(try PushNotification(json: notification.json) == notification)
        notification.logRow = PushNotification.LogRow(createdAtMilliseconds: 5, summarySealed: nil)
        #expect(String(decoding: notification.json, as: UTF8.self).contains(#""log":{"at":5}"#), "history off: a row with no summary")
        #expect(try PushNotification(json: notification.json) == notification)
    }

    @Test func aBadLogRowIsRefused() {
        let tooBig = String(repeating: "A", count: (PushNotification.LogRow.maximumSummary + 3) / 3 * 4 + 4)
        let bad: [(JSONValue, String)] = [
            (.string("x"), "'log' must be an object"),
            (.object([:]), "'at', a positive integer"),
            (.object(["at": .number("0")]), "'at', a positive integer"),
            (.object(["at": .string("5")]), "'at', a positive integer"),
            (.object(["at": .number("5"), "summary": .string("%%%")]), "'log.summary' must be base64"),
            (.object(["at": .number("5"), "summary": .string("")]), "'log.summary' must be base64"),
            (.object(["at": .number("5"), "summary": .number("1")]), "'log.summary' must be base64"),
            (.object(["at": .number("5"), "summary": .string(tooBig)]), "'log.summary' must be base64"),
        ]
        for (log, problem) in bad {
            var members = PushNotificationTests.members()
            members["log"] = log
            PushNotificationTests.expectInvalid(members, problem, "\(log)")
        }
        // A row is keyed by its device: a notification that names none cannot have one.
        var members = PushNotificationTests.members()
        members["device"] = nil
        members["log"] = .object(["at": .number("5")])
        PushNotificationTests.expectInvalid(members, "'log' needs 'device'")
    }
}
