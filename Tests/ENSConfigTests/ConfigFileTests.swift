import ENSTestSupport
import Foundation
import Testing
@testable import ENSConfig

@Suite struct ConfigFileTests {
    @Test func parsesKeysCommentsAndBlankLines() throws {
        let file = try ConfigFile(parsing: "# comment\n\nfcgi.threads = 8\n  db.name=ens_test  \n")
        #expect(file.values == ["fcgi.threads": "8", "db.name": "ens_test"])
        let config = try ENSConfiguration(file: file)
        #expect(config.pool.threads == 8)
        #expect(config.database.name == "ens_test")
    }

    @Test func unknownKeyIsNamedWithItsLine() throws {
        let file = try ConfigFile(parsing: "fcgi.threads = 8\nfcgi.thread = 9\n")
        #expect(throws: ConfigError(key: "fcgi.thread", line: 2, problem: "is not a known setting")) {
            try ENSConfiguration(file: file)
        }
    }

    @Test func badValueNamesTheKey() throws {
        let file = try ConfigFile(parsing: "fcgi.processes = lots\n")
        do {
            _ = try ENSConfiguration(file: file)
            Issue.record("expected an error")
        } catch {
            #expect(error.key == "fcgi.processes")
            #expect(error.description.contains("fcgi.processes"))
            #expect(error.description.contains("line 1"))
        }
    }

    /// db.hosts: the nodes of a Galera cluster, in order, with IPv6 in brackets and
    /// 3306 where the port is left out; refused beside a socket, and garbage named.
    @Test func databaseServersAreListedInOrder() throws {
        let config = try ENSConfiguration(file: ConfigFile(parsing: "db.socket =\ndb.hosts = 10.0.0.11:3307, db2.example.test ,[fd00::13]:3308, " +
                                                                    "[fd00::14]\n"))
        #expect(config.database.hosts.map(\.description) == ["10.0.0.11:3307", "db2.example.test:3306", "[fd00::13]:3308", "[fd00::14]:3306"])
        #expect(try ENSConfiguration(file: ConfigFile(parsing: "db.socket =\ndb.hosts =\n")).database.hosts.isEmpty)

        #expect(throws: ConfigError.self) { try ENSConfiguration(file: ConfigFile(parsing: "db.hosts = 10.0.0.11:3306\n")) }
        for garbage in ["fd00::13", "10.0.0.1:0", "10.0.0.1:99999", "[fd00::1", "[fd00::1]3306", "a:b", ":3306", "host/x:1",
                        Array(repeating: "h:1", count: 17).joined(separator: ",")] {
            do {
                _ = try ENSConfiguration(file: ConfigFile(parsing: "db.socket =\ndb.hosts = \(garbage)\n"))
                Issue.record("accepted db.hosts = \(garbage)")
            } catch {
                #expect(error.key == "db.hosts", "\(garbage)")
            }
        }
    }

    /// An operator's ens.conf from before the sender became provider-neutral keeps
    /// starting: the old keys work as the new ones and are reported as deprecated.
    @Test func renamedSenderKeysStillWorkAndAreReported() throws {
        let old = try ENSConfiguration(file: ConfigFile(parsing: """
            apns.socket = /run/ens/old.sock
            apns.spool_dir = /var/lib/ens/old-spool
            apns.spool_max = 77
            apns.max_in_flight = 33
            apns.connections = 3
            apns.ca_file = /etc/ens/push-ca.pem
            """))
        #expect(old.push.socket == "/run/ens/old.sock")
        #expect(old.push.spoolDirectory == "/var/lib/ens/old-spool")
        #expect(old.push.spoolCapacity == 77)
        #expect(old.push.maximumInFlight == 33)
        #expect(old.push.connectionsPerHost == 3)
        #expect(old.push.caFile == "/etc/ens/push-ca.pem")
        #expect(old.deprecatedKeysUsed.map(\.old).sorted() == ENSConfiguration.deprecatedKeys.keys.sorted())
        #expect(old.deprecatedKeysUsed.allSatisfy { ENSConfiguration.deprecatedKeys[$0.old] == $0.new })

        let new = try ENSConfiguration(file: ConfigFile(parsing: "push.socket = /run/ens/push.sock\npush.connections = 4\n"))
        #expect(new.push.socket == "/run/ens/push.sock" && new.push.connectionsPerHost == 4)
        #expect(new.deprecatedKeysUsed.isEmpty)

        // A bad value under the old name is reported under the name the file used.
        #expect(throws: ConfigError.self) { try ENSConfiguration(file: ConfigFile(parsing: "apns.connections = 99\n")) }
        do {
            _ = try ENSConfiguration(file: ConfigFile(parsing: "apns.connections = 99\n"))
        } catch {
            #expect(error.key == "apns.connections")
        }
        // Both names at once is a mistake, named with both lines.
        do {
            _ = try ENSConfiguration(file: ConfigFile(parsing: "push.socket = /a.sock\napns.socket = /b.sock\n"))
            Issue.record("expected an error")
        } catch {
            #expect(error.key == "apns.socket")
            #expect(error.description.contains("push.socket"))
            #expect(error.description.contains("line 1"))
        }
    }

    @Test func rejectsGarbage() {
        #expect(throws: ConfigError.self) { try ConfigFile(parsing: "just words\n") }
        #expect(throws: ConfigError.self) { try ConfigFile(parsing: "= value\n") }
        #expect(throws: ConfigError.self) { try ConfigFile(parsing: "a.b = 1\na.b = 2\n") }
        #expect(throws: ConfigError.self) { try ConfigFile(parsing: "a.b = x\u{01}y\n") }
        #expect(throws: ConfigError.self) { try ENSConfiguration(file: ConfigFile(parsing: "fcgi.socket = relative/path\n")) }
        #expect(throws: ConfigError.self) { try ENSConfiguration(file: ConfigFile(parsing: "fcgi.socket_mode = 999\n")) }
    }

    /// exchange.proxy: an http://host:port proxy or nothing; no user info (a password
    /// does not belong in ens.conf), no path, no other scheme.
    @Test func exchangeProxyIsAnHTTPHostAndPort() throws {
        #expect(ENSConfiguration().exchange.proxy == nil)
        #expect(try ENSConfiguration(file: ConfigFile(parsing: "exchange.proxy =\n")).exchange.proxy == nil)
        #expect(try ENSConfiguration(file: ConfigFile(parsing: "exchange.proxy = http://Proxy.example.com:3128/\n")).exchange.proxy
                == "http://proxy.example.com:3128")
        #expect(try ENSConfiguration(file: ConfigFile(parsing: "exchange.proxy = http://[fd00::1]:8080\n")).exchange.proxy == "http://[fd00::1]:8080")
        for bad in ["https://proxy.example.com:3128", "http://user:pw@proxy.example.com:3128", "http://proxy.example.com",
                    "http://proxy.example.com:3128/path", "http://fd00::1:8080", "http://proxy.example.com:0", "socks5://p:1080"] {
            #expect(throws: ConfigError.self, "\(bad)") { try ENSConfiguration(file: ConfigFile(parsing: "exchange.proxy = \(bad)\n")) }
        }
    }

    @Test func missingSecretFileNamesTheKey() throws {
        var config = ENSConfiguration()
        config.secrets.masterKeyFile = "/nonexistent/ens/master.key"
        do {
            _ = try config.secrets.masterKey()
            Issue.record("expected an error")
        } catch {
            #expect(error.key == "security.master_key_file" && error.problem.contains("/nonexistent/ens/master.key"))
        }
    }
}

