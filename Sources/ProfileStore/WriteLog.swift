import CSQLite

/// The write log: a second SQLite file beside the database (`<path>-writes`) where the
/// server commits its writes first, as rows appended in write-sequence order.
///
/// Why: an upsert of a random id into a large table dirties a random leaf of the table and
/// one of `profiles_by_seq`, and each group commit writes every page it dirtied to the WAL
/// again; appending to the log dirties one or two pages per commit however many rows it
/// holds. A folder (`WriteLogFolder`) later merges a whole generation of the log into the
/// table sorted by id, range by range, where many writes share each page. A separate file,
/// so that the merge's transactions on the database never hold up a commit to the log.
///
/// The log has two tables, `writes_0` and `writes_1`: the writer appends to one generation
/// while the folder merges the other, and the merged one is emptied before the writer
/// switches back to it. A row with a NULL name records a removal.
enum WriteLogFile {
    static let applicationId = Schema.applicationId
    static let tables = ["writes_0", "writes_1"]

    /// Creates the log file's tables when missing; refuses a file that is not a write log.
    static func prepare(_ file: StoreFile) throws(StoreError) {
        let connection = try Connection(file: file, path: file.logPath, create: true)
        let application = Int32(truncatingIfNeeded: try connection.integer("PRAGMA application_id"))
        let objects = try connection.integer("SELECT count(*) FROM sqlite_schema")
        guard application == applicationId || (application == 0 && objects == 0) else {
            throw StoreError(kind: .notADatabase, resultCode: SQLITE_NOTADB,
                             message: "\(file.logPath) is not this store's write log", path: file.path)
        }
        try connection.useWriteAheadLogging(for: "the write log")
        guard objects == 0 else { return }
        try connection.execute("BEGIN IMMEDIATE")
        do {
            for table in tables {
                // seq is a plain column, not the rowid: an explicit rowid costs each append a
                // search of the table for a conflict (about 1,100 instructions), where an
                // implicit one is appended at the end with no search. Rows are still in seq
                // order, since the writer appends in that order; nothing looks a seq up.
                try connection.execute("""
                    CREATE TABLE IF NOT EXISTS \(table) (
                        user_id TEXT NOT NULL,
                        name TEXT,
                        portrait_uri TEXT,
                        seq INTEGER NOT NULL
                    )
                    """)
            }
            try connection.execute("PRAGMA application_id = \(applicationId)")
            try connection.execute("COMMIT")
        } catch {
            if connection.isInTransaction { try? connection.execute("ROLLBACK") }
            throw error
        }
    }

}

/// Appends writes to the log. Every row gets the next write sequence, counted on from the
/// newest one in the database and the log when the log was opened.
///
/// Threading: one thread at a time (the server's writer thread).
public protocol WriteLogWriter: AnyObject {
    /// The write sequence of the newest row appended (or found when opening).
    var lastSequence: Int64 { get }
    /// BEGIN IMMEDIATE on the log; body; COMMIT. On any error: ROLLBACK and rethrow.
    func transaction<R>(_ body: () throws -> R) throws -> R
    /// Appends an upsert to generation `generation`'s table; inside `transaction`.
    func append(generation: Int, userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer,
                portraitUri: UnsafeRawBufferPointer) throws
    /// Appends a removal to generation `generation`'s table; inside `transaction`.
    func appendRemoval(generation: Int, userId: UnsafeRawBufferPointer) throws
    /// Empties a generation the folder has merged into the database, in a transaction of its own.
    func truncate(generation: Int) throws
}

