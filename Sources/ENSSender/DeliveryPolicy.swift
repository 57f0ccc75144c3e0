/// What to do with an APNs answer (Apple's "Handling notification responses"), as a
/// pure function: status and reason in, action out.
public enum DeliveryAction: Sendable, Equatable {
    /// Accepted by APNs: forget it, record the delivery.
    case delivered
    /// The token is dead for this app: disable it (as of `timestamp`, ms, when APNs gave
    /// one) and never retry.
    case disableToken(timestamp: Int64?)
    /// The provider token expired: mint a new one and send again.
    case refreshProviderTokenAndRetry
    /// Temporary trouble (429, 5xx, lost connection): try again later.
    case retry
    /// Any other refusal: our request is wrong and resending it will not help.
    case drop(reason: String)
}

public enum DeliveryPolicy {
    /// `status` is nil when the request got no HTTP answer (connection refused or lost).
    public static func action(status: Int?, reason: String?, timestamp: Int64?) -> DeliveryAction {
        guard let status else { return .retry }
        switch (status, reason ?? "") {
        case (200, _): return .delivered
        case (410, _): return .disableToken(timestamp: timestamp)
        case (400, "BadDeviceToken"), (400, "DeviceTokenNotForTopic"): return .disableToken(timestamp: nil)
        case (403, "ExpiredProviderToken"): return .refreshProviderTokenAndRetry
        case (400, "IdleTimeout"): return .retry
        case (429, _), (500...599, _): return .retry
        default: return .drop(reason: "\(status) \(reason ?? "")")
        }
    }

    /// Exponential backoff with ±20 % jitter: 1 s, 2 s, 4 s … capped at `capMilliseconds`
    /// (15 minutes for APNs's own 429/5xx answers, as Apple asks; 30 s when APNs could
    /// not be reached at all, so deliveries resume soon after it is back).
    public static func retryDelayMilliseconds(attempt: Int, capMilliseconds: Int64 = 15 * 60 * 1000,
                                              jitter: Double = Double.random(in: -0.2...0.2)) -> Int64 {
        let base = Int64(1000) << Int64(min(attempt, 10))
        let capped = min(base, capMilliseconds)
        // The cap holds after jitter too.
        return max(100, min(capMilliseconds, capped + Int64(Double(capped) * jitter)))
    }
}
