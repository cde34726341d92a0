import CSQLite
import ProfileStore
@_spi(Testing) @testable import ProfileStoreSQLite
import Testing

private struct Abort: Error {}

@Suite struct TransactionTests {
    let directory = TemporaryDirectory()

    /// The write sequence of each stored profile, read behind the store's back.
    func sequences(_ store: SQLiteProfileStore) throws -> [String: Int64] {
        let statement = try Statement(Connection(file: store.file), "SELECT user_id, seq FROM profiles")
        defer { statement.reset() }
        var result: [String: Int64] = [:]
        while try statement.step() {
            result[String(decoding: statement.text(0), as: UTF8.self)] = statement.int64(1)
        }
        return result
    }

    @Test func rollbackLeavesNothingAndRethrows() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        let reader = try store.makeReader()
        try writer.upsert(Profile("keep", "k", ""))

        #expect(throws: Abort.self) {
            try writer.transaction {
                try writer.upsert([Profile("new", "n", ""), Profile("keep", "changed", "")])
                try writer.upsert(Profile("keep", "again", ""))
                throw Abort()
            }
        }
        #expect(try reader.get("new") == nil)
        #expect(try reader.get("keep") == Profile("keep", "k", ""))
        #expect(try reader.count() == 1)
    }

    @Test func rollbackRestoresTheSequence() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        try writer.upsert(Profile("a", "", ""))
        #expect(throws: Abort.self) {
            try writer.transaction {
                for index in 0..<10 { try writer.upsert(Profile("x\(index)", "", "")) }
                throw Abort()
            }
        }
        try writer.upsert(Profile("b", "", ""))
        #expect(try sequences(store) == ["a": 1, "b": 2])
        #expect(try store.makeReader().recent(10) == ["b", "a"])
    }

    @Test func theTransactionReturnsTheBodysResult() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        let result = try writer.transaction { () throws -> String in
            try writer.upsert(Profile("a", "", ""))
            return "result"
        }
        #expect(result == "result")
        #expect(try store.makeReader().get("a") != nil)
    }

    @Test func nestedTransactionsAreRefusedWithoutHarm() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        try writer.transaction {
            try writer.upsert(Profile("outer", "", ""))
            #expect(throws: StoreError.self) { try writer.transaction {} }
            try writer.upsert(Profile("after", "", ""))
        }
        #expect(try store.makeReader().recent(10) == ["after", "outer"])
    }

    @Test func aBatchKeepsItsOrderHoweverTheStoreWritesIt() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        try writer.upsert(Profile("m", "before", ""))
        try writer.transaction {
            try writer.upsert([Profile("z", "1", ""), Profile("a", "2", ""), Profile("m", "3", ""), Profile("a", "4", ""),
                               Profile("ä", "5", ""), Profile("b", "6", "")])
            try writer.upsert(Profile("after", "7", ""))
        }
        let reader = try store.makeReader()
        #expect(try reader.get("a") == Profile("a", "4", ""))
        #expect(try reader.get("m") == Profile("m", "3", ""))
        #expect(try reader.count() == 6)
        // Newest first: append order decides, not id order; a repeated id counts at its last row.
        #expect(try reader.recent(10) == ["after", "b", "ä", "a", "m", "z"])
    }

    @Test func aReadTransactionKeepsOneSnapshotUntilItEnds() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let reader = try store.makeReader()
        let writer = try store.makeWriter()
        try writer.upsert(Profile("1", "old", ""))

        try reader.beginRead()
        #expect(try reader.get("1") == Profile("1", "old", ""))
        try writer.upsert(Profile("1", "new", ""))
        try writer.upsert(Profile("2", "two", ""))
        // Inside the transaction the reader still sees the store as it first read it.
        #expect(try reader.get("1") == Profile("1", "old", ""))
        #expect(try reader.get("2") == nil)
        reader.endRead()

        #expect(try reader.get("1") == Profile("1", "new", ""))
        #expect(try reader.get("2") == Profile("2", "two", ""))
    }

    @Test func aReaderSeesCommitsMadeAfterItOpened() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let reader = try store.makeReader()
        #expect(try reader.get("42") == nil)
        #expect(try reader.count() == 0)

        let writer = try store.makeWriter()
        try writer.upsert(Profile("42", "Fran", ""))
        #expect(try reader.get("42") == Profile("42", "Fran", ""))
        #expect(try reader.count() == 1)
    }

    @Test(arguments: [(SQLITE_FULL, StoreError.Kind.full), (SQLITE_IOERR | 3 << 8, .io), (SQLITE_BUSY, .busy)])
    func anInjectedFaultFailsTheTransactionAndChangesNothing(code: Int32, kind: StoreError.Kind) throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        let reader = try store.makeReader()
        try writer.upsert(Profile("keep", "k", ""))

        store.setFault(code)
        let error = #expect(throws: StoreError.self) {
            try writer.transaction {
                try writer.upsert(Profile("new", "n", ""))
            }
        }
        #expect(error?.kind == kind)
        #expect(error?.code == "SQLite code \(code)")
        #expect(throws: StoreError.self) { try writer.upsert(Profile("other", "o", "")) }
        #expect(try reader.get("keep") != nil)
        #expect(try reader.count() == 1)

        store.setFault(nil)
        try writer.upsert(Profile("new", "n", ""))
        #expect(try reader.count() == 2)
    }

    @Test func aFaultAtCommitRollsBackWhatTheBodyWrote() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        let error = storeError {
            try writer.transaction {
                // The upsert has written its rows when it returns, so only COMMIT is left.
                try writer.upsert(Profile("a", "", ""))
                store.setFault(SQLITE_FULL)
            }
        }
        #expect(error?.sql == "COMMIT")
        store.setFault(nil)
        #expect(try store.makeReader().count() == 0)
    }

    @Test func aFailedWriteDoomsTheTransactionEvenWhenTheBodyCatchesIt() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        let error = storeError {
            try writer.transaction {
                try writer.upsert(Profile("a", "", ""))
                store.setFault(SQLITE_FULL)
                #expect(storeError { try writer.upsert(Profile("a", "again", "")) }?.kind == .full)
                store.setFault(nil)
                try writer.upsert(Profile("b", "", ""))
            }
        }
        #expect(error?.kind == .full)
        #expect(try store.makeReader().count() == 0)
        try writer.upsert(Profile("c", "", ""))
        #expect(try store.makeReader().recent(10) == ["c"])
    }

    /// More rows than one statement of the writer holds, with ids repeated within a batch and
    /// across the two batches of one transaction.
    @Test func manyUpsertsInOneTransactionKeepTheirOrderAndLastValues() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let writer = try store.makeWriter()
        let writes = (0..<(PendingUpserts.batchRows * 3 + 5)).map { index in
            Profile("id\(index * 7 % 41)", "name\(index)", "uri\(index)")
        }
        try writer.transaction {
            try writer.upsert(Array(writes[..<60]))
            try writer.upsert(Array(writes[60...]))
        }
        var newestFirst: [Profile] = []
        for profile in writes.reversed() where !newestFirst.contains(where: { $0.userId == profile.userId }) {
            newestFirst.append(profile)
        }
        let reader = try store.makeReader()
        #expect(try reader.count() == newestFirst.count)
        #expect(try reader.recent(1000) == newestFirst.map(\.userId))
        for profile in newestFirst {
            #expect(try reader.get(profile.userId) == profile)
        }
        #expect(try Set(sequences(store).values).count == newestFirst.count)
    }

    @Test func aWriteLockHeldPastTheTimeoutIsBusy() throws {
        let store = try openStore(directory.file("profiles.sqlite3"), busyTimeoutMilliseconds: 1)
        let writer = try store.makeWriter()
        let intruder = try Connection(file: store.file)
        try intruder.execute("BEGIN IMMEDIATE")

        let error = #expect(throws: StoreError.self) { try writer.upsert(Profile("a", "", "")) }
        #expect(error?.kind == .busy)
        #expect(error?.sql == "BEGIN IMMEDIATE")

        try intruder.execute("ROLLBACK")
        try writer.upsert(Profile("a", "", ""))
    }

    @Test func checkpointEmptiesTheLog() throws {
        let path = directory.file("profiles.sqlite3")
        let store = try openStore(path)
        let writer = try store.makeWriter()
        try writer.upsert(Profile("a", "", ""))
        #expect(contents(of: path + "-wal").count > 0)
        try writer.checkpoint()
        #expect(contents(of: path + "-wal").count == 0)
        #expect(try store.makeReader().get("a") != nil)
    }
}
