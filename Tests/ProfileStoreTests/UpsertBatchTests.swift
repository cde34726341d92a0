import CSQLite
import Glibc
import ProfileStore
@_spi(Testing) @testable import ProfileStoreSQLite
import Testing

private struct Abort: Error {}

@Suite struct UpsertBatchTests {
    let directory = TemporaryDirectory()

    /// A batch of the store's writer whose runs hold `runRows` rows, so a few rows make many runs.
    func batch(_ store: SQLiteProfileStore, runRows: Int) -> UpsertBatch {
        UpsertBatch(directory: directory.path, path: store.file.path, runRows: runRows)
    }

    /// Whether `recent` has a live row for every profile, and the file's quick_check, read
    /// behind the store's back.
    func recencyAndCheck(_ store: SQLiteProfileStore) throws -> (recencyComplete: Bool, check: String) {
        let connection = try Connection(file: store.file)
        let live = try connection.integer(
            "SELECT count(*) FROM recent AS r JOIN profiles AS p ON p.user_id = r.user_id AND p.seq = r.seq")
        return (live == (try connection.integer("SELECT count(*) FROM profiles")), try connection.text("PRAGMA quick_check"))
    }

    /// Files in the store's directory: the runs' file has no name, so none may be left.
    func entries() -> [String] {
        fileNames(in: directory.path)
    }

    @Test func runsMergeInIdOrderAndInputOrderStillDecidesWhatIsNewest() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        try writer.upsert(Profile("m", "before", ""))
        try writer.upsert(Profile("old", "kept", ""))
        // Runs of three rows: "a" repeats within a run and across runs, "m" replaces a stored row,
        // and "" and a longer id sharing a prefix test the byte order's edges.
        let rows = [Profile("z", "1", "u1"), Profile("a", "2", ""), Profile("a", "3", "u3"),
                    Profile("m", "4", ""), Profile("ab", "5", ""), Profile("a", "6", "u6"),
                    Profile("", "7", ""), Profile("ä", "8", ""), Profile("b", "9", ""),
                    Profile("ab", "10", "u10")]
        let batch = batch(store, runRows: 3)
        try batch.append(rows)
        #expect(batch.count == 10)
        #expect(batch.runs.count == 3)
        try writer.transaction {
            try writer.upsert(batch)
            try writer.upsert(Profile("after", "11", ""))
        }
        #expect(batch.count == 0)
        let reader = try store.makeReader()
        #expect(try reader.get("a") == Profile("a", "6", "u6"))
        #expect(try reader.get("ab") == Profile("ab", "10", "u10"))
        #expect(try reader.get("m") == Profile("m", "4", ""))
        #expect(try reader.get("old") == Profile("old", "kept", ""))
        #expect(try reader.count() == 9)
        // Newest first: file order decides, not id order; a repeated id counts at its last row.
        #expect(try reader.recent(20) == ["after", "ab", "b", "ä", "", "a", "m", "z", "old"])
        #expect(try reader.scan(after: "", limit: 20) == ["a", "ab", "after", "b", "m", "old", "z", "ä"])
        #expect(entries() == ["profiles.sqlite3", "profiles.sqlite3-shm", "profiles.sqlite3-wal",
                              "profiles.sqlite3.lock"])
    }

    @Test func aLargeBatchKeepsTheRecencyTableInItsTransaction() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        let count = 50_000
        let ids = scrambledIds(count)
        let batch = writer.makeUpsertBatch()
        try batch.append(writtenTwice(ids))
        try writer.upsert(batch)
        let reader = try store.makeReader()
        try expectSecondWritesWon(reader, ids)
        #expect(try recencyAndCheck(store) == (true, "ok"))

        // A rollback after the next one, or a fault, leaves the rows and `recent` as they were.
        let again = writer.makeUpsertBatch()
        try again.append(ids.map { Profile($0, "third", "") })
        #expect(throws: Abort.self) {
            try writer.transaction {
                try writer.upsert(again)
                #expect(try Connection(file: store.file).integer("SELECT count(*) FROM profiles") == count)
                throw Abort()
            }
        }
        #expect(again.count == 0)
        try again.append(ids.map { Profile($0, "third", "") })
        store.setFault(SQLITE_FULL)
        #expect(storeError { try writer.upsert(again) }?.kind == .full)
        store.setFault(nil)
        #expect(try recencyAndCheck(store) == (true, "ok"))
        #expect(try reader.get(ids[0]) == Profile(ids[0], "second", ""))
        #expect(try reader.recent(1) == [ids[count - 1]])
    }
}
