// What the in-process MailBackends tests share: one throwaway MariaDB per suite with
// ENS's schema (`.throwawayDatabase`), records and devices made by ENS's own stores (so
// their rows pass their integrity checks), a mail backend whose callbacks say what the
// test says, and a stand-in sender on a Unix socket that speaks SenderWire.
import Codecs
import ENSConfig
import ENSHTTP
import ENSModel
import ENSStore
import ENSTestSupport
import ENSVault
import Foundation
import Glibc
import Logging
import MariaDB
import OpenSSL
import POSIX
import SenderWire
import Synchronization
import Testing
@testable import MailBackends

/// One throwaway MariaDB (`MariaDBInstance`) with ENS's schema in `ens`, applied by
/// ENSStore's `Migrator` as the migration account (as `ens-cron migrate` does); the
/// tests run ENS as the service account.
final class ThrowawayENSDatabase: Sendable {
    let instance: MariaDBInstance
    let service: MariaDBConfiguration
    let vault = Vault(masterKey: try! AESGCMKey(bytes: Digest.randomBytes(32)))

    @TaskLocal static var current: ThrowawayENSDatabase?

    init() throws {
        instance = try MariaDBInstance()
        let accounts = try instance.createENSDatabase("ens")
        try Migrator(directory: MariaDBInstance.migrationsDirectory, settings: accounts.migration).migrate()
        service = accounts.service
    }

    /// The suite's instance (the `.throwawayDatabase` trait's).
    static var shared: ThrowawayENSDatabase {
        guard let current else { preconditionFailure("a test that needs the throwaway database runs in a suite with .throwawayDatabase") }
        return current
    }

    /// A new connection as the service account.
    func connection() -> Connection { Connection(configuration: service) }

    /// Another database on the same server with ENS's schema, for a test that must see
    /// only its own rows (the keepers read every record); as the administrator.
    func separateSchema() throws -> Connection {
        let name = "ens_\(Hex.encode(try Digest.randomBytes(6)))"
        let administrator = Connection(configuration: instance.administrator())
        try administrator.executeScript(unsafeSQL: "CREATE DATABASE \(name) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        administrator.disconnect()
        let database = Connection(configuration: instance.administrator(database: name))
        try Migrator(directory: MariaDBInstance.migrationsDirectory, database: database).migrate()
        return database
    }
}

/// A suite-level fixture: one throwaway MariaDB started before the suite's first test
/// and stopped after its last (`ThrowawayENSDatabase.shared` inside).
struct ThrowawayDatabaseTrait: SuiteTrait, TestScoping {
    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        let database = try ThrowawayENSDatabase()
        defer { database.instance.stop() }
        try await ThrowawayENSDatabase.$current.withValue(database) { try await function() }
    }
}

extension Trait where Self == ThrowawayDatabaseTrait {
    static var throwawayDatabase: Self { ThrowawayDatabaseTrait() }
}

/// The suites nested in this one share its throwaway MariaDB (a second instance would
/// cost a second or more of the run).
@Suite(.enabled(if: MariaDBInstance.isInstalled, "needs mariadbd and mariadb-install-db (scripts/deps.sh installs mariadb-server)"),
       .throwawayDatabase)
enum OnAThrowawayDatabase {}

// MARK: Records and devices, as ENS makes them

/// A subscribed record and its devices, made through the stores a registration uses.
struct SubscribedRecord {
    static let endpoint = "https://mail.example.test:443"
    let id: Int64
    let userID: String
    var generation: Int64
    var subscriptionID: String { "sub-\(generation)" }
    var devices: [(id: Int64, token: DeviceToken)]
    /// The backend, its URL and the server devices prove themselves at.
    let backend: MailBackend
    let backendURL: String
    let endpoint: String

