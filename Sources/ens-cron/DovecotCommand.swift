import ArgumentParser
import Codecs
import ENSConfig
import ENSModel
import ENSStore
import ENSVault
import POSIX

/// `ens-cron dovecot`: the Dovecot servers ENS serves (docs/dovecot.md). A hosting admin
/// runs `add` once per server and installs what `config` prints; nothing else needs
/// their Dovecot to change.
struct Dovecot: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Register Dovecot servers, and print the configuration each one installs.",
        subcommands: [Add.self, List.self, Config.self, Rotate.self, Remove.self]
    )

    struct Add: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Register (or change) a server and print its configuration.",
            discussion: """
                The printed configuration holds the server's hook credential: install it as \
                /etc/dovecot/conf.d/95-ens-push.conf (mode 0640, root:dovecot) and reload Dovecot.
                """
        )
        @OptionGroup var options: CommonOptions
        @Argument(help: "The server's name (a-z, 0-9, - and _), the hook's user name.") var name: String
        @Option(name: .customLong("imap-url"), help: "imaps://host:port/ (or imap://host:port/, always with STARTTLS).") var imapURL: String
        @Option(name: .long, help: "The mail domains it serves, comma-separated.") var domains: String
        @Option(name: .customLong("ca-file"), help: "PEM certificate(s) its IMAP TLS is trusted by (default: the system store).") var caFile: String?
        @Option(name: .long, help: "lua (default: ENS's script and METADATA key) or ox (Dovecot's ox driver, whose key OX and EGroupware share).")
        var driver: String = "lua"

        func run() throws {
            try options.withServers("dovecot add") { settings, vault, store in
                guard DovecotServer.isValidName(name) else { throw ValidationError("the name must be 1 to 64 of a-z, 0-9, - and _") }
                guard let driver = DovecotServer.Driver(rawValue: driver) else { throw ValidationError("--driver is lua or ox") }
                guard let url = DovecotServer.normalizedIMAPURL(imapURL) else {
                    throw ValidationError("--imap-url names a server only: imaps://host:port/ (or imap://host:port/)")
                }
                let domainList = domains.lowercased().split(separator: ",").map { $0.trimmingCharacters(in: " ") }.filter { !$0.isEmpty }
                guard !domainList.isEmpty, domainList.allSatisfy(Self.isDomain) else {
                    throw ValidationError("--domains lists mail domains, comma-separated (e.g. example.org, example.net)")
                }
                let ca = try caFile.map { path in
                    let bytes = try Files.read(path, limit: 1 << 20)
                    guard String(decoding: bytes, as: UTF8.self).contains("-----BEGIN CERTIFICATE-----") else {
                        throw ValidationError("--ca-file holds no PEM certificate")
                    }
                    return bytes
                }
                for other in try store.all() where other.name != name {
                    if let taken = domainList.first(where: other.domains.contains) {
                        throw ValidationError("\(taken) is served by \(other.name) already")
                    }
                }
                let serial = try store.server(named: name)?.credentialSerial ?? 1
                let server = DovecotServer(name: name, imapURL: url, domains: domainList, caPEM: ca, driver: driver, credentialSerial: serial)
                try store.save(server, now: options.clock)
                print(DovecotConfiguration(server: server, hookURL: settings.dovecot.hookURL, vault: vault).text)
            }
        }

        static func isDomain(_ text: String) -> Bool {
            text.utf8.count <= 253 && text.contains(".") && !text.hasPrefix(".") && !text.hasSuffix(".")
                && text.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x2E }
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the servers: name, IMAP URL, driver, domains. No credential is shown.")
        @OptionGroup var options: CommonOptions

        func run() throws {
            try options.withServers("dovecot list") { _, _, store in
                for server in try store.all() {
                    print("\(server.name)\t\(server.imapURL)\t\(server.driver.rawValue)\t\(server.domains.joined(separator: ","))")
                }
            }
        }
    }

    struct Config: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a server's configuration again (with its current credential).")
        @OptionGroup var options: CommonOptions
        @Argument var name: String

        func run() throws {
            try options.withServers("dovecot config") { settings, vault, store in
                let server = try store.registered(name)
                print(DovecotConfiguration(server: server, hookURL: settings.dovecot.hookURL, vault: vault).text)
            }
        }
    }

    struct Rotate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Give a server a new hook credential and print its configuration; the old one stops working at once."
        )
        @OptionGroup var options: CommonOptions
        @Argument var name: String

        func run() throws {
            try options.withServers("dovecot rotate") { settings, vault, store in
                let old = try store.registered(name)
                let server = DovecotServer(name: old.name, imapURL: old.imapURL, domains: old.domains, caPEM: old.caPEM, driver: old.driver,
                                           credentialSerial: old.credentialSerial + 1)
                try store.save(server, now: options.clock)
                print(DovecotConfiguration(server: server, hookURL: settings.dovecot.hookURL, vault: vault).text)
            }
        }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove a server: its hooks are refused (401) and its accounts' registrations fail from now on."
        )
        @OptionGroup var options: CommonOptions
        @Argument var name: String

        func run() throws {
            try options.withServers("dovecot remove") { _, _, store in
                let removed = try store.remove(named: name)
                print(removed ? "removed \(name)" : "no server named \(name)")
            }
        }
    }
}

