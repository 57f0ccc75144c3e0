// In-process endpoint tests: the dispatcher and the device-API handlers run in this
// test process, on a MemoryRequest instead of nginx and libfcgi, against the stack's
// MariaDB (or a stand-in database that fails on cue), with a scripted mail backend.
import ENSHTTP
import ENSConfig
import ENSTestSupport
@testable import ENSModel
@testable import ENSStore
@testable import ENSVault
@testable import ENSResponder
import Foundation
import Logging
import MariaDB
import OpenSSL
import Synchronization
@testable import MailBackends

enum InProcess {
    static let apiToken = "in-process-\(UUID().uuidString)"

    /// The test stack's database (`StackDatabase`), when scripts/test.sh runs us.
    static var databaseIsAvailable: Bool { StackDatabase.isAvailable }
    static func stackDatabase() throws -> Connection { try StackDatabase.connection() }
    static let vault = StackDatabase.vault

    static func context(database: any SQLDatabase, mail registrar: any MailboxRegistering = ScriptedRegistrar(.failed),
                        settings: ENSConfiguration = ENSConfiguration()) -> RequestContext {
        let services = SharedServices(
            vault: vault, apiTokens: APITokenSet(path: "/nonexistent", checkInterval: .seconds(3600)),
            privateKeys: PrivateKeyCache(capacity: 16), liveness: LivenessRecorder(), mailBackends: MailRegistrars(fallback: registrar)
        )
        return RequestContext(settings: settings, services: services, database: database,
                              logger: Logger(label: "in-process", factory: { _ in SwiftLogNoOpLogHandler() }))
    }

    static func dispatcher(_ router: Router = .ens(), maxBodyBytes: Int = 16384) -> Dispatcher {
        Dispatcher(router: router, maxBodyBytes: maxBodyBytes, tokenCheck: { $0 == apiToken })
    }

    /// A device-API call, as JSON with the ApiToken, through the dispatcher.
    static func call(_ path: String, _ parameters: [String: Any], context: RequestContext, headers: [String: String] = [:]) throws -> MemoryRequest {
        let body = try JSONSerialization.data(withJSONObject: parameters)
        let request = MemoryRequest(method: "POST", path: path, headers: headers.merging(["ApiToken": apiToken]) { given, _ in given },
                                    contentType: "application/json", body: Array(body))
        dispatcher().respond(to: request, context: context)
        return request
    }
}

extension MemoryRequest {
    /// The answer's JSON members.
    var json: [String: String] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(responseBody.utf8)) as? [String: Any] else { return [:] }
        return object.compactMapValues { $0 as? String }
    }

    var responseCode: String? { json["responseCode"] }
}

/// A mail backend that answers what the test says, records what it was asked, and on
/// `.subscribed` records a live subscription the way a real one does.
final class ScriptedRegistrar: MailboxRegistering, @unchecked Sendable {
    let backend = MailBackend.ews
    static let endpoint = "https://mail.example.test:443"
    private let answer: Mutex<MailboxOutcome>
    /// "serves", "subscribe", "prove" or "offer", with the mailbox, per call.
    let calls = Mutex<[(operation: String, mailbox: String)]>([])

    init(_ outcome: MailboxOutcome) { answer = Mutex(outcome) }

    func answering(_ outcome: MailboxOutcome) -> Self {
        answer.withLock { $0 = outcome }
        return self
    }

    func serves(_ request: MailboxRequest, context: RequestContext) throws -> Bool {
        calls.withLock { $0.append(("serves", request.mailbox)) }
        return true
    }

    func subscribe(_ request: MailboxRequest, context: RequestContext) throws -> MailboxOutcome {
        calls.withLock { $0.append(("subscribe", request.mailbox)) }
        let outcome = answer.withLock { $0 }
        if outcome == .subscribed(endpoint: Self.endpoint) {
            let store = MailSubscriptionStore(database: context.database, vault: context.services.vault)
            if let (generation, _) = try store.beginRegistration(recordID: request.record.id, now: .now()) {
                _ = try store.completeRegistration(recordID: request.record.id, generation: generation, backend: .ews,
                                                   backendURL: "https://mail.example.test/EWS/Exchange.asmx",
                                                   endpoint: Self.endpoint, subscriptionID: "scripted-\(generation)",
                                                   watermark: nil, version: nil, heartbeatMinutes: 30, now: .now())
            }
        }
        return outcome
    }

    /// As a real backend: within one of the process's registration places (none free:
    /// `.busy`), then the scripted answer's proof.
    func offerCredentials(_ request: MailboxRequest, endpoint: String, context: RequestContext) throws -> MailboxOutcome {
        let outcome = try context.services.registrationGate.ifAvailable { () throws -> MailboxOutcome in
            self.calls.withLock { $0.append(("offer", request.mailbox)) }
            return try self.proveAccess(request, context: context)
        }
        return outcome ?? .busy
    }

    func proveAccess(_ request: MailboxRequest, context: RequestContext) throws -> MailboxOutcome {
        calls.withLock { $0.append(("prove", request.mailbox)) }
        // A backend that would subscribe this mailbox proves it.
        let outcome = answer.withLock { $0 }
        return outcome == .subscribed(endpoint: Self.endpoint) ? .proven(endpoint: Self.endpoint) : outcome
    }
}

/// A database that is a real connection until told to fail: then every statement
/// after the next `failAfter` ones throws a lost connection, as a MariaDB restart does.
final class FlakyDatabase: SQLDatabase {
    let inner: Connection
    private var remaining = Int.max

    init(_ inner: Connection) { self.inner = inner }

    func failAfter(_ statements: Int) { remaining = statements }
    func heal() { remaining = .max }

    private func step(_ operation: String) throws(MariaDBError) {
        guard remaining > 0 else { throw .connectionLost(during: operation) }
        if remaining != .max { remaining -= 1 }
    }

    func query(_ query: Query) throws(MariaDBError) -> [Row] {
        try step("query")
        return try inner.query(query)
    }

    func queryOne(_ query: Query) throws(MariaDBError) -> Row? {
        try step("query")
        return try inner.queryOne(query)
    }

    func execute(_ query: Query) throws(MariaDBError) -> ExecuteResult {
        try step("execute")
        return try inner.execute(query)
    }

    func transaction<T>(_ body: () throws -> T) throws -> T {
        try inner.transaction(body)
    }
}
