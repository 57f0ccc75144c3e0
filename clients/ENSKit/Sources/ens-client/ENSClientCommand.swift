import ArgumentParser
import ENSKit
import ENSKitCurl
import Foundation

/// `ens-client`: ENS's device API from the command line, built on ENSKit (sealing,
/// pinned keys, device secret, privacy keys, push reading). What it keeps between runs
/// (the user's pinned key, the device secret, the P-256 key of `encrypted`, the push tag)
/// lives in `--state`, a FileKeyStore directory: one directory is one device.
@main
struct ENSClientCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ens-client",
        abstract: "A device of ENS (Email Notification Service), built on ENSKit.",
        discussion: "Prints each answer as one JSON object. Errors go to standard error with a non-zero exit.",
        subcommands: [PublicKey.self, Register.self, CheckIn.self, UpdateDevice.self, Unregister.self, SyncKey.self, Privacy.self,
                      Fetch.self, History.self, OpenPush.self, Alive.self]
    )
}

struct Connection: ParsableArguments {
    @Option(help: "ENS's base URL.") var baseURL = "https://localhost:8443"
    @Option(help: "The app's ApiToken (default: $ENS_API_TOKEN).") var apiToken: String?
    @Option(help: "The app's bundle id or Android package name.") var bundleID = "com.example.mail"
    @Option(help: "A PEM file of CAs to trust instead of the system's (a local stack's certificate).") var caFile: String?
    @Option(help: "The device's state directory (keys, secret, pinned key).") var state = ".ens-client"
    @Flag(help: "Ask for the unread count as the badge (the badge header).") var badge = false
    @Flag(help: "A development build: pushes go to the APNs sandbox.") var development = false

    func client() throws -> ENSClient {
        guard let url = URL(string: baseURL), url.scheme != nil else { throw ValidationError("--base-url is not a URL") }
        guard let token = apiToken ?? ProcessInfo.processInfo.environment["ENS_API_TOKEN"], !token.isEmpty else {
            throw ValidationError("give --api-token or set ENS_API_TOKEN")
        }
        let configuration = ENSConfiguration(baseURL: url, apiToken: token, bundleID: bundleID, badge: badge ? true : nil,
                                             development: development ? true : nil)
        return ENSClient(configuration: configuration, transport: CurlTransport(caFile: caFile),
                         keyStore: try FileKeyStore(directory: URL(fileURLWithPath: state)))
    }
}

struct Device: ParsableArguments {
    @Option(help: "The user's email address.") var email: String
    @Option(help: "The device's APNs token (hex).") var apnsToken: String?
    @Option(help: "The device's FCM registration token.") var fcmToken: String?

    var user: ENSUser { ENSUser(email: email) }

    func token() throws -> ENSPushToken {
        switch (apnsToken, fcmToken) {
        case (let apns?, nil): return try ENSPushToken(apnsHex: apns)
        case (nil, let fcm?): return try ENSPushToken(fcmToken: fcm)
        default: throw ValidationError("give exactly one of --apns-token and --fcm-token")
        }
    }
}

/// Prints `value` as one line of JSON (keys sorted).
func printJSON<Output: Encodable>(_ value: Output) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    print(String(decoding: try encoder.encode(value), as: UTF8.self))
}

// What ens-client prints: one object per command.

/// `public-key`.
struct KeyOutput: Encodable {
    let userid: String
    let subscribed: Bool
}

/// The commands that answer with ENS's `responseCode` (and what came with it).
struct ResponseOutput: Encodable {
    let responseCode: String
    var pushTag: String?
    var privacy: String?
    var encryptionCertificateId: String?
}

/// `check-in`: what to do next.
struct ActionOutput: Encodable {
    let action: String
    var reason: String?
}

/// `history`.
struct HistoryOutput: Encodable {
    struct Entry: Encodable {
        let id: String
        let ts: Int64
        let sender: String
        let subject: String
        let read: Bool
    }

    let notifications: [Entry]
}

/// `alive`.
struct AliveOutput: Encodable {
    let alive: Bool
}

