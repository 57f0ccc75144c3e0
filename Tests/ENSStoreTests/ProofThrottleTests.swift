import ENSTestSupport
import Codecs
@testable import ENSModel
@testable import ENSStore
import Foundation
import MariaDB
import OpenSSL
import Testing

/// The proof-of-possession throttle as an attacker holding the app's ApiToken meets
/// it: failed proofs count per presenting device and per client network, so their
/// guesses are held at their own device and address (however many device tokens they
/// invent) while the owner, from another device or network, is still let through.
/// Times are given, not waited for.
@Suite struct ProofThrottleTests {
    static func presenter(_ device: UInt8, _ address: String?) -> ProofPresenter {
        ProofPresenter(tokenHash: Array(repeating: device, count: 32), remoteAddress: address)
    }

    @Test func anIPv6NetworkIsOneSourceAndAnIPv4AddressIsTheSameInEitherSpelling() {
        // Every address of one /64 is the same client network: a new address per guess
        // buys nothing.
        #expect(Self.presenter(1, "2001:db8:1:2::5").source == Self.presenter(1, "2001:db8:1:2:ffff:1:2:3").source)
        #expect(Self.presenter(1, "2001:db8:1:2::5").source != Self.presenter(1, "2001:db8:1:3::5").source)
        #expect(Self.presenter(1, "::ffff:192.0.2.1").source == Self.presenter(1, "192.0.2.1").source)
        #expect(Self.presenter(1, "192.0.2.1").source != Self.presenter(1, "192.0.2.2").source)
        // What is not an address is no source of its own: it shares the unknown one.
        #expect(Self.presenter(1, "not an address").source == nil)
        #expect(Self.presenter(1, nil).source == nil)
    }
}

/// The same against the stack's MariaDB, with the times given. Each test has a record
/// of its own, removed after it (its counts go with it).
@Suite(.serialized, .enabled(if: StackDatabase.isAvailable, "needs the database scripts/test.sh starts"))
final class ProofThrottleStoreTests {
    let database: Connection
    let throttle: ProofThrottle
    let recordID: Int64
    let now = Timestamp.now()
    let window = Duration.seconds(900)

    init() throws {
        database = try StackDatabase.connection()
        throttle = ProofThrottle(database: database, vault: StackDatabase.vault)
        let userID = Hex.encode(try Digest.randomBytes(32))
        try database.execute("""
            INSERT INTO EnsSubscriptionInfo (userid, public_key_pem, private_key_sealed, registered) VALUES (\(userID), 'pem', x'00', 0)
            """)
        recordID = try #require(try database.queryOne("SELECT id FROM EnsSubscriptionInfo WHERE userid = \(userID)")?.decode(Int64.self))
    }

    deinit {
        _ = try? database.execute("DELETE FROM EnsSubscriptionInfo WHERE id = \(recordID)")
    }

    func verdict(_ presenter: ProofPresenter, at time: Timestamp? = nil) throws -> ProofThrottle.Verdict {
        try throttle.verdict(recordID: recordID, presenter: presenter, limit: 5, window: window, now: time ?? now)
    }

    func fail(_ presenter: ProofPresenter, times: Int = 1) throws {
        for _ in 0..<times { try throttle.recordFailure(recordID: recordID, presenter: presenter, window: window, now: now) }
    }

    @Test func oneAttackersGuessesAreHeldAtTheirDeviceAndAddressNotTheOwners() throws {
        let attacker = ProofThrottleTests.presenter(1, "198.51.100.7")
        try fail(attacker, times: 5)
        #expect(try verdict(attacker) == .deviceHeld)
        // A new device token from the same address: the address has had its five.
        #expect(try verdict(ProofThrottleTests.presenter(2, "198.51.100.7")) == .sourceHeld)
        // The attacker's device from another address is still held.
        #expect(try verdict(ProofThrottleTests.presenter(1, "203.0.113.9")) == .deviceHeld)
        // The owner's new phone on its own network is let through to Exchange.
        #expect(try verdict(ProofThrottleTests.presenter(3, "203.0.113.9")) == .allowed)
        // Once the window has passed, the attacker gets five new tries, no more.
        #expect(try verdict(attacker, at: now.adding(seconds: 901)) == .allowed)
    }

