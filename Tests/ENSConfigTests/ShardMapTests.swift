import Testing
@testable import ENSConfig
@testable import ENSStore
import MariaDB

/// The shard map (`db.shard_map`): strict parsing, and the bucket of a userid.
@Suite struct ShardMapTests {
    static let good = """
        # two shards; everything else stays in shard 0
        shard 1 buckets 000-7ff hosts 10.0.1.11:3306,10.0.1.12 name ens   # a Galera cluster
        shard 2 buckets 800-9FF,f00,f01-fff socket /run/mysqld/mysqld.sock name ens_s2

        """

    @Test func parsesShardsAndAssignsBuckets() throws {
        let map = try ShardMap(parsing: Self.good)
        #expect(map.isConfigured && map.shardNumbers == [0, 1, 2])
        #expect(map.shards[0].location == .hosts([DatabaseEndpoint(host: "10.0.1.11", port: 3306), DatabaseEndpoint(host: "10.0.1.12", port: 3306)]))
        #expect(map.shards[1].location == .socket("/run/mysqld/mysqld.sock") && map.shards[1].name == "ens_s2")
        #expect(map.shards[1].buckets == [0x800...0x9ff, 0xf00...0xf00, 0xf01...0xfff])
        #expect(map.shard(ofBucket: 0) == 1 && map.shard(ofBucket: 0x7ff) == 1)
        #expect(map.shard(ofBucket: 0x800) == 2 && map.shard(ofBucket: 0x9ff) == 2 && map.shard(ofBucket: 0xfff) == 2)
        #expect(map.shard(ofBucket: 0xa00) == 0 && map.shard(ofBucket: 0xeff) == 0, "unlisted buckets are shard 0's")
    }

    @Test func aUserIDsBucketIsItsFirstThreeHexDigits() {
        let userID = "a3f" + String(repeating: "0", count: 61)
        #expect(ShardMap.bucket(ofUserID: userID) == 0xa3f)
        #expect(ShardMap.bucket(ofUserID: "fff" + String(repeating: "e", count: 61)) == 4095)
        #expect(ShardMap.bucket(ofUserID: "0" + String(repeating: "1", count: 63)) == 0x011)
        #expect(ShardMap.bucket(ofUserID: "xyz") == nil && ShardMap.bucket(ofUserID: "ab") == nil && ShardMap.bucket(ofUserID: "ABC") == nil)
        let map = try? ShardMap(parsing: "shard 3 buckets a00-aff socket /s name x\n")
        #expect(map?.shard(ofUserID: userID) == 3)
        #expect(ShardMap.unsharded.shard(ofUserID: userID) == 0 && !ShardMap.unsharded.isConfigured)
    }

    @Test func anEmptyMapIsConfiguredButKeepsEverythingInShardZero() throws {
        let map = try ShardMap(parsing: "# no shard yet\n\n")
        #expect(map.isConfigured && map.shards.isEmpty && map.shard(ofBucket: 1234) == 0)
    }

