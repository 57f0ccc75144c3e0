internal import CMariaDB

/// A server-side prepared statement; owns its `MYSQL_STMT` and closes it in `deinit`.
final class PreparedStatement {
    private let statement: UnsafeMutablePointer<MYSQL_STMT>
    private let parameterCount: Int

    init(connection: UnsafeMutablePointer<MYSQL>, sql: String) throws(MariaDBError) {
        guard let statement = mysql_stmt_init(connection) else {
            throw MariaDBError.from(connection: connection, operation: "prepare")
        }
        let prepared = sql.withCString { mysql_stmt_prepare(statement, $0, UInt(sql.utf8.count)) }
        guard prepared == 0 else {
            let error = MariaDBError.from(statement: statement, operation: "prepare")
            mysql_stmt_close(statement)
            throw error
        }
        // Ask the client to compute each column's longest value in store_result, so
        // result buffers can be sized exactly without a truncation round trip.
        var updateMaxLength: my_bool = 1
        mysql_stmt_attr_set(statement, STMT_ATTR_UPDATE_MAX_LENGTH, &updateMaxLength)
        self.statement = statement
        self.parameterCount = Int(mysql_stmt_param_count(statement))
    }

    deinit {
        mysql_stmt_close(statement)
    }

    /// Binds `bindings` and executes. The bound buffers live only inside this call,
    /// which is all MariaDB needs: it copies parameter data at execute time.
    func execute(bindings: [SQLValue]) throws(MariaDBError) {
        guard bindings.count == parameterCount else {
            throw MariaDBError.misuse("statement takes \(parameterCount) parameters, \(bindings.count) given")
        }
        mysql_stmt_free_result(statement)
        if parameterCount == 0 {
            guard mysql_stmt_execute(statement) == 0 else {
                throw MariaDBError.from(statement: statement, operation: "execute")
            }
            return
        }
        let binds = UnsafeMutablePointer<MYSQL_BIND>.allocate(capacity: parameterCount)
        binds.initialize(repeating: MYSQL_BIND(), count: parameterCount)
        var buffers: [UnsafeMutableRawPointer] = []
        defer {
            for buffer in buffers { buffer.deallocate() }
            binds.deinitialize(count: parameterCount)
            binds.deallocate()
        }
        for (index, value) in bindings.enumerated() {
            switch value {
            case .null:
                cmariadb_bind_set_type(&binds[index], Int32(MYSQL_TYPE_NULL.rawValue))
            case .int(let number):
                let buffer = UnsafeMutableRawPointer.allocate(byteCount: 8, alignment: 8)
                buffer.storeBytes(of: number, as: Int64.self)
                buffers.append(buffer)
                cmariadb_bind_set_type(&binds[index], Int32(MYSQL_TYPE_LONGLONG.rawValue))
                binds[index].buffer = buffer
            case .double(let number):
                let buffer = UnsafeMutableRawPointer.allocate(byteCount: 8, alignment: 8)
                buffer.storeBytes(of: number, as: Double.self)
                buffers.append(buffer)
                cmariadb_bind_set_type(&binds[index], Int32(MYSQL_TYPE_DOUBLE.rawValue))
                binds[index].buffer = buffer
            case .text(let text):
                let bytes = Array(text.utf8)
                let buffer = copy(bytes)
                buffers.append(buffer)
                cmariadb_bind_set_type(&binds[index], Int32(MYSQL_TYPE_STRING.rawValue))
                binds[index].buffer = buffer
                binds[index].buffer_length = UInt(bytes.count)
                binds[index].length_value = UInt(bytes.count)
            case .blob(let bytes):
                let buffer = copy(bytes)
                buffers.append(buffer)
                cmariadb_bind_set_type(&binds[index], Int32(MYSQL_TYPE_BLOB.rawValue))
                binds[index].buffer = buffer
                binds[index].buffer_length = UInt(bytes.count)
                binds[index].length_value = UInt(bytes.count)
            }
        }
        guard mysql_stmt_bind_param(statement, binds) == 0 else {
            throw MariaDBError.from(statement: statement, operation: "bind")
        }
        guard mysql_stmt_execute(statement) == 0 else {
            throw MariaDBError.from(statement: statement, operation: "execute")
        }
    }

    func executeResult() -> ExecuteResult {
        ExecuteResult(
            affectedRows: Int(truncatingIfNeeded: mysql_stmt_affected_rows(statement)),
            lastInsertID: Int64(truncatingIfNeeded: mysql_stmt_insert_id(statement))
        )
    }

