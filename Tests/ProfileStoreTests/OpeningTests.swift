import CSQLite
import Glibc
import ProfileStore
@_spi(Testing) @testable import ProfileStoreSQLite
import ProfileTestSupport
import Testing

@Suite struct OpeningTests {
    let directory = TemporaryDirectory()

    /// Runs SQL on the file directly, holding the store's lock meanwhile.
    func execute(_ sql: String, on path: String) throws {
        let file = try StoreFile(path: path, synchronous: .normal, busyTimeoutMilliseconds: 1000)
        try Connection(file: file, create: true).execute(sql)
    }

    func integer(_ sql: String, on path: String) throws -> Int64 {
        let file = try StoreFile(path: path, synchronous: .normal, busyTimeoutMilliseconds: 1000)
        return try Connection(file: file).integer(sql)
    }

    /// Opening `path` fails with `kind`, names the path, and leaves the file byte-identical;
    /// a file that is not a store is also left without a lock file the open made.
    func expectRefused(_ path: String, _ kind: StoreError.Kind, sourceLocation: SourceLocation = #_sourceLocation) {
        let before = contents(of: path)
        let hadLockFile = access(path + ".lock", F_OK) == 0
        let error = #expect(throws: StoreError.self, sourceLocation: sourceLocation) { _ = try openStore(path) }
        #expect(error?.kind == kind, sourceLocation: sourceLocation)
        #expect(error?.description.contains(path) == true, sourceLocation: sourceLocation)
        // A Bool, so a failure does not print every byte of the file.
        let unchanged = contents(of: path) == before
        #expect(unchanged, "the refused file was changed", sourceLocation: sourceLocation)
        if kind == .notADatabase {
            #expect((access(path + ".lock", F_OK) == 0) == hadLockFile, sourceLocation: sourceLocation)
        }
    }

    @Test func aNewFileGetsTheSchemaVersionAndApplicationId() throws {
        let path = directory.file("profiles.sqlite3")
        _ = try openStore(path)
        #expect(Schema.version == 2)
        #expect(try integer("PRAGMA user_version", on: path) == 2)
        #expect(try integer("SELECT merged_seq FROM log_state", on: path) == 0)
        #expect(try integer("PRAGMA application_id", on: path) == 0x5052_4F46)
        #expect(try integer("SELECT count(*) FROM sqlite_schema WHERE name = 'recent'", on: path) == 1)
        #expect(try integer("SELECT count(*) FROM sqlite_schema WHERE name = 'profiles_by_seq'", on: path) == 0)
    }

