/// Push credentials the service refused: a revoked or mistyped APNs key, a certificate
/// for another app or environment, a service account without permission. Every request
/// made with such a credential is refused the same way, and dropping its notifications
/// would discard the queue over an operator's mistake. So they wait in the spool: after
/// a pause (the first `firstPauseMilliseconds`, doubling up to 15 minutes) one goes as a
/// probe; an answer that shows the credential was accepted resumes delivery, another
/// refusal pauses again. A notification that expires meanwhile is dropped as expired.
///
/// Keyed by provider and topic (the app), the unit a credential serves. Belongs to the
/// delivery thread.
struct CredentialPauses {
    private struct State {
        var until: Int64
        var level: Int
        var probing: Bool
    }

    enum Gate: Equatable {
        /// Nothing is paused for this key.
        case send
        /// The pause is over: this notification goes alone, to see whether the credential was fixed.
        case probe
        /// Paused (or a probe is out): not before then.
        case wait(until: Int64)
    }

    static let longestPauseMilliseconds: Int64 = 15 * 60 * 1000
    /// While a probe is out, the others look again this often.
    static let probeWaitMilliseconds: Int64 = 1000

    let firstPauseMilliseconds: Int64
    private var states: [String: State] = [:]

    init(firstPauseMilliseconds: Int64) {
        self.firstPauseMilliseconds = max(1, firstPauseMilliseconds)
    }

    static func key(provider: String, topic: String) -> String { "\(provider) \(topic)" }

    var pausedCount: Int { states.count }

    /// May a notification for `key` be sent now?
    mutating func gate(_ key: String, now: Int64) -> Gate {
        guard var state = states[key] else { return .send }
        if state.probing { return .wait(until: now + Self.probeWaitMilliseconds) }
        if now < state.until { return .wait(until: state.until) }
        state.probing = true
        states[key] = state
        return .probe
    }

    enum Refusal: Equatable {
        /// The first refusal: a pause begins (alert).
        case began
        /// The probe was refused too: a longer pause.
        case extended
        /// A request already in flight when the pause began: nothing changes.
        case alreadyPaused
    }

    /// The service refused the credential. Returns when the key's notifications may be
    /// tried again, and what changed (to alert once per pause, not per notification).
    mutating func refused(_ key: String, now: Int64) -> (until: Int64, refusal: Refusal) {
        guard var state = states[key] else {
            let until = now + firstPauseMilliseconds
            states[key] = State(until: until, level: 0, probing: false)
            return (until, .began)
        }
        guard state.probing || now >= state.until else { return (state.until, .alreadyPaused) }
        state.level += 1
        state.probing = false
        state.until = now + min(firstPauseMilliseconds << Int64(min(state.level, 20)), Self.longestPauseMilliseconds)
        states[key] = state
        return (state.until, .extended)
    }

    /// The service got past the credential (delivered, or refused for another reason):
    /// delivery resumes. True if the key was paused.
    mutating func accepted(_ key: String) -> Bool {
        states.removeValue(forKey: key) != nil
    }

    /// The probe came back without a verdict on the credential (a 5xx, a lost
    /// connection): the next notification probes again.
    mutating func inconclusive(_ key: String) {
        states[key]?.probing = false
    }
}
