public import ENSModel
public import MariaDB

// How the model's values are read from and bound to columns: here rather than in
// ENSModel, which knows no database.

extension MailBackend: SQLDecodable, SQLBindable {
    /// The `mail_backend` column.
    public init(column: Int, of row: Row) throws(MariaDBError) {
        let name = try row.text(column)
        guard let backend = MailBackend(rawValue: name) else { throw .misuse("column \(column) names no mail backend this build knows") }
        self = backend
    }

    public var sqlValue: SQLValue { .text(rawValue) }
}

extension Timestamp: SQLDecodable {
    /// A DATETIME(3) column.
    public init(column: Int, of row: Row) throws(MariaDBError) {
        guard let timestamp = Timestamp(databaseString: try row.text(column)) else { throw .misuse("column \(column) is not a DATETIME") }
        self = timestamp
    }
}
