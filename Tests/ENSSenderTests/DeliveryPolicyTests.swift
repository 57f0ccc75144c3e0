import ENSTestSupport
import Testing
@testable import ENSSender

@Suite struct DeliveryPolicyTests {
    static func action(_ status: Int?, _ reason: String? = nil, timestamp: Int64? = nil) -> DeliveryAction {
        APNsProvider.action(status: status, reason: reason, timestamp: timestamp)
    }

    static func isDrop(_ action: DeliveryAction) -> Bool {
        if case .drop = action { return true }
        return false
    }

    // MARK: Actions

    @Test func successIsDelivered() {
        #expect(Self.action(200) == .delivered)
        #expect(Self.action(200, "") == .delivered)
        #expect(Self.action(200, nil, timestamp: 5) == .delivered)
    }

    @Test func goneDisablesTheTokenAsOfItsTimestamp() {
        #expect(Self.action(410, "Unregistered", timestamp: 1_700_000_000_123) == .disableToken(timestamp: 1_700_000_000_123))
        #expect(Self.action(410, "ExpiredToken", timestamp: 1_650_000_000_000) == .disableToken(timestamp: 1_650_000_000_000))
        #expect(Self.action(410, "Unregistered") == .disableToken(timestamp: nil))
    }

    @Test(arguments: ["BadDeviceToken", "DeviceTokenNotForTopic"])
    func badTokensAreDisabledWithoutATimestamp(reason: String) {
        #expect(Self.action(400, reason) == .disableToken(timestamp: nil))
        // Even if a timestamp were somehow present, these answers carry no "since".
        #expect(Self.action(400, reason, timestamp: 99) == .disableToken(timestamp: nil))
    }

    @Test func expiredProviderTokenRefreshes() {
        #expect(Self.action(403, "ExpiredProviderToken") == .refreshCredentialsAndRetry)
    }

    @Test func temporaryTroubleIsRetried() {
        #expect(Self.action(nil) == .retry)
        #expect(Self.action(nil, "anything") == .retry)
        #expect(Self.action(429, "TooManyRequests") == .retry)
        #expect(Self.action(429) == .retry)
        #expect(Self.action(500, "InternalServerError") == .retry)
        #expect(Self.action(503, "ServiceUnavailable") == .retry)
        #expect(Self.action(503, "Shutdown") == .retry)
        #expect(Self.action(400, "IdleTimeout") == .retry)
    }

    /// A refused credential is an operator's mistake, not the notification's: it waits.
    @Test func credentialRefusalsAreNotDropped() {
        for (status, reason) in [(400, "TopicDisallowed"), (403, "BadCertificate"), (403, "BadCertificateEnvironment"),
                                 (403, "Forbidden"), (403, "InvalidProviderToken"), (403, "MissingProviderToken")] {
            #expect(Self.action(status, reason) == .credentialRefused(reason: "\(status) \(reason)"))
        }
    }

    @Test func permanentRefusalsAreDropped() {
        let cases: [(Int, String)] = [
            (400, "BadCollapseId"), (400, "BadExpirationDate"), (400, "BadMessageId"), (400, "BadPriority"),
            (400, "BadTopic"), (400, "DuplicateHeaders"), (400, "MissingTopic"), (400, "PayloadEmpty"),
            (400, "MissingDeviceToken"), (404, "BadPath"), (405, "MethodNotAllowed"), (413, "PayloadTooLarge"),
        ]
        for (status, reason) in cases {
            let action = Self.action(status, reason)
            #expect(Self.isDrop(action), "\(status) \(reason) → \(action)")
            if case .drop(let why) = action {
                #expect(why.contains(String(status)) && why.contains(reason), "\(why)")
            }
        }
        // Unknown statuses without a reason are dropped too, not retried forever.
        #expect(Self.isDrop(Self.action(400)))
        #expect(Self.isDrop(Self.action(403)))
        #expect(Self.isDrop(Self.action(302)))
    }

    @Test func reasonsMatchExactly() {
        // A reason is matched as Apple spells it, with its status.
        #expect(Self.isDrop(Self.action(400, "baddevicetoken")))
        #expect(Self.isDrop(Self.action(403, "BadDeviceToken")))
        #expect(Self.isDrop(Self.action(400, "ExpiredProviderToken")))
        #expect(Self.isDrop(Self.action(403, "IdleTimeout")))
    }

    // MARK: Backoff

    @Test func backoffDoublesFromOneSecond() {
        var expected: Int64 = 1000
        for attempt in 0..<10 {
            #expect(DeliveryPolicy.retryDelayMilliseconds(attempt: attempt, jitter: 0) == expected, "attempt \(attempt)")
            expected *= 2
        }
        #expect(DeliveryPolicy.retryDelayMilliseconds(attempt: 9, jitter: 0) == 512_000)
    }

