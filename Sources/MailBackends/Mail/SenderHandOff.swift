internal import ENSHTTP
internal import ENSConfig
internal import ENSStore
internal import SenderWire
internal import Logging

/// The last step of every new-mail path (Exchange, Graph, blind): a callback's
/// notifications go to ens-sender on one connection, where one sync covers them all, and
/// what the sender did not take is given back to the record's per-minute cap, so the
/// mail server's redelivery after a 503 is not charged twice.
struct SenderHandOff {
    let context: RequestContext

    /// Whether the sender took every notification (else the caller answers so that the
    /// mail server delivers the batch again). A notification the sender refuses as
    /// malformed is dropped and said so: retrying cannot help it.
    func submit(_ notifications: [PushNotification], reserved: Int, recordID: Int64, store: MailSubscriptionStore) throws -> Bool {
        guard !notifications.isEmpty else { return true }
        let logger = context.logger
        let outcomes: [SenderClient.Outcome]
        do {
            outcomes = try SenderClient(socketPath: context.settings.push.socket, connections: context.services.senderConnections)
                .submit(batch: notifications)
        } catch {
            logger.error("ens-sender unreachable; the mail server will retry", metadata: ["record": "\(recordID)", "error": "\(error)"])
            try store.returnNotifications(recordID: recordID, count: reserved)
            return false
        }
        var handed = 0
        var retry: String?
        for outcome in outcomes {
            switch outcome {
            case .accepted:
                handed += 1
            case .refused(let reason) where reason == "bad-notification" || reason == "bad-frame":
                logger.error("ens-sender refused a malformed notification", metadata: ["record": "\(recordID)", "reason": "\(reason)"])
            case .refused(let reason):
                // spool-full, io-error, busy: not acknowledged, so not ours to lose.
                retry = retry ?? reason
            }
        }
        if outcomes.count < notifications.count { retry = retry ?? "the sender hung up before answering them all" }
        guard let retry else { return true }
        logger.error("ens-sender did not take every notification; the mail server will retry", metadata: [
            "record": "\(recordID)", "reason": "\(retry)", "taken": "\(handed)", "notifications": "\(notifications.count)",
        ])
        try store.returnNotifications(recordID: recordID, count: reserved - handed)
        return false
    }
}
