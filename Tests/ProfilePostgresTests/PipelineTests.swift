import ProfilePostgres
import ProfileTestSupport
import Testing

/// Several statements in one round trip (libpq's pipeline mode), as a node's group commit sends them.
@Suite(.enabled(if: testPostgresIsConfigured, Comment(rawValue: testPostgresAbsentReason))) struct PipelineTests {
    @Test func resultsComeBackInOrder() throws {
        let connection = try connect(makeTestDatabase())
        try connection.execute("CREATE TABLE items (id int PRIMARY KEY, name text)", deadline: deadline(5000))
        let results = try connection.pipeline([
            ("BEGIN", []),
            ("INSERT INTO items VALUES ($1, $2), ($3, $4)", [bytes("1"), bytes("one"), bytes("2"), bytes("two")]),
            ("SELECT name FROM items WHERE id = $1", [bytes("2")]),
            ("COMMIT", []),
        ], deadline: deadline(5000))
        #expect(results.count == 4)
        #expect(results[1].affectedRows == 2)
        #expect(results[2].string(0, 0) == "two")
        #expect(try connection.text("SELECT count(*) FROM items") == "2")
    }

    @Test func aRefusalSkipsTheRestAndLeavesTheConnectionUsable() throws {
        let connection = try connect(makeTestDatabase())
        try connection.execute("CREATE TABLE items (id int PRIMARY KEY)", deadline: deadline(5000))
        let refused = try #require(failure {
            try connection.pipeline([
                ("BEGIN", []),
                ("INSERT INTO items VALUES (1)", []),
                ("SELECT 1 / $1::int", [bytes("0")]),
                ("INSERT INTO items VALUES (2)", []),
                ("COMMIT", []),
            ], deadline: deadline(5000))
        })
        // The first failure is the one reported, not the skipped statements after it.
        #expect(refused.kind == .server(sqlstate: "22012"))
        #expect(!connection.isBroken)
        try connection.execute("ROLLBACK", deadline: deadline(5000))
        #expect(try connection.text("SELECT count(*) FROM items") == "0")
        #expect(try connection.pipeline([("SELECT 'again'", [])], deadline: deadline(5000))[0].string(0, 0) == "again")
    }
}