    @Test(arguments: [
        ("shard 1 buckets 000-0ff hosts db1:3306\n", "must read"),
        ("shard 1 buckets 000-0ff hosts db1:3306 name ens extra\n", "must read"),
        ("shard 1 bucket 000-0ff hosts db1:3306 name ens\n", "must read"),
        ("shard 1 buckets 000-0ff host db1:3306 name ens\n", "must read"),
        ("shard 0 buckets 000-0ff hosts db1:3306 name ens\n", "shard number"),
        ("shard 01 buckets 000-0ff hosts db1:3306 name ens\n", "shard number"),
        ("shard one buckets 000-0ff hosts db1:3306 name ens\n", "shard number"),
        ("shard 1 buckets 000-1000 hosts db1:3306 name ens\n", "not a bucket"),
        ("shard 1 buckets 0ff-000 hosts db1:3306 name ens\n", "not a bucket"),
        ("shard 1 buckets 00g hosts db1:3306 name ens\n", "not a bucket"),
        ("shard 1 buckets 000-0ff, hosts db1:3306 name ens\n", "not a bucket"),
        ("shard 1 buckets 000--0ff hosts db1:3306 name ens\n", "not a bucket"),
        ("shard 1 buckets 000-0ff,080 hosts db1:3306 name ens\n", "bucket 80 is shard 1's already"),
        ("shard 1 buckets 000-0ff hosts db1 name ens\nshard 2 buckets 0fe-1ff hosts db2 name ens\n", "line 2 of the map: bucket fe is shard 1's"),
        ("shard 1 buckets 000 hosts db1 name ens\nshard 1 buckets 001 hosts db2 name ens\n", "shard 1 is listed twice"),
        ("shard 1 buckets 000 hosts db1:99999 name ens\n", "is not host:port"),
        ("shard 1 buckets 000 socket run/mysqld.sock name ens\n", "absolute path"),
        ("shard 1 buckets 000 hosts db1 name ens-2\n", "name must be"),
    ])
    func malformedLinesAreErrors(text: String, problem: String) {
        do {
            _ = try ShardMap(parsing: text)
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.key == "db.shard_map")
            #expect(error.problem.contains(problem), "\(error.problem)")
        }
    }

    @Test func theKeyIsEmptyByDefaultAndNamesAFile() throws {
        #expect(ENSConfiguration().database.shardMapFile == nil)
        #expect(try ENSConfiguration().database.shardMap() == .unsharded)
        let config = try ENSConfiguration(file: ConfigFile(parsing: "db.shard_map = /nonexistent/ens-shards\n"))
        #expect(config.database.shardMapFile == "/nonexistent/ens-shards")
        #expect(throws: ConfigError.self) { try config.database.shardMap() }
    }

    /// Every shard is reached as shard 0 is (accounts, password, TLS), at its own place.
    @Test func shardSettingsAreShardZerosWithTheMapsPlaceAndSchema() throws {
        let base = DatabaseSettings(unixSocket: "/run/mysqld/mysqld.sock", user: "ens_service", password: "pw", database: "ens",
                                    tls: .init(caFile: "/etc/ca.pem"))
        let shards = ShardDatabases(map: try ShardMap(parsing: Self.good), base: base)
        let first = shards.settings(shard: 1)
        #expect(first.unixSocket == nil && first.hosts.map(\.description) == ["10.0.1.11:3306", "10.0.1.12:3306"] && first.database == "ens")
        #expect(first.user == "ens_service" && first.password == "pw" && first.tls == base.tls)
        let second = shards.settings(shard: 2)
        #expect(second.unixSocket == "/run/mysqld/mysqld.sock" && second.database == "ens_s2")
        #expect(shards.settings(shard: 0).database == "ens")
    }
}

/// `freeze` lines: the buckets being moved, refused (503) until the move is done.
@Suite struct ShardMapFreezeTests {
    @Test func frozenBucketsAreListedAndKeepTheirShard() throws {
        let map = try ShardMap(parsing: "shard 1 buckets 800-fff socket /s name s1\nfreeze 7ff-800,a00\n")
        #expect(map.frozen == [0x7ff...0x800, 0xa00...0xa00])
        #expect(map.isFrozen(bucket: 0x7ff) && map.isFrozen(bucket: 0x800) && map.isFrozen(bucket: 0xa00))
        #expect(!map.isFrozen(bucket: 0x7fe) && !map.isFrozen(bucket: 0x801) && !ShardMap.unsharded.isFrozen(bucket: 0))
        #expect(map.shard(ofBucket: 0x7ff) == 0 && map.shard(ofBucket: 0x800) == 1)
    }

    @Test(arguments: [
        ("freeze\n", "must read `freeze"),
        ("freeze 000 001\n", "must read `freeze"),
        ("freeze 000-0zz\n", "not a bucket"),
        ("freeze 000-0ff\nfreeze 080\n", "line 2 of the map: bucket 80 is frozen twice"),
    ])
    func malformedFreezeLinesAreErrors(text: String, problem: String) {
        #expect {
            try ShardMap(parsing: text)
        } throws: { error in
            (error as? ConfigError)?.problem.contains(problem) == true
        }
    }
}
