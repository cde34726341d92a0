import ProfileTestSupport
import CSQLite
import Glibc
import ProfileClient
import Testing

/// A store that cannot be written: ERROR STORE, nothing acknowledged, reads go on, and
/// writes work again once the store does, without a restart.
@Suite struct ServerStoreFailureTests {
    @Test func aLockedStoreFailsWritesWithStoreAndRecovers() throws {
        let server = try TestServer()
        let c = try server.connect()
        try c.set(Profile(userId: "kept", name: "before", portraitUri: "u"))

        // Another SQLite connection takes the write lock of the write log, where every write
        // commits first, and holds it past the busy timeout.
        var db: OpaquePointer? = nil
        #expect(sqlite3_open(server.databasePath + "-writes", &db) == SQLITE_OK)
        defer { sqlite3_close(db) }
        sqlite3_busy_timeout(db, 5000)
        #expect(sqlite3_exec(db, "BEGIN IMMEDIATE", nil, nil, nil) == SQLITE_OK)

        c.send("SET", ["kept", "after", "u"])
        c.send("MSET", ["new1", "n", "u", "new2", "n", "u"])
        try c.flush()
        // Reads on another connection are not held up by the stuck writer.
        let reader = try server.connect()
        #expect(try reader.get(Array("kept".utf8))?.name == Array("before".utf8))
        #expect(try c.line().hasPrefix("ERROR STORE "))
        #expect(try c.line().hasPrefix("ERROR STORE "))
        #expect(try c.get(Array("kept".utf8))?.name == Array("before".utf8))
        #expect(try c.exists(Array("new1".utf8)) == false)

        #expect(sqlite3_exec(db, "ROLLBACK", nil, nil, nil) == SQLITE_OK)
        try c.set(Profile(userId: "kept", name: "after", portraitUri: "u"))
        #expect(try reader.get(Array("kept".utf8))?.name == Array("after".utf8))
        // Reads of the table wait for the merge; an emptying of the log that failed while the
        // lock was held must not fail them now.
        #expect(try reader.count() == 1)
        let stats = Dictionary(uniqueKeysWithValues: try c.stats().map { ($0.name, $0.value) })
        #expect(stats["errors"] == "2")
        #expect(stats["cmd_set"] == "2")
    }
}