@Suite struct APNsCertificateConfigTests {
    /// APNs certificates are configured per bundle id, as key suffixes.
    @Test func apnsCertificatesAreKeyedByBundleID() throws {
        let file = try ConfigFile(parsing: """
            apns.certificate.com.example.mail = /etc/ens/secrets/mail.p12
            apns.certificate_password_file.com.example.mail = /etc/ens/secrets/mail.password
            apns.certificate.com.example.other = /etc/ens/secrets/other.pem
            """)
        let config = try ENSConfiguration(file: file)
        #expect(config.apns.certificates["com.example.mail"] == APNsCertificateFiles(path: "/etc/ens/secrets/mail.p12",
                                                                                     passwordFile: "/etc/ens/secrets/mail.password"))
        #expect(config.apns.certificates["com.example.other"] == APNsCertificateFiles(path: "/etc/ens/secrets/other.pem", passwordFile: nil))
        #expect(throws: ConfigError.self) { try ENSConfiguration(file: ConfigFile(parsing: "apns.certificate. = /x.p12")) }
        #expect(throws: ConfigError.self) { try ENSConfiguration(file: ConfigFile(parsing: "apns.certificate.com.x = relative.p12")) }
    }

    @Test func fcmServiceAccountsAreKeyedByPackageName() throws {
        let config = try ENSConfiguration(file: ConfigFile(parsing: """
            fcm.service_account.com.example.mail = /etc/ens/secrets/fcm-mail.json
            fcm.service_account.com.example.other = /etc/ens/secrets/fcm-other.json
            fcm.url = https://fcm.example.test
            """))
        #expect(config.fcm.serviceAccountFiles == ["com.example.mail": "/etc/ens/secrets/fcm-mail.json",
                                                   "com.example.other": "/etc/ens/secrets/fcm-other.json"])
        #expect(config.fcm.url == "https://fcm.example.test")
        #expect(ENSConfiguration().fcm.serviceAccountFiles.isEmpty && ENSConfiguration().fcm.url == "https://fcm.googleapis.com")
        for bad in ["fcm.service_account. = /x.json", "fcm.service_account.com.x = relative.json", "fcm.url = http://fcm.example.test"] {
            #expect(throws: ConfigError.self, "\(bad)") { try ENSConfiguration(file: ConfigFile(parsing: bad)) }
        }
    }

}