/// Merges the log into the database's table.
///
/// A generation is merged in two steps, so that the server can give its cache pins back as
/// the merge goes rather than all at its end: `prepareFold` sorts the newest row of each id
/// once, and `foldNextRange` merges the next range of those ids in a transaction of its own.
///
/// Threading: one thread at a time (the server's folder thread and the merge threads it
/// starts and joins, or whoever opens the store).
public protocol WriteLogFolder: AnyObject {
    /// Sorts the newest row of each id in generation `generation` by id, aside from the log
    /// and the table, and returns how many ranges of them `foldNextRange` has left to merge.
    /// A generation already prepared and partly merged is resumed, not sorted again.
    ///
    /// `abandon` is asked every few thousand SQLite steps, on the calling thread; once it
    /// answers true the call rolls back and throws `.interrupted`, having changed nothing.
    func prepareFold(generation: Int, abandonIf abandon: @escaping () -> Bool) throws -> Int
    /// Merges the next range of the prepared generation into the table, in one transaction,
    /// leaving the log as it is (the writer empties the generation once every range is
    /// merged), and returns it with its ids. `abandon` as for `prepareFold`: an abandoned
    /// range is merged by the next call.
    func foldNextRange(abandonIf abandon: @escaping () -> Bool) throws -> FoldedRange
    /// Merges both generations into the table and empties the log, and shrinks its file:
    /// recovery at open, and the last step at shutdown. Only while nobody appends to the log.
    func foldAll() throws
    /// Rows in the log, both generations.
    func logRows() throws -> Int
    /// Removes every profile from the table and every row from the log, in one transaction,
    /// and forgets a prepared generation.
    func deleteEverything() throws
}

/// What one `foldNextRange` merged: rows of the prepared generation, by their place in id
/// order, and their ids, read in the range's transaction so that whoever unpins them after
/// the commit has nothing left that can fail.
///
/// A value; any thread may use it.
public struct FoldedRange: Sendable {
    public let rows: ClosedRange<Int64>
    /// Every id, back to back, and where each one ends.
    private var idBytes: [UInt8] = []
    private var idEnds: [Int] = []

    init(rows: ClosedRange<Int64>) {
        self.rows = rows
        idEnds.reserveCapacity(rows.count)
    }

    mutating func append(userId: UnsafeRawBufferPointer) {
        idBytes.append(contentsOf: userId)
        idEnds.append(idBytes.count)
    }

    /// Calls `body` with the id of each profile merged (written or removed), in id order;
    /// each view is valid during its call only.
    public func forEachUserId(_ body: (UnsafeRawBufferPointer) -> Void) {
        idBytes.withUnsafeBytes { bytes in
            var start = 0
            for end in idEnds {
                body(UnsafeRawBufferPointer(rebasing: bytes[start..<end]))
                start = end
            }
        }
    }
}

/// Copies the write log's own write-ahead log back into the log file, over a connection of
/// its own, so that the writer's commits do not have to.
///
/// Threading: one thread at a time (the server's checkpointer thread).
public protocol WriteLogCheckpointer: AnyObject {
    /// Copies what it can without waiting for the writer or for a fold reading the log.
    func checkpointWithoutWaiting() throws
}

final class SQLiteWriteLogCheckpointer: WriteLogCheckpointer {
    private let connection: Connection
    private let checkpointStatement: Statement

    init(file: StoreFile) throws(StoreError) {
        connection = try Connection(file: file, path: file.logPath)
        // The connection that checkpoints decides the syncs around the copy.
        try connection.applySynchronousMode()
        checkpointStatement = try Statement(connection, "PRAGMA wal_checkpoint(PASSIVE)")
    }

    func checkpointWithoutWaiting() throws(StoreError) {
        defer { checkpointStatement.reset() }
        _ = try checkpointStatement.step()
    }
}

final class SQLiteWriteLogWriter: WriteLogWriter {
    private let connection: Connection
    private let beginStatement: Statement
    private let commitStatement: Statement
    private let rollbackStatement: Statement
    /// Per generation: one row, and `PendingUpserts.batchRows` rows.
    private let appendStatements: [Statement]
    private let batchAppendStatements: [Statement]
    private let removalStatements: [Statement]
    /// Appends copied aside until a batch statement is full or the transaction ends.
    private let pending = PendingUpserts()
    private var pendingGeneration = 0
    private let truncateStatements: [Statement]
    private(set) var lastSequence: Int64
    private var isInTransaction = false