extension CommonOptions {
    /// Loads the configuration and runs `body` with the master key's vault and the
    /// servers' table; failures become one line and exit status 1.
    func withServers(_ command: String, _ body: (ENSConfiguration, Vault, DovecotServerStore) throws -> Void) throws {
        let settings = try load(command)
        try reportingFailures(command) {
            let vault = Vault(masterKey: try settings.secrets.masterKey())
            try body(settings, vault, DovecotServerStore(database: Databases.connection(try settings.serviceDatabase()), vault: vault))
        }
    }
}

extension DovecotServerStore {
    /// The server named `name`; a usage error when there is none (or its row is not intact).
    func registered(_ name: String) throws -> DovecotServer {
        guard let server = try server(named: name) else { throw ValidationError("no server named \(name)") }
        return server
    }
}

/// What a hosting admin installs in their Dovecot for one server (2.3 syntax).
struct DovecotConfiguration {
    let server: DovecotServer
    let hookURL: String
    let vault: Vault

    var text: String {
        let credential = vault.dovecotCredential(server: server.name, serial: server.credentialSerial)
        let hook = (hookURL.isEmpty ? "https://ENS-HOST/dovecot/" : hookURL) + "v1"
        var lines = [
            "# /etc/dovecot/conf.d/95-ens-push.conf for ENS server \"\(server.name)\" (ens-cron dovecot config \(server.name)).",
            "# It holds this server's hook credential: mode 0640, root:dovecot. docs/dovecot.md says what each line does.",
        ]
        if hookURL.isEmpty { lines.append("# dovecot.hook_url is not set in ens.conf: replace ENS-HOST below with ENS's public name.") }
        lines += [
            "mail_attribute_dict = file:%h/dovecot-attributes",
            "protocol imap {",
            "  imap_metadata = yes",
            "}",
        ]
        switch server.driver {
        case .lua:
            let plugins = "$mail_plugins notify push_notification mail_lua push_notification_lua"
            lines += [
                "protocol lmtp {", "  mail_plugins = \(plugins)", "}",
                "protocol lda {", "  mail_plugins = \(plugins)", "}",
                "plugin {",
                "  push_notification_driver = lua:file=/usr/share/ens/dovecot/ens-push.lua",
                "  ens_push_url = \(hook)",
                "  ens_push_auth = Basic \(Base64.encode(Array("\(server.name):\(credential)".utf8)))",
                "  ens_push_key = \(server.driver.metadataKey)",
                "}",
            ]
        case .ox:
            let plugins = "$mail_plugins notify push_notification"
            // The credential as the URL's user info (dovecot.hook_url is always https://).
            let authority = "https://\(server.name):\(credential)@" + hook.dropFirst("https://".count)
            lines += [
                "protocol lmtp {", "  mail_plugins = \(plugins)", "}",
                "protocol lda {", "  mail_plugins = \(plugins)", "}",
                "plugin {",
                "  push_notification_driver = ox:url=\(authority) user_from_metadata timeout_msecs=2000 max_retries=1",
                "}",
            ]
        }
        return lines.joined(separator: "\n")
    }
}
