import ProfilePostgres
import ProfileTestSupport
import Testing

@Suite(.enabled(if: testPostgresIsConfigured, Comment(rawValue: testPostgresAbsentReason))) struct QueryTests {
    @Test func parametersAndValuesRoundTripAsText() throws {
        let connection = try connect()
        let result = try connection.query("SELECT $1::text, $2::text, $3::bigint, $4::text, $4::text IS NULL",
                                          [bytes("héllo 👋 'quoted' \\ \"x\""), [], bytes("-42"), nil],
                                          deadline: deadline(5000))
        #expect(result.rowCount == 1)
        #expect(result.columnCount == 5)
        #expect(result.string(0, 0) == "héllo 👋 'quoted' \\ \"x\"")
        // An empty text is a value, not NULL.
        #expect(result.value(0, 1) == [])
        #expect(result.withValue(0, 1) { $0?.count } == 0)
        #expect(result.int(0, 2) == -42)
        #expect(result.value(0, 3) == nil)
        #expect(result.withValue(0, 3) { $0 == nil })
        #expect(result.string(0, 4) == "t")
        #expect(result.int(0, 0) == nil)
    }

    @Test func largeValuesTravelBothWays() throws {
        let connection = try connect()
        // 4 MB each way: libpq sends and reads it over many waits on the socket.
        let large = [UInt8](repeating: UInt8(ascii: "x"), count: 4 << 20) + Array("é".utf8)
        let result = try connection.query("SELECT length($1::text), $1::text", [large], deadline: deadline(5000))
        #expect(result.int(0, 0) == 4 << 20 + 1)
        #expect(result.value(0, 1) == large)
    }

    @Test func manyRowsKeepTheirCells() throws {
        let connection = try connect()
        let result = try connection.query(
            "SELECT n, CASE WHEN n % 3 = 0 THEN NULL ELSE repeat('x', n) END FROM generate_series(0, 99) AS n",
            deadline: deadline(5000))
        #expect(result.rowCount == 100)
        #expect(result.affectedRows == 100)
        for row in 0..<100 {
            #expect(result.int(row, 0) == row)
            #expect(result.string(row, 1) == (row % 3 == 0 ? nil : String(repeating: "x", count: row)))
        }
    }

    @Test func textArrayLiteralsRoundTripThroughUnnest() throws {
        let elements = ["a", "b\"c", "back\\slash", "\\\"", "", "NULL", "{,}", " spaced ", "ünï 😀", "'"]
        let literal = PostgresArray.textLiteral(elements.map { Array($0.utf8) })
        let connection = try connect()
        let result = try connection.query("SELECT x FROM unnest($1::text[]) WITH ORDINALITY AS t(x, n) ORDER BY n",
                                          [literal], deadline: deadline(5000))
        #expect((0..<result.rowCount).map { result.string($0, 0) } == elements)
        #expect(PostgresArray.textLiteral(["a", "b\"c", "d\\"].map { Array($0.utf8) }) == bytes(#"{"a","b\"c","d\\"}"#))
        #expect(PostgresArray.textLiteral([[UInt8]]()) == bytes("{}"))
        let empty = try connection.query("SELECT cardinality($1::text[])", [PostgresArray.textLiteral([[UInt8]]())],
                                         deadline: deadline(5000))
        #expect(empty.int(0, 0) == 0)
    }

    @Test func textLiteralTakesBufferPointers() throws {
        let first = bytes("x\"y"), second = bytes("z")
        let literal = first.withUnsafeBytes { a in second.withUnsafeBytes { b in PostgresArray.textLiteral([a, b]) } }
        #expect(literal == bytes(#"{"x\"y","z"}"#))
    }

    @Test func commandsReportTheRowsTheyChanged() throws {
        let connection = try connect(makeTestDatabase())
        try connection.execute("CREATE TABLE items (id int PRIMARY KEY, name text)", deadline: deadline(5000))
        let inserted = try connection.query("INSERT INTO items SELECT n, 'n' || n FROM generate_series(1, 3) AS n",
                                            deadline: deadline(5000))
        #expect(inserted.affectedRows == 3)
        #expect(inserted.rowCount == 0)
        let updated = try connection.query("UPDATE items SET name = $1 WHERE id > 1", [bytes("changed")],
                                           deadline: deadline(5000))
        #expect(updated.affectedRows == 2)
        let begun = try connection.query("BEGIN", deadline: deadline(5000))
        #expect(begun.affectedRows == nil)
        try connection.execute("DELETE FROM items", deadline: deadline(5000))
        try connection.execute("ROLLBACK", deadline: deadline(5000))
        let rows = try connection.query("SELECT id, name FROM items ORDER BY id", deadline: deadline(5000))
        #expect((0..<rows.rowCount).map { rows.string($0, 1) } == ["n1", "changed", "changed"])
    }

    @Test func aServerErrorKeepsItsSQLSTATEAndMessageAndTheConnection() throws {
        let connection = try connect()
        let missing = try #require(failure { try connection.query("SELECT * FROM no_such_table", deadline: deadline(5000)) })
        #expect(missing.kind == .server(sqlstate: "42P01"))
        #expect(missing.sqlstate == "42P01")
        #expect(missing.message == #"relation "no_such_table" does not exist"#)
        #expect(missing.description.contains("(SQLSTATE 42P01)"))
        #expect(missing.description.contains("database postgres"))
        #expect(!connection.isBroken)
        let zero = try #require(failure { try connection.query("SELECT 1 / $1::int", [bytes("0")], deadline: deadline(5000)) })
        #expect(zero.kind == .server(sqlstate: "22012"))
        #expect(try connection.text("SELECT 'still usable'") == "still usable")
    }

    @Test func oneStatementPerCall() throws {
        let connection = try connect()
        let error = try #require(failure { try connection.query("SELECT 1; SELECT 2", deadline: deadline(5000)) })
        #expect(error.kind == .server(sqlstate: "42601"))
        #expect(try connection.text("SELECT 3") == "3")
    }

    @Test func aZeroByteInAParameterIsRefusedBeforeSending() throws {
        let connection = try connect()
        let error = try #require(failure { try connection.query("SELECT $1::text", [[0x61, 0, 0x62]], deadline: deadline(5000)) })
        #expect(error.kind == .server(sqlstate: "22021"))
        #expect(!connection.isBroken)
        #expect(try connection.text("SELECT $1::text", [bytes("ab")]) == "ab")
    }
}