    init(file: StoreFile) throws(StoreError) {
        let connection = try Connection(file: file, path: file.logPath)
        self.connection = connection
        // Appends touch only the last pages of a table: a small page cache is enough.
        // The log's checkpoints belong to the server's checkpointer thread
        // (`WriteLogCheckpointer`): this connection's own automatic one, every 1,000 pages by
        // default, ran inside a commit about every 0.15 s of a SET storm, and every write
        // waiting behind that commit waited for its two syncs too. It stays, rarely, as a
        // bound on the log's WAL should the background one fall behind.
        try connection.execute("""
            PRAGMA cache_size = -512;
            PRAGMA journal_size_limit = \(16 << 20);
            PRAGMA wal_autocheckpoint = \(Self.automaticCheckpointPages);
            """)
        try connection.applySynchronousMode()
        beginStatement = try Statement(connection, "BEGIN IMMEDIATE")
        commitStatement = try Statement(connection, "COMMIT")
        rollbackStatement = try Statement(connection, "ROLLBACK")
        appendStatements = try WriteLogFile.tables.map { table throws(StoreError) in
            try Statement(connection, Self.appendSQL(table, rows: 1))
        }
        batchAppendStatements = try WriteLogFile.tables.map { table throws(StoreError) in
            try Statement(connection, Self.appendSQL(table, rows: PendingUpserts.batchRows))
        }
        removalStatements = try WriteLogFile.tables.map { table throws(StoreError) in
            try Statement(connection, "INSERT INTO \(table) (seq, user_id, name, portrait_uri) VALUES (?1, ?2, NULL, NULL)")
        }
        truncateStatements = try WriteLogFile.tables.map { table throws(StoreError) in
            try Statement(connection, "DELETE FROM \(table)")
        }
        // The database's newest sequence too: after a fold the log may be empty.
        let database = try Connection(file: file)
        var newest = try database.integer("SELECT ifnull(max(seq), 0) FROM profiles")
        for table in WriteLogFile.tables {
            newest = max(newest, try connection.integer("SELECT ifnull(max(seq), 0) FROM \(table)"))
        }
        lastSequence = newest
    }

    /// Pages of WAL past which a commit checkpoints the log itself: 64 MiB.
    static let automaticCheckpointPages = 16_384

    /// Rows bound as (user_id, name, portrait_uri, seq) groups, the order `PendingUpserts` binds.
    private static func appendSQL(_ table: String, rows: Int) -> String {
        let values = (0..<rows).map { row in
            let first = row * 4 + 1
            return "(?\(first), ?\(first + 1), ?\(first + 2), ?\(first + 3))"
        }
        return "INSERT INTO \(table) (user_id, name, portrait_uri, seq) VALUES \(values.joined(separator: ", "))"
    }

    func transaction<R>(_ body: () throws -> R) throws -> R {
        let firstSequence = lastSequence
        try beginStatement.run()
        isInTransaction = true
        defer {
            isInTransaction = false
            pending.removeAll()
        }
        do {
            let result = try body()
            try writePending()
            try commitStatement.checkFault()
            try commitStatement.run()
            return result
        } catch {
            // Sequences of rolled-back rows are handed out again.
            lastSequence = firstSequence
            rollbackStatement.rollBackIfOpen()
            throw error
        }
    }

    func append(generation: Int, userId: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer,
                portraitUri: UnsafeRawBufferPointer) throws {
        precondition(isInTransaction, "append belongs inside transaction")
        if generation != pendingGeneration { try writePending() }
        pendingGeneration = generation
        lastSequence += 1
        pending.append(userId: userId, name: name, portraitUri: portraitUri, sequence: lastSequence)
        if pending.count == PendingUpserts.batchRows { try writePending() }
    }

    /// Writes the pending appends (see `PendingUpserts.write`).
    private func writePending() throws(StoreError) {
        let pending = self.pending
        try pending.write(single: appendStatements[pendingGeneration],
                          batch: batchAppendStatements[pendingGeneration]) { statement, rows throws(StoreError) in
            try statement.checkFault()
            try pending.bind(rows, to: statement)
            _ = try statement.step()
        }
    }

    func appendRemoval(generation: Int, userId: UnsafeRawBufferPointer) throws {
        precondition(isInTransaction, "appendRemoval belongs inside transaction")
        try writePending()
        let statement = removalStatements[generation]
        defer { statement.reset() }
        try statement.checkFault()
        try statement.bind(1, lastSequence + 1)
        try statement.bind(2, userId)
        _ = try statement.step()
        lastSequence += 1
    }

    func truncate(generation: Int) throws {
        try transaction {
            let statement = truncateStatements[generation]
            defer { statement.reset() }
            try statement.checkFault()
            _ = try statement.step()
        }
    }
}

