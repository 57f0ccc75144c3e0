internal import ENSHTTP
public import ENSConfig
internal import MailBackends
internal import POSIX

/// nginx's request limits (`limit_req` with `nodelay`, nginx/ens-site.conf), applied
/// by the responders themselves for web servers that cannot apply them cheaply (Apache
/// without mod_security2, CGI): the same zones, rates and bursts, the same leaky
/// bucket, consulted before any database work.
///
/// The counters live in a table every process of the pool shares (`SharedWords`: a
/// memfd the supervisor creates and its workers inherit) or, for CGI programs, in one
/// file they all map. A counter is found by SipHash-2-4 of the zone and the address
/// (or path) under a random key stored in the table, so the table never holds an
/// address, and nobody who does not know the key can aim two keys at one counter.
///
/// Each zone has `slotsPerZone` counters in sets of four; a key takes the first slot of
/// its set that holds it, else the least recently used one (as nginx drops the least
/// recently used state when its zone is full, which only resets that key's count).
/// A slot is four words: a lock (0, or when it was taken, so a process that died
/// holding it is overtaken after 50 ms), the key's hash, the last time (ms) and the
/// excess (milli-requests), as nginx keeps them.
///
/// Unlike nginx, a request one zone refuses has already counted against a zone checked
/// before it (the device API's before /getpublickey's; a URL's before its address's).
public struct RequestLimits: Sendable {
    public enum Zone: Int, CaseIterable, Sendable {
        case api, records, callbacks, callbackHosts, graph, graphHosts
    }

    /// A leaky bucket: `milliPerSecond` thousandths of a request drain each second;
    /// `burst` requests may exceed the rate at once.
    public struct Rate: Sendable, Equatable {
        public var milliPerSecond: UInt64
        public var burst: UInt64

        public init(perSecond: Double, burst: Int) {
            precondition(perSecond > 0 && burst >= 0 && burst <= 16000, "a limit needs a positive rate and a burst of at most 16,000")
            milliPerSecond = UInt64((perSecond * 1000).rounded())
            self.burst = UInt64(burst)
        }
    }

    public let mode: RequestLimitsMode
    let rates: [Rate]
    let table: SharedWords
    let key: (UInt64, UInt64)

    static let magic: UInt64 = 0x454E_534C_494D_0001  // "ENSLIM", layout 1
    static let headerWords = 8
    static let slotsPerZone = 16384
    static let ways = 4
    static let wordsPerSlot = 4
    static var wordCount: Int { headerWords + Zone.allCases.count * slotsPerZone * wordsPerSlot }

    /// The rates ens.conf sets (nginx's by default).
    public static func rates(_ configuration: ENSConfiguration) -> [Rate] {
        [
            Rate(perSecond: Double(configuration.limits.apiRate), burst: configuration.limits.apiBurst),
            Rate(perSecond: Double(configuration.limits.recordsPerMinute) / 60, burst: configuration.limits.recordsBurst),
            Rate(perSecond: Double(configuration.limits.callbackRate), burst: configuration.limits.callbackBurst),
            Rate(perSecond: Double(configuration.limits.callbackHostRate), burst: configuration.limits.callbackHostBurst),
            Rate(perSecond: Double(configuration.limits.graphRate), burst: configuration.limits.graphBurst),
            Rate(perSecond: Double(configuration.limits.graphHostRate), burst: configuration.limits.graphHostBurst),
        ]
    }

    private init(table: SharedWords, mode: RequestLimitsMode, rates: [Rate]) throws(SystemError) {
        precondition(rates.count == Zone.allCases.count, "one rate per zone")
        guard table.load(0) == Self.magic, table.load(4) == UInt64(Self.slotsPerZone), table.load(5) == UInt64(Zone.allCases.count) else {
            throw SystemError(call: "request limits table", errno: 22)  // EINVAL: not a table of this layout
        }
        self.table = table
        self.mode = mode
        self.rates = rates
        key = (table.load(2), table.load(3))
    }

    private static func initialize(_ words: SharedWords) {
        var random = SystemRandomNumberGenerator()
        words.store(2, random.next())
        words.store(3, random.next())
        words.store(4, UInt64(slotsPerZone))
        words.store(5, UInt64(Zone.allCases.count))
        words.store(0, magic)
    }

    /// A new table in shared memory, for the pool: its descriptor goes to the workers.
    static func shared(mode: RequestLimitsMode, rates: [Rate]) throws(SystemError) -> (limits: RequestLimits, fd: Int32) {
        let (words, fd) = try SharedWords.anonymous(name: "ens-limits", count: wordCount)
        initialize(words)
        return (try RequestLimits(table: words, mode: mode, rates: rates), fd)
    }

    /// The pool's table, in a worker (the descriptor the supervisor passed).
    static func inherited(fd: Int32, mode: RequestLimitsMode, rates: [Rate]) throws(SystemError) -> RequestLimits {
        try RequestLimits(table: try SharedWords.inherited(fd: fd, count: wordCount), mode: mode, rates: rates)
    }

    /// The table CGI programs share, in a file.
    static func file(path: String, mode: RequestLimitsMode, rates: [Rate]) throws(SystemError) -> RequestLimits {
        try RequestLimits(table: try SharedWords.file(path: path, count: wordCount, initialize: initialize), mode: mode, rates: rates)
    }

    /// Whether this request is limited here: always, or when its web server asks.
    func applies(asked: Bool) -> Bool {
        switch mode {
        case .off: false
        case .whenAsked: asked
        case .always: true
        }
    }

