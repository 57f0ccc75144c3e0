public import OpenSSL
internal import ENSModel

/// Opened RSA private keys of recently seen users, shared by a process's threads.
///
/// Opening a key means an AES-GCM open plus OpenSSL 3's DER decoding and the key's
/// first-use set-up (Montgomery contexts, blinding), which together cost more than the
/// RSA operation itself. Entries are keyed by shard and record id: an id is never
/// reused within its shard's tables, so a re-created record never gets its predecessor's
/// key, and the same id in two shards names two records.
/// Bounded: the oldest entries go first (an RSA-2048 key object is a few KiB).
public final class PrivateKeyCache: Sendable {
    private struct State {
        var entries: [Entry: RSAPrivateKey] = [:]
        var order: [Entry] = []
        var head = 0
    }

    private let capacity: Int
    private let state = SynchronizedBox(State())

    public init(capacity: Int) {
        self.capacity = capacity
    }

    private struct Entry: Hashable {
        let shard: Int
        let recordID: Int64
    }

    public func key<E: Error>(recordID: Int64, shard: Int = 0, open: () throws(E) -> RSAPrivateKey) throws(E) -> RSAPrivateKey {
        guard capacity > 0 else { return try open() }
        let entry = Entry(shard: shard, recordID: recordID)
        if let cached = state.withLock({ $0.entries[entry] }) { return cached }
        let key = try open()
        state.withLock { state in
            if state.entries[entry] == nil {
                // FIFO ring over the ids, compacted once the stale prefix outgrows it.
                state.order.append(entry)
                if state.entries.count >= capacity, state.head < state.order.count {
                    state.entries[state.order[state.head]] = nil
                    state.head += 1
                    if state.head > capacity {
                        state.order.removeFirst(state.head)
                        state.head = 0
                    }
                }
            }
            state.entries[entry] = key
        }
        return key
    }

    public var count: Int { state.withLock { $0.entries.count } }
}