final class SQLiteWriteLogFolder: WriteLogFolder {
    private let connection: Connection
    /// Per generation: fills `temp.fold_rows` with its newest row of each id, in id order.
    private let sortStatements: [Statement]
    private let clearSortedStatement: Statement
    private let sortedRowsStatement: Statement
    /// Upserts, then removals, of the sorted rows ?1 through ?2.
    private let rangeStatements: [Statement]
    private let rangeIdsStatement: Statement
    private let foldAllStatements: [Statement]
    private let deleteEverythingStatements: [Statement]
    private let beginStatement: Statement
    private let commitStatement: Statement
    private let rollbackStatement: Statement
    private let countStatement: Statement
    private let newestSequenceStatement: Statement
    private let tableRowsStatement: Statement
    /// The generation in `temp.fold_rows`, the next of its rows to merge, its last row, and
    /// whether its merge drops profiles_by_seq with its first range and builds it again with
    /// its last.
    private var prepared: (generation: Int, next: Int64, last: Int64, rebuildsIndex: Bool)?

    /// Sorted rows merged per transaction (see `ProfileStore.defaultRowsPerFoldRange`).
    private let rowsPerRange: Int64

    /// - Parameters:
    ///   - cacheKibibytes: the page cache of its connection to the database. The sorter behind
    ///     each fold spills to temporary files beyond it, so memory stays flat however long
    ///     the log grew.
    ///   - rowsPerRange: ids merged per transaction.
    init(file: StoreFile, cacheKibibytes: Int, rowsPerRange: Int) throws(StoreError) {
        precondition(rowsPerRange > 0, "a fold range holds at least one row")
        self.rowsPerRange = Int64(rowsPerRange)
        let connection = try Connection(file: file)
        self.connection = connection
        // It writes the table in large transactions, as the offline writer does.
        try SQLiteProfileWriter.configureForLargeTransactions(connection, cacheKibibytes: cacheKibibytes)
        let attach = try Statement(connection, "ATTACH DATABASE ?1 AS log")
        let bound = sqlite3_bind_text(attach.handle, 1, file.logPath, -1, profiled_sqlite_transient())
        guard bound == SQLITE_OK else { throw connection.error(bound, sql: attach.sql) }
        _ = try attach.step()
        attach.reset()
        // The log is read once per fold, front to back.
        try connection.execute("PRAGMA log.cache_size = -512")
        // A generation's newest rows sorted by id, numbered in that order by their rowids,
        // which then cut it into ranges. Whole rows: sorting only ids and the log rows'
        // numbers, and fetching each range's rows from the log by number, made the sort about
        // a third shorter but each range about half as long again, and the merge slower. In
        // the connection's temporary database: a file (temp_store = FILE) that nobody else
        // sees and that no crash needs, since the log still has it all.
        try connection.execute("""
            PRAGMA temp.cache_size = -512;
            CREATE TEMP TABLE fold_rows (user_id TEXT NOT NULL, name TEXT, portrait_uri TEXT, seq INTEGER NOT NULL);
            """)
        // Deferred: BEGIN IMMEDIATE would take the write lock of the attached log as well and
        // hold up the writer's commits for the whole fold. The table's lock comes with the
        // first write; only this connection writes the table, so it cannot be lost meanwhile.
        beginStatement = try Statement(connection, "BEGIN")
        commitStatement = try Statement(connection, "COMMIT")
        rollbackStatement = try Statement(connection, "ROLLBACK")
        // With exactly one max() in a query, SQLite takes its other columns from the row that
        // has the max: the newest row of each id. One sort, which spills to temporary files
        // beyond the page cache: a generation of any size merges in flat memory (a
        // `seq IN (SELECT max(seq) ...)` form kept every id's sequence in an in-memory index
        // and took half as long again). Into an empty table, in order: rowids 1, 2, 3...
        sortStatements = try WriteLogFile.tables.map { table throws(StoreError) in
            try Statement(connection, """
                INSERT INTO temp.fold_rows (user_id, name, portrait_uri, seq)
                SELECT user_id, name, portrait_uri, max(seq) FROM log.\(table) GROUP BY user_id ORDER BY user_id
                """)
        }
        clearSortedStatement = try Statement(connection, "DELETE FROM temp.fold_rows")
        sortedRowsStatement = try Statement(connection, "SELECT ifnull(max(rowid), 0) FROM temp.fold_rows")
        rangeStatements = try Self.merge(from: "SELECT * FROM temp.fold_rows WHERE rowid BETWEEN ?1 AND ?2", connection)
        rangeIdsStatement = try Statement(connection, "SELECT user_id FROM temp.fold_rows WHERE rowid BETWEEN ?1 AND ?2")
        let both = WriteLogFile.tables.map { "SELECT user_id, name, portrait_uri, seq FROM log.\($0)" }
            .joined(separator: " UNION ALL ")
        foldAllStatements = try Self.merge(from: """
                SELECT user_id, name, portrait_uri, max(seq) AS seq FROM (\(both)) GROUP BY user_id ORDER BY user_id
                """, connection)
            + WriteLogFile.tables.map { table throws(StoreError) in try Statement(connection, "DELETE FROM log.\(table)") }
        deleteEverythingStatements = try (["main.profiles"] + WriteLogFile.tables.map { "log.\($0)" }).map {
            table throws(StoreError) in try Statement(connection, "DELETE FROM \(table)")
        }
        countStatement = try Statement(connection,
            "SELECT " + WriteLogFile.tables.map { "(SELECT count(*) FROM log.\($0))" }.joined(separator: " + "))
        newestSequenceStatement = try Statement(connection, "SELECT ifnull(max(seq), 0) FROM main.profiles")
        tableRowsStatement = try Statement(connection, "SELECT count(*) FROM main.profiles")
    }