    @Test func aRegisteredDeviceIsHeldOnlyByItsOwnFailures() throws {
        let owner = ProofThrottleTests.presenter(4, "192.0.2.10")
        try database.execute("INSERT INTO Devices (subscription_row, token_hash, token_sealed) VALUES (\(recordID), \(owner.tokenHash), x'00')")
        // Someone behind the owner's address used its five up with invented devices.
        for device in UInt8(10)..<15 { try fail(ProofThrottleTests.presenter(device, "192.0.2.10")) }
        #expect(try verdict(ProofThrottleTests.presenter(20, "192.0.2.10")) == .sourceHeld)
        // The owner's registered phone re-proves from there (a changed password).
        #expect(try verdict(owner) == .allowed)
        // Its own failures (an old password on the old phone) hold it, and do not
        // count against the address for others.
        try database.execute("DELETE FROM ProofFailures WHERE record_id = \(recordID)")
        try fail(owner, times: 5)
        #expect(try verdict(owner) == .deviceHeld)
        #expect(try verdict(ProofThrottleTests.presenter(21, "192.0.2.10")) == .allowed)
    }

    @Test func aSuccessClearsTheDevicesFailuresButNotItsAddresss() throws {
        let owner = ProofThrottleTests.presenter(5, "192.0.2.20")
        try fail(owner, times: 4)
        try throttle.recordSuccess(recordID: recordID, presenter: owner)
        try fail(owner)
        #expect(try verdict(owner) == .sourceHeld)
        #expect(try verdict(ProofThrottleTests.presenter(5, "192.0.2.21")) == .allowed)
    }

    @Test func noAddressSharesOneCountPerRecordInsteadOfNone() throws {
        for device in UInt8(30)..<35 { try fail(ProofThrottleTests.presenter(device, nil)) }
        #expect(try verdict(ProofThrottleTests.presenter(36, nil)) == .sourceHeld)
        #expect(try verdict(ProofThrottleTests.presenter(36, "192.0.2.30")) == .allowed)
    }

    /// One account name, wrong passwords from many devices and addresses and on many
    /// records: the account is held after `identityFailureLimit`, on every record, and
    /// the name is compared trimmed and case-blind. A right password clears it.
    @Test func anAccountIsHeldAcrossRecordsDevicesAndAddresses() throws {
        let name = "Victim-\(UUID().uuidString.prefix(6))@Example.TEST"
        let other = try database.execute("""
            INSERT INTO EnsSubscriptionInfo (userid, public_key_pem, private_key_sealed, registered)
            VALUES (\(Hex.encode(try Digest.randomBytes(32))), 'pem', x'00', 0)
            """).lastInsertID
        defer { _ = try? database.execute("DELETE FROM EnsSubscriptionInfo WHERE id = \(other)") }
        for attempt in 0..<ProofThrottle.identityFailureLimit {
            let presenter = ProofPresenter(tokenHash: Array(repeating: UInt8(attempt), count: 32), remoteAddress: "192.0.2.\(attempt + 1)",
                                           userName: attempt.isMultiple(of: 2) ? name : " \(name.lowercased()) ")
            #expect(try verdict(presenter) == .allowed)
            try throttle.recordFailure(recordID: attempt.isMultiple(of: 2) ? recordID : other, presenter: presenter, window: window, now: now)
        }
        let fresh = ProofPresenter(tokenHash: Array(repeating: 99, count: 32), remoteAddress: "198.51.100.7", userName: name.uppercased())
        #expect(try verdict(fresh) == .identityHeld)
        #expect(try throttle.verdict(recordID: other, presenter: fresh, limit: 5, window: window, now: now) == .identityHeld)
        // Another account, and the same one once the window is over, are not held.
        #expect(try verdict(ProofPresenter(tokenHash: fresh.tokenHash, remoteAddress: "198.51.100.7", userName: "someone-else")) == .allowed)
        #expect(try verdict(fresh, at: now.adding(seconds: 901)) == .allowed)
        try throttle.recordSuccess(recordID: recordID, presenter: fresh)
        #expect(try verdict(fresh) == .allowed)
    }
}
