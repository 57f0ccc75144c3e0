internal import Codecs
public import ENSModel
/// One push for one device, as responders hand it to the sender and as the spool keeps
/// it. Which push service delivers it is the device token's provider.
public struct PushNotification: Sendable, Equatable {
    public enum Environment: String, Sendable { case production, sandbox }
    public enum PushType: String, Sendable { case alert, background }

    /// Identity of the notification (32 hex characters); also its collapse id (APNs'
    /// apns-collapse-id), so a replay after a crash replaces rather than duplicates.
    public var id: String
    public var deviceToken: DeviceToken
    /// The app the push is for (APNs: the bundle id, sent as apns-topic; FCM: the
    /// Android package name, which picks the service account).
    public var topic: String
    public var environment: Environment
    public var pushType: PushType
    /// Seconds since the epoch after which APNs should not deliver it (and we stop retrying).
    public var expiration: Int64
    /// The payload in ENS's canonical form (APNs's, with `aps`), at most 4096 bytes;
    /// other providers translate it (FCMProvider).
    public var payload: [UInt8]
    /// The Devices row, for recording delivery and disabling rejected tokens.
    public var deviceRowID: Int64?
    /// The shard whose Devices table has that row (`ShardMap`); nil: shard 0, as for
    /// every notification spooled before shards (the JSON then has no `shard`).
    public var shard: Int?
    /// Its NotificationLog row, when the responder leaves that row to the sender (a
    /// notification with no content to fetch); nil when the responder wrote it.
    public var logRow: LogRow?

    /// A NotificationLog row without content (docs/architecture.md, "Mail backends"):
    /// the sender writes it, keyed by the notification's id and device, in its
    /// next batch, at most a quarter of a second after taking the notification for
    /// delivery, and keeps the notification in its spool until that batch commits.
    public struct LogRow: Sendable, Equatable {
        /// When the notification was made (ens.ts): the history's order.
        public var createdAtMilliseconds: Int64
        /// The history entry as the responder sealed it (`NotificationLog.summary_sealed`,
        /// bound to this id and device); nil when history is off.
        public var summarySealed: [UInt8]?

        /// The size of `NotificationLog.summary_sealed`.
        public static let maximumSummary = 2048

        public init(createdAtMilliseconds: Int64, summarySealed: [UInt8]?) {
            self.createdAtMilliseconds = createdAtMilliseconds
            self.summarySealed = summarySealed
        }
    }

    public init(id: String, deviceToken: DeviceToken, topic: String, environment: Environment, pushType: PushType,
                expiration: Int64, payload: [UInt8], deviceRowID: Int64?, shard: Int? = nil, logRow: LogRow? = nil) {
        self.shard = shard
        self.logRow = logRow
        self.id = id
        self.deviceToken = deviceToken
        self.topic = topic
        self.environment = environment
        self.pushType = pushType
        self.expiration = expiration
        self.payload = payload
        self.deviceRowID = deviceRowID
    }

    /// Apple: background pushes must use priority 5; alerts go out at once (10).
    public var priority: Int { pushType == .background ? 5 : 10 }

    public static let maximumPayload = 4096

    public var json: [UInt8] {
        var writer = JSONObjectWriter()
        writer.add("id", id)
        writer.add("provider", deviceToken.provider.rawValue)
        writer.add("token", deviceToken.value)
        writer.add("topic", topic)
        writer.add("environment", environment.rawValue)
        writer.add("pushType", pushType.rawValue)
        writer.add("expiration", Int(expiration))
        if let deviceRowID { writer.add("device", Int(deviceRowID)) }
        if let shard { writer.add("shard", shard) }
        if let logRow {
            var row = JSONObjectWriter()
            row.add("at", Int(logRow.createdAtMilliseconds))
            if let summary = logRow.summarySealed { row.add("summary", Base64.encode(summary)) }
            writer.add("log", rawJSON: row.finished())
        }
        writer.add("payload", rawJSON: payload)
        return writer.finished()
    }

    public struct Invalid: Error, Sendable, CustomStringConvertible {
        public let problem: String
        public var description: String { problem }
    }