    /// The two statements that apply `newest` (a query of the log's columns with one row per
    /// id, in id order): its upserts, in that order so that neighbouring rows share pages,
    /// then its removals (a NULL name).
    private static func merge(from newest: String, _ connection: Connection) throws(StoreError) -> [Statement] {
        [
            try Statement(connection, """
                INSERT INTO main.profiles (user_id, name, portrait_uri, seq)
                SELECT user_id, name, portrait_uri, seq FROM (\(newest)) WHERE name IS NOT NULL
                ON CONFLICT (user_id) DO UPDATE
                SET name = excluded.name, portrait_uri = excluded.portrait_uri, seq = excluded.seq
                """),
            try Statement(connection, """
                DELETE FROM main.profiles WHERE user_id IN (SELECT user_id FROM (\(newest)) WHERE name IS NULL)
                """),
        ]
    }

    /// What a fold step asks while it runs (see `WriteLogFolder.prepareFold`).
    private var abandon: (() -> Bool)?

    func prepareFold(generation: Int, abandonIf abandon: @escaping () -> Bool) throws(StoreError) -> Int {
        if let prepared, prepared.generation == generation {
            return ranges(from: prepared.next, through: prepared.last)
        }
        prepared = nil
        self.abandon = abandon
        defer { self.abandon = nil }
        try run([clearSortedStatement, sortStatements[generation]], abandonable: true)
        let last = try sortedRowsStatement.firstInteger()
        // Nothing is kept prepared once every range is merged: the writer empties the
        // generation, and its next rows must be sorted afresh.
        if last > 0 {
            // Keeping profiles_by_seq up to date is a delete at a random place in it per
            // rewritten id, half of a large merge's time: 440,000 ids into 1,000,000 profiles
            // took 8.9 s, and 5.6 s with the index dropped and built again (0.8 s of it).
            let rebuilds = try SQLiteProfileWriter.rebuildingSequenceIndexPays(
                forRows: Int(last), newestSequence: try newestSequenceStatement.firstInteger()) {
                    () throws(StoreError) in try tableRowsStatement.firstInteger()
                }
            prepared = (generation, 1, last, rebuilds)
        }
        return ranges(from: 1, through: last)
    }

    /// How many ranges the sorted rows `first` through `last` make.
    private func ranges(from first: Int64, through last: Int64) -> Int {
        Int((max(last - first + 1, 0) + rowsPerRange - 1) / rowsPerRange)
    }

