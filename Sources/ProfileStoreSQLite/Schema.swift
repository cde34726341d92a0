import CSQLite
import ProfileStore

/// The database layout, how a file is recognized as ours, and how an older
/// layout is brought up to date.
enum Schema {
    /// 'PROF' in PRAGMA application_id, so a foreign SQLite file is recognized.
    static let applicationId: Int32 = 0x5052_4F46
    /// PRAGMA user_version of a current file.
    static var version: Int32 { Int32(migrations.count) }

    /// `migrations[n]` brings a file from version n to n + 1. Version 0 is an
    /// empty file. Append new steps; never edit a shipped one.
    static let migrations: [String] = [
        // user_id is TEXT with the BINARY collation, so it sorts by bytes.
        // seq is the write sequence.
        """
        CREATE TABLE profiles (
            user_id TEXT PRIMARY KEY NOT NULL,
            name TEXT NOT NULL,
            portrait_uri TEXT NOT NULL,
            seq INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE UNIQUE INDEX profiles_by_seq ON profiles(seq);
        """,
        // merged_seq: the newest write sequence of the write log (`WriteLogFile`) that the table
        // has; reopening replays only what came after it. One row.
        //
        // recent: the write sequences, in order, each with the id it wrote: RECENT walks it
        // backwards and takes a row only while the profile still has that sequence. Appending
        // to it costs a write at its end; an index on profiles(seq) cost a delete at a random
        // place in the index for every rewritten id, half of a merge's time. Entries a later
        // write or a removal made stale stay until `RecencyTable` rebuilds it.
        """
        CREATE TABLE log_state (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            merged_seq INTEGER NOT NULL
        );
        INSERT INTO log_state (id, merged_seq) VALUES (1, 0);
        CREATE TABLE recent (
            seq INTEGER PRIMARY KEY,
            user_id TEXT NOT NULL
        );
        INSERT INTO recent (seq, user_id) SELECT seq, user_id FROM profiles ORDER BY seq;
        DROP INDEX profiles_by_seq;
        """,
    ]

    /// Validates the file, switches it to WAL and migrates it to `version`.
    ///
    /// Nothing is written before the file is known to be ours (or empty): the
    /// checks run with query_only on and without the checkpoint on close, so a
    /// rejected file is left byte for byte as it was.
    ///
    /// - Throws: `.notADatabase`, `.newerSchema`, `.corrupt`, or what SQLite reports.
    static func prepare(_ file: StoreFile) throws(StoreError) {
        let connection = try Connection(file: file, create: true)
        profiled_sqlite_set_checkpoint_on_close(connection.handle, 0)
        try connection.execute("PRAGMA query_only = ON")
        let found = try inspect(connection)
        try connection.execute("PRAGMA query_only = OFF")
        profiled_sqlite_set_checkpoint_on_close(connection.handle, 1)

        try connection.useWriteAheadLogging(for: "the file")
        if found < version {
            try migrate(connection, from: found)
        }
    }

    /// The schema version of a file that is ours, or 0 for an empty one.
    private static func inspect(_ connection: Connection) throws(StoreError) -> Int32 {
        let path = connection.file.path
        let application = Int32(truncatingIfNeeded: try connection.integer("PRAGMA application_id"))
        let found = Int32(truncatingIfNeeded: try connection.integer("PRAGMA user_version"))
        let objects = try connection.integer("SELECT count(*) FROM sqlite_schema")
        if application == 0 && found == 0 && objects == 0 {
            return 0
        }
        guard application == applicationId else {
            throw StoreError(kind: .notADatabase, resultCode: SQLITE_NOTADB,
                             message: "it is an SQLite file of another application (application_id \(application))",
                             path: path)
        }
        guard found <= version else {
            throw StoreError(kind: .newerSchema, resultCode: SQLITE_ERROR,
                             message: "its schema version is \(found), this build knows up to \(version)",
                             path: path)
        }
        // A damaged page would otherwise be found only by the request that reads it: check
        // every page's structure now, while nothing has been written (O(file size)).
        let check = try connection.text("PRAGMA quick_check(1)")
        guard check == "ok" else {
            throw StoreError(kind: .corrupt, resultCode: SQLITE_CORRUPT, message: check, path: path)
        }
        return found
    }

    /// Runs `steps[version...]` and stamps the file, all in one transaction:
    /// a failure leaves the file at `version`.
    static func migrate(_ connection: Connection, from version: Int32, steps: [String] = migrations) throws(StoreError) {
        try connection.execute("BEGIN IMMEDIATE")
        do {
            for step in steps[Int(version)...] {
                try connection.execute(step)
            }
            try connection.execute("PRAGMA application_id = \(applicationId)")
            try connection.execute("PRAGMA user_version = \(steps.count)")
            try connection.execute("COMMIT")
        } catch {
            if connection.isInTransaction {
                try? connection.execute("ROLLBACK")
            }
            throw error
        }
    }
}