    /// Created, then subscribed (last heard from at `heardAt`), with `devices` devices.
    init(database: any SQLDatabase, vault: Vault, devices count: Int = 1, heardAt: Timestamp = .now(), badge: Bool = false,
         backend: MailBackend = .ews, backendURL: String = "https://mail.example.test/EWS/Exchange.asmx", endpoint: String = Self.endpoint) throws {
        self.backend = backend
        self.backendURL = backendURL
        self.endpoint = endpoint
        userID = Hex.encode(try Digest.randomBytes(32))
        let subscriptions = SubscriptionStore(database: database, vault: vault)
        id = try subscriptions.createRecord(userID: userID, publicKeyPEM: "pem", key: TestKeys.primary).id
        generation = 0
        devices = []
        try subscribeAgain(database: database, vault: vault, now: heardAt)
        for _ in 0..<count {
            let token = try #require(DeviceToken(hex: Hex.encode(try Digest.randomBytes(32))))
            let settings = DeviceSettings(bundleID: "com.example.mail", defaultSound: "default", ewsDeviceID: nil, badge: badge, development: false)
            _ = try subscriptions.register(recordID: id, token: token, settings: settings, endpoint: endpoint, now: heardAt)
            let device = try #require(try subscriptions.device(recordID: id, token: token))
            devices.append((device.id, token))
        }
    }

    /// A registration from Subscribe to its commit, as `ScriptedRegistrar` makes one.
    mutating func subscribeAgain(database: any SQLDatabase, vault: Vault, now: Timestamp = .now()) throws {
        let store = MailSubscriptionStore(database: database, vault: vault)
        let (next, _) = try #require(try store.beginRegistration(recordID: id, now: now))
        generation = next
        #expect(try store.completeRegistration(recordID: id, generation: next, backend: backend, backendURL: backendURL,
                                               endpoint: endpoint, subscriptionID: subscriptionID, watermark: "w-0", version: nil,
                                               heartbeatMinutes: 30, now: now))
    }
}

// MARK: A scripted mail backend

/// A callback URL of the scripted backend: "/scripted/<record>/<generation>".
struct ScriptedAddress: CallbackAddress {
    let recordID: Int64
    let generation: Int64
    var bucket: Int? { nil }
}

/// A mail backend whose callbacks carry `events` and whose mailbox holds `summaries`;
/// it answers "unsubscribe" or "ok" in plain text, and records what it was asked to
/// look up.
struct ScriptedSource: MailNotificationSource {
    final class Reader: MailboxReader, Sendable {
        let summaries: [MailSummary]
        let unreadCount: Int?
        private let lookups = Mutex<[[String]]>([])
        /// The item ids of each lookup so far.
        var asked: [[String]] { lookups.withLock { $0 } }

        init(summaries: [MailSummary], unreadCount: Int?) {
            self.summaries = summaries
            self.unreadCount = unreadCount
        }

        func lookUp(itemIDs: [String], unreadCount: Bool, budget: Duration, logger: Logger) -> MailLookup {
            lookups.withLock { $0.append(itemIDs) }
            return MailLookup(summaries: summaries.filter { itemIDs.contains($0.itemID) }, unreadCount: unreadCount ? self.unreadCount : nil)
        }
    }

    let events: MailEvents
    let mailbox: Reader
    var backend: MailBackend { .ews }
    var pathPrefix: String { "/scripted/" }
    var maximumBodyBytes: Int { 1024 }

    init(_ events: MailEvents, summaries: [MailSummary] = [], unreadCount: Int? = nil) {
        self.events = events
        mailbox = Reader(summaries: summaries, unreadCount: unreadCount)
    }

    func authenticate(_ suffix: String, vault: Vault) -> ScriptedAddress? {
        let parts = suffix.split(separator: "/").compactMap { Int64($0) }
        return parts.count == 2 ? ScriptedAddress(recordID: parts[0], generation: parts[1]) : nil
    }

    func events(in body: [UInt8]) throws -> MailEvents { events }

    func answer(unsubscribe: Bool) -> APIResponse {
        APIResponse(status: 200, body: Array((unsubscribe ? "unsubscribe" : "ok").utf8), contentType: "text/plain")
    }

    func reader(_ address: ScriptedAddress, record: MailSubscriptionStore.CallbackRecord, context: RequestContext) throws -> (any MailboxReader)? {
        mailbox
    }

