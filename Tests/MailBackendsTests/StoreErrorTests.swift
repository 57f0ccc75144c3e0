import Codecs
import ENSModel
import ENSStore
import ENSTestSupport
import ENSVault
import MariaDB
import OpenSSL
import Synchronization
import Testing

extension OnAThrowawayDatabase {
    /// Every store throws `DatabaseError`, whatever failed inside it: a statement, or a
    /// sealed value that does not open. A caller tells "try again" from "gone wrong" by
    /// its kind alone, and a transaction reruns a conflict whichever store threw it.
    @Suite struct StoreErrors {
        @Test func aSealedValueThatDoesNotOpenIsAnInvalidValueThatNamesItAndHoldsNothing() throws {
            let shared = ThrowawayENSDatabase.shared
            let database = shared.connection()
            defer { database.disconnect() }
            let record = try SubscribedRecord(database: database, vault: shared.vault)
            let store = SubscriptionStore(database: database, vault: shared.vault)
            let device = record.devices[0]
            let secret = "sync-\(Hex.encode(try Digest.randomBytes(8)))"
            try store.storeSyncKey(deviceID: device.id, tokenHash: shared.vault.tokenHash(device.token), syncKey: secret,
                                   expiresAt: Timestamp.now().adding(seconds: 3600))
            #expect(try store.syncKey(deviceID: device.id, now: .now())?.key == secret)

            // What a database writer leaves: bytes that are no sealed value of this device.
            try database.execute("UPDATE Devices SET sync_key_sealed = \(try Digest.randomBytes(60)) WHERE id = \(device.id)")
            do {
                _ = try store.syncKey(deviceID: device.id, now: .now())
                Issue.record("a sync key that does not open was read")
            } catch {
                #expect(error.kind == .invalidValue)
                #expect(!error.isUnavailable && !error.isWriteConflict, "not something a retry mends")
                #expect("\(error)" == "a stored value is not usable: sync key")
                #expect(!"\(error)".contains(secret) && !String(reflecting: error).contains(secret))
            }
        }

        /// A store's conflict inside a caller's transaction (the registrations and the
        /// callbacks hold several stores in one) reaches the connection's rerun as the
        /// conflict it is: the transaction runs again and commits once.
        @Test func aConflictInsideAStoreIsRerunByTheCallersTransaction() throws {
            let shared = ThrowawayENSDatabase.shared
            let connection = shared.connection()
            defer { connection.disconnect() }
            let record = try SubscribedRecord(database: connection, vault: shared.vault)
            let database = ConflictingOnce(connection, whenStatementContains: "UPDATE Devices SET privacy_mode")
            let store = SubscriptionStore(database: database, vault: shared.vault)
            let device = try #require(try store.device(recordID: record.id, token: record.devices[0].token))
            let runs = Atomic(0)
            try database.inTransaction {
                runs.add(1, ordering: .relaxed)
                try store.setPrivacy(device, recordID: record.id, DevicePrivacy(mode: .generic, previewKey: nil))
            }
            #expect(runs.load(ordering: .relaxed) == 2, "the conflicted run, then the one that committed")
            #expect(database.conflictsThrown == 1)
            let mode = try connection.queryOne("SELECT privacy_mode FROM Devices WHERE id = \(device.id)")?.decode(Int64.self)
            #expect(mode == Int64(PrivacyMode.generic.rawValue))
        }
    }
}

/// A real connection whose first statement containing a text fails as a Galera
/// certification conflict does (the server rolled the transaction back).
private final class ConflictingOnce: SQLDatabase {
    let inner: Connection
    let marker: String
    private(set) var conflictsThrown = 0

    init(_ inner: Connection, whenStatementContains marker: String) {
        self.inner = inner
        self.marker = marker
    }

    private func check(_ query: Query) throws(MariaDBError) {
        guard conflictsThrown == 0, query.sql.contains(marker) else { return }
        conflictsThrown += 1
        throw .claimLost("test conflict")
    }

    func query(_ query: Query) throws(MariaDBError) -> [Row] {
        try check(query)
        return try inner.query(query)
    }

    func queryOne(_ query: Query) throws(MariaDBError) -> Row? {
        try check(query)
        return try inner.queryOne(query)
    }

    func execute(_ query: Query) throws(MariaDBError) -> ExecuteResult {
        try check(query)
        return try inner.execute(query)
    }

    func transaction<T>(_ body: () throws -> T) throws -> T {
        try inner.transaction(body)
    }
}