    @Test func backoffRespectsTheCap() {
        let fifteenMinutes: Int64 = 15 * 60 * 1000
        for attempt in [10, 11, 20, 63, 64, 1000, Int.max] {
            #expect(DeliveryPolicy.retryDelayMilliseconds(attempt: attempt, jitter: 0) == fifteenMinutes, "attempt \(attempt)")
        }
        // The 30-second cap for unreachable APNs.
        let expected: [Int64] = [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]
        for (attempt, delay) in expected.enumerated() {
            #expect(DeliveryPolicy.retryDelayMilliseconds(attempt: attempt, capMilliseconds: 30_000, jitter: 0) == delay)
        }
        #expect(DeliveryPolicy.retryDelayMilliseconds(attempt: Int.max, capMilliseconds: 30_000, jitter: 0) == 30_000)
    }

    @Test func jitterStaysWithinTwentyPercent() {
        for cap: Int64 in [30_000, 15 * 60 * 1000] {
            for attempt in 0...14 {
                let nominal = DeliveryPolicy.retryDelayMilliseconds(attempt: attempt, capMilliseconds: cap, jitter: 0)
                let low = DeliveryPolicy.retryDelayMilliseconds(attempt: attempt, capMilliseconds: cap, jitter: -0.2)
                let high = DeliveryPolicy.retryDelayMilliseconds(attempt: attempt, capMilliseconds: cap, jitter: 0.2)
                #expect(low >= nominal * 8 / 10 && low <= nominal, "attempt \(attempt): \(low) vs \(nominal)")
                #expect(high >= nominal && high <= nominal * 12 / 10, "attempt \(attempt): \(high) vs \(nominal)")
                #expect(low < high)
            }
        }
        // The default jitter is random but bounded.
        for attempt in 0..<200 {
            let nominal = DeliveryPolicy.retryDelayMilliseconds(attempt: attempt % 12, jitter: 0)
            let delay = DeliveryPolicy.retryDelayMilliseconds(attempt: attempt % 12)
            #expect(delay >= nominal * 8 / 10 && delay <= nominal * 12 / 10, "attempt \(attempt % 12): \(delay)")
        }
    }

    @Test func delayIsNeverBelowOneHundredMilliseconds() {
        for cap: Int64 in [0, 1, 50, 99, 100, 120] {
            for jitter in [-0.2, 0, 0.2] {
                let delay = DeliveryPolicy.retryDelayMilliseconds(attempt: 0, capMilliseconds: cap, jitter: jitter)
                #expect(delay >= 100, "cap \(cap) jitter \(jitter)")
            }
        }
        #expect(DeliveryPolicy.retryDelayMilliseconds(attempt: 0, capMilliseconds: 50, jitter: 0) == 100)
        #expect(DeliveryPolicy.retryDelayMilliseconds(attempt: 0, capMilliseconds: 120, jitter: -0.2) == 100)
        #expect(DeliveryPolicy.retryDelayMilliseconds(attempt: 0, capMilliseconds: 200, jitter: 0) == 200)
    }
}

struct CredentialPausesTests {
    @Test func aRefusedCredentialPausesItsAppThenProbesWithOneNotification() {
        var pauses = CredentialPauses(firstPauseMilliseconds: 1000)
        let app = CredentialPauses.key(provider: "apns", topic: "com.example.mail")
        let other = CredentialPauses.key(provider: "apns", topic: "com.example.other")
        func gate(_ key: String, _ now: Int64) -> CredentialPauses.Gate { pauses.gate(key, now: now) }
        func refused(_ now: Int64) -> (until: Int64, refusal: CredentialPauses.Refusal) { pauses.refused(app, now: now) }

        #expect(gate(app, 0) == .send)
        #expect(refused(0) == (1000, .began))
        // Requests already in flight come back refused too: the pause does not grow.
        #expect(refused(10) == (1000, .alreadyPaused))
        #expect(gate(app, 500) == .wait(until: 1000))
        #expect(gate(other, 500) == .send, "another app's credential is not paused")
        #expect(pauses.pausedCount == 1)

        // After the pause one notification probes; the rest wait for its answer.
        #expect(gate(app, 1000) == .probe)
        #expect(gate(app, 1001) == .wait(until: 1001 + CredentialPauses.probeWaitMilliseconds))
        // Refused again: twice as long, then four times.
        #expect(refused(1100) == (3100, .extended))
        #expect(gate(app, 3100) == .probe)
        #expect(refused(3100) == (7100, .extended))
        // A 5xx says nothing about the credential: the next notification probes again.
        #expect(gate(app, 7100) == .probe)
        pauses.inconclusive(app)
        #expect(gate(app, 7200) == .probe)
        // Accepted: delivery resumes.
        let resumed = pauses.accepted(app)
        #expect(resumed)
        #expect(gate(app, 7300) == .send)
        let again = pauses.accepted(app)
        #expect(pauses.pausedCount == 0 && !again)
    }

    @Test func thePauseStopsGrowingAtFifteenMinutes() {
        var pauses = CredentialPauses(firstPauseMilliseconds: 60_000)
        let app = CredentialPauses.key(provider: "fcm", topic: "com.example.mail")
        var now: Int64 = 0
        var until = pauses.refused(app, now: now).until
        for _ in 0..<30 {
            now = until
            let gate = pauses.gate(app, now: now)
            #expect(gate == .probe)
            until = pauses.refused(app, now: now).until
            #expect(until - now <= CredentialPauses.longestPauseMilliseconds)
        }
        #expect(until - now == CredentialPauses.longestPauseMilliseconds)
    }
}