    /// Fetches every row of the result set just executed (callers bound their queries
    /// with LIMIT; nothing in ENS reads a whole table).
    func fetchAll() throws(MariaDBError) -> [Row] {
        guard let metadata = mysql_stmt_result_metadata(statement) else { return [] }
        defer { mysql_free_result(metadata) }
        guard mysql_stmt_store_result(statement) == 0 else {
            throw MariaDBError.from(statement: statement, operation: "store result")
        }
        defer { mysql_stmt_free_result(statement) }
        let columnCount = Int(mysql_num_fields(metadata))
        guard columnCount > 0, let fields = mysql_fetch_fields(metadata) else { return [] }

        let binds = UnsafeMutablePointer<MYSQL_BIND>.allocate(capacity: columnCount)
        binds.initialize(repeating: MYSQL_BIND(), count: columnCount)
        // mysql_stmt_bind_result copies the MYSQL_BIND array, so lengths and NULL flags
        // must be written through pointers of our own, not into the structs' fields.
        let lengths = UnsafeMutablePointer<UInt>.allocate(capacity: columnCount)
        lengths.initialize(repeating: 0, count: columnCount)
        let nullFlags = UnsafeMutablePointer<my_bool>.allocate(capacity: columnCount)
        nullFlags.initialize(repeating: 0, count: columnCount)
        let errorFlags = UnsafeMutablePointer<my_bool>.allocate(capacity: columnCount)
        errorFlags.initialize(repeating: 0, count: columnCount)
        var kinds: [ColumnKind] = []
        var buffers: [UnsafeMutableRawPointer] = []
        defer {
            for buffer in buffers { buffer.deallocate() }
            binds.deinitialize(count: columnCount)
            binds.deallocate()
            lengths.deallocate()
            nullFlags.deallocate()
            errorFlags.deallocate()
        }
        for index in 0..<columnCount {
            let field = fields[index]
            let kind = ColumnKind(field: field)
            kinds.append(kind)
            let size: Int
            switch kind {
            case .integer:
                size = 8
                cmariadb_bind_set_type(&binds[index], Int32(MYSQL_TYPE_LONGLONG.rawValue))
                binds[index].is_unsigned = (field.flags & UInt32(UNSIGNED_FLAG)) != 0 ? 1 : 0
            case .double:
                size = 8
                cmariadb_bind_set_type(&binds[index], Int32(MYSQL_TYPE_DOUBLE.rawValue))
            case .text, .binary:
                size = max(Int(field.max_length), 1)
                cmariadb_bind_set_type(&binds[index], Int32(MYSQL_TYPE_STRING.rawValue))
            }
            let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
            buffers.append(buffer)
            binds[index].buffer = buffer
            binds[index].buffer_length = UInt(size)
            binds[index].length = lengths + index
            binds[index].is_null = nullFlags + index
            binds[index].error = errorFlags + index
        }
        guard mysql_stmt_bind_result(statement, binds) == 0 else {
            throw MariaDBError.from(statement: statement, operation: "bind result")
        }
        var rows: [Row] = []
        rows.reserveCapacity(Int(mysql_stmt_num_rows(statement)))
        while true {
            let status = mysql_stmt_fetch(statement)
            if status == MYSQL_NO_DATA { break }
            // MYSQL_DATA_TRUNCATED cannot happen: buffers are sized from max_length.
            guard status == 0 else {
                throw MariaDBError.from(statement: statement, operation: "fetch")
            }
            var values: [SQLValue] = []
            values.reserveCapacity(columnCount)
            for index in 0..<columnCount {
                if nullFlags[index] != 0 {
                    values.append(.null)
                    continue
                }
                let buffer = UnsafeRawPointer(binds[index].buffer!)
                let length = Int(lengths[index])
                switch kinds[index] {
                case .integer:
                    values.append(.int(buffer.load(as: Int64.self)))
                case .double:
                    values.append(.double(buffer.load(as: Double.self)))
                case .text:
                    values.append(.text(String(decoding: UnsafeRawBufferPointer(start: buffer, count: length), as: UTF8.self)))
                case .binary:
                    values.append(.blob(Array(UnsafeRawBufferPointer(start: buffer, count: length))))
                }
            }
            rows.append(Row(values: values))
        }
        return rows
    }

    private func copy(_ bytes: [UInt8]) -> UnsafeMutableRawPointer {
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: max(bytes.count, 1), alignment: 1)
        bytes.withUnsafeBytes { buffer.copyMemory(from: $0.baseAddress ?? UnsafeRawPointer(buffer), byteCount: bytes.count) }
        return buffer
    }
}

/// How a result column is read back.
private enum ColumnKind {
    case integer, double, text, binary

    init(field: MYSQL_FIELD) {
        switch field.type {
        case MYSQL_TYPE_TINY, MYSQL_TYPE_SHORT, MYSQL_TYPE_LONG, MYSQL_TYPE_LONGLONG, MYSQL_TYPE_INT24, MYSQL_TYPE_YEAR:
            self = .integer
        case MYSQL_TYPE_DOUBLE, MYSQL_TYPE_FLOAT:
            self = .double
        default:
            self = .text
        }
        // charsetnr 63 is "binary": BINARY/VARBINARY/BLOB columns hold bytes, not text.
        switch field.type {
        case MYSQL_TYPE_TINY_BLOB, MYSQL_TYPE_MEDIUM_BLOB, MYSQL_TYPE_LONG_BLOB, MYSQL_TYPE_BLOB,
             MYSQL_TYPE_STRING, MYSQL_TYPE_VAR_STRING, MYSQL_TYPE_VARCHAR:
            if field.charsetnr == 63 { self = .binary }
        default:
            break
        }
    }
}