    /// The refusal for a request to `path` from `address`, or nil to let it through.
    /// Which zones apply follows nginx/ens-locations.conf.
    func refusal(path: String, address: String?, now: UInt64 = MonotonicClock.milliseconds()) -> APIError? {
        if path.hasPrefix("/ews/") {
            if !take(.callbacks, path, now: now) { return Self.tooMany }
            if let address, !take(.callbackHosts, address, now: now) { return Self.tooMany }
            return nil
        }
        if path.hasPrefix("/graph/") {
            // Graph backs off from 4xx and retries 5xx: held back, not lost.
            if !take(.graph, path, now: now) { return .serviceUnavailable }
            if let address, !take(.graphHosts, address, now: now) { return .serviceUnavailable }
            return nil
        }
        if path.hasPrefix("/dovecot/") {
            // Per address only here (nginx also limits per server name).
            if let address, !take(.callbackHosts, address, now: now) { return Self.tooMany }
            return nil
        }
        if path == "/metrics" { return nil }
        guard let address else { return nil }
        if !take(.api, address, now: now) { return Self.tooMany }
        if path == "/getpublickey", !take(.records, address, now: now) { return Self.tooMany }
        return nil
    }

    static let tooMany = APIError(429, .tooManyRequests, "Too many requests; retry later.")

    /// One request against `key`'s bucket in `zone`: true if it is within the limit
    /// (and counted), false if refused (and not counted, as nginx does).
    func take(_ zone: Zone, _ key: String, now: UInt64) -> Bool {
        let hash = max(1, SipHash24.hash(key: self.key, zone: UInt8(zone.rawValue), key))
        let rate = rates[zone.rawValue]
        let set = Int(hash % UInt64(Self.slotsPerZone / Self.ways))
        let first = Self.headerWords + (zone.rawValue * Self.slotsPerZone + set * Self.ways) * Self.wordsPerSlot
        var slot = -1
        var oldest = UInt64.max
        for way in 0..<Self.ways {
            let base = first + way * Self.wordsPerSlot
            if table.load(base + 1) == hash {
                slot = base
                break
            }
            let last = table.load(base + 2)
            if last < oldest {
                oldest = last
                slot = base
            }
        }
        guard lock(slot, now: now) else { return true }  // never: a stuck lock is overtaken
        defer { table.store(slot, 0) }
        var excess: UInt64 = 0
        let last = table.load(slot + 2)
        if table.load(slot + 1) == hash {
            // Another process may have counted a request it stamped later than this one
            // (it read the clock after this one did and took the lock before it): then
            // nothing drained between the two, and the newer stamp stays. (Taking that
            // for a new key reset the count, and a flood over several processes got
            // through half again.) Elapsed time is capped at about a day, which drains
            // any bucket (16,000 requests at 30 a minute take 9 hours), so the product
            // stays within 64 bits at any configurable rate.
            let drained = rate.milliPerSecond * min(now > last ? now - last : 0, 100_000_000) / 1000
            let owed = table.load(slot + 3) + 1000
            excess = owed > drained ? owed - drained : 0
            if excess > rate.burst * 1000 { return false }
        } else {
            // A new key (or one evicted meanwhile): its first request, as nginx counts it.
            table.store(slot + 1, hash)
        }
        table.store(slot + 2, table.load(slot + 1) == hash && last > now ? last : now)
        table.store(slot + 3, excess)
        return true
    }

    private func lock(_ slot: Int, now: UInt64) -> Bool {
        let stamp = now | 1
        for attempt in 0..<100_000 {
            let held = table.load(slot)
            if held == 0 {
                if table.compareExchange(slot, expected: 0, desired: stamp) { return true }
            } else if now > held &+ 50, table.compareExchange(slot, expected: held, desired: stamp) {
                return true  // its holder died (or stalled) mid-update
            }
            if attempt % 64 == 63 { SharedWords.yield() }
        }
        return false
    }
}

/// SipHash-2-4 (Aumasson and Bernstein) of a zone byte and a string under a 128-bit key.
enum SipHash24 {
    static func hash(key: (UInt64, UInt64), zone: UInt8, _ text: String) -> UInt64 {
        var v0: UInt64 = 0x736f_6d65_7073_6575 ^ key.0
        var v1: UInt64 = 0x646f_7261_6e64_6f6d ^ key.1
        var v2: UInt64 = 0x6c79_6765_6e65_7261 ^ key.0
        var v3: UInt64 = 0x7465_6462_7974_6573 ^ key.1
        func round() {
            v0 &+= v1; v1 = (v1 << 13) | (v1 >> 51); v1 ^= v0; v0 = (v0 << 32) | (v0 >> 32)
            v2 &+= v3; v3 = (v3 << 16) | (v3 >> 48); v3 ^= v2
            v0 &+= v3; v3 = (v3 << 21) | (v3 >> 43); v3 ^= v0
            v2 &+= v1; v1 = (v1 << 17) | (v1 >> 47); v1 ^= v2; v2 = (v2 << 32) | (v2 >> 32)
        }
        var word: UInt64 = 0
        var length: UInt64 = 0
        func absorb(_ byte: UInt8) {
            word |= UInt64(byte) << (8 * (length % 8))
            length += 1
            if length % 8 == 0 {
                v3 ^= word; round(); round(); v0 ^= word
                word = 0
            }
        }
        absorb(zone)
        for byte in text.utf8 { absorb(byte) }
        word |= (length & 0xff) << 56
        v3 ^= word; round(); round(); v0 ^= word
        v2 ^= 0xff
        round(); round(); round(); round()
        return v0 ^ v1 ^ v2 ^ v3
    }
}
