import ProfileTestSupport
import CSQLite
import Glibc
import ProfileClient
import Testing

/// A store whose table cannot be written while another process holds its write lock: merges
/// wait, every read and COUNT, STATS, RECENT and SCAN are answered at once and see every
/// acknowledged write, writes go on into the write buffer, slow down as it fills and get
/// ERROR STORE (naming no file) once it stays full, and everything recovers without a restart
/// once the lock goes.
@Suite struct ServerStoreFailureTests {
    @Test func aTableThatCannotBeWrittenHoldsWritesBackButNotReads() throws {
        let server = try TestServer(["--write-buffer-mb", "1"])
        let c = try server.connect()
        try c.set(Profile(userId: "kept", name: "before", portraitUri: "u"))

        var db: OpaquePointer? = nil
        #expect(sqlite3_open(server.databasePath, &db) == SQLITE_OK)
        defer { sqlite3_close(db) }
        // A merge may hold the lock for a moment; then this connection holds it.
        sqlite3_busy_timeout(db, 5000)
        #expect(sqlite3_exec(db, "BEGIN IMMEDIATE", nil, nil, nil) == SQLITE_OK)

        // Writes of about 1 KB each, until one fails: the buffer holds about a thousand.
        let name = String(repeating: "n", count: 250)
        let uri = String(repeating: "u", count: 750)
        var acknowledged = 1
        var failure: String?
        var failedAfter = 0.0
        let reader = try server.connect()
        for i in 0..<5000 where failure == nil {
            let started = monotonicSeconds()
            let reply = try c.roundTrip("SET id\(i) \(name) \(uri)\n")
            if reply == "STORED" {
                acknowledged += 1
            } else {
                failure = reply
                failedAfter = monotonicSeconds() - started
            }
            if i % 200 == 0 {
                // Operators and readers are answered at once, whatever the merge is waiting for.
                let asked = monotonicSeconds()
                #expect(try reader.count() == acknowledged)
                #expect(try reader.recent(1).first.map { String(decoding: $0.userId, as: UTF8.self) } == "id\(i)")
                #expect(try reader.scan(after: [], limit: 1).first.map { String(decoding: $0.userId, as: UTF8.self) } == "id0")
                #expect(try !reader.stats().isEmpty)
                #expect(try reader.get(Array("kept".utf8))?.name == Array("before".utf8))
                #expect(monotonicSeconds() - asked < 1, "operator reads waited for the merge")
            }
        }
        let reply = try #require(failure)
        #expect(reply.hasPrefix("ERROR STORE the write buffer stayed full for "), "\(reply)")
        #expect(!reply.contains(server.databasePath), "\(reply)")
        // Held back at most the busy timeout (5 s), never indefinitely.
        #expect(failedAfter < 8, "a write waited \(failedAfter) s")
        let stats = Dictionary(uniqueKeysWithValues: try reader.stats().map { ($0.name, $0.value) })
        #expect(Int(stats["write_delays"] ?? "0")! > 0)
        #expect(stats["store_rows"] == "\(acknowledged)")
        #expect(try reader.count() == acknowledged)

        #expect(sqlite3_exec(db, "ROLLBACK", nil, nil, nil) == SQLITE_OK)
        // The lock is gone: the merges catch up and writes go in again, no restart.
        var stored = false
        for _ in 0..<100 where !stored {
            stored = try c.roundTrip("SET after a u\n") == "STORED"
            if !stored { usleep(100_000) }
        }
        #expect(stored)
        #expect(try c.count() == acknowledged + 1)
        #expect(exitCode(server.stop()) == 0)
        #expect(try rowsOnDisk(server.databasePath).count == acknowledged + 1)
    }

    /// The cache never holds more than `--cache-mb`, whatever writes and reads do to it.
    @Test func theCacheStaysWithinItsLimitUnderWritesAndReads() throws {
        let server = try TestServer(["--cache-mb", "1"])
        let c = try server.connect()
        let name = String(repeating: "n", count: 200)
        var worst = 0
        var limit = 0
        for round in 0..<40 {
            let ids = (0..<100).map { "r\(round)-\($0)" }
            #expect(try c.mset(ids.map { Profile(userId: $0, name: name, portraitUri: "u") }) == 100)
            // Reads fill the cache from the store; rewrites of cached ids replace their entries.
            _ = try c.mget(ids.map { Array($0.utf8) })
            try c.set(Profile(userId: ids[0], name: name + "2", portraitUri: "u"))
            let stats = Dictionary(uniqueKeysWithValues: try c.stats().map { ($0.name, $0.value) })
            worst = max(worst, Int(stats["cache_bytes"]!)!)
            limit = Int(stats["cache_limit_bytes"]!)!
        }
        #expect(limit == 1 << 20)
        #expect(worst > limit / 2, "the cache never filled: \(worst) bytes")
        #expect(worst <= limit, "\(worst) bytes cached over a limit of \(limit)")
    }
}
