/// Which database holds which users' records (docs/scaling.md, "Records sharded by
/// user"). A user's bucket is the first three hex digits of its `userid` (0–4095); the
/// map, a file `db.shard_map` names, gives buckets to shards 1, 2, ...; every bucket it
/// does not list is shard 0's, the database of the db.* settings, which also keeps the
/// tables that belong to no user. Without a map there is shard 0 alone.
///
/// One line per shard, `#` starting a comment:
///
///     shard 1 buckets 000-7ff hosts 10.0.1.11:3306,10.0.1.12:3306 name ens
///     shard 2 buckets 800-bff,f00-fff socket /run/mysqld/mysqld.sock name ens_s2
///
/// Buckets are written in hex as in the userid, a single one or a range `lo-hi`. A line
/// `freeze <lo>-<hi>[,...]` makes those buckets' requests answer 503 (the devices, Exchange
/// and Graph retry) while their rows are copied to another shard (docs/scaling.md,
/// "Moving a bucket").
public struct ShardMap: Sendable, Equatable {
    public static let bucketCount = 4096

    /// Where a shard's database is, besides db.*'s accounts and TLS settings.
    public enum Location: Sendable, Equatable {
        case hosts([DatabaseEndpoint])
        case socket(String)
    }

    public struct Shard: Sendable, Equatable {
        public let number: Int
        public let buckets: [ClosedRange<Int>]
        public let location: Location
        /// The schema (database) name.
        public let name: String
    }

    /// Shards 1, 2, ... in the map's order (shard 0 is db.*).
    public let shards: [Shard]
    /// Whether a map is configured at all: then new callback URLs name their bucket,
    /// even while every bucket is still shard 0's, so a later move needs no new URLs.
    public let isConfigured: Bool
    /// The buckets being moved (`freeze` lines).
    public let frozen: [ClosedRange<Int>]
    /// The shard of each bucket.
    private let owners: [UInt16]
    private let frozenBuckets: [Bool]

    /// Shard 0 alone: no map.
    public static let unsharded = ShardMap(shards: [], frozen: [], isConfigured: false)

    private init(shards: [Shard], frozen: [ClosedRange<Int>], isConfigured: Bool) {
        self.shards = shards
        self.frozen = frozen
        self.isConfigured = isConfigured
        var frozenBuckets = [Bool](repeating: false, count: Self.bucketCount)
        for range in frozen {
            for bucket in range { frozenBuckets[bucket] = true }
        }
        self.frozenBuckets = frozenBuckets
        var owners = [UInt16](repeating: 0, count: Self.bucketCount)
        for shard in shards {
            for range in shard.buckets {
                for bucket in range { owners[bucket] = UInt16(shard.number) }
            }
        }
        self.owners = owners
    }

    /// Every shard number, 0 first.
    public var shardNumbers: [Int] { [0] + shards.map(\.number) }

    public func shard(ofBucket bucket: Int) -> Int {
        precondition((0..<Self.bucketCount).contains(bucket), "bucket \(bucket) is outside 0..<4096")
        return Int(owners[bucket])
    }

    /// Whether the bucket's requests are refused for now (its rows are being moved).
    public func isFrozen(bucket: Int) -> Bool {
        frozenBuckets[bucket]
    }

    /// The bucket of a userid (64 hex characters, as `Identity` checks it): its first three
    /// hex digits. Nil for anything else.
    public static func bucket(ofUserID userID: String) -> Int? {
        let prefix = userID.utf8.prefix(3)
        guard prefix.count == 3 else { return nil }
        var bucket = 0
        for byte in prefix {
            guard let digit = hexDigit(byte) else { return nil }
            bucket = bucket << 4 | digit
        }
        return bucket
    }

    /// The shard whose tables hold `userID`'s record.
    public func shard(ofUserID userID: String) -> Int {
        Self.bucket(ofUserID: userID).map(shard(ofBucket:)) ?? 0
    }

