import Glibc
import CSQLite
import Testing
@testable import ProfileStore

extension WriteLogWriter {
    func append(_ generation: Int, _ profile: Profile) throws {
        try withBytes(profile.userId) { id in
            try withBytes(profile.name) { name in
                try withBytes(profile.portraitUri) { uri in
                    try append(generation: generation, userId: id, name: name, portraitUri: uri)
                }
            }
        }
    }

    func appendRemoval(_ generation: Int, _ userId: String) throws {
        try withBytes(userId) { try appendRemoval(generation: generation, userId: $0) }
    }
}

extension WriteLogFolder {
    /// Merges a whole generation, range by range, as the server does.
    func fold(generation: Int, abandonIf abandon: @escaping () -> Bool) throws {
        for _ in 0..<(try prepareFold(generation: generation, abandonIf: abandon)) {
            _ = try foldNextRange(abandonIf: abandon)
        }
    }
}

extension FoldedRange {
    /// Its ids, in the order it lists them.
    var userIds: [String] {
        var ids: [String] = []
        forEachUserId { ids.append(String(decoding: $0, as: UTF8.self)) }
        return ids
    }
}

/// "id" and `i` in five digits, so that ids sort as their numbers do.
private func paddedId(_ i: Int) -> String {
    let digits = String(i)
    return "id" + String(repeating: "0", count: 5 - digits.count) + digits
}

