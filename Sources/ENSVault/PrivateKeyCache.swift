public import OpenSSL
internal import ENSModel

/// Opened RSA private keys of recently seen users, shared by a process's threads.
///
/// Opening a key means an AES-GCM open plus OpenSSL 3's DER decoding and the key's
/// first-use set-up (Montgomery contexts, blinding), which together cost more than the
/// RSA operation itself. Entries are keyed by record id, which is never reused, so a
/// re-created record never gets its predecessor's key.
/// Bounded: the oldest entries go first (an RSA-2048 key object is a few KiB).
public final class PrivateKeyCache: Sendable {
    private struct State {
        var entries: [Int64: RSAPrivateKey] = [:]
        var order: [Int64] = []
        var head = 0
    }

    private let capacity: Int
    private let state = SynchronizedBox(State())

    public init(capacity: Int) {
        self.capacity = capacity
    }

    public func key(recordID: Int64, open: () throws -> RSAPrivateKey) throws -> RSAPrivateKey {
        guard capacity > 0 else { return try open() }
        if let cached = state.withLock({ $0.entries[recordID] }) { return cached }
        let key = try open()
        state.withLock { state in
            if state.entries[recordID] == nil {
                // FIFO ring over the ids, compacted once the stale prefix outgrows it.
                state.order.append(recordID)
                if state.entries.count >= capacity, state.head < state.order.count {
                    state.entries[state.order[state.head]] = nil
                    state.head += 1
                    if state.head > capacity {
                        state.order.removeFirst(state.head)
                        state.head = 0
                    }
                }
            }
            state.entries[recordID] = key
        }
        return key
    }

    public var count: Int { state.withLock { $0.entries.count } }
}