    /// The map file's text; `key` names the setting in errors. Anything but the form
    /// above (an unknown word, a bad number, a bucket listed twice, a shard number used
    /// twice) is an error: a typo must stop start-up, not send users to the wrong database.
    public init(parsing text: String, key: String = "db.shard_map") throws(ConfigError) {
        var shards: [Shard] = []
        var frozen: [ClosedRange<Int>] = []
        var claimed = [Int?](repeating: nil, count: Self.bucketCount)
        var frozenClaimed = [Int?](repeating: nil, count: Self.bucketCount)
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = rawLine.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" }).map(String.init)
            guard !words.isEmpty else { continue }
            func fail(_ problem: String) -> ConfigError {
                ConfigError(key: key, problem: "line \(index + 1) of the map: \(problem)")
            }
            if words[0] == "freeze" {
                guard words.count == 2 else { throw fail("must read `freeze <lo>-<hi>[,...]`") }
                frozen += try Self.ranges(words[1], claiming: &frozenClaimed, by: 0, fail: fail) { bucket, _ in "bucket \(bucket) is frozen twice" }
                continue
            }
            guard words.count == 8, words[0] == "shard", words[2] == "buckets", words[6] == "name",
                  words[4] == "hosts" || words[4] == "socket" else {
                throw fail("must read `shard <n> buckets <lo>-<hi>[,...] hosts <host:port,...>|socket <path> name <schema>`")
            }
            guard let number = Int(words[1]), (1...999).contains(number), String(number) == words[1] else {
                throw fail("shard number must be 1 to 999 (shard 0 is db.*), got '\(words[1].prefix(20))'")
            }
            guard !shards.contains(where: { $0.number == number }) else { throw fail("shard \(number) is listed twice") }
            let ranges = try Self.ranges(words[3], claiming: &claimed, by: number,
                                         fail: fail) { bucket, owner in "bucket \(bucket) is shard \(owner)'s already" }
            let location: Location
            if words[4] == "socket" {
                guard words[5].hasPrefix("/") else { throw fail("socket must be an absolute path") }
                location = .socket(words[5])
            } else {
                do throws(ConfigError) {
                    location = .hosts(try ConfigValue<[DatabaseEndpoint]>.endpoints.parse(key, words[5]))
                } catch {
                    throw fail(error.problem)
                }
            }
            do throws(ConfigError) {
                _ = try ConfigValue<String>.identifier.parse(key, words[7])
            } catch {
                throw fail("name \(error.problem)")
            }
            shards.append(Shard(number: number, buckets: ranges, location: location, name: words[7]))
        }
        self.init(shards: shards, frozen: frozen, isConfigured: true)
    }

    /// `lo-hi,...` of one line; each bucket is marked as `owner`'s in `claimed`, and a
    /// bucket already claimed is an error (`twice` says it, from the bucket in hex and its claimant).
    private static func ranges(_ text: String, claiming claimed: inout [Int?], by owner: Int, fail: (String) -> ConfigError,
                               twice: (String, Int) -> String) throws(ConfigError) -> [ClosedRange<Int>] {
        var ranges: [ClosedRange<Int>] = []
        for item in text.split(separator: ",", omittingEmptySubsequences: false) {
            let ends = item.split(separator: "-", omittingEmptySubsequences: false)
            guard (1...2).contains(ends.count), let low = hexBucket(ends[0]), let high = hexBucket(ends[ends.count - 1]), low <= high else {
                throw fail("'\(item.prefix(20))' is not a bucket or range of buckets (hex 000-fff, low-high)")
            }
            for bucket in low...high {
                if let previous = claimed[bucket] { throw fail(twice(String(bucket, radix: 16), previous)) }
                claimed[bucket] = owner
            }
            ranges.append(low...high)
        }
        return ranges
    }

    /// Reads the map at `path`.
    public static func load(path: String, key: String = "db.shard_map") throws(ConfigError) -> ShardMap {
        try ShardMap(parsing: ENSConfiguration.textFile(key: key, path: path, limit: 1 << 20), key: key)
    }

    /// Three hex digits, as the map writes a bucket.
    private static func hexBucket(_ text: Substring) -> Int? {
        guard text.utf8.count == 3 else { return nil }
        return bucket(ofUserID: String(text).lowercased())
    }

    private static func hexDigit(_ byte: UInt8) -> Int? {
        switch byte {
        case 0x30...0x39: Int(byte - 0x30)
        case 0x61...0x66: Int(byte - 0x61 + 10)
        default: nil
        }
    }
}

extension DatabaseSettings {
    /// The shard map `db.shard_map` names, read and checked; without one, shard 0 alone.
    public func shardMap() throws(ConfigError) -> ShardMap {
        guard let shardMapFile else { return .unsharded }
        return try ShardMap.load(path: shardMapFile)
    }
}