/// A notification's content as ENS serves it (`sender`, `subject`, `badge`, the sync key pair).
struct ContentOutput: Encodable {
    let sender: String
    let subject: String
    let badge: Int?
    let backgroundSyncKey: String?
    let syncKeyExpirationTime: String?

    init(_ content: ENSNotificationContent) {
        sender = content.sender
        subject = content.subject
        badge = content.badge
        backgroundSyncKey = content.syncKey?.key
        syncKeyExpirationTime = content.syncKey?.expirationText
    }
}

/// `fetch` and `open-push`: `content` (null when there is none to show) and, for a
/// push, what it is.
struct ContentAnswer: Encodable {
    let content: ContentOutput?
    var mode: String?
    var kind: String?
    var id: String?
    var ts: Int64?
    var messageId: String?

    init(_ content: ENSNotificationContent?) { self.content = content.map(ContentOutput.init) }

    private enum CodingKeys: String, CodingKey { case content, mode, kind, id, ts, messageId }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(content, forKey: .content)
        try container.encodeIfPresent(mode, forKey: .mode)
        try container.encodeIfPresent(kind, forKey: .kind)
        try container.encodeIfPresent(id, forKey: .id)
        try container.encodeIfPresent(ts, forKey: .ts)
        try container.encodeIfPresent(messageId, forKey: .messageId)
    }
}

struct PublicKey: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "public-key", abstract: "POST /getpublickey: fetch and pin the user's key.")
    @OptionGroup var connection: Connection
    @Option(help: "The user's email address.") var email: String

    func run() async throws {
        let key = try await connection.client().getPublicKey(for: ENSUser(email: email))
        try printJSON(KeyOutput(userid: key.userID, subscribed: key.isSubscribed))
    }
}

struct Register: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "POST /registerdevicev2 with exactly one kind of credentials.",
        discussion: "Secrets given as options are visible to other users of this host (ps); give a file with --password-file where that matters."
    )
    @OptionGroup var connection: Connection
    @OptionGroup var device: Device
    @Option(help: "Basic authentication: the user name (default: the email).") var userName: String?
    @Option(help: "Basic authentication: the password.") var password: String?
    @Option(help: "Basic authentication: a file holding the password.") var passwordFile: String?
    @Option(help: "An OAuth access token for EWS.") var oauthToken: String?
    @Option(help: "With --oauth-token: a refresh token ENS may use.") var refreshToken: String?
    @Option(help: "With --refresh-token: the token endpoint (https).") var tokenEndpoint: String?
    @Option(help: "With --refresh-token: the OAuth client id.") var clientID: String?
    @Option(help: "A client certificate: a PKCS#12 file.") var pkcs12: String?
    @Option(help: "The PKCS#12 file's password.") var pkcs12Password = ""
    @Option(help: "A delegated Microsoft Graph access token.") var graphToken: String?
    @Option(help: "The mailbox's EWS URL (default: Autodiscover).") var ewsURL: String?
    @Option(help: "A Dovecot mailbox's IMAP server, imaps://host:port/ (default: the server registered for the address's domain).")
    var imapURL: String?
    @Option(help: "preview, generic, encrypted, secure or blind (with --graph-token: the device's own RSA key and certificate).") var privacy: String?
    @Option(help: "The Exchange version to try first.") var exchangeVersion: Int?
    @Option(help: "The sound to put in notifications.") var sound: String?
    @Flag(help: "Subscribe anew even when subscribed.") var force = false

    func credentials() throws -> ENSCredentials {
        var kinds: [ENSCredentials] = []
        if let passwordFile {
            let text = try String(contentsOfFile: passwordFile, encoding: .utf8).trimmingCharacters(in: .newlines)
            kinds.append(.password(userName: userName ?? device.email, password: text))
        } else if let password {
            kinds.append(.password(userName: userName ?? device.email, password: password))
        }
        if let oauthToken {
            var refresh: ENSOAuthRefresh?
            if let refreshToken {
                guard let endpoint = tokenEndpoint.flatMap(URL.init(string:)), let clientID else {
                    throw ValidationError("--refresh-token needs --token-endpoint and --client-id")
                }
                refresh = ENSOAuthRefresh(refreshToken: refreshToken, tokenEndpoint: endpoint, clientID: clientID)
            }
            kinds.append(.oauth(accessToken: oauthToken, refresh: refresh))
        }
        if let pkcs12 { kinds.append(.certificate(pkcs12: try Data(contentsOf: URL(fileURLWithPath: pkcs12)), password: pkcs12Password)) }
        if let graphToken { kinds.append(.graph(accessToken: graphToken)) }
        guard kinds.count == 1, let credentials = kinds.first else {
            throw ValidationError("give exactly one of --password(-file), --oauth-token, --pkcs12 and --graph-token")
        }
        return credentials
    }

    func run() async throws {
        var mode: ENSPrivacyMode?
        if let privacy {
            guard let parsed = ENSPrivacyMode(rawValue: privacy) else { throw ValidationError("--privacy: preview, generic, encrypted, secure or " +
                                                                                              "blind") }
            mode = parsed
        }
        var url: URL?
        if let ewsURL {
            guard let parsed = URL(string: ewsURL) else { throw ValidationError("--ews-url is not a URL") }
            url = parsed
        }
        let imap = try imapURL.map { text in
            guard let parsed = URL(string: text) else { throw ValidationError("--imap-url is not a URL") }
            return parsed
        }
        let registration = ENSRegistration(user: device.user, token: try device.token(), credentials: try credentials(), ewsURL: url,
                                           imapURL: imap, privacy: mode, force: force, exchangeVersion: exchangeVersion, defaultSound: sound)
        let result = try await connection.client().register(registration)
        try printJSON(ResponseOutput(responseCode: result.outcome.rawValue, pushTag: result.pushTag, privacy: result.privacy?.rawValue))
    }
}

