/// What the shared delivery machinery does with a push service's answer; each
/// `PushProvider` maps its own answers onto these (APNsProvider.action for Apple's).
public enum DeliveryAction: Sendable, Equatable {
    /// Accepted by the push service: forget it, record the delivery.
    case delivered
    /// The token is dead for this app: disable it (as of `timestamp`, ms, when the
    /// provider gave one) and never retry.
    case disableToken(timestamp: Int64?)
    /// Our credentials expired (APNs' provider token, an OAuth access token): get new
    /// ones and send again, backed off like any retry.
    case refreshCredentialsAndRetry
    /// Temporary trouble (429, 5xx, lost connection): try again later.
    case retry
    /// The service refused our credential itself (a revoked or wrong key, a certificate
    /// for another app or environment): every notification sent with it would be
    /// refused alike, so they wait until it is fixed (`CredentialPauses`).
    case credentialRefused(reason: String)
    /// Any other refusal: our request is wrong and resending it will not help.
    case drop(reason: String)
}

/// The retry schedule every provider shares.
public enum DeliveryPolicy {
    /// Exponential backoff with ±20 % jitter: 1 s, 2 s, 4 s … capped at `capMilliseconds`
    /// (15 minutes for a provider's own 429/5xx answers, as Apple asks; 30 s when it
    /// could not be reached at all, so deliveries resume soon after it is back).
    public static func retryDelayMilliseconds(attempt: Int, capMilliseconds: Int64 = 15 * 60 * 1000,
                                              jitter: Double = Double.random(in: -0.2...0.2)) -> Int64 {
        let base = Int64(1000) << Int64(min(attempt, 10))
        let capped = min(base, capMilliseconds)
        // The cap holds after jitter too.
        return max(100, min(capMilliseconds, capped + Int64(Double(capped) * jitter)))
    }
}
