public import OpenSSL

/// Opened RSA private keys of recently seen users, shared by a process's threads.
///
/// Opening a key means an AES-GCM open plus OpenSSL 3's DER decoding and the key's
/// first-use set-up (Montgomery contexts, blinding), which together cost more than the
/// RSA operation itself. Entries are keyed by userid and checked against a hash of the
/// sealed key, so a re-created record never gets its predecessor's key.
/// Bounded: the oldest entries go first (an RSA-2048 key object is a few KiB).
public final class PrivateKeyCache: Sendable {
    private struct Entry {
        let sealedHash: [UInt8]
        let key: RSAPrivateKey
    }

    private struct State {
        var entries: [String: Entry] = [:]
        var order: [String] = []
        var head = 0
    }

    private let capacity: Int
    private let state = SynchronizedBox(State())

    public init(capacity: Int) {
        self.capacity = capacity
    }

    public func key(userID: String, sealed: [UInt8], open: () throws -> RSAPrivateKey) throws -> RSAPrivateKey {
        guard capacity > 0 else { return try open() }
        let sealedHash = Digest.sha256(sealed)
        let cached: RSAPrivateKey? = state.withLock { state in
            guard let entry = state.entries[userID], Digest.constantTimeEqual(entry.sealedHash, sealedHash) else { return nil }
            return entry.key
        }
        if let cached { return cached }
        let key = try open()
        state.withLock { state in
            if state.entries[userID] == nil {
                // FIFO ring over the userids, compacted when half of it is stale.
                state.order.append(userID)
                if state.entries.count >= capacity, state.head < state.order.count {
                    state.entries[state.order[state.head]] = nil
                    state.head += 1
                    if state.head > capacity {
                        state.order.removeFirst(state.head)
                        state.head = 0
                    }
                }
            }
            state.entries[userID] = Entry(sealedHash: sealedHash, key: key)
        }
        return key
    }

    public var count: Int { state.withLock { $0.entries.count } }
}
