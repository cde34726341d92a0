import CSQLite
import Glibc
import ProfileStore

/// The write log as earlier versions kept it: an SQLite file beside the database,
/// `<path>-writes`, with the tables `writes_0` and `writes_1` of (user_id, name, portrait_uri,
/// seq), a NULL name recording a removal. Opening a store merges what such a file holds into
/// the table and removes it; the store then logs to `WriteLogFile` segments.
enum LegacyWriteLog {
    static func path(of path: String) -> String { path + "-writes" }

    /// Every file of the old log beside the database at `path`.
    static func paths(of path: String) -> [String] {
        let log = self.path(of: path)
        return [log, log + "-wal", log + "-shm"]
    }

    /// Merges the old log's newest row of each id into the table, then removes its files.
    ///
    /// - Throws: `.notADatabase` when the file there is not an old write log of this store.
    static func mergeIfPresent(_ file: StoreFile) throws(StoreError) {
        let logPath = path(of: file.path)
        guard access(logPath, F_OK) == 0 else { return }
        do {
            let connection = try Connection(file: file)
            let attach = try Statement(connection, "ATTACH DATABASE ?1 AS log")
            let bound = sqlite3_bind_text(attach.handle, 1, logPath, -1, profiled_sqlite_transient())
            guard bound == SQLITE_OK else { throw connection.error(bound, sql: attach.sql) }
            _ = try attach.step()
            attach.reset()
            let application = Int32(truncatingIfNeeded: try connection.integer("PRAGMA log.application_id"))
            let tables = try connection.integer(
                "SELECT count(*) FROM log.sqlite_schema WHERE type = 'table' AND name IN ('writes_0', 'writes_1')")
            let objects = try connection.integer("SELECT count(*) FROM log.sqlite_schema")
            guard (application == Schema.applicationId && tables == 2) || (application == 0 && objects == 0) else {
                throw StoreError(kind: .notADatabase, resultCode: SQLITE_NOTADB,
                                 message: "\(logPath) is not this store's write log", path: file.path)
            }
            if tables == 2 {
                let newest = """
                    SELECT user_id, name, portrait_uri, max(seq) AS seq FROM (
                        SELECT user_id, name, portrait_uri, seq FROM log.writes_0
                        UNION ALL SELECT user_id, name, portrait_uri, seq FROM log.writes_1
                    ) GROUP BY user_id ORDER BY user_id
                    """
                try connection.execute("BEGIN IMMEDIATE")
                do {
                    try connection.execute("""
                        INSERT INTO main.profiles (user_id, name, portrait_uri, seq)
                        SELECT user_id, name, portrait_uri, seq FROM (\(newest)) WHERE name IS NOT NULL
                        ON CONFLICT (user_id) DO UPDATE
                        SET name = excluded.name, portrait_uri = excluded.portrait_uri, seq = excluded.seq;
                        DELETE FROM main.profiles WHERE user_id IN (SELECT user_id FROM (\(newest)) WHERE name IS NULL);
                        \(RecencyTable.rebuildSQL)
                        COMMIT;
                        """)
                } catch {
                    if connection.isInTransaction { try? connection.execute("ROLLBACK") }
                    throw error
                }
            }
            try connection.execute("DETACH DATABASE log")
        }
        for old in paths(of: file.path) { unlink(old) }
    }
}
