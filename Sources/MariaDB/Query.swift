/// A value bound to a `?` placeholder, or read from a result column.
public enum SQLValue: Sendable, Equatable, Hashable {
    case null
    case int(Int64)
    case double(Double)
    case text(String)
    case blob([UInt8])
}

/// Anything that can be bound as a statement parameter.
public protocol SQLBindable {
    var sqlValue: SQLValue { get }
}

extension Int: SQLBindable { public var sqlValue: SQLValue { .int(Int64(self)) } }
extension Int64: SQLBindable { public var sqlValue: SQLValue { .int(self) } }
extension Int32: SQLBindable { public var sqlValue: SQLValue { .int(Int64(self)) } }
extension Bool: SQLBindable { public var sqlValue: SQLValue { .int(self ? 1 : 0) } }
extension Double: SQLBindable { public var sqlValue: SQLValue { .double(self) } }
extension String: SQLBindable { public var sqlValue: SQLValue { .text(self) } }
extension [UInt8]: SQLBindable { public var sqlValue: SQLValue { .blob(self) } }
extension SQLValue: SQLBindable { public var sqlValue: SQLValue { self } }
extension Optional: SQLBindable where Wrapped: SQLBindable {
    public var sqlValue: SQLValue { self?.sqlValue ?? .null }
}

/// A SQL statement whose interpolated values become bound parameters.
///
///     let row = try db.query("SELECT id FROM Devices WHERE user_id = \(userID)")
///
/// sends `SELECT id FROM Devices WHERE user_id = ?` with `userID` bound, so a value can
/// never change the statement. Text that must be spliced in as SQL has to be spelled
/// `Query(unsafeSQL:)`, which stands out in review.
public struct Query: ExpressibleByStringInterpolation, Sendable, CustomStringConvertible {
    public private(set) var sql: String
    public private(set) var bindings: [SQLValue]

    public init(unsafeSQL sql: String) {
        self.sql = sql
        self.bindings = []
    }

    public init(stringLiteral value: String) {
        self.init(unsafeSQL: value)
    }

    public init(stringInterpolation: StringInterpolation) {
        self.sql = stringInterpolation.sql
        self.bindings = stringInterpolation.bindings
    }

    /// The statement text only; bound values are never part of a description.
    public var description: String { sql }

    public struct StringInterpolation: StringInterpolationProtocol {
        var sql = ""
        var bindings: [SQLValue] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            sql.reserveCapacity(literalCapacity + interpolationCount)
            bindings.reserveCapacity(interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) {
            sql += literal
        }

        public mutating func appendInterpolation(_ value: some SQLBindable) {
            sql += "?"
            bindings.append(value.sqlValue)
        }

        /// An optional value binds as NULL when nil.
        public mutating func appendInterpolation<Value: SQLBindable>(_ value: Value?) {
            sql += "?"
            bindings.append(value?.sqlValue ?? .null)
        }

        /// Splices trusted SQL text (a constant column list, never a value) into the
        /// statement. The label makes every use stand out in review.
        public mutating func appendInterpolation(unsafe sqlText: String) {
            sql += sqlText
        }

        /// `VALUES \(rows: rows)` binds one parenthesized group of placeholders per row,
        /// for a multi-row INSERT: one statement (and one commit) for them all. Every
        /// row has the same number of values, and there is at least one.
        public mutating func appendInterpolation(rows: [[SQLValue]]) {
            precondition(!rows.isEmpty, "a multi-row VALUES list needs at least one row")
            let width = rows[0].count
            precondition(width > 0 && rows.allSatisfy { $0.count == width }, "every row of a VALUES list has the same number of values")
            let group = "(" + Array(repeating: "?", count: width).joined(separator: ", ") + ")"
            sql += Array(repeating: group, count: rows.count).joined(separator: ", ")
            for row in rows { bindings.append(contentsOf: row) }
        }