struct CheckIn: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "check-in", abstract: "POST /getsubscriptionstatusv2: what to do next.")
    @OptionGroup var connection: Connection
    @OptionGroup var device: Device
    @Option(help: "ens.ts of the newest push the device got.") var lastTs: Int64?

    func run() async throws {
        let result = try await connection.client().checkIn(user: device.user, token: try device.token(), lastNotificationTimestamp: lastTs)
        switch result.action {
        case .nothing: try printJSON(ActionOutput(action: "nothing"))
        case .registerAgain(let reason): try printJSON(ActionOutput(action: "registerAgain", reason: "\(reason)"))
        case .updateToken: try printJSON(ActionOutput(action: "updateToken"))
        }
    }
}

struct UpdateDevice: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "update-device", abstract: "POST /updatedevice: a new push token.")
    @OptionGroup var connection: Connection
    @OptionGroup var device: Device
    @Option(help: "The new APNs token (hex).") var newApnsToken: String?
    @Option(help: "The new FCM registration token.") var newFcmToken: String?

    func run() async throws {
        let new: ENSPushToken
        switch (newApnsToken, newFcmToken) {
        case (let apns?, nil): new = try ENSPushToken(apnsHex: apns)
        case (nil, let fcm?): new = try ENSPushToken(fcmToken: fcm)
        default: throw ValidationError("give exactly one of --new-apns-token and --new-fcm-token")
        }
        try await connection.client().updateDevice(user: device.user, from: try device.token(), to: new)
        try printJSON(ResponseOutput(responseCode: "UpdateSuccess"))
    }
}

struct Unregister: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "POST /unregister, and forget the device's state.")
    @OptionGroup var connection: Connection
    @OptionGroup var device: Device

    func run() async throws {
        try await connection.client().unregister(user: device.user, token: try device.token())
        try printJSON(ResponseOutput(responseCode: "DeviceUnregistered"))
    }
}

struct SyncKey: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "sync-key", abstract: "POST /updatesynckey.")
    @OptionGroup var connection: Connection
    @OptionGroup var device: Device
    @Option(help: "The background sync key.") var key: String
    @Option(help: "Seconds until it expires.") var expiresIn: Int = 86_400

    func run() async throws {
        try await connection.client().updateSyncKey(user: device.user, token: try device.token(), key: key,
                                                     expiration: Date().addingTimeInterval(Double(expiresIn)))
        try printJSON(ResponseOutput(responseCode: "UpdateSuccess"))
    }
}