    func foldNextRange(abandonIf abandon: @escaping () -> Bool) throws(StoreError) -> FoldedRange {
        guard let prepared, prepared.next <= prepared.last else {
            preconditionFailure("foldNextRange without a range left to merge")
        }
        var range = FoldedRange(rows: prepared.next...min(prepared.next + rowsPerRange - 1, prepared.last))
        self.abandon = abandon
        defer { self.abandon = nil }
        let isLast = range.rows.upperBound == prepared.last
        // Readers never miss the index in between: RECENT, the one read that needs it, waits
        // for the whole merge. A crash in between leaves it to the next open to build.
        try run(rangeStatements, rows: range.rows, abandonable: true, beforeStatements: { () throws(StoreError) in
            if prepared.rebuildsIndex && range.rows.lowerBound == 1 { try connection.execute(Schema.dropSequenceIndex) }
        }, beforeCommit: { () throws(StoreError) in
            let statement = rangeIdsStatement
            defer { statement.reset() }
            try statement.bind(1, range.rows.lowerBound)
            try statement.bind(2, range.rows.upperBound)
            while try statement.step() { range.append(userId: statement.text(0)) }
            if prepared.rebuildsIndex && isLast { try connection.execute(Schema.sequenceIndex) }
        })
        self.prepared = isLast ? nil : (prepared.generation, range.rows.upperBound + 1, prepared.last, prepared.rebuildsIndex)
        return range
    }

    /// SQLite virtual-machine steps between two questions to `abandon`: an atomic load each
    /// time, so asking often costs nothing measurable, and an abandon takes effect promptly.
    static let stepsBetweenAbandonChecks: Int32 = 4096

    fileprivate var shouldAbandon: Bool { abandon?() ?? false }

    func foldAll() throws(StoreError) {
        // Whatever was prepared is merged too.
        prepared = nil
        // profiles_by_seq, should a merge have dropped it, comes back here at the latest.
        try run(foldAllStatements) { () throws(StoreError) in try connection.execute(Schema.sequenceIndex) }
        // The emptied log keeps the pages a burst of writes grew it to; give them back to the
        // file system now that nothing needs them (cheap: there are no rows to copy). Only
        // housekeeping, so a failure here changes nothing that matters.
        try? connection.execute("VACUUM log")
    }

    func deleteEverything() throws(StoreError) {
        prepared = nil
        // A merge that dropped profiles_by_seq will not build it again now: build it here, at
        // no cost in an empty table.
        try run(deleteEverythingStatements + [clearSortedStatement]) { () throws(StoreError) in
            try connection.execute(Schema.sequenceIndex)
        }
    }

    func logRows() throws(StoreError) -> Int {
        Int(try countStatement.firstInteger())
    }

    /// Runs `beforeStatements`, then `statements` with `rows` bound as ?1 and ?2 when given,
    /// then `beforeCommit`, in one transaction; when `abandonable`, `abandon` is asked between
    /// their steps (never during COMMIT or ROLLBACK, which must run to the end).
    private func run(_ statements: [Statement], rows: ClosedRange<Int64>? = nil, abandonable: Bool = false,
                     beforeStatements: () throws(StoreError) -> Void = {},
                     beforeCommit: () throws(StoreError) -> Void = {}) throws(StoreError) {
        // Asked once up front too: a short step may finish within fewer SQLite steps than
        // the progress handler waits between two questions.
        if abandonable && shouldAbandon {
            throw StoreError(kind: .interrupted, resultCode: SQLITE_INTERRUPT, message: "interrupted",
                             path: connection.file.path)
        }
        try beginStatement.run()
        do {
            if abandonable {
                sqlite3_progress_handler(connection.handle, Self.stepsBetweenAbandonChecks, foldProgress,
                                         Unmanaged.passUnretained(self).toOpaque())
            }
            defer { if abandonable { sqlite3_progress_handler(connection.handle, 0, nil, nil) } }
            try beforeStatements()
            for statement in statements {
                try statement.checkFault()
                if let rows {
                    try statement.bind(1, rows.lowerBound)
                    try statement.bind(2, rows.upperBound)
                }
                try statement.run()
            }
            try beforeCommit()
        } catch {
            rollbackStatement.rollBackIfOpen()
            throw error
        }
        do {
            try commitStatement.checkFault()
            try commitStatement.run()
        } catch {
            rollbackStatement.rollBackIfOpen()
            throw error
        }
    }
}

/// SQLite's progress handler during a fold: non-zero interrupts the running statement.
private func foldProgress(_ context: UnsafeMutableRawPointer?) -> Int32 {
    Unmanaged<SQLiteWriteLogFolder>.fromOpaque(context!).takeUnretainedValue().shouldAbandon ? 1 : 0
}
