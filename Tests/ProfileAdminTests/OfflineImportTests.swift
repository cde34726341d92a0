import Glibc
import ProfileStore
@testable import ProfileStoreSQLite
import ProfileTestSupport
import Testing

@Suite struct OfflineImportTests {
    /// Whether `recent` has a live row for every profile, the store's quick_check and its row
    /// count, read behind the store's back so that nothing an open does can hide what an
    /// import left.
    func inspect(_ path: String) throws -> (recencyComplete: Bool, check: String, rows: Int64) {
        let connection = try Connection(file: StoreFile(path: path, synchronous: .normal, busyTimeoutMilliseconds: 1000))
        let rows = try connection.integer("SELECT count(*) FROM profiles")
        let live = try connection.integer(
            "SELECT count(*) FROM recent AS r JOIN profiles AS p ON p.user_id = r.user_id AND p.seq = r.seq")
        return (live == rows, try connection.text("PRAGMA quick_check"), rows)
    }

    func recent(_ path: String, _ limit: Int) throws -> [String] {
        var lines: [String] = []
        try SQLiteProfileStore(path: path).makeReader().recent(limit: limit) { row in
            lines.append(String(decoding: row.userId, as: UTF8.self) + " " + String(decoding: row.name, as: UTF8.self))
        }
        return lines
    }

    @Test func recentAfterAnImportShowsTheFilesLastRowsNewestWithRepeatedIdsAtTheirLastRow() throws {
        let dir = try makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        // Many rows, then ids the file repeats.
        let rows = 50_000
        let text = generatedCSV(rows) + "u7,again,x\nu3,again,x\nzz,new,x\nu7,last,y\n"
        let path = file(dir, "a.csv", text)
        let store = dir + "/p.sqlite3"
        let run = try profilectl(["import", path, "--db", store])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("read \(rows + 4), written \(rows + 4), rejected 0"))
        #expect(access(store + ".lock", F_OK) != 0, "the import left its lock file")
        #expect(try inspect(store) == (true, "ok", Int64(rows + 1)))
        #expect(try recent(store, 5) == ["u7 last", "zz new", "u3 again", "u\(rows - 1) Name \(rows - 1)",
                                         "u\(rows - 2) Name \(rows - 2)"])

        // Small transactions into the larger table: order holds the same.
        let more = file(dir, "b.csv", "userId,name,portraitUri\nu9,b1,x\nu1,b2,x\nu9,b3,x\nnew,b4,x\nu1,b5,x\n")
        #expect(try profilectl(["import", more, "--db", store, "--batch", "2"]).status == 0)
        #expect(try inspect(store) == (true, "ok", Int64(rows + 2)))
        #expect(try recent(store, 4) == ["u1 b5", "new b4", "u9 b3", "u7 last"])
    }

    @Test func aFileThatIsNotAStoreIsRefusedAndLeftAlone() throws {
        let dir = try makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let notes = file(dir, "notes.txt", "not a database, just some notes\n")
        let source = file(dir, "a.csv", generatedCSV(3))
        let run = try profilectl(["import", source, "--db", notes])
        #expect(run.status == 2)
        #expect(run.stderr.contains(notes), "\(run.stderr)")
        #expect(readText(notes) == "not a database, just some notes\n")
        #expect(directoryEntries(dir) == ["a.csv", "notes.txt"])
    }

    @Test func anImportKilledAtAnyMomentLeavesAValidStoreWithItsRecency() throws {
        let dir = try makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let store = dir + "/p.sqlite3"
        let keep = file(dir, "keep.csv", "userId,name,portraitUri\nkeep,me,x\n")
        #expect(try profilectl(["import", keep, "--db", store]).status == 0)
        // Transactions of 50,000 rows, so kills land inside them, in the profiles or in `recent`.
        let batch = 50_000
        let rows = 4 * batch
        let path = file(dir, "big.csv", generatedCSV(rows))
        for delay in [50_000, 200_000, 500_000, 900_000, 1_400_000, 2_000_000, 3_000_000] as [useconds_t] {
            let pid = try spawn(executable("profilectl"), args: ["import", path, "--db", store, "--batch", String(batch)],
                                stderrPath: dir + "/stderr")
            usleep(delay)
            kill(pid, SIGKILL)
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            // Whatever the kill interrupted, the file holds whole transactions and their recency.
            let found = try inspect(store)
            #expect(found.recencyComplete && found.check == "ok", "killed after \(delay) µs: \(found)")
            #expect((found.rows - 1) % Int64(batch) == 0, "killed after \(delay) µs: \(found.rows) rows")
            #expect(try recent(store, 1000).count == min(1000, Int(found.rows)))
        }
        let run = try profilectl(["import", path, "--db", store, "--batch", String(batch)])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try inspect(store) == (true, "ok", Int64(rows + 1)))
        #expect(try recent(store, 1) == ["u\(rows - 1) Name \(rows - 1)"])
    }

    @Test func anImportIntoANewFileKilledBeforeItsFirstCommitLeavesNoStore() throws {
        let dir = try makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let rows = 200_000
        let path = file(dir, "big.csv", generatedCSV(rows))
        // One transaction: the file is built under another name, and takes the store's only whole.
        for (index, delay) in ([30_000, 150_000, 300_000, 500_000, 800_000] as [useconds_t]).enumerated() {
            let store = dir + "/p\(index).sqlite3"
            let pid = try spawn(executable("profilectl"), args: ["import", path, "--db", store], stderrPath: dir + "/stderr")
            usleep(delay)
            kill(pid, SIGKILL)
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            if access(store, F_OK) == 0 {
                #expect(try inspect(store) == (true, "ok", Int64(rows)), "killed after \(delay) µs")
            }
            // The next import finds no store, or a whole one, and leaves nothing else beside it.
            let run = try profilectl(["import", path, "--db", store, "--batch", "70000"])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(directoryEntries(dir).filter { $0.hasPrefix("p\(index).") } == ["p\(index).sqlite3"])
            #expect(try inspect(store) == (true, "ok", Int64(rows)))
        }
    }

    @Test func aStrictImportThatStopsInItsFirstTransactionMakesNoStore() throws {
        let dir = try makeTemporaryDirectory()
        defer { removeDirectory(dir) }
        let path = file(dir, "a.csv", generatedCSV(500) + "u500,only two fields\n")
        let run = try profilectl(["import", path, "--strict", "--db", dir + "/p.sqlite3"])
        #expect(run.status == 1)
        #expect(run.stderr.contains("read 501, written 0, rejected 1"), "\(run.stderr)")
        #expect(directoryEntries(dir) == ["a.csv"])
    }
}
