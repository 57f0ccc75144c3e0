internal import Logging

/// Where a store reports a row it refused because the row fails its `RowBinding` MAC
/// (docs/security.md, "A writer to the database"): at error level, naming the table and
/// the row, never a value. The store then treats the row as absent: a device that is
/// not there, an Autodiscover answer not cached, a blind subscription to make anew, a
/// signing key to fetch again.
enum RowIntegrity {
    private static let logger = Logger(label: "ens.store.integrity")

    static func refused(_ table: String, row: String) {
        logger.error("row refused: it fails its integrity check (written without the master key)", metadata: ["table": "\(table)", "row": "\(row)"])
    }
}
