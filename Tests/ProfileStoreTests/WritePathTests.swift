import CSQLite
import Glibc
import ProfileStore
@_spi(Testing) @testable import ProfileStoreSQLite
import Testing

/// The store's write path: what a commit does to each operation, what readers see before
/// and after the merge, what reopening does with what the log holds, and how commits are held
/// back when merges cannot keep up.
@Suite struct WritePathTests {
    let directory = TemporaryDirectory()
    var path: String { directory.file("profiles.sqlite3") }

    @Test func eachOperationSeesTheOnesBeforeItAndReportsBeforeAndAfter() throws {
        let store = try openStore(path)
        let writes = try store.openWritePath()
        defer { try? writes.close() }
        let results = writes.commit([
            TestUnit([.put("a", "A", "ua"), .read("a"), .remove("b"), .put("b", "B", "")]),
            TestUnit([.remove("a"), .read("a"), .put("a", "A2", "ua2")]),
            TestUnit(.read("b")),
        ])
        let present = ProfileState.present(hasName: true, hasPortraitUri: true)
        #expect(try results[0].get() == [
            Outcome(before: .absent, after: Profile("a", "A", "ua"), changed: true),
            Outcome(before: present, after: Profile("a", "A", "ua"), changed: false),
            Outcome(before: .absent, after: nil, changed: false),
            Outcome(before: .absent, after: Profile("b", "B", ""), changed: true),
        ])
        #expect(try results[1].get() == [
            Outcome(before: present, after: nil, changed: true),
            Outcome(before: .absent, after: nil, changed: false),
            Outcome(before: .absent, after: Profile("a", "A2", "ua2"), changed: true),
        ])
        #expect(try results[2].get() == [
            Outcome(before: .present(hasName: true, hasPortraitUri: false), after: Profile("b", "B", ""), changed: false),
        ])
        #expect(writes.rowCount == 2)
        let reader = try store.makeReader()
        #expect(try reader.get("a") == Profile("a", "A2", "ua2"))
        #expect(try reader.get("b") == Profile("b", "B", ""))
        #expect(try reader.recent(10) == ["a", "b"])
    }

    @Test func patchesCreateKeepAndRemoveAsAsked() throws {
        let store = try openStore(path)
        let writes = try store.openWritePath()
        defer { try? writes.close() }
        try writes.commit(TestUnit(.put("p", "name", "")))
        // A patch of a missing profile that may not create one changes nothing.
        #expect(try writes.commit(TestUnit(.patch("missing", name: .set("n"), portraitUri: .keep,
                                                  createsMissing: false, removesEmptied: false)))
                == [Outcome(before: .absent, after: nil, changed: false)])
        // One that may creates it with the other field empty.
        #expect(try writes.commit(TestUnit(.patch("new", name: .keep, portraitUri: .set("u"),
                                                  createsMissing: true, removesEmptied: true)))
                == [Outcome(before: .absent, after: Profile("new", "", "u"), changed: true)])
        // setIfEmpty writes only an empty field.
        #expect(try writes.commit(TestUnit(.patch("p", name: .setIfEmpty("other"), portraitUri: .setIfEmpty("u"),
                                                  createsMissing: true, removesEmptied: true)))
                == [Outcome(before: .present(hasName: true, hasPortraitUri: false), after: Profile("p", "name", "u"),
                            changed: true)])
        #expect(try writes.commit(TestUnit(.patch("p", name: .setIfEmpty("other"), portraitUri: .keep,
                                                  createsMissing: true, removesEmptied: true)))
                == [Outcome(before: .present(hasName: true, hasPortraitUri: true), after: Profile("p", "name", "u"),
                            changed: false)])
        // Emptying both fields removes the profile when asked to, and keeps it otherwise.
        #expect(try writes.commit(TestUnit(.patch("p", name: .set(""), portraitUri: .set(""),
                                                  createsMissing: false, removesEmptied: true)))
                == [Outcome(before: .present(hasName: true, hasPortraitUri: true), after: nil, changed: true)])
        #expect(try writes.commit(TestUnit(.patch("new", name: .keep, portraitUri: .set(""),
                                                  createsMissing: false, removesEmptied: false)))
                == [Outcome(before: .present(hasName: false, hasPortraitUri: true), after: Profile("new", "", ""),
                            changed: true)])
        #expect(writes.rowCount == 1)
        #expect(try store.makeReader().get("p") == nil)
    }

    @Test func removeAllForgetsEverythingBeforeItInTheSameCommit() throws {
        do {
            let store = try openStore(path)
            let writes = try store.openWritePath()
            try writes.commit(TestUnit([.put("old", "o", ""), .put("older", "o", "")]))
            try writes.close()
        }

        let reopened = try openStore(path)
        let again = try reopened.openWritePath()
        let results = again.commit([
            TestUnit(.put("before", "b", "")),
            TestUnit([.read("old"), .removeAll, .read("old"), .put("after", "a", "")]),
        ])
        #expect(try results[1].get().map(\.before) == [.present(hasName: true, hasPortraitUri: false), .absent, .absent, .absent])
        #expect(again.rowCount == 1)
        let reader = try reopened.makeReader()
        for id in ["old", "older", "before"] { #expect(try reader.get(id) == nil) }
        #expect(try reader.get("after") == Profile("after", "a", ""))
        #expect(try reader.recent(10) == ["after"])
        #expect(try reader.scan(after: "", limit: 10) == ["after"])
        // The merger empties the table, then merges what came after.
        #expect(eventually { tableRows(path) == ["after": "a"] })
        try again.close()
    }

    @Test func whatTheCallerKnowsSparesTheTableButTheBufferKnowsBetter() throws {
        do {
            let store = try openStore(path)
            let writes = try store.openWritePath()
            try writes.commit(TestUnit(.put("merged", "m", "")))
            try writes.close()
        }
        let store = try openStore(path)
        let writes = try store.openWritePath()
        defer { try? writes.close() }
        try writes.commit(TestUnit(.put("buffered", "b", "")))
        var asked: [String] = []
        let results = writes.commit([TestUnit([.remove("buffered"), .remove("merged"), .remove("nowhere")])]) { id in
            asked.append(id)
            // The caller claims "merged" is absent and says nothing of the others.
            return id == "merged" ? .absent : .unknown
        }
        // The buffer answers for "buffered" without asking; "merged" is taken at its word.
        #expect(asked == ["merged", "nowhere"])
        #expect(try results[0].get().map(\.changed) == [true, false, false])
        #expect(writes.rowCount == 1)
    }

    @Test func mergesMoveWritesIntoTheTableWhileReadersKeepSeeingThem() throws {
        let store = try SQLiteProfileStore(path: path, writeBufferBytes: 1 << 20)
        let writes = try store.openWritePath(rowsPerMergeRange: 7) { _, _ in }
        let reader = try store.makeReader()
        try reader.beginRead()
        // A snapshot of the table taken before the merge: the reader must not trust it after.
        #expect(try reader.get("id0") == nil)
        for round in 0..<20 {
            try writes.commit(TestUnit((0..<50).map { .put("id\($0)", "round \(round)", String(repeating: "u", count: 100)) }))
        }
        try writes.commit(TestUnit(.remove("id7")))
        #expect(eventually { writes.statistics.unmergedWrites == 0 })
        #expect(writes.statistics.merges >= 1)
        #expect(try reader.get("id0")?.name == "round 19")
        #expect(try reader.get("id7") == nil)
        reader.endRead()
        let table = tableRows(path)
        #expect(table.count == 49)
        #expect(table["id49"] == "round 19")
        #expect(writes.rowCount == 49)
        try writes.close()
        #expect(segments(path).isEmpty)
    }

    /// A commit's table lookups share one read transaction: each commit's must see what the
    /// merges before it moved out of the buffer, whichever commit's transaction came before.
    @Test func commitsReadWhatMergesMovedIntoTheTable() throws {
        let store = try SQLiteProfileStore(path: path, writeBufferBytes: 1 << 20)
        let writes = try store.openWritePath(rowsPerMergeRange: 7) { _, _ in }
        defer { try? writes.close() }
        for round in 0..<4 {
            try writes.commit(TestUnit((0..<50).map { .put("id\($0)", "round \(round)", "") }))
            #expect(eventually { writes.statistics.unmergedWrites == 0 })
            // Only the table holds them now.
            let outcomes = try writes.commit(TestUnit((0..<50).map { .read("id\($0)") }))
            #expect(outcomes.map(\.after) == (0..<50).map { Profile("id\($0)", "round \(round)", "") })
        }
        #expect(writes.rowCount == 50)
    }

    /// Merges run in the background until the buffer is half full; a step running then is
    /// given up and run again at once, from where the last committed range ended. However
    /// often that happens, every write ends up in the table.
    @Test func mergesAbandonedInTheBackgroundLoseNothing() throws {
        let store = try SQLiteProfileStore(path: path, writeBufferBytes: 1 << 20)
        let writes = try store.openWritePath(rowsPerMergeRange: 2000) { _, _ in }
        let padding = String(repeating: "p", count: 300)
        var expected: [String: String] = [:]
        for round in 0..<40 {
            let operations: [TestUnit.Operation] = (0..<250).map { i in
                let id = "id\((round * 97 + i * 13) % 5000)"
                expected[id] = "r\(round)"
                return .put(id, "r\(round)", padding)
            }
            try writes.commit(TestUnit(operations))
        }
        #expect(eventually { writes.statistics.unmergedWrites == 0 })
        #expect(tableRows(path) == expected)
        #expect(writes.rowCount == expected.count)
        print("store merges: \(writes.statistics.merges) merges, \(writes.statistics.abandonedMergeSteps) background steps abandoned")
        try writes.close()
    }

    @Test func recentAndScanReadTheBufferTogetherWithTheTable() throws {
        do {
            let store = try openStore(path)
            let writes = try store.openWritePath()
            for id in ["a", "b", "c", "d", "e", "f"] { try writes.commit(TestUnit(.put(id, "table", ""))) }
            try writes.close()
        }
        let store = try openStore(path)
        let writes = try store.openWritePath()
        defer { try? writes.close() }
        // In the buffer now: a newer c, a removal of d, a new g.
        try writes.commit(TestUnit([.put("c", "buffer", ""), .remove("d"), .put("g", "buffer", ""), .put("aa", "buffer", "")]))
        let reader = try store.makeReader()
        #expect(try reader.recent(4) == ["aa", "g", "c", "f"])
        #expect(try reader.recent(100) == ["aa", "g", "c", "f", "e", "b", "a"])
        #expect(try reader.scan(after: "", limit: 3) == ["a", "aa", "b"])
        #expect(try reader.scan(after: "b", limit: 3) == ["c", "e", "f"])
        #expect(try reader.scan(after: "f", limit: 3) == ["g"])
        #expect(try reader.get("c")?.name == "buffer")
        #expect(try reader.count() == 7)
    }

    @Test func reopeningReplaysWhatTheTableLacksAndStopsAtATornFrame() throws {
        do { _ = try openStore(path) }
        try writeSegment(number: 1, previousLength: 0, frames: [
            (1, [(.put, "a", "A"), (.put, "b", "B")]),
            (3, [(.removal, "a", ""), (.put, "c", "C")]),
            (5, [(.put, "torn", "T")]),
        ], cutLastFrameShort: true)
        let store = try openStore(path)
        let reader = try store.makeReader()
        #expect(try reader.get("a") == nil)
        #expect(try reader.get("b")?.name == "B")
        #expect(try reader.get("c")?.name == "C")
        #expect(try reader.get("torn") == nil)
        // Merged into the table at open, and the log is gone.
        #expect(tableRows(path) == ["b": "B", "c": "C"])
        #expect(segments(path).isEmpty)
        // Sequences go on after what was replayed.
        let writes = try store.openWritePath()
        try writes.commit(TestUnit(.put("d", "D", "")))
        #expect(try reader.recent(3) == ["d", "c", "b"])
        try writes.close()
    }

    /// A frame that is whole but whose bytes changed (one bit of a name) fails its CRC: it and
    /// everything after it are dropped, as at a torn frame, and nothing of it is served.
    @Test func reopeningStopsAtAWholeFrameWhoseChecksumFails() throws {
        do { _ = try openStore(path) }
        try writeSegment(number: 1, previousLength: 0, frames: [
            (1, [(.put, "a", "A")]),
            (2, [(.put, "b", "Bee"), (.put, "b2", "Bee2")]),
            (4, [(.put, "c", "C")]),
        ], flippingAByteOf: "Bee2")
        let reader = try openStore(path).makeReader()
        #expect(try reader.get("a")?.name == "A")
        #expect(try reader.get("b") == nil)
        #expect(try reader.get("b2") == nil)
        #expect(try reader.get("c") == nil)
        #expect(tableRows(path) == ["a": "A"])
    }

    @Test func aSegmentAfterOneThatLostItsEndIsNotReplayed() throws {
        do { _ = try openStore(path) }
        let first = try writeSegment(number: 1, previousLength: 0, frames: [(1, [(.put, "kept", "1")]), (2, [(.put, "lost", "2")])],
                                     cutLastFrameShort: true)
        // The next segment began when the first had both frames: its end was lost since.
        try writeSegment(number: 2, previousLength: first.fullLength, frames: [(3, [(.put, "later", "3")])])
        let reader = try openStore(path).makeReader()
        #expect(try reader.get("kept") != nil)
        #expect(try reader.get("lost") == nil)
        #expect(try reader.get("later") == nil)
    }

    @Test func aForeignFileNamedLikeASegmentStopsTheOpen() throws {
        do { _ = try openStore(path) }
        write(Array("not a log at all, but long enough to have a header".utf8), to: path + "-log.1")
        let error = storeError { _ = try openStore(path) }
        #expect(error?.kind == .notADatabase)
        #expect(contents(of: path + "-log.1") == Array("not a log at all, but long enough to have a header".utf8))
    }

    @Test(arguments: [SQLITE_FULL, SQLITE_IOERR])
    func aFailedCommitChangesNothing(code: Int32) throws {
        let store = try openStore(path)
        let writes = try store.openWritePath()
        defer { try? writes.close() }
        try writes.commit(TestUnit(.put("a", "before", "")))
        store.setFault(code)
        let results = writes.commit([TestUnit(.put("a", "after", "")), TestUnit([.put("b", "b", ""), .remove("a")])])
        for result in results {
            guard case .failure(let error) = result else {
                Issue.record("a commit went through a fault")
                continue
            }
            #expect(error.code == "SQLite code \(code)")
            #expect(!error.reason.contains(path), "a reason for clients names a file: \(error.reason)")
        }
        store.setFault(nil)
        let reader = try store.makeReader()
        #expect(try reader.get("a")?.name == "before")
        #expect(try reader.get("b") == nil)
        #expect(writes.rowCount == 1)
        try writes.commit(TestUnit(.put("b", "b", "")))
        #expect(writes.rowCount == 2)
    }

    /// Under `--sync normal` the log syncer syncs within about a second of a write and not
    /// again while nothing is written; under `full` every commit syncs itself and the syncer
    /// does nothing.
    @Test func theLogIsSyncedOnceASecondAfterWrites() throws {
        do {
            let store = try openStore(path)
            let writes = try store.openWritePath()
            defer { try? writes.close() }
            let before = writes.statistics.logSyncs
            try writes.commit(TestUnit(.put("a", "A", "")))
            let written = ContinuousClock.now
            #expect(eventually { writes.statistics.logSyncs > before })
            #expect(ContinuousClock.now - written < .seconds(5), "the write waited more than 5 s for its sync")
            // Whatever was dirty is synced within the next tick; after that, nothing is.
            usleep(1_200_000)
            let settled = writes.statistics.logSyncs
            usleep(2_200_000)
            #expect(writes.statistics.logSyncs == settled, "the syncer synced a log nobody wrote")
        }
        let full = try SQLiteProfileStore(path: directory.file("full.sqlite3"), synchronous: .full)
        let writes = try full.openWritePath()
        defer { try? writes.close() }
        try writes.commit(TestUnit(.put("a", "A", "")))
        usleep(1_500_000)
        #expect(writes.statistics.logSyncs == 0)
    }

    /// A background sync that fails is kept: the write acknowledged before it stays, every
    /// commit after it fails with the reason, reads go on, and reopening replays the log.
    @Test func aFailedSyncRefusesLaterWrites() throws {
        do {
            let store = try openStore(path)
            let writes = try store.openWritePath()
            defer { try? writes.close() }
            try writes.commit(TestUnit(.put("a", "A", "")))
            // Once that write is synced, nothing is dirty until the next one.
            #expect(eventually { writes.statistics.logSyncs > 0 })
            store.setSyncFault(errno: EIO)
            try writes.commit(TestUnit(.put("b", "B", "")))
            #expect(eventually { writes.writeRefusal != nil })
            let refused = writes.commit([TestUnit(.put("c", "C", ""))])[0]
            guard case .failure(let error) = refused else {
                Issue.record("a commit went through after a failed sync")
                return
            }
            #expect(error.reason.hasPrefix("a sync of the write log to disk failed ("), "\(error.reason)")
            #expect(error.reason.hasSuffix("writes are refused until a restart"))
            #expect(!error.reason.contains(path))
            #expect(writes.writeRefusal == WriteRefusal(label: "io_error", reason: error.reason))
            let reader = try store.makeReader()
            #expect(try reader.get("b") == Profile("b", "B", ""))
            #expect(try reader.get("c") == nil)
        }
        let reopened = try openStore(path)
        let writes = try reopened.openWritePath()
        defer { try? writes.close() }
        let reader = try reopened.makeReader()
        #expect(try reader.get("a") == Profile("a", "A", ""))
        #expect(try reader.get("b") == Profile("b", "B", ""))
        #expect(try reader.get("c") == nil)
        #expect(writes.rowCount == 2)
        try writes.commit(TestUnit(.put("c", "C", "")))
    }

    /// Merges cannot run while another connection holds the database's write lock: commits go
    /// on into the buffer, are held back once it is half full, and fail with a reason once it
    /// stays full past the busy timeout; readers are answered throughout, and once the lock
    /// goes everything merges.
    @Test func aBufferThatMergesCannotEmptyHoldsCommitsBackThenFailsThem() throws {
        let store = try SQLiteProfileStore(path: path, busyTimeoutMilliseconds: 200, writeBufferBytes: 1 << 20)
        let writes = try store.openWritePath()
        defer { try? writes.close() }
        var blocker: OpaquePointer?
        #expect(sqlite3_open(path, &blocker) == SQLITE_OK)
        defer { sqlite3_close(blocker) }
        #expect(sqlite3_exec(blocker, "BEGIN IMMEDIATE", nil, nil, nil) == SQLITE_OK)
        let value = String(repeating: "v", count: 1000)
        var failure: StoreError?
        var committed = 0
        for round in 0..<2000 where failure == nil {
            switch writes.commit([TestUnit(.put("id\(round)", value, ""))])[0] {
            case .success: committed += 1
            case .failure(let error): failure = error
            }
        }
        #expect(writes.statistics.delayedCommits > 0)
        #expect(failure?.kind == .busy)
        #expect(failure?.reason.hasPrefix("the write buffer stayed full for ") == true, "\(String(describing: failure))")
        #expect(try store.makeReader().get("id0")?.name == value)
        #expect(writes.rowCount == committed)
        #expect(sqlite3_exec(blocker, "ROLLBACK", nil, nil, nil) == SQLITE_OK)
        #expect(eventually { writes.statistics.unmergedWrites == 0 })
        #expect(tableRows(path).count == committed)
        try writes.commit(TestUnit(.put("after", "a", "")))
    }

    /// Memtables are sorted by id as soon as they fill (for SCAN), even while the merger's
    /// thread is held in a merge: here it waits for a write lock another connection holds.
    @Test func fullMemtablesAreSortedWhileAMergeWaits() throws {
        let store = try SQLiteProfileStore(path: path, busyTimeoutMilliseconds: 30_000, writeBufferBytes: 64 << 20)
        let writes = try store.openWritePath()
        let buffer = (writes as! SQLiteWritePath).buffer
        var blocker: OpaquePointer?
        #expect(sqlite3_open(path, &blocker) == SQLITE_OK)
        defer { sqlite3_close(blocker) }
        #expect(sqlite3_exec(blocker, "BEGIN IMMEDIATE", nil, nil, nil) == SQLITE_OK)
        let value = String(repeating: "v", count: 100)
        func write(_ ids: Range<Int>) {
            for first in stride(from: ids.lowerBound, to: ids.upperBound, by: 1000) {
                let unit = TestUnit((first..<min(first + 1000, ids.upperBound)).map { .put("id\($0)", value, "") })
                _ = writes.commit([unit])
            }
        }
        func memtables() -> [Memtable] {
            buffer.withContents { $0.memtables }
        }
        // A second later a merge starts, freezes the memtable, and waits for the lock.
        write(0..<1000)
        #expect(eventually { memtables().allSatisfy(\.isFrozen) })
        write(1000..<75_000)
        #expect(memtables().count >= 5)
        #expect(eventually {
            buffer.withContents { $0.memtables.dropLast().allSatisfy { $0.sortedLatest != nil } }
        }, "a full memtable stayed unsorted while the merge waited")
        #expect(sqlite3_exec(blocker, "ROLLBACK", nil, nil, nil) == SQLITE_OK)
        #expect(eventually { writes.statistics.unmergedWrites == 0 })
        #expect(tableRows(path).count == 75_000)
        try writes.close()
    }

    /// A scan goes on page by page after the last id it gave, whether that id sits in the table,
    /// in a sorted memtable or in the unsorted active one: every id once, in order, the `after`
    /// id never again.
    @Test func scanPagesContinueAcrossSortedMemtablesAndTheTable() throws {
        let inTable = (0..<30).map { "t\($0 * 2)" }
        do {
            let store = try openStore(path)
            let writes = try store.openWritePath()
            try writes.commit(TestUnit(inTable.map { .put($0, "table", "") }))
            try writes.close()
        }
        let store = try SQLiteProfileStore(path: path, busyTimeoutMilliseconds: 30_000, writeBufferBytes: 64 << 20)
        let writes = try store.openWritePath()
        defer { try? writes.close() }
        let buffer = (writes as! SQLiteWritePath).buffer
        // Another connection holds the write lock, so the merge that freezes the memtable waits
        // and the sorter sorts it.
        var blocker: OpaquePointer?
        #expect(sqlite3_open(path, &blocker) == SQLITE_OK)
        defer { sqlite3_close(blocker) }
        #expect(sqlite3_exec(blocker, "BEGIN IMMEDIATE", nil, nil, nil) == SQLITE_OK)
        defer { sqlite3_exec(blocker, "ROLLBACK", nil, nil, nil) }
        let inSorted = (0..<30).map { "t\($0 * 2 + 1)" } + ["t0"]
        try writes.commit(TestUnit(inSorted.map { .put($0, "sorted", "") }))
        #expect(eventually {
            buffer.withContents { contents in
                let memtables = contents.memtables
                return memtables.count == 1 && memtables[0].isFrozen && memtables[0].sortedLatest != nil
            }
        }, "the memtable was not frozen and sorted")
        let inActive = ["t15a", "t3a", "t44a", "t1"]
        try writes.commit(TestUnit(inActive.map { .put($0, "active", "") }))
        let reader = try store.makeReader()
        let everyId = Set(inTable + inSorted + inActive).sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        for pageSize in [1, 2, 3, 7] {
            var seen: [String] = []
            var after = ""
            while true {
                let page = try reader.scan(after: after, limit: pageSize)
                #expect(!page.contains(after), "a scan after \(after) gave it again")
                seen += page
                if page.count < pageSize { break }
                after = page.last!
                if seen.count > everyId.count { break }
            }
            #expect(seen == everyId, "pages of \(pageSize)")
        }
    }

    /// `recent` is built again once its rows pass four times the live profiles, but not by a
    /// merge that writes wait for (here the one a stop runs), which lets them reach eight times
    /// (`RecencyTable.needsRebuild`).
    @Test(arguments: [false, true])
    func recencyIsRebuiltUnlessWritesWaitForTheMerge(lastMergeAtStop: Bool) throws {
        let store = try SQLiteProfileStore(path: path, busyTimeoutMilliseconds: 5000, writeBufferBytes: 1 << 20)
        let writes = try store.openWritePath()
        // 500 profiles written 25 times: `recent` passes 4 * 500 + 10,000 rows with the last round.
        for round in 0..<25 {
            let name = String(repeating: "n", count: 100) + "\(round)"
            _ = writes.commit([TestUnit((0..<500).map { .put("id\($0)", name, "") })])
            if round < 24 || !lastMergeAtStop { #expect(eventually { writes.statistics.unmergedWrites == 0 }) }
        }
        try writes.close()
        let connection = try Connection(file: store.file)
        #expect(try connection.integer("SELECT count(*) FROM profiles") == 500)
        let recent = try connection.integer("SELECT count(*) FROM recent")
        #expect(recent == (lastMergeAtStop ? 12_500 : 500))
    }

    /// Logs of earlier versions (an SQLite file beside the database) are merged at open and removed.
    @Test func aLogInTheEarlierLayoutIsMergedAtOpen() throws {
        do { _ = try openStore(path) }
        var handle: OpaquePointer?
        #expect(sqlite3_open(path + "-writes", &handle) == SQLITE_OK)
        let earlier = """
            PRAGMA journal_mode = WAL;
            CREATE TABLE writes_0 (user_id TEXT NOT NULL, name TEXT, portrait_uri TEXT, seq INTEGER NOT NULL);
            CREATE TABLE writes_1 (user_id TEXT NOT NULL, name TEXT, portrait_uri TEXT, seq INTEGER NOT NULL);
            PRAGMA application_id = \(Schema.applicationId);
            INSERT INTO writes_0 VALUES ('a', 'old', 'u1', 1), ('b', 'gone', 'u2', 2);
            INSERT INTO writes_1 VALUES ('a', 'newer', 'u3', 3), ('b', NULL, NULL, 4);
            """
        #expect(sqlite3_exec(handle, earlier, nil, nil, nil) == SQLITE_OK)
        sqlite3_close(handle)

        let store = try openStore(path)
        let reader = try store.makeReader()
        #expect(try reader.get("a") == Profile("a", "newer", "u3"))
        #expect(try reader.get("b") == nil)
        #expect(access(path + "-writes", F_OK) != 0)
        let writes = try store.openWritePath()
        try writes.commit(TestUnit(.put("c", "appended", "")))
        #expect(try reader.recent(2) == ["c", "a"])
        try writes.close()
    }

    /// Writes one segment by hand, as a server would have left it: frames of (kind, id, name)
    /// with their first sequence; the last frame cut short when asked, as a crash in the
    /// middle of its write would. Returns the segment's length before any cut.
    @discardableResult
    func writeSegment(number: UInt64, previousLength: Int,
                      frames: [(Int64, [(WriteLogFile.OperationKind, String, String)])],
                      cutLastFrameShort: Bool = false, flippingAByteOf flipped: String? = nil) throws -> (fullLength: Int, Void) {
        let file = try StoreFile(path: path, synchronous: .normal, busyTimeoutMilliseconds: 1000)
        let segment = WriteLogFile.segmentPath(of: path, number: number)
        var bytes = WriteLogFile.header(number: number, previousLength: previousLength)
        let frame = LogFrame()
        var lastFrameLength = 0
        for (first, operations) in frames {
            frame.begin(firstSequence: first)
            for (kind, id, name) in operations {
                Array(id.utf8).withUnsafeBytes { id in
                    Array(name.utf8).withUnsafeBytes { name in _ = frame.append(kind, userId: id, name: name) }
                }
            }
            frame.seal()
            bytes += Array(frame.bytes)
            lastFrameLength = frame.bytes.count
        }
        _ = file
        let fullLength = bytes.count
        if cutLastFrameShort { bytes.removeLast(lastFrameLength / 2) }
        if let flipped {
            // One bit of the text's first byte: the frame stays whole and parses, only its CRC differs.
            let text = Array(flipped.utf8)
            let at = (0...bytes.count - text.count).first { Array(bytes[$0..<$0 + text.count]) == text }!
            bytes[at] ^= 0x08
        }
        write(bytes, to: segment)
        return (fullLength, ())
    }
}
