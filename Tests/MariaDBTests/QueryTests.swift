import ENSTestSupport
import Testing
@testable import MariaDB

@Suite struct QueryTests {
    @Test func literalHasNoBindings() {
        let query: Query = "SELECT 1"
        #expect(query.sql == "SELECT 1")
        #expect(query.bindings.isEmpty)
        let unsafe = Query(unsafeSQL: "SELECT * FROM t WHERE a = 'x'")
        #expect(unsafe.sql == "SELECT * FROM t WHERE a = 'x'")
        #expect(unsafe.bindings.isEmpty)
    }

    @Test func interpolatedValuesBecomePlaceholders() {
        let userID = "abc'; DROP TABLE Users; --"
        let limit = 10
        let query: Query = "SELECT id FROM Devices WHERE user_id = \(userID) AND n < \(limit)"
        #expect(query.sql == "SELECT id FROM Devices WHERE user_id = ? AND n < ?")
        #expect(query.bindings == [.text(userID), .int(10)])
    }

    @Test func everyBindableType() {
        let query: Query = """
            INSERT INTO t VALUES (\(Int(-1)), \(Int64.max), \(Int32.min), \(true), \(false), \(1.5), \
            \("é"), \([UInt8]([0, 255])), \(SQLValue.null), \(SQLValue.blob([])))
            """
        #expect(query.sql == "INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
        #expect(query.bindings == [
            .int(-1), .int(Int64.max), .int(Int64(Int32.min)), .int(1), .int(0), .double(1.5), .text("é"),
            .blob([0, 255]), .null, .blob([]),
        ])
    }

    /// Interpolates one value in a generic context (so an Optional does not draw the
    /// compiler's "debug description" warning, which does not apply to Query).
    private func bound<Value: SQLBindable>(_ value: Value) -> Query { "v = \(value)" }

    @Test func optionalsBindTheirValueOrNull() {
        #expect(bound(String?.none).bindings == [.null])
        #expect(bound(Optional("x")).bindings == [.text("x")])
        #expect(bound(Int?.some(5)).bindings == [.int(5)])
        #expect(bound([UInt8]?.none).bindings == [.null])
        #expect(bound(Int??.some(nil)).bindings == [.null])
        #expect(bound(String?.none).sql == "v = ?", "NULL is bound, not spliced")
    }

    @Test func bindingsKeepTheirOrder() {
        let values = (0..<20).map { "v\($0)" }
        var interpolation = Query.StringInterpolation(literalCapacity: 0, interpolationCount: values.count)
        for value in values {
            interpolation.appendLiteral("x=")
            interpolation.appendInterpolation(value)
            interpolation.appendLiteral(";")
        }
        let query = Query(stringInterpolation: interpolation)
        #expect(query.sql == String(repeating: "x=?;", count: 20))
        #expect(query.bindings == values.map { .text($0) })
    }

    @Test func list() {
        let ids: [Int64] = [3, 1, 2]
        let query: Query = "DELETE FROM t WHERE id IN (\(list: ids)) AND owner = \("me")"
        #expect(query.sql == "DELETE FROM t WHERE id IN (?, ?, ?) AND owner = ?")
        #expect(query.bindings == [.int(3), .int(1), .int(2), .text("me")])

        let one: Query = "SELECT * FROM t WHERE k IN (\(list: ["a"]))"
        #expect(one.sql == "SELECT * FROM t WHERE k IN (?)")
        #expect(one.bindings == [.text("a")])
    }

    @Test func rowsBindOneGroupPerRow() {
        let rows: [[SQLValue]] = [[.int(1), .text("a"), .null], [.int(2), .blob([7]), .text("b")]]
        let query: Query = "INSERT INTO t (id, x, y) VALUES \(rows: rows) ON DUPLICATE KEY UPDATE id = \(5)"
        #expect(query.sql == "INSERT INTO t (id, x, y) VALUES (?, ?, ?), (?, ?, ?) ON DUPLICATE KEY UPDATE id = ?")
        #expect(query.bindings == [.int(1), .text("a"), .null, .int(2), .blob([7]), .text("b"), .int(5)])
    }

    @Test func emptyListMatchesNothing() {
        let query: Query = "SELECT * FROM t WHERE id IN (\(list: [Int]())) OR x = \(1)"
        #expect(query.sql == "SELECT * FROM t WHERE id IN (NULL) OR x = ?")
        #expect(query.bindings == [.int(1)])
    }

    @Test func unsafeIsSplicedWithoutBinding() {
        let columns = "id, user_id, created_at"
        let query: Query = "SELECT \(unsafe: columns) FROM Devices WHERE id = \(7)"
        #expect(query.sql == "SELECT id, user_id, created_at FROM Devices WHERE id = ?")
        #expect(query.bindings == [.int(7)])
    }

    @Test func descriptionNeverContainsBoundValues() {
        let password = "hunter2-very-secret"
        let token = [UInt8]("tok-secret".utf8)
        let query: Query = """
            UPDATE Users SET password = \(password), token = \(token), ids = (\(list: ["list-secret-1", "list-secret-2"])) \
            WHERE email = \("ann@example.com")
            """
        for text in [query.description, "\(query)", String(describing: query)] {
            #expect(text == query.sql)
            for secret in ["hunter2", "tok-secret", "list-secret", "ann@example.com"] {
                #expect(!text.contains(secret))
            }
        }
    }

    @Test func questionMarksInLiteralsAreLeftAlone() {
        // The count of bindings is what the caller interpolated, not what the text holds.
        let query: Query = "SELECT '?' , \("x")"
        #expect(query.sql == "SELECT '?' , ?")
        #expect(query.bindings == [.text("x")])
    }
}

