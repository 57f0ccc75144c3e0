public import Foundation

/// A real Dovecot for one test (scripts/dovecot.sh): its own directory and ports on
/// 127.0.0.1, started in a fraction of a second, stopped by `stop()`.
public final class DovecotInstance {
    public let directory: URL
    /// IMAPS; `port + 1` is IMAP with STARTTLS, `port + 2` LMTP.
    public let port: Int

    /// The script, found from this file's place in the repository.
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../scripts/dovecot.sh").standardizedFileURL.path

    /// Starts an instance on ports of its own.
    public init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("ens-dovecot-\(UUID().uuidString)", isDirectory: true)
        // Three ports in a row from a random place; another run holding one makes
        // Dovecot fail to listen, and the next try takes other ports.
        var attempt = 0
        while true {
            let candidate = Int.random(in: 10000...19999) * 3
            do {
                _ = try Shell.run("exec \"$1\" up \"$2\" \"$3\" 2>&1", [Self.script, directory.path, "\(candidate)"])
                port = candidate
                return
            } catch {
                attempt += 1
                _ = try? Shell.run("\"$1\" down \"$2\"", [Self.script, directory.path])
                if attempt == 3 { throw error }
            }
        }
    }

    /// Starts it again on the same ports and with the same accounts and mail, with
    /// `extra` added to its configuration (what `ens-cron dovecot config` prints) and
    /// `clientCA` (a PEM file) trusted when it pushes over https.
    public func restart(adding extra: String, trusting clientCA: String? = nil) throws {
        _ = try Shell.run("\"$1\" down \"$2\"", [Self.script, directory.path])
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("ens-dovecot-extra-\(UUID().uuidString).conf")
        try Data(extra.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let started = try Shell.run("\"$1\" up \"$2\" \"$3\" \"$4\" \"$5\" 2>&1 && echo started || tail -n 20 \"$2/dovecot.log\"",
                                    [Self.script, directory.path, "\(port)", file.path, clientCA ?? ""])
        guard started.hasSuffix("started") else { throw DovecotFailure(output: started) }
    }

    /// What Dovecot logged so far.
    public var log: String {
        (try? String(contentsOf: directory.appendingPathComponent("dovecot.log"), encoding: .utf8)) ?? ""
    }

    /// `imaps://127.0.0.1:<port>/`.
    public var imapsURL: String { "imaps://127.0.0.1:\(port)/" }
    /// The self-signed certificate the instance presents.
    public var certificatePath: String { directory.appendingPathComponent("ca.crt").path }

    public func addUser(_ login: String, password: String) throws {
        _ = try Shell.run("exec \"$1\" user \"$2\" \"$3\" \"$4\"", [Self.script, directory.path, login, password])
    }

    /// Delivers `message` (RFC 5322 text) to `recipient` over LMTP.
    public func deliver(_ message: String, to recipient: String) throws {
        let file = directory.appendingPathComponent("message-\(UUID().uuidString).eml")
        try Data(message.utf8).write(to: file)
        _ = try Shell.run("exec \"$1\" deliver \"$2\" \"$3\" \"$4\" \"$5\"", [Self.script, directory.path, "\(port)", recipient, file.path])
    }

    /// What `doveadm` reads for `login`'s server-level metadata `key` ("" when unset).
    public func metadata(_ key: String, of login: String) throws -> String {
        try Shell.run("exec doveadm -c \"$1/dovecot.conf\" mailbox metadata get -u \"$2\" -s '' \"$3\" 2>/dev/null || true",
                      [directory.path, login, key])
    }

    public func stop() {
        _ = try? Shell.run("\"$1\" down \"$2\"; rm -rf \"$2\"", [Self.script, directory.path])
    }

    deinit {
        stop()
    }
}

/// Dovecot did not start; what it said.
public struct DovecotFailure: Error, CustomStringConvertible {
    public let output: String
    public var description: String { "Dovecot did not start:\n\(output)" }
}