/// The write log: what a fold takes from it, and what opening a store does with what a crash
/// left in it.
@Suite struct WriteLogTests {
    @Test func aFoldAppliesTheNewestRowOfEachIdInItsGenerationOnly() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory.file("p.db"))
        try store.makeWriter().upsert(Profile("kept", "table", "t"))
        try store.makeWriter().upsert(Profile("removed", "table", "t"))
        let log = try store.makeWriteLogWriter()
        try log.transaction {
            try log.append(0, Profile("a", "first", "1"))
            try log.append(0, Profile("a", "second", "2"))
            try log.appendRemoval(0, "removed")
            try log.appendRemoval(0, "b")
            try log.append(0, Profile("b", "back", "3"))
            try log.append(1, Profile("kept", "later generation", "4"))
        }
        let folder = try store.makeWriteLogFolder()
        try folder.fold(generation: 0) { false }

        let reader = try store.makeReader()
        #expect(try reader.get("a") == Profile("a", "second", "2"))
        #expect(try reader.get("b") == Profile("b", "back", "3"))
        #expect(try reader.get("removed") == nil)
        #expect(try reader.get("kept") == Profile("kept", "table", "t"))
        // Newest write first: b, then a; the table's own rows after them.
        #expect(try reader.recent(10) == ["b", "a", "kept"])
        // A fold leaves the log to the writer, which empties the merged generation.
        #expect(try folder.logRows() == 6)
        try log.truncate(generation: 0)
        #expect(try folder.logRows() == 1)
    }

    /// The server abandons a background merge when someone starts waiting for it, and
    /// merges again at normal priority: the abandoned one must have changed nothing. One
    /// range here, so that the abandon falls in its sort or in its only transaction.
    @Test(arguments: [0, 1, 3, 20])
    func anAbandonedFoldChangesNothingAndTheNextOneMerges(checksBeforeAbandoning: Int) throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory.file("p.db"))
        try store.makeWriter().upsert(Profile("kept", "table", "t"))
        let log = try store.makeWriteLogWriter()
        try log.transaction {
            // Enough rows that the merge asks more than `checksBeforeAbandoning` times.
            for i in 0..<20_000 { try log.append(0, Profile("id\(i)", "name \(i)", "uri")) }
            try log.appendRemoval(0, "kept")
        }
        let folder = try store.makeWriteLogFolder(rowsPerRange: 1 << 20)
        var checks = 0
        #expect(throws: StoreError.self) {
            do {
                try folder.fold(generation: 0) {
                    checks += 1
                    return checks > checksBeforeAbandoning
                }
            } catch let error as StoreError {
                #expect(error.kind == .interrupted, "\(error)")
                throw error
            }
        }
        #expect(checks == checksBeforeAbandoning + 1)
        let reader = try store.makeReader()
        #expect(try reader.count() == 1)
        #expect(try reader.get("kept") == Profile("kept", "table", "t"))

        try folder.fold(generation: 0) { false }
        #expect(try reader.count() == 20_000)
        #expect(try reader.get("kept") == nil)
        #expect(try reader.get("id19999") == Profile("id19999", "name 19999", "uri"))
    }

    /// A generation is merged one range of ids per transaction: each range is in the table
    /// once its call returns, an abandoned range changes nothing, and preparing the same
    /// generation again resumes where the merge stopped.
    @Test func aFoldMergesRangeByRangeAndResumesWhereItStopped() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory.file("p.db"))
        try store.makeWriter().upsert(Profile("kept", "table", "t"))
        let log = try store.makeWriteLogWriter()
        try log.transaction {
            for i in 0..<12 { try log.append(0, Profile(paddedId(i), "old \(i)", "uri")) }
            for i in 0..<12 { try log.append(0, Profile(paddedId(i), "name \(i)", "uri")) }
            // Sorted after every "id...": in the last range.
            try log.appendRemoval(0, "kept")
            try log.append(1, Profile("later", "other generation", "uri"))
        }
        let folder = try store.makeWriteLogFolder(rowsPerRange: 5)
        let reader = try store.makeReader()
        #expect(try folder.prepareFold(generation: 0) { false } == 3)

        let first = try folder.foldNextRange { false }
        #expect(first.rows == 1...5)
        #expect(first.userIds == (0..<5).map(paddedId))
        #expect(try reader.count() == 6)
        #expect(try reader.get(paddedId(4)) == Profile(paddedId(4), "name 4", "uri"))
        #expect(try reader.get(paddedId(5)) == nil)

        #expect { _ = try folder.foldNextRange { true } } throws: { ($0 as? StoreError)?.kind == .interrupted }
        #expect(try reader.count() == 6)
        // Prepared already: the merge goes on from the range that was abandoned.
        #expect(try folder.prepareFold(generation: 0) { false } == 2)
        let second = try folder.foldNextRange { false }
        #expect(second.rows == 6...10)
        #expect(try reader.count() == 11)
        let third = try folder.foldNextRange { false }
        #expect(third.rows == 11...13)
        #expect(third.userIds == [paddedId(10), paddedId(11), "kept"])
        #expect(try reader.count() == 12)
        #expect(try reader.get("kept") == nil)
        #expect(try reader.get("later") == nil)
        #expect(try reader.get(paddedId(11)) == Profile(paddedId(11), "name 11", "uri"))
        #expect(second.userIds == (5..<10).map(paddedId))

        // Done: the next prepare of the generation sorts what it holds then, afresh.
        try log.truncate(generation: 0)
        try log.transaction { try log.append(0, Profile("new", "row", "uri")) }
        #expect(try folder.prepareFold(generation: 0) { false } == 1)
        #expect(try folder.foldNextRange { false }.userIds == ["new"])
        #expect(try reader.get("new") == Profile("new", "row", "uri"))
    }

    /// FLUSHALL between two ranges of a merge: what was sorted for the merge goes with the
    /// rest, and no later step writes it back into the emptied table.
    @Test func deleteEverythingForgetsAPreparedMerge() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory.file("p.db"))
        let log = try store.makeWriteLogWriter()
        try log.transaction {
            for i in 0..<10 { try log.append(0, Profile(paddedId(i), "name", "uri")) }
        }
        let folder = try store.makeWriteLogFolder(rowsPerRange: 4)
        #expect(try folder.prepareFold(generation: 0) { false } == 3)
        _ = try folder.foldNextRange { false }
        try folder.deleteEverything()
        #expect(try folder.prepareFold(generation: 0) { false } == 0)
        #expect(try store.makeReader().count() == 0)
    }

    @Test func foldAllTakesTheNewestAcrossBothGenerationsAndEmptiesTheLog() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory.file("p.db"))
        let log = try store.makeWriteLogWriter()
        try log.transaction {
            try log.append(0, Profile("x", "old", "0"))
            try log.append(1, Profile("x", "new", "1"))
            try log.append(1, Profile("y", "kept", "1"))
            try log.appendRemoval(0, "y")
            // Removed, then written again: only the newest row of an id decides.
            try log.appendRemoval(1, "z")
            try log.append(0, Profile("z", "back", "0"))
        }
        let folder = try store.makeWriteLogFolder()
        try folder.foldAll()
        let reader = try store.makeReader()
        #expect(try reader.get("x") == Profile("x", "new", "1"))
        #expect(try reader.get("y") == nil)
        #expect(try reader.get("z") == Profile("z", "back", "0"))
        #expect(try folder.logRows() == 0)
    }

    @Test func openingAStoreMergesTheLogACrashLeftAndSequencesGoOnAfterIt() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("p.db")
        var lastSequence: Int64 = 0
        do {
            let store = try openStore(path)
            let log = try store.makeWriteLogWriter()
            try log.transaction {
                try log.append(0, Profile("a", "in the log", "1"))
                try log.append(1, Profile("b", "in the log too", "2"))
            }
            lastSequence = log.lastSequence
            // Gone without a fold, as after SIGKILL.
        }
        let store = try openStore(path)
        let reader = try store.makeReader()
        #expect(try reader.get("a") == Profile("a", "in the log", "1"))
        #expect(try reader.get("b") == Profile("b", "in the log too", "2"))
        #expect(try store.makeWriteLogFolder().logRows() == 0)
        #expect(try store.makeWriteLogWriter().lastSequence == lastSequence)
    }

    /// A generation large against the table (here: into an empty one) is merged without
    /// profiles_by_seq, dropped with the first range and built again with the last; a smaller
    /// one keeps it up to date. A crash in between leaves the next open to build it.
    @Test func aLargeMergeDropsTheSequenceIndexAndBuildsItAgain() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("p.db")
        let rows = SQLiteProfileWriter.rebuildMinimumRows
        func hasIndex(_ store: SQLiteProfileStore) throws -> Bool {
            try Connection(file: store.file).integer(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'profiles_by_seq'") == 1
        }
        /// Writes `rows` profiles named `name` to generation 0 and merges the first of its two
        /// ranges, which drops the index.
        func mergeFirstRange(_ store: SQLiteProfileStore, name: String) throws -> any WriteLogFolder {
            let log = try store.makeWriteLogWriter()
            try log.transaction {
                for i in 0..<rows { try log.append(0, Profile(paddedId(i), name, "uri")) }
            }
            let folder = try store.makeWriteLogFolder(rowsPerRange: rows / 2)
            #expect(try folder.prepareFold(generation: 0) { false } == 2)
            _ = try folder.foldNextRange { false }
            #expect(try !hasIndex(store))
            return folder
        }
        do {
            let store = try openStore(path)
            _ = try mergeFirstRange(store, name: "first").foldNextRange { false }
            #expect(try hasIndex(store))
            #expect(try store.makeReader().recent(2) == [paddedId(rows - 1), paddedId(rows - 2)])

            // Below the size from which a rebuild pays: the index stays.
            let log = try store.makeWriteLogWriter()
            try log.truncate(generation: 0)
            try log.transaction {
                for i in 0..<10 { try log.append(1, Profile(paddedId(i), "again", "uri")) }
            }
            let small = try store.makeWriteLogFolder(rowsPerRange: 5)
            #expect(try small.prepareFold(generation: 1) { false } == 2)
            _ = try small.foldNextRange { false }
            #expect(try hasIndex(store))
            _ = try small.foldNextRange { false }
            try log.truncate(generation: 1)

            // Rewritten ids: a merge of as many into a table of as many still pays.
            _ = try mergeFirstRange(store, name: "third")
            // Gone between two ranges, as after SIGKILL.
        }
        let store = try openStore(path)
        #expect(try hasIndex(store))
        let reader = try store.makeReader()
        #expect(try reader.count() == Int64(rows))
        #expect(try reader.get(paddedId(rows - 1)) == Profile(paddedId(rows - 1), "third", "uri"))
        #expect(try reader.recent(1) == [paddedId(rows - 1)])

        // FLUSHALL in the middle of such a merge builds the index at once (on an empty table).
        try mergeFirstRange(store, name: "fourth").deleteEverything()
        #expect(try hasIndex(store))
    }

    /// A crash between two ranges of a merge: the table has some of the generation, the log
    /// all of it. Opening the store merges the log again over the ranges already merged.
    @Test func openingAStoreMergesAGenerationACrashLeftHalfMerged() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("p.db")
        do {
            let store = try openStore(path)
            try store.makeWriter().upsert(Profile(paddedId(3), "table", "t"))
            let log = try store.makeWriteLogWriter()
            try log.transaction {
                for i in 0..<10 { try log.append(0, Profile(paddedId(i), "name \(i)", "uri")) }
                try log.appendRemoval(0, paddedId(3))
                // Written after the generations switched: newer than anything in generation 0.
                try log.append(1, Profile(paddedId(1), "newer", "uri"))
            }
            let folder = try store.makeWriteLogFolder(rowsPerRange: 4)
            #expect(try folder.prepareFold(generation: 0) { false } == 3)
            #expect(try folder.foldNextRange { false }.userIds == (0..<4).map(paddedId))
            #expect(try store.makeReader().count() == 3)
            // Gone between two ranges, as after SIGKILL.
        }
        let store = try openStore(path)
        let reader = try store.makeReader()
        #expect(try reader.count() == 9)
        #expect(try reader.get(paddedId(1)) == Profile(paddedId(1), "newer", "uri"))
        #expect(try reader.get(paddedId(3)) == nil)
        #expect(try reader.get(paddedId(9)) == Profile(paddedId(9), "name 9", "uri"))
        #expect(try reader.recent(3) == [paddedId(1), paddedId(9), paddedId(8)])
        #expect(try store.makeWriteLogFolder().logRows() == 0)
    }

    /// Logs made before seq became a plain column (it was the rowid) are read, merged and
    /// appended to by the same statements: they name their columns.
    @Test func aLogInTheEarlierLayoutIsMergedAtOpenAndStillTakesAppends() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("p.db")
        do { _ = try openStore(path) }
        for suffix in ["-writes", "-writes-wal", "-writes-shm"] { unlink(path + suffix) }
        var handle: OpaquePointer?
        #expect(sqlite3_open(path + "-writes", &handle) == SQLITE_OK)
        let earlier = """
            PRAGMA journal_mode = WAL;
            CREATE TABLE writes_0 (seq INTEGER PRIMARY KEY, user_id TEXT NOT NULL, name TEXT, portrait_uri TEXT);
            CREATE TABLE writes_1 (seq INTEGER PRIMARY KEY, user_id TEXT NOT NULL, name TEXT, portrait_uri TEXT);
            PRAGMA application_id = \(Schema.applicationId);
            INSERT INTO writes_0 VALUES (1, 'a', 'old', 'u1'), (2, 'b', 'gone', 'u2');
            INSERT INTO writes_1 VALUES (3, 'a', 'newer', 'u3'), (4, 'b', NULL, NULL);
            """
        #expect(sqlite3_exec(handle, earlier, nil, nil, nil) == SQLITE_OK)
        sqlite3_close(handle)

        let store = try openStore(path)
        let reader = try store.makeReader()
        #expect(try reader.get("a") == Profile("a", "newer", "u3"))
        #expect(try reader.get("b") == nil)
        let log = try store.makeWriteLogWriter()
        #expect(log.lastSequence == 3)
        try log.transaction { try log.append(0, Profile("c", "appended", "u5")) }
        try store.makeWriteLogFolder().fold(generation: 0) { false }
        #expect(try reader.get("c") == Profile("c", "appended", "u5"))
    }

    @Test func foldAllGivesTheEmptiedLogsPagesBack() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("p.db")
        do {
            let store = try openStore(path)
            let log = try store.makeWriteLogWriter()
            let name = String(repeating: "n", count: 200)
            try log.transaction {
                for i in 0..<5000 { try log.append(i % 2, Profile("id\(i)", name, "u")) }
            }
            try store.makeWriteLogFolder().foldAll()
        }
        // Closed, so the log's WAL went back into it: a few pages, not the ~1.2 MB it grew to.
        #expect(logFileBytes(path) > 0)
        #expect(logFileBytes(path) < 64 << 10, "\(logFileBytes(path)) bytes")
        #expect(try openStore(path).makeReader().count() == 5000)
    }

    /// The server's checkpointer thread copies the log's WAL back into the log file; the
    /// writer's commits leave that to it until the WAL holds 64 MiB (they did it every 4 MiB,
    /// stalling the writes behind them).
    @Test func theLogCheckpointerAndNotTheWritersCommitsCopiesTheLogBack() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("p.db")
        let store = try openStore(path)
        let log = try store.makeWriteLogWriter()
        let checkpointer = try store.makeWriteLogCheckpointer()
        let name = String(repeating: "n", count: 200)
        // About 5 MiB of rows in 40 commits: past the 1,000 pages of SQLite's default.
        for commit in 0..<40 {
            try log.transaction {
                for i in 0..<500 { try log.append(0, Profile("id\(commit)-\(i)", name, "u")) }
            }
        }
        #expect(logFileBytes(path) < 64 << 10, "\(logFileBytes(path)) bytes: a commit checkpointed the log")
        try checkpointer.checkpointWithoutWaiting()
        #expect(logFileBytes(path) > 4 << 20, "\(logFileBytes(path)) bytes")
        #expect(try store.makeWriteLogFolder().logRows() == 20_000)
    }

    @Test func aFailedAppendRollsBackAndHandsItsSequenceOutAgain() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory.file("p.db"))
        let log = try store.makeWriteLogWriter()
        try log.transaction { try log.append(0, Profile("a", "1", "1")) }
        let before = log.lastSequence
        store.setFault(SQLITE_FULL)
        #expect(storeError { try log.transaction { try log.append(0, Profile("b", "2", "2")) } }?.kind != nil)
        store.setFault(nil)
        #expect(log.lastSequence == before)
        try store.makeWriteLogFolder().foldAll()
        #expect(try store.makeReader().get("b") == nil)
        #expect(try store.makeReader().get("a") == Profile("a", "1", "1"))
    }

    @Test func deleteEverythingEmptiesTableAndLogTogether() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory.file("p.db"))
        try store.makeWriter().upsert(Profile("t", "table", "t"))
        let log = try store.makeWriteLogWriter()
        try log.transaction { try log.append(1, Profile("l", "log", "l")) }
        let folder = try store.makeWriteLogFolder()
        try folder.deleteEverything()
        #expect(try folder.logRows() == 0)
        #expect(try store.makeReader().count() == 0)
    }

    @Test func aForeignFileWhereTheLogGoesIsRefused() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("p.db")
        write(Array("not a database, just text".utf8) + [UInt8](repeating: 0x41, count: 4096), to: path + "-writes")
        let error = storeError { _ = try openStore(path) }
        #expect(error?.kind == .notADatabase)
    }
}

/// The size of the write log file beside the store at `path`; -1 when there is none.
private func logFileBytes(_ path: String) -> Int {
    var status = stat()
    return stat(path + "-writes", &status) == 0 ? Int(status.st_size) : -1
}