@Suite struct RowTests {
    @Test func typedAccessors() throws {
        let row = Row(values: [.int(5), .text("42"), .text("x"), .blob(Array("bytes".utf8)), .null, .double(1.5)])
        #expect(try row.int(0) == 5)
        #expect(try row.int(1) == 42, "numbers may arrive as text")
        #expect(throws: MariaDBError.self) { try row.int(2) }
        #expect(throws: MariaDBError.self) { try row.int(4) }
        #expect(throws: MariaDBError.self) { try row.int(5) }
        #expect(try row.optionalInt(4) == nil)
        #expect(try row.optionalInt(0) == 5)

        #expect(try row.text(2) == "x")
        #expect(try row.text(3) == "bytes")
        #expect(try row.text(0) == "5")
        #expect(throws: MariaDBError.self) { try row.text(4) }
        #expect(try row.optionalText(4) == nil)

        #expect(try row.blob(3) == Array("bytes".utf8))
        #expect(try row.blob(2) == Array("x".utf8))
        #expect(throws: MariaDBError.self) { try row.blob(0) }
        #expect(try row.optionalBlob(4) == nil)
        #expect(row[5] == .double(1.5))
    }

    // MARK: Rows decoded by type

    @Test func rowsDecodeByTypeInColumnOrder() throws {
        let row = Row(values: [.int(7), .text("https://mail.example.test/"), .null, .blob([1, 2]), .int(1), .text("42")])
        let (id, url, missing, bytes, flag, number) = try row.decode(Int64.self, String?.self, String?.self, [UInt8].self, Bool.self, Int.self)
        #expect(id == 7 && url == "https://mail.example.test/" && missing == nil && bytes == [1, 2] && flag && number == 42)
    }

    @Test func aColumnCountThatDiffersIsAnErrorNotAShift() {
        let row = Row(values: [.int(7), .text("x")])
        #expect(throws: MariaDBError.self) { try row.decode(Int64.self) }
        #expect(throws: MariaDBError.self) { try row.decode(Int64.self, String.self, String.self) }
    }

    @Test func aColumnOfTheWrongKindIsAnError() {
        #expect(throws: MariaDBError.self) { try Row(values: [.text("seven")]).decode(Int64.self) }
        #expect(throws: MariaDBError.self) { try Row(values: [.null]).decode(String.self) }
        #expect(throws: MariaDBError.self) { try Row(values: [.double(1.5)]).decode([UInt8].self) }
    }
}