    struct Answer: Equatable, CustomStringConvertible {
        let status: Int
        let body: String
        var description: String { "\(status) \(body)" }
        static let ok = Answer(status: 200, body: "ok")
        static let unsubscribe = Answer(status: 200, body: "unsubscribe")
    }

    /// MailCallback's route for this source, called as the dispatcher would call it.
    func callback(record: Int64, generation: Int64, context: RequestContext) throws -> Answer {
        let route = MailCallback.route(self)
        let request = Request(method: "POST", path: "/scripted/\(record)/\(generation)", body: Array("<scripted/>".utf8))
        context.route(toBucket: route.bucket?(request, context))
        let response = try route.handler(request, context)
        return Answer(status: response.status, body: String(decoding: response.body, as: UTF8.self))
    }
}

// MARK: A stand-in sender

/// ens-sender's intake as far as a responder can tell: a Unix socket speaking SenderWire
/// that answers each submission `accepted`, or `refused` with `refusing` when set, and
/// keeps what it was handed. One thread, one connection at a time.
final class StandInSender: @unchecked Sendable {
    let path: String
    private let listener: Int32
    private var thread: OSThread?
    /// The connection being served, shut down by `stop()` should a client keep it open.
    private let serving = Mutex<Int32?>(nil)
    private let refusal = Mutex<String?>(nil)
    private let received = Mutex<[PushNotification]>([])

    /// From now on, refuses every submission with `reason` (nil: accepts them).
    func refuse(_ reason: String?) { refusal.withLock { $0 = reason } }

    init(directory: URL) throws {
        path = directory.path + "/sender.sock"
        listener = try UnixSocket.listen(path: path, mode: 0o600, backlog: 8).fd
        thread = try OSThread.start { [self] in serve() }
    }

    private func serve() {
        while true {
            let fd = accept(listener, nil, nil)
            if fd < 0 { return }  // the listener was shut down: the test is over
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            serving.withLock { $0 = fd }
            var decoder = FrameDecoder()
            reading: while true {
                guard let bytes = try? FileDescriptor.read(fd), !bytes.isEmpty else { break }
                decoder.append(bytes)
                while true {
                    let next: Frame?
                    do { next = try decoder.next() } catch { break reading }
                    guard let frame = next else { break }
                    guard frame.kind == .submit, let notification = try? PushNotification(json: frame.payload) else {
                        try? FileDescriptor.writeAll(fd, Frame(kind: .refused, payload: Array("bad-notification".utf8)).encoded)
                        continue
                    }
                    if let reason = refusal.withLock({ $0 }) {
                        try? FileDescriptor.writeAll(fd, Frame(kind: .refused, payload: Array(reason.utf8)).encoded)
                    } else {
                        received.withLock { $0.append(notification) }
                        try? FileDescriptor.writeAll(fd, Frame(kind: .accepted, payload: []).encoded)
                    }
                }
            }
            serving.withLock { $0 = nil }
            FileDescriptor.close(fd)
        }
    }

    /// What it was handed so far, and forgets it.
    func take() -> [PushNotification] {
        received.withLock { list in defer { list.removeAll() }; return list }
    }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        serving.withLock { fd in if let fd { shutdown(fd, Int32(SHUT_RDWR)) } }
        thread?.join()
        FileDescriptor.close(listener)
    }
}

// MARK: A responder thread's context

/// A responder thread's context on the suite's database (service account), with the
/// sender at `sender` (a path; nil: one where nothing listens).
func responderContext(_ database: ThrowawayENSDatabase, sender: String?, configure: (inout ENSConfiguration) -> Void = { _ in }) -> RequestContext {
    var settings = ENSConfiguration()
    settings.push.socket = sender ?? "/nonexistent/ens-test-sender.sock"
    configure(&settings)
    let services = SharedServices(
        vault: database.vault, apiTokens: APITokenSet(path: "/nonexistent", checkInterval: .seconds(3600)),
        privateKeys: PrivateKeyCache(capacity: 16), liveness: LivenessRecorder(), backends: BackendServices()
    )
    return RequestContext(settings: settings, services: services, database: database.connection(),
                          logger: Logger(label: "mail-backends-tests", factory: { _ in SwiftLogNoOpLogHandler() }))
}
