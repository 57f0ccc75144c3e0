import ENSTestSupport
@testable import ENSConfig
import ENSModel
import Testing

/// The key declarations (beside each component's properties, Sources/ENSConfig/
/// Components) are the configuration's one source: these tests hold their formatters to
/// their parsers, and the parser to its ranges, errors and reload rules.
@Suite struct ConfigDeclarationTests {
    /// Each key's default, written out as the example file writes it, parses back to
    /// the component's typed default; a key without one shows a commented example that
    /// parses.
    @Test func everyDefaultWrittenOutParsesBack() throws {
        let defaults = ENSConfiguration()
        for key in ConfigSchema.keys {
            #expect(key.defaultRoundTrips(), "\(key.name)")
            var config = ENSConfiguration()
            guard let text = key.defaultValue else {
                guard case .commented(let example) = key.example else {
                    Issue.record("\(key.name) has no default and no commented example")
                    continue
                }
                try key.apply(&config, key.name, example)
                continue
            }
            try key.apply(&config, key.name, text)
            #expect(key.sameValue(config, defaults), "\(key.name) = \(text) does not parse back to the built-in default")
        }
        // All of them at once, through the file parser and its cross-key checks.
        let file = ConfigSchema.keys.compactMap { key in key.defaultValue.map { "\(key.name) = \($0)" } }.joined(separator: "\n")
        let parsed = try ENSConfiguration(file: ConfigFile(parsing: file))
        for key in ConfigSchema.keys { #expect(key.sameValue(parsed, defaults), "\(key.name)") }
    }

    /// A number just outside a key's range is refused with an error naming the key, its
    /// line and the range.
    @Test func outOfRangeValuesNameTheKey() throws {
        let ranged = ConfigSchema.keys.filter { $0.range != nil }
        #expect(ranged.count == 56)
        for key in ranged {
            guard let range = key.range else { continue }
            for bad in [range.lowerBound - 1, range.upperBound + 1] {
                do {
                    _ = try ENSConfiguration(file: ConfigFile(parsing: "# first\n\(key.name) = \(bad)\n"))
                    Issue.record("\(key.name) = \(bad) was accepted")
                } catch {
                    #expect(error.key == key.name && error.line == 2, "\(key.name)")
                    #expect(error.description.contains("must be an integer from \(range.lowerBound) to \(range.upperBound)"), "\(error)")
                }
            }
            #expect(throws: Never.self) { try ENSConfiguration(file: ConfigFile(parsing: "\(key.name) = \(range.upperBound)\n")) }
        }
    }

    /// What was unknown before the declarations still is, named with its line.
    @Test func unknownKeysAreRejected() throws {
        let cases: [(String, String)] = [
            ("fcgi.thread", "is not a known setting"),
            ("graph.tenant", "is not a known setting"),
            ("push.socket_dir", "is not a known setting"),
            ("graph.tenant.contoso.secret", "is not a tenant setting (id, domains, client_id, certificate_file, key_file)"),
            ("graph.tenant.Contoso.id",
             "must be graph.tenant.<name>.<field>, the name in lowercase letters, digits, - and _ (e.g. graph.tenant.contoso.id)"),
            ("graph.tenant.id", "must be graph.tenant.<name>.<field>, the name in lowercase letters, digits, - and _ (e.g. graph.tenant.contoso.id)"),
        ]
        for (key, problem) in cases {
            #expect(throws: ConfigError(key: key, line: 1, problem: problem)) {
                try ENSConfiguration(file: ConfigFile(parsing: "\(key) = /x\n"))
            }
        }
        #expect(throws: ConfigError(key: "fcm.service_account.", line: 1,
                                    problem: "must end with a bundle id (e.g. apns.certificate.com.example.mail)")) {
            try ENSConfiguration(file: ConfigFile(parsing: "fcm.service_account. = /x.json\n"))
        }
    }

    /// Messages that were written by hand before the declarations, unchanged.
    @Test func errorMessagesAreAsBefore() throws {
        let cases: [(String, String)] = [
            ("policy.on_error = maybe", "must be allow or deny"),
            ("privacy.minimum_mode = loud", "must be one of preview, generic, encrypted, secure"),
            ("log.level = chatty", "must be one of trace, debug, info, notice, warning, error, critical"),
            ("fcgi.batch_scheduling = perhaps", "must be yes or no"),
            ("exchange.callback_url = http://ens.example.com/ews/",
             "must be the https:// URL of the callback location, ending in /ews/ (e.g. https://ens.example.com/ews/)"),
            ("graph.callback_url = https://ens.example.com/ews/",
             "must be the https:// URL of the Graph notification location, ending in /graph/ (e.g. https://ens.example.com/graph/)"),
            ("exchange.allowed_hosts = localhost", "must list host names (e.g. mail.example.com, example.org), got 'localhost'"),
            ("graph.tenant.a.domains = contoso", "must list mail domains (e.g. contoso.com, contoso.onmicrosoft.com), got 'contoso'"),
            ("db.name = a-b", "must be 1–64 letters, digits or underscores"),
            ("apns.key_id =", "must be the 10-character identifier from the Apple developer account"),
        ]
        for (line, problem) in cases {
            let key = String(line.prefix { $0 != " " })
            #expect(throws: ConfigError(key: key, line: 1, problem: problem), "\(line)") {
                try ENSConfiguration(file: ConfigFile(parsing: line + "\n"))
            }
        }
    }

    /// The reload rules as they were before they were declared with the keys: every
    /// process applies log.level, the responders their limits. (No change.)
    @Test func reloadableKeysAreAsBefore() {
        #expect(ConfigReload.appliedKeys == ["log.level"])
        #expect(ConfigReload.responderKeys == [
            "exchange.max_items_per_callback", "exchange.max_notifications_per_minute", "exchange.proof_failure_limit",
            "exchange.proof_window_seconds", "quota.records_per_token_per_hour", "devices.max_per_record",
            "privacy.minimum_mode", "history.count", "sealed.max_age_seconds", "sealed.require_purpose",
        ])
    }

    /// A responder's reload takes over its keys and the log level, and keeps every
    /// other value it started with, changed in the file or not.
    @Test func aResponderReloadTakesOverOnlyItsKeys() throws {
        let running = try ENSConfiguration(file: ConfigFile(parsing: "exchange.max_items_per_callback = 50\nfcgi.threads = 4\nlog.level = info\n"))
        let fresh = try ENSConfiguration(file: ConfigFile(parsing: """
            exchange.max_items_per_callback = 2
            fcgi.threads = 8
            log.level = debug
            history.count = 3
            exchange.timeout_ms = 900
            devices.max_per_record = 7
            """))
        let next = running.reloading(.responders, from: fresh)
        #expect(next.exchange.maximumItemsPerCallback == 2 && next.privacy.historyCount == 3 && next.deviceAPI.maximumDevicesPerRecord == 7)
        #expect(next.logging.level == "debug")
        #expect(next.pool.threads == 4 && next.exchange.timeout == .milliseconds(10000))
        // Every key copies its own value and no other: a reload of every key is the fresh file.
        var all = running
        for key in ConfigSchema.keys { key.copy(&all, fresh) }
        for key in ConfigSchema.keys { #expect(key.sameValue(all, fresh), "\(key.name)") }
    }

    /// The renamed sender keys, each with its new name and a migration note.
    @Test func deprecatedKeysAreDeclaredWithTheirNewNames() {
        #expect(ENSConfiguration.deprecatedKeys == [
            "apns.socket": "push.socket", "apns.spool_dir": "push.spool_dir", "apns.spool_max": "push.spool_max",
            "apns.max_in_flight": "push.max_in_flight", "apns.connections": "push.connections", "apns.ca_file": "push.ca_file",
        ])
        for alias in ConfigSchema.aliases { #expect(!alias.note.isEmpty && ConfigSchema.keysByName[alias.new] != nil) }
        #expect(ConfigReference.manPage().contains(".B apns.connections\nNow \\fBpush.connections\\fR"))
    }

    @Test func declarationsAreComplete() {
        #expect(ConfigSchema.keys.count == 110 && Set(ConfigSchema.keys.map(\.name)).count == 110)
        #expect(ConfigSchema.keysByName.count == 110)
        for key in ConfigSchema.keys {
            #expect(!key.doc.isEmpty && !key.doc.contains("\n") && !key.summary.isEmpty, "\(key.name)")
        }
        #expect(ConfigSchema.patterns.map(\.name) == [
            "apns.certificate.<bundle id>", "apns.certificate_password_file.<bundle id>", "fcm.service_account.<bundle id>",
            "graph.tenant.<name>.id", "graph.tenant.<name>.domains", "graph.tenant.<name>.client_id",
            "graph.tenant.<name>.certificate_file", "graph.tenant.<name>.key_file",
        ])
        #expect(ENSConfiguration.bundleKeyPrefixes == ["apns.certificate.", "apns.certificate_password_file.", "fcm.service_account."])
    }

    /// The generated example is a valid file: every key set to its default (or to the
    /// value shown), and with its commented lines uncommented, a complete Graph tenant,
    /// an APNs certificate and an FCM account.
    @Test func theGeneratedExampleParses() throws {
        let text = ConfigReference.example()
        let file = try ConfigFile(parsing: text)
        let parsed = try ENSConfiguration(file: file)
        let defaults = ENSConfiguration()
        for key in ConfigSchema.keys {
            switch key.example {
            case .defaultValue: #expect(file.values[key.name] != nil && key.sameValue(parsed, defaults), "\(key.name)")
            case .value(let value): #expect(file.values[key.name] == value)
            case .commented: #expect(file.values[key.name] == nil && text.contains("\n# \(key.name) = "))
            }
        }
        let uncommented = text.split(separator: "\n").compactMap { line -> String? in
            guard line.hasPrefix("# "), case let rest = line.dropFirst(2), !rest.hasPrefix(" "), let name = rest.split(separator: " ").first,
                  ConfigSchema.keysByName[String(name)] != nil || ConfigSchema.patternFamily(of: String(name)) != nil,
                  rest.contains(" = ") else { return nil }
            return String(rest)
        }
        #expect(uncommented.count == 10)
        let full = try ENSConfiguration(file: ConfigFile(parsing: text + uncommented.joined(separator: "\n")))
        #expect(try full.graph.completeTenants().map(\.name) == ["contoso"])
        #expect(full.apns.certificates["com.example.mail"]?.passwordFile != nil && full.fcm.serviceAccountFiles.count == 1)
        #expect(!full.apns.keyID.isEmpty && !full.apns.teamID.isEmpty)
    }
}
