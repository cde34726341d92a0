import CSQLite
import Glibc
import ProfileStore
@_spi(Testing) @testable import ProfileStoreSQLite
import Testing

private struct Abort: Error {}

@Suite struct OfflineStoreWriterTests {
    let directory = TemporaryDirectory()

    var path: String { directory.file("profiles.sqlite3") }

    func entries() -> [String] {
        fileNames(in: directory.path)
    }

    /// Rows, live rows of `recent`, the journal mode and quick_check of the store in `file`,
    /// read behind the store's back.
    func inspect(_ file: StoreFile) throws -> (rows: Int64, liveRecency: Int64, journal: String, check: String) {
        let connection = try Connection(file: file)
        return (try connection.integer("SELECT count(*) FROM profiles"),
                try connection.integer(
                    "SELECT count(*) FROM recent AS r JOIN profiles AS p ON p.user_id = r.user_id AND p.seq = r.seq"),
                try connection.text("PRAGMA journal_mode"), try connection.text("PRAGMA quick_check"))
    }

    @Test func aNewStoreIsBuiltAsideAndNamedOnlyOnceItsFirstTransactionCommits() throws {
        let writer = try OfflineStoreWriter(path: path, cacheMebibytes: 8)
        #expect(writer.buildsNewFile)
        let batch = writer.makeUpsertBatch()
        try writer.transaction {
            try batch.append((0..<1000).map { Profile("u\($0)", "n\($0)", "") })
            // Nothing has the store's name while it is built.
            #expect(entries() == ["profiles.sqlite3.building", "profiles.sqlite3.lock"])
            try writer.upsert(batch)
        }
        #expect(!writer.buildsNewFile)
        #expect(entries() == ["profiles.sqlite3", "profiles.sqlite3.lock"])
        #expect(try inspect(writer.file) == (1000, 1000, "wal", "ok"))

        // A later transaction opens the store that was built.
        try writer.transaction {
            try batch.append([Profile("u1", "again", ""), Profile("new", "n", "")])
            try writer.upsert(batch)
        }
        try writer.checkpoint()
        writer.removeLockFile()
        #expect(try inspect(writer.file) == (1001, 1001, "wal", "ok"))
        let reader = try openStore(path).makeReader()
        #expect(try reader.get("u1") == Profile("u1", "again", ""))
        #expect(try reader.recent(3) == ["new", "u1", "u999"])
    }

    @Test func aFirstTransactionThatFailsLeavesNoStore() throws {
        let writer = try OfflineStoreWriter(path: path, cacheMebibytes: 8)
        let batch = writer.makeUpsertBatch()
        #expect(throws: Abort.self) {
            try writer.transaction {
                try batch.append((0..<100).map { Profile("u\($0)", "n", "") })
                try writer.upsert(batch)
                throw Abort()
            }
        }
        #expect(entries() == ["profiles.sqlite3.lock"])
        // The next transaction builds the file again, from nothing.
        #expect(writer.buildsNewFile)
        try writer.transaction {
            try batch.append([Profile("only", "n", "")])
            try writer.upsert(batch)
        }
        #expect(try inspect(writer.file) == (1, 1, "wal", "ok"))
    }

    @Test func aFileThatAppearsUnderTheNameMeanwhileIsLeftAsItIs() throws {
        let writer = try OfflineStoreWriter(path: path, cacheMebibytes: 8)
        let batch = writer.makeUpsertBatch()
        let error = storeError {
            try writer.transaction {
                try batch.append([Profile("u", "n", "")])
                try writer.upsert(batch)
                let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o644)
                #expect(write(descriptor, "someone else's\n", 15) == 15)
                close(descriptor)
            }
        }
        #expect(error?.description.contains("appeared while the import built it") == true, "\(String(describing: error))")
        #expect(entries() == ["profiles.sqlite3", "profiles.sqlite3.lock"])
        var status = stat()
        #expect(stat(path, &status) == 0 && status.st_size == 15)
    }

    @Test func anUnfinishedBuildIsRemovedByTheNextHolderOfTheLock() throws {
        let building = path + ".building"
        let descriptor = open(building, O_WRONLY | O_CREAT, 0o644)
        #expect(descriptor >= 0)
        close(descriptor)
        let writer = try OfflineStoreWriter(path: path, cacheMebibytes: 8)
        #expect(writer.buildsNewFile)
        #expect(entries() == ["profiles.sqlite3.lock"])
    }

    @Test func anExistingStoreIsWrittenInPlace() throws {
        try openStore(path).makeWriter().upsert(Profile("keep", "me", ""))
        let writer = try OfflineStoreWriter(path: path, cacheMebibytes: 8)
        #expect(!writer.buildsNewFile)
        let batch = writer.makeUpsertBatch()
        try writer.transaction {
            try batch.append([Profile("new", "n", "")])
            try writer.upsert(batch)
        }
        #expect(try inspect(writer.file) == (2, 2, "wal", "ok"))
    }

    @Test func aBatchFilledInItsTransactionHasItsRecencyWrittenAhead() throws {
        let store = try openStore(path)
        let writer = try store.makeWriter()
        // Several chunks of ids go to the writer's thread while the batch fills.
        let count = 2 * UpsertBatch.idChunkRows + 7
        let ids = scrambledIds(count)
        let batch = writer.makeUpsertBatch()
        try writer.transaction {
            try batch.append(writtenTwice(ids))
            try writer.upsert(batch)
        }
        let reader = try store.makeReader()
        try expectSecondWritesWon(reader, ids)
        #expect(try inspect(store.file) == (Int64(count), Int64(count), "wal", "ok"))

        // A write of that thread that fails dooms the transaction, though every later write succeeds.
        let error = storeError {
            try writer.transaction {
                store.setFault(SQLITE_FULL)
                try batch.append(ids.map { Profile($0, "third", "") })
                #expect(storeError { try writer.finishRecencyAhead() }?.kind == .full)
                store.setFault(nil)
                try writer.upsert(batch)
            }
        }
        #expect(error?.kind == .full)
        #expect(try reader.get(ids[0]) == Profile(ids[0], "second", ""))
        #expect(try inspect(store.file) == (Int64(count), Int64(count), "wal", "ok"))
    }
}