@Suite struct ConfigExampleTests {
    /// The documented example must be a valid config: every key known, every value
    /// accepted, and every default it shows equal to the real default.
    @Test func theShippedExampleParsesToTheDefaults() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("config/ens.conf.example"), encoding: .utf8)
        let file = try ConfigFile(parsing: text)
        let parsed = try ENSConfiguration(file: file)
        let defaults = ENSConfiguration()
        #expect(parsed.pool.socket == defaults.pool.socket)
        #expect(parsed.pool.threads == defaults.pool.threads)
        #expect(parsed.pool.processes == defaults.pool.processes)
        #expect(parsed.pool.maxBodyBytes == defaults.pool.maxBodyBytes)
        #expect(parsed.database.name == defaults.database.name)
        #expect(parsed.secrets.keyPoolSize == defaults.secrets.keyPoolSize)
        #expect(parsed.secrets.keyCacheSize == defaults.secrets.keyCacheSize)
        #expect(parsed.push.spoolCapacity == defaults.push.spoolCapacity)
        #expect(parsed.apns.productionURL == defaults.apns.productionURL)
        #expect(parsed.secrets.apiTokenRefresh == defaults.secrets.apiTokenRefresh)
        // Every setting is documented.
        for key in ENSConfiguration.knownKeys where !["apns.key_id", "apns.team_id"].contains(key) {
            #expect(file.values[key] != nil, "config/ens.conf.example does not document \(key)")
        }
    }
}

struct ConfigReloadTests {
    @Test func aResponderAlsoAppliesItsLimits() throws {
        let running = try ConfigFile(parsing: "exchange.max_items_per_callback = 50\nfcgi.threads = 4\n")
        let reloaded = try ConfigFile(parsing: "exchange.max_items_per_callback = 2\nfcgi.threads = 8\n")
        let reload = ConfigReload(running: running, reloaded: reloaded, alsoApplied: ["exchange.max_items_per_callback"])
        #expect(reload.applied == ["exchange.max_items_per_callback"] && reload.needRestart == ["fcgi.threads"])
        // Every reloadable key is a real setting.
        for key in ConfigReload.responderKeys { #expect(ENSConfiguration.knownKeys.contains(key), "\(key)") }
    }

    @Test func aReloadAppliesTheLogLevelAndNamesEveryOtherChange() throws {
        let running = try ConfigFile(parsing: "log.level = info\nfcgi.threads = 4\npush.connections = 2\n")
        let reloaded = try ConfigFile(parsing: "log.level = debug\nfcgi.threads = 8\nkeys.pool_size = 10\n")
        let reload = ConfigReload(running: running, reloaded: reloaded)
        #expect(reload.applied == ["log.level"])
        // Changed, added and removed keys alike.
        #expect(reload.needRestart == ["fcgi.threads", "keys.pool_size", "push.connections"])
        #expect(ConfigReload(running: running, reloaded: running) == ConfigReload(running: reloaded, reloaded: reloaded))
        #expect(ConfigReload(running: running,
                             reloaded: running).applied.isEmpty && ConfigReload(running: running, reloaded: running).needRestart.isEmpty)
    }
}
