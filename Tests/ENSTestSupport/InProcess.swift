// In-process endpoint tests: the dispatcher and the device-API handlers run in this
// test process, on a MemoryRequest instead of nginx and libfcgi, against the stack's
// MariaDB (or a stand-in database that fails on cue), with a scripted mail backend.
public import ENSModel
internal import ENSStore
public import ENSVault
public import ENSResponder
internal import Foundation
internal import Logging
public import MariaDB
internal import OpenSSL
public import Synchronization
public import MailBackends

public enum InProcess {
    public static let apiToken = "in-process-\(UUID().uuidString)"

    /// The test stack's database as the service account, when scripts/test.sh runs us.
    public static let stackDirectory = ProcessInfo.processInfo.environment["ENS_TEST_VAR"] ?? ""
    public static var databaseIsAvailable: Bool { !stackDirectory.isEmpty && FileManager.default.fileExists(atPath: stackDirectory + "/run/mysqld.sock") }

    public static func stackDatabase() throws -> Connection {
        let password = try String(contentsOfFile: stackDirectory + "/secrets/db-service.password", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        return Connection(configuration: MariaDBConfiguration(unixSocket: stackDirectory + "/run/mysqld.sock", user: "ens_service",
                                                               password: password, database: "ens"))
    }

    public static let vault = Vault(masterKey: try! AESGCMKey(bytes: (0..<32).map { UInt8($0) }))

    public static func context(database: any SQLDatabase, mail registrar: any MailboxRegistering = ScriptedRegistrar(.failed),
                        settings: ResponderSettings = ResponderSettings()) -> RequestContext {
        let services = SharedServices(
            vault: vault, apiTokens: APITokenSet(path: "/nonexistent", checkInterval: .seconds(3600)),
            privateKeys: PrivateKeyCache(capacity: 16), checkIns: CheckInRecorder(), mailBackends: MailBackends(fallback: registrar)
        )
        return RequestContext(settings: settings, services: services, database: database,
                              logger: Logger(label: "in-process", factory: { _ in SwiftLogNoOpLogHandler() }))
    }

    public static func dispatcher(_ router: Router = .ens(), maxBodyBytes: Int = 16384) -> Dispatcher {
        Dispatcher(router: router, maxBodyBytes: maxBodyBytes, tokenCheck: { $0 == apiToken })
    }

    /// A device-API call, as JSON with the ApiToken, through the dispatcher.
    public static func call(_ path: String, _ parameters: [String: Any], context: RequestContext, headers: [String: String] = [:]) throws -> MemoryRequest {
        let body = try JSONSerialization.data(withJSONObject: parameters)
        let request = MemoryRequest(method: "POST", path: path, headers: headers.merging(["ApiToken": apiToken]) { given, _ in given },
                                    contentType: "application/json", body: Array(body))
        dispatcher().respond(to: request, context: context)
        return request
    }
}

extension MemoryRequest {
    /// The answer's JSON members.
    public var json: [String: String] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(responseBody.utf8)) as? [String: Any] else { return [:] }
        return object.compactMapValues { $0 as? String }
    }

    public var responseCode: String? { json["responseCode"] }
}

/// A mail backend that answers what the test says, records what it was asked, and on
/// `.subscribed` records a live subscription the way a real one does.
public final class ScriptedRegistrar: MailboxRegistering, @unchecked Sendable {
    public let backend = MailBackend.ews
    public static let endpoint = "https://mail.example.test:443"
    private let answer: Mutex<MailboxOutcome>
    /// "subscribe" or "prove", with the mailbox, per call.
    public let calls = Mutex<[(operation: String, mailbox: String)]>([])

    public init(_ outcome: MailboxOutcome) { answer = Mutex(outcome) }

    public func answering(_ outcome: MailboxOutcome) -> Self {
        answer.withLock { $0 = outcome }
        return self
    }

    public func serves(_ request: MailboxRequest, context: RequestContext) throws -> Bool { true }

    public func subscribe(_ request: MailboxRequest, context: RequestContext) throws -> MailboxOutcome {
        calls.withLock { $0.append(("subscribe", request.mailbox)) }
        let outcome = answer.withLock { $0 }
        if outcome == .subscribed(endpoint: Self.endpoint) {
            let store = MailSubscriptionStore(database: context.database, vault: context.services.vault)
            if let (generation, _) = try store.beginRegistration(recordID: request.record.id, now: .now()) {
                _ = try store.completeRegistration(recordID: request.record.id, generation: generation, backend: .ews,
                                                   backendURL: "https://mail.example.test/EWS/Exchange.asmx", endpoint: Self.endpoint, subscriptionID: "scripted-\(generation)",
                                                   watermark: nil, version: nil, heartbeatMinutes: 30, now: .now())
            }
        }
        return outcome
    }

    public func proveAccess(_ request: MailboxRequest, context: RequestContext) throws -> MailboxOutcome {
        calls.withLock { $0.append(("prove", request.mailbox)) }
        // A backend that would subscribe this mailbox proves it.
        let outcome = answer.withLock { $0 }
        return outcome == .subscribed(endpoint: Self.endpoint) ? .proven(endpoint: Self.endpoint) : outcome
    }
}

/// A database that is a real connection until told to fail: then every statement
/// after the next `failAfter` ones throws a lost connection, as a MariaDB restart does.
public final class FlakyDatabase: SQLDatabase {
    public let inner: Connection
    private var remaining = Int.max

    public init(_ inner: Connection) { self.inner = inner }

    public func failAfter(_ statements: Int) { remaining = statements }
    public func heal() { remaining = .max }

    private func step(_ operation: String) throws(MariaDBError) {
        guard remaining > 0 else { throw .connectionLost(during: operation) }
        if remaining != .max { remaining -= 1 }
    }

    public func query(_ query: Query) throws(MariaDBError) -> [Row] {
        try step("query")
        return try inner.query(query)
    }

    public func queryOne(_ query: Query) throws(MariaDBError) -> Row? {
        try step("query")
        return try inner.queryOne(query)
    }

    public func execute(_ query: Query) throws(MariaDBError) -> ExecuteResult {
        try step("execute")
        return try inner.execute(query)
    }

    public func transaction<T>(_ body: () throws -> T) throws -> T {
        try inner.transaction(body)
    }
}
