public import ENSVault
import Foundation
public import MariaDB
internal import OpenSSL

/// The database of the stack scripts/test.sh starts, for the unit targets' tests that
/// run their stores against real MariaDB (skipped when no stack is up), and a vault
/// under a fixed test master key.
public enum StackDatabase {
    /// The stack's directory, when scripts/test.sh runs us (ENS_TEST_VAR).
    public static let directory = ProcessInfo.processInfo.environment["ENS_TEST_VAR"] ?? ""
    public static var isAvailable: Bool { !directory.isEmpty && FileManager.default.fileExists(atPath: directory + "/run/mysqld.sock") }

    /// A connection as the service account.
    public static func connection() throws -> Connection {
        let password = try String(contentsOfFile: directory + "/secrets/db-service.password", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        return Connection(configuration: MariaDBConfiguration(unixSocket: directory + "/run/mysqld.sock", user: "ens_service",
                                                               password: password, database: "ens"))
    }

    /// A vault under the master key 00 01 02 … 1f.
    public static let vault = Vault(masterKey: try! AESGCMKey(bytes: (0..<32).map { UInt8($0) }))
}