    /// A file of the first layout (a sequence index, no `recent`, no log state) is brought up to
    /// date at open: `recent` holds its profiles in the order they were written.
    @Test func aStoreOfTheFirstLayoutIsMigrated() throws {
        let path = directory.file("profiles.sqlite3")
        var handle: OpaquePointer?
        #expect(sqlite3_open(path, &handle) == SQLITE_OK)
        #expect(sqlite3_exec(handle, Schema.migrations[0] + """
            PRAGMA application_id = \(Schema.applicationId);
            PRAGMA user_version = 1;
            INSERT INTO profiles VALUES ('b', 'B', '', 7), ('a', 'A', '', 9), ('c', 'C', '', 8);
            """, nil, nil, nil) == SQLITE_OK)
        sqlite3_close(handle)
        do {
            let store = try openStore(path)
            #expect(try store.makeReader().recent(3) == ["a", "c", "b"])
            let writes = try store.openWritePath()
            try writes.commit(TestUnit(.put("d", "D", "")))
            #expect(try store.makeReader().recent(2) == ["d", "a"])
            try writes.close()
        }
        #expect(try integer("PRAGMA user_version", on: path) == 2)
    }

    /// The system's SQLite may be built with secure_delete on, which made emptying a table
    /// rewrite every freed page as zeros on the thread doing it.
    @Test func connectionsLeaveFreedPagesAlone() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        // 2 is FAST: deleted rows are zeroed only on pages written anyway.
        #expect(try Connection(file: store.file).integer("PRAGMA secure_delete") == 2)
    }

    @Test func missingParentDirectoriesAreCreated() throws {
        let path = directory.file("a/b/profiles.sqlite3")
        let store = try openStore(path)
        try store.makeWriter().upsert(Profile("1", "", ""))
        var status = stat()
        #expect(stat(directory.file("a/b"), &status) == 0 && (status.st_mode & S_IFMT) == S_IFDIR)
        #expect(contents(of: path).count > 0)
    }

    /// Only the lock's holder builds a new file, so a store opened at the name removes one a
    /// killed import left, and keeps the store beside it.
    @Test func openingAStoreRemovesAnUnfinishedBuildOfIt() throws {
        let path = directory.file("profiles.sqlite3")
        try openStore(path).makeWriter().upsert(Profile("kept", "n", ""))
        let building = path + ".building"
        close(open(building, O_WRONLY | O_CREAT, 0o644))
        let store = try openStore(path)
        #expect(access(building, F_OK) != 0)
        #expect(try store.makeReader().get("kept") == Profile("kept", "n", ""))
    }

    @Test func anEmptyFileBecomesANewStore() throws {
        let path = directory.file("profiles.sqlite3")
        write([], to: path)
        let store = try openStore(path)
        try store.makeWriter().upsert(Profile("1", "", ""))
        #expect(try store.makeReader().count() == 1)
    }

    @Test func aFileFromANewerSchemaIsRefused() throws {
        let path = directory.file("profiles.sqlite3")
        try openStore(path).makeWriter().upsert(Profile("1", "", ""))
        try execute("PRAGMA user_version = 3", on: path)
        expectRefused(path, .newerSchema)
    }

    @Test func aFileThatIsNotSQLiteIsRefused() throws {
        let path = directory.file("profiles.sqlite3")
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        let noise = (0..<8192).map { _ in
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return UInt8(truncatingIfNeeded: state >> 56)
        }
        write(noise, to: path)
        expectRefused(path, .notADatabase)
    }

    @Test func aTextFileIsRefused() throws {
        let path = directory.file("profiles.sqlite3")
        write(Array("user_id,name,portrait_uri\n42,Fran,p.png\n".utf8), to: path)
        expectRefused(path, .notADatabase)
    }

    @Test func anSQLiteFileOfAnotherApplicationIsRefused() throws {
        let path = directory.file("other.sqlite3")
        try execute("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('hello')", on: path)
        expectRefused(path, .notADatabase)
    }

    @Test func anSQLiteFileWithAnotherApplicationIdIsRefused() throws {
        let path = directory.file("other.sqlite3")
        try execute("PRAGMA application_id = 1234; PRAGMA journal_mode = WAL", on: path)
        expectRefused(path, .notADatabase)
    }

    @Test func aTruncatedFileIsRefused() throws {
        let path = directory.file("profiles.sqlite3")
        do {
            let writer = try openStore(path).makeWriter()
            let name = String(repeating: "n", count: 200)
            try writer.upsert((0..<2000).map { Profile("user\($0)", name, "") })
        }
        let whole = contents(of: path)
        #expect(whole.count > 100_000)
        write(Array(whole.prefix(whole.count / 2)), to: path)
        expectRefused(path, .corrupt)
    }

    @Test func aMigrationFromVersionZeroCreatesTheSchema() throws {
        let path = directory.file("profiles.sqlite3")
        let file = try StoreFile(path: path, synchronous: .normal, busyTimeoutMilliseconds: 1000)
        let connection = try Connection(file: file, create: true)
        try Schema.migrate(connection, from: 0)
        #expect(try connection.integer("PRAGMA user_version") == Int64(Schema.version))
        #expect(try connection.integer("PRAGMA application_id") == Int64(Schema.applicationId))
        #expect(try connection.integer("SELECT count(*) FROM profiles") == 0)
    }

    @Test func migrationsRunInOrderFromTheFilesVersion() throws {
        let path = directory.file("profiles.sqlite3")
        let file = try StoreFile(path: path, synchronous: .normal, busyTimeoutMilliseconds: 1000)
        let connection = try Connection(file: file, create: true)
        let steps = ["CREATE TABLE t (x)", "INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (2)"]
        try Schema.migrate(connection, from: 0, steps: Array(steps.prefix(2)))
        try Schema.migrate(connection, from: 2, steps: steps)
        #expect(try connection.integer("PRAGMA user_version") == 3)
        #expect(try connection.integer("SELECT sum(x) FROM t") == 3)
    }

    @Test func aFailedMigrationLeavesTheFileAtItsVersion() throws {
        let path = directory.file("profiles.sqlite3")
        let file = try StoreFile(path: path, synchronous: .normal, busyTimeoutMilliseconds: 1000)
        let connection = try Connection(file: file, create: true)
        try Schema.migrate(connection, from: 0, steps: ["CREATE TABLE t (x)"])
        #expect(throws: StoreError.self) {
            try Schema.migrate(connection, from: 1, steps: ["CREATE TABLE t (x)", "CREATE TABLE u (y)", "not sql"])
        }
        #expect(try connection.integer("PRAGMA user_version") == 1)
        #expect(try connection.integer("SELECT count(*) FROM sqlite_schema WHERE name = 'u'") == 0)
        #expect(!connection.isInTransaction)
    }
}

@Suite struct LockTests {
    let directory = TemporaryDirectory()

    @Test func aSecondOpenIsRefusedUntilTheFirstIsGone() throws {
        let path = directory.file("profiles.sqlite3")
        var first: SQLiteProfileStore? = try openStore(path)
        var reader: (any ProfileReader)? = try first?.makeReader()

        let error = #expect(throws: StoreError.self) { _ = try openStore(path) }
        #expect(error?.kind == .locked)
        #expect(error?.description == "\(path) is in use by another process (is profiled running?)")

        first = nil
        #expect(throws: StoreError.self, "a reader keeps the lock") { _ = try openStore(path) }
        #expect(try reader?.count() == 0)
        reader = nil

        let second = try openStore(path)
        #expect(try second.makeReader().count() == 0)
    }

    /// A clean close removes the lock file while still holding the lock. A store that opened
    /// the old file meanwhile wins a lock on a file that is gone, sees so, and locks a new one:
    /// a third open is then refused, as for any held store.
    @Test func aLockFileRemovedAtACleanCloseIsNoLockForAnOpenWaitingOnIt() throws {
        let path = directory.file("profiles.sqlite3")
        nonisolated(unsafe) var first: SQLiteProfileStore? = try openStore(path)
        nonisolated(unsafe) var second: SQLiteProfileStore? = nil
        onThreads(2) { role in
            if role == 0 {
                // Retries the busy lock for a quarter of a second.
                second = try? openStore(path)
            } else {
                // A tenth of a second into those retries, the first closes cleanly.
                usleep(100_000)
                first?.removeLockFile()
                first = nil
            }
        }
        #expect(second != nil, "the waiting open did not get the store")
        #expect(access(path + ".lock", F_OK) == 0)
        let error = #expect(throws: StoreError.self) { _ = try openStore(path) }
        #expect(error?.kind == .locked)
        withExtendedLifetime(second) {}
    }

    @Test func theLockFollowsTheFileNotTheSpelling() throws {
        let store = try openStore(directory.file("profiles.sqlite3"))
        let error = #expect(throws: StoreError.self) { _ = try openStore(directory.path + "/./profiles.sqlite3") }
        #expect(error?.kind == .locked)
        withExtendedLifetime(store) {}
    }
}