    /// Parses and validates a submitted notification.
    public init(json bytes: [UInt8]) throws(Invalid) {
        let members: [String: JSONValue], ranges: [String: Range<Int>]
        do {
            (members, ranges) = try JSONParser.parseObject(bytes)
        } catch {
            throw Invalid(problem: error.problem == JSONParser.notAnObject ? error.problem : "not JSON: \(error.problem)")
        }
        func string(_ name: String) throws(Invalid) -> String {
            guard let text = members[name]?.stringValue, !text.isEmpty else { throw Invalid(problem: "missing '\(name)'") }
            return text
        }
        func integer(_ name: String) throws(Invalid) -> Int64? {
            guard let member = members[name] else { return nil }
            guard case .number(let text) = member, let number = Int64(text) else { throw Invalid(problem: "'\(name)' is not an integer") }
            return number
        }
        let id = try string("id")
        guard id.utf8.count == 32, id.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }) else {
            throw Invalid(problem: "'id' must be 32 lowercase hex characters")
        }
        // Records spooled before tokens carried their provider are all APNs's.
        let provider = try members["provider"].map { member throws(Invalid) -> DeviceToken.Provider in
            guard let name = member.stringValue, let provider = DeviceToken.Provider(rawValue: name) else { throw Invalid(problem: "unknown " +
                                                                                                                                   "'provider'") }
            return provider
        } ?? .apns
        let tokenText = try string("token")
        guard let token = provider == .apns ? DeviceToken(hex: tokenText) : DeviceToken(fcm: tokenText) else {
            throw Invalid(problem: "'token' is not a device token")
        }
        let topic = try string("topic")
        guard topic.utf8.count <= 255, !topic.utf8.contains(where: { $0 < 0x21 || $0 > 0x7E }) else { throw Invalid(problem: "'topic' is not an " +
                                                                                                                             "app id") }
        guard let environment = Environment(rawValue: try string("environment")) else { throw Invalid(problem: "bad 'environment'") }
        guard let pushType = PushType(rawValue: try string("pushType")) else { throw Invalid(problem: "bad 'pushType'") }
        guard let expiration = try integer("expiration") else { throw Invalid(problem: "missing 'expiration'") }
        guard case .object(let payloadMembers)? = members["payload"], case .object? = payloadMembers["aps"],
              let payloadRange = ranges["payload"] else {
            throw Invalid(problem: "'payload' must be an object with 'aps'")
        }
        // The payload goes on as it came (parsed and checked above), not encoded again:
        // the responders write it compact. Only when that is over the limit does its
        // compact form (no white space, shortest escapes) decide.
        var payload = Array(bytes[payloadRange])
        if payload.count > Self.maximumPayload { payload = JSONValue.object(payloadMembers).encoded }
        guard payload.count <= Self.maximumPayload else { throw Invalid(problem: "payload over \(Self.maximumPayload) bytes") }
        let shard = try integer("shard")
        guard shard.map({ (0...999).contains($0) }) ?? true else { throw Invalid(problem: "'shard' must be 0 to 999") }
        let deviceRowID = try integer("device")
        let logRow = try members["log"].map { member throws(Invalid) in try Self.logRow(member, device: deviceRowID) }
        self.init(id: id, deviceToken: token, topic: topic, environment: environment, pushType: pushType,
                  expiration: expiration, payload: payload, deviceRowID: deviceRowID, shard: shard.map(Int.init), logRow: logRow)
    }

    /// `log`: {"at": milliseconds, "summary": base64}, for a notification that names its device.
    private static func logRow(_ member: JSONValue, device: Int64?) throws(Invalid) -> LogRow {
        guard device != nil else { throw Invalid(problem: "'log' needs 'device'") }
        guard case .object(let row) = member, case .number(let text)? = row["at"], let at = Int64(text), at > 0 else {
            throw Invalid(problem: "'log' must be an object with 'at', a positive integer")
        }
        let summary = try row["summary"].map { summary throws(Invalid) -> [UInt8] in
            guard let text = summary.stringValue, let bytes = Base64.decodeLenient(text), !bytes.isEmpty,
                  bytes.count <= LogRow.maximumSummary else {
                throw Invalid(problem: "'log.summary' must be base64 of 1 to \(LogRow.maximumSummary) bytes")
            }
            return bytes
        }
        return LogRow(createdAtMilliseconds: at, summarySealed: summary)
    }
}

extension JSONValue {
    /// Compact JSON for this value (object keys sorted, so equal values encode equally).
    public var encoded: [UInt8] {
        var bytes: [UInt8] = []
        encode(into: &bytes)
        return bytes
    }

    private func encode(into bytes: inout [UInt8]) {
        switch self {
        case .string(let text): JSONObjectWriter.appendString(text, to: &bytes)
        case .number(let text): bytes.append(contentsOf: text.utf8)
        case .bool(let flag): bytes.append(contentsOf: (flag ? "true" : "false").utf8)
        case .null: bytes.append(contentsOf: "null".utf8)
        case .array(let elements):
            bytes.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                element.encode(into: &bytes)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let members):
            bytes.append(UInt8(ascii: "{"))
            for (index, key) in members.keys.sorted().enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                JSONObjectWriter.appendString(key, to: &bytes)
                bytes.append(UInt8(ascii: ":"))
                members[key]!.encode(into: &bytes)
            }
            bytes.append(UInt8(ascii: "}"))
        }
    }
}