struct Privacy: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "POST /updateprivacy: change the device's mode.")
    @OptionGroup var connection: Connection
    @OptionGroup var device: Device
    @Argument(help: "preview, generic, encrypted, secure or blind.") var mode: String
    @Flag(help: "With blind: rotate the device's key (a new key and certificate; the previous key is kept for pushes still encrypted to it).")
    var rotate = false

    func run() async throws {
        guard let parsed = ENSPrivacyMode(rawValue: mode) else { throw ValidationError("preview, generic, encrypted, secure or blind") }
        let client = try connection.client()
        if rotate {
            guard parsed == .blind else { throw ValidationError("--rotate is for blind") }
            let key = try await client.rotateBlindCertificate(user: device.user, token: try device.token())
            try printJSON(ResponseOutput(responseCode: "UpdateSuccess", privacy: "blind", encryptionCertificateId: key.certificateID))
            return
        }
        let effective = try await client.updatePrivacy(user: device.user, token: try device.token(), mode: parsed)
        var result = ResponseOutput(responseCode: "UpdateSuccess", privacy: effective.rawValue)
        if parsed == .blind, let key = try client.blindKey(for: device.user) { result.encryptionCertificateId = key.certificateID }
        try printJSON(result)
    }
}

struct Fetch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "POST /getnotification: a secure notification's content, once.")
    @OptionGroup var connection: Connection
    @OptionGroup var device: Device
    @Argument(help: "The notification id (ens.id).") var id: String

    func run() async throws {
        try printJSON(ContentAnswer(try await connection.client().getNotification(user: device.user, token: try device.token(), id: id)))
    }
}

struct History: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "POST /getnotificationhistory.")
    @OptionGroup var connection: Connection
    @OptionGroup var device: Device
    @Option(help: "At most this many.") var limit: Int?

    func run() async throws {
        let entries = try await connection.client().getNotificationHistory(user: device.user, token: try device.token(), limit: limit)
        try printJSON(HistoryOutput(notifications: entries.map {
            HistoryOutput.Entry(id: $0.id, ts: $0.timestamp, sender: $0.sender, subject: $0.subject, read: $0.isRead)
        }))
    }
}

struct OpenPush: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "open-push",
        abstract: "Read a push as this device would (ENSPush): an APNs payload or FCM data, as JSON on standard input.",
        discussion: "Prints the mode, the id and the content: the preview, the encrypted content opened with the device's key, the secure content " +
                    "fetched once, or the blind content opened with the device's RSA key for its certificate (fetched once when the push was too " +
                    "big to carry it), with Graph's message id."
    )
    @OptionGroup var connection: Connection

    func run() async throws {
        let input = FileHandle.standardInput.readDataToEndOfFile()
        // ens-client plays the OS here: it hands ENSPush the payload as the property-list
        // dictionary a notification's userInfo is (FCM's data: string values), so this
        // is the one place that parses JSON into untyped values.
        guard let object = (try? JSONSerialization.jsonObject(with: input)) as? [String: Any] else {
            throw ValidationError("standard input is not a JSON object")
        }
        // An FCM record: the message's data, with the notification's title and body.
        let message = (object["message"] as? [String: Any]) ?? object
        let push: ENSPush
        if let data = message["data"] as? [String: String] {
            let shown = message["notification"] as? [String: String]
            push = try ENSPush(userInfo: data, notificationTitle: shown?["title"], notificationBody: shown?["body"])
        } else {
            push = try ENSPush(userInfo: object)
        }
        let client = try connection.client()
        var result: ContentAnswer
        if push.mode == .blind {
            let message = await push.blindMessage(using: client)
            result = ContentAnswer(message?.content)
            result.messageId = message?.id
        } else {
            result = ContentAnswer(await push.content(using: client))
        }
        result.mode = push.mode.rawValue
        result.kind = push.kind == .newMail ? "newMail" : "resubscribe"
        result.id = push.id
        result.ts = push.timestamp
        try printJSON(result)
    }
}

struct Alive: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "GET /alive.")
    @OptionGroup var connection: Connection

    func run() async throws {
        let alive = await (try connection.client()).alive()
        try printJSON(AliveOutput(alive: alive))
        if !alive { throw ExitCode.failure }
    }
}