        /// `IN (\(list: ids))` binds one placeholder per element.
        public mutating func appendInterpolation<C: Collection>(list values: C) where C.Element: SQLBindable {
            sql += values.isEmpty ? "NULL" : Array(repeating: "?", count: values.count).joined(separator: ", ")
            bindings.append(contentsOf: values.map(\.sqlValue))
        }
    }
}

/// One result row.
public struct Row: Sendable {
    public let values: [SQLValue]

    public init(values: [SQLValue]) {
        self.values = values
    }

    public subscript(index: Int) -> SQLValue { values[index] }

    public func int(_ index: Int) throws(MariaDBError) -> Int64 {
        switch values[index] {
        case .int(let value): return value
        case .text(let text): if let value = Int64(text) { return value }
        default: break
        }
        throw .misuse("column \(index) is not an integer")
    }

    public func optionalInt(_ index: Int) throws(MariaDBError) -> Int64? {
        if case .null = values[index] { return nil }
        return try int(index)
    }

    public func text(_ index: Int) throws(MariaDBError) -> String {
        switch values[index] {
        case .text(let value): return value
        case .blob(let bytes): return String(decoding: bytes, as: UTF8.self)
        case .int(let value): return String(value)
        default: throw .misuse("column \(index) is not text")
        }
    }

    public func optionalText(_ index: Int) throws(MariaDBError) -> String? {
        if case .null = values[index] { return nil }
        return try text(index)
    }

    public func blob(_ index: Int) throws(MariaDBError) -> [UInt8] {
        switch values[index] {
        case .blob(let bytes): return bytes
        case .text(let text): return Array(text.utf8)
        default: throw .misuse("column \(index) is not binary")
        }
    }

    public func optionalBlob(_ index: Int) throws(MariaDBError) -> [UInt8]? {
        if case .null = values[index] { return nil }
        return try blob(index)
    }
}

/// What a data-changing statement did.
public struct ExecuteResult: Sendable {
    public let affectedRows: Int
    public let lastInsertID: Int64
}

/// A Swift type a result column decodes to (`Row.decode`).
public protocol SQLDecodable {
    init(column: Int, of row: Row) throws(MariaDBError)
}

extension Int64: SQLDecodable {
    public init(column: Int, of row: Row) throws(MariaDBError) { self = try row.int(column) }
}

extension Int: SQLDecodable {
    public init(column: Int, of row: Row) throws(MariaDBError) {
        let wide = try row.int(column)
        guard let value = Int(exactly: wide) else { throw .misuse("column \(column) does not fit an Int") }
        self = value
    }
}

extension Bool: SQLDecodable {
    public init(column: Int, of row: Row) throws(MariaDBError) { self = try row.int(column) != 0 }
}

extension String: SQLDecodable {
    public init(column: Int, of row: Row) throws(MariaDBError) { self = try row.text(column) }
}

extension [UInt8]: SQLDecodable {
    public init(column: Int, of row: Row) throws(MariaDBError) { self = try row.blob(column) }
}

extension Optional: SQLDecodable where Wrapped: SQLDecodable {
    public init(column: Int, of row: Row) throws(MariaDBError) {
        if case .null = row.values[column] {
            self = .none
        } else {
            self = .some(try Wrapped(column: column, of: row))
        }
    }
}

extension Row {
    /// The row's columns as the given types, in order: a query's column list and the
    /// types that read it sit side by side, and a count that differs is an error
    /// rather than a shifted index.
    ///
    ///     let (id, url) = try row.decode(Int64.self, String?.self)
    public func decode<each Column: SQLDecodable>(_ types: repeat (each Column).Type) throws(MariaDBError) -> (repeat each Column) {
        var count = 0
        for _ in repeat (each types) { count += 1 }
        guard count == values.count else { throw .misuse("the query returned \(values.count) columns, \(count) were decoded") }
        var index = 0
        func next<Value: SQLDecodable>(_ type: Value.Type) throws(MariaDBError) -> Value {
            defer { index += 1 }
            return try Value(column: index, of: self)
        }
        return (repeat try next((each types)))
    }
}
